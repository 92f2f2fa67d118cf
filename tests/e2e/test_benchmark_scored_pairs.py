"""scripts/benchmarks/scored_pairs.py: the rows it trains (one epoch, --steps, --max_rows, --nli_rows, the
warm-up), the idle-machine guard, and a smoke run of every row with a tiny model on a fake SentEval folder whose
table carries intervals and the ours - theirs comparison (the real run is a measurement: docs/methods_scored.md)."""
from __future__ import annotations

import argparse
import csv
import json
import os

import pytest

from scripts.benchmarks import common
from scripts.benchmarks import scored_pairs as bench
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


def _args(fake_data, **kw) -> argparse.Namespace:
    base = dict(steps=None, epochs=1, max_rows=None, nli_rows=None, batch_size=4, data_dir=str(fake_data / "senteval"),
                nli_file=str(fake_data / "nli.csv"))
    return argparse.Namespace(**{**base, **kw})


def test_one_epoch_is_rows_over_batch_and_steps_override(fake_data):
    rows, steps = bench.plan_rows("cosent", _args(fake_data, batch_size=5))
    assert (len(rows), steps) == (10, 2)  # 12 pairs // 5: the last 2 left out, as in a drop-last epoch
    rows, steps = bench.plan_rows("supervised", _args(fake_data))
    assert (len(rows), steps, len(rows[0])) == (28, 7, 3)
    assert bench.plan_rows("supervised", _args(fake_data, nli_rows=9))[1] == 2
    assert bench.plan_rows("matryoshka", _args(fake_data, max_rows=8, epochs=3))[1] == 6
    rows, steps = bench.plan_rows("angle", _args(fake_data, steps=2))
    assert (len(rows), steps) == (8, 2)
    with pytest.raises(SystemExit, match="cosent has 12 rows, need 16"):
        bench.plan_rows("cosent", _args(fake_data, steps=4))
    assert [bench.warmup_steps(n, 0.1) for n in (1, 10, 11, 359)] == [1, 1, 2, 36]  # HF's ceil rule
    assert bench.warmup_steps(10, 0.0) == 0


def test_bad_runs_are_refused_before_anything_runs(capsys):
    with pytest.raises(SystemExit):
        bench.main(["--runs", "cosent,nosuch", "--model", "x"])
    assert "expected a comma-separated subset of cosent,angle,matryoshka,supervised" in capsys.readouterr().err


def _load(monkeypatch, load: float, cpus: int = 2):
    monkeypatch.setattr(os, "getloadavg", lambda: (load, load, load))
    monkeypatch.setattr(os, "cpu_count", lambda: cpus)


def test_busy_machine_is_refused_in_one_line(monkeypatch, capsys, fake_data):
    _load(monkeypatch, 1.7)
    with pytest.raises(SystemExit) as e:
        bench.main(["--model", "x", "--nli_file", str(fake_data / "nli.csv")])
    assert str(e.value) == ("error: the machine is busy (1-minute load average 1.70 on 2 CPUs); timings would not be "
                            "comparable; rerun when idle or pass --allow_busy")
    assert capsys.readouterr().out == "load 1.70 (1-minute average) on 2 CPUs\n"


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
def test_smoke_run_of_every_row_has_intervals_and_comparisons(fake_data, tmp_path, monkeypatch, capsys):
    """Every row, 2 steps of 4 rows with a tiny 384-wide encoder (the Matryoshka dims need 384), on a busy machine
    with --allow_busy: the tables carry a [low, high] per score and an ours - theirs line per score, the JSON says
    busy, and the point estimates the intervals come from are the evaluator's scores (the same pairs)."""
    from simcse.models.testing import tiny_encoder

    model = tiny_encoder(tmp_path / "model", hidden=384, heads=4, layers=1)
    _load(monkeypatch, 9.0)
    out_json = tmp_path / "out" / "result.json"
    res = bench.main(["--model", str(model), "--data_dir", str(fake_data / "senteval"), "--nli_file",
                      str(fake_data / "nli.csv"), "--steps", "2", "--batch_size", "4", "--threads", "1",
                      "--learning_rate", "1e-3", "--resamples", "200", "--allow_busy", "--output_json", str(out_json)])
    out = capsys.readouterr().out
    assert out.startswith("load 9.00 (1-minute average) on 2 CPUs\nWARNING: BUSY MACHINE")
    assert "token caps" not in out
    assert "at the end: load 9.00 (1-minute average) on 2 CPUs" in out
    assert "| row | side | rows, steps | STS-B test | SICK-R test | training sentences/s | peak RSS MiB | train s |" in out
    assert "| row | score | start | ours | sentence-transformers | ours - theirs [95%] | p |" in out
    table = [line for line in out.splitlines() if line.startswith("| ")]
    for run in bench.RUNS:
        assert sum(line.startswith(f"| {run} | ours (") for line in table) == 1
        assert sum(line.startswith(f"| {run} | sentence-transformers (") for line in table) == 1
    compared = [line for line in table if line.count("[") == 4]  # start, ours, theirs, the difference
    assert len(compared) == 2 + 1 + 5 + 2  # cosent, angle, matryoshka at 5 dims, supervised
    assert any("| matryoshka | STS-B test @32 |" in line for line in compared)
    assert json.loads(out.splitlines()[-1][len("RESULT "):]) == res == json.loads(out_json.read_text())
    assert res["busy"] is True and res["cpus"] == 2 and res["settings"]["runs"] == list(bench.RUNS)
    for run in bench.RUNS:
        for side in bench.SIDES:
            r = res["results"][f"{side}/{run}"]
            assert (r["steps"], r["trained_steps"], r["rows"], r["warmup_steps"], r["lr_scheduler"]) == (2, 2, 8, 1, "linear")
            assert r["sentences_per_s"] > 0 and r["peak_rss_mib"] > 0
            assert r["eval_max_tokens"] == res["results"]["start/start"]["eval_max_tokens"] == 64  # the same tokens
            for key, by_task in r["intervals"].items():
                for task, (low, high) in by_task.items():
                    assert low <= r["scores"][key][task] <= high
        for name, c in res["comparisons"][run].items():
            key, task = name.split("|")
            assert c["ours"] == pytest.approx(res["results"][f"ours/{run}"]["scores"][key][task], abs=0.011)
            assert c["theirs"] == pytest.approx(res["results"][f"st/{run}"]["scores"][key][task], abs=0.011)
            assert c["low"] <= c["diff"] <= c["high"] and 0 < c["p"] <= 1
    assert set(res["comparisons"]["matryoshka"]) == {f"{d if d != 384 else 'full'}|STSBenchmark" for d in bench.DIMS}
    assert set(res["comparisons"]["supervised"]) == {"full|STSBenchmark", "full|SICKRelatedness"}
