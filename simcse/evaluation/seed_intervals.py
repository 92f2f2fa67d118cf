"""The headline interval of a score over training seeds, and of a difference between two methods paired by seed.

Several training seeds of a method are each scored on one test set. The mean over seeds is uncertain for two
independent reasons: the seeds are a sample of the seeds one could have trained with (*seed part*), and the test
set is a sample of the pairs one could have scored (*test-set part*, shared by every seed, so it does not shrink
with more seeds). The headline interval adds the two variances, each with its own reference distribution:

    half-width = sqrt( t_{S-1}^2 * s^2 / S  +  z^2 * se_pairs^2 )

where s is the standard deviation of the S per-seed values (for a difference: of the per-seed differences,
paired by seed), t_{S-1} Student's quantile with S - 1 degrees of freedom, se_pairs the bootstrap standard error
of the seed mean when only the test pairs are resampled (seeds held, every seed and both methods on the same
draws; :func:`simcse.evaluation.intervals._pair_resamples`) and z the normal quantile. Independent sources of
error add in variance (the usual combination of independent uncertainty components, e.g. JCGM 100:2008 "GUM",
section 5.1); giving the seed part the t quantile of its S - 1 degrees of freedom is what keeps the interval
honest at 3 seeds, where the seed-resampling bootstrap is about the range of three values. The p-value is the
interval inverted: the largest 1 - confidence at which the interval still holds 0, so "p < 0.05" and "the 95%
interval excludes 0" are the same statement. ``scripts/benchmarks/interval_calibration.py`` shows its coverage
by simulation (docs/experiments.md).

Beside it the report keeps the seed-resampling (hierarchical) percentile bootstrap and the t interval over seeds:
the first undercovers a difference at 3 seeds when seeds dominate, the second ignores the test set.

Values are in whatever unit they are given (the report passes Spearman x 100).
"""
from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

CONFIDENCE = 0.95
POWER = 0.8
MAX_SEEDS = 100


class SeedInterval(NamedTuple):
    """The headline interval of a mean over seeds (or of a mean paired difference).

    ``estimate``: the mean of the per-seed values; ``low``/``high``: the interval; ``p_value``: two-sided, of
    "the true value is 0" (nan for one seed); ``n_seeds``; ``seed_sd``: the standard deviation over seeds (nan
    for one seed); ``pair_se``: the test set's bootstrap standard error of the seed mean.
    """

    estimate: float
    low: float
    high: float
    p_value: float
    n_seeds: int
    seed_sd: float
    pair_se: float


def _half_width(alpha: float, seed_var: float, pair_var: float, dof: int) -> float:
    from scipy.stats import norm, t

    q = 1 - alpha / 2
    return math.sqrt(float(t.ppf(q, dof)) ** 2 * seed_var + float(norm.ppf(q)) ** 2 * pair_var)


def headline_interval(per_seed, pair_resampled, confidence: float = CONFIDENCE) -> SeedInterval:
    """The seed part (t over seeds) and the test-set part (pair bootstrap) of a seed mean, added in variance.

    Args:
        per_seed: (S,) the per-seed values (a method's scores, or two methods' paired differences), S >= 1.
        pair_resampled: (R,) the seed mean recomputed on R resamples of the test pairs (seeds held), R >= 2;
            non-finite entries are dropped.
        confidence: in (0, 1).

    Returns:
        :class:`SeedInterval`. With one seed there is no seed spread to estimate: the interval and p-value are the
        test set's alone (``seed_sd`` nan), and :func:`compare_seeds` never calls such a difference shown.

    Raises:
        ValueError: per_seed empty or not one-dimensional, fewer than 2 finite resamples, confidence outside (0, 1).
    """
    x = np.asarray(per_seed, dtype=np.float64)
    r = np.asarray(pair_resampled, dtype=np.float64)
    if x.ndim != 1 or x.size == 0 or not np.all(np.isfinite(x)):
        raise ValueError(f"headline_interval: expected a (S,) array of finite per-seed values, S >= 1, got {x!r}")
    r = r[np.isfinite(r)]
    if r.size < 2:
        raise ValueError(f"headline_interval: expected >= 2 finite pair resamples, got {r.size}")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), got {confidence!r}")
    est = float(x.mean())
    pair_var = float(r.var(ddof=1))
    n = x.size
    seed_var = float(x.var(ddof=1)) / n if n > 1 else 0.0
    half = _half_width(1 - confidence, seed_var, pair_var, max(1, n - 1))
    return SeedInterval(est, est - half, est + half, _p_value(est, seed_var, pair_var, max(1, n - 1)), n,
                        float(x.std(ddof=1)) if n > 1 else float("nan"), math.sqrt(pair_var))


def _p_value(est: float, seed_var: float, pair_var: float, dof: int) -> float:
    """The alpha at which the (1 - alpha) headline interval just reaches 0 (the interval inverted)."""
    from scipy.optimize import brentq

    if est == 0:
        return 1.0
    if seed_var + pair_var == 0:
        return 0.0
    floor = 1e-12
    f = lambda a: _half_width(a, seed_var, pair_var, dof) - abs(est)  # noqa: E731  (decreasing in a)
    if f(floor) <= 0:
        return floor
    if f(1 - floor) >= 0:
        return 1.0
    return float(brentq(f, floor, 1 - floor, xtol=1e-10))


def seeds_for_power(diff: float, seed_sd: float, pair_se: float, confidence: float = CONFIDENCE,
                    power: float = POWER, max_seeds: int = MAX_SEEDS) -> int | None:
    """An estimate of how many seeds would show a true difference of ``diff`` with probability ``power``.

    It takes the observed spreads as the truth: with S' seeds the estimate's standard error is
    sqrt(seed_sd^2 / S' + pair_se^2) and the headline interval's half-width h(S') as :func:`headline_interval`
    builds it; the chance that the interval excludes 0 is about Phi((|diff| - h(S')) / se(S')). The test-set
    part does not shrink with seeds (every seed is scored on the same test set), so a difference smaller than
    about (z + z_power) * pair_se is out of reach of more seeds alone. The test set's part is taken as measured
    at the current seed count (its seed-by-pair share shrinks with more seeds, so this errs on the safe side).

    Args:
        diff: the difference (or effect) to resolve; seed_sd: standard deviation over seeds of the per-seed
            values; pair_se: the test set's standard error; confidence, power: in (0, 1); max_seeds: the
            search's limit.

    Returns:
        The smallest S' in [2, max_seeds] that reaches ``power``; None when none does (a larger test set, not
        more seeds, is what would resolve it), or when the spreads are unknown (nan).
    """
    from scipy.stats import norm

    if not all(math.isfinite(v) for v in (diff, seed_sd, pair_se)) or diff == 0:
        return None
    for s in range(2, int(max_seeds) + 1):
        seed_var = seed_sd ** 2 / s
        se = math.sqrt(seed_var + pair_se ** 2)
        if se == 0:
            return s
        if norm.cdf((abs(diff) - _half_width(1 - confidence, seed_var, pair_se ** 2, s - 1)) / se) >= power:
            return s
    return None


def summarize_seeds(seeds: list, n_resamples: int, seed: int, scale: float = 100.0,
                    confidence: float = CONFIDENCE) -> dict:
    """Every column of the report for one method's seeds on one task (the one code path the report and the
    calibration simulation run).

    Args:
        seeds: one ``{part: (similarities (n,), gold (n,))}`` per training seed, all on the same pairs.
        n_resamples: bootstrap resamples (>= 2); seed: their generator's seed; scale: the unit (100: Spearman x
            100); confidence: in (0, 1).

    Returns:
        ``{"per_seed": [S values], "mean", "low", "high" (headline), "seed_sd", "pair_se", "h_low", "h_high" (the
        seed-resampling hierarchical bootstrap), "t_low", "t_high" (t over seeds)}``, in ``scale`` units.

    Raises:
        ValueError: as :func:`simcse.evaluation.intervals.hierarchical_bootstrap`.
    """
    from simcse.evaluation.intervals import (_interval, _seed_arrays, _seed_means, pair_resamples_over_seeds,
                                             seed_t_interval)

    _seed_arrays(list(seeds), "summarize_seeds")
    per_seed, drawn, (stats,) = pair_resamples_over_seeds([list(seeds)], n_resamples, seed)
    per = scale * np.asarray(per_seed[0])
    head = headline_interval(per, scale * stats.mean(axis=0), confidence)
    h_low, h_high = _interval(scale * _seed_means(drawn, stats), confidence)
    _, t_low, t_high = seed_t_interval(per, confidence)
    return {"per_seed": per.tolist(), "mean": head.estimate, "low": head.low, "high": head.high,
            "seed_sd": head.seed_sd, "pair_se": head.pair_se, "h_low": h_low, "h_high": h_high,
            "t_low": t_low, "t_high": t_high}


def compare_seeds(seeds_a: list, seeds_b: list, n_resamples: int, seed: int, scale: float = 100.0,
                  confidence: float = CONFIDENCE) -> dict:
    """Every column of the report for method a against method b, paired by seed (seed k of a with seed k of b).

    Args:
        seeds_a, seeds_b: one ``{part: (similarities (n,), gold (n,))}`` per seed, the same number on each side,
            all on the same pairs. n_resamples, seed, scale, confidence: as :func:`summarize_seeds`.

    Returns:
        ``{"a", "b" (means), "diff" (mean of a - b), "per_seed": [S differences], "low", "high", "p" (headline),
        "shown" (the headline interval excludes 0, over 2 or more seeds), "seed_sd", "pair_se", "seeds_needed" (an estimate,
        :func:`seeds_for_power` at the observed difference and spreads; None when more seeds alone would not
        resolve it), "h_low", "h_high", "h_p" (hierarchical bootstrap), "t_low", "t_high", "t_p" (paired t over
        seeds)}``, in ``scale`` units.

    Raises:
        ValueError: another number of seeds on each side, seeds scored on other pairs.
    """
    from simcse.evaluation.intervals import (_difference, _seed_arrays, _seed_means, pair_resamples_over_seeds,
                                             paired_seed_t)

    if len(seeds_a) != len(seeds_b):
        raise ValueError(f"compare_seeds: {len(seeds_a)} seeds against {len(seeds_b)}; a paired comparison needs the "
                         "same seeds on both sides")
    _seed_arrays(list(seeds_a) + list(seeds_b), "compare_seeds")
    per_seed, drawn, (st_a, st_b) = pair_resamples_over_seeds([list(seeds_a), list(seeds_b)], n_resamples, seed)
    va, vb = scale * np.asarray(per_seed[0]), scale * np.asarray(per_seed[1])
    d = va - vb
    head = headline_interval(d, scale * (st_a - st_b).mean(axis=0), confidence)
    hier = _difference(float(va.mean()), float(vb.mean()),
                       scale * (_seed_means(drawn, st_a) - _seed_means(drawn, st_b)), confidence)
    _, t_low, t_high, t_p = paired_seed_t(va, vb, confidence)
    shown = bool(head.n_seeds >= 2 and (head.low > 0 or head.high < 0))
    return {"a": float(va.mean()), "b": float(vb.mean()), "diff": head.estimate, "per_seed": d.tolist(),
            "low": head.low, "high": head.high, "p": head.p_value, "shown": shown, "seed_sd": head.seed_sd,
            "pair_se": head.pair_se,
            "seeds_needed": None if shown else seeds_for_power(head.estimate, head.seed_sd, head.pair_se, confidence),
            "h_low": hier.low, "h_high": hier.high, "h_p": hier.p_value, "t_low": t_low, "t_high": t_high, "t_p": t_p}
