"""End to end: the benchmark scripts' own accounting and a smoke run of the GPU benchmark on CPU."""
from __future__ import annotations

import pytest
import torch

from scripts.benchmarks import gpu as gpu_benchmark
from scripts.benchmarks import train as train_benchmark


# ------------------------------------------------------------------------------ benchmark accounting
def _bench():
    return train_benchmark


def test_benchmark_token_counter_counts_real_and_padded_tokens():
    bench = _bench()
    mask = torch.tensor([[[1, 1, 1, 0], [1, 1, 1, 0]], [[1, 1, 0, 0], [1, 1, 0, 0]]])  # (B=2, V=2, L=4)
    counter = bench._CountingCollator(lambda feats: {"attention_mask": mask}, lambda b: [b["attention_mask"]])
    counter([{}])
    assert counter.batches == [{"tokens": 10, "padded_tokens": 16, "sum_sq": 2 * 9 + 2 * 4, "padded_sum_sq": 4 * 16}]


@pytest.mark.slow
def test_gpu_benchmark_script_runs_on_cpu_as_a_smoke_test(capsys):
    """scripts/benchmarks/gpu.py (for a lent GPU) builds its own random model, tokenizer and data; on CPU with
    the tiny shape it must run end to end and report a finite rate and MFU for every batch size."""
    mod = gpu_benchmark
    out = mod.main(["--device", "cpu", "--shape", "tiny", "--batch-sizes", "4,8", "--warmup", "1", "--steps", "1",
                    "--threads", "1", "--variants", "ours"])
    assert sorted(out["runs"]) == [4, 8]
    for r in out["runs"].values():
        assert r["sent_s"] > 0 and 0 < r["mfu"] < 1
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert last.startswith("gpu_train device=cpu precision=bf16 batch4_sent_s=") and "batch8_mfu=" in last
    sentences = mod.synthetic_sentences(50)
    assert len(set(sentences)) == 50 and all(10 <= len(s.split()) - 2 <= 40 for s in sentences)


@pytest.mark.slow
def test_gpu_benchmark_times_the_compiled_path_against_the_eager_one(capsys):
    """The GPU check's fused-path row: ``compiled`` (--torch_compile true) beside ``ours`` (eager), one worker
    each; the last line carries their ratio, as the check's own last line does."""
    from scripts.gpu_check.check import last_line

    out = gpu_benchmark.main(["--device", "cpu", "--shape", "tiny", "--batch-sizes", "4", "--warmup", "1",
                              "--steps", "1", "--threads", "1", "--variants", "ours,compiled"])
    rows = out["variants"][4]
    assert set(rows) == {"ours", "compiled"} and all(r["sent_s"] > 0 for r in rows.values())
    last = capsys.readouterr().out.strip().splitlines()[-1]
    ratio = rows["ours"]["s_step"] / rows["compiled"]["s_step"]
    assert f"batch4_compiled_vs_eager={ratio:.2f}" in last
    report = {"parts": {"b": {"status": "ok", "bench": out}}}
    assert f"batch4_compiled_vs_eager={ratio:.2f}" in last_line(report)
