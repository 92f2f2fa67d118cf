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

``--products`` also prints the linear layers' matrix products as run inside the step (:func:`product_rates`):
per product (forward, input gradient, weight gradient) and layer shape, the GFLOP/s reached in the step
beside the same products' warmed rates alone (:func:`scripts.benchmarks.common.best_rates`, each product at
its own shape), and how many ms of the step the difference costs.
"""
from __future__ import annotations

import argparse
import os
import tempfile
import time
from collections import defaultdict
from pathlib import Path

from scripts.benchmarks.common import (REPO, add_busy_option, best_rates, check_idle, default_data, int_at_least,
                                      matmul_timer, read_sentences)

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


def _ancestors(e) -> list[str]:
    """Names of the operators and backward nodes a profiler event runs under, innermost first."""
    names, p = [], e.cpu_parent
    while p is not None:
        names.append(p.name)
        p = p.cpu_parent
    return names


def breakdown(events) -> dict[int, float]:
    """Self CPU time (microseconds) by kind (:func:`kind_of`) over profiler ``events`` (``prof.events()``)."""
    out: dict[int, float] = defaultdict(float)
    for e in events:
        if e.device_type.name != "CPU" or e.self_cpu_time_total <= 0:
            continue
        out[kind_of(e.name, _ancestors(e))] += e.self_cpu_time_total
    return out


ROLES = ("forward", "input gradient", "weight gradient")
_BACKWARD_NODES = ("AddmmBackward0", "MmBackward0")


def _operands(e) -> tuple[tuple, tuple] | None:
    """The two matrices' shapes of an ``aten::mm`` / ``aten::addmm`` event (recorded with shapes), else None."""
    dims = [tuple(d) for d in e.input_shapes if d]
    pair = (dims[1], dims[2]) if e.name == "aten::addmm" and len(dims) >= 3 else tuple(dims[:2])
    return pair if len(pair) == 2 and all(len(d) == 2 for d in pair) else None


def product_rates(events) -> list[dict]:
    """The linear layers' matrix products of profiler ``events`` (recorded with ``record_shapes=True``), one dict
    per product: ``role`` (one of :data:`ROLES`), ``layer`` (in, out), ``dims`` (m, k, n) and ``us`` (self CPU
    microseconds).

    A forward product is an ``aten::addmm`` (bias) or ``aten::mm`` under ``aten::linear``: (T, in) @ (in, out)
    for T tokens. Its gradients are the ``aten::mm`` run by its own ``AddmmBackward0`` / ``MmBackward0`` node (the
    node's sequence number is the forward product's): the input gradient (T, out) @ (out, in) and the weight
    gradient, a product over the T tokens in either layout, (in, T) @ (T, out) or (out, T) @ (T, in); a product
    whose shapes fit both is taken in the node's order, the input gradient first. Other products (attention's
    ``bmm``, a loss's similarity ``matmul``) are left out. Every linear map counts under its shape: a pooler's MLP
    layer (on one token per sentence) beside the encoder's.
    """
    forward, backward = {}, defaultdict(list)
    for e in events:
        if e.device_type.name != "CPU" or e.name not in ("aten::mm", "aten::addmm"):
            continue
        operands, node = _operands(e), e.cpu_parent
        if operands is None or node is None:
            continue
        a, b = operands
        if "aten::linear" in _ancestors(e) and e.sequence_nr >= 0:
            forward[e.sequence_nr] = {"role": "forward", "layer": (a[1], b[1]), "dims": (a[0], a[1], b[1]),
                                      "us": e.self_cpu_time_total}
        elif node.name in _BACKWARD_NODES and node.sequence_nr >= 0:
            backward[(node.sequence_nr, id(node))].append((e.time_range.start, a, b, e.self_cpu_time_total))
    out = list(forward.values())
    for (seq, _), products in backward.items():
        if seq not in forward:
            continue
        tokens, _, _ = forward[seq]["dims"]
        fan_in, fan_out = forward[seq]["layer"]
        taken = set()
        for _, a, b, us in sorted(products, key=lambda x: x[0]):
            dims = (a[0], a[1], b[1])
            fits = [role for role, ok in (("input gradient", dims == (tokens, fan_out, fan_in)),
                                          ("weight gradient", a[1] == tokens and {a[0], b[1]} == {fan_in, fan_out}))
                    if ok and role not in taken]
            if fits:
                taken.add(fits[0])
                out.append({"role": fits[0], "layer": (fan_in, fan_out), "dims": dims, "us": us})
    return out


def print_products(products: list[dict], steps: int, alone: dict) -> None:
    """Markdown table of :func:`product_rates` ``products`` per role and layer shape, per step, each product set
    beside ``alone[dims]`` (its FLOP/s by itself, :func:`scripts.benchmarks.common.best_rates`): the row's rate
    alone is its FLOPs over the sum of its products' times alone, "ms/step lost" the difference of the times."""
    rows: dict[tuple, list[float]] = {}
    for p in products:
        m, k, n = p["dims"]
        flop = 2.0 * m * k * n
        row = rows.setdefault((p["role"], *p["layer"]), [0, 0.0, 0.0, 0.0])  # calls, us, flop, seconds alone
        row[0] += 1
        row[1] += p["us"]
        row[2] += flop
        row[3] += flop / alone[p["dims"]]
    print("| product | layer (in -> out) | calls/step | ms/step | GFLOP/s in the step | GFLOP/s alone | ms/step lost |\n"
          "|---|---|---|---|---|---|---|")
    total_ms = total_alone = total_flop = 0.0
    for key in sorted(rows, key=lambda k: (ROLES.index(k[0]), k[1], k[2])):
        calls, us, flop, alone_s = rows[key]
        ms, alone_ms = us / 1000.0 / steps, alone_s * 1000.0 / steps
        total_ms, total_alone, total_flop = total_ms + ms, total_alone + alone_ms, total_flop + flop
        print(f"| {key[0]} | {key[1]} -> {key[2]} | {calls / steps:g} | {ms:.1f} | {flop / (us * 1e-6) / 1e9:.0f} | "
              f"{flop / alone_s / 1e9:.0f} | {ms - alone_ms:.1f} |")
    rate = total_flop / (total_ms / 1000.0 * steps) if total_ms else 0.0
    diff = total_ms - total_alone
    print(f"products: {total_ms:.0f} ms/step at {rate / 1e9:.0f} GFLOP/s in the step; at each product's rate alone "
          f"they would take {total_alone:.0f} ms ({abs(diff):.0f} ms/step {'less' if diff >= 0 else 'more'})")


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
        prof = torch_profile(activities=[ProfilerActivity.CPU], record_shapes=args.products,
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
    if args.products:
        products = product_rates(prof.events())
        dtype = torch.bfloat16 if precision == "bf16" else torch.float32
        dims = sorted({p["dims"] for p in products})
        print_products(products, args.steps, best_rates(dims, matmul_timer(dtype, "cpu")))


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", type=Path, default=None, help=f"one sentence per line (default: {default_data()})")
    p.add_argument("--precisions", default="bf16,fp32")
    p.add_argument("--warmup", type=int_at_least(2), default=3)
    p.add_argument("--steps", type=int_at_least(1), default=1)
    p.add_argument("--threads", type=int_at_least(1), default=2)
    p.add_argument("--top", type=int, default=0, help="also print the N (operator, outermost caller) pairs with the most self time")
    p.add_argument("--products", action="store_true",
                   help="also print the linear layers' products in the step against the same products alone (GFLOP/s)")
    p.add_argument("--ours-args", nargs=argparse.REMAINDER, default=[], help="extra simcse.training.train options")
    add_busy_option(p)
    args = p.parse_args(argv)
    precisions = [x.strip() for x in args.precisions.split(",") if x.strip()]
    if not precisions or any(x not in ("fp32", "bf16") for x in precisions):
        p.error(f"--precisions: expected a comma-separated list of fp32 and bf16, got {args.precisions!r}")
    check_idle(args.allow_busy)
    args.data = args.data or default_data()
    from simcse.training.build import SetupError

    for precision in precisions:
        try:
            profile(args, precision)
        except SetupError as e:  # a bad --ours-args option or value, found before any step runs
            p.error(f"--ours-args: {e}")


if __name__ == "__main__":
    main()
