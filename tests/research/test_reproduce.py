"""simcse.research.reproduce: tiny pretrain -> tiny reproduction, end to end, plus its helpers."""
from __future__ import annotations

import csv
import json

import numpy as np
import pytest
from conftest import random_sentences

from simcse.research import reproduce


def test_average_cosine_matches_the_pairwise_mean():
    x = np.random.default_rng(0).normal(size=(7, 5)) + 0.5
    u = x / np.linalg.norm(x, axis=1, keepdims=True)
    cos = u @ u.T
    expected = (cos.sum() - np.trace(cos)) / (7 * 6)
    assert reproduce.average_cosine(x) == pytest.approx(expected, abs=1e-12)
    assert reproduce.average_cosine(np.ones((4, 3))) == pytest.approx(1.0)


def test_bad_budget_is_a_clear_error(capsys):
    with pytest.raises(SystemExit):
        reproduce.parse(["--model_name_or_path", "m", "--output_dir", "o", "--steps", "0"])
    assert "--steps must be >= 1" in capsys.readouterr().err


def write_corpus_and_nli(root, n_lines: int, n_triplets: int, seed: int):
    """``root/wiki.txt`` (``n_lines`` random sentences) and ``root/nli.csv`` (``n_triplets`` triplets of them)."""
    corpus = root / "wiki.txt"
    sents = random_sentences(n_lines, seed=seed)
    corpus.write_text("\n".join(sents) + "\n", encoding="utf-8")
    nli = root / "nli.csv"
    with open(nli, "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(["sent0", "sent1", "hard_neg"])
        w.writerows(list(zip(sents, sents[1:], sents[2:]))[:n_triplets])
    return corpus, nli


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    from conftest import write_senteval

    from simcse.research.pretrain import PretrainArguments, pretrain

    root = tmp_path_factory.mktemp("repro")
    corpus, nli = write_corpus_and_nli(root, 160, 158, seed=5)
    raw = pretrain(PretrainArguments(train_file=str(corpus), output_dir=str(root / "raw"), vocab_size=120,
                                     hidden_size=32, num_hidden_layers=2, num_attention_heads=2, max_seq_length=16,
                                     batch_size=8, max_steps=6, save_steps=100, logging_steps=2, bf16=False))
    data = write_senteval(root / "downstream")
    out = root / "out"
    argv = ["--model_name_or_path", str(raw), "--output_dir", str(out), "--train_file", str(corpus),
            "--sup_train_file", str(nli), "--senteval_dir", str(data), "--steps", "2", "--batch_size", "8",
            "--align_every", "1", "--table3_rows", "p0.0", "p0.1", "fixed0.1", "--whitening_sentences", "100",
            "--max_seq_length", "16"]  # the tiny raw model has 16 positions
    return argv, out, reproduce.main(argv)


@pytest.mark.slow
def test_tiny_reproduction_writes_every_part(tiny_run):
    _, out, results = tiny_run
    assert set(results) == {"raw", "table3", "sup", "spectrum"}
    for part in results:
        assert json.loads((out / f"{part}.json").read_text()) == json.loads(json.dumps(results[part]))
    raw = results["raw"]
    assert list(raw) == ["avg", "cls_before_pooler", "avg_first_last", "whitening"]
    for row in raw.values():
        assert set(reproduce.STS_TASKS) | {"Avg.", "STSBenchmark_dev"} <= set(row)
        assert all(-100 <= row[t] <= 100 for t in reproduce.STS_TASKS)
    rows = results["table3"]["rows"]
    assert [r["slug"] for r in rows] == ["untrained", "p0.0", "p0.1", "fixed0.1"]
    assert [c["step"] for c in rows[2]["curve"]] == [1, 2]
    assert "Avg." in results["table3"]["unsup"]
    assert results["sup"]["steps"] == 2 and "--hard_negative_weight 0.0" in results["sup"]["command"]
    spec = results["spectrum"]["rows"]
    assert list(spec) == ["raw, cls_before_pooler", "raw, avg", "unsup SimCSE", "sup SimCSE"]
    assert all(-1 <= r["avg_cosine"] <= 1 and 0 <= r["sv2_over_sv1"] <= 1 for r in spec.values())
    assert (out / "spectrum.png").read_bytes()[:4] == b"\x89PNG"
    assert (out / "table3" / "training_curve.png").is_file()
    summary = (out / "summary.md").read_text()
    assert "| p = 0.1 | 82.5 |" in summary and "| fixed 0.1 | 43.6 |" in summary
    assert "| raw, avg_first_last |" in summary and summary.count("| 76.25 |") == 1


@pytest.mark.slow
def test_rerun_reads_finished_parts_back(tiny_run):
    argv, out, results = tiny_run
    stamp = (out / "raw.json").stat().st_mtime_ns
    again = reproduce.main(argv + ["--parts", "raw", "spectrum"])
    assert (out / "raw.json").stat().st_mtime_ns == stamp
    assert again["raw"] == results["raw"] and again["sup"] == results["sup"]


def test_bf16_reaches_every_training_run(monkeypatch, tmp_path):
    import simcse.training.train as train

    seen = {}

    class Stop(Exception):
        pass

    def fake_parse_args(argv):
        seen["sup"] = argv
        raise Stop

    monkeypatch.setattr(reproduce, "_ablation_main", lambda: (lambda argv: seen.setdefault("table3", argv) and {}))
    monkeypatch.setattr(train, "parse_args", fake_parse_args)
    base = ["--model_name_or_path", "m", "--output_dir", str(tmp_path), "--train_file", "w", "--sup_train_file", "n"]
    reproduce.run_table3(reproduce.parse(base + ["--bf16"]), tmp_path)
    flags = ["--bf16", "true"]  # train.py adds --use_cpu true on a machine without CUDA
    table3 = seen["table3"]
    assert table3[-len(flags):] == flags and "--" in table3[:-len(flags)]  # after "--": every row's options
    with pytest.raises(Stop):
        reproduce.run_sup(reproduce.parse(base + ["--bf16"]), tmp_path)
    assert seen["sup"][-len(flags):] == flags
    seen.clear()
    reproduce.run_table3(reproduce.parse(base), tmp_path)
    assert "--bf16" not in seen["table3"]


@pytest.mark.slow
def test_tiny_script_runs_end_to_end(tmp_path):
    """``TINY=1 bash scripts/reproduce_raw.sh``: pretraining then every part, bf16 on the CPU, as documented."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    from conftest import write_senteval

    repo = Path(__file__).resolve().parents[2]
    corpus, nli = write_corpus_and_nli(tmp_path, 2000, 300, seed=7)
    out = tmp_path / "out"
    env = {**os.environ, "TINY": "1", "OUT": str(out), "WIKI": str(corpus), "NLI": str(nli), "THREADS": "1",
           "SIMCSE_SENTEVAL_DIR": str(write_senteval(tmp_path / "downstream")),
           "PATH": str(Path(sys.executable).parent) + os.pathsep + os.environ.get("PATH", "")}
    r = subprocess.run(["bash", str(repo / "scripts" / "reproduce_raw.sh")], env=env, capture_output=True, text=True,
                       timeout=900)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    assert (out / "raw-bert" / "model.safetensors").is_file() and (out / "raw-bert" / "loss_curve.csv").is_file()
    results = {p: json.loads((out / f"{p}.json").read_text()) for p in ("raw", "table3", "sup", "spectrum")}
    assert [r["slug"] for r in results["table3"]["rows"]] == ["untrained", "p0.0", "p0.1", "fixed0.1"]
    assert "--bf16 true" in results["table3"]["command"] and "--bf16 true" in results["sup"]["command"]
    assert "| p = 0.1 | 82.5 |" in (out / "summary.md").read_text()
