"""Helpers shared by the benchmark scripts (not part of the ``simcse`` package): default model and data."""
from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
WIKI = "wiki1m_for_simcse.txt"


def default_model() -> str | None:
    """The embedded all-MiniLM-L6-v2 folder (:func:`simcse.training.config.resolve_model_name`), or None when its
    package is missing."""
    from simcse.training.config import EMBEDDED_MODEL, resolve_model_name

    try:
        return resolve_model_name(EMBEDDED_MODEL)
    except ValueError:
        return None


def default_data(name: str = WIKI) -> Path:
    """:func:`simcse.training.data.default_data_file`: ``$SIMCSE_DATA_MIRROR/<name>``, else ``data/<name>`` in the checkout."""
    from simcse.training.data import default_data_file

    found = default_data_file(name)
    return found if found.is_absolute() else REPO / found


def read_sentences(path: Path, n: int) -> list[str]:
    """The first ``n`` non-blank lines of ``path`` (:func:`simcse.training.data.read_sentences`).

    Raises:
        SystemExit: the file is missing or has fewer than ``n`` non-blank lines (the message names the file).
    """
    from simcse.training.data import read_sentences as read

    try:
        out = read(path, n)
    except (FileNotFoundError, ValueError) as e:
        raise SystemExit(f"error: {e}") from e
    if len(out) < n:
        raise SystemExit(f"error: {path} has only {len(out)} non-blank lines, need {n}")
    return out


def int_at_least(minimum: int):
    """An argparse ``type=``: an integer >= ``minimum`` (else argparse's one-line usage error)."""
    import argparse

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer >= {minimum}, got {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"expected an integer >= {minimum}, got {value}")
        return value

    return parse


def int_list_at_least(minimum: int):
    """An argparse ``type=``: comma-separated integers, each >= ``minimum`` (e.g. ``32,64,128``)."""
    import argparse

    one = int_at_least(minimum)

    def parse(text: str) -> list[int]:
        items = [x.strip() for x in text.split(",") if x.strip()]
        if not items:
            raise argparse.ArgumentTypeError(f"expected comma-separated integers >= {minimum}, got {text!r}")
        return [one(x) for x in items]

    return parse
