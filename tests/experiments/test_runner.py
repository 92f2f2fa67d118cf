"""The local runner on the tiny world: a grid trains, a rerun skips what is done, a failed run is recorded with
its log's last line and run again, a runner stopped mid-grid continues from the run's checkpoint."""
from __future__ import annotations

import json
import signal
import subprocess
import sys
import time

import pytest
from experiment_world import tiny_world, write_spec  # noqa: F401  (fixture)

from simcse.experiments import load_spec, run_experiment
from simcse.experiments import runs as R

pytestmark = pytest.mark.slow


def test_failed_run_is_recorded_and_rerun(tmp_path, tiny_world):
    path = write_spec(tmp_path, tiny_world, seeds=[1],
                      arms={"a": {}, "bad": {"model_name_or_path": str(tmp_path / "no_such_model")}})
    out = tmp_path / "out"
    res = run_experiment(path, out)
    bad = json.loads((out / "runs/bad/seed1/result.json").read_text())
    assert bad["status"] == "failed" and bad["returncode"] != 0
    assert "no_such_model" in bad["error"]  # the log's last line says what went wrong
    assert res["results"]["a/seed1"]["status"] == "done"
    assert "| bad | 0 of 1 seeds |" in (out / "report.md").read_text()
    first = (out / "runs/a/seed1/result.json").read_text()
    again = run_experiment(path, out)  # a is done (skipped, untouched); bad runs again
    assert list(again["results"]) == ["bad/seed1"]
    assert (out / "runs/a/seed1/result.json").read_text() == first
    assert (out / "runs/bad/seed1/run.log").read_text().count("-m simcse train") == 2


def test_stopped_grid_continues_from_the_checkpoint(tmp_path, tiny_world):
    path = write_spec(tmp_path, tiny_world, seeds=[1, 2], arms={"a": {"max_steps": 40}},
                      evaluation={"tasks": ["STSBenchmark"], "bootstrap": 20})
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "simcse", "experiment", "run", str(path), "--output_dir", str(out)]
    runner = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    run1 = load_spec(path).runs()[0]
    deadline = time.time() + 240
    while time.time() < deadline:
        step = R.current_step(out, run1)
        if step and step[0] >= 2:
            break
        time.sleep(0.2)
    else:
        runner.kill()
        pytest.fail("the first run never reached step 2: " + runner.communicate()[0][-2000:])
    runner.send_signal(signal.SIGTERM)
    output = runner.communicate(timeout=240)[0]
    assert runner.returncode == 75, output[-2000:]
    stopped = json.loads((out / "runs/a/seed1/result.json").read_text())
    assert stopped["status"] == "stopped"
    assert list((out / "runs/a/seed1/model").glob("checkpoint-*"))
    assert not (out / "runs/a/seed2").exists()  # nothing started after the signal
    res = run_experiment(path, out)
    # a failed run names its cause (the log's last line): a run that fails here is not the runner's doing alone
    assert [r["status"] for r in res["results"].values()] == ["done", "done"], {
        k: (r["status"], r.get("error")) for k, r in res["results"].items()}
    log = (out / "runs/a/seed1/run.log").read_text()
    assert "resumed from step" in log and "--resume_from_checkpoint" in log
    assert "| a | 2 of 2 seeds |" in (out / "report.md").read_text()
