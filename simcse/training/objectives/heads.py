"""The piece that the token-level objectives DiffCSE and InfoCSE share: their BatchNorm projection head (the seeds
of the masked copy each draws once per micro-batch are :class:`simcse.training.objectives.base.BatchSeeds`).

Both official codes (voidism/DiffCSE ``diffcse/models.py``, caskcsg/sentemb ``InfoCSE/infocse/models_cls_mlm.py``)
replace SimCSE's Linear + Tanh head with the same ``ProjectionMLP`` when trained with ``--batchnorm`` (their
scripts do), and both mask the batch with the SimCSE collator's 80/10/10 rule
(:func:`simcse.training.data.mask_tokens`).
"""
from __future__ import annotations

import torch
from torch import nn

__all__ = ["ProjectionMLP", "official_init_std"]


def official_init_std(encoder: nn.Module) -> float:
    """The std of the official heads' Linear init: the encoder config's ``initializer_range`` (0.02 for BERT and
    RoBERTa; 0.02 when the config has none)."""
    return float(getattr(getattr(encoder, "config", None), "initializer_range", None) or 0.02)


class ProjectionMLP(nn.Module):
    """Linear(H, 2H, no bias) -> BatchNorm(2H) -> ReLU -> Linear(2H, H, no bias) -> BatchNorm(H, no affine).

    The official ``ProjectionMLP`` (DiffCSE and InfoCSE, ``--batchnorm``), applied to the [CLS] states of all
    B*V views of a batch at once in training; it is a training-only head (the official scripts evaluate with
    ``cls_before_pooler``), so it is never saved into the inference folder. The BatchNorms normalise with the
    batch's statistics (``track_running_stats=False``: the official running averages are never read, and an
    objective may apply the head more than once per step without moving any state). (N, H) -> (N, H), N >= 2.

    Initialisation: both official codes build the head in ``cl_init`` before ``cls.init_weights()``, so BERT's
    ``_init_weights`` draws its Linear weights from N(0, ``initializer_range``) (0.02); ``init_std`` does the
    same (from the global generator); None keeps torch's default (Kaiming-uniform) Linear init. The BatchNorm
    affine weights start at 1 and 0 either way.
    """

    def __init__(self, hidden_size: int, init_std: float | None = None):
        super().__init__()
        h = int(hidden_size)
        self.net = nn.Sequential(
            nn.Linear(h, 2 * h, bias=False), nn.BatchNorm1d(2 * h, track_running_stats=False), nn.ReLU(),
            nn.Linear(2 * h, h, bias=False), nn.BatchNorm1d(h, affine=False, track_running_stats=False),
        )
        if init_std is not None:
            if not (isinstance(init_std, (int, float)) and init_std > 0):
                raise ValueError(f"ProjectionMLP init_std must be a number > 0, got {init_std!r}")
            for layer in (self.net[0], self.net[3]):
                nn.init.normal_(layer.weight, mean=0.0, std=float(init_std))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)
