"""torch.distributed helpers: an all-gather that keeps gradients for every rank's embeddings."""
from __future__ import annotations

import torch
import torch.distributed as dist


def world_info() -> tuple[int, int]:
    """(rank, world_size); (0, 1) when torch.distributed is not initialised."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


class _AllGatherWithGrad(torch.autograd.Function):
    """Forward: all_gather of (B, H) rows from every rank -> (W*B, H), ordered by rank.

    Backward: every rank's loss depends on every rank's rows, so the gradient of a rank's rows is the *sum*
    over ranks of d(loss_r)/d(rows): all_reduce(SUM) the incoming (W*B, H) gradient, keep this rank's slice.
    (The reference gathered with plain ``all_gather`` and so kept gradients only for local rows.)
    """

    @staticmethod
    def forward(ctx, x: torch.Tensor) -> torch.Tensor:
        rank, world = world_info()
        ctx.rank, ctx.rows = rank, x.shape[0]
        parts = [torch.empty_like(x) for _ in range(world)]
        dist.all_gather(parts, x.contiguous())
        return torch.cat(parts, dim=0)

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> torch.Tensor:
        grad = grad.contiguous()
        dist.all_reduce(grad, op=dist.ReduceOp.SUM)
        return grad[ctx.rank * ctx.rows : (ctx.rank + 1) * ctx.rows]


def all_gather_with_grad(x: torch.Tensor) -> torch.Tensor:
    """Gather (B, H) from all ranks into (W*B, H) with gradients flowing back to every rank's rows.

    Identity when not distributed. Every rank must pass the same B (HF Trainer's distributed sampler
    gives every rank the same number of examples per step).

    Raises:
        ValueError: the ranks passed different batch sizes.
    """
    if world_info()[1] == 1:
        return x
    _check_same_rows(x)
    return _AllGatherWithGrad.apply(x)


def _check_same_rows(x: torch.Tensor) -> None:
    """Raise ValueError unless every rank passes the same first dimension (a collective: all ranks call it)."""
    world = world_info()[1]
    sizes = [torch.zeros(1, dtype=torch.long, device=x.device) for _ in range(world)]
    dist.all_gather(sizes, torch.tensor([x.shape[0]], dtype=torch.long, device=x.device))
    if len({int(s) for s in sizes}) != 1:
        raise ValueError(f"all ranks must have the same local batch size to gather negatives; got {[int(s) for s in sizes]}")


def all_gather_nograd(x: torch.Tensor) -> torch.Tensor:
    """Gather (B, ...) from all ranks into (W*B, ...), ordered by rank, without gradients (queues, teacher
    scores). Identity when not distributed.

    Raises:
        ValueError: the ranks passed different first dimensions.
    """
    world = world_info()[1]
    if world == 1:
        return x
    _check_same_rows(x)
    parts = [torch.empty_like(x) for _ in range(world)]
    dist.all_gather(parts, x.detach().contiguous())
    return torch.cat(parts, dim=0)
