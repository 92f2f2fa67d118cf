"""The training losses as pure functions of model outputs: InfoNCE of embeddings (paper Section 3, Eq. 1, 4
and 5) and the auxiliary masked-language-model loss (Appendix D)."""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F


def check_temperature(temp, name: str = "temp") -> float:
    """``temp`` as a float when it is a usable softmax temperature (a finite number > 0); the one home of that
    rule (``--temp``, every objective's ``temp``, :func:`info_nce`).

    Raises:
        ValueError: not a finite number > 0 (names ``temp``).
    """
    if isinstance(temp, bool) or not isinstance(temp, (int, float)) or not math.isfinite(temp) or not temp > 0:
        raise ValueError(f"{name} must be a finite number > 0, got {temp!r}")
    return float(temp)


def check_hard_negative_alpha(alpha, name: str = "hard_negative_alpha") -> float:
    """``alpha`` (Eq. 5's weight of the own hard negative) as a float when it is a finite number >= 0.

    Raises:
        ValueError: not a finite number >= 0 (names ``hard_negative_alpha``).
    """
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or not math.isfinite(alpha) or not alpha >= 0:
        raise ValueError(f"{name} must be a finite number >= 0, got {alpha!r}")
    return float(alpha)


def cosine_logits(z1: torch.Tensor, z2: torch.Tensor, temp: float) -> torch.Tensor:
    """Cosine similarity of every row of ``z1`` (N, H) with every row of ``z2`` (M, H), divided by ``temp``.

    Computed in float32 whatever the input dtype, with autocast switched off here (under bf16/fp16 autocast
    the matrix product would otherwise run in half precision, and bf16 resolves a logit of 1/temp = 20 only
    to steps of 0.125). Zero vectors get similarity 0 (eps 1e-8, as ``torch.nn.CosineSimilarity``).
    Returns (N, M) float32.
    """
    with torch.autocast(device_type=z1.device.type, enabled=False):
        a = F.normalize(z1.float(), dim=-1, eps=1e-8)
        b = F.normalize(z2.float(), dim=-1, eps=1e-8)
        return (a @ b.T) / temp


def info_nce(
    z1: torch.Tensor,
    z2: torch.Tensor,
    *negatives: torch.Tensor | None,
    temp: float = 0.05,
    hard_negative_alpha: float = 1.0,
    labels: torch.Tensor | None = None,
) -> torch.Tensor:
    """SimCSE's InfoNCE loss with in-batch negatives and any number of negative sets.

    For query i with positive ``labels[i]`` (default i), negative sets ``z3 = negatives[0]`` and
    ``e = negatives[1:]``:

        l_i = -log  e^{sim(z1_i, z2_{p_i})/temp}
                    / ( sum_j e^{sim(z1_i, z2_j)/temp} + sum_j alpha^{[j = p_i]} e^{sim(z1_i, z3_j)/temp}
                        + sum_e sum_j e^{sim(z1_i, e_j)/temp} )

    which is Eq. 1/4 of the paper without negatives and Eq. 5 with one set (``alpha = hard_negative_alpha``,
    applied to the first set only); further sets (e.g. the neutral hypotheses of paper Table 7) append their
    logits to the denominator with weight 1. ``sim`` is cosine similarity. Returns the mean over queries, a
    float32 scalar.

    Args:
        z1: (B, H) queries (first dropout view, or premises). Any float dtype.
        z2: (M, H) keys holding the positives (second view / entailment); M >= B when keys were gathered
            from other devices.
        negatives: zero or more (M, H) negative sets aligned with ``z2``; the first is the hard negatives
            (contradictions). A trailing ``None`` is ignored (``info_nce(z1, z2, None)`` == ``info_nce(z1, z2)``).
        temp: temperature tau > 0 (paper: 0.05).
        hard_negative_alpha: alpha >= 0, Eq. 5's *multiplicative* weight on each query's own hard negative
            (alpha = 1 is the paper's Table 7 setting; 0 drops it from the denominator). The reference's
            ``hard_negative_weight`` w is added to that logit instead: alpha = exp(w), so its default 0.0 is
            alpha 1.0 (``simcse train --hard_negative_weight`` keeps the reference's meaning and converts).
        labels: optional (B,) int64 column of each query's positive in ``z2`` (default ``arange(B)``).

    Raises:
        ValueError: bad shapes, a ``None`` before a negative set, ``temp <= 0``, ``hard_negative_alpha < 0``,
            or a batch with a single sentence and no negative set (the loss would be identically 0: nothing
            to contrast).
    """
    negs = list(negatives)
    while negs and negs[-1] is None:
        negs.pop()
    check_temperature(temp)
    check_hard_negative_alpha(hard_negative_alpha)
    if z1.dim() != 2 or z2.dim() != 2 or z1.shape[1] != z2.shape[1]:
        raise ValueError(f"z1 and z2 must be (B, H) and (M, H); got {tuple(z1.shape)} and {tuple(z2.shape)}")
    for k, neg in enumerate(negs):
        if neg is None or neg.shape != z2.shape:
            got = None if neg is None else tuple(neg.shape)
            raise ValueError(f"negative set {k} (z{k + 3}) must have the shape of z2 {tuple(z2.shape)}; got {got}")
    batch = z1.shape[0]
    if labels is None:
        if z2.shape[0] < batch:
            raise ValueError(f"z2 has {z2.shape[0]} rows, fewer than the {batch} queries in z1")
        labels = torch.arange(batch, device=z1.device)
    if z2.shape[0] < 2 and not negs:
        raise ValueError(
            "InfoNCE needs at least 2 sentences per batch (in-batch negatives); got 1. "
            "Use per_device_train_batch_size >= 2."
        )

    logits = [cosine_logits(z1, z2, temp)]  # (B, M) float32
    for k, neg in enumerate(negs):
        sim = cosine_logits(z1, neg, temp)  # (B, M) float32
        if k == 0 and hard_negative_alpha != 1.0:
            # alpha multiplies exp(logit) of the own hard negative only: add log(alpha) to that logit.
            log_alpha = math.log(hard_negative_alpha) if hard_negative_alpha > 0 else float("-inf")
            bonus = torch.zeros_like(sim)
            bonus[torch.arange(batch, device=sim.device), labels] = log_alpha
            sim = sim + bonus
        logits.append(sim)
    return F.cross_entropy(torch.cat(logits, dim=1), labels)  # logits (B, (1 + len(negs)) * M)


def mlm_loss(logits: torch.Tensor, labels: torch.Tensor, n_masked: int | None = None) -> torch.Tensor:
    """Masked-LM cross-entropy of ``logits`` (N, L, vocab) against ``labels`` (N, L) int64, -100 = not masked.

    ``n_masked=None``: the mean over the masked tokens. Otherwise the *sum* over them divided by ``n_masked``
    (e.g. the masked-token count of a whole batch split into chunks, so per-chunk values add up to the batch
    mean). With nothing masked the result is 0 and keeps ``logits`` in the graph. Computed in float32;
    returns a float32 scalar (the reference's auxiliary MLM objective, paper Appendix D).
    """
    flat = labels.reshape(-1)
    count = int((flat != -100).sum()) if n_masked is None else n_masked
    if count == 0 or not (flat != -100).any():
        return logits.sum() * 0.0
    ce = F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), flat, ignore_index=-100, reduction="sum")
    return ce / count
