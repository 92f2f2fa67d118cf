"""MixCSE (Zhang et al., AAAI 2022, "Unsupervised Sentence Representation via Contrastive Learning with Mixing
Negatives"): extra hard negatives mixed from the positive and a negative feature, with stop-gradient.

Transcribed from the official code (BDBC-KG-NLP/MixCSE_AAAI2022, ``mixcse/models_mix.py`` ``cl_forward``;
``run_unsup_example.sh``: ``--lambdas 0.2 --temp 0.05``). With ``h_i`` view 0, ``h_i^+`` view 1 of sentence i
(N rows, after the training MLP), ``sg`` stop-gradient and indices modulo N, two mixed sets::

    m_j = sg( lambda h_j^+ + (1 - lambda) h_{j+1}^+ )        (positive j mixed with the next positive)
    a_i = sg( lambda h_i   + (1 - lambda) h_{i+1}   )        (anchor i mixed with the next anchor)

and query i's logits are three blocks of N over which a cross-entropy picks ``s(h_i, h_i^+)``::

    [ s(h_i, h_j^+)/tau ]_j ,  [ s(h_i, m_j)/tau ]_j  with the j = i-1 entry set to 0 ,
    [ s(a_i, h_j^+)/tau ]_j  with the j = i+1 entry set to 0

(``s`` cosine). The zeroed entries are the mixes that hold query i's own positive (``m_{i-1}`` carries
``h_i^+``, ``a_i`` carries ``h_{i+1}`` whose positive is ``h_{i+1}^+``); the official code multiplies them by 0,
so each still adds ``e^0 = 1`` to the denominator -- kept here. ``hard_negative_weight`` (the reference's
logit bonus, default 0) is added to the ``j = i`` entry of both mixed blocks, as in the official code.

Multi-process: the keys (view 1) are gathered with gradients and the anchors (view 0) without (the mixes are
stop-gradient); the rolls run over the gathered rows, as the official code gathers z1 and z2 first.
"""
from __future__ import annotations

import math
from typing import Mapping

import torch
import torch.nn.functional as F

from simcse.training.losses import cosine_logits
from simcse.training.objectives import register_objective
from simcse.training.objectives.base import LossContext, Objective

__all__ = ["MixCSE"]


@register_objective
class MixCSE(Objective):
    """MixCSE's loss (the official argument names).

    Args:
        temp: temperature tau > 0 (0.05).
        lambdas: the mixing ratio lambda in [0, 1] of the positive (anchor) feature (official ``--lambdas`` 0.2).
        hard_negative_weight: the logit added to each query's own mixed negatives (the reference's argument,
            default 0.0).

    Raises:
        ValueError: a hyperparameter out of range (naming it).
    """

    name = "mixcse"
    supports_grad_cache = True  # the mixes are detached: a function of the embeddings only

    def __init__(self, temp: float = 0.05, lambdas: float = 0.2, hard_negative_weight: float = 0.0):
        super().__init__()
        if isinstance(temp, bool) or not isinstance(temp, (int, float)) or not (math.isfinite(temp) and temp > 0):
            raise ValueError(f"mixcse temp must be a finite number > 0, got {temp!r}")
        if isinstance(lambdas, bool) or not isinstance(lambdas, (int, float)) or not 0 <= lambdas <= 1:
            raise ValueError(f"mixcse lambdas must be a number in [0, 1], got {lambdas!r}")
        if isinstance(hard_negative_weight, bool) or not isinstance(hard_negative_weight, (int, float)) \
                or not math.isfinite(hard_negative_weight):
            raise ValueError(f"mixcse hard_negative_weight must be a finite number, got {hard_negative_weight!r}")
        self.temp, self.lambdas, self.hard_negative_weight = float(temp), float(lambdas), float(hard_negative_weight)

    def get_config_dict(self) -> dict:
        return {"temp": self.temp, "lambdas": self.lambdas, "hard_negative_weight": self.hard_negative_weight}

    def loss(self, embeddings: torch.Tensor, batch: Mapping[str, torch.Tensor], context: LossContext) -> torch.Tensor:
        """``embeddings`` (B, 2, H) -> float32 scalar: cross-entropy over the (B, 3N) logits of the module doc."""
        batch_size = embeddings.shape[0]
        z1 = embeddings[:, 0]
        keys = context.gather(embeddings[:, 1])  # (N, H), with gradients
        anchors = context.gather_nograd(embeddings[:, 0].detach())  # (N, H), only mixed (stop-gradient)
        n = keys.shape[0]
        rows = torch.arange(batch_size, device=z1.device)
        labels = rows + context.rank * batch_size  # this process's queries in the gathered order
        lam = self.lambdas
        with torch.no_grad():
            mixed_keys = lam * keys + (1 - lam) * torch.roll(keys, -1, dims=0)  # m_j
            mixed_anchors = lam * anchors[labels] + (1 - lam) * anchors[(labels + 1) % n]  # a_i
        with torch.autocast(device_type=z1.device.type, enabled=False):
            plain = cosine_logits(z1, keys, self.temp)  # (B, N)
            zero = torch.zeros((), device=z1.device, dtype=plain.dtype)  # the logits' dtype (float64 too)
            to_mixed = cosine_logits(z1, mixed_keys, self.temp).index_put((rows, (labels - 1) % n), zero)
            from_mixed = cosine_logits(mixed_anchors, keys, self.temp).index_put((rows, (labels + 1) % n), zero)
            if self.hard_negative_weight:
                bonus = torch.zeros_like(plain).index_put((rows, labels), zero + self.hard_negative_weight)
                to_mixed, from_mixed = to_mixed + bonus, from_mixed + bonus
            return F.cross_entropy(torch.cat([plain, to_mixed, from_mixed], dim=1), labels)
