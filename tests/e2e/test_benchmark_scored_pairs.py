"""scripts/benchmarks/scored_pairs.py, a thin entry over the experiment runner with a sentence-transformers arm kind:
the rows it trains (one epoch, --steps, --max_rows, --nli_rows, the warm-up) the same on both sides, the
idle-machine guard, and a smoke run of CoSENT and supervised with a tiny model on a fake SentEval folder whose
report compares ours with theirs by seed (the real run is a measurement: docs/methods_scored.md)."""
from __future__ import annotations

import argparse
import csv
import json
import os

import pytest

from scripts.benchmarks import common
from scripts.benchmarks import scored_pairs as bench
from simcse.experiments import parse_spec
from simcse.experiments import runs as R
from conftest import random_sentences, write_senteval


@pytest.fixture(scope="module")
def fake_data(tmp_path_factory):
    root = tmp_path_factory.mktemp("scored_bench")
    write_senteval(root / "senteval")  # 12 STS-B train pairs, 12 STS-B test, 10 SICK-R test
    s = random_sentences(90)
    nli = root / "nli.csv"
    with open(nli, "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(["sent0", "sent1", "hard_neg"])
        w.writerows(s[3 * i:3 * i + 3] for i in range(30))
    return root


def test_one_epoch_is_rows_over_batch_and_steps_override():
    assert bench.plan_steps(12, 5) == (10, 2)  # 12 pairs // 5: the last 2 left out, as in a drop-last epoch
    assert bench.plan_steps(30, 4) == (28, 7)
    assert bench.plan_steps(9, 4) == (8, 2)
    assert bench.plan_steps(8, 4, epochs=3) == (8, 6)
    assert bench.plan_steps(12, 4, steps=2) == (8, 2)
    with pytest.raises(ValueError, match="12 rows, need 16"):
        bench.plan_steps(12, 4, steps=4)
    assert [bench.warmup_steps(n, 0.1) for n in (1, 10, 11, 359)] == [1, 1, 2, 36]  # HF's ceil rule
    assert bench.warmup_steps(10, 0.0) == 0


def test_both_sides_of_a_row_train_on_the_same_rows_and_settings(fake_data, tmp_path):
    from simcse.training.scored_pairs import write_scored_pairs

    stsb = write_scored_pairs("stsb_train", tmp_path / "stsb.csv", fake_data / "senteval")
    raw = bench.scored_pairs_spec(list(bench.RUNS), str(stsb), str(fake_data / "nli.csv"), model="m", seeds=[3],
                                  batch_size=4, nli_rows=9, data_dir=str(fake_data / "senteval"))
    assert list(raw["arms"]) == ["start", "cosent", "cosent_st", "angle", "angle_st", "matryoshka", "matryoshka_st",
                                 "supervised", "supervised_st"]
    rows = {"cosent": (12, stsb), "angle": (12, stsb), "matryoshka": (8, fake_data / "nli.csv"),
            "supervised": (8, fake_data / "nli.csv")}  # 12 pairs // 4; 9 of the 30 triplets // 4
    runs = {r.arm: r for r in parse_spec(raw, "x").runs()}
    for run, (n, path) in rows.items():
        ours, theirs = runs[run], runs[f"{run}_st"]
        assert theirs.kind == "sentence_transformers" and raw["arms"][run]["_versus"] == f"{run}_st"
        for key, value in {"train_file": str(path), "max_train_samples": n, "per_device_train_batch_size": 4,
                           "warmup_steps": 1, "learning_rate": 5e-5, "max_seq_length": 32, "model_name_or_path": "m",
                           "seed": 3, "senteval_dir": str(fake_data / "senteval")}.items():
            assert ours.options[key] == theirs.options[key] == value, (run, key)
    assert runs["cosent_st"].options["loss"] == "CoSENTLoss" and runs["cosent"].options["loss"] == "cosent"
    assert runs["matryoshka_st"].options["loss_args"]["matryoshka_dims"] == list(bench.DIMS)


def test_bad_runs_are_refused_before_anything_runs(capsys):
    with pytest.raises(SystemExit):
        bench.main(["--runs", "cosent,nosuch", "--model", "x"])
    assert "expected a comma-separated subset of cosent,angle,matryoshka,supervised" in capsys.readouterr().err


def _load(monkeypatch, load: float, cpus: int = 2):
    monkeypatch.setattr(os, "getloadavg", lambda: (load, load, load))
    monkeypatch.setattr(os, "cpu_count", lambda: cpus)


def test_busy_machine_is_refused_in_one_line(monkeypatch, capsys, fake_data, tmp_path):
    _load(monkeypatch, 1.7)
    monkeypatch.setattr(R, "execute", lambda *a, **k: pytest.fail("trained on a busy machine"))
    with pytest.raises(SystemExit) as e:
        bench.main(["--model", "x", "--nli_file", str(fake_data / "nli.csv"), "--data_dir", str(fake_data / "senteval"),
                    "--batch_size", "4", "--output_dir", str(tmp_path / "out")])
    assert str(e.value) == ("error: the machine is busy (1-minute load average 1.70 on 2 CPUs); timings would not be "
                            "comparable; rerun when idle or pass --allow_busy")
    assert capsys.readouterr().out.endswith("load 1.70 (1-minute average) on 2 CPUs\n")


def test_idle_guard_limits_and_allow_busy(monkeypatch):
    said: list[str] = []
    _load(monkeypatch, 0.42)
    assert common.check_idle(False, said.append) == {"load": 0.42, "cpus": 2, "busy": False}
    assert said == ["load 0.42 (1-minute average) on 2 CPUs"]
    _load(monkeypatch, 1.0, cpus=1)  # at least 1.0 on any machine of <= 2 cores
    assert not common.check_idle(False, said.append)["busy"]
    _load(monkeypatch, 3.5, cpus=8)  # half of 8 is the limit
    assert not common.check_idle(False, said.append)["busy"]
    _load(monkeypatch, 4.5, cpus=8)
    with pytest.raises(SystemExit, match="busy"):
        common.check_idle(False, said.append)
    said.clear()
    assert common.check_idle(True, said.append)["busy"] is True
    assert said[1].startswith("WARNING: BUSY MACHINE (1-minute load average 4.50 on 8 CPUs")


@pytest.mark.slow
def test_smoke_run_of_cosent_and_supervised_against_sentence_transformers(fake_data, tmp_path, monkeypatch, capsys):
    """CoSENT and supervised, 2 steps of 4 rows with a tiny encoder, one seed, on a busy machine with --allow_busy:
    both sides of each row train (ours through simcse train, theirs through sentence-transformers' trainer), every
    model is scored on the same pairs, and the report compares each row's sides by seed."""
    from simcse.models.testing import tiny_encoder

    model = tiny_encoder(tmp_path / "model", hidden=32, heads=2, layers=1)
    _load(monkeypatch, 9.0)
    out = tmp_path / "out"
    res = bench.main(["--model", str(model), "--data_dir", str(fake_data / "senteval"), "--nli_file",
                      str(fake_data / "nli.csv"), "--steps", "2", "--batch_size", "4", "--seeds", "1",
                      "--learning_rate", "1e-3", "--resamples", "200", "--allow_busy", "--output_dir", str(out)])
    assert "WARNING: BUSY MACHINE" in capsys.readouterr().out
    assert sorted(res["results"]) == sorted(f"{a}/seed1" for a in ("start", "cosent", "cosent_st", "supervised",
                                                                    "supervised_st"))
    assert all(r["status"] == "done" for r in res["results"].values()), res["results"]
    report = json.loads((out / "report.json").read_text())
    assert report["spec"]["models"] == [str(model)]
    for arm in ("cosent", "cosent_st", "supervised", "supervised_st"):
        costs = report["arms"][arm]["costs"]
        assert costs["steps"] == 2 and costs["examples_per_s"] > 0 and costs["peak_rss_mib"] > 0, arm
    for run in ("cosent", "supervised"):
        for task in ("STSBenchmark", "SICKRelatedness"):
            d = report["versus"][run][task]
            ours, theirs = (report["arms"][a]["tasks"][task]["mean"] for a in (run, f"{run}_st"))
            assert d["against"] == f"{run}_st" and d["seeds"] == [1]
            assert d["diff"] == pytest.approx(ours - theirs, abs=1e-6) and d["low"] <= d["diff"] <= d["high"]
    st_model = out / "runs" / "cosent_st" / "seed1" / "model"
    assert (st_model / "modules.json").is_file()  # a sentence-transformers folder, scored by this library
