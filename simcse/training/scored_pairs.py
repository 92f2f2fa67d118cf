"""Scored sentence pairs for the score-based objectives (``--loss cosent``, ``--loss angle``): the STS-B and
SICK training splits of a SentEval ``downstream`` folder written as ``sent0,sent1,score`` training files.

The files are made from the SentEval data on the user's machine (``simcse download senteval``), never shipped:

    python -m simcse.training.scored_pairs stsb_train result/data/stsb_train.csv
    python -m simcse.training.scored_pairs sick_train result/data/sick_train.csv --data_dir data/downstream

Each row keeps its gold score as given (STS-B 0..5, SICK relatedness 1..5); CoSENT and AnglE use only the
order of the scores, so no rescaling is needed. Sentences are read as SentEval reads them (whitespace
normalised, :mod:`simcse.evaluation.data`). The file is a CSV with a header, written atomically.
"""
from __future__ import annotations

import argparse
import csv
import os
from pathlib import Path

from simcse.evaluation.data import read_split_pairs, resolve_senteval_dir

__all__ = ["SCORED_PAIR_SETS", "read_scored_pairs", "write_scored_pairs", "numeric_label_columns", "main"]

#: name -> (SentEval task, split, the pairs it has)
SCORED_PAIR_SETS: dict[str, tuple[str, str, int]] = {
    "stsb_train": ("STSBenchmark", "train", 5749),
    "stsb_dev": ("STSBenchmark", "dev", 1500),
    "sick_train": ("SICKRelatedness", "train", 4500),
    "sick_dev": ("SICKRelatedness", "dev", 500),
}


def read_scored_pairs(name: str, data_dir: str | os.PathLike | None = None) -> list[tuple[str, str, float]]:
    """The (sent0, sent1, score) rows of the scored-pair set ``name`` (see :data:`SCORED_PAIR_SETS`).

    ``data_dir`` is the SentEval ``downstream`` folder (default: found as the evaluator finds it).

    Raises:
        ValueError: an unknown ``name`` (the message lists the valid ones), or a malformed file.
        FileNotFoundError: the split's file is missing (the message says how to download it).
    """
    if name not in SCORED_PAIR_SETS:
        raise ValueError(f"unknown scored-pair set {name!r}; expected one of {sorted(SCORED_PAIR_SETS)}")
    task, split, _ = SCORED_PAIR_SETS[name]
    pairs = read_split_pairs(resolve_senteval_dir(data_dir), task, split)
    return [(a, b, float(s)) for a, b, s in zip(pairs.sent1, pairs.sent2, pairs.scores)]


def write_scored_pairs(name: str, out: str | os.PathLike, data_dir: str | os.PathLike | None = None) -> Path:
    """Write :func:`read_scored_pairs` ``name`` to the CSV ``out`` (header ``sent0,sent1,score``); returns it.

    The file appears complete or not at all (written to a temporary name, then renamed).
    Errors: as :func:`read_scored_pairs`, before anything is written.
    """
    rows = read_scored_pairs(name, data_dir)
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".part")
    with open(tmp, "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(["sent0", "sent1", "score"])
        w.writerows((a, b, repr(s)) for a, b, s in rows)
    os.replace(tmp, out)
    return out


def numeric_label_columns(ds, labels: list[str], source: str, header_lines: int | None = None):
    """``ds`` with its ``labels`` columns as float64 numbers (a score of any range: 0..5, 1..5, 0/1).

    ``header_lines``: for a file, the lines before its first row (1: a CSV header); the messages then name the
    file's line, else the row.

    Raises:
        ValueError: a cell that is not a finite number (names the column, the line or row and the value): NaN
            or infinity would pass through the ranking losses as "not ordered" and train on nothing.
    """
    import math

    if not labels:
        return ds

    def where(i: int) -> str:
        return f"line {i + 1 + header_lines}" if header_lines is not None else f"row {i + 1}"

    def to_float(batch, indices):
        out = {}
        for c in labels:
            values = []
            for i, x in zip(indices, batch[c]):
                try:
                    v = float(x)
                except (TypeError, ValueError):
                    raise ValueError(f"{source}: column {c!r} of {where(i)} is {x!r}; expected a number "
                                     "(the objective's label)") from None
                if not math.isfinite(v):
                    raise ValueError(f"{source}: column {c!r} of {where(i)} is {x!r}; expected a finite number "
                                     "(the objective's label)")
                values.append(v)
            out[c] = values
        return out

    import datasets

    if isinstance(ds, datasets.IterableDataset):  # a stream: each row converted as it is read
        return ds.map(to_float, batched=True, with_indices=True)
    features = ds.features.copy()
    for c in labels:
        features[c] = datasets.Value("float64")
    return ds.map(to_float, batched=True, with_indices=True, features=features, desc="reading labels")


def main(argv: list[str] | None = None) -> int:
    """``python -m simcse.training.scored_pairs NAME OUT.csv [--data_dir DIR]``."""
    p = argparse.ArgumentParser(prog="python -m simcse.training.scored_pairs", description=__doc__.split("\n\n")[0])
    p.add_argument("name", choices=sorted(SCORED_PAIR_SETS))
    p.add_argument("out", help="the CSV file to write (sent0,sent1,score)")
    p.add_argument("--data_dir", default=None, help="the SentEval downstream folder (default: as the evaluator)")
    args = p.parse_args(argv)
    path = write_scored_pairs(args.name, args.out, args.data_dir)
    with open(path, encoding="utf-8") as f:
        n = sum(1 for _ in f) - 1
    print(f"wrote {n} scored pairs ({args.name}) to {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
