"""The task registry and the two entry points: :func:`evaluate` and :func:`evaluate_sts_dev`.

``encode`` is any callable ``encode(sentences: list[str]) -> array (N, H)`` returning one row per input
sentence in input order. Each entry point collects the sentences of every requested task and split,
deduplicates them and calls ``encode`` exactly once; tasks then look their rows up by sentence.
"""
from __future__ import annotations

import functools
import logging
import time
from pathlib import Path
from typing import Callable, Iterable, Sequence

import numpy as np

from simcse.evaluation import data as D
from simcse.evaluation.intervals import DEFAULT_RESAMPLES, DEFAULT_SEED, bootstrap_parts, paired_bootstrap
from simcse.evaluation.sts import cosine_similarity, score_sts
from simcse.evaluation.logreg import SETTINGS as LOGREG_SETTINGS
from simcse.evaluation.transfer import (ClassifierConfig, check_finite, check_labels, inner_kfold, kfold_then_test, pair_features,
                       split_select)

logger = logging.getLogger(__name__)

STS_TASKS: tuple[str, ...] = ("STS12", "STS13", "STS14", "STS15", "STS16", "STSBenchmark", "SICKRelatedness")
TRANSFER_TASKS: tuple[str, ...] = ("MR", "CR", "SUBJ", "MPQA", "SST2", "TREC", "MRPC")
TASKS: tuple[str, ...] = STS_TASKS + TRANSFER_TASKS
MODES: tuple[str, ...] = ("dev", "test", "fasttest")
SPLITS: tuple[str, ...] = ("train", "dev", "test")

Encoder = Callable[[list], np.ndarray]


class Embeddings:
    """Rows of one ``encode`` call, looked up by sentence."""

    def __init__(self, sentences: list[str], matrix: np.ndarray):
        self.index = {s: i for i, s in enumerate(sentences)}
        self.matrix = matrix

    def __call__(self, sentences: Sequence[str]) -> np.ndarray:
        return self.matrix[np.fromiter((self.index[s] for s in sentences), dtype=np.int64, count=len(sentences))]


def _encode_once(encode: Encoder, sentences: Iterable[str]) -> Embeddings:
    unique = list(dict.fromkeys(sentences))
    t0 = time.perf_counter()
    out = encode(unique)
    if hasattr(out, "detach"):  # a torch tensor
        out = out.detach().cpu().numpy()
    matrix = np.asarray(out)
    if matrix.ndim != 2 or matrix.shape[0] != len(unique):
        raise ValueError(f"encode returned an array of shape {matrix.shape} for {len(unique)} sentences; expected ({len(unique)}, H)")
    if not np.issubdtype(matrix.dtype, np.floating):
        matrix = matrix.astype(np.float32)
    logger.info("encoded %d distinct sentences in %.1f s", len(unique), time.perf_counter() - t0)
    return Embeddings(unique, matrix)


# ---------------------------------------------------------------------------------------------- tasks
class _Task:
    name: str

    def sentences(self) -> Iterable[str]:
        raise NotImplementedError

    def check(self, cfg: ClassifierConfig) -> None:
        """Raise ValueError before any encoding when the task's data cannot be evaluated (transfer labels)."""

    def run(self, emb: Embeddings, cfg: ClassifierConfig) -> dict:
        raise NotImplementedError


class _STSYear(_Task):
    def __init__(self, name: str, data_dir: Path):
        folder = data_dir / "STS" / f"{name}-en-test"
        self.name = name
        self.parts = {s: D.read_sts_subset(folder / f"STS.input.{s}.txt", folder / f"STS.gs.{s}.txt") for s in D.STS_SUBSETS[name]}

    def sentences(self):
        for p in self.parts.values():
            yield from p.sent1
            yield from p.sent2

    def run(self, emb, cfg):
        return score_sts({k: (emb(p.sent1), emb(p.sent2), p.scores) for k, p in self.parts.items()}, self.name)

    def scored(self, emb) -> dict[str, tuple[np.ndarray, np.ndarray]]:
        """part -> (cosine similarities (n,), gold scores (n,)), float64, in the data's order.

        Raises:
            ConstantScoresError: a part's similarities are all equal (a collapsed model)."""
        from simcse.evaluation.sts import check_not_constant

        out = {k: (cosine_similarity(emb(p.sent1), emb(p.sent2), task=f"{self.name}/{k}"), np.asarray(p.scores, dtype=np.float64))
               for k, p in self.parts.items()}
        for k, (sims, _) in out.items():  # a collapsed model has no Spearman, so no interval or difference either
            check_not_constant(sims, f"{self.name}/{k}")
        return out


class _STSSplits(_STSYear):
    """STSBenchmark / SICKRelatedness scored without training, per split (``all`` pools the splits scored)."""

    def __init__(self, name: str, data_dir: Path, splits: Sequence[str]):
        self.name = name
        self.parts = {s: D.read_split_pairs(data_dir, name, s) for s in splits}


class _Binary(_Task):
    def __init__(self, name: str, data_dir: Path):
        sub, pos, neg = D.BINARY_FILES[name]
        self.name, self.data = name, D.read_binary(data_dir / sub / pos, data_dir / sub / neg)

    def sentences(self):
        return self.data.sentences

    def check(self, cfg):
        check_labels(self.data.labels, self.name, "all", cfg, nested=True)

    def run(self, emb, cfg):
        return inner_kfold(check_finite(emb(self.data.sentences), self.name), self.data.labels, cfg)


class _SST2(_Task):
    name = "SST2"

    def __init__(self, data_dir: Path):
        sub, files = D.SST2_FILES
        self.data = {k: D.read_sst2(data_dir / sub / f) for k, f in files.items()}

    def sentences(self):
        for d in self.data.values():
            yield from d.sentences

    def check(self, cfg):
        check_labels(self.data["train"].labels, self.name, "train")

    def run(self, emb, cfg):
        x = {k: check_finite(emb(d.sentences), self.name) for k, d in self.data.items()}
        y = {k: d.labels for k, d in self.data.items()}
        return split_select(x["train"], y["train"], x["dev"], y["dev"], x["test"], y["test"], cfg)


class _TREC(_Task):
    name = "TREC"

    def __init__(self, data_dir: Path):
        sub, files = D.TREC_FILES
        self.data = {k: D.read_trec(data_dir / sub / f) for k, f in files.items()}

    def sentences(self):
        for d in self.data.values():
            yield from d.sentences

    def check(self, cfg):
        check_labels(self.data["train"].labels, self.name, "train", cfg)

    def run(self, emb, cfg):
        tr, te = self.data["train"], self.data["test"]
        res, _ = kfold_then_test(check_finite(emb(tr.sentences), self.name), tr.labels,
                                 check_finite(emb(te.sentences), self.name), te.labels, cfg)
        return res


class _MRPC(_Task):
    name = "MRPC"

    def __init__(self, data_dir: Path):
        sub, files = D.MRPC_FILES
        self.data = {k: D.read_mrpc(data_dir / sub / f) for k, f in files.items()}

    def sentences(self):
        for d in self.data.values():
            yield from d.sent1
            yield from d.sent2

    def check(self, cfg):
        check_labels(self.data["train"].labels, self.name, "train", cfg)

    def run(self, emb, cfg):
        from sklearn.metrics import f1_score

        feats = {k: pair_features(check_finite(emb(d.sent1), self.name), check_finite(emb(d.sent2), self.name))
                 for k, d in self.data.items()}
        tr, te = self.data["train"], self.data["test"]
        res, yhat = kfold_then_test(feats["train"], tr.labels, feats["test"], te.labels, cfg)
        res["f1"] = round(100 * float(f1_score(te.labels, yhat)), 2)
        return {"devacc": res["devacc"], "acc": res["acc"], "f1": res["f1"], "ndev": res["ndev"], "ntest": res["ntest"]}


def _make_task(name: str, data_dir: Path, splits: Sequence[str]) -> _Task:
    if name in D.STS_SUBSETS:
        return _STSYear(name, data_dir)
    if name in D.SPLIT_PAIR_FILES:
        return _STSSplits(name, data_dir, splits)
    if name in D.BINARY_FILES:
        return _Binary(name, data_dir)
    return {"SST2": _SST2, "TREC": _TREC, "MRPC": _MRPC}[name](data_dir)


# ------------------------------------------------------------------------------------- validation
def check_tasks(tasks: str | Iterable[str]) -> list[str]:
    """The requested task names, deduplicated in order.

    Raises:
        ValueError: a name is not one of :data:`TASKS` (the message lists the valid names).
    """
    names = [tasks] if isinstance(tasks, str) else list(tasks)
    unknown = [t for t in names if t not in TASKS]
    if unknown:
        raise ValueError(f"unknown task(s) {', '.join(map(repr, unknown))}; valid tasks: {', '.join(TASKS)}")
    if not names:
        raise ValueError(f"no tasks given; valid tasks: {', '.join(TASKS)}")
    return list(dict.fromkeys(names))


def check_data(data_dir: Path, tasks: Iterable[str], splits: Sequence[str] | None = None) -> None:
    """Raise FileNotFoundError naming the folder and the download script when a task's files are missing
    (``splits``: STS-B's and SICK-R's files of these splits only; None: all of them)."""
    problems = []
    for t in tasks:
        folder, missing = D.missing_files(data_dir, t, splits)
        if missing:
            shown = ", ".join(missing[:3]) + (f" and {len(missing) - 3} more" if len(missing) > 3 else "")
            problems.append(f"{t} (missing {shown} in {folder})")
    if problems:
        raise FileNotFoundError(
            f"SentEval data incomplete under {data_dir}: {'; '.join(problems)}; run {D.DOWNLOAD_HINT} "
            "or point --data_dir / SIMCSE_SENTEVAL_DIR at a complete SentEval data/downstream folder"
        )


def _sts_splits(mode: str, sts_splits: str | Sequence[str] | None) -> tuple[str, ...]:
    if sts_splits is None:
        return ("dev",) if mode == "dev" else ("test",)
    if sts_splits == "all":
        return SPLITS
    splits = (sts_splits,) if isinstance(sts_splits, str) else tuple(sts_splits)
    bad = [s for s in splits if s not in SPLITS]
    if bad or not splits:
        raise ValueError(f"sts_splits must be 'all' or a subset of {SPLITS}, got {sts_splits!r}")
    return splits


# ------------------------------------------------------------------------------------ entry points
def evaluate(
    encode: Encoder,
    tasks: str | Iterable[str],
    data_dir: str | Path | None = None,
    mode: str = "test",
    *,
    sts_splits: str | Sequence[str] | None = None,
    kfold: int | None = None,
    seed: int = 1111,
    n_jobs: int | None = None,
    classifier: str = "senteval",
    bootstrap: int = 0,
    bootstrap_seed: int = DEFAULT_SEED,
) -> dict:
    """Evaluate sentence embeddings on SentEval tasks; returns ``{task: results}`` in SentEval's shape.

    Args:
        encode: ``encode(sentences: list[str]) -> (N, H)`` array, one row per sentence in input order.
            Called once, with every distinct sentence of the requested tasks.
        tasks: task names from :data:`TASKS` (a single name is accepted too).
        data_dir: SentEval ``data/downstream`` folder (default: :func:`resolve_senteval_dir`).
        mode: ``"test"`` (10-fold transfer CV; STS-B/SICK-R test split), ``"fasttest"`` (5-fold, test split)
            or ``"dev"`` (5-fold; STS-B/SICK-R dev split; transfer tasks report ``devacc``).
        sts_splits: STS-B/SICK-R splits to score: default the one reported by ``mode``; ``"all"`` for
            train, dev and test (SentEval's behaviour, which costs encoding the unreported splits).
        kfold: override the number of transfer folds (default 10 in test mode, 5 otherwise).
        seed: fold shuffling and classifier seed.
        n_jobs: processes for the transfer classifiers (default one per core).
        classifier: ``"senteval"`` (default: SentEval's PyTorch logistic regression with the reference
            ``evaluation.py`` settings of ``mode``, as in the paper's transfer table) or ``"sklearn"``
            (SentEval's scikit-learn path: faster, not comparable with the paper's numbers).
        bootstrap: resamples for 95% bootstrap intervals of every STS Spearman (0, the default: none; 1000 is the
            usual number): each part gets ``"spearman_ci": (low, high)`` and ``"all"`` gets ``"spearman_ci":
            {"all", "mean", "wmean"}``, the aggregates resampled within each part
            (:func:`simcse.evaluation.intervals.bootstrap_parts`). bootstrap_seed: their generator's seed.

    Returns:
        For STS12-16: ``{subset: {"pearson": (r, p), "spearman": (rho, p), "nsamples": n}, ...,
        "all": {"pearson": {"all", "mean", "wmean"}, "spearman": {...}}}``; STSBenchmark and
        SICKRelatedness the same with splits in place of subsets; transfer tasks
        ``{"devacc", "acc", "ndev", "ntest"}`` (percentages; MRPC also ``"f1"``).

    Raises:
        ValueError: unknown task or mode; bad embeddings (NaN, zero vectors for cosine), naming the task.
        FileNotFoundError: the data folder or a task's files are missing (names the download script).
    """
    names = check_tasks(tasks)
    if bootstrap:
        check_resamples(bootstrap)
    if mode not in MODES:
        raise ValueError(f"mode must be one of {', '.join(MODES)}, got {mode!r}")
    splits = _sts_splits(mode, sts_splits)
    folder = D.resolve_senteval_dir(data_dir)
    check_data(folder, names, splits)
    cfg = ClassifierConfig(kfold=kfold if kfold is not None else (10 if mode == "test" else 5), seed=seed, n_jobs=n_jobs,
                           classifier=classifier, logreg=LOGREG_SETTINGS[mode])
    plan = [_make_task(n, folder, splits) for n in names]
    for task in plan:
        task.check(cfg)
    emb = _encode_once(encode, (s for t in plan for s in t.sentences()))
    results = {}
    for task in plan:
        t0 = time.perf_counter()
        results[task.name] = task.run(emb, cfg)
        if bootstrap and isinstance(task, _STSYear):
            add_intervals(results[task.name], bootstrap_parts(task.scored(emb), bootstrap, bootstrap_seed))
        logger.info("%s done in %.1f s", task.name, time.perf_counter() - t0)
    return results


def check_resamples(n: int, option: str = "bootstrap") -> int:
    """``n`` when it is an int of at least 2, else ValueError naming ``option``."""
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 2:
        raise ValueError(f"{option} must be a number of resamples of at least 2 (1000 is usual), got {n!r}")
    return int(n)


def add_intervals(task_results: dict, intervals: dict) -> None:
    """Put :func:`bootstrap_parts`' intervals into one STS task's SentEval-shaped results (in place)."""
    for part, ci in intervals.items():
        if part == "all":
            task_results["all"]["spearman_ci"] = {k: tuple(v) for k, v in ci.items()}
        else:
            task_results[part]["spearman_ci"] = tuple(ci)


def sts_scores(encode: Encoder, tasks: str | Iterable[str], data_dir: str | Path | None = None, mode: str = "test",
               sts_splits: str | Sequence[str] | None = None) -> dict:
    """Every STS task's cosine similarities and gold scores, for comparisons (:func:`compare_sts`).

    Returns:
        ``{task: {part: (similarities (n,), gold (n,))}}``, float64, parts and pairs in the data's order.

    Raises:
        ValueError: a task is not an STS task, or as :func:`evaluate`. FileNotFoundError: as :func:`evaluate`.
    """
    names = check_tasks(tasks)
    other = [t for t in names if t not in STS_TASKS]
    if other:
        raise ValueError(f"only STS tasks have scored pairs to compare; not {', '.join(other)} (STS tasks: {', '.join(STS_TASKS)})")
    if mode not in MODES:
        raise ValueError(f"mode must be one of {', '.join(MODES)}, got {mode!r}")
    folder = D.resolve_senteval_dir(data_dir)
    check_data(folder, names, _sts_splits(mode, sts_splits))
    plan = [_make_task(n, folder, _sts_splits(mode, sts_splits)) for n in names]
    emb = _encode_once(encode, (s for t in plan for s in t.sentences()))
    return {t.name: t.scored(emb) for t in plan}


def compare_sts(encode_a: Encoder, encode_b: Encoder | None, tasks: str | Iterable[str], data_dir: str | Path | None = None,
                mode: str = "test", *, n_resamples: int = DEFAULT_RESAMPLES, seed: int = DEFAULT_SEED,
                scores_b: dict | None = None) -> dict:
    """Paired comparison of two encoders on the same STS pairs: per task and part, a's and b's Spearman, the
    difference a - b, its 95% paired-bootstrap interval and p-value (:func:`simcse.evaluation.intervals.paired_bootstrap`).
    ``scores_b``: b's :func:`sts_scores` computed before (``encode_b`` is then not called).

    Returns:
        ``{task: {part: Difference, ..., "all": {"all": Difference, "mean": ..., "wmean": ...}}}`` (fractions).

    Raises:
        ConstantScoresError: either model's similarities on a part are all equal (a collapsed model: no
            Spearman to compare, as when it is evaluated alone).
    """
    check_resamples(n_resamples, "n_resamples")
    a = sts_scores(encode_a, tasks, data_dir, mode)
    b = scores_b if scores_b is not None else sts_scores(encode_b, tasks, data_dir, mode)
    return {t: paired_bootstrap(a[t], b[t], n_resamples, seed) for t in a}


@functools.lru_cache(maxsize=8)
def _dev_plan(stsb_key: tuple, sick_key: tuple):
    stsb, sick = D.read_stsb(Path(stsb_key[0])), D.read_sick(Path(sick_key[0]))
    unique = list(dict.fromkeys(stsb.sent1 + stsb.sent2 + sick.sent1 + sick.sent2))
    index = {s: i for i, s in enumerate(unique)}

    def rows(sents):
        return np.array([index[s] for s in sents], dtype=np.int64)

    return unique, [(rows(p.sent1), rows(p.sent2), p.scores) for p in (stsb, sick)]


def evaluate_sts_dev(encode: Encoder, data_dir: str | Path | None = None, constant_score: float | None = None
                     ) -> dict[str, float]:
    """STS-B dev and SICK-R dev (``SICK_trial.txt``) Spearman of cosine similarity, as fractions.

    Fast path for training-time evaluation: files are parsed once per process and every distinct
    sentence is encoded once per call.

    Args:
        constant_score: when every cosine similarity of a task is equal (a collapsed model), the score to
            record for it instead of raising (the trainer uses 0.0: a constant ranking agrees with nothing),
            with a warning naming the task. ``None``: raise.

    Returns:
        ``{"stsb_spearman": float, "sickr_spearman": float, "avg_sts": float}`` (avg = their mean).

    Raises:
        ConstantScoresError: constant similarities and ``constant_score`` is None.
    """
    from simcse.evaluation.sts import ConstantScoresError, correlations

    folder = D.resolve_senteval_dir(data_dir)
    stsb_file = folder / "STS" / "STSBenchmark" / "sts-dev.csv"
    sick_file = folder / "SICK" / "SICK_trial.txt"
    missing = [str(f) for f in (stsb_file, sick_file) if not f.is_file()]
    if missing:
        raise FileNotFoundError(f"STS dev data missing: {', '.join(missing)}; run {D.DOWNLOAD_HINT} "
                                "or point data_dir / SIMCSE_SENTEVAL_DIR at a SentEval data/downstream folder")
    unique, parts = _dev_plan(D._cache_key(stsb_file), D._cache_key(sick_file))
    emb = _encode_once(encode, unique).matrix
    out = {}
    for key, task, (i1, i2, gold) in zip(("stsb_spearman", "sickr_spearman"), ("STSBenchmark/dev", "SICKRelatedness/dev"), parts):
        sims = cosine_similarity(emb[i1], emb[i2], task=task)
        try:
            out[key] = float(correlations(sims, gold, task=task)["spearman"][0])
        except ConstantScoresError as e:
            if constant_score is None:
                raise
            logger.warning("%s; %s recorded as %s", e, key, constant_score)
            out[key] = float(constant_score)
    out["avg_sts"] = (out["stsb_spearman"] + out["sickr_spearman"]) / 2
    return out
