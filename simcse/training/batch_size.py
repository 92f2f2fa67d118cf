"""The contrastive batch as the paper states it: a **global** batch over all processes, from which the
per-device batch is derived, so that one GPU or eight train the same experiment.

SimCSE's in-batch negatives are gathered across processes (:mod:`simcse.training.distributed`), so the contrastive
batch is ``per_device_train_batch_size * world_size``. The reference's example scripts fix the per-device
batch instead (``run_sup_example.sh``: 4 GPUs x 128 = 512), which changes the experiment with the GPU count.
Plain gradient accumulation is no substitute: each accumulated step sees only its own negatives. Where one
device cannot hold its share, ``--gradient_cache_chunk_size`` keeps the whole batch in the loss.
"""
from __future__ import annotations

import os

from simcse.files.checks import check_int


class BatchSizeError(ValueError):
    """A global batch that cannot be split over the processes, or an explicit per-device batch that disagrees."""


def world_size_from_env(environ=os.environ) -> int:
    """The number of training processes: ``WORLD_SIZE`` as torchrun sets it, 1 when unset.

    Raises:
        BatchSizeError: ``WORLD_SIZE`` is set but is not an integer >= 1.
    """
    raw = environ.get("WORLD_SIZE", "1")
    try:
        world = int(raw)
    except ValueError:
        world = 0
    if world < 1:
        raise BatchSizeError(f"environment variable WORLD_SIZE must be an integer >= 1, got {raw!r}")
    return world


def derive_per_device_batch(global_batch_size: int, world_size: int, per_device: int | None = None,
                            allow_mismatch: bool = False) -> int:
    """The per-device training batch (sentences-tuples per process per step) for ``global_batch_size``.

    Args:
        global_batch_size: the contrastive batch over all processes (paper: 64 or 512), an integer >= 1.
        world_size: number of processes (GPUs), an integer >= 1.
        per_device: an explicit ``--per_device_train_batch_size``, or None when the user gave none.
        allow_mismatch: keep an explicit ``per_device`` whose product with ``world_size`` is not the global
            batch (the experiment then differs from the config's, on purpose).

    Returns:
        ``global_batch_size // world_size``, or ``per_device`` when it is given (and agrees, or is allowed).

    Raises:
        BatchSizeError: bad values; ``global_batch_size`` not divisible by ``world_size``; an explicit
            ``per_device`` with ``per_device * world_size != global_batch_size`` and not ``allow_mismatch``.
    """
    for name, value in (("global_batch_size", global_batch_size), ("world_size", world_size)):
        try:
            check_int(value, f"--{name}")
        except ValueError as e:
            raise BatchSizeError(str(e)) from None
    if per_device is not None:
        if per_device * world_size == global_batch_size or allow_mismatch:
            return per_device
        raise BatchSizeError(
            f"--per_device_train_batch_size {per_device} x {world_size} process(es) = {per_device * world_size} "
            f"disagrees with --global_batch_size {global_batch_size}; drop the per-device option (it is derived), "
            "or pass --allow_batch_size_mismatch true to train a different batch on purpose")
    if global_batch_size % world_size:
        raise BatchSizeError(f"--global_batch_size {global_batch_size} cannot be split evenly over {world_size} "
                             "processes; choose a process count that divides it")
    return global_batch_size // world_size
