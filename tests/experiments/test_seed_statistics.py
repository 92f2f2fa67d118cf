"""The statistics over seeds (simcse.evaluation.intervals) on synthetic scores whose answer is known.

Gold scores are N(0, 1); a "model" scores pair i as gold_i + N(0, sigma^2). For a bivariate normal with
correlation r = 1 / sqrt(1 + sigma^2) the population Spearman is (6 / pi) asin(r / 2) (Pearson 1907), so every
expected value below comes from that formula or from the construction, not from the code under test.
"""
from __future__ import annotations

import math

import numpy as np
import pytest

from simcse.evaluation.intervals import (hierarchical_bootstrap, paired_hierarchical_bootstrap, paired_seed_t,
                                         pooled_spearman, seed_t_interval)


def spearman_of(sigma: float) -> float:
    r = 1 / math.sqrt(1 + sigma ** 2)
    return 6 / math.pi * math.asin(r / 2)


def fisher_half_width(rho: float, n: int) -> float:
    """Half the 95% interval of a Spearman over n pairs (Fieller et al. 1957: var(z) = 1.06 / (n - 3))."""
    z = math.atanh(rho)
    se = math.sqrt(1.06 / (n - 3))
    return (math.tanh(z + 1.96 * se) - math.tanh(z - 1.96 * se)) / 2


GOLD = np.random.default_rng(0).standard_normal(4000)


def model(sigma: float, noise_seed: int, gold=GOLD) -> dict:
    noise = np.random.default_rng(noise_seed).standard_normal(len(gold))
    return {"test": (gold + sigma * noise, gold)}


def test_pooled_spearman_matches_the_population_value():
    assert pooled_spearman(model(0.8, 1)) == pytest.approx(spearman_of(0.8), abs=0.01)


def test_pure_seed_effect_interval_spans_the_seeds_not_the_pairs():
    # seeds differ a lot (sigma 0.3 .. 1.5), pairs are many (4000): the seeds dominate
    sigmas = [0.3, 0.6, 0.9, 1.2, 1.5]
    seeds = [model(s, 1000 + k) for k, s in enumerate(sigmas)]
    est = hierarchical_bootstrap(seeds, n_resamples=400, seed=1)
    truth = [spearman_of(s) for s in sigmas]
    assert est.per_seed == pytest.approx(truth, abs=0.01)
    assert est.mean == pytest.approx(np.mean(truth), abs=0.01)
    pair_only = fisher_half_width(np.mean(truth), len(GOLD))
    assert est.high - est.low > 5 * 2 * pair_only  # far wider than one seed's test-set interval
    # resampling 5 seeds: the interval lies inside the seeds' range, and covers a good part of it
    assert min(truth) - 0.01 <= est.low < est.high <= max(truth) + 0.01
    assert est.high - est.low > 0.4 * (max(truth) - min(truth))


def test_pure_pair_effect_interval_is_the_test_sets():
    # every seed gives the same scores: no seed spread, only the finite test set (small: 300 pairs)
    gold = GOLD[:300]
    seeds = [model(0.8, 7, gold)] * 4
    est = hierarchical_bootstrap(seeds, n_resamples=1000, seed=2)
    _, t_low, t_high = seed_t_interval([100 * v for v in est.per_seed])
    assert t_high - t_low == pytest.approx(0.0, abs=1e-9)  # the t interval over seeds sees nothing
    expected = fisher_half_width(est.mean, len(gold))
    assert (est.high - est.low) / 2 == pytest.approx(expected, rel=0.25)


def test_real_difference_is_found_with_its_size():
    seeds = [11, 12, 13]
    better = [model(0.5, 100 + k) for k in seeds]
    worse = [model(1.0, 200 + k) for k in seeds]
    d = paired_hierarchical_bootstrap(better, worse, n_resamples=500, seed=3)
    expected = spearman_of(0.5) - spearman_of(1.0)
    assert d.diff == pytest.approx(expected, abs=0.01)
    assert d.low < expected < d.high
    assert d.low > 0 and d.p_value < 0.01
    diff, low, high, p = paired_seed_t([100 * v for v in [pooled_spearman(m) for m in better]],
                                       [100 * v for v in [pooled_spearman(m) for m in worse]])
    assert diff == pytest.approx(100 * expected, abs=1.0) and low > 0 and p < 0.01


def test_no_difference_is_not_claimed():
    a = [model(0.8, 300 + k) for k in range(3)]
    b = [model(0.8, 400 + k) for k in range(3)]
    d = paired_hierarchical_bootstrap(a, b, n_resamples=500, seed=4)
    assert d.low < 0 < d.high and d.p_value > 0.05


def test_t_interval_by_hand():
    mean, low, high = seed_t_interval([1.0, 2.0, 3.0])
    # sd 1, n 3, t(0.975, 2) = 4.302653
    assert (mean, low, high) == pytest.approx((2.0, 2 - 4.302653 / math.sqrt(3), 2 + 4.302653 / math.sqrt(3)), abs=1e-5)
    assert math.isnan(seed_t_interval([5.0])[1])


def test_seeds_on_other_pairs_are_refused():
    with pytest.raises(ValueError, match="not the same pairs"):
        hierarchical_bootstrap([model(0.5, 1), model(0.5, 2, GOLD[::-1].copy())], n_resamples=10)
    with pytest.raises(ValueError, match="same seeds"):
        paired_hierarchical_bootstrap([model(0.5, 1)], [model(0.5, 1), model(0.5, 2)], n_resamples=10)
