"""Training speed and numbers from a local dataset folder (``--dataset_name``) against the same file as ``--train_file``.

    python -m scripts.benchmarks.train_sources             # CPU default (configs/unsup_cpu_minilm.json), 2 rounds
    python -m scripts.benchmarks.train_sources --quick     # 1 round of 1 warm-up + 3 timed steps (a smoke run)
    python -m scripts.benchmarks.train_sources --quick --model DIR --data FILE   # another model and sentence file

Both sides run the packaged CPU default config (all-MiniLM-L6-v2, the first 9600 sentences of wiki1m, batch 64, 32
tokens, fp32) with evaluation and checkpoints off. One side reads ``--train_file data/wiki1m_for_simcse.txt``; the
other ``--dataset_name FOLDER --dataset_data_files wiki1m_for_simcse.txt``, FOLDER a temporary folder in the Hub's
layout holding (a link to) the same file -- how the official Hub dataset is read. Both tokenise once, before
training, through the same ``datasets.map``.

Each measurement is a fresh subprocess that trains ``warmup + steps`` steps and times the last ``steps`` (wall and
process CPU time from the end of the last warm-up step to the end of the last one: data loading, collation,
forward, backward, optimizer); setup (model, data, tokenisation) is timed apart. Rounds alternate the order
(file, dataset / dataset, file) so that a slow-down from other jobs falls on both sides. The load average is
printed before and after: the machine may be shared.

After training, each run also times its data path alone: one epoch of the training data loader (reading the
tokenised rows and collating them into batches, process CPU time per batch) -- the only part of a step where the
two sources could differ, as the model sees the same batches.

The last line is machine-readable (ratios are dataset / file, summed over rounds; ``same_losses`` says whether
the two sides logged identical losses at every step)::

    train_dataset_vs_train_file wall_ratio=X.XXX cpu_ratio=Y.YYY data_path_cpu_ratio=Z.ZZZ same_losses=True
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from scripts.benchmarks.common import add_busy_option, check_idle, checkout_env, default_data, int_at_least, module_command

WIKI = "wiki1m_for_simcse.txt"


def _worker(side: str, data: str, folder: str, out: str, warmup: int, steps: int, model: str | None = None) -> dict:
    from transformers import TrainerCallback, set_seed

    from simcse.training import build_trainer, training_arguments

    source = dict(train_file=data) if side == "file" else dict(dataset_name=folder, dataset_data_files=WIKI)
    if model:
        source["model_name_or_path"] = model
    t0 = time.perf_counter()
    model_args, data_args, training_args = training_arguments(
        "unsup_cpu_minilm", **source, output_dir=out, overwrite_output_dir=True, max_steps=warmup + steps,
        eval_strategy="no", save_strategy="no", load_best_model_at_end=False, eval_before_training=False,
        test_after_training=False, logging_steps=1, disable_tqdm=True, save_on_signal="none")
    set_seed(training_args.seed)
    trainer = build_trainer(model_args, data_args, training_args)
    setup = time.perf_counter() - t0
    marks: list = []

    class Timer(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            marks.append((time.perf_counter(), time.process_time()))

    trainer.add_callback(Timer())
    trainer.train()
    (w0, c0), (w1, c1) = marks[warmup - 1], marks[-1]
    t0 = time.process_time()  # the data path alone: one epoch of the training data loader (read + collate)
    batches = sum(1 for _ in trainer.get_train_dataloader())
    data_cpu = (time.process_time() - t0) / batches
    return {"setup_s": setup, "wall_per_step": (w1 - w0) / steps, "cpu_per_step": (c1 - c0) / steps,
            "data_cpu_per_batch": data_cpu,
            "examples": len(trainer.train_dataset), "losses": [h["loss"] for h in trainer.state.log_history if "loss" in h]}


def _measure(side: str, args, folder: str) -> dict:
    with tempfile.TemporaryDirectory() as out:
        cmd = module_command("train_sources", "--worker", side, "--data", str(args.data), "--folder", folder, "--out", out,
                             "--warmup", str(args.warmup), "--steps", str(args.steps),
                             *(["--model", args.model] if args.model else []))
        res = subprocess.run(cmd, capture_output=True, text=True, check=False, env=checkout_env())
        if res.returncode != 0:
            sys.exit(f"error: the {side} run failed:\n{res.stderr[-3000:]}")
        return json.loads(res.stdout.strip().splitlines()[-1])


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int_at_least(1), default=2)
    p.add_argument("--warmup", type=int_at_least(1), default=3)
    p.add_argument("--steps", type=int_at_least(1), default=10)
    p.add_argument("--quick", action="store_true", help="1 round, 1 warm-up + 3 timed steps")
    p.add_argument("--data", type=Path, default=None, help=f"the {WIKI} file (default: data/ or $SIMCSE_DATA_MIRROR)")
    p.add_argument("--model", default=None, help="model folder or name (default: the config's all-MiniLM-L6-v2)")
    p.add_argument("--worker", choices=["file", "dataset"], help=argparse.SUPPRESS)
    p.add_argument("--folder", help=argparse.SUPPRESS)
    p.add_argument("--out", help=argparse.SUPPRESS)
    add_busy_option(p)
    args = p.parse_args(argv)
    if args.worker:
        print(json.dumps(_worker(args.worker, str(args.data), args.folder, args.out, args.warmup, args.steps, args.model)))
        return
    check_idle(args.allow_busy)
    if args.quick:
        args.rounds, args.warmup, args.steps = 1, 1, 3
    args.data = (args.data or default_data(WIKI)).resolve()
    if not args.data.is_file():
        sys.exit(f"error: {args.data} is missing (get it with `bash data/download_wiki.sh`)")
    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())} ({os.cpu_count()} cores)", flush=True)
    totals = {s: {"wall": 0.0, "cpu": 0.0, "data": 0.0} for s in ("file", "dataset")}
    losses = {}
    with tempfile.TemporaryDirectory() as folder:
        os.symlink(args.data, Path(folder) / WIKI)  # a dataset folder holding the same file
        for r in range(args.rounds):
            for side in (("file", "dataset") if r % 2 == 0 else ("dataset", "file")):
                m = _measure(side, args, folder)
                totals[side]["wall"] += m["wall_per_step"]
                totals[side]["cpu"] += m["cpu_per_step"]
                totals[side]["data"] += m["data_cpu_per_batch"]
                losses.setdefault(side, m["losses"])
                same = losses[side] == m["losses"]
                print(f"round {r + 1} {side:8s}: {m['wall_per_step']:.3f} s/step wall, {m['cpu_per_step']:.3f} s/step CPU, "
                      f"data path {1000 * m['data_cpu_per_batch']:.2f} ms/batch CPU, setup {m['setup_s']:.1f} s, {m['examples']} examples, first loss {m['losses'][0]:.6f}"
                      f"{'' if same else ' (losses differ from round 1!)'}", flush=True)
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}", flush=True)
    wall = totals["dataset"]["wall"] / totals["file"]["wall"]
    cpu = totals["dataset"]["cpu"] / totals["file"]["cpu"]
    data = totals["dataset"]["data"] / totals["file"]["data"]
    print(f"train_dataset_vs_train_file wall_ratio={wall:.3f} cpu_ratio={cpu:.3f} data_path_cpu_ratio={data:.3f} "
          f"same_losses={losses['file'] == losses['dataset']}")


if __name__ == "__main__":
    main()
