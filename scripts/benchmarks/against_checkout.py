"""Training speed of this checkout's trainer against another checkout's (an earlier commit), side by side.

    git worktree add /tmp/simcse-before <commit>        # or: git archive <commit> | tar -x -C /tmp/simcse-before
    python -m scripts.benchmarks.against_checkout --checkout /tmp/simcse-before              # bf16, 2 rounds
    python -m scripts.benchmarks.against_checkout --checkout . --new-args='--torch_compile true'  # one option, same code

Each measurement is a fresh ``scripts/benchmarks/train.py`` worker process (our trainer, unsupervised SimCSE on
the first wiki1m sentences; same model, batch, ``max_seq_length``, seed and timing rules: ``warmup`` untimed
steps, then ``steps`` timed), the "old" one being the other checkout's own copy of that script importing the
other checkout's ``simcse``. Rounds alternate the order (old, new / new, old) so a drift in machine load falls on
both; a round whose speed-up (old s/step over new) disagrees with its neighbours by more than 10% is repeated
(``--max-extra`` at most). The bf16 (or fp32) shape-matched GEMM ceiling is measured before and after
(``scripts.benchmarks.common``) and MFU is reported against it. Every line carries the 1-minute load average. The
last line is machine-readable::

    train_speedup_vs_checkout precision=bf16 old_sent_s=... new_sent_s=... speedup=X.XX cpu_time_ratio=... mfu_old=... mfu_new=...

``cpu_time_ratio`` is the old over the new process CPU time per step: on a shared machine, where wall time
depends on what else runs, it is the steadier of the two (with ``--threads 1`` especially: no thread waits
for a descheduled partner).
"""
from __future__ import annotations

import argparse
import shlex
from pathlib import Path

from scripts.benchmarks.common import (TOLERANCE, add_busy_option, check_idle, default_data, default_model, format_ceiling, int_at_least, load_avg,
                                       read_sentences, real_tokens_per_step, repeat_until_stable, run_train_worker,
                                       settle_ceilings)

from simcse.research.flops import encoder_shape, model_flops


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--checkout", required=True, type=Path, help="the other checkout (its scripts/ and simcse/)")
    p.add_argument("--precision", default="bf16", choices=["bf16", "fp32"])
    p.add_argument("--data", type=Path, default=None)
    p.add_argument("--model", default=None)
    p.add_argument("--batch-size", type=int_at_least(2), default=64)
    p.add_argument("--max-seq-length", type=int_at_least(2), default=32)
    p.add_argument("--warmup", type=int_at_least(1), default=3)
    p.add_argument("--steps", type=int_at_least(1), default=8)
    p.add_argument("--rounds", type=int_at_least(1), default=2)
    p.add_argument("--max-extra", type=int_at_least(0), default=2,
                   help=f"extra rounds while per-round speed-ups disagree by more than {100 * TOLERANCE:.0f}%%")
    p.add_argument("--threads", type=int_at_least(1), default=2)
    p.add_argument("--gemm-square", type=int_at_least(1), default=None,
                   help="side of the large square product beside the GEMM ceiling (default 2048 on CPU)")
    p.add_argument("--by", choices=["wall", "cpu"], default="wall",
                   help="what the per-round speed-up (and its agreement check) compares: wall time, or process CPU "
                        "time (steadier on a shared machine, with --threads 1 especially)")
    p.add_argument("--old-args", type=shlex.split, default=[],
                   help="extra simcse.training.train options of the old side, one string: --old-args='--optim adamw_torch'")
    p.add_argument("--new-args", type=shlex.split, default=[], help="the same for the new side")
    add_busy_option(p)
    args = p.parse_args(argv)
    check_idle(args.allow_busy)
    if not any((args.checkout / "scripts" / x).is_file() for x in ("benchmarks/train.py", "benchmark_train.py")):
        p.error(f"--checkout {args.checkout}: no scripts/benchmarks/train.py (or the older scripts/benchmark_train.py) "
                "there (expected a simcse checkout)")
    # the other checkout's worker runs in its own folder: every path it is given is absolute
    args.data = (args.data or default_data()).resolve()
    args.model = args.model or default_model()
    if Path(args.model).exists():
        args.model = str(Path(args.model).resolve())
    shape = encoder_shape(args.model)
    common = ["--data", str(args.data), "--model", args.model, "--batch-size", str(args.batch_size),
              "--max-seq-length", str(args.max_seq_length), "--warmup", str(args.warmup), "--steps", str(args.steps),
              "--threads", str(args.threads), "--side", "ours", "--precision", args.precision]
    tokens = real_tokens_per_step(args.model, read_sentences(args.data, args.batch_size * (args.warmup + args.steps)),
                                  args.batch_size, args.max_seq_length)
    print(f"checkout={args.checkout} precision={args.precision} batch={args.batch_size} max_seq_length="
          f"{args.max_seq_length} warmup={args.warmup} steps={args.steps} threads={args.threads} "
          f"old_args={args.old_args} new_args={args.new_args} by={args.by} real_tokens/step~{tokens} {load_avg()}", flush=True)
    gemm = common[:-4] + ["--gemm", "--gemm-tokens", str(tokens)]
    gemm += ["--gemm-square", str(args.gemm_square)] if args.gemm_square else []

    def ceiling(when: str) -> dict:
        c = run_train_worker(gemm)
        print(f"GEMM ceiling ({when}): {format_ceiling(c)}, {load_avg()}", flush=True)
        return c

    before = ceiling("before")
    runs: dict[str, list[dict]] = {"old": [], "new": []}

    def one_round(r: int) -> float:
        for side in (("old", "new") if r % 2 == 0 else ("new", "old")):
            extra = args.old_args if side == "old" else args.new_args
            res = run_train_worker(common + (["--ours-args", *extra] if extra else []),
                                   checkout=str(args.checkout) if side == "old" else None)
            runs[side].append(res)
            print(f"round {r + 1} {side}: {res['wall_s'] / res['steps']:.3f} s/step (CPU {res['cpu_s'] / res['steps']:.3f}"
                  f" s/step), {args.batch_size * res['steps'] / res['wall_s']:.1f} sentences/s, peak RSS "
                  f"{res['peak_rss_mib']:.0f} MiB, tokens/step {res['tokens'] / res['steps']:.0f}, {load_avg()}", flush=True)
        key = "wall_s" if args.by == "wall" else "cpu_s"
        ratio = runs["old"][-1][key] / runs["new"][-1][key]
        other = "cpu_s" if key == "wall_s" else "wall_s"
        print(f"round {r + 1}: speed-up {ratio:.2f} by {args.by} time ({runs['old'][-1][other] / runs['new'][-1][other]:.2f} "
              f"by {'CPU' if other == 'cpu_s' else 'wall'} time)", flush=True)
        return ratio

    ratios, (a, b), stable = repeat_until_stable(one_round, args.rounds, args.max_extra)
    best, _, _ = settle_ceilings(before, lambda: ceiling("after"), args.max_extra)
    peak = best[args.precision]["model"]
    out = {}
    for side in ("old", "new"):
        rs = runs[side][a:b]
        steps = sum(x["steps"] for x in rs)
        wall = sum(x["wall_s"] for x in rs) / steps
        cpu = sum(x["cpu_s"] for x in rs) / steps
        flops = model_flops(shape, sum(x["tokens"] for x in rs), sum(x["sum_sq"] for x in rs)) / steps
        out[side] = {"sent_s": args.batch_size / wall, "s_step": wall, "cpu_step": cpu, "mfu": flops / wall / peak,
                     "mfu_cpu": flops / (cpu / args.threads) / peak}  # as if the threads had the cores to themselves
        print(f"{side}: {out[side]['sent_s']:.1f} sentences/s, {wall:.3f} s/step (CPU {cpu:.3f}), MFU "
              f"{100 * out[side]['mfu']:.1f}% (by CPU time {100 * out[side]['mfu_cpu']:.1f}%) of {peak / 1e9:.0f} GFLOP/s "
              f"({args.precision}, shape-matched), rounds {a + 1}-{b}")
    speedup = out["old"]["s_step"] / out["new"]["s_step"]
    cpu_ratio = out["old"]["cpu_step"] / out["new"]["cpu_step"]  # steadier than wall time on a shared machine
    print(f"per-round speed-ups by {args.by} time {' '.join(f'{x:.2f}' for x in ratios)}" + ("" if stable else " (unsteady)"))
    print(f"train_speedup_vs_checkout precision={args.precision} old_sent_s={out['old']['sent_s']:.1f} "
          f"new_sent_s={out['new']['sent_s']:.1f} speedup={speedup:.2f} cpu_time_ratio={cpu_ratio:.2f} mfu_old={out['old']['mfu']:.3f} "
          f"mfu_new={out['new']['mfu']:.3f}", flush=True)
    return {"speedup": speedup, "cpu_time_ratio": cpu_ratio, "ratios": ratios, "stable": stable, **out}


if __name__ == "__main__":
    main()
