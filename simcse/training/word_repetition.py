"""ESimCSE's word repetition (Wu et al., COLING 2022, arXiv 2109.04380, Section 3.1): the positive view is the
sentence with some of its tokens duplicated in place, so that the two views of a positive pair differ in length.

The official code (caskcsg/sentemb, ``ESimCSE/train.py``, ``prepare_features`` with ``--dup_type bpe``, the
setting of its ``run.sh``) works on the tokenised positive view ``x`` of ``L`` tokens (special tokens included,
after truncation to ``max_seq_length``)::

    if int(dup_rate * L) > 0:
        dup_len = randrange(min(10, int(dup_rate * L)))         # uniform in 0 .. min(10, int(r L)) - 1
        dup = sample(range(1, L - 1), dup_len)                   # never the first ([CLS]) or last ([SEP]) token
        every token at a position in dup is written twice

The paper writes ``dup_len in [0, max(2, int(dup_rate * len(x)))]`` over the words of the sentence; the code
(followed here) has no floor of 2, caps the draw at 9, excludes the upper end and counts subword tokens with the
special ones. The repeated view is not truncated again (it may exceed ``max_seq_length`` by up to 9 tokens, as
in the official code).
"""
from __future__ import annotations

import random
from typing import Sequence

__all__ = ["repeat_tokens", "WordRepetition"]


def repeat_tokens(ids: Sequence[int], dup_rate: float, rng: random.Random) -> list[int]:
    """``ids`` (one tokenised sentence, special tokens at both ends) with ``randrange(min(10, int(dup_rate * L)))``
    distinct inner tokens duplicated in place (the official ``--dup_type bpe``). Returns a new list of length
    ``L + dup_len``; a sentence with ``int(dup_rate * L) == 0`` is returned unchanged.

    Raises:
        ValueError: ``dup_rate`` outside [0, 1).
    """
    if isinstance(dup_rate, bool) or not isinstance(dup_rate, (int, float)) or not 0 <= dup_rate < 1:
        raise ValueError(f"dup_rate must be a number in [0, 1), got {dup_rate!r}")
    length = len(ids)
    cap = int(dup_rate * length)
    if cap <= 0:
        return list(ids)
    dup_len = rng.randrange(min(10, cap))
    dup = set(rng.sample(range(1, length - 1), dup_len))
    out: list[int] = []
    for i, token in enumerate(ids):
        if i in dup:
            out.append(token)
        out.append(token)
    return out


class WordRepetition:
    """Token-level augmentation of a batch: ``__call__(input_ids: list[list[int]], rng) -> list[list[int]]``
    applies :func:`repeat_tokens` to every sentence (the interface of
    :class:`simcse.training.augment.AugmentingCollator`'s ``token_augment``; the lengths change, so the collator
    rebuilds the attention mask and token types of the augmented view)."""

    def __init__(self, dup_rate: float = 0.32):
        repeat_tokens([], dup_rate, random.Random(0))  # validates dup_rate
        self.dup_rate = float(dup_rate)

    def __call__(self, input_ids: list[list[int]], rng: random.Random) -> list[list[int]]:
        return [repeat_tokens(ids, self.dup_rate, rng) for ids in input_ids]
