"""Evaluate a sentence encoder on SentEval's STS and transfer tasks: ``python scripts/evaluation.py --help``.

A thin wrapper of :mod:`simcse.evaluation.cli` (also ``simcse evaluate``), kept for the reference's command lines.
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout without installing

from simcse.evaluation.cli import main  # noqa: E402

if __name__ == "__main__":
    main()
