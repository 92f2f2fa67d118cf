"""Where the time of one training step goes: a torch.profiler breakdown by kind of work.

    python scripts/profile_train_step.py                          # CPU default, bf16 and fp32, 3 warm-up steps, 1 profiled
    python scripts/profile_train_step.py --precisions bf16 --ours-args --optim adamw_torch

Trains the unsupervised CPU default (``configs/unsup_cpu_minilm.json``: all-MiniLM-L6-v2, batch 64,
``max_seq_length`` 32, the first wiki1m sentences) for ``warmup`` untimed steps and profiles the next
``steps`` steps (``torch.profiler``, CPU activities). Every profiled operator's *self* time is put in one
kind: GEMM (linear layers' ``mm``/``addmm``), attention (``bmm``, softmax, key mask), dropout, LayerNorm,
GELU, dtype casts (``_to_copy``: autocast's, mostly), copies (``copy_``, ``index_select``, ``cat``,
``index_put``: packing and the attention buckets), optimizer (everything under ``Optimizer.step``),
data (everything under the DataLoader's ``__next__``), other. Prints a markdown table per precision:
ms per step and share of the profiled step. The step's wall time is printed beside it, with the
1-minute load average (the machine may be shared: shares are steadier than milliseconds).
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # script-only: the sibling bench_common module

from bench_common import REPO, default_data, int_at_least  # noqa: E402

KINDS = ("GEMM (linear layers)", "attention (bmm, softmax, mask)", "dropout", "LayerNorm", "GELU",
         "dtype casts (_to_copy)", "copies (copy_, gather, cat, index_put)", "optimizer", "data", "loss and other")

_BY_NAME = {
    "aten::mm": 0, "aten::addmm": 0,
    "aten::bmm": 1, "aten::baddbmm": 1, "aten::_softmax": 1, "aten::_softmax_backward_data": 1,
    "aten::masked_fill": 1, "aten::masked_fill_": 1, "aten::_scaled_dot_product_flash_attention_for_cpu": 1,
    "aten::_scaled_dot_product_flash_attention_for_cpu_backward": 1,
    "aten::bernoulli_": 2, "aten::native_dropout": 2, "aten::native_dropout_backward": 2, "aten::random_": 2,
    "aten::native_layer_norm": 3, "aten::native_layer_norm_backward": 3,
    "aten::gelu": 4, "aten::gelu_backward": 4,
    "aten::_to_copy": 5,
    "aten::copy_": 6, "aten::index_select": 6, "aten::index_select_backward": 6, "aten::cat": 6, "aten::index_put_": 6,
    "aten::index_add_": 6, "aten::_index_put_impl_": 6, "aten::clone": 6, "aten::contiguous": 6,
}


def kind_of(name: str, ancestors: list[str]) -> int:
    """Index into :data:`KINDS` of a profiled operator named ``name`` under the record scopes ``ancestors``."""
    if any(a.startswith("Optimizer.step") or a.startswith("Optimizer.zero_grad") for a in ancestors):
        return 7
    if any("DataLoader" in a for a in ancestors):
        return 8
    if name in _BY_NAME:
        return _BY_NAME[name]
    if "dropout" in name.lower() or "bernoulli" in name.lower():
        return 2
    return 9


def breakdown(events) -> dict[int, float]:
    """Self CPU time (microseconds) by kind over profiler ``events`` (``prof.events()``), main-thread ops only."""
    out: dict[int, float] = defaultdict(float)
    for e in events:
        if e.device_type.name != "CPU" or e.self_cpu_time_total <= 0:
            continue
        ancestors, p = [], e.cpu_parent
        while p is not None:
            ancestors.append(p.name)
            p = p.cpu_parent
        out[kind_of(e.name, ancestors)] += e.self_cpu_time_total
    return out


def profile(args, precision: str) -> None:
    import torch
    from torch.profiler import ProfilerActivity, profile as torch_profile, schedule
    from transformers import TrainerCallback, set_seed

    from simcse.training.train import build, parse_args

    torch.set_num_threads(args.threads)
    total = args.warmup + args.steps
    with tempfile.TemporaryDirectory(prefix="profile_step_") as out:
        argv = [str(REPO / "configs" / "unsup_cpu_minilm.json"), "--train_file", str(args.data), "--output_dir", out,
                "--max_steps", str(total), "--max_train_samples", str(64 * total), "--eval_strategy", "no",
                "--save_strategy", "no", "--load_best_model_at_end", "false", "--eval_before_training", "false",
                "--test_after_training", "false", "--disable_tqdm", "true", "--logging_steps", "10000",
                "--bf16", "true" if precision == "bf16" else "false", "--use_cpu", "true", *args.ours_args]
        model_args, data_args, training_args = parse_args(argv)
        set_seed(training_args.seed)
        trainer = build(model_args, data_args, training_args)
        marks: list[float] = []
        prof = torch_profile(activities=[ProfilerActivity.CPU],
                             schedule=schedule(wait=0, warmup=args.warmup - 1, active=args.steps, repeat=1))

        class Step(TrainerCallback):
            def on_step_end(self, a, state, control, **kw):
                marks.append(time.perf_counter())
                prof.step()

        trainer.add_callback(Step())
        load = os.getloadavg()[0]
        with prof:
            trainer.train()
    per = breakdown(prof.events())
    step_ms = sum(per.values()) / 1000.0 / args.steps
    wall_ms = 1000.0 * (marks[-1] - marks[-1 - args.steps]) / args.steps
    print(f"\n{precision}: profiled {args.steps} step(s) after {args.warmup} warm-up, threads={args.threads}, "
          f"load_avg_1min={load:.2f}; profiled self time {step_ms:.0f} ms/step (wall {wall_ms:.0f} ms/step, "
          f"profiler on)")
    print("| kind | ms/step | share |\n|---|---|---|")
    for i, name in enumerate(KINDS):
        ms = per.get(i, 0.0) / 1000.0 / args.steps
        print(f"| {name} | {ms:.0f} | {100 * ms / step_ms:.1f}% |")
    if args.top:
        print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=args.top))


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", type=Path, default=None, help=f"one sentence per line (default: {default_data()})")
    p.add_argument("--precisions", default="bf16,fp32")
    p.add_argument("--warmup", type=int_at_least(2), default=3)
    p.add_argument("--steps", type=int_at_least(1), default=1)
    p.add_argument("--threads", type=int_at_least(1), default=2)
    p.add_argument("--top", type=int, default=0, help="also print the N operators with the most self time")
    p.add_argument("--ours-args", nargs=argparse.REMAINDER, default=[], help="extra simcse.training.train options")
    args = p.parse_args(argv)
    args.data = args.data or default_data()
    for precision in [x.strip() for x in args.precisions.split(",") if x.strip()]:
        if precision not in ("fp32", "bf16"):
            p.error(f"--precisions: unknown precision {precision!r} (fp32, bf16)")
        profile(args, precision)


if __name__ == "__main__":
    main()
