"""How similarity scores are reported, for every consumer (the ``SimCSE`` tool, ``simcse search``, ``simcse serve``):
the rounding rule is written here once."""
from __future__ import annotations

import numpy as np
import torch

from simcse.files.inputs import check_sentences

#: How far a computed cosine of unit vectors may be from the exact one, by the dtype the indexed vectors are
#: stored in; a score within this of +-1 is reported as +-1, so that a sentence's exact duplicate scores 1.0.
#: float32: float32 dot products of unit vectors deviate by about sqrt(H) * 2**-24 (measured: up to 4.8e-7 for
#: H = 384, ``scripts/benchmarks/cosine_rounding.py``). float16 (shards written with ``--dtype float16``, the
#: re-ranking copies of an IVF-PQ index): rounding a unit vector q to float16 moves q . fl(q) by at most
#: float16's unit roundoff 2**-11 (sum q_i**2 * d_i with |d_i| <= 2**-11); twice that covers it and the float32
#: sum. This table is the one statement of the rule: every consumer (``SimCSE.search``/``similarity``,
#: ``simcse search``, ``simcse serve``) scores through :func:`clip_cosine` / :func:`search_index`.
COSINE_ROUNDING = {"float32": 1e-5, "float16": 2.0 ** -10}


def cosine_rounding(stored_dtype="float32") -> float:
    """The tolerance of :data:`COSINE_ROUNDING` for vectors stored as ``stored_dtype`` (a name or numpy dtype).

    Raises:
        ValueError: a dtype the table does not hold.
    """
    name = np.dtype(stored_dtype).name
    if name not in COSINE_ROUNDING:
        raise ValueError(f"no cosine rounding rule for vectors stored as {name}; expected one of {sorted(COSINE_ROUNDING)}")
    return COSINE_ROUNDING[name]


def clip_cosine(scores, stored_dtype="float32"):
    """Cosine scores (float or array of any shape) put into [-1, 1].

    Values beyond +-1 by float rounding become +-1, and so do values within ``cosine_rounding(stored_dtype)``
    of +-1 (:data:`COSINE_ROUNDING`: 1e-5 when the vectors were stored in float32, 2**-10 in float16).
    NaN and -inf (an empty result slot) are left as they are. Returns the same type (float -> float,
    array -> float32 array).
    """
    if isinstance(scores, (float, int, np.floating)):
        return float(clip_cosine(np.array([scores], dtype=np.float64), stored_dtype)[0])
    tol = cosine_rounding(stored_dtype)
    a = np.array(scores, dtype=np.float32, copy=True)
    finite = np.isfinite(a)
    a[finite & (a >= 1.0 - tol)] = 1.0
    a[finite & (a <= -1.0 + tol)] = -1.0
    return a


def search_index(index, queries: np.ndarray, top_k: int) -> tuple[np.ndarray, np.ndarray]:
    """``index.search(queries, top_k)`` with the scores put through :func:`clip_cosine` at the tolerance of the
    dtype the index's vectors were stored in (``index.vector_dtype``): the one search path of the ``SimCSE``
    tool, ``simcse search`` and ``simcse serve``.

    Args:
        index: a :class:`simcse.retrieval.index.VectorIndex` of unit vectors.
        queries: float32 (Q, H) unit rows.
        top_k: results per query.

    Returns:
        scores float32 (Q, k) in [-1, 1] (-inf for an empty slot), ids int64 (Q, k) (-1 for an empty slot).
    """
    scores, ids = index.search(queries, top_k)
    return clip_cosine(scores, getattr(index, "vector_dtype", "float32")), ids


# -------------------------------------------------------------------------------------- similarity
def unit_rows(x, name: str, hidden_size: int, encode) -> tuple[np.ndarray, bool]:
    """``(rows, single)``: float32 (n, H) unit-length rows from sentences or from precomputed (H,)/(n, H) vectors.

    ``encode(list_of_str) -> (n, H) array`` embeds sentences (not normalised); ``single`` says whether ``x``
    was one sentence / one vector. A zero vector stays zero (its cosine with anything is 0).

    Raises:
        TypeError: not sentences or a float array (the message names ``name``). ValueError: a wrong shape
            (not (H,) or (n, H)), a NaN or inf (the row is named), or a bad sentence (as ``check_sentences``).
    """
    if isinstance(x, np.ndarray) and x.dtype.kind in "UO":  # a numpy array of str: sentences
        x = x.tolist() if x.ndim == 1 else x
    if isinstance(x, (np.ndarray, torch.Tensor)):
        a = x.detach().float().cpu().numpy() if isinstance(x, torch.Tensor) else np.asarray(x)
        if a.dtype.kind not in "fiu":
            raise TypeError(f"{name} must be sentences or a float array, got an array of dtype {a.dtype}")
        if a.ndim not in (1, 2) or a.shape[-1] != hidden_size:
            raise ValueError(f"{name} must have shape ({hidden_size},) or (n, {hidden_size}), "
                             f"got {tuple(a.shape)}")
        single = a.ndim == 1
        a = np.atleast_2d(a).astype(np.float64)
        if not np.isfinite(a).all():
            raise ValueError(f"{name}[{int(np.flatnonzero(~np.isfinite(a).all(axis=1))[0])}] has a NaN or inf")
    else:
        items, single = check_sentences(x, name)
        a = encode(items)
    # scale rows to unit length in float64 (then float32): float32 norms of huge vectors overflow to inf
    a = np.asarray(a, dtype=np.float64)
    a = a / np.maximum(np.abs(a).max(axis=1, keepdims=True), 1e-300)  # max-abs 1: the norm cannot overflow
    norms = np.linalg.norm(a, axis=1, keepdims=True)
    return (a / np.maximum(norms, 1e-12)).astype(np.float32), single
