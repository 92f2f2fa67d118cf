"""Tiny random decoder LLMs for the tests (:func:`simcse.models.testing.tiny_decoder`)."""
from __future__ import annotations

from simcse.models.testing import DECODER_FAMILIES, tiny_decoder


def make_tiny_decoder(folder, family: str = "llama", seed: int = 0, dropout: float = 0.1):
    return tiny_decoder(folder, family, seed=seed, dropout=dropout)


__all__ = ["DECODER_FAMILIES", "make_tiny_decoder"]
