"""Tiny random decoder LLMs for the tests: :mod:`scripts/make_tiny_decoder.py` (the one builder) over the test
vocabulary."""
from __future__ import annotations

from pathlib import Path

from conftest import WORDS, load_script

_builder = load_script("make_tiny_decoder", "make_tiny_decoder_for_tests")
DECODER_FAMILIES = _builder.FAMILIES


def make_tiny_decoder(folder: Path, family: str = "llama", seed: int = 0, dropout: float = 0.1) -> Path:
    """``scripts/make_tiny_decoder.py``'s decoder with the test vocabulary (conftest.WORDS)."""
    return _builder.make_tiny_decoder(folder, family, seed=seed, dropout=dropout, words=WORDS)
