"""scripts/benchmarks/family.py, a thin entry over the experiment runner: its arms are the family's CPU configs at
the unsupervised default's budget, its options land in every run's options, bad input and a busy machine are
refused before training, and (slow) two methods train and are reported end to end with a tiny model (the real
run is a measurement: docs/methods.md)."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from scripts.benchmarks import family as bench
from simcse.experiments import parse_spec
from simcse.experiments import runs as R
from simcse.training.config import load_config
from conftest import random_sentences, write_senteval

REPO = Path(__file__).resolve().parents[2]
SAME_BUDGET = ("model_name_or_path", "train_file", "max_steps", "max_train_samples", "per_device_train_batch_size",
               "learning_rate", "max_seq_length", "eval_steps", "bf16")


def test_arms_are_every_family_cpu_config_at_the_unsupervised_budget():
    family = sorted(p.name for p in (REPO / "configs").glob("*_cpu_minilm.json")
                    if not p.name.startswith(("unsup_", "sup_")))
    raw = bench.family_spec()
    assert sorted(f"{a['config']}.json" for m, a in raw["arms"].items() if m != "simcse") == family
    assert raw["base"] == "unsup_cpu_minilm" and bench.methods()[0] == "simcse" == raw["baseline"]
    base = load_config(REPO / "configs" / "unsup_cpu_minilm.json")
    assert base["max_steps"] == 150 and base["per_device_train_batch_size"] == 64
    runs = {r.arm: r.options for r in parse_spec(raw, "family").runs() if r.seed == raw["seeds"][0]}
    for method, options in runs.items():
        assert {k: options.get(k) for k in SAME_BUDGET} == {k: base[k] for k in SAME_BUDGET}, method
        assert (options.get("loss", "infonce") == "infonce") == (method == "simcse")
    assert raw["seeds"] == [42, 1, 2] and raw["evaluation"]["alignment"] is True


def test_the_commands_settings_reach_every_run():
    raw = bench.family_spec(["mixcse"], max_steps=20, model="my-model", train_file="my.txt", seeds=[7],
                            tasks=["STSBenchmark"], bootstrap=50)
    runs = parse_spec(raw, "family").runs()
    assert [r.key for r in runs] == ["simcse/seed7", "mixcse/seed7"]  # SimCSE, the baseline, always kept
    for r in runs:
        assert (r.options["max_steps"], r.options["max_train_samples"]) == (20, 20 * 64)
        assert (r.options["model_name_or_path"], r.options["train_file"], r.options["seed"]) == ("my-model", "my.txt", 7)
    assert raw["evaluation"]["tasks"] == ["STSBenchmark"] and raw["evaluation"]["bootstrap"] == 50


def test_bad_input_is_refused_before_anything_trains(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(R, "execute", lambda *a, **k: pytest.fail("trained on bad input"))
    with pytest.raises(SystemExit):
        bench.main(["--methods", "nosuch", "--output_dir", str(tmp_path / "a")])
    assert "invalid choice: 'nosuch'" in capsys.readouterr().err
    with pytest.raises(SystemExit, match=r"^error: .*evaluation.tasks: \['MR'\] are not STS tasks"):
        bench.main(["--tasks", "STSBenchmark", "MR", "--output_dir", str(tmp_path / "b")])
    (tmp_path / "file").write_text("x")
    with pytest.raises(SystemExit, match=r"^error: --output_dir .* is under .*, which is a file"):
        bench.main(["--output_dir", str(tmp_path / "file" / "family")])
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


def test_busy_machine_is_refused_before_training(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(os, "getloadavg", lambda: (2.5, 2.5, 2.5))
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    monkeypatch.setattr(R, "execute", lambda *a, **k: pytest.fail("trained on a busy machine"))
    with pytest.raises(SystemExit, match=r"the machine is busy \(1-minute load average 2.50 on 2 CPUs\)"):
        bench.main(["--output_dir", str(tmp_path)])
    assert capsys.readouterr().out.endswith("load 2.50 (1-minute average) on 2 CPUs\n")


@pytest.mark.slow
def test_two_methods_train_and_are_reported_end_to_end(tmp_path, monkeypatch, capsys):
    """SimCSE and MixCSE, 2 steps each of a tiny encoder on a fake SentEval folder, one seed (busy machine
    allowed): both trained and scored by the runner, MixCSE against SimCSE paired by seed, the report naming the
    model; a rerun trains nothing."""
    from simcse.models.testing import tiny_encoder

    model = tiny_encoder(tmp_path / "model")
    write_senteval(tmp_path / "senteval")
    train = tmp_path / "train.txt"
    train.write_text("\n".join(random_sentences(200)) + "\n", encoding="utf-8")
    monkeypatch.setenv("SIMCSE_SENTEVAL_DIR", str(tmp_path / "senteval"))
    monkeypatch.setattr(os, "getloadavg", lambda: (9.0, 9.0, 9.0))
    out = tmp_path / "runs"
    argv = ["--methods", "mixcse", "--max_steps", "2", "--model", str(model), "--train_file", str(train),
            "--seeds", "42", "--output_dir", str(out), "--bootstrap", "50", "--allow_busy"]
    res = bench.main(argv)
    assert "WARNING: BUSY MACHINE" in capsys.readouterr().out
    assert sorted(res["results"]) == ["mixcse/seed42", "simcse/seed42"]
    report = json.loads((out / "report.json").read_text())
    assert report["spec"]["models"] == [str(model)]
    for arm in report["arms"].values():
        assert arm["costs"]["steps"] == 2 and arm["costs"]["examples_per_s"] > 0 and arm["costs"]["peak_rss_mib"] > 0
        e = arm["tasks"]["STSBenchmark"]
        assert e["n"] == 1 and e["low"] <= e["mean"] <= e["high"]
    d = report["versus"]["mixcse"]["STSBenchmark"]
    assert d["seeds"] == [42]
    assert d["diff"] == pytest.approx(report["arms"]["mixcse"]["tasks"]["STSBenchmark"]["mean"]
                                      - report["arms"]["simcse"]["tasks"]["STSBenchmark"]["mean"], abs=1e-6)
    assert f"model `{model}`" in (out / "report.md").read_text()
    monkeypatch.setattr(R, "execute", lambda *a, **k: pytest.fail("the rerun trained again"))
    assert bench.main(argv)["results"] == {}
