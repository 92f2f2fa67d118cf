"""CoSENT, AnglE, Matryoshka and supervised SimCSE side by side, over seeds: this library's trainer against
sentence-transformers' own (an arm kind of the experiment runner), on the same rows, each pair compared seed by seed.

    python -m scripts.benchmarks.scored_pairs                           # CoSENT and supervised, 3 seeds, one epoch
    python -m scripts.benchmarks.scored_pairs --runs cosent,angle,matryoshka,supervised --seeds 42
    python -m scripts.benchmarks.scored_pairs --steps 2 --max_rows 64   # a smoke run

The packaged spec ``scored_pairs_st`` (CoSENT and the supervised row) is the starting point; ``--runs`` adds AnglE and
Matryoshka arms of the same shape. Both sides start from the same model (default: the embedded all-MiniLM-L6-v2,
mean pooling) and train on the same rows in one pass (``--epochs``: steps = rows // batch size; ``--steps N``
trains N steps on the first N x batch rows instead), with the same batch size, learning rate, warm-up
(``--warmup_ratio`` of the steps, HF's ceil rule, given to both sides as ``warmup_steps``), then linear decay,
truncation (32 tokens), fp32, and the seed of the run:

* ``cosent``: STS-B train (``sent0, sent1, score``; written into ``<output_dir>/data`` from the SentEval folder),
  ours ``--loss cosent`` (scale 20), theirs ``CoSENTLoss(scale=20)``;
* ``angle``: STS-B train, ours ``--loss angle``, theirs ``AnglELoss(scale=20)``;
* ``matryoshka``: the NLI triplets, ours ``--loss matryoshka`` over ``infonce`` (temperature 0.05) at
  384/256/128/64/32 dims, theirs ``MatryoshkaLoss(MultipleNegativesRankingLoss(scale=20), [384, ..., 32])``,
  scored at the full size;
* ``supervised``: the NLI triplets, ours ``--loss infonce`` with the hard negatives (temperature 0.05), theirs
  ``MultipleNegativesRankingLoss(scale=20)`` on (anchor, positive, negative).

The runner scores every model with this library's evaluator at 128 tokens (STS-B and SICK-R test); the report
(``<output_dir>/report.md``) gives every seed, the mean with its hierarchical interval, ours - theirs paired by
seed, training examples/s and peak memory per run, and names the model. Timings need an idle machine: after
checking its options and ``--output_dir`` the script prints the 1-minute load average and refuses a busy machine
unless ``--allow_busy``.
"""
from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run from a checkout without installing

from scripts.benchmarks.common import add_busy_option, check_idle, default_data, int_at_least  # noqa: E402

SPEC = "scored_pairs_st"
DIMS = (384, 256, 128, 64, 32)
RUNS = ("cosent", "angle", "matryoshka", "supervised")
NLI_RUNS = ("matryoshka", "supervised")
STSB_FILE = "data/stsb_train.csv"  # the packaged spec's STS-B train file
# the arms --runs adds beside the packaged spec's (ours, theirs): the options that differ from its cosent/supervised
EXTRA = {"angle": ("cosent", {"loss": "angle", "_label": "AnglE, ours (--loss angle)"},
                   {"loss": "AnglELoss", "_label": "AnglE, sentence-transformers (AnglELoss(scale=20))"}),
         "matryoshka": ("supervised",
                        {"loss": "matryoshka", "loss_args": {"loss": "infonce", "loss_args": {"temp": 0.05},
                                                             "matryoshka_dims": list(DIMS)},
                         "_label": "Matryoshka, ours (--loss matryoshka over infonce)"},
                        {"loss": "MatryoshkaLoss", "loss_args": {"scale": 20.0, "matryoshka_dims": list(DIMS)},
                         "_label": "Matryoshka, sentence-transformers (MatryoshkaLoss(MNRL(scale=20)))"})}


def plan_steps(n_rows: int, batch_size: int, epochs: int = 1, steps: int | None = None) -> tuple[int, int]:
    """``(rows, steps)`` one run trains on: ``steps`` N -> the first N x batch rows, N steps; else ``epochs``
    passes over the first (rows // batch) x batch rows (a drop-last epoch).

    Raises:
        ValueError: fewer rows than one batch, or than ``steps`` x batch.
    """
    per_epoch = steps if steps is not None else n_rows // batch_size
    need = per_epoch * batch_size
    if per_epoch < 1 or n_rows < need:
        raise ValueError(f"{n_rows} rows, need {max(need, batch_size)} (lower --steps or --batch_size, or raise "
                         "--max_rows / --nli_rows)")
    return need, per_epoch if steps is not None else per_epoch * epochs


def warmup_steps(steps: int, ratio: float) -> int:
    """HF's rule for a warm-up ratio (``ceil(steps x ratio)``), given to both sides as ``warmup_steps``."""
    return math.ceil(steps * ratio)


def _count_rows(path: str) -> int:
    import csv

    with open(path, newline="", encoding="utf-8") as f:
        return sum(1 for _ in csv.DictReader(f))


def scored_pairs_spec(runs: list[str], stsb_file: str, nli_file: str, model: str | None = None,
                      seeds: list[int] | None = None, batch_size: int = 16, learning_rate: float = 5e-5,
                      warmup_ratio: float = 0.1, max_seq_length: int = 32, epochs: int = 1, steps: int | None = None,
                      max_rows: int | None = None, nli_rows: int | None = None, data_dir: str | None = None,
                      resamples: int | None = None) -> dict:
    """The ``scored_pairs_st`` spec with ``runs`` (each an ours arm and a sentence-transformers arm compared by
    ``_versus``) and these settings on both sides of every row.

    Raises:
        ValueError: a row's file has fewer rows than its budget needs (naming the row).
    """
    from simcse.experiments.spec import resolve_spec

    raw = json.loads(resolve_spec(SPEC).read_text(encoding="utf-8"))
    packaged = raw["arms"]
    arms = {"start": packaged["start"]}
    for run in runs:
        template = EXTRA.get(run, (run, {}, {}))
        ours = {**packaged[template[0]], **template[1], "_versus": f"{run}_st"}
        theirs = {**packaged[f"{template[0]}_st"], **template[2]}
        nli = run in NLI_RUNS
        path = nli_file if nli else stsb_file
        available = min([_count_rows(path), *[x for x in (max_rows, nli_rows if nli else None) if x]])
        try:
            n, total = plan_steps(available, batch_size, epochs, steps)
        except ValueError as e:
            raise ValueError(f"{run}: {path} has {e}") from None
        both = {"train_file": path, "max_train_samples": n, "warmup_steps": warmup_steps(total, warmup_ratio),
                "per_device_train_batch_size": batch_size, "learning_rate": learning_rate,
                "max_seq_length": max_seq_length, "num_train_epochs": epochs}
        ours.update(both, **({"max_steps": steps} if steps else {}))
        theirs.update(both, **({"max_steps": steps} if steps else {}))
        if model:
            theirs["model_name_or_path"] = model
        if data_dir:
            theirs["senteval_dir"] = data_dir  # both sides scored on the same pairs
        arms[run], arms[f"{run}_st"] = ours, theirs
    raw["arms"] = arms
    raw["options"] = {**raw["options"], **({"model_name_or_path": model} if model else {}),
                      **({"senteval_dir": data_dir} if data_dir else {})}
    if seeds:
        raw["seeds"] = list(seeds)
    if resamples:
        raw["evaluation"] = {**raw["evaluation"], "bootstrap": resamples}
    return raw


def _run_list(text: str) -> list[str]:
    runs = [r.strip() for r in text.split(",") if r.strip()]
    bad = [r for r in runs if r not in RUNS]
    if bad or not runs:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a comma-separated subset of {','.join(RUNS)}")
    return list(dict.fromkeys(runs))


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=_run_list, default=["cosent", "supervised"],
                   help=f"rows to run, of {','.join(RUNS)} (default: cosent,supervised)")
    p.add_argument("--model", default=None, help="start model (default: the embedded all-MiniLM-L6-v2)")
    p.add_argument("--seeds", nargs="+", type=int, default=None, help="seeds (default: the spec's 42 1 2)")
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
    p.add_argument("--resamples", type=int_at_least(2), default=None, help="bootstrap resamples (default 1000)")
    p.add_argument("--data_dir", default=None, help="SentEval downstream folder (default: as the evaluator finds it)")
    p.add_argument("--output_dir", type=Path, default=Path("result/scored_pairs"),
                   help="the experiment folder (a rerun continues it; default result/scored_pairs)")
    p.add_argument("--parallel", type=int_at_least(1), default=1, help="runs at a time, the CPUs split among them")
    add_busy_option(p)
    return p


def main(argv: list[str] | None = None) -> dict:
    """Build the side-by-side spec and run it; returns :func:`simcse.experiments.run_experiment`'s result. Bad
    input stops in one ``error:`` line before anything trains."""
    from simcse.experiments.executors import ExecutorError
    from simcse.experiments.experiment import check_output_dir, run_built_spec
    from simcse.training.scored_pairs import write_scored_pairs

    args = _parser().parse_args(argv)
    if not 0 <= args.warmup_ratio < 1:
        raise SystemExit(f"error: --warmup_ratio must be in [0, 1), got {args.warmup_ratio}")
    nli_file = args.nli_file or str(default_data("nli_for_simcse.csv"))
    if any(r in NLI_RUNS for r in args.runs) and not Path(nli_file).is_file():
        raise SystemExit(f"error: no NLI triplets at {nli_file} (get them with `bash data/download_nli.sh`, "
                         "or pass --nli_file, or leave matryoshka and supervised out of --runs)")
    try:
        out = check_output_dir(args.output_dir)
        check_idle(args.allow_busy)  # timed: before anything is written or trained
        stsb = str(out / STSB_FILE)
        if any(r not in NLI_RUNS for r in args.runs) and not Path(stsb).is_file():
            write_scored_pairs("stsb_train", stsb, args.data_dir)  # the same rows on both sides
        raw = scored_pairs_spec(args.runs, stsb, nli_file, args.model, args.seeds, args.batch_size,
                                args.learning_rate, args.warmup_ratio, args.max_seq_length, args.epochs, args.steps,
                                args.max_rows, args.nli_rows, args.data_dir, args.resamples)
    except (ValueError, OSError, ExecutorError) as e:
        raise SystemExit(f"error: {e}") from None
    return run_built_spec(raw, out, f"{SPEC} (scripts.benchmarks.scored_pairs)", parallel=args.parallel)


if __name__ == "__main__":
    main()
