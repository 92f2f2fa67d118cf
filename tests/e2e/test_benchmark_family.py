"""scripts/benchmarks/family.py: its rows are the family's CPU configs at the unsupervised default's budget, it reads
the training log's lines, builds the table from `simcse evaluate`'s JSON, refuses bad input and a busy machine before
training, and (slow) trains and scores two methods with a tiny model end to end (the real run is a measurement:
docs/methods.md)."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from scripts.benchmarks import family as bench
from simcse.training.config import load_config
from conftest import random_sentences, write_senteval

REPO = Path(__file__).resolve().parents[2]
SAME_BUDGET = ("model_name_or_path", "train_file", "max_steps", "max_train_samples", "per_device_train_batch_size",
               "learning_rate", "max_seq_length", "seed", "eval_steps", "bf16")


def test_rows_are_every_family_cpu_config_at_the_unsupervised_budget():
    family = sorted(p.name for p in (REPO / "configs").glob("*_cpu_minilm.json")
                    if not p.name.startswith(("unsup_", "sup_")))
    assert sorted(Path(c).name for m, c in bench.CONFIGS.items() if m != "simcse") == family
    assert bench.CONFIGS["simcse"] == "configs/unsup_cpu_minilm.json" and list(bench.CONFIGS)[0] == "simcse"
    base = load_config(REPO / bench.CONFIGS["simcse"])
    assert base["max_steps"] == 150 and base["per_device_train_batch_size"] == 64
    for method, config in bench.CONFIGS.items():
        cfg = load_config(REPO / config)
        assert {k: cfg.get(k) for k in SAME_BUDGET} == {k: base[k] for k in SAME_BUDGET}, method
        assert (cfg.get("loss", "infonce") == "infonce") == (method == "simcse")


def test_log_numbers_read_the_runs_lines(tmp_path):
    log = tmp_path / "m.log"
    log.write_text(
        "[simcse] --bf16 auto: CPU has avx512_bf16 -> bf16 autocast\n"
        "[simcse] before training (dev; the starting model with pooler avg): eval_stsb_spearman=0.8672 "
        "eval_sickr_spearman=0.7980 eval_avg_sts=0.8326\n"
        "[simcse] trained 150 steps in 508 s (18.9 training examples/s, 0.295 steps/s)\n"
        "[simcse] after training (dev): final_stsb_spearman=0.8726 final_sickr_spearman=0.7783 final_avg_sts=0.8254\n",
        encoding="utf-8")
    assert bench.log_numbers(log) == {"dev_before": 0.8672, "dev_after": 0.8726, "steps": 150, "train_s": 508}
    log.write_text("[simcse] trained 1 steps (steps 3-3, resumed from step 2) in 12 s (...)\n", encoding="utf-8")
    assert bench.log_numbers(log) == {"dev_before": None, "dev_after": None, "steps": 1, "train_s": 12}


def _eval_json(score, low, high, diff=None):
    """The parts of `simcse evaluate --output_json` the table reads, written by hand in its shape."""
    out = {"tables": {"sts": {"STSBenchmark": score, "SICKRelatedness": score - 5}},
           "bootstrap": {"resamples": 1000, "seed": 1111, "confidence": 0.95,
                         "intervals": {"STSBenchmark": [low, high], "SICKRelatedness": [low - 5, high - 5]}}}
    if diff is not None:
        row = {"a": score, "b": score - diff, "diff": diff, "low": diff - 0.4, "high": diff + 0.3, "p_value": 0.0123}
        out["comparison"] = {"other_model": "x", "tasks": {"STSBenchmark": row, "SICKRelatedness": row}}
    return out


def test_table_rows_carry_intervals_and_the_difference_with_simcse():
    logged = {"dev_before": 0.8672, "dev_after": 0.8726, "steps": 150, "train_s": 600}
    results = [bench.rows("simcse", _eval_json(82.88, 80.91, 84.6), logged, bench.TASKS),
               bench.rows("esimcse", _eval_json(83.5, 81.6, 85.2, diff=0.62), {**logged, "train_s": 900}, bench.TASKS)]
    table = bench.format_table(results, bench.TASKS).splitlines()
    assert table[0] == ("| method | STS-B test | STS-B - SimCSE | p | SICK-R test | SICK-R - SimCSE | p | "
                        "STS-B dev before / after | steps | train s | s/step |")
    assert table[2] == "| simcse | 82.88 [80.91, 84.60] |  |  | 77.88 [75.91, 79.60] |  |  | 86.72 / 87.26 | 150 | 600 | 4.00 |"
    assert table[3] == ("| esimcse | 83.50 [81.60, 85.20] | +0.62 [+0.22, +0.92] | 0.012 | 78.50 [76.60, 80.20] | "
                        "+0.62 [+0.22, +0.92] | 0.012 | 86.72 / 87.26 | 150 | 900 | 6.00 |")


def test_bad_input_is_refused_before_anything_trains(tmp_path, capsys):
    with pytest.raises(SystemExit):
        bench.main(["--methods", "nosuch", "--output_root", str(tmp_path / "a")])
    assert "invalid choice: 'nosuch'" in capsys.readouterr().err
    with pytest.raises(SystemExit, match=r"--tasks MR: not STS tasks"):
        bench.main(["--tasks", "STSBenchmark", "MR", "--output_root", str(tmp_path / "b")])
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


def test_busy_machine_is_refused_before_training(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(os, "getloadavg", lambda: (2.5, 2.5, 2.5))
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    monkeypatch.setattr(bench, "train", lambda *a: pytest.fail("trained on a busy machine"))
    with pytest.raises(SystemExit, match=r"the machine is busy \(1-minute load average 2.50 on 2 CPUs\)"):
        bench.main(["--output_root", str(tmp_path)])
    assert capsys.readouterr().out == "load 2.50 (1-minute average) on 2 CPUs\n"


@pytest.mark.slow
def test_two_methods_train_and_score_end_to_end(tmp_path, monkeypatch, capsys):
    """SimCSE and MixCSE, 2 steps each of a tiny encoder on a fake SentEval folder (busy machine allowed): both
    folders trained through the example script, scored with intervals, MixCSE compared with SimCSE on the same pairs;
    --reuse then scores without training."""
    from simcse.models.testing import tiny_encoder

    model = tiny_encoder(tmp_path / "model")
    write_senteval(tmp_path / "senteval")
    train = tmp_path / "train.txt"
    train.write_text("\n".join(random_sentences(200)) + "\n", encoding="utf-8")
    monkeypatch.setenv("SIMCSE_SENTEVAL_DIR", str(tmp_path / "senteval"))
    monkeypatch.setattr(os, "getloadavg", lambda: (9.0, 9.0, 9.0))
    argv = ["--methods", "mixcse", "--max_steps", "2", "--model", str(model), "--train_file", str(train),
            "--output_root", str(tmp_path / "runs"), "--bootstrap", "50", "--allow_busy",
            "--output_json", str(tmp_path / "family.json")]
    results = bench.main(argv)
    out = capsys.readouterr().out
    assert "WARNING: BUSY MACHINE" in out and "BUSY MACHINE at the start: timings not comparable" in out
    assert [r["method"] for r in results] == ["simcse", "mixcse"]
    for r in results:
        assert r["steps"] == 2 and r["train_s"] is not None and r["dev_before"] is not None
        for cell in r["tasks"].values():
            assert cell["low"] <= cell["score"] <= cell["high"]
    assert "vs_simcse" not in results[0]["tasks"]["STSBenchmark"]
    d = results[1]["tasks"]["STSBenchmark"]["vs_simcse"]
    assert d["a"] == pytest.approx(results[1]["tasks"]["STSBenchmark"]["score"], abs=0.011)
    assert d["b"] == pytest.approx(results[0]["tasks"]["STSBenchmark"]["score"], abs=0.011)
    assert json.loads((tmp_path / "family.json").read_text())["results"] == results
    assert "| mixcse | " in out and "2 run(s) trained" in out
    monkeypatch.setattr(bench, "train", lambda *a: pytest.fail("--reuse trained again"))
    assert bench.main([*argv, "--reuse"]) == results
