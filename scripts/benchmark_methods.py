"""What each SimCSE-family objective costs: step time and peak memory against plain unsupervised SimCSE on the
same model, data, batch and precision, in one run.

    python scripts/benchmark_methods.py                          # every method of METHODS, bf16, 1 round
    python scripts/benchmark_methods.py --methods esimcse,mixcse --precision fp32 --rounds 2

Every measurement is a fresh ``scripts/benchmark_train.py`` worker process (its timing rules: ``warmup``
untimed steps, then ``steps`` timed ones; peak resident memory of that process, and peak GPU memory on a GPU),
with the objective's ``--loss``/``--loss_args`` on top of the shared options (:data:`COMMON`: [CLS] + MLP in
training only, as the recipes). Rounds alternate the order of the methods so a drift in machine load falls on
all of them. Prints one line per run (with the 1-minute load average), then per method: wall and process-CPU
seconds per step and peak memory, each also as a ratio to ``simcse`` (the baseline row). On a shared machine
the CPU-time ratio is the steadier one.

To add a method, add a row to :data:`METHODS`: its name and the ``simcse train`` options that select it.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # script-only: the sibling benchmark modules

from bench_common import int_at_least  # noqa: E402
from benchmark_train import _run_child  # noqa: E402

COMMON = ["--pooler_type", "cls", "--mlp_only_train", "true"]


def _loss(name: str, **loss_args) -> list[str]:
    return ["--loss", name, "--loss_args", json.dumps(loss_args)] if loss_args else ["--loss", name]


# name -> the options that select it (the recipes' hyperparameters, configs/<name>_bert_base.json)
METHODS: dict[str, list[str]] = {
    "simcse": [],
    "esimcse": _loss("esimcse", temp=0.05, momentum=0.995, neg_size=160, dup_rate=0.32),
    "simcse_pp": _loss("simcse_pp", temp=0.05, pos_ratio=1.0, sampling_strategy="off_dropout", sw_weight=0.1, sw_temp=5.0),
    "mixcse": _loss("mixcse", temp=0.05, lambdas=0.2),
}
BASELINE = "simcse"


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--methods", default=",".join(METHODS), help=f"comma-separated, of {sorted(METHODS)} "
                                                                f"({BASELINE} is always measured)")
    p.add_argument("--precision", default="bf16", choices=["fp32", "bf16"])
    p.add_argument("--rounds", type=int_at_least(1), default=1)
    p.add_argument("--warmup", type=int_at_least(1), default=2)
    p.add_argument("--steps", type=int_at_least(1), default=4)
    p.add_argument("--threads", type=int_at_least(1), default=None, help="torch threads (default: all usable cores)")
    p.add_argument("--device", default="cpu", help="cpu or cuda")
    p.add_argument("--model", default=None, help="model folder (default: the embedded all-MiniLM-L6-v2)")
    p.add_argument("--data", default=None, help="one sentence per line (default: wiki1m_for_simcse.txt)")
    p.add_argument("--batch-size", type=int_at_least(2), default=64)
    args = p.parse_args(argv)
    names = [BASELINE] + [m.strip() for m in args.methods.split(",") if m.strip() and m.strip() != BASELINE]
    unknown = [m for m in names if m not in METHODS]
    if unknown:
        p.error(f"--methods: unknown {unknown}; expected some of {sorted(METHODS)}")
    threads = args.threads if args.threads is not None else len(os.sched_getaffinity(0))
    print(f"threads={threads} precision={args.precision} warmup={args.warmup} steps={args.steps} "
          f"rounds={args.rounds} load_avg_1min={os.getloadavg()[0]:.2f}", flush=True)
    runs: dict[str, list[dict]] = {}
    for r in range(args.rounds):
        for name in (names if r % 2 == 0 else list(reversed(names))):
            child = ["--side", "ours", "--precision", args.precision, "--threads", str(threads), "--device", args.device,
                     "--warmup", str(args.warmup), "--steps", str(args.steps), "--batch-size", str(args.batch_size),
                     *(["--model", args.model] if args.model else []), *(["--data", args.data] if args.data else []),
                     "--ours-args", *COMMON, *METHODS[name]]
            d = _run_child(child)
            runs.setdefault(name, []).append(d)
            print(f"round {r + 1} {name:10s} {d['wall_s'] / d['steps']:.3f} s/step (CPU {d['cpu_s'] / d['steps']:.3f}), "
                  f"peak RSS {d['peak_rss_mib']:.0f} MiB" + (f", peak GPU {d['peak_gpu_mib']:.0f} MiB"
                                                            if d.get("peak_gpu_mib") else "")
                  + f", load {os.getloadavg()[0]:.2f}", flush=True)
    summary = {}
    for name, ds in runs.items():
        steps = sum(d["steps"] for d in ds)
        mem = max((d.get("peak_gpu_mib") or d["peak_rss_mib"]) for d in ds)
        summary[name] = {"s_per_step": sum(d["wall_s"] for d in ds) / steps,
                         "cpu_s_per_step": sum(d["cpu_s"] for d in ds) / steps, "peak_mib": mem}
    base = summary[BASELINE]
    kind = "GPU" if args.device.startswith("cuda") else "RSS"
    print(f"\n| method | s/step | step time / {BASELINE} | CPU s/step | CPU time / {BASELINE} | peak {kind} MiB "
          f"| peak memory / {BASELINE} |")
    print("|---|---|---|---|---|---|---|")
    for name in names:
        s = summary[name]
        s["time_ratio"], s["memory_ratio"] = s["s_per_step"] / base["s_per_step"], s["peak_mib"] / base["peak_mib"]
        s["cpu_ratio"] = s["cpu_s_per_step"] / base["cpu_s_per_step"]
        print(f"| {name} | {s['s_per_step']:.3f} | {s['time_ratio']:.2f}x | {s['cpu_s_per_step']:.3f} | "
              f"{s['cpu_ratio']:.2f}x | {s['peak_mib']:.0f} | {s['memory_ratio']:.2f}x |")
    return summary


if __name__ == "__main__":
    main()
