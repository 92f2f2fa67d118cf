"""Bootstrap confidence intervals for STS Spearman correlations, and paired comparisons of two models.

SentEval, MTEB and sentence-transformers print a bare Spearman; whether 0.3 points between two models is a
difference at all depends on the number of pairs (over STS-B test's 1,379 pairs a Spearman near 0.82 has a 95%
interval of about +-2 points). This module resamples the scored pairs:

* :func:`bootstrap_parts`: per part (an STS subset or an STS-B / SICK-R split) the pairs are drawn with replacement
  ``n_resamples`` times (fixed ``seed``); the interval of a part's Spearman is the percentile interval of its
  resampled Spearmans. The ``all`` aggregates are resampled as they are defined: each resample draws every part's
  pairs *within that part* (stratified, so each subset keeps its size), then computes the pooled Spearman
  (``all``), the plain mean of the parts' Spearmans (``mean``) and their size-weighted mean (``wmean``) from the
  same draw.
* :func:`paired_bootstrap`: two models' similarity scores on the *same* pairs, resampled with the same indices; the
  difference (a - b) per resample gives the interval of the difference and a two-sided p-value
  (``2 * min(P(d* <= 0), P(d* >= 0))`` over the resamples, at least ``1 / n_resamples``), the percentile
  paired bootstrap of Koehn (2004) as used for MT and retrieval evaluation.

Spearman is the Pearson correlation of average ranks (scipy's ``rankdata``, ties averaged), computed for all
resamples at once.
"""
from __future__ import annotations

from typing import Mapping, NamedTuple

import numpy as np
from scipy.stats import rankdata

DEFAULT_RESAMPLES = 1000
DEFAULT_SEED = 1111
CONFIDENCE = 0.95


class Interval(NamedTuple):
    """A percentile bootstrap interval ``(low, high)`` of a statistic, in the statistic's own units (fractions)."""

    low: float
    high: float


def _spearman_rows(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Spearman of each row pair of two (R, n) arrays -> (R,) float64 (nan where a row is constant)."""
    rx = rankdata(x, axis=1)
    ry = rankdata(y, axis=1)
    rx -= rx.mean(axis=1, keepdims=True)
    ry -= ry.mean(axis=1, keepdims=True)
    num = (rx * ry).sum(axis=1)
    den = np.sqrt((rx * rx).sum(axis=1) * (ry * ry).sum(axis=1))
    with np.errstate(invalid="ignore", divide="ignore"):
        return num / den


def _indices(sizes: list[int], n_resamples: int, seed: int) -> list[np.ndarray]:
    """One (R, n_k) index matrix per part, drawn within each part from one generator (fixed order)."""
    rng = np.random.default_rng(seed)
    return [rng.integers(0, n, size=(n_resamples, n)) for n in sizes]


def _check(n_resamples: int, confidence: float) -> None:
    if not isinstance(n_resamples, (int, np.integer)) or isinstance(n_resamples, bool) or n_resamples < 2:
        raise ValueError(f"n_resamples must be an integer of at least 2, got {n_resamples!r}")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), got {confidence!r}")


def _interval(stats: np.ndarray, confidence: float) -> Interval:
    stats = stats[np.isfinite(stats)]
    if stats.size == 0:
        return Interval(float("nan"), float("nan"))
    alpha = (1 - confidence) / 2
    lo, hi = np.quantile(stats, [alpha, 1 - alpha])
    return Interval(float(lo), float(hi))


def _part_stats(sims: list[np.ndarray], golds: list[np.ndarray], idx: list[np.ndarray]) -> dict:
    """Resampled Spearmans: ``{"parts": [(R,) per part], "all": (R,), "mean": (R,), "wmean": (R,)}``."""
    per = [_spearman_rows(s[i], g[i]) for s, g, i in zip(sims, golds, idx)]
    pooled = _spearman_rows(np.concatenate([s[i] for s, i in zip(sims, idx)], axis=1),
                            np.concatenate([g[i] for g, i in zip(golds, idx)], axis=1))
    stack = np.stack(per)  # (K, R)
    weights = np.array([len(s) for s in sims], dtype=np.float64)
    return {"parts": per, "all": pooled, "mean": stack.mean(axis=0), "wmean": (weights[:, None] * stack).sum(0) / weights.sum()}


def _as_arrays(parts: Mapping[str, tuple]) -> tuple[list[str], list[np.ndarray], list[np.ndarray]]:
    names = list(parts)
    if not names:
        raise ValueError("no scored parts given")
    sims, golds = [], []
    for name in names:
        s, g = (np.asarray(x, dtype=np.float64) for x in parts[name])
        if s.ndim != 1 or s.shape != g.shape or len(s) < 2:
            raise ValueError(f"{name}: expected two (n,) arrays of one length n >= 2 (similarities, gold), got {s.shape} "
                             f"and {g.shape}")
        sims.append(s)
        golds.append(g)
    return names, sims, golds


def bootstrap_parts(parts: Mapping[str, tuple[np.ndarray, np.ndarray]], n_resamples: int = DEFAULT_RESAMPLES,
                    seed: int = DEFAULT_SEED, confidence: float = CONFIDENCE) -> dict:
    """Percentile bootstrap intervals of each part's Spearman and of the ``all`` / ``mean`` / ``wmean`` aggregates.

    Args:
        parts: name -> (system similarities (n,), gold scores (n,)), float arrays of one length n >= 2.
        n_resamples: resamples (>= 2). seed: the generator's seed (the same seed, the same intervals).
        confidence: the interval's coverage, 0.95 by default.

    Returns:
        ``{name: Interval, ..., "all": {"all": Interval, "mean": Interval, "wmean": Interval}}`` (fractions, like
        the Spearmans they bound).

    Raises:
        ValueError: no parts, arrays of another shape, ``n_resamples`` < 2 or ``confidence`` outside (0, 1).
    """
    _check(n_resamples, confidence)
    names, sims, golds = _as_arrays(parts)
    stats = _part_stats(sims, golds, _indices([len(s) for s in sims], n_resamples, seed))
    out: dict = {name: _interval(st, confidence) for name, st in zip(names, stats["parts"])}
    out["all"] = {k: _interval(stats[k], confidence) for k in ("all", "mean", "wmean")}
    return out


class Difference(NamedTuple):
    """A paired comparison of two models on the same pairs: ``a - b`` of a Spearman, its interval and p-value."""

    a: float
    b: float
    diff: float
    low: float
    high: float
    p_value: float


def _difference(a: float, b: float, d: np.ndarray, confidence: float) -> Difference:
    d = d[np.isfinite(d)]
    lo, hi = _interval(d, confidence)
    if d.size == 0:
        p = float("nan")
    else:
        p = float(min(1.0, max(2 * min(np.mean(d <= 0), np.mean(d >= 0)), 1.0 / d.size)))
    return Difference(float(a), float(b), float(a - b), lo, hi, p)


def paired_bootstrap(parts_a: Mapping[str, tuple], parts_b: Mapping[str, tuple], n_resamples: int = DEFAULT_RESAMPLES,
                     seed: int = DEFAULT_SEED, confidence: float = CONFIDENCE) -> dict:
    """Paired bootstrap of the difference between two models' Spearmans on the same scored pairs.

    Args:
        parts_a, parts_b: name -> (similarities (n,), gold (n,)) for model a and model b; the same names, and per
            name the same gold scores in the same order (the same pairs).
        n_resamples, seed, confidence: as :func:`bootstrap_parts` (both models get the same resampled indices).

    Returns:
        ``{name: Difference, ..., "all": {"all": Difference, "mean": Difference, "wmean": Difference}}``:
        each Difference holds a's and b's Spearman on the original pairs, ``diff = a - b``, the percentile interval
        of the resampled differences and the two-sided p-value of "no difference".

    Raises:
        ValueError: the parts differ in names, lengths or gold scores (not the same pairs), or as
            :func:`bootstrap_parts`.
    """
    _check(n_resamples, confidence)
    names_a, sims_a, golds_a = _as_arrays(parts_a)
    names_b, sims_b, golds_b = _as_arrays(parts_b)
    if names_a != names_b:
        raise ValueError(f"the two models were scored on other parts: {names_a} vs {names_b}")
    for name, ga, gb in zip(names_a, golds_a, golds_b):
        if ga.shape != gb.shape or not np.array_equal(ga, gb):
            raise ValueError(f"{name}: the two models' gold scores differ (not the same pairs); a paired comparison "
                             "needs both scored on the same pairs in the same order")
    sizes = [len(s) for s in sims_a]
    full = [np.arange(n)[None, :] for n in sizes]
    point_a, point_b = _part_stats(sims_a, golds_a, full), _part_stats(sims_b, golds_b, full)
    idx = _indices(sizes, n_resamples, seed)
    res_a, res_b = _part_stats(sims_a, golds_a, idx), _part_stats(sims_b, golds_b, idx)
    out: dict = {name: _difference(pa[0], pb[0], ra - rb, confidence)
                 for name, pa, pb, ra, rb in zip(names_a, point_a["parts"], point_b["parts"], res_a["parts"], res_b["parts"])}
    out["all"] = {k: _difference(point_a[k][0], point_b[k][0], res_a[k] - res_b[k], confidence) for k in ("all", "mean", "wmean")}
    return out
