"""SimCSE++ (Xu et al., EMNLP 2023, arXiv 2305.13192): off-dropout negatives and dimension-wise contrastive
learning (DCL).

Transcribed from the official code (Jiahao004/SimCSE-plus-plus, ``simcse/models_re_vicreg.py`` ``cl_forward``
as of commit 4c36662, the last version in which the DCL term is active; ``train_re_vicreg.py`` defaults;
``run_re_vicreg.sh``). With ``h_i, h_i^+`` the two dropout views of sentence i (after the training MLP),
``h_i^0`` its embedding with dropout off (a third, dropout-free forward that keeps its graph), ``s`` cosine
similarity, ``m`` the positive ratio (``pos_ratio``)::

    l_i = -m s(h_i, h_i^+)/tau + log( e^{m s(h_i, h_i^+)/tau} + sum_{j != i} e^{s(h_i^0, h_j^0)/tau} )

(the official code adds ``log(1e-45)`` to the ``j = i`` logit instead of dropping it; so does this module).
DCL contrasts the *dimensions* of the batch-normalised views (``BN`` without affine parameters, batch
statistics, eps 1e-5; N rows)::

    C = BN(H)^T BN(H^+) / N / tau_DCL                  (H x H)
    l_DCL = mean_k ( -C_kk + log sum_l e^{C_kl} )

and the loss is ``mean_i l_i + lambda l_DCL`` (``sw_weight`` lambda = 0.1, ``sw_temp`` tau_DCL = 5).

Multi-process: the off-dropout embeddings and both views are gathered (as the official code's latest version
does); this process's queries are contrasted with all processes' off-dropout keys, and DCL runs on the
gathered N = W*B rows normalised by N (the official code divides by the per-process batch, a factor W off:
here the gradient equals one process holding the whole batch). Gradient caching is refused: the
off-dropout pass needs the encoder's graph over the whole batch.
"""
from __future__ import annotations

import math
from typing import Mapping

import torch
import torch.nn.functional as F

from simcse.training.losses import cosine_logits, info_nce
from simcse.training.objectives import register_objective
from simcse.training.objectives.base import LossContext, Objective, encode_without_dropout, view_inputs

__all__ = ["SimCSEPlusPlus", "dcl_loss"]

_ENCODER_KEYS = ("input_ids", "attention_mask", "token_type_ids")
SMALL_NUM = math.log(1e-45)  # the official code's additive mask of the self-similarity logit
SAMPLING = ("off_dropout", "None")


def _at_least_fp32(t: torch.Tensor) -> torch.Tensor:
    """``t`` in float32, or as it is when it is float64 (half precision is upcast, double kept)."""
    return t if t.dtype == torch.float64 else t.float()


def dcl_loss(z1: torch.Tensor, z2: torch.Tensor, temp: float, eps: float = 1e-5) -> torch.Tensor:
    """Dimension-wise contrastive loss of two (N, H) views -> float32 scalar (float64 for float64 views): each dimension k of the
    batch-normalised first view is a query whose positive is the same dimension of the second view and whose
    negatives are the other dimensions (``C = BN(z1)^T BN(z2) / N / temp``, cross-entropy over rows of C).

    Raises:
        ValueError: fewer than 2 rows (batch statistics undefined) or ``temp <= 0``.
    """
    if z1.shape[0] < 2:
        raise ValueError(f"dcl_loss needs at least 2 rows (batch statistics), got {z1.shape[0]}")
    if not temp > 0:
        raise ValueError(f"dcl_loss temp must be > 0, got {temp!r}")
    with torch.autocast(device_type=z1.device.type, enabled=False):
        a = F.batch_norm(_at_least_fp32(z1), None, None, training=True, eps=eps)
        b = F.batch_norm(_at_least_fp32(z2), None, None, training=True, eps=eps)
        cov = a.T @ b / z1.shape[0] / temp  # (H, H)
        return (torch.logsumexp(cov, dim=-1) - torch.diagonal(cov)).mean()


@register_objective
class SimCSEPlusPlus(Objective):
    """SimCSE++: off-dropout negatives (``sampling_strategy="off_dropout"``) plus ``sw_weight`` x DCL.

    Args (the official argument names):
        temp: temperature tau > 0 of the instance-wise term (0.05).
        pos_ratio: m > 0, the factor on the positive logit (``run_re_vicreg.sh``: 1).
        sampling_strategy: ``"off_dropout"`` (SimCSE++) or ``"None"`` (SimCSE's in-batch negatives, e.g. DCL only).
        sw_weight: lambda >= 0 of the DCL term (0.1; 0 turns it off).
        sw_temp: tau_DCL > 0 (5, the official default "if it is SW with DE").

    Returns (from :meth:`loss`) ``{"contrastive": mean_i l_i, "dcl": lambda l_DCL}``.

    Raises:
        ValueError: a hyperparameter out of range (naming it).
    """

    name = "simcse_pp"
    supports_grad_cache = False  # the off-dropout forward keeps a whole-batch encoder graph inside loss()
    prefix_embeddings = False  # the off-dropout negatives are encoded again at full width inside loss()

    def __init__(self, temp: float = 0.05, pos_ratio: float = 1.0, sampling_strategy: str = "off_dropout",
                 sw_weight: float = 0.1, sw_temp: float = 5.0):
        super().__init__()
        for key, value in (("temp", temp), ("pos_ratio", pos_ratio), ("sw_temp", sw_temp)):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not (math.isfinite(value) and value > 0):
                raise ValueError(f"simcse_pp {key} must be a finite number > 0, got {value!r}")
        if isinstance(sw_weight, bool) or not isinstance(sw_weight, (int, float)) or not sw_weight >= 0:
            raise ValueError(f"simcse_pp sw_weight must be a number >= 0, got {sw_weight!r}")
        if sampling_strategy not in SAMPLING:
            raise ValueError(f"simcse_pp sampling_strategy must be one of {list(SAMPLING)}, got {sampling_strategy!r}")
        self.temp, self.pos_ratio, self.sw_weight, self.sw_temp = float(temp), float(pos_ratio), float(sw_weight), float(sw_temp)
        self.sampling_strategy = sampling_strategy

    def get_config_dict(self) -> dict:
        return {"temp": self.temp, "pos_ratio": self.pos_ratio, "sampling_strategy": self.sampling_strategy,
                "sw_weight": self.sw_weight, "sw_temp": self.sw_temp}

    def loss(self, embeddings: torch.Tensor, batch: Mapping[str, torch.Tensor], context: LossContext):
        """``embeddings`` (B, 2, H): the two dropout views. With off-dropout sampling, view 0 is encoded once more
        with dropout off (with its graph) through ``context.model``. Returns float32 scalars
        ``{"contrastive", "dcl"}`` (``dcl`` already multiplied by ``sw_weight``)."""
        batch_size = embeddings.shape[0]
        z1, z2 = embeddings[:, 0], embeddings[:, 1]
        labels = torch.arange(batch_size, device=z1.device) + context.rank * batch_size
        if self.sampling_strategy == "off_dropout":
            z0 = encode_without_dropout(context.model, view_inputs(batch, 0))
            with torch.autocast(device_type=z1.device.type, enabled=False):
                pos = self.pos_ratio * F.cosine_similarity(_at_least_fp32(z1), _at_least_fp32(z2), dim=-1, eps=1e-8) / self.temp  # (B,)
                neg = cosine_logits(z0, context.gather(z0), self.temp)  # (B, W*B)
                neg = neg.index_put((torch.arange(batch_size, device=z1.device), labels),
                                    neg[torch.arange(batch_size, device=z1.device), labels] + SMALL_NUM)
                contrastive = (torch.logsumexp(torch.cat([neg, pos[:, None]], dim=1), dim=1) - pos).mean()
        else:
            contrastive = info_nce(z1, context.gather(z2), temp=self.temp, labels=labels)
        parts = {"contrastive": contrastive}
        if self.sw_weight > 0:
            parts["dcl"] = self.sw_weight * dcl_loss(context.gather(z1), context.gather(z2), self.sw_temp)
        return parts
