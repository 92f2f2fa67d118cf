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
special ones. Here it is applied to the collated batch (:func:`repeat_view`, called by the ESimCSE objective's
``prepare_batch``) rather than once to the dataset. The repeated view is not truncated again (it may exceed ``max_seq_length`` by up to 9 tokens, as
in the official code).
"""
from __future__ import annotations

import random
from typing import Mapping, Sequence

import torch

__all__ = ["repeat_tokens", "repeat_view"]


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


def repeat_view(batch: Mapping[str, torch.Tensor], view: int, dup_rate: float, rng: random.Random,
                pad_token_id: int = 0) -> dict[str, torch.Tensor]:
    """``batch`` (``input_ids``/``attention_mask``/``token_type_ids`` (B, V, L) int64, right-padded) with the
    real tokens of ``view`` replaced by :func:`repeat_tokens` of them (sentence by sentence, in row order, one
    ``rng``). The tensors grow to the longest new row (pad ``pad_token_id``, mask 0); the repeated rows get
    token type 0, as in the official code. Other keys are passed through. Returns a new dict.

    Raises:
        ValueError: ``view`` out of range or a bad ``dup_rate``.
    """
    ids, mask = batch["input_ids"], batch["attention_mask"]
    b, v, length = ids.shape
    if not 0 <= view < v:
        raise ValueError(f"view {view} out of range for a batch of {v} views")
    rows = [repeat_tokens(ids[i, view][mask[i, view].bool()].tolist(), dup_rate, rng) for i in range(b)]
    longest = max([length, *map(len, rows)])
    out = dict(batch)
    for key in ("input_ids", "attention_mask", "token_type_ids"):
        if key not in batch:
            continue
        t = batch[key]
        grown = torch.full((b, v, longest), pad_token_id if key == "input_ids" else 0, dtype=t.dtype, device=t.device)
        grown[:, :, :length] = t
        grown[:, view] = pad_token_id if key == "input_ids" else 0
        for i, row in enumerate(rows):
            if key == "input_ids":
                grown[i, view, : len(row)] = torch.as_tensor(row, dtype=t.dtype)
            elif key == "attention_mask":
                grown[i, view, : len(row)] = 1
        out[key] = grown
    return out
