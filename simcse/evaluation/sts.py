"""Unsupervised STS scoring: cosine similarity of the two embeddings against the gold score.

Results follow SentEval's nesting (as modified by the SimCSE authors): per subset (or split)
``{"pearson": (r, p), "spearman": (rho, p), "nsamples": n}``, plus ``"all"`` with three aggregates for
each correlation:

* ``all``: one correlation over the pooled pairs of every subset (the SimCSE paper's number for STS12-16);
* ``mean``: the plain average of the per-subset correlations;
* ``wmean``: the average weighted by subset size (``nsamples``).
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np
from scipy.stats import pearsonr, spearmanr


class Correlation(NamedTuple):
    """A correlation and its p-value; indexes like SentEval's ``pearsonr``/``spearmanr`` results (``[0]``)."""

    correlation: float
    pvalue: float

    @property
    def statistic(self) -> float:
        return self.correlation


class ConstantScoresError(ValueError):
    """Every system score of an STS task is the same value, so no correlation is defined.

    Raised instead of returning ``nan`` (which scipy gives for a constant input and a table would print or
    average). Seen with collapsed models that map every sentence to one vector.
    """


def cosine_similarity(a: np.ndarray, b: np.ndarray, task: str = "") -> np.ndarray:
    """Row-wise cosine similarity of two (n, H) arrays, in float64, each in [-1, 1].

    The one cosine used by the evaluator. SentEval silently turns NaN into 0 here; we refuse instead.

    Raises:
        ValueError: shapes differ, an embedding is not finite, or an embedding has zero norm
            (the message names ``task``).
    """
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    where = f" in {task}" if task else ""
    if a.shape != b.shape or a.ndim != 2:
        raise ValueError(f"cosine_similarity{where}: expected two (n, H) arrays of one shape, got {a.shape} and {b.shape}")
    for name, x in (("first", a), ("second", b)):
        bad = ~np.isfinite(x).all(axis=1)
        if bad.any():
            raise ValueError(f"{int(bad.sum())} {name}-sentence embedding(s){where} contain NaN or inf (row {int(np.argmax(bad))})")
    na, nb = np.linalg.norm(a, axis=1), np.linalg.norm(b, axis=1)
    zero = (na == 0) | (nb == 0)
    if zero.any():
        raise ValueError(
            f"{int(zero.sum())} pair(s){where} have a zero embedding (pair {int(np.argmax(zero))}); cosine similarity is undefined"
        )
    # float rounding can put the cosine of (nearly) parallel vectors a few ulps beyond +-1
    return np.clip(np.einsum("ij,ij->i", a, b) / (na * nb), -1.0, 1.0)


def check_not_constant(sys_scores: np.ndarray, task: str = "") -> None:
    """The one check that a model's similarities on an STS task are not all equal (evaluation, intervals and
    paired comparisons call it).

    Raises:
        ConstantScoresError: every score of the (n,) array is equal; the message names ``task``.
    """
    sys_scores = np.asarray(sys_scores)
    if len(sys_scores) and np.all(sys_scores == sys_scores[0]):
        raise ConstantScoresError(
            f"{task or 'STS'}: all {len(sys_scores)} cosine similarities equal {sys_scores[0]:.6g} (every sentence got "
            "the same embedding direction: a constant or collapsed encoder); Spearman and Pearson are undefined")


def correlations(sys_scores: np.ndarray, gold: np.ndarray, task: str = "") -> dict:
    """``{"pearson": Correlation, "spearman": Correlation, "nsamples": n}`` of system vs gold scores (n,).

    Raises:
        ConstantScoresError: every system score is equal (constant embeddings); the message names ``task``.
        ValueError: fewer than 2 pairs, or every gold score is equal.
    """
    sys_scores = np.asarray(sys_scores, dtype=np.float64)
    gold = np.asarray(gold, dtype=np.float64)
    name = task or "STS"
    if len(sys_scores) < 2:
        raise ValueError(f"{name}: need at least 2 scored pairs, got {len(sys_scores)}")
    check_not_constant(sys_scores, task)
    if np.all(gold == gold[0]):
        raise ValueError(f"{name}: all {len(gold)} gold scores equal {gold[0]:.6g}; a correlation is undefined")
    p, s = pearsonr(sys_scores, gold), spearmanr(sys_scores, gold)
    return {
        "pearson": Correlation(float(p[0]), float(p[1])),
        "spearman": Correlation(float(s[0]), float(s[1])),
        "nsamples": int(len(sys_scores)),
    }


def score_sts(parts: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]], task: str) -> dict:
    """Score named parts (STS subsets or STS-B/SICK splits) and add the ``"all"`` aggregates.

    Args:
        parts: name -> (embeddings of first sentences, of second sentences, gold scores), in report order.
        task: task name, for error messages.
    """
    results: dict = {}
    pooled_sys, pooled_gold = [], []
    for name, (e1, e2, gold) in parts.items():
        sims = cosine_similarity(e1, e2, task=f"{task}/{name}")
        results[name] = correlations(sims, gold, task=f"{task}/{name}")
        pooled_sys.append(sims)
        pooled_gold.append(np.asarray(gold, dtype=np.float64))
    results["all"] = aggregate(results, np.concatenate(pooled_sys), np.concatenate(pooled_gold), task)
    return results


def aggregate(per_part: dict, pooled_sys: np.ndarray, pooled_gold: np.ndarray, task: str = "") -> dict:
    """The ``all`` / ``mean`` / ``wmean`` aggregates of per-part results (see the module docstring)."""
    names = [k for k in per_part if k != "all"]
    weights = np.array([per_part[k]["nsamples"] for k in names], dtype=np.float64)
    pooled = correlations(pooled_sys, pooled_gold, task=task)
    out = {}
    for kind in ("pearson", "spearman"):
        vals = np.array([per_part[k][kind][0] for k in names], dtype=np.float64)
        out[kind] = {
            "all": pooled[kind][0],
            "mean": float(np.mean(vals)),
            "wmean": float(np.average(vals, weights=weights)),
        }
    return out
