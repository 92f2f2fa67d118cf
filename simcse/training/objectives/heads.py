"""Pieces that the token-level objectives DiffCSE and InfoCSE share: their BatchNorm projection head and the
per-micro-batch masked copy of the batch (drawn once over the whole batch, read chunk by chunk).

Both official codes (voidism/DiffCSE ``diffcse/models.py``, caskcsg/sentemb ``InfoCSE/infocse/models_cls_mlm.py``)
replace SimCSE's Linear + Tanh head with the same ``ProjectionMLP`` when trained with ``--batchnorm`` (their
scripts do), and both mask the batch with the SimCSE collator's 80/10/10 rule
(:func:`simcse.training.data.mask_tokens`).
"""
from __future__ import annotations

from typing import Mapping

import torch
from torch import nn

__all__ = ["ProjectionMLP", "MicroBatchDraws", "chunk_rows"]


class ProjectionMLP(nn.Module):
    """Linear(H, 2H, no bias) -> BatchNorm(2H) -> ReLU -> Linear(2H, H, no bias) -> BatchNorm(H, no affine).

    The official ``ProjectionMLP`` (DiffCSE and InfoCSE, ``--batchnorm``), applied to the [CLS] states of all
    B*V views of a batch at once in training; it is a training-only head (the official scripts evaluate with
    ``cls_before_pooler``), so it is never saved into the inference folder. The BatchNorms normalise with the
    batch's statistics (``track_running_stats=False``: the official running averages are never read, and an
    objective may apply the head more than once per step without moving any state). (N, H) -> (N, H), N >= 2.
    """

    def __init__(self, hidden_size: int):
        super().__init__()
        h = int(hidden_size)
        self.net = nn.Sequential(
            nn.Linear(h, 2 * h, bias=False), nn.BatchNorm1d(2 * h, track_running_stats=False), nn.ReLU(),
            nn.Linear(2 * h, h, bias=False), nn.BatchNorm1d(h, affine=False, track_running_stats=False),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


def chunk_rows(full: Mapping[str, torch.Tensor], batch: Mapping[str, torch.Tensor], start: int) -> slice:
    """The rows ``start : start + b`` of ``full`` that the chunk ``batch`` (b, V, L') is, checked.

    Raises:
        RuntimeError: the chunk's ``input_ids`` are not those rows (a trainer that did not pass
            ``LossContext.chunk_start``): per-chunk draws would be read from the wrong sentences.
    """
    ids, fids = batch["input_ids"], full["input_ids"]
    rows = slice(int(start), int(start) + ids.shape[0])
    length = ids.shape[-1]
    ref = fids[rows]
    if ref.shape[:2] != ids.shape[:2] or not torch.equal(ref[..., :length], ids):
        raise RuntimeError(f"chunk of {ids.shape[0]} rows does not match full_batch rows {rows.start}:{rows.stop}; "
                           "the trainer must set LossContext.chunk_start for chunk_loss")
    return rows


class MicroBatchDraws:
    """Random draws made once per micro-batch over the whole (B, V, L) batch, then read per chunk.

    ``get(full_batch, context, make)`` returns ``make(full_batch, seed)`` computed once for each micro-batch
    (recognised by its ``input_ids`` tensor object) and cached until the next one. ``seed`` is
    ``context.draw_seed(micro)`` where ``micro`` counts the micro-batches of the current optimizer step, so the
    draws depend on (seed, step, rank, micro-batch) only: the same with or without gradient caching and after a
    resume (which starts at a step boundary). Nothing here is saved in checkpoints.
    """

    def __init__(self):
        self._ids = None
        self._step = None
        self._micro = -1
        self._value = None

    def get(self, full_batch: Mapping[str, torch.Tensor], context, make):
        ids = full_batch["input_ids"]
        if ids is not self._ids:
            step = int(context.global_step)
            self._micro = self._micro + 1 if step == self._step else 0
            self._step, self._ids = step, ids
            self._value = make(full_batch, context.draw_seed(self._micro))
        return self._value
