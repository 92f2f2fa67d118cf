"""scripts/benchmark_methods.py: every method's step time and peak memory as ratios to SimCSE, in one run."""
from __future__ import annotations

import pytest

from conftest import load_script, make_tiny_model, random_sentences


def test_unknown_method_is_refused():
    with pytest.raises(SystemExit):
        load_script("benchmark_methods").main(["--methods", "nope"])


@pytest.mark.slow
def test_ratios_against_simcse(tmp_path, capsys):
    model = make_tiny_model(tmp_path / "model")
    data = tmp_path / "train.txt"
    data.write_text("\n".join(random_sentences(16, seed=2)) + "\n")
    bench = load_script("benchmark_methods")
    out = bench.main(["--methods", "esimcse", "--model", str(model), "--data", str(data), "--batch-size", "4",
                      "--warmup", "1", "--steps", "1", "--precision", "fp32", "--threads", "1"])
    assert list(out) == ["simcse", "esimcse"]  # two worker processes (each imports torch: slow)
    assert out["simcse"]["time_ratio"] == 1.0 and out["simcse"]["memory_ratio"] == 1.0
    assert all(r["s_per_step"] > 0 and r["peak_mib"] > 0 for r in out.values())
    assert "| esimcse |" in capsys.readouterr().out
