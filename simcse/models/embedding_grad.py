"""The word-embedding gradient written row by row into one tensor kept between steps (a training speed option).

The gradient of an ``nn.Embedding`` lookup is dense: every backward allocates a fresh (vocab, H) tensor, fills it
with zeros (30,522 x 384 floats, 47 MB, for a BERT vocabulary at MiniLM's width), adds the batch's few thousand
token rows into it and hands it to autograd, which makes it the weight's ``.grad``; the Trainer's
``zero_grad(set_to_none=True)`` drops it after the optimizer step. On a CPU that fill of fresh memory was about 5% of
a bf16 training step (docs/performance.md, "Where the time goes").

:class:`ReusedGradEmbedding` (swapped in by :meth:`SimCSEModel.set_reused_embedding_grad`) returns the same
gradient without it: its backward keeps the tensor between steps and, when nothing else holds it any more (the
previous ``.grad`` was dropped), sets back to zero only the rows it wrote last time before adding the new rows.
Autograd gets a dense tensor as before, so everything downstream is unchanged: gradient accumulation, a weight
tied to an MLM decoder, clipping and the optimizer. While the kept tensor is still referenced (a second backward
within one step, a ``.grad`` someone keeps), and in a process group of more than one process (DDP writes the
averaged gradient, every process's rows, back into ``.grad``), a fresh zero tensor is used, as ``nn.Embedding``
does. The values are those of ``nn.Embedding``'s backward up to the summation order of a token
repeated in the batch.
"""
from __future__ import annotations

import torch
from torch import nn


def _storage_references(t: torch.Tensor) -> int:
    """How many tensors share ``t``'s storage (torch's count, read through its private binding; 0: unreadable)."""
    count = getattr(torch._C, "_storage_Use_Count", None)
    return int(count(t.untyped_storage()._cdata)) if count is not None else 0


_ALONE = _storage_references(torch.zeros(1))  # the count of a storage held by one tensor only, as read above


def _several_processes() -> bool:
    """True inside a torch.distributed group of more than one process."""
    dist = torch.distributed
    return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1


class _LookupReusingGrad(torch.autograd.Function):
    """``F.embedding(ids, weight, padding_idx)`` whose backward builds the weight's gradient in the owner's kept tensor."""

    @staticmethod
    def forward(ctx, weight: torch.Tensor, ids: torch.Tensor, owner: "ReusedGradEmbedding") -> torch.Tensor:
        ctx.save_for_backward(ids)
        ctx.owner = owner
        return nn.functional.embedding(ids, weight, owner.padding_idx)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        (ids,) = ctx.saved_tensors
        ids = ids.reshape(-1)
        grad = grad.reshape(-1, grad.shape[-1])
        owner = ctx.owner
        if owner.padding_idx is not None:  # as nn.Embedding: the padding row gets no gradient
            real = ids != owner.padding_idx
            ids, grad = ids[real], grad[real]
        weight = owner.weight
        state = owner.__dict__.setdefault("_reused_grad", {"kept": None, "written": None})
        kept = state["kept"]
        if (kept is None or _several_processes() or kept.shape != weight.shape or kept.dtype != weight.dtype
                or kept.device != weight.device or _ALONE == 0 or _storage_references(kept) > _ALONE):
            # first step, still held, or several processes: DDP writes the averaged gradient (every process's
            # rows) back into .grad in place, so the rows to clear are no longer the ones written here
            kept = torch.zeros_like(weight, memory_format=torch.contiguous_format)
        elif state["written"] is not None:
            kept.index_fill_(0, state["written"], 0)
        kept.index_add_(0, ids, grad.to(kept.dtype))
        state["kept"], state["written"] = kept, ids  # index_fill_ takes repeated rows as they are
        return kept.view(kept.shape), None, None  # a view: autograd takes it as .grad without a copy


class ReusedGradEmbedding(nn.Embedding):
    """``nn.Embedding`` whose training backward reuses one gradient tensor between steps (same values).

    Forward: ``F.embedding`` as before (ids of any shape (...,) -> (..., H) in the weight's dtype). When the weight
    needs a gradient, the backward adds the (T, H) output gradient (in the weight's dtype, rows of
    ``padding_idx`` left out as ``nn.Embedding`` does) into a kept (vocab, H) tensor whose other rows are zero,
    and returns it. No parameters or buffers of its own, so checkpoints are unaffected; the kept tensor is not
    saved and is rebuilt after a ``.to()``. :meth:`SimCSEModel.set_reused_embedding_grad` swaps the class in and
    back; embeddings with ``max_norm``, ``scale_grad_by_freq`` or ``sparse`` are never swapped (:func:`swappable`).
    """

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        if not (torch.is_grad_enabled() and self.weight.requires_grad):
            return super().forward(ids)
        return _LookupReusingGrad.apply(self.weight, ids, self)

    def __getstate__(self):  # copies and pickles leave the kept gradient behind
        state = self.__dict__.copy()
        state.pop("_reused_grad", None)
        return state


def swappable(module: nn.Module) -> bool:
    """True for a plain ``nn.Embedding`` whose backward :class:`ReusedGradEmbedding` computes (no max_norm,
    frequency scaling or sparse gradient)."""
    return (type(module) is nn.Embedding and module.max_norm is None and not module.scale_grad_by_freq
            and not module.sparse)
