"""The report over seeds on fabricated run folders (no training): a failed seed is named and left out, never
averaged in silence; the numbers are the seeds' Spearmans as scipy computes them."""
from __future__ import annotations

import json

import numpy as np
import pytest
from experiment_world import tiny_world, write_spec  # noqa: F401  (fixture)
from scipy.stats import spearmanr

from simcse.experiments import load_spec, write_report
from simcse.experiments import runs as R
from simcse.experiments.spec import write_json_atomic


def fabricate(out, spec, noise: dict, failed: set):
    """Each run: scores.npz of gold + noise[arm] x N(0, 1) (seeded by the seed), a done or failed result."""
    gold = np.random.default_rng(0).standard_normal(500)
    out.mkdir(parents=True, exist_ok=True)
    write_json_atomic(out / "spec.json", {"path": spec.path, "spec": spec.raw})
    truth = {}
    for run in spec.runs():
        d = R.prepare(out, run)
        if (run.arm, run.seed) in failed:
            write_json_atomic(d / "result.json", {"status": "failed", "digest": run.digest,
                                                  "error": "error: boom at step 2"})
            continue
        sims = gold + noise[run.arm] * np.random.default_rng(100 + run.seed).standard_normal(500)
        np.savez(d / "scores.npz", **{"STSBenchmark|test|sims": sims, "STSBenchmark|test|gold": gold})
        write_json_atomic(d / "result.json", {"status": "done", "digest": run.digest, "train": {"steps": 3}})
        truth[(run.arm, run.seed)] = 100 * spearmanr(sims, gold)[0]
    return truth


def test_failed_seed_is_named_and_not_averaged(tmp_path, tiny_world):
    spec = load_spec(write_spec(tmp_path, tiny_world, seeds=[1, 2, 3]))
    out = tmp_path / "out"
    truth = fabricate(out, spec, {"a": 1.0, "b": 0.5}, failed={("b", 3)})
    rep = write_report(out)
    b = rep["arms"]["b"]["tasks"]["STSBenchmark"]
    assert (b["n"], b["of"]) == (2, 3)
    assert b["mean"] == pytest.approx((truth[("b", 1)] + truth[("b", 2)]) / 2, abs=1e-6)
    assert b["low"] <= b["mean"] <= b["high"]
    text = (out / "report.md").read_text()
    assert "| b | 2 of 3 seeds | 1: " in text and "3: -" in text
    assert f"model `{tiny_world / 'tiny'}`," in text  # the model the runs started from, not a fixed name
    assert "- b seed 3: failed: error: boom at step 2" in text
    versus = rep["versus"]["b"]["STSBenchmark"]
    assert versus["against"] == "a"
    assert versus["seeds"] == [1, 2]  # paired on the seeds both arms finished
    expected = np.mean([truth[("b", s)] - truth[("a", s)] for s in (1, 2)])
    assert versus["diff"] == pytest.approx(expected, abs=1e-6)
    assert versus["low"] > 0  # noise 0.5 against 1.0 on 500 pairs: a real difference
    assert json.loads((out / "report.json").read_text())["arms"]["a"]["tasks"]["STSBenchmark"]["n"] == 3
    pytest.importorskip("matplotlib")
    assert (out / "report.png").stat().st_size > 1000


def test_report_of_a_folder_without_spec(tmp_path):
    from simcse.experiments import SpecError

    with pytest.raises(SpecError, match="no spec.json"):
        write_report(tmp_path)


def test_an_arms_versus_replaces_the_baseline_in_its_comparison(tmp_path, tiny_world):
    spec = load_spec(write_spec(tmp_path, tiny_world, seeds=[1, 2],
                                arms={"a": {}, "b": {"learning_rate": 1e-3, "_versus": "c"}, "c": {"learning_rate": 2e-3}}))
    out = tmp_path / "out"
    truth = fabricate(out, spec, {"a": 1.0, "b": 0.5, "c": 0.5}, failed=set())
    rep = write_report(out)
    assert rep["versus"]["b"]["STSBenchmark"]["against"] == "c" and rep["versus"]["c"]["STSBenchmark"]["against"] == "a"
    expected = np.mean([truth[("b", s)] - truth[("c", s)] for s in (1, 2)])
    assert rep["versus"]["b"]["STSBenchmark"]["diff"] == pytest.approx(expected, abs=1e-6)
    assert "| b | c | STSBenchmark | 2 of 2 seeds |" in (out / "report.md").read_text()


def test_versus_must_name_another_arm(tmp_path, tiny_world):
    from simcse.experiments import SpecError

    with pytest.raises(SpecError, match=r"arm 'b': _versus 'zz' is not another arm; expected one of \['a'\]"):
        load_spec(write_spec(tmp_path, tiny_world, arms={"a": {}, "b": {"_versus": "zz"}}))


def test_reading_of_a_difference_says_shown_only_from_the_headline_interval():
    from simcse.experiments.report import verdict

    three = {"seeds": [1, 2, 3], "diff": 1.0, "pair_se": 0.2}
    assert verdict({**three, "shown": True, "seeds_needed": None}) == "shown"
    assert verdict({**three, "shown": False, "seeds_needed": 7}) == \
        "not shown with 3 seeds; about 7 seeds for 80% power at this size (an estimate)"
    assert verdict({**three, "shown": False, "seeds_needed": None}).startswith(
        "not shown with 3 seeds; more seeds alone would not show a difference of this size (the test set's part "
        "alone is +-0.39)")
    assert verdict({"seeds": [1], "diff": 5.0, "shown": False}) == \
        "not shown with 1 seed (an interval over seeds needs 2 or more)"
    assert verdict({"seeds": []}) == "-"


def test_report_reads_a_small_seed_dominated_difference_as_not_shown(tmp_path, tiny_world):
    """Two arms whose per-seed differences are +0.4, +0.5, +0.1 points on 500 pairs scored alike: the old
    seed-resampling interval is the range of the three (clear of 0); the headline is not."""
    spec = load_spec(write_spec(tmp_path, tiny_world, seeds=[1, 2, 3]))
    out = tmp_path / "out"
    out.mkdir(parents=True)
    write_json_atomic(out / "spec.json", {"path": spec.path, "spec": spec.raw})
    gold = np.random.default_rng(0).standard_normal(500)
    base = {s: np.random.default_rng(100 + s).standard_normal(500) for s in (1, 2, 3)}
    shift = {1: 0.012, 2: 0.015, 3: 0.003}  # less noise on arm b, a little, by seed
    for run in spec.runs():
        d = R.prepare(out, run)
        noise = 1.0 - (shift[run.seed] if run.arm == "b" else 0.0)
        np.savez(d / "scores.npz", **{"STSBenchmark|test|sims": gold + noise * base[run.seed],
                                      "STSBenchmark|test|gold": gold})
        write_json_atomic(d / "result.json", {"status": "done", "digest": run.digest, "train": {"steps": 3}})
    v = write_report(out)["versus"]["b"]["STSBenchmark"]
    per_seed = list(v["per_seed"].values())
    assert all(x > 0 for x in per_seed) and v["h_low"] > 0  # every seed up; the seed-resampling interval clear of 0
    sd = np.std(per_seed, ddof=1)
    assert v["high"] - v["diff"] >= 4.30 * sd / np.sqrt(3)  # at least the t part (t_{2, .975} = 4.30)
    assert v["low"] < 0 and v["shown"] is False and v["p"] > 0.05
    assert "| b | a | STSBenchmark | 3 of 3 seeds |" in (out / "report.md").read_text()
    assert "not shown with 3 seeds" in (out / "report.md").read_text()


def test_a_folder_written_by_an_earlier_version_keeps_its_results(tmp_path, tiny_world):
    """Earlier versions recorded a digest over kind, options and the whole evaluation; such a finished run is
    reported (and not run again) as long as the spec is unchanged."""
    import hashlib

    spec = load_spec(write_spec(tmp_path, tiny_world, seeds=[1, 2]))
    out = tmp_path / "out"
    truth = fabricate(out, spec, {"a": 1.0, "b": 0.5}, failed=set())
    for run in spec.runs():
        old = json.dumps({"kind": run.kind, "options": run.options, "evaluation": run.evaluation}, sort_keys=True,
                         separators=(",", ":"), default=str)
        f = R.run_dir(out, run) / "result.json"
        rec = json.loads(f.read_text())
        rec["digest"] = hashlib.sha256(old.encode()).hexdigest()[:12]
        rec.pop("score_digest", None)
        f.write_text(json.dumps(rec))
        assert R.state(out, run) == "done"
    b = write_report(out)["arms"]["b"]["tasks"]["STSBenchmark"]
    assert b["n"] == 2 and b["mean"] == pytest.approx((truth[("b", 1)] + truth[("b", 2)]) / 2, abs=1e-6)
