"""How similarity scores are reported, for every consumer (the ``SimCSE`` tool, ``simcse search``, ``simcse serve``):
the rounding rule is written here once."""
from __future__ import annotations

import numpy as np
import torch

from simcse.files.inputs import check_sentences

# Cosines of unit vectors computed in float32 carry a rounding error of about sqrt(H) * 2**-24; a score
# within this of +-1 is reported as +-1, so that a sentence's exact duplicate scores 1.0.
COSINE_ROUNDING = 1e-5

def clip_cosine(scores):
    """Cosine scores (float or array of any shape) put into [-1, 1].

    Values beyond +-1 by float rounding become +-1, and so do values within :data:`COSINE_ROUNDING` of
    +-1 (float32 dot products of unit vectors deviate from the exact cosine by up to about
    ``sqrt(H) * 6e-8``; ``scripts/measure_cosine_rounding.py`` measured up to 1 + 4.8e-7 for H = 384).
    NaN and -inf (an empty result slot) are left as they are. Returns the same type (float -> float,
    array -> float32 array).
    """
    if isinstance(scores, (float, int, np.floating)):
        return float(clip_cosine(np.array([scores], dtype=np.float64))[0])
    a = np.array(scores, dtype=np.float32, copy=True)
    finite = np.isfinite(a)
    a[finite & (a >= 1.0 - COSINE_ROUNDING)] = 1.0
    a[finite & (a <= -1.0 + COSINE_ROUNDING)] = -1.0
    return a


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
