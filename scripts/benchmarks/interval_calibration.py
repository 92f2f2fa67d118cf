"""Coverage of the experiment report's intervals, by simulation where the truth is known.

    python -m scripts.benchmarks.interval_calibration --quick       # 60 experiments a cell, a few minutes
    python -m scripts.benchmarks.interval_calibration               # the full table: 300 experiments a cell

Each simulated experiment is an STS-B-like test set: ``--pairs`` pairs (1,379) drawn from a population whose gold
scores lie on SICK/STS-B's grid in [0, 5] (steps of 0.2: many ties). A method scores pair i with seed k as

    gold_i + sigma * m_k * e_i + tau * eta_ki

``e_i`` is the method's own error on pair i (a property of the pair: two methods wrong on the *same* pairs have
correlated ``e``, on *different* pairs independent ones), ``m_k = 1 + lam * (sqrt(.5) c_k + sqrt(.5) a_k)`` the
seed's effect on the quality (``c_k`` shared by the two methods trained with seed k, ``a_k`` the method's own:
the two arms share half of the seed effect), ``eta_ki`` the seed's own errors on pairs. ``lam`` is set so that a
seed moves a method's population Spearman by the regime's standard deviation. The truth is the expected
population Spearman over seeds (computed from 1,000,000 pairs and Gauss-Hermite nodes over the seed effect); in
the *null* cells both methods are the same (true difference 0), in the others the second method's noise is
larger (a true difference of about ``--effect`` points).

Every experiment runs the report's own code (:func:`simcse.evaluation.seed_intervals.summarize_seeds` and
:func:`~simcse.evaluation.seed_intervals.compare_seeds`; 200 bootstrap resamples, where a spec's default is 1,000:
the headline uses the resamples' standard deviation, which 200 resamples estimate to within about 5%, and the
full table runs 7,200 experiments) and the table gives, per regime and seed count, for every interval column of
the report: coverage of the truth (one method's mean; the difference, over null and non-null cells), the
false-positive rate (null cells: the interval excludes 0), the power (non-null cells: excludes 0 on the true side)
and the mean width.
"""
from __future__ import annotations

import argparse
import math
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run from a checkout without installing

from scripts.benchmarks.common import int_at_least  # noqa: E402

GOLD_LEVELS = np.round(np.arange(0, 5.0001, 0.2), 1)  # STS-B-like gold: [0, 5], many ties
SIGMA = 1.0  # a method's error sd on a pair (population Spearman about 0.81)
COLUMNS = ("headline", "hierarchical", "t")


@dataclass(frozen=True)
class Regime:
    """One simulated world: the seed effect's sd on a method's Spearman (points), how alike the two methods'
    errors on pairs are (``rho``: 1, wrong on the same pairs; 0, on different pairs) and the scale of each seed's
    own errors on pairs (``tau``)."""

    name: str
    seed_sd: float
    rho: float
    tau: float = 0.3


REGIMES = (
    Regime("seeds dominate, same pairs", 0.5, 1.0, 0.1),
    Regime("both, mostly same pairs", 0.5, 0.7),
    Regime("pairs dominate, mostly same pairs", 0.1, 0.7),
    Regime("seeds large, different pairs", 1.5, 0.0),
    Regime("both, different pairs", 0.5, 0.0),
    Regime("pairs dominate, different pairs", 0.1, 0.0),
)


class Truth:
    """The population Spearman of gold + nu * N(0, 1), as a function of the noise sd nu (1,000,000 pairs, the
    same draws for every nu, so the curve is smooth), and its expectation over the seed effect."""

    def __init__(self, n: int = 1_000_000, seed: int = 12345):  # n: population pairs
        from scipy.stats import rankdata

        rng = np.random.default_rng(seed)
        gold = rng.choice(GOLD_LEVELS, size=n)
        z = rng.standard_normal(n)
        self.nus = np.linspace(0.6, 2.2, 33)
        rg = rankdata(gold)
        rg -= rg.mean()
        vals = []
        for nu in self.nus:
            rs = rankdata(gold + nu * z)
            rs -= rs.mean()
            vals.append(float((rg * rs).sum() / math.sqrt((rg * rg).sum() * (rs * rs).sum())))
        self.values = np.array(vals)
        self.nodes, self.weights = np.polynomial.hermite_e.hermegauss(40)  # E over a standard normal
        self.weights = self.weights / self.weights.sum()

    def at(self, nu):
        return np.interp(nu, self.nus, self.values)

    def slope(self, nu: float) -> float:
        """d Spearman / d nu at nu."""
        return float(np.gradient(self.values, self.nus)[np.searchsorted(self.nus, nu)])

    def expected(self, scale: float, lam: float, tau: float) -> float:
        """E over seeds of the population Spearman of a method with error sd ``scale * m`` (m = 1 + lam * N) and
        seed errors ``tau``."""
        m = 1 + lam * self.nodes
        return float((self.weights * self.at(np.sqrt((SIGMA * scale * m) ** 2 + tau ** 2))).sum())


def dr_dscale(truth: Truth, tau: float) -> float:
    """|d Spearman / d m| at m = 1 for noise sd nu = sqrt((sigma m)^2 + tau^2) (d nu / d m = sigma^2 m / nu)."""
    nu = math.sqrt(SIGMA ** 2 + tau ** 2)
    return abs(truth.slope(nu)) * SIGMA ** 2 / nu


def lam_for(truth: Truth, seed_sd_points: float, tau: float) -> float:
    """The seed effect's scale that moves a method's population Spearman by ``seed_sd_points`` (sd, x 100)."""
    return seed_sd_points / 100 / dr_dscale(truth, tau)


def simulate(regime: Regime, n_seeds: int, null: bool, lam: float, scale_b: float, n_pairs: int, rng) -> tuple:
    """One experiment: two methods' ``n_seeds`` seeds on one drawn test set -> (seeds_a, seeds_b) as the
    report reads them (``[{"test": (similarities, gold)}]`` per seed)."""
    gold = rng.choice(GOLD_LEVELS, size=n_pairs)
    e_a = rng.standard_normal(n_pairs)
    e_b = regime.rho * e_a + math.sqrt(max(0.0, 1 - regime.rho ** 2)) * rng.standard_normal(n_pairs)
    shared = rng.standard_normal(n_seeds)
    out = []
    for e, scale in ((e_a, 1.0), (e_b, 1.0 if null else scale_b)):
        m = 1 + lam * (math.sqrt(0.5) * shared + math.sqrt(0.5) * rng.standard_normal(n_seeds))
        out.append([{"test": (gold + SIGMA * scale * m[k] * e + regime.tau * rng.standard_normal(n_pairs), gold)}
                    for k in range(n_seeds)])
    return out[0], out[1]


def _inside(low, high, value) -> bool:
    return bool(math.isfinite(low) and low <= value <= high)


def run_cell(regime: Regime, n_seeds: int, null: bool, truth: Truth, experiments: int, resamples: int, n_pairs: int,
             effect: float, cell_seed: int) -> dict:
    """``experiments`` simulated experiments of one cell through the report's code -> counts per column."""
    from simcse.evaluation.seed_intervals import compare_seeds, summarize_seeds

    lam = lam_for(truth, regime.seed_sd, regime.tau)
    scale_b = 1 + effect / 100 / dr_dscale(truth, regime.tau)  # lowers the expected Spearman by about ``effect``
    true_a = 100 * truth.expected(1.0, lam, regime.tau)
    true_diff = 0.0 if null else true_a - 100 * truth.expected(scale_b, lam, regime.tau)
    stats = {k: [] for k in ("mean", "diff", "reject", "right", "wmean", "wdiff")}
    rows = {c: {k: 0 for k in stats} | {"wmean": 0.0, "wdiff": 0.0} for c in COLUMNS}
    seq = np.random.SeedSequence([cell_seed])
    seed_sds, pair_ses = [], []
    for child in seq.spawn(experiments):
        rng = np.random.default_rng(child)
        a, b = simulate(regime, n_seeds, null, lam, scale_b, n_pairs, rng)
        boot = int(rng.integers(0, 2 ** 31))
        m = summarize_seeds(a, resamples, boot)
        d = compare_seeds(a, b, resamples, boot)
        seed_sds.append(d["seed_sd"])
        pair_ses.append(d["pair_se"])
        for col, (ml, mh), (dl, dh) in (("headline", (m["low"], m["high"]), (d["low"], d["high"])),
                                        ("hierarchical", (m["h_low"], m["h_high"]), (d["h_low"], d["h_high"])),
                                        ("t", (m["t_low"], m["t_high"]), (d["t_low"], d["t_high"]))):
            r = rows[col]
            r["mean"] += _inside(ml, mh, true_a)
            r["diff"] += _inside(dl, dh, true_diff)
            excludes = math.isfinite(dl) and (dl > 0 or dh < 0)
            r["reject"] += excludes
            r["right"] += excludes and (dl > 0) == (true_diff > 0)
            r["wmean"] += mh - ml
            r["wdiff"] += dh - dl
    for r in rows.values():
        r["wmean"] /= experiments
        r["wdiff"] /= experiments
    return {"regime": regime.name, "seeds": n_seeds, "null": null, "true_a": true_a, "true_diff": true_diff,
            "experiments": experiments, "columns": rows, "seed_sd_diff": float(np.mean(seed_sds)),
            "pair_se_diff": float(np.mean(pair_ses))}


def table(cells: list[dict]) -> tuple[list[str], dict]:
    """Markdown rows, one per (regime, seeds) and column, and the worst headline figures."""
    by = {}
    for c in cells:
        by.setdefault((c["regime"], c["seeds"]), {})[c["null"]] = c
    lines = ["| regime | seeds | seed sd / pair se of the difference | column | mean covered | difference covered "
             "| false positives (null) | power (true diff) | width of mean | width of difference |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    worst = {"coverage_mean": 1.0, "coverage_diff": 1.0, "false_positives": 0.0}
    for (regime, seeds), pair in by.items():
        null, alt = pair.get(True), pair.get(False)
        both = [c for c in (null, alt) if c]
        for col in COLUMNS:
            n = sum(c["experiments"] for c in both)
            cov_m = sum(c["columns"][col]["mean"] for c in both) / n
            cov_d = sum(c["columns"][col]["diff"] for c in both) / n
            fp = null["columns"][col]["reject"] / null["experiments"] if null else float("nan")
            power = alt["columns"][col]["right"] / alt["experiments"] if alt else float("nan")
            wm = sum(c["columns"][col]["wmean"] * c["experiments"] for c in both) / n
            wd = sum(c["columns"][col]["wdiff"] * c["experiments"] for c in both) / n
            spread = (f"{np.mean([c['seed_sd_diff'] for c in both]):.2f} / "
                      f"{np.mean([c['pair_se_diff'] for c in both]):.2f}")
            power_text = "-" if math.isnan(power) else f"{100 * power:.0f}% ({alt['true_diff']:+.2f})"
            lines.append(f"| {regime} | {seeds} | {spread} | {col} | {100 * cov_m:.1f}% | {100 * cov_d:.1f}% | "
                         f"{'-' if math.isnan(fp) else f'{100 * fp:.1f}%'} | {power_text} | {wm:.2f} | {wd:.2f} |")
            if col == "headline":
                worst["coverage_mean"] = min(worst["coverage_mean"], cov_m)
                worst["coverage_diff"] = min(worst["coverage_diff"], cov_d)
                if not math.isnan(fp):
                    worst["false_positives"] = max(worst["false_positives"], fp)
    return lines, worst


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="60 experiments a cell instead of 300")
    p.add_argument("--experiments", type=int_at_least(1), default=None,
                   help="experiments per cell (default 300; 60 with --quick)")
    p.add_argument("--resamples", type=int_at_least(2), default=200, help="bootstrap resamples per interval (default 200)")
    p.add_argument("--seeds", type=int_at_least(2), nargs="+", default=[3, 5],
                   help="seed counts, each at least 2 (an interval over seeds needs two; default 3 5)")
    p.add_argument("--pairs", type=int_at_least(10), default=1379, help="test pairs per experiment (default 1379, STS-B test)")
    p.add_argument("--effect", type=float, default=1.0, help="true difference of the non-null cells, points (default 1)")
    p.add_argument("--regimes", type=int, nargs="+", default=None, choices=range(1, len(REGIMES) + 1),
                   metavar="K", help=f"regimes by number, 1..{len(REGIMES)} (default all): "
                   + "; ".join(f"{k + 1} {r.name}" for k, r in enumerate(REGIMES)))
    p.add_argument("--null_only", action="store_true", help="only the cells with no true difference")
    p.add_argument("--workers", type=int_at_least(1), default=min(4, len(os.sched_getaffinity(0))),
                   help="processes to run the cells in (default: the CPUs this process may use, at most 4)")
    args = p.parse_args(argv)
    if not math.isfinite(args.effect) or args.effect <= 0:
        p.error(f"--effect must be a positive number of points, got {args.effect}")
    experiments = args.experiments or (60 if args.quick else 300)
    resamples = args.resamples
    regimes = [REGIMES[k - 1] for k in args.regimes] if args.regimes else list(REGIMES)
    t0 = time.perf_counter()
    truth = Truth()
    jobs = [(regime, s, null, truth, experiments, resamples, args.pairs, args.effect,
             1000 * REGIMES.index(regime) + 10 * s + int(null))
            for regime in regimes for s in args.seeds
            for null in ((True,) if args.null_only else (True, False))]
    if args.workers > 1:
        from multiprocessing import get_context

        with get_context("spawn").Pool(args.workers) as pool:
            cells = pool.starmap(run_cell, jobs)
    else:
        cells = []
        for job in jobs:
            cells.append(run_cell(*job))
            print(f"[calibration] {job[0].name}, {job[1]} seeds, {'null' if job[2] else 'true difference'}: done "
                  f"({time.perf_counter() - t0:.0f} s)", file=sys.stderr, flush=True)
    lines, worst = table(cells)
    print(f"{experiments} experiments a cell, {resamples} resamples, {args.pairs} test pairs; 95% intervals; "
          f"{time.perf_counter() - t0:.0f} s")
    print("\n".join(lines))
    goal = worst["coverage_mean"] >= 0.93 and worst["coverage_diff"] >= 0.93 and worst["false_positives"] <= 0.06
    print(f"headline, worst cell: mean covered {100 * worst['coverage_mean']:.1f}%, difference covered "
          f"{100 * worst['coverage_diff']:.1f}%, false positives {100 * worst['false_positives']:.1f}% "
          f"(goal: >= 93%, >= 93%, <= 6%): {'met' if goal else 'NOT met'}")
    return {"cells": cells, "worst": worst, "goal_met": goal}


if __name__ == "__main__":
    main()
