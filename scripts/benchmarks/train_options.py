"""What each training-speed option buys: our trainer with one option changed at a time, interleaved.

    python -m scripts.benchmarks.train_options                      # the default table (docs/performance.md)
    python -m scripts.benchmarks.train_options --precisions bf16 --variants '{"compile": ["--torch_compile", "true"]}'
    python -m scripts.benchmarks.train_options --model DIR --data FILE --precisions fp32 --rounds 1   # another model / data

Every measurement is a fresh ``scripts/benchmarks/train.py`` worker process (same model, data, batch size,
sequence length, seed and timing rules as that benchmark: ``warmup`` untimed steps, then ``steps`` timed
steps). Variants are given as extra ``simcse.training.train`` options; ``"default"`` is ours as shipped and ``"st"``
is sentence-transformers. Rounds alternate the order of the variants so a drift in machine load falls on
all of them. Prints one line per run and a summary: seconds per step (wall and process CPU), peak resident
memory and the speed-up of each variant's wall time over the ``baseline`` variant (default: ``baseline``).
"""
from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

from scripts.benchmarks.common import add_model_option, add_busy_option, check_idle, int_at_least, run_train_worker

_OFF = ["--padding_free", "false", "--cpu_dropout", "false", "--reuse_embedding_grad", "false"]
DEFAULT_VARIANTS = {
    # every speed option off: padded batch, transformers' SDPA attention, torch's dropout, nn.Embedding's gradient
    "baseline": _OFF,
    "baseline+eager_attention": [*_OFF, "--attn_implementation", "eager"],
    "baseline+pad_to_max_length": [*_OFF, "--pad_to_max_length", "true"],
    "baseline+padding_free": ["--cpu_dropout", "false", "--reuse_embedding_grad", "false"],
    "baseline+padding_free+cpu_dropout": ["--reuse_embedding_grad", "false"],
    "default": [],            # padding-free forward + CPU dropout masks + the reused embedding gradient (as shipped)
    "st": None,               # sentence-transformers, for reference
}


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--variants", default=None,
                   help='JSON {"name": [simcse.training.train options]}; null options = sentence-transformers '
                        f"(default: {json.dumps(DEFAULT_VARIANTS)})")
    add_model_option(p)
    p.add_argument("--data", type=Path, default=None, help="one sentence per line (default: wiki1m_for_simcse.txt)")
    p.add_argument("--baseline", default="baseline", help="variant the speed-ups are relative to")
    p.add_argument("--precisions", default="fp32,bf16")
    p.add_argument("--rounds", type=int_at_least(1), default=2)
    p.add_argument("--warmup", type=int_at_least(1), default=3)
    p.add_argument("--steps", type=int_at_least(1), default=6)
    p.add_argument("--threads", type=int_at_least(1), default=None, help="torch threads per run (default: all usable cores)")
    add_busy_option(p)
    args = p.parse_args(argv)
    check_idle(args.allow_busy)
    try:
        variants = json.loads(args.variants) if args.variants else DEFAULT_VARIANTS
    except json.JSONDecodeError as e:
        p.error(f"--variants is not valid JSON ({e})")
    shape = '--variants must be a non-empty JSON object {"name": ["--option", "value", ...] or null}'
    if not isinstance(variants, dict) or not variants:
        p.error(shape)
    for name, extra in variants.items():
        if extra is not None and not (isinstance(extra, list) and all(isinstance(x, str) for x in extra)):
            p.error(f"{shape}; variant {name!r} has {json.dumps(extra)}")
    if args.baseline not in variants:
        p.error(f"--baseline {args.baseline!r} is not one of the variants {sorted(variants)}")
    threads = args.threads if args.threads is not None else len(os.sched_getaffinity(0))
    print(f"threads={threads} warmup={args.warmup} steps={args.steps} rounds={args.rounds} "
          f"load_avg_1min={os.getloadavg()[0]:.2f}", flush=True)
    runs: dict[tuple[str, str], list[dict]] = {}
    for r in range(args.rounds):
        for prec in [x.strip() for x in args.precisions.split(",") if x.strip()]:
            names = list(variants) if r % 2 == 0 else list(reversed(variants))
            for name in names:
                extra = variants[name]
                argv_child = ["--side", "st" if extra is None else "ours", "--precision", prec,
                              "--threads", str(threads), "--warmup", str(args.warmup), "--steps", str(args.steps)]
                argv_child += ["--model", args.model] if args.model else []
                argv_child += ["--data", str(args.data)] if args.data else []
                if extra:
                    argv_child += ["--ours-args", *extra]
                d = run_train_worker(argv_child)
                runs.setdefault((name, prec), []).append(d)
                print(f"round {r + 1} {prec} {name:14s} {d['wall_s'] / d['steps']:.3f} s/step "
                      f"(CPU {d['cpu_s'] / d['steps']:.3f}), peak RSS {d['peak_rss_mib']:.0f} MiB, "
                      f"attention={d['attn']}, tokens {d['tokens']}/{d['padded_tokens']}", flush=True)
    print("\n| precision | variant | s/step | CPU s/step | peak RSS MiB | speed-up vs " + args.baseline + " |")
    print("|---|---|---|---|---|---|")
    summary = {}
    for (name, prec), ds in runs.items():
        steps = sum(d["steps"] for d in ds)
        summary[(name, prec)] = (sum(d["wall_s"] for d in ds) / steps, sum(d["cpu_s"] for d in ds) / steps,
                                 max(d["peak_rss_mib"] for d in ds))
    for (name, prec), (wall, cpu, rss) in sorted(summary.items(), key=lambda kv: (kv[0][1], kv[1][0])):
        base = summary.get((args.baseline, prec))
        gain = f"{base[0] / wall:.2f}x" if base else "n/a"
        print(f"| {prec} | {name} | {wall:.3f} | {cpu:.3f} | {rss:.0f} | {gain} |")
    return {f"{n}/{p_}": v for (n, p_), v in summary.items()}


if __name__ == "__main__":
    main()
