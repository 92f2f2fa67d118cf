"""AnglE (Li and Li, ACL 2024, arXiv 2309.12871, "AnglE-optimized Text Embeddings") on scored pairs.

The loss is ``cosine_w * L_cos + ibn_w * L_ibn + angle_w * L_angle`` (paper Section 3; the official code's
``AngleLoss`` for its "format A", ``text1, text2, label``, github.com/SeanLee97/AnglE ``angle_emb/loss.py``):

* ``L_cos``: CoSENT on ``cosine_tau * cos(u_i, v_i)`` (:mod:`simcse.training.objectives.cosent`).
* ``L_ibn``: in-batch negatives over the 2B sentences: each sentence of a *positive* pair against the other
  2B - 1 (itself excluded), cosine * ``ibn_tau``, cross-entropy with its partner as the target, averaged over
  all 2B rows. A pair is positive when its score truncated to an integer is non-zero (the official code's
  ``labels.int()``), so STS-B pairs scored below 1 add no in-batch term, and scores in [0, 1) none at all.
* ``L_angle``: the angle difference in complex space. Each embedding is split into a real half and an
  imaginary half (z = a + bi, w = c + di); the "angle" score is ``|sum(Re + Im of (z / w) * |w| / |z|)|``
  (``angle_pooling_strategy`` "sum"; "mean" divides by H), i.e. ``|cos(u, v) + sin-term|``, then the CoSENT
  ranking on ``angle_tau`` times it. An odd H is padded with one zero (as sentence-transformers does).

Defaults are the official README's STS-B recipe: ``cosine_w 1.0, ibn_w 1.0, angle_w 0.02``, every tau 20 (the
official trainer's command-line default sets ``cosine_w 0``). sentence-transformers' ``AnglELoss`` is the angle
term alone (``cosine_w 0, ibn_w 0, angle_w 1``).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from simcse.training.objectives import register_objective
from simcse.training.objectives.base import LossContext, Objective
from simcse.training.objectives.cosent import check_pairs, gather_pairs, ranked_pair_loss

__all__ = ["AnglE", "angle_similarity"]


def angle_similarity(u: torch.Tensor, v: torch.Tensor, pooling: str = "sum") -> torch.Tensor:
    """The AnglE pair score (B,) of u, v (B, H): ``|pool(Re, Im of the normalised complex quotient u / v)|``.

    With z = a + bi (u split in halves) and w = c + di: ``Re = (ac + bd) / (|z||w|)``, ``Im = (bc - ad) /
    (|z||w|)``, pooled by "sum" over all H coordinates (or "mean"). float32.
    """
    u, v = u.float(), v.float()
    if u.shape[-1] % 2:
        u, v = F.pad(u, (0, 1)), F.pad(v, (0, 1))
    a, b = u.chunk(2, dim=-1)
    c, d = v.chunk(2, dim=-1)
    norms = u.norm(dim=-1, keepdim=True) * v.norm(dim=-1, keepdim=True)
    parts = torch.cat([(a * c + b * d) / norms, (b * c - a * d) / norms], dim=-1)  # (B, H)
    pooled = parts.sum(-1) if pooling == "sum" else parts.mean(-1)
    return pooled.abs()


@register_objective
class AnglE(Objective):
    """AnglE on scored pairs (see the module for the terms and where the defaults come from).

    Args:
        cosine_w, ibn_w, angle_w: the weights of the three terms (>= 0, not all 0); a 0 weight skips its term.
        cosine_tau, ibn_tau, angle_tau: the scales of the three terms (> 0).
        angle_pooling_strategy: "sum" (official default) or "mean".

    Raises:
        ValueError: a negative weight, all weights 0, a non-positive tau, or an unknown pooling strategy.
    """

    name = "angle"
    input_columns = ("sent0", "sent1")
    label_columns = ("score",)
    min_batch = 2

    def __init__(self, cosine_w: float = 1.0, ibn_w: float = 1.0, angle_w: float = 0.02, cosine_tau: float = 20.0,
                 ibn_tau: float = 20.0, angle_tau: float = 20.0, angle_pooling_strategy: str = "sum"):
        super().__init__()
        for key, value, positive in (("cosine_w", cosine_w, False), ("ibn_w", ibn_w, False),
                                     ("angle_w", angle_w, False), ("cosine_tau", cosine_tau, True),
                                     ("ibn_tau", ibn_tau, True), ("angle_tau", angle_tau, True)):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0 or (positive and value == 0):
                raise ValueError(f"--loss_args {key} for --loss angle must be a {'positive' if positive else 'non-negative'} "
                                 f"number, got {value!r}")
        if cosine_w == ibn_w == angle_w == 0:
            raise ValueError("--loss_args for --loss angle: cosine_w, ibn_w and angle_w are all 0 (no loss)")
        if angle_pooling_strategy not in ("sum", "mean"):
            raise ValueError(f"--loss_args angle_pooling_strategy for --loss angle must be 'sum' or 'mean', "
                             f"got {angle_pooling_strategy!r}")
        self.weights = {"cosine": float(cosine_w), "ibn": float(ibn_w), "angle": float(angle_w)}
        self.taus = {"cosine": float(cosine_tau), "ibn": float(ibn_tau), "angle": float(angle_tau)}
        self.angle_pooling_strategy = angle_pooling_strategy

    def loss(self, embeddings: torch.Tensor, batch, context: LossContext | None = None) -> dict[str, torch.Tensor]:
        """embeddings (B, 2, H), ``batch['score']`` (B,) -> ``{"cosine", "ibn", "angle"}`` weighted float32
        scalars (terms with weight 0 left out)."""
        labels = check_pairs(self.name, embeddings, batch).to(embeddings.device, torch.float32)
        embeddings, labels = gather_pairs(embeddings, labels, context)  # rank all processes' pairs
        emb = embeddings.float()
        u, v = emb[:, 0], emb[:, 1]
        out = {}
        if self.weights["cosine"] > 0:
            cos = F.cosine_similarity(u, v, dim=-1)
            out["cosine"] = self.weights["cosine"] * ranked_pair_loss(cos * self.taus["cosine"], labels)
        if self.weights["ibn"] > 0:
            out["ibn"] = self.weights["ibn"] * self._in_batch(emb, labels)
        if self.weights["angle"] > 0:
            ang = angle_similarity(u, v, self.angle_pooling_strategy)
            out["angle"] = self.weights["angle"] * ranked_pair_loss(ang * self.taus["angle"], labels)
        return out

    def _in_batch(self, emb: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        """L_ibn over the 2B sentences (rows 2i, 2i+1 = pair i), mean over all 2B rows."""
        n = emb.shape[0] * 2
        flat = F.normalize(emb.reshape(n, -1), dim=-1)
        sim = (flat @ flat.T) * self.taus["ibn"]
        sim = sim.masked_fill(torch.eye(n, dtype=torch.bool, device=sim.device), float("-inf"))
        partner = torch.arange(n, device=sim.device) ^ 1
        positive = labels.to(torch.int32).repeat_interleave(2) != 0  # the official labels.int()
        ce = F.cross_entropy(sim, partner, reduction="none")
        return (ce * positive).sum() / n

    def get_config_dict(self) -> dict:
        return {"cosine_w": self.weights["cosine"], "ibn_w": self.weights["ibn"], "angle_w": self.weights["angle"],
                "cosine_tau": self.taus["cosine"], "ibn_tau": self.taus["ibn"], "angle_tau": self.taus["angle"],
                "angle_pooling_strategy": self.angle_pooling_strategy}
