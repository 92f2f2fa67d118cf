"""Where the time of one training step goes: a torch.profiler breakdown by kind of work.

    python -m scripts.benchmarks.profile_train_step                          # CPU default, bf16 and fp32, 3 warm-up steps, 1 profiled
    python -m scripts.benchmarks.profile_train_step --precisions bf16 --ours-args --optim adamw_torch

Trains the unsupervised CPU default (``configs/unsup_cpu_minilm.json``: all-MiniLM-L6-v2, batch 64,
``max_seq_length`` 32, the first wiki1m sentences) for ``warmup`` untimed steps and profiles the next
``steps`` steps (``torch.profiler``, CPU activities). Every profiled operator's *self* time is put in one
kind (:func:`kind_of`): GEMM (linear layers' ``mm``/``addmm``), attention (``bmm``, softmax, key mask),
dropout masks, LayerNorm, GELU, dtype casts (autocast's), copies (gathers of the padding-free attention,
``cat``, ``clone``), elementwise (``add``, ``mul``, ...), the embedding gradient, optimizer (everything under
``Optimizer.step``), data (everything under the DataLoader's ``__next__``), other. Prints a markdown table per precision:
ms per step and share of the profiled step. The step's wall time is printed beside it, with the
1-minute load average (the machine may be shared: shares are steadier than milliseconds).
"""
from __future__ import annotations

import argparse
import os
import tempfile
import time
from collections import defaultdict
from pathlib import Path

from scripts.benchmarks.common import REPO, add_busy_option, check_idle, default_data, int_at_least, read_sentences

KINDS = ("GEMM (linear layers)", "attention (bmm, softmax, mask)", "dropout (masks)", "LayerNorm", "GELU",
         "casts (autocast) and copies in linear (bias)", "copies (gathers, cat, clone)", "elementwise (add, mul, ...)",
         "embedding (gradient)", "optimizer", "data", "other")
GEMM, ATTENTION, DROPOUT, LAYERNORM, GELU, CASTS, COPIES, ELEMENTWISE, EMBEDDING, OPTIMIZER, DATA, OTHER = range(len(KINDS))

_OWN = {  # an operator that is one kind wherever it is called
    "aten::mm": GEMM, "aten::addmm": GEMM, "aten::bmm": ATTENTION, "aten::baddbmm": ATTENTION,
    "aten::_softmax": ATTENTION, "aten::_softmax_backward_data": ATTENTION, "aten::masked_fill": ATTENTION,
    "aten::masked_fill_": ATTENTION, "aten::_scaled_dot_product_flash_attention_for_cpu": ATTENTION,
    "aten::_scaled_dot_product_flash_attention_for_cpu_backward": ATTENTION,
    "aten::bernoulli_": DROPOUT, "aten::random_": DROPOUT, "aten::native_dropout": DROPOUT,
    "aten::native_dropout_backward": DROPOUT, "aten::ge": DROPOUT,
    "aten::native_layer_norm": LAYERNORM, "aten::native_layer_norm_backward": LAYERNORM,
    "aten::gelu": GELU, "aten::gelu_backward": GELU,
    "aten::embedding_dense_backward": EMBEDDING, "aten::embedding_backward": EMBEDDING,
    "aten::index_select": COPIES, "aten::index_add_": COPIES, "aten::scatter_add_": COPIES, "aten::cat": COPIES,
    "aten::index_put_": COPIES, "aten::_index_put_impl_": COPIES, "aten::clone": COPIES,
    "aten::add": ELEMENTWISE, "aten::add_": ELEMENTWISE, "aten::mul": ELEMENTWISE, "aten::mul_": ELEMENTWISE,
    "aten::sum": ELEMENTWISE, "aten::div": ELEMENTWISE, "aten::fill_": ELEMENTWISE, "aten::zero_": ELEMENTWISE,
}
_TOP = {  # the outermost operator or backward node an event runs under (for copy_, fill_, ... inside it)
    "aten::linear": GEMM, "aten::matmul": GEMM, "aten::_to_copy": CASTS, "aten::to": CASTS,
    "ToCopyBackward0": CASTS, "aten::layer_norm": LAYERNORM, "NativeLayerNormBackward0": LAYERNORM,
    "aten::gelu": GELU, "GeluBackward0": GELU, "AddmmBackward0": GEMM, "MmBackward0": GEMM,
    "BmmBackward0": ATTENTION, "SoftmaxBackward0": ATTENTION, "MaskedFillBackward0": ATTENTION,
    "EmbeddingBackward0": EMBEDDING, "aten::embedding": EMBEDDING, "aten::index_select": COPIES,
    "IndexSelectBackward0": COPIES, "_RowGatherBackward": COPIES, "CatBackward0": COPIES, "aten::cat": COPIES,
    "aten::contiguous": COPIES, "aten::reshape": COPIES, "aten::clone": COPIES, "CloneBackward0": COPIES,
    "IndexPutBackward0": COPIES, "UnsafeViewBackward0": COPIES, "TransposeBackward0": COPIES,
    "ViewBackward0": COPIES, "ReshapeAliasBackward0": COPIES,
}
_EVALUATE = "autograd::engine::evaluate_function: "


def kind_of(name: str, ancestors: list[str]) -> int:
    """Index into :data:`KINDS` of a profiled operator ``name`` under ``ancestors`` (innermost first).

    Everything under ``Optimizer.step``/``zero_grad`` is the optimizer and under the DataLoader's ``__next__``
    data; then the operator's own name decides when it is one kind wherever it runs (``mm``, ``bmm``,
    ``native_layer_norm``, ...); else the outermost operator or backward node it runs under (a ``copy_`` under
    ``aten::to`` is a cast, under ``aten::clone`` a copy); the rest is "other".
    """
    if any(a.startswith(("Optimizer.step", "Optimizer.zero_grad")) for a in ancestors):
        return OPTIMIZER
    if any("DataLoader" in a for a in ancestors):
        return DATA
    if name in _OWN:
        return _OWN[name]
    for a in reversed(ancestors):  # outermost first
        key = a[len(_EVALUATE):] if a.startswith(_EVALUATE) else a
        if key in _TOP:
            return _TOP[key]
    return _TOP.get(name, OTHER)


def pairs(events) -> dict[tuple[str, str], float]:
    """Self CPU time (microseconds) by (operator, the outermost operator or backward node it runs under)."""
    out: dict[tuple[str, str], float] = defaultdict(float)
    for e in events:
        if e.device_type.name != "CPU" or e.self_cpu_time_total <= 0:
            continue
        top, p = e.name, e.cpu_parent
        while p is not None:
            if p.name.startswith(("aten::", _EVALUATE, "Optimizer", "enumerate(DataLoader")):
                top = p.name
            p = p.cpu_parent
        out[(e.name, top)] += e.self_cpu_time_total
    return out


def breakdown(events) -> dict[int, float]:
    """Self CPU time (microseconds) by kind (:func:`kind_of`) over profiler ``events`` (``prof.events()``)."""
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

    from simcse.training import build_trainer, training_arguments
    from simcse.training.parser import parse_command_line

    torch.set_num_threads(args.threads)
    total = args.warmup + args.steps
    with tempfile.TemporaryDirectory(prefix="profile_step_") as tmp:
        out = str(Path(tmp) / "run")  # an empty output folder: training refuses one that holds anything
        train_file = Path(tmp) / "train.txt"  # the first sentences only (the trainer reads the whole file)
        train_file.write_text("\n".join(read_sentences(args.data, 64 * total)) + "\n", encoding="utf-8")
        options = dict(train_file=str(train_file), output_dir=out, max_steps=total, max_train_samples=64 * total,
                       eval_strategy="no", save_strategy="no", load_best_model_at_end=False,
                       eval_before_training=False, test_after_training=False, disable_tqdm=True,
                       logging_steps=10000, bf16=precision == "bf16", use_cpu=True)
        options.update(parse_command_line(args.ours_args).options)  # --ours-args: options typed by the user
        model_args, data_args, training_args = training_arguments(str(REPO / "configs" / "unsup_cpu_minilm.json"),
                                                                  **options)
        set_seed(training_args.seed)
        trainer = build_trainer(model_args, data_args, training_args)
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
        print(f"| operator | under | ms/step |\n|---|---|---|")
        for (name, top), us in sorted(pairs(prof.events()).items(), key=lambda kv: -kv[1])[:args.top]:
            print(f"| {name} | {top.replace(_EVALUATE, '')} | {us / 1000.0 / args.steps:.1f} |")


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", type=Path, default=None, help=f"one sentence per line (default: {default_data()})")
    p.add_argument("--precisions", default="bf16,fp32")
    p.add_argument("--warmup", type=int_at_least(2), default=3)
    p.add_argument("--steps", type=int_at_least(1), default=1)
    p.add_argument("--threads", type=int_at_least(1), default=2)
    p.add_argument("--top", type=int, default=0, help="also print the N (operator, outermost caller) pairs with the most self time")
    p.add_argument("--ours-args", nargs=argparse.REMAINDER, default=[], help="extra simcse.training.train options")
    add_busy_option(p)
    args = p.parse_args(argv)
    check_idle(args.allow_busy)
    args.data = args.data or default_data()
    for precision in [x.strip() for x in args.precisions.split(",") if x.strip()]:
        if precision not in ("fp32", "bf16"):
            p.error(f"--precisions: unknown precision {precision!r} (fp32, bf16)")
        profile(args, precision)


if __name__ == "__main__":
    main()
