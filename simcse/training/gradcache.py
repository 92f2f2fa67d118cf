"""Gradient caching for contrastive losses over large batches (Gao, Zhang, Han & Callan 2021, "Scaling Deep
Contrastive Learning Batch Size under Memory Limited Setup", arXiv 2101.06983, a.k.a. GradCache).

The InfoNCE loss couples every sentence of the batch with every other one, so the batch cannot simply be split
into gradient-accumulation micro-batches (each would see fewer negatives). GradCache splits only the *encoder*:

1. **pass 1** (no autograd graph): encode the batch chunk by chunk -> embeddings ``z`` (N, ...); before each
   chunk, record the random-number-generator state (dropout masks are drawn from it);
2. compute the loss on the full ``z`` turned into a detached leaf, and ``g = dloss/dz`` (cheap: only the
   embeddings are in the graph);
3. **pass 2**: re-encode each chunk *with* autograd, restoring that chunk's RNG state so dropout draws exactly
   the masks of pass 1, and backpropagate the surrogate ``<z_chunk, g_chunk>`` whose gradient w.r.t. the
   parameters is the chunk's share of ``dloss/dtheta`` (chain rule). Parameter gradients accumulate in
   ``.grad`` over the chunks.

Peak activation memory is that of one chunk instead of the whole batch, at the cost of one extra forward pass.
The result equals the uncached gradient up to float rounding, *with* dropout, because the masks are replayed.

This module is framework-free: the caller supplies ``encode`` (runs the model on a chunk), ``loss_fn`` (the
loss on the full embeddings) and ``backward`` (e.g. ``accelerator.backward`` with loss scaling);
:meth:`simcse.training.trainer.SimCSETrainer.training_step` wires it into HF Trainer.
"""
from __future__ import annotations

import contextlib
from typing import Callable, Iterable, Mapping, Sequence

import torch

from simcse.files.checks import check_int

__all__ = ["RandContext", "split_chunks", "cuda_devices_of", "grad_cache_step", "GradCacheError"]


class GradCacheError(ValueError):
    """A loss that gradient caching cannot train exactly (found at the first cached step; one line)."""


def cuda_devices_of(*objs) -> list[int]:
    """Sorted CUDA device indices of the tensors found in ``objs`` (tensors, or mappings/sequences of them)."""
    found: set[int] = set()

    def visit(o):
        if isinstance(o, torch.Tensor):
            if o.is_cuda:
                found.add(o.get_device())
        elif isinstance(o, Mapping):
            for v in o.values():
                visit(v)
        elif isinstance(o, (list, tuple)):
            for v in o:
                visit(v)

    for o in objs:
        visit(o)
    return sorted(found)


class RandContext:
    """Snapshot of the CPU RNG state (and the CUDA RNG state of ``devices``) taken at construction.

    ``with ctx:`` forks the RNG (``torch.random.fork_rng``), restores the snapshot, runs the block, and on exit
    puts back the RNG state that was current *before* the block. So code run inside draws exactly the random
    numbers (dropout masks) drawn by code that ran right after the snapshot, and the global RNG stream is
    left as if the block had not run. Same idea as ``torch.utils.checkpoint`` and GradCache's ``RandContext``.

    Args:
        devices: CUDA device indices whose generators to snapshot (e.g. :func:`cuda_devices_of` the inputs, or
            all ``device_ids`` of a ``DataParallel``). Empty on CPU. Only these are touched, so no CUDA context
            is created on other GPUs.
    """

    def __init__(self, devices: Iterable[int] = ()):
        self.devices = sorted(set(int(d) for d in devices))
        self.cpu_state = torch.get_rng_state()
        self.cuda_states = [torch.cuda.get_rng_state(d) for d in self.devices]
        self._fork = None

    def __enter__(self):
        self._fork = torch.random.fork_rng(devices=self.devices, enabled=True)
        self._fork.__enter__()
        torch.set_rng_state(self.cpu_state)
        for d, state in zip(self.devices, self.cuda_states):
            torch.cuda.set_rng_state(state, d)
        return self

    def __exit__(self, *exc):
        fork, self._fork = self._fork, None
        return fork.__exit__(*exc)


def split_chunks(inputs: Mapping[str, torch.Tensor], chunk_size: int) -> list[dict[str, torch.Tensor]]:
    """Split every tensor of ``inputs`` along dim 0 into chunks of ``chunk_size`` rows (the last may be smaller).

    Shapes: each value (N, ...) -> list of dicts of (<= chunk_size, ...) views (no copy). All values must have the
    same N. Non-tensor values are not allowed (they cannot be split).

    Raises:
        ValueError: ``chunk_size < 1``, an empty mapping, a non-tensor value, or values with different N.
    """
    if not isinstance(chunk_size, int) or chunk_size < 1:
        raise ValueError(f"chunk_size must be an integer >= 1, got {chunk_size!r}")
    if not inputs:
        raise ValueError("cannot split an empty batch")
    sizes = {}
    for k, v in inputs.items():
        if not isinstance(v, torch.Tensor):
            raise ValueError(f"batch value {k!r} is a {type(v).__name__}, not a tensor; cannot split it into chunks")
        sizes[k] = v.shape[0]
    if len(set(sizes.values())) != 1:
        raise ValueError(f"all batch tensors must have the same first dimension to be chunked; got {sizes}")
    n = next(iter(sizes.values()))
    return [{k: v[s : s + chunk_size] for k, v in inputs.items()} for s in range(0, n, chunk_size)]


def grad_cache_step(
    chunks: Sequence[Mapping[str, torch.Tensor]],
    encode: Callable[[Mapping[str, torch.Tensor]], torch.Tensor],
    loss_fn: Callable[[torch.Tensor], torch.Tensor],
    backward: Callable[[torch.Tensor], None],
    *,
    no_sync: Callable[[], contextlib.AbstractContextManager] | None = None,
    extra_loss: Callable[[int, Mapping[str, torch.Tensor], torch.Tensor], torch.Tensor | None] | None = None,
    devices: Iterable[int] | None = None,
    loss_params: Mapping[str, torch.Tensor] | None = None,
) -> torch.Tensor:
    """One GradCache forward/backward over ``chunks``; parameter gradients are *accumulated* into ``.grad``.

    Args:
        chunks: the batch split along dim 0 (e.g. by :func:`split_chunks`); chunk ``c`` has ``n_c`` rows.
        encode: ``encode(chunk) -> (n_c, ...)`` embeddings (any float dtype, e.g. bf16 under autocast). Called
            twice per chunk: once under ``torch.no_grad`` and once with autograd, with identical RNG state.
        loss_fn: ``loss_fn(z) -> scalar`` on ``z = cat(pass-1 embeddings)`` (N, ...), a float32 leaf tensor.
            It may contain collectives (an all-gather with gradient, see :mod:`simcse.training.distributed`): it is
            evaluated and differentiated exactly once per call, so every rank runs the same collectives.
        backward: called once per chunk with the scalar surrogate ``sum(z_c.float() * g_c)`` (+ the chunk's
            ``extra_loss``); must backpropagate it (``loss.backward()`` or ``accelerator.backward`` -- which
            applies the fp16 loss scaler). Any constant scaling (gradient accumulation) belongs in here.
        no_sync: optional context-manager factory (e.g. ``ddp_model.no_sync``) entered for every chunk's backward
            but the last, so DDP all-reduces the accumulated gradients once, after the last chunk.
        extra_loss: optional ``extra_loss(i, chunk, rep) -> scalar or None`` computed inside chunk ``i``'s pass-2
            graph, with ``rep`` that chunk's pass-2 embeddings (with their graph), and added to its surrogate: a
            loss that decomposes over chunks (the auxiliary MLM loss, a term on the chunk's token states or
            embeddings) is backpropagated with it, without caching. It runs inside the chunk's restored RNG
            context.
        devices: CUDA devices whose RNG to save/restore; default: the devices of the chunk tensors.
        loss_params: ``{name: parameter}`` that ``loss_fn`` may use besides ``z`` (an objective's learned
            temperature, a head over the whole batch's embeddings): their gradient is taken from the one loss
            evaluation together with ``z``'s and added to the last chunk's surrogate as ``sum(p * g_p)`` (a term
            whose gradient is ``g_p``), so ``backward`` accumulates it into ``p.grad`` with the same scaling, and
            DDP reduces it with the last chunk's gradients: such a parameter trains as it does without caching.

    Returns:
        The loss (detached, float32 scalar) -- the value of ``loss_fn`` (the extra losses are not included).

    Raises:
        ValueError: no chunks, or ``encode`` returned a batch dimension different from the chunk's.

    Equality with the uncached gradient holds when ``encode`` is a deterministic function of its input and the
    RNG state (dropout). Modules whose forward pass mutates state (BatchNorm running statistics) would see
    every chunk twice.
    """
    if len(chunks) == 0:
        raise ValueError("grad_cache_step needs at least one chunk")
    devs = cuda_devices_of(list(chunks)) if devices is None else list(devices)

    # pass 1: embeddings without a graph, one RNG snapshot per chunk
    states: list[RandContext] = []
    reps: list[torch.Tensor] = []
    with torch.no_grad():
        for chunk in chunks:
            states.append(RandContext(devs))
            reps.append(encode(chunk))
    for chunk, rep in zip(chunks, reps):
        n = next(iter(chunk.values())).shape[0]
        if rep.shape[0] != n:
            raise ValueError(f"encode returned {rep.shape[0]} rows for a chunk of {n}")

    # loss on the whole batch and its gradient w.r.t. the embeddings (the "cache")
    z = torch.cat(reps, dim=0).detach().float().requires_grad_(True)
    del reps
    watched = [p for p in (loss_params or {}).values() if p.requires_grad]
    with torch.enable_grad():
        loss = loss_fn(z)
        grad, *others = torch.autograd.grad(loss, [z, *watched], allow_unused=True)
    carried = [(p, g.detach()) for p, g in zip(watched, others) if g is not None]
    grads = grad.split([next(iter(c.values())).shape[0] for c in chunks], dim=0)

    # pass 2: replay each chunk with autograd and the same dropout masks; backprop the cached gradient
    last = len(chunks) - 1
    for i, (chunk, state, g) in enumerate(zip(chunks, states, grads)):
        sync = no_sync() if (no_sync is not None and i < last) else contextlib.nullcontext()
        with sync:
            with state:
                rep = encode(chunk)
                surrogate = torch.dot(rep.float().flatten(), g.flatten())
                if extra_loss is not None:
                    extra = extra_loss(i, chunk, rep)
                    if extra is not None:
                        surrogate = surrogate + extra
                if i == last and carried:  # the loss's own parameters: d(sum(p * g_p))/dp = g_p
                    surrogate = surrogate + sum((p.float() * g.float()).sum() for p, g in carried)
            backward(surrogate)
    return loss.detach()


def check_chunk_size(value, name: str = "gradient_cache_chunk_size") -> int | None:
    """The gradient-cache chunk size (examples per encoder pass): None or 0 mean off (returned as None).

    Raises:
        ValueError: not None and not an integer >= 0 (one line naming ``name``).
    """
    return check_int(value, name, 0, allow_none=True, hint=" (0 = off)") or None
