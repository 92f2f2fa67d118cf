"""FLOP counts and the matrix-multiply ceiling behind model FLOPs utilisation (MFU) in the benchmarks.

MFU = useful FLOPs per step / seconds per step / :func:`gemm_ceiling` (docs/performance.md). Useful FLOPs count
the real (non-padding) tokens: :func:`model_flops`.
"""
from __future__ import annotations

import time


def model_flops(shape: dict, tokens: int, sum_sq_lengths: int) -> float:
    """Forward + backward FLOPs of a BERT-style encoder on sequences of the given total / squared lengths.

    ``shape``: ``layers``, ``hidden``, ``linear_params`` (weights of the encoder layers' linear maps).
    ``6 * linear_params * tokens`` (2 FLOPs per multiply-add; backward = 2x forward) plus attention
    ``12 * layers * hidden * sum_i len_i^2`` (QK^T and AV, 2 * 2 * len^2 * hidden per layer forward, x3).
    Embedding look-ups, LayerNorm, softmax and the B x B loss are left out (they are not matrix products).
    """
    return 6.0 * shape["linear_params"] * tokens + 12.0 * shape["layers"] * shape["hidden"] * sum_sq_lengths


def encoder_shape(model_path: str) -> dict:
    """Layers, hidden size and linear-weight count of a BERT-style encoder, from its config only."""
    from transformers import AutoConfig

    c = AutoConfig.from_pretrained(model_path)
    h, inter, layers = c.hidden_size, c.intermediate_size, c.num_hidden_layers
    return {"layers": layers, "hidden": h, "intermediate": inter,
            "linear_params": layers * (4 * h * h + 2 * h * inter)}


def gemm_ceiling(threads: int, shape: dict | None = None, tokens: int = 3072, reps: int = 6, device: str = "cpu") -> dict:
    """Best dense ``torch.matmul`` throughput (FLOP/s) in fp32 and bf16 with ``threads`` threads.

    Square matrices of 1024 and 2048, plus -- when ``shape`` (see :func:`encoder_shape`) is given -- the
    encoder's own linear-layer products for ``tokens`` tokens (tokens x hidden x hidden, tokens x hidden x
    intermediate and back), which on some CPUs run faster than large squares. The best over all shapes and
    repetitions: the highest matrix-multiply rate this machine showed, so MFU against it is not flattered.
    On a CUDA ``device`` each timing is bracketed by ``torch.cuda.synchronize`` and 4096 / 8192 squares are added.
    """
    import torch

    torch.set_num_threads(threads)
    dims = [(1024, 1024, 1024), (2048, 2048, 2048)]
    cuda = device.startswith("cuda")
    if cuda:
        dims += [(4096, 4096, 4096), (8192, 8192, 8192)]
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    if shape is not None:
        h, i = shape["hidden"], shape["intermediate"]
        dims += [(tokens, h, h), (tokens, h, i), (tokens, i, h)]
    out = {}
    for name, dtype in (("fp32", torch.float32), ("bf16", torch.bfloat16)):
        best = 0.0
        for m, k, n in dims:
            a, b = torch.randn(m, k, dtype=dtype, device=device), torch.randn(k, n, dtype=dtype, device=device)
            for _ in range(2):
                torch.matmul(a, b)
            for _ in range(reps):
                sync()
                t = time.perf_counter()
                torch.matmul(a, b)
                sync()
                best = max(best, 2.0 * m * k * n / (time.perf_counter() - t))
        out[name] = best
    return out
