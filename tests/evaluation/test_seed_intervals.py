"""The headline interval over seeds (simcse.evaluation.seed_intervals) against hand-computed values, the fast
resampled Spearman against scipy, and the calibration simulation's small version: the headline covers where the
seed-resampling bootstrap does not."""
from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import norm, rankdata, spearmanr, t

from simcse.evaluation.intervals import _Ranker, _weighted_spearman, _weights, pair_resamples_over_seeds
from simcse.evaluation.seed_intervals import compare_seeds, headline_interval, seeds_for_power, summarize_seeds


def test_headline_adds_the_seed_part_with_t_and_the_pair_part_with_z():
    per_seed = [80.0, 82.0, 84.0]  # sd 2, mean 82
    pairs = np.array([81.0, 83.0] * 50)  # the test set's resamples of the mean: sd sqrt(100 / 99)
    got = headline_interval(per_seed, pairs)
    seed_var = 4.0 / 3
    pair_var = 100 / 99
    half = math.sqrt(t.ppf(0.975, 2) ** 2 * seed_var + norm.ppf(0.975) ** 2 * pair_var)
    assert got.estimate == pytest.approx(82.0)
    assert (got.low, got.high) == pytest.approx((82 - half, 82 + half))
    assert got.seed_sd == pytest.approx(2.0) and got.pair_se == pytest.approx(math.sqrt(pair_var))


def test_headline_reduces_to_t_over_seeds_and_to_the_pair_interval():
    only_seeds = headline_interval([1.0, 2.0, 4.0, 5.0], [3.0, 3.0, 3.0])
    sd = np.std([1.0, 2.0, 4.0, 5.0], ddof=1)
    assert only_seeds.high - 3.0 == pytest.approx(t.ppf(0.975, 3) * sd / 2)
    only_pairs = headline_interval([2.0, 2.0, 2.0], [1.0, 3.0])
    assert only_pairs.high - 2.0 == pytest.approx(norm.ppf(0.975) * math.sqrt(2.0))


def test_p_value_is_the_interval_inverted():
    per_seed, pairs = [1.5, 2.5, 3.4], np.linspace(1.0, 3.0, 41)
    got = headline_interval(per_seed, pairs)
    assert 0 < got.p_value < 1
    at_p = headline_interval(per_seed, pairs, confidence=1 - got.p_value)
    assert at_p.low == pytest.approx(0.0, abs=1e-6)  # the (1 - p) interval just reaches 0
    assert (got.p_value < 0.05) == (got.low > 0)
    assert headline_interval([0.0, 0.0], [-1.0, 1.0]).p_value == 1.0


def test_one_seed_gives_the_test_set_interval_and_is_never_shown():
    got = headline_interval([5.0], [4.0, 6.0])
    assert math.isnan(got.seed_sd) and got.high - 5.0 == pytest.approx(norm.ppf(0.975) * math.sqrt(2.0))
    gold = np.arange(200, dtype=float)
    a = [{"t": (gold + np.random.default_rng(1).standard_normal(200), gold)}]
    b = [{"t": (gold + 50 * np.random.default_rng(2).standard_normal(200), gold)}]
    d = compare_seeds(a, b, 50, 0)
    assert d["low"] > 0 and d["shown"] is False  # clearly apart on the test set, but one seed shows nothing


def test_bad_input_is_refused_in_one_line():
    with pytest.raises(ValueError, match="per-seed values"):
        headline_interval([], [1.0, 2.0])
    with pytest.raises(ValueError, match="pair resamples"):
        headline_interval([1.0, 2.0], [float("nan"), 1.0])
    with pytest.raises(ValueError, match="confidence"):
        headline_interval([1.0, 2.0], [1.0, 2.0], confidence=1.5)
    gold = np.arange(10, dtype=float)
    with pytest.raises(ValueError, match="2 seeds against 1"):
        compare_seeds([{"t": (gold, gold)}] * 2, [{"t": (gold, gold)}], 10, 0)


def test_seeds_for_power_against_the_normal_formula():
    # seeds only, sd 1, a difference of 2: the smallest S with Phi((2 - t_{S-1} / sqrt(S)) / (1 / sqrt(S))) >= 0.8
    expected = next(s for s in range(2, 100)
                    if norm.cdf((2 - t.ppf(0.975, s - 1) / math.sqrt(s)) * math.sqrt(s)) >= 0.8)
    assert seeds_for_power(2.0, 1.0, 0.0) == expected == 5
    # the test set's part alone is wider than the difference: no number of seeds resolves it
    assert seeds_for_power(1.0, 0.5, 1.0) is None
    assert seeds_for_power(1.0, float("nan"), 0.1) is None


def test_fast_resampled_spearman_equals_scipy_with_ties():
    rng = np.random.default_rng(5)
    parts = [np.round(rng.uniform(0, 5, 60), 1), np.round(rng.uniform(0, 5, 40))]  # many ties
    sims = [np.round(p + rng.normal(size=len(p)), 1) for p in parts]  # ties in the similarities too
    sizes = [len(p) for p in parts]
    idx = [rng.integers(0, n, size=(30, n)) for n in sizes]
    w = _weights(idx, sizes)
    got = _weighted_spearman(_Ranker(np.concatenate(sims)).ranks(w), _Ranker(np.concatenate(parts)).ranks(w), w)
    for r in range(30):
        x = np.concatenate([s[i[r]] for s, i in zip(sims, idx)])
        y = np.concatenate([g[i[r]] for g, i in zip(parts, idx)])
        assert got[r] == pytest.approx(spearmanr(x, y)[0], abs=1e-12)
        assert _Ranker(x).ranks(np.ones((1, len(x))))[0] == pytest.approx(rankdata(x))


def test_summary_columns_are_the_seeds_scipy_values():
    gold = np.random.default_rng(0).standard_normal(300)
    seeds = [{"t": (gold + s * np.random.default_rng(k).standard_normal(300), gold)} for k, s in enumerate((0.5, 0.8, 1.1))]
    got = summarize_seeds(seeds, 200, 3)
    truth = [100 * spearmanr(*m["t"])[0] for m in seeds]
    assert got["per_seed"] == pytest.approx(truth)
    assert got["low"] < np.mean(truth) < got["high"]
    assert got["t_low"] == pytest.approx(np.mean(truth) - t.ppf(0.975, 2) * np.std(truth, ddof=1) / math.sqrt(3))
    points, drawn, stats = pair_resamples_over_seeds([seeds], 200, 3)
    assert drawn.shape == (200, 3) and stats[0].shape == (3, 200)
    assert got["pair_se"] == pytest.approx(100 * stats[0].mean(axis=0).std(ddof=1))


@pytest.mark.slow
def test_calibration_small_version_headline_covers_where_the_hierarchical_bootstrap_does_not():
    """Seeds dominate, the two methods wrong on the same pairs, no true difference, 3 seeds: the seed-resampling
    bootstrap calls about 1 in 5 experiments a difference, the headline about 1 in 20 (the script's own cell, a
    fewer experiments and resamples)."""
    from scripts.benchmarks.interval_calibration import REGIMES, Truth, run_cell

    cell = run_cell(REGIMES[0], 3, True, Truth(n=200_000), experiments=200, resamples=200, n_pairs=1379, effect=1.0,
                    cell_seed=7)
    fp = {c: cell["columns"][c]["reject"] / 200 for c in ("headline", "hierarchical")}
    assert fp["hierarchical"] >= 0.12  # the fault: the range of 3 seeds taken for a 95% interval
    assert fp["headline"] <= 0.08  # 0.05 expected; 0.08 is about 1.9 binomial standard errors above it
    assert cell["columns"]["headline"]["mean"] / 200 >= 0.90


@pytest.mark.parametrize("argv, message", [
    (["--experiments", "0"], "--experiments: expected an integer >= 1, got 0"),
    (["--seeds", "1", "3"], "--seeds: expected an integer >= 2, got 1"),
    (["--regimes", "0"], "--regimes: invalid choice: 0"),
    (["--workers", "0"], "--workers: expected an integer >= 1, got 0"),
    (["--effect", "-1"], "--effect must be a positive number of points, got -1.0"),
])
def test_calibration_script_refuses_bad_input_in_one_line(argv, message, capsys):
    from scripts.benchmarks.interval_calibration import main

    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == 2 and message in capsys.readouterr().err.strip().splitlines()[-1]
