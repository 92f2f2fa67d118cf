"""A tuned experiment end to end on the tiny world: two methods, a 2-point grid each, 2 selection seeds and 2
test seeds. The selection phase runs with the test files absent (so the test split cannot be read), the choice is
the best mean dev score computed here from the runs' own results, the test phase trains the chosen points on the
fresh seeds, and the report has the grids, the choices, the expected-best table and the test comparison."""
from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
from experiment_world import tiny_world  # noqa: F401  (fixture)

from simcse.experiments import SpecError, run_experiment
from simcse.experiments.selection import expected_max

pytestmark = pytest.mark.slow
TEST_FILES = ("STS/STSBenchmark/sts-test.csv", "SICK/SICK_test_annotated.txt")


def test_grids_select_on_dev_and_test_on_fresh_seeds(tmp_path, tiny_world):
    senteval = tmp_path / "senteval"
    shutil.copytree(tiny_world / "senteval", senteval)
    base = {**json.loads((tiny_world / "base.json").read_text()), "senteval_dir": str(senteval),
            "test_after_training": True}  # the selection phase must turn it off
    (tmp_path / "base.json").write_text(json.dumps(base))
    spec = {"base": str(tmp_path / "base.json"),
            "arms": {"a": {"grid": {"learning_rate": [1e-3, 1e-5]}, "_label": "A"},
                     "b": {"grid": {"temp": [0.05, 0.5]}, "learning_rate": 3e-4}},
            "baseline": "a", "selection": {"metric": "stsb_dev", "seeds": [1, 2], "test_seeds": [3, 4]},
            "evaluation": {"tasks": ["STSBenchmark"], "bootstrap": 50}}
    path = tmp_path / "spec.json"
    path.write_text(json.dumps(spec))
    out = tmp_path / "out"
    hidden = tmp_path / "hidden"
    for f in TEST_FILES:  # the test split is not there during the selection phase
        (hidden / f).parent.mkdir(parents=True, exist_ok=True)
        shutil.move(senteval / f, hidden / f)
    first = run_experiment(path, out, phase="selection")
    assert sorted(first["results"]) == sorted(f"selection/{p}/seed{s}" for p in (
        "a@learning_rate=0.001", "a@learning_rate=1e-05", "b@temp=0.05", "b@temp=0.5") for s in (1, 2))
    assert all(r["status"] == "done" for r in first["results"].values()), {
        k: r.get("error") for k, r in first["results"].items()}
    assert not (out / "test").exists()
    run = out / "selection/runs/b@temp=0.5/seed2"
    assert json.loads((run / "config.json").read_text())["test_after_training"] is False
    assert list(np.load(run / "scores.npz").files) == ["STSBenchmark|dev|sims", "STSBenchmark|dev|gold"]
    text = (out / "report.md").read_text()
    assert "## Grids and choices (dev)" in text and "Not run yet" in text
    for f in TEST_FILES:
        shutil.move(hidden / f, senteval / f)

    second = run_experiment(path, out)  # the selection is done: only the chosen points run, on the test seeds
    assert sorted(second["results"]) == ["test/a/seed3", "test/a/seed4", "test/b/seed3", "test/b/seed4"]
    assert all(r["status"] == "done" for r in second["results"].values())
    dev = {}
    for p in ("a@learning_rate=0.001", "a@learning_rate=1e-05", "b@temp=0.05", "b@temp=0.5"):
        dev[p] = np.mean([json.loads((out / f"selection/runs/{p}/seed{s}/result.json").read_text())
                          ["spearman"]["STSBenchmark"] for s in (1, 2)])
    for method in ("a", "b"):
        points = [p for p in dev if p.startswith(method + "@")]
        best = max(points, key=lambda p: dev[p])  # max keeps the first of a tie: the grid's order
        assert second["choice"][method]["point"] == best
        chosen = json.loads((out / f"test/runs/{method}/seed3/config.json").read_text())
        assert {k: chosen[k] for k in ("learning_rate", "temp") if k in chosen} == {
            **({"learning_rate": 3e-4} if method == "b" else {}), **second["choice"][method]["values"]}
        assert chosen["test_after_training"] is True  # the test phase runs the spec's own options
    assert json.loads((out / "test/runs/b/seed4/scores.json").read_text())["spearman"]["STSBenchmark"] is not None

    text = (out / "report.md").read_text()
    rep = json.loads((out / "report.json").read_text())
    assert f"| `{second['choice']['a']['point']}` | " in text and "**chosen**" in text
    assert "## Expected best dev score after k points tried" in text
    curve_a = rep["methods"]["a"]["curve"]
    values_a = [dev["a@learning_rate=0.001"], dev["a@learning_rate=1e-05"]]
    assert curve_a[1]["expected"] == pytest.approx(0.25 * min(values_a) + 0.75 * max(values_a))
    assert curve_a[1]["expected"] == pytest.approx(expected_max(values_a, 2)[0])
    versus = rep["test"]["versus"]["b"]["STSBenchmark"]
    assert versus["against"] == "a" and versus["seeds"] == [3, 4]
    assert f"| b | `{second['choice']['b']['point']}` |" in text and "## Test of the chosen points" in text
    assert (out / "budget.png").stat().st_size > 1000 if pytest.importorskip("matplotlib") else True

    again = run_experiment(path, out)  # everything done: nothing runs
    assert again["results"] == {}
    spec["arms"]["a"]["grid"]["learning_rate"].append(3e-4)  # a grid changed after the test phase started
    path.write_text(json.dumps(spec))
    before = sorted(p.name for p in (out / "selection/runs").iterdir())
    with pytest.raises(SpecError, match=r"method 'a': the grid changed after the test phase started \(added "
                                        r"\['a@learning_rate=0.0003'\], removed none\)"):
        run_experiment(path, out)
    assert sorted(p.name for p in (out / "selection/runs").iterdir()) == before  # refused before any run
