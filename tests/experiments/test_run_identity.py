"""What a run is: what trains it. An evaluation setting that changes only the scores rescores the saved model, one
that changes only the report re-reports, neither retrains; a done run whose scores are gone is scored again; the
progress line counts the whole grid, each run once."""
from __future__ import annotations

import io
import json
import shutil

import pytest
from experiment_world import tiny_world, write_spec  # noqa: F401  (fixture)

from simcse.experiments import load_spec, run_experiment
from simcse.experiments import runs as R
from simcse.experiments.executors import Progress
from simcse.experiments.spec import write_json_atomic


def trained(tmp_path, world, **evaluation):
    """A one-run grid whose run is trained already (the tiny model as its saved model), scored once."""
    ev = {"tasks": ["STSBenchmark"], "bootstrap": 20, **evaluation}
    path = write_spec(tmp_path, world, seeds=[1], arms={"a": {}}, evaluation=ev)
    out = tmp_path / "out"
    d = R.prepare(out, load_spec(path).runs()[0])
    shutil.copytree(world / "tiny", d / "model")
    (d / "model" / "simcse_results.json").write_text(json.dumps({"train": {"steps": 3}}))
    assert run_experiment(path, out)["results"]["a/seed1"]["status"] == "done"
    return path, out, d / "run.log"


def respec(path, **evaluation):
    spec = json.loads(path.read_text())
    spec["evaluation"].update(evaluation)
    path.write_text(json.dumps(spec))


@pytest.mark.slow
def test_report_settings_re_report_and_scoring_settings_rescore_never_retrain(tmp_path, tiny_world, capsys):
    path, out, log = trained(tmp_path, tiny_world)
    respec(path, bootstrap=30, bootstrap_seed=7)
    res = run_experiment(path, out)
    assert res["results"] == {} and "1 done before, 0 to run" in capsys.readouterr().out
    assert (res["report"]["spec"]["resamples"], res["report"]["spec"]["bootstrap_seed"]) == (30, 7)
    respec(path, batch_size=16)
    res = run_experiment(path, out)
    assert res["results"]["a/seed1"]["status"] == "done"
    commands = [ln for ln in log.read_text().splitlines() if ln.startswith("[experiment] $ ")]
    assert len(commands) == 2 and all("simcse.experiments.score" in c for c in commands)  # scored twice, no training
    assert "--batch_size 128" in commands[0] and "--batch_size 16" in commands[1]


@pytest.mark.slow
def test_a_done_run_whose_scores_are_gone_is_scored_again(tmp_path, tiny_world, capsys):
    path, out, log = trained(tmp_path, tiny_world)
    (out / "runs/a/seed1/scores.npz").unlink()
    capsys.readouterr()
    res = run_experiment(path, out)
    assert "0 done before, 1 to run" in capsys.readouterr().out
    assert res["results"]["a/seed1"]["status"] == "done"
    assert log.read_text().count("simcse.experiments.score") == 2 and "-m simcse train" not in log.read_text()
    assert "| a | 1 of 1 seeds |" in (out / "report.md").read_text()


def test_progress_counts_the_whole_grid_each_run_once(tmp_path, tiny_world):
    spec = load_spec(write_spec(tmp_path, tiny_world, seeds=[1, 2, 3], arms={"a": {}},
                                evaluation={"tasks": ["STSBenchmark"], "bootstrap": 20}))
    out = tmp_path / "out"
    before, again, waiting = spec.runs()
    for run, status in ((before, "done"), (again, "failed")):
        d = R.prepare(out, run)
        write_json_atomic(d / "result.json", {"status": status, "digest": run.digest, "seconds": 600.0})
        (d / "scores.npz").write_bytes(b"")
    progress = Progress(out, [again, waiting], parallel=1, stream=io.StringIO(), done_before=[before])
    progress.started(again)  # the failed run, being run again
    line = progress.line()
    assert line.startswith("[experiment] 1/3 done, 1 running, 0 failed | a/seed2 starting | ETA 20m00s"), line
    write_json_atomic(R.run_dir(out, again) / "result.json", {"status": "failed", "digest": again.digest})
    progress.finished(again)
    assert progress.line().startswith("[experiment] 1/3 done, 0 running, 1 failed"), progress.line()
