"""FLOP counts of a BERT-style encoder: what model FLOPs utilisation (MFU) divides by a measured rate.

Useful FLOPs count the real (non-padding) tokens: :func:`model_flops`; :func:`encoder_shape` reads the sizes it needs
from a model's config. The project's benchmarks (``scripts/benchmarks/``, docs/performance.md) divide by a GEMM
ceiling they measure in the same run.
"""
from __future__ import annotations


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
