"""The one rule for ``truncate_dim``: keep the first ``d`` coordinates of an embedding (Matryoshka prefixes).

Every surface that makes or uses a vector (``SimCSE(..., truncate_dim=)``, ``simcse encode/index/search/serve
--truncate_dim``, the evaluator, the ONNX export, the Matryoshka objectives) checks the value with
:func:`check_truncate_dim` and cuts with :func:`truncate_embeddings`, so the rule is written once.

As in sentence-transformers (``SentenceTransformer.encode(truncate_dim=...)`` and ``MatryoshkaLoss``'s
``shrink``), a truncated embedding is the prefix ``emb[..., :d]``; when the caller asks for unit vectors the
prefix is L2-normalised *after* the cut (the prefix of a unit vector is not a unit vector).
"""
from __future__ import annotations

from typing import Iterable

import numpy as np
import torch

__all__ = ["check_truncate_dim", "truncate_embeddings", "TRAINED_DIMS_KEY"]

#: The key of ``simcse_config.json`` (and of the sentence-transformers config) listing the dimensions a model
#: was trained at (Matryoshka ``matryoshka_dims``); absent for a model trained at its full size only.
TRAINED_DIMS_KEY = "matryoshka_dims"


def check_truncate_dim(truncate_dim, hidden_size: int, option: str = "--truncate_dim",
                       allowed: Iterable[int] | None = None, allowed_what: str = "") -> int | None:
    """Validate a ``truncate_dim`` value before any work; returns it as an int (None: no truncation).

    Args:
        truncate_dim: None, or a positive int <= ``hidden_size``.
        hidden_size: the full embedding size of the model (or index).
        option: the option's name as the user wrote it (named in the error).
        allowed: when given, the only sizes accepted (e.g. the size an index was built at).
        allowed_what: what ``allowed`` is, for the message (e.g. "the index at out/ was built at").

    Raises:
        ValueError: not an int, below 1, above ``hidden_size``, or not in ``allowed`` (one line naming ``option``).
    """
    if truncate_dim is None:
        return None
    if isinstance(truncate_dim, bool) or not isinstance(truncate_dim, (int, np.integer)):
        raise ValueError(f"{option} must be a positive integer, got {truncate_dim!r}")
    d = int(truncate_dim)
    if d < 1:
        raise ValueError(f"{option} must be a positive integer (1..{hidden_size}), got {d}")
    if d > hidden_size:
        raise ValueError(f"{option} {d} is larger than the embedding size {hidden_size}: use 1..{hidden_size}")
    if allowed is not None:
        allowed = sorted({int(a) for a in allowed})
        if d not in allowed:
            what = allowed_what or "the sizes accepted here are"
            raise ValueError(f"{option} {d} does not match {what} {allowed}")
    return d


def truncate_embeddings(embeddings, truncate_dim: int | None, normalize: bool = False):
    """The first ``truncate_dim`` coordinates of ``embeddings`` (..., H), L2-normalised after the cut when
    ``normalize``; ``truncate_dim`` None keeps all H (still normalised when asked).

    Works on a torch tensor (any dtype; differentiable) or a numpy array (float32 result). The caller has
    checked the value with :func:`check_truncate_dim`.
    """
    if isinstance(embeddings, torch.Tensor):
        out = embeddings[..., :truncate_dim] if truncate_dim is not None else embeddings
        return torch.nn.functional.normalize(out, p=2, dim=-1) if normalize else out
    out = np.asarray(embeddings)
    if truncate_dim is not None:
        out = out[..., :truncate_dim]
    if normalize:
        out = out / np.maximum(np.linalg.norm(out, axis=-1, keepdims=True), 1e-12)
    return np.ascontiguousarray(out, dtype=np.float32)
