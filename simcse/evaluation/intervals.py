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

* :func:`hierarchical_bootstrap` and :func:`paired_hierarchical_bootstrap`: several training seeds of one model
  (or of two models, paired by seed), each scored on the same pairs. Each resample draws the seeds with
  replacement, then the pairs within each part, and averages the drawn seeds' pooled Spearmans on those pairs.
  Every seed is scored on the same test set, so the pair draw of a resample is shared by its seeds (seeds and
  pairs are crossed, as rows and columns in Owen's 2007 "pigeonhole" bootstrap); a fresh pair draw per seed
  would treat the one test set as several and narrow the interval. The interval covers both the seed-to-seed
  spread and the finite test set: with identical seeds it is the test set's interval, with very many pairs the
  seeds' spread.
  :func:`seed_t_interval` and :func:`paired_seed_t` are the plain t statistics over the seeds' scores, shown
  beside them. Over 3 seeds the seed-resampling interval of a *difference* is about the range of the seeds'
  differences and covers about 4 times in 5 when seeds dominate; the experiment report's headline interval
  (:mod:`simcse.evaluation.seed_intervals`) adds a t-based seed part to the test set's part instead, on the draws
  of :func:`pair_resamples_over_seeds`.

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


def _indices(sizes: list[int], n_resamples: int, seed) -> list[np.ndarray]:
    """One (R, n_k) index matrix per part, drawn within each part from one generator (fixed order); ``seed`` is an
    integer or a ``numpy.random.Generator`` to draw from."""
    rng = seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)
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


#: resampled pair indices held at once (resamples x pairs, 8 bytes each, a few arrays of that size alive): bounds a
#: bootstrap's memory whatever ``n_resamples`` (10,000 resamples of SICK-R test's 4,927 pairs at once took 3.4 GiB)
CHUNK_CELLS = 1_000_000


def _resampled(models: list[tuple[list[np.ndarray], list[np.ndarray]]], sizes: list[int], n_resamples: int, seed,
               chunk_cells: int = CHUNK_CELLS) -> list[dict]:
    """:func:`_part_stats` of each model (``(sims, golds)`` per part) over ``n_resamples`` resamples, every model on
    the same draws (paired). Resamples are drawn and scored in chunks of at most ``chunk_cells`` indices; each part
    draws from its own generator (``SeedSequence(seed).spawn``), so the result does not depend on the chunk size."""
    gens = [np.random.default_rng(s) for s in np.random.SeedSequence(seed).spawn(len(sizes))]
    # an even number of resamples per chunk: numpy's bounded draws take 32-bit halves of 64-bit words and drop an odd
    # call's last half, so even chunks consume the stream exactly as one draw of all resamples would
    step = max(2, int(chunk_cells) // max(1, sum(sizes)) // 2 * 2)
    chunks: list[list[dict]] = [[] for _ in models]
    for start in range(0, n_resamples, step):
        r = min(step, n_resamples - start)
        idx = [g.integers(0, n, size=(r, n)) for g, n in zip(gens, sizes)]
        for m, (sims, golds) in enumerate(models):
            chunks[m].append(_part_stats(sims, golds, idx))
    return [{"parts": [np.concatenate([c["parts"][k] for c in done]) for k in range(len(sizes))],
             **{key: np.concatenate([c[key] for c in done]) for key in ("all", "mean", "wmean")}} for done in chunks]


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
        n_resamples: resamples (>= 2), drawn and scored in chunks (:data:`CHUNK_CELLS` indices at a time), so
            memory does not grow with it. seed: the generators' seed (the same seed, the same intervals).
        confidence: the interval's coverage, 0.95 by default.

    Returns:
        ``{name: Interval, ..., "all": {"all": Interval, "mean": Interval, "wmean": Interval}}`` (fractions, like
        the Spearmans they bound).

    Raises:
        ValueError: no parts, arrays of another shape, ``n_resamples`` < 2 or ``confidence`` outside (0, 1).
    """
    _check(n_resamples, confidence)
    names, sims, golds = _as_arrays(parts)
    stats = _resampled([(sims, golds)], [len(s) for s in sims], n_resamples, seed)[0]
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
    res_a, res_b = _resampled([(sims_a, golds_a), (sims_b, golds_b)], sizes, n_resamples, seed)
    out: dict = {name: _difference(pa[0], pb[0], ra - rb, confidence)
                 for name, pa, pb, ra, rb in zip(names_a, point_a["parts"], point_b["parts"], res_a["parts"], res_b["parts"])}
    out["all"] = {k: _difference(point_a[k][0], point_b[k][0], res_a[k] - res_b[k], confidence) for k in ("all", "mean", "wmean")}
    return out


# ------------------------------------------------------------------------------------ over training seeds
class SeedEstimate(NamedTuple):
    """The mean over seeds of a pooled Spearman and its interval (fractions), with each seed's own value."""

    mean: float
    low: float
    high: float
    per_seed: tuple


def pooled_spearman(parts: Mapping[str, tuple]) -> float:
    """The Spearman of one model's scored pairs, every part's pairs pooled (one part: that part's Spearman).

    Args:
        parts: name -> (similarities (n,), gold (n,)), float arrays.

    Raises:
        ValueError: as :func:`bootstrap_parts`.
    """
    _, sims, golds = _as_arrays(parts)
    return float(_part_stats(sims, golds, [np.arange(len(s))[None, :] for s in sims])["all"][0])


def _seed_arrays(seeds: list, what: str) -> tuple[list[str], list[list[np.ndarray]], list[list[np.ndarray]]]:
    if len(seeds) < 1:
        raise ValueError(f"{what}: no seeds given")
    names, sims, golds = [], [], []
    for k, parts in enumerate(seeds):
        n, s, g = _as_arrays(parts)
        if names and n != names[0]:
            raise ValueError(f"{what}: seed {k} was scored on parts {n}, seed 0 on {names[0]}; every seed needs the same")
        names.append(n)
        sims.append(s)
        golds.append(g)
    for k in range(1, len(seeds)):
        for name, g0, gk in zip(names[0], golds[0], golds[k]):
            if g0.shape != gk.shape or not np.array_equal(g0, gk):
                raise ValueError(f"{what}: {name}: seed {k}'s gold scores differ from seed 0's (not the same pairs)")
    return names[0], sims, golds


class _Ranker:
    """Average ranks of one fixed vector under many resamples, without sorting each resample.

    A resample with replacement is a weight vector ``w`` (how often each original item was drawn, summing to n).
    With the items sorted once, the average rank of item i in the resampled vector (``rankdata`` of it, ties
    averaged, every copy of an item tied with its other copies and with equal values) is the total weight of the
    values below i's value plus (the weight of i's tie group + 1) / 2: a cumulative sum per resample, O(R n)
    instead of O(R n log n). :func:`_weighted_spearman` then equals the Spearman of the resampled vectors.
    """

    def __init__(self, values: np.ndarray):
        self.order = np.argsort(values, kind="stable")
        v = values[self.order]
        starts = np.flatnonzero(np.r_[True, v[1:] != v[:-1]])  # first sorted position of each tie group
        self.ends = np.r_[starts[1:], len(v)] - 1  # last sorted position of each group
        group_sorted = np.repeat(np.arange(len(starts)), np.diff(np.r_[starts, len(v)]))
        self.group = np.empty(len(v), dtype=np.int64)
        self.group[self.order] = group_sorted  # item -> its tie group

    def ranks(self, w: np.ndarray) -> np.ndarray:
        """(R, n) weights -> (R, n) average ranks of each original item in its resample (items not drawn: any)."""
        cum = np.cumsum(w[:, self.order], axis=1)[:, self.ends]  # (R, G): weight up to each group's end
        before = np.concatenate([np.zeros((len(w), 1), dtype=cum.dtype), cum[:, :-1]], axis=1)
        return (before + (cum - before + 1) / 2.0)[:, self.group]


def _weighted_spearman(rx: np.ndarray, ry: np.ndarray, w: np.ndarray) -> np.ndarray:
    """The Pearson correlation of the ranks with each item counted w times: the resampled vectors' Spearman."""
    m = (w.sum(axis=1, keepdims=True) + 1) / 2.0  # the mean of average ranks 1..N is (N + 1) / 2
    x, y = rx - m, ry - m
    num = (w * x * y).sum(axis=1)
    den = np.sqrt((w * x * x).sum(axis=1) * (w * y * y).sum(axis=1))
    with np.errstate(invalid="ignore", divide="ignore"):
        return num / den


def _weights(idx: list[np.ndarray], sizes: list[int]) -> np.ndarray:
    """Per-part (R, n_k) index draws -> (R, sum n_k) counts of each item (the parts side by side)."""
    out = []
    for i, n in zip(idx, sizes):
        r = i.shape[0]
        flat = (i + n * np.arange(r)[:, None]).ravel()
        out.append(np.bincount(flat, minlength=r * n).reshape(r, n).astype(np.float64))
    return np.concatenate(out, axis=1)


def _pair_resamples(sims_by_seed: list[list[list[np.ndarray]]], golds: list[np.ndarray], n_resamples: int,
                    rng: np.random.Generator, chunk: int = 256) -> tuple[np.ndarray, list[np.ndarray]]:
    """Every model's every seed scored on the same pair resamples.

    Args:
        sims_by_seed: models x seeds x parts similarities (n_k,) on the pairs of ``golds`` (parts x (n_k,)).
        n_resamples: resamples R. rng: the generator; per chunk of resamples it first draws which seed fills each
            of the S slots (``(r, S)``, used by the seed-resampling bootstrap) and then one pair draw within each
            part, shared by every seed and model.

    Returns:
        ``(drawn (R, S) seed slots, [per model an (S, R) array of pooled Spearmans])``.
    """
    n_seeds = len(sims_by_seed[0])
    sizes = [len(g) for g in golds]
    gold_rank = _Ranker(np.concatenate(golds))
    rankers = [[_Ranker(np.concatenate(seed)) for seed in model] for model in sims_by_seed]
    drawn = np.empty((n_resamples, n_seeds), dtype=np.int64)
    out = [np.empty((n_seeds, n_resamples)) for _ in sims_by_seed]
    for start in range(0, n_resamples, chunk):
        r = min(chunk, n_resamples - start)
        drawn[start:start + r] = rng.integers(0, n_seeds, size=(r, n_seeds))  # (r, S): which seed fills each slot
        w = _weights(_indices(sizes, r, rng), sizes)  # one pair draw per resample, shared by its seeds
        ry = gold_rank.ranks(w)
        for m, model in enumerate(rankers):
            for k, ranker in enumerate(model):
                out[m][k, start:start + r] = _weighted_spearman(ranker.ranks(w), ry, w)
    return drawn, out


def _seed_means(drawn: np.ndarray, stats: np.ndarray) -> np.ndarray:
    """(R,) means over the drawn seed slots of an (S, R) array of per-seed resampled Spearmans."""
    return stats[drawn, np.arange(len(drawn))[:, None]].mean(axis=1)


def pair_resamples_over_seeds(models: list[list], n_resamples: int, seed) -> tuple[list[list[float]], np.ndarray,
                                                                                  list[np.ndarray]]:
    """The models' per-seed pooled Spearmans, and each seed's Spearman on shared resamples of the test pairs.

    The draws are those of :func:`hierarchical_bootstrap` (same ``seed``, same stream): resample r draws the seed
    slots ``drawn[r]`` and one set of pairs within each part, on which every seed of every model is scored.

    Args:
        models: per model one ``{part: (similarities (n,), gold (n,))}`` per seed; every model has the same
            number of seeds, all on the same pairs (checked by the callers with ``_seed_arrays``).
        n_resamples: R >= 2; seed: an integer or a ``numpy.random.Generator``.

    Returns:
        ``(per model the S per-seed Spearmans, drawn (R, S) seed slots, per model an (S, R) float64 array)``
        (fractions).
    """
    if not isinstance(n_resamples, (int, np.integer)) or isinstance(n_resamples, bool) or n_resamples < 2:
        raise ValueError(f"n_resamples must be an integer of at least 2, got {n_resamples!r}")
    split = [_seed_arrays(list(m), "pair_resamples_over_seeds") for m in models]
    golds = split[0][2][0]
    full = [np.arange(len(g))[None, :] for g in golds]
    points = [[float(_part_stats(s, golds, full)["all"][0]) for s in sims] for _, sims, _ in split]
    rng = seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)
    drawn, stats = _pair_resamples([sims for _, sims, _ in split], golds, n_resamples, rng)
    return points, drawn, stats


def hierarchical_bootstrap(seeds: list, n_resamples: int = DEFAULT_RESAMPLES, seed: int = DEFAULT_SEED,
                           confidence: float = CONFIDENCE) -> SeedEstimate:
    """The mean over training seeds of a model's pooled Spearman with a two-stage (seeds, then the pairs they share)
    percentile bootstrap interval.

    Args:
        seeds: one ``{part: (similarities (n,), gold (n,))}`` per training seed, every seed on the same pairs
            (same part names, same gold in the same order). One seed: the interval is the pairs' alone.
        n_resamples, seed, confidence: as :func:`bootstrap_parts`.

    Returns:
        :class:`SeedEstimate`: the mean of the seeds' pooled Spearmans, the interval, the per-seed values.

    Raises:
        ValueError: no seeds, seeds scored on other pairs, or as :func:`bootstrap_parts`.
    """
    _check(n_resamples, confidence)
    _seed_arrays(list(seeds), "hierarchical_bootstrap")
    (points,), drawn, (stats,) = pair_resamples_over_seeds([list(seeds)], n_resamples, seed)
    per_seed = tuple(points)
    low, high = _interval(_seed_means(drawn, stats), confidence)
    return SeedEstimate(float(np.mean(per_seed)), low, high, per_seed)


def paired_hierarchical_bootstrap(seeds_a: list, seeds_b: list, n_resamples: int = DEFAULT_RESAMPLES,
                                  seed: int = DEFAULT_SEED, confidence: float = CONFIDENCE) -> Difference:
    """Two models trained with the same seeds, paired by seed: the mean over seeds of a - b (pooled Spearmans),
    its two-stage percentile bootstrap interval (the same seed and pair draws for both models) and two-sided
    p-value.

    Args:
        seeds_a, seeds_b: one ``{part: (similarities (n,), gold (n,))}`` per seed, seed k of a paired with seed k
            of b; all on the same pairs.
        n_resamples, seed, confidence: as :func:`bootstrap_parts`.

    Returns:
        :class:`Difference` (``a``, ``b``: the means over seeds; ``diff = a - b``; interval; p-value).

    Raises:
        ValueError: another number of seeds on each side, seeds scored on other pairs, or as
            :func:`bootstrap_parts`.
    """
    _check(n_resamples, confidence)
    if len(seeds_a) != len(seeds_b):
        raise ValueError(f"paired_hierarchical_bootstrap: {len(seeds_a)} seeds against {len(seeds_b)}; a paired "
                         "comparison needs the same seeds on both sides")
    _seed_arrays(list(seeds_a) + list(seeds_b), "paired_hierarchical_bootstrap")
    (pa, pb), drawn, (st_a, st_b) = pair_resamples_over_seeds([list(seeds_a), list(seeds_b)], n_resamples, seed)
    return _difference(float(np.mean(pa)), float(np.mean(pb)), _seed_means(drawn, st_a) - _seed_means(drawn, st_b),
                       confidence)


def seed_t_interval(values, confidence: float = CONFIDENCE) -> tuple[float, float, float]:
    """``(mean, low, high)`` of the plain Student t interval over seeds' scores (nan bounds for one seed)."""
    from scipy.stats import t

    x = np.asarray(values, dtype=np.float64)
    if x.ndim != 1 or x.size == 0:
        raise ValueError(f"seed_t_interval: expected a (S,) array of scores, S >= 1, got shape {x.shape}")
    mean = float(x.mean())
    if x.size < 2:
        return mean, float("nan"), float("nan")
    half = float(t.ppf(0.5 + confidence / 2, x.size - 1) * x.std(ddof=1) / np.sqrt(x.size))
    return mean, mean - half, mean + half


def paired_seed_t(a, b, confidence: float = CONFIDENCE) -> tuple[float, float, float, float]:
    """``(mean difference, low, high, p-value)`` of the paired t test over seeds (``a[k] - b[k]``); nan where
    fewer than 2 seeds or all differences are equal."""
    from scipy.stats import t

    d = np.asarray(a, dtype=np.float64) - np.asarray(b, dtype=np.float64)
    mean, low, high = seed_t_interval(d, confidence)
    if d.size < 2:
        return mean, low, high, float("nan")
    sd = d.std(ddof=1)
    if sd == 0:
        return mean, low, high, float("nan")
    stat = mean / (sd / np.sqrt(d.size))
    return mean, low, high, float(2 * t.sf(abs(stat), d.size - 1))
