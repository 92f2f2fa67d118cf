"""The paper's embedding analyses as pure functions of embedding matrices.

* :func:`alignment` and :func:`uniformity`: Wang and Isola (2020), used in SimCSE Section 3 (Figure 2) and
  Section 5 (Figure 3); :func:`stsb_alignment_uniformity` computes both in the paper's STS-B setting.
* :func:`singular_spectrum`: the singular values of an embedding matrix, scaled as Appendix F (Figure F.1).
* :func:`cosine_by_gold_bins`: cosine similarities of sentence pairs grouped by gold score (Appendix G).

Every function takes numpy arrays or torch tensors (any float dtype, any device) and computes in float64
on the CPU; none reads or writes files (the STS-B pairs come from :func:`simcse.evaluation.data.load_stsb`,
BERT-whitening with its .npz files is :mod:`simcse.research.whitening`). Nothing heavy is imported at module import time.
"""
from __future__ import annotations

import itertools
import logging
import math
import os
from typing import Callable, NamedTuple, Sequence

import numpy as np

logger = logging.getLogger(__name__)

# ----------------------------------------------------------------------------------------- input checks


def _to_numpy(x, name: str) -> np.ndarray:
    """``x`` (numpy array, torch tensor or nested list) as a float64 numpy array."""
    if hasattr(x, "detach") and hasattr(x, "cpu"):  # a torch tensor, without importing torch here
        x = x.detach().cpu()
        if x.is_floating_point() and x.element_size() < 4:  # bf16 has no numpy dtype; widen halves
            x = x.float()
        x = x.numpy()
    try:
        arr = np.asarray(x, dtype=np.float64)
    except (TypeError, ValueError) as e:
        raise TypeError(f"{name} must be a numeric array or tensor, got {type(x).__name__}: {e}") from e
    return arr


def _as_matrix(x, name: str, min_rows: int = 1) -> np.ndarray:
    """``x`` as a finite float64 (N, D) matrix with N >= ``min_rows`` and D >= 1.

    Raises:
        TypeError: ``x`` is not numeric.
        ValueError: ``x`` is not 2-D, has too few rows, no columns, or NaN/inf entries.
    """
    arr = _to_numpy(x, name)
    if arr.ndim != 2:
        raise ValueError(f"{name} must be a 2-D (N, D) embedding matrix, got shape {arr.shape}")
    if arr.shape[0] < min_rows:
        raise ValueError(f"{name} needs at least {min_rows} row(s), got shape {arr.shape}")
    if arr.shape[1] < 1:
        raise ValueError(f"{name} has no columns (shape {arr.shape})")
    bad = ~np.isfinite(arr)
    if bad.any():
        row = int(np.argwhere(bad)[0, 0])
        raise ValueError(f"{name} has a NaN or infinite value (first in row {row})")
    return arr


def l2_normalize(x, name: str = "x") -> np.ndarray:
    """Rows of ``x`` (N, D) scaled to unit L2 norm; returns float64 (N, D).

    Raises:
        ValueError: a row has zero norm (its direction is undefined; the message gives the row), or any
            check of a (N, D) matrix fails (see module docs).
    """
    arr = _as_matrix(x, name)
    norms = np.linalg.norm(arr, axis=1, keepdims=True)  # (N, 1)
    zero = np.flatnonzero(norms[:, 0] == 0)
    if zero.size:
        raise ValueError(f"{name} row {int(zero[0])} is a zero vector: cannot normalise it to unit length")
    return arr / norms


def _check_positive(value, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.floating, np.integer)):
        raise TypeError(f"{name} must be a number, got {type(value).__name__}")
    if not (math.isfinite(value) and value > 0):
        raise ValueError(f"{name} must be a finite number > 0, got {value!r}")
    return float(value)


# ------------------------------------------------------------------------------ alignment / uniformity


def alignment(x, y, alpha: float = 2.0) -> float:
    """Alignment loss of positive pairs (Wang and Isola 2020, Eq. 2 there; SimCSE Section 5, Eq. 2).

    ``l_align = mean_i || f(x_i) - f(y_i) ||_2 ^ alpha`` where f(.) is the row L2-normalised embedding and
    (x_i, y_i) is the i-th positive pair. Lower is better; for unit vectors and alpha = 2 the value lies in
    [0, 4] (0: every pair coincides).

    Args:
        x: (N, D) embeddings of the first sentence of each positive pair (numpy or torch, any float dtype).
        y: (N, D) embeddings of the second sentence, row-aligned with ``x``.
        alpha: exponent > 0 (paper: 2).

    Returns:
        A Python float.

    Raises:
        ValueError: shapes differ, N = 0, a zero row (cannot be normalised), NaN/inf, or alpha <= 0.
    """
    alpha = _check_positive(alpha, "alpha")
    a = l2_normalize(x, "x")
    b = l2_normalize(y, "y")
    if a.shape != b.shape:
        raise ValueError(f"x and y must have the same (N, D) shape, got {a.shape} and {b.shape}")
    dist = np.linalg.norm(a - b, axis=1)  # (N,)
    return float(np.mean(dist**alpha))


def _logsumexp(values: np.ndarray) -> float:
    m = float(np.max(values))
    return m + math.log(float(np.sum(np.exp(values - m))))


def uniformity(x, t: float = 2.0, chunk_size: int = 2048) -> float:
    """Uniformity loss (Wang and Isola 2020, Eq. 3 there; SimCSE Section 5, Eq. 3).

    ``l_uniform = log mean_{i<j} exp(-t || f(x_i) - f(x_j) ||_2^2)`` over all N(N-1)/2 pairs of distinct
    rows, with f(.) the row L2-normalised embedding. Lower (more negative) is better; for unit vectors the
    value lies in [-4t, 0] (0: all embeddings identical).

    Computed exactly in float64 blocks of ``chunk_size`` rows (memory O(chunk_size * N)) with a
    log-sum-exp, so any N that fits in memory as (N, D) works.

    Args:
        x: (N, D) embeddings, N >= 2 (numpy or torch, any float dtype).
        t: temperature of the Gaussian potential, > 0 (paper: 2).
        chunk_size: rows per block (a speed/memory knob; the result does not depend on it).

    Returns:
        A Python float.

    Raises:
        ValueError: N < 2, a zero row, NaN/inf, t <= 0 or chunk_size < 1.
    """
    t = _check_positive(t, "t")
    if not isinstance(chunk_size, (int, np.integer)) or chunk_size < 1:
        raise ValueError(f"chunk_size must be an integer >= 1, got {chunk_size!r}")
    a = l2_normalize(_as_matrix(x, "x", min_rows=2), "x")
    n = a.shape[0]
    parts = []
    for start in range(0, n - 1, chunk_size):
        block = a[start : start + chunk_size]  # (C, D)
        cos = block @ a.T  # (C, N)
        sq = np.clip(2.0 - 2.0 * cos, 0.0, 4.0)  # squared distance of unit vectors
        rows = np.arange(start, start + block.shape[0])[:, None]
        upper = np.arange(n)[None, :] > rows  # keep j > i only: each unordered pair once
        vals = -t * sq[upper]
        if vals.size:
            parts.append(_logsumexp(vals))
    n_pairs = n * (n - 1) / 2.0
    return float(_logsumexp(np.asarray(parts)) - math.log(n_pairs))


# ----------------------------------------------------------------------------------------- spectrum


def singular_spectrum(x, center: bool = False, l2_normalize_rows: bool = False, normalize: str | None = "max") -> np.ndarray:
    """Singular values of the embedding matrix, largest first (SimCSE Appendix F, Figure F.1).

    The paper states only the scaling: "We normalize the singular values so that the largest one is 1"
    (``normalize="max"``, the default). It does not say whether the matrix is centred or its rows
    normalised; the defaults use the embeddings as the encoder outputs them (``center=False``,
    ``l2_normalize_rows=False``). Both are options: an anisotropic encoder's common mean direction
    alone makes the first singular value of the uncentred matrix dominate, and centring removes it.

    Args:
        x: (N, D) embeddings (numpy or torch).
        center: subtract the column mean before the SVD.
        l2_normalize_rows: scale each row to unit length first (before centring).
        normalize: ``"max"`` divides by the largest singular value, ``"sum"`` by the sum of all,
            ``None`` returns them unscaled.

    Returns:
        float64 array (min(N, D),), non-increasing.

    Raises:
        ValueError: bad ``x`` (see :func:`l2_normalize`), an unknown ``normalize``, or an all-zero matrix
            with a scaling requested.
    """
    if normalize not in ("max", "sum", None):
        raise ValueError(f"normalize must be 'max', 'sum' or None, got {normalize!r}")
    a = l2_normalize(x, "x") if l2_normalize_rows else _as_matrix(x, "x")
    if center:
        a = a - a.mean(axis=0, keepdims=True)
    s = np.linalg.svd(a, compute_uv=False)  # (min(N, D),) descending
    if normalize is None:
        return s
    scale = s[0] if normalize == "max" else s.sum()
    if scale <= 0:
        raise ValueError("x has only zero singular values (an all-zero matrix after centring); cannot normalise")
    return s / scale


# ------------------------------------------------------------------------------ cosine by gold bins


class GoldBin(NamedTuple):
    """One gold-score group of :func:`cosine_by_gold_bins`: pairs with ``low <= gold < high``
    (``<= high`` for the last bin); ``cosines`` is float64 (n_pairs_in_bin,)."""

    low: float
    high: float
    cosines: np.ndarray

    @property
    def label(self) -> str:
        return f"{self.low:g}-{self.high:g}"


def pair_cosine(e1, e2) -> np.ndarray:
    """Cosine similarity of each row pair, e1, e2 (N, D) -> float64 (N,), computed by the evaluator's
    :func:`simcse.evaluation.sts.cosine_similarity` (one cosine for the whole package).

    Raises:
        ValueError: shapes differ, a zero row, NaN/inf.
    """
    from simcse.evaluation.sts import cosine_similarity

    a = _as_matrix(e1, "e1")
    b = _as_matrix(e2, "e2")
    if a.shape != b.shape:
        raise ValueError(f"e1 and e2 must have the same (N, D) shape, got {a.shape} and {b.shape}")
    return cosine_similarity(a, b)


def cosine_by_gold_bins(e1, e2, gold, bins: Sequence[float] = (0, 1, 2, 3, 4, 5)) -> list[GoldBin]:
    """Cosine similarities of sentence pairs grouped by their gold similarity (SimCSE Appendix G, Figure G.1).

    The paper divides STS-B pairs "into 5 groups based on ground truth ratings"; STS-B gold scores lie in
    [0, 5], so the default edges give the groups [0,1), [1,2), [2,3), [3,4), [4,5].

    Args:
        e1: (N, D) embeddings of the first sentences.
        e2: (N, D) embeddings of the second sentences.
        gold: (N,) gold scores (any real scale matching ``bins``).
        bins: K+1 strictly increasing edges -> K groups; each is [low, high), the last [low, high].

    Returns:
        K :class:`GoldBin` (low, high, cosines float64 (n_k,)), in edge order; a group may be empty.

    Raises:
        ValueError: mismatched lengths, fewer than 2 or non-increasing edges, non-finite gold scores, or a
            gold score outside [bins[0], bins[-1]] (the message gives the first such pair).
    """
    cos = pair_cosine(e1, e2)
    g = _to_numpy(gold, "gold")
    if g.ndim != 1 or g.shape[0] != cos.shape[0]:
        raise ValueError(f"gold must be a 1-D array of length N={cos.shape[0]}, got shape {g.shape}")
    if not np.all(np.isfinite(g)):
        raise ValueError(f"gold has a NaN or infinite score (pair {int(np.flatnonzero(~np.isfinite(g))[0])})")
    edges = _to_numpy(bins, "bins")
    if edges.ndim != 1 or edges.size < 2 or not np.all(np.diff(edges) > 0):
        raise ValueError(f"bins must be at least 2 strictly increasing edges, got {list(np.atleast_1d(edges))}")
    outside = np.flatnonzero((g < edges[0]) | (g > edges[-1]))
    if outside.size:
        i = int(outside[0])
        raise ValueError(f"gold score {g[i]:g} of pair {i} is outside the bins [{edges[0]:g}, {edges[-1]:g}]")
    groups = []
    for k in range(edges.size - 1):
        lo, hi = float(edges[k]), float(edges[k + 1])
        last = k == edges.size - 2
        mask = (g >= lo) & ((g <= hi) if last else (g < hi))
        groups.append(GoldBin(lo, hi, cos[mask]))
    return groups


# ----------------------------------------------------------------------------------------- STS-B data

def _encode_checked(encode: Callable[[list[str]], np.ndarray], sentences: list[str]) -> np.ndarray:
    emb = _to_numpy(encode(sentences), "encode(sentences)")
    if emb.ndim != 2 or emb.shape[0] != len(sentences):
        raise ValueError(f"encode must return a ({len(sentences)}, D) array for {len(sentences)} sentences, got shape {emb.shape}")
    return emb


def encode_pairs(encode: Callable[[list[str]], np.ndarray], pairs) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Encode each distinct sentence of ``pairs`` (``sent1``, ``sent2``: N str each) once.

    Returns ``(unique (U, D), e1 (N, D), e2 (N, D))`` float64, where ``unique`` holds the U distinct
    sentences in first-appearance order and e1/e2 are row-aligned with ``pairs``.
    """
    index: dict[str, int] = {}
    for s in itertools.chain(pairs.sent1, pairs.sent2):
        index.setdefault(s, len(index))
    unique = _encode_checked(encode, list(index))
    e1 = unique[[index[s] for s in pairs.sent1]]
    e2 = unique[[index[s] for s in pairs.sent2]]
    return unique, e1, e2


def stsb_alignment_uniformity(
    encode: Callable[[list[str]], np.ndarray],
    data_dir: str | os.PathLike | None = None,
    split: str = "dev",
    threshold: float = 4.0,
    alpha: float = 2.0,
    t: float = 2.0,
) -> dict[str, float]:
    """Alignment and uniformity in SimCSE's setting (Section 3 footnote 3 and Section 5): "STS-B pairs with
    a score higher than 4 as p_pos and all STS-B sentences as p_data".

    Positives are the pairs of ``split`` with gold > ``threshold`` (strictly); uniformity runs over every
    distinct sentence of ``split`` (each sentence once, so repeated sentences do not add zero distances).
    The paper does not name the split; ``"dev"`` is the default here (1,500 pairs), ``"all"`` uses
    train+dev+test.

    Args:
        encode: maps a list of N str to an (N, D) array or tensor (e.g. ``SimCSEModel.encode``).
        data_dir, split: see :func:`simcse.evaluation.data.load_stsb` (which reads the pairs).
        threshold: gold-score cut for positives (paper: 4, on STS-B's 0-5 scale).
        alpha, t: see :func:`alignment` and :func:`uniformity`.

    Returns:
        ``{"align": float, "uniform": float, "n_pos": int, "n_sentences": int}``.

    Raises:
        ValueError: no pair above ``threshold``, or ``encode`` returns a wrong shape; errors of
            :func:`simcse.evaluation.data.load_stsb`.
    """
    from simcse.evaluation.data import load_stsb

    pairs = load_stsb(data_dir, split)
    if not np.any(pairs.scores > threshold):  # fail before encoding anything
        raise ValueError(f"STS-B {split} has no pair with gold score > {threshold:g}: no positives for alignment")
    unique, e1, e2 = encode_pairs(encode, pairs)
    return pairs_alignment_uniformity(pairs.scores, unique, e1, e2, threshold=threshold, alpha=alpha, t=t)


def pairs_alignment_uniformity(gold, unique, e1, e2, threshold: float = 4.0, alpha: float = 2.0,
                               t: float = 2.0) -> dict[str, float]:
    """The STS-B setting of :func:`stsb_alignment_uniformity` on embeddings already computed.

    Args:
        gold: (N,) gold scores of the pairs.
        unique: (U, D) embeddings of the distinct sentences (uniformity).
        e1, e2: (N, D) embeddings of the pairs' first and second sentences; pairs with gold > ``threshold``
            are the positives (alignment).

    Returns / Raises: as :func:`stsb_alignment_uniformity`.
    """
    g = _to_numpy(gold, "gold")
    if g.ndim != 1 or g.shape[0] != _to_numpy(e1, "e1").shape[0]:
        raise ValueError(f"gold must be 1-D with one score per row of e1, got shape {g.shape}")
    pos = np.flatnonzero(g > threshold)
    if pos.size == 0:
        raise ValueError(f"no pair with gold score > {threshold:g}: no positives for alignment")
    a1, a2 = _as_matrix(e1, "e1"), _as_matrix(e2, "e2")
    u = _as_matrix(unique, "unique", min_rows=2)
    return {
        "align": alignment(a1[pos], a2[pos], alpha=alpha),
        "uniform": uniformity(u, t=t),
        "n_pos": int(pos.size),
        "n_sentences": int(u.shape[0]),
    }
