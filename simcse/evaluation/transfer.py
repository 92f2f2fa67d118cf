"""Transfer tasks: a linear classifier on frozen sentence embeddings, with SentEval's protocol.

Two classifiers, chosen by :attr:`ClassifierConfig.classifier`:

* ``"senteval"`` (default): SentEval's own PyTorch logistic regression (:mod:`simcse.evaluation.logreg`)
  with the reference SimCSE ``evaluation.py`` settings per mode, L2 strengths 1e-5 .. 1e-2. This is what
  the SimCSE paper's transfer table used; numbers are comparable with it.
* ``"sklearn"``: SentEval's scikit-learn path (``LogisticRegression``, inverse strengths ``C`` below); faster,
  but NOT comparable with the paper's table (up to ~1.3 points apart).

The cross-validation around either, as SentEval's ``tools/validation.py`` does it (facts, not code):

* MR, CR, SUBJ, MPQA (``inner_kfold``): stratified k-fold over the task (``k`` = 10 in test mode, 5 in
  fasttest/dev); inside each training fold a second stratified k-fold picks the regularisation strength by
  mean inner accuracy; a classifier refitted on the whole training fold with it (the PyTorch classifier:
  early-stopped on a random 5% of that fold) is scored on the held-out fold. ``devacc`` = mean best inner
  accuracy, ``acc`` = mean held-out accuracy.
* TREC and MRPC (``kfold_then_test``): k-fold cross-validation on the train file picks the strength
  (scikit-learn ``C`` from 2^-1 .. 2^5); a classifier refitted on all of train (PyTorch: 5% held out for
  early stopping) is scored on the test file. MRPC's features are ``[|u - v|, u * v]`` and it also reports
  F1 (positive class 1).
* SST2 (``split_select``): the strength picked on the dev split (PyTorch: also the early-stopping set),
  accuracy on test.

Fold assignment uses ``StratifiedKFold(shuffle=True, random_state=seed)`` over the examples in SentEval's
order (see :func:`simcse.evaluation.data.senteval_order`), accuracies are percentages rounded to 2
decimals before the choice of the strength (first best wins), all as SentEval does. Differences, for speed
only: scikit-learn's ``C`` values of one split are fitted as a warm-started path (L-BFGS; each fit converges
to the same optimum as a cold fit, up to the solver tolerance); PyTorch classifiers of all strengths on one
split train side by side (exactly as separately: same seed, independent parameters); folds run in parallel
processes.
"""
from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np

from simcse.evaluation.logreg import L2_REGS, SETTINGS, LogRegSettings, fit_path
from simcse.files.checks import check_int

CLASSIFIERS: tuple[str, ...] = ("senteval", "sklearn")
INNER_REGS: tuple[float, ...] = tuple(2.0**t for t in range(-2, 4))  # 0.25 .. 8
KFOLD_REGS: tuple[float, ...] = tuple(2.0**t for t in range(-1, 6))  # 0.5 .. 32


@dataclass(frozen=True)
class ClassifierConfig:
    """Settings of the transfer classifiers.

    Attributes:
        kfold: number of folds (outer and inner).
        seed: fold shuffling and classifier seed (SentEval's default 1111).
        classifier: ``"senteval"`` (SentEval's PyTorch logistic regression, paper-comparable) or ``"sklearn"``.
        logreg: the PyTorch classifier's settings (default: the reference ``evaluation.py``'s test mode).
        max_iter, tol: scikit-learn's L-BFGS stopping rule for each fit.
        n_jobs: parallel processes over folds (None: one per CPU core, at most ``kfold``).

    Raises:
        ValueError: ``kfold`` < 2 or ``classifier`` unknown.
    """

    kfold: int = 10
    seed: int = 1111
    classifier: str = "senteval"
    logreg: LogRegSettings = SETTINGS["test"]
    max_iter: int = 1000
    tol: float = 1e-4
    n_jobs: int | None = None

    def __post_init__(self):
        check_int(self.kfold, "kfold", 2, hint=" (cross-validation needs two folds)")
        if self.classifier not in CLASSIFIERS:
            raise ValueError(f"classifier must be one of {', '.join(CLASSIFIERS)}, got {self.classifier!r}")

    @property
    def torch(self) -> bool:
        return self.classifier == "senteval"

    def jobs(self) -> int:
        if self.n_jobs is not None:
            return max(1, int(self.n_jobs))
        return max(1, min(self.kfold, os.cpu_count() or 1))


def _classifier(C: float, cfg: ClassifierConfig):
    from sklearn.linear_model import LogisticRegression

    return LogisticRegression(C=C, random_state=cfg.seed, max_iter=cfg.max_iter, tol=cfg.tol, warm_start=True)


def _fit(clf, X, y):
    import warnings

    from sklearn.exceptions import ConvergenceWarning

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        return clf.fit(X, y)


def _one_blas_thread(fn):
    """Run ``fn`` with BLAS/OpenMP limited to one thread: folds are parallelised across processes instead,
    and multi-threaded BLAS (or torch) on these small matrices costs far more CPU than it saves."""
    import functools

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        import torch
        from threadpoolctl import threadpool_limits

        threads = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            with threadpool_limits(limits=1):
                return fn(*args, **kwargs)
        finally:
            torch.set_num_threads(threads)

    return wrapper


def accuracy_path(X_train, y_train, evals, regs, cfg: ClassifierConfig) -> np.ndarray:
    """Fit one classifier per ``C`` in ``regs`` (ascending, warm-started) and score it on each eval set.

    Returns:
        accuracies (fractions) of shape (len(regs), len(evals)).
    """
    clf = _classifier(regs[0], cfg)
    acc = np.zeros((len(regs), len(evals)))
    for i, C in enumerate(regs):
        clf.set_params(C=C)
        _fit(clf, X_train, y_train)
        for j, (X, y) in enumerate(evals):
            acc[i, j] = clf.score(X, y)
    return acc


def _pick(scores: list[float]) -> int:
    """Index of the best rounded percentage (first on ties), as SentEval's ``np.argmax``."""
    return int(np.argmax(scores))


def _pct(x: float) -> float:
    return round(100 * float(x), 2)


def _parallel(fn, jobs_args, cfg: ClassifierConfig):
    if cfg.jobs() == 1 or len(jobs_args) == 1:
        return [fn(*a) for a in jobs_args]
    from joblib import Parallel, delayed

    return Parallel(n_jobs=min(cfg.jobs(), len(jobs_args)))(delayed(fn)(*a) for a in jobs_args)


def _folds(y, cfg: ClassifierConfig):
    from sklearn.model_selection import StratifiedKFold

    return StratifiedKFold(n_splits=cfg.kfold, shuffle=True, random_state=cfg.seed)


def check_labels(y: np.ndarray, task: str, split: str = "train", cfg: ClassifierConfig | None = None,
                 nested: bool = False) -> None:
    """Fail early, naming the task, the split and the fold, when a classifier could not be fitted.

    A logistic regression needs two labels in its training data. Checked: ``y`` holds at least two labels
    and, with ``cfg`` (stratified ``cfg.kfold``-fold cross-validation, seeded by ``cfg.seed``), that the training
    part of every fold (with ``nested``, also of every inner fold of every outer training part, as
    :func:`inner_kfold` uses them) holds at least two labels. The folds are the ones the evaluation uses.

    Raises:
        ValueError: the message gives the label counts and what would be needed.
    """
    y = np.asarray(y)
    labels, counts = np.unique(y, return_counts=True)
    count_text = ", ".join(f"label {int(a)}: {int(c)}" for a, c in zip(labels, counts)) or "no examples"
    if len(labels) < 2:
        raise ValueError(f"{task} ({split}): a classifier needs examples of at least 2 labels, got {count_text}")
    if cfg is None:
        return
    kfold = cfg.kfold
    hint = (f"stratified {kfold}-fold cross-validation needs about {kfold if not nested else kfold + 2} or more "
            f"examples of each label ({count_text}); use {'fewer folds (mode fasttest) or ' if kfold > 5 else ''}"
            "more data")

    def check(yy, outer=None):
        part = "the data" if outer is None else f"the training part of outer fold {outer}"
        try:
            splits = list(_folds(yy, cfg).split(np.zeros(len(yy)), yy))
        except ValueError as e:  # sklearn: fewer examples than folds
            raise ValueError(f"{task} ({split}): {part} cannot be split into {kfold} folds ({e}); {hint}") from None
        for i, (tr, _) in enumerate(splits, 1):
            present = np.unique(yy[tr])
            fold = f"fold {i} of {kfold}" if outer is None else f"inner fold {i} of outer fold {outer}"
            if len(present) < 2:
                raise ValueError(f"{task} ({split}): the training part of {fold} holds only label "
                                 f"{int(present[0])}; {hint}")
            if nested and outer is None:
                check(yy[tr], i)

    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # sklearn: "least populated class has only n members"
        check(y)


def _regs(cfg: ClassifierConfig, sklearn_regs: tuple[float, ...]) -> tuple[float, ...]:
    """The strengths SentEval tries: L2 weights 1e-5 .. 1e-2 (PyTorch) or the given scikit-learn ``C`` grid."""
    return L2_REGS if cfg.torch else sklearn_regs


def _strength_scores(X_tr, y_tr, X_va, y_va, nclasses: int, regs, cfg: ClassifierConfig) -> np.ndarray:
    """Validation accuracy (fraction) of one classifier per strength in ``regs``: shape (len(regs),).

    The PyTorch classifier early-stops on ``(X_va, y_va)`` itself, as SentEval's ``validation_data``."""
    if cfg.torch:
        path = fit_path(X_tr, y_tr, nclasses, regs, cfg.logreg, cfg.seed, validation_data=(X_va, y_va))
        return np.array(path.score(X_va, y_va))
    return accuracy_path(X_tr, y_tr, [(X_va, y_va)], regs, cfg)[:, 0]


def _refit_predict(X_tr, y_tr, nclasses: int, reg: float, X_te, cfg: ClassifierConfig) -> np.ndarray:
    """Refit with the chosen strength on all of ``X_tr`` and predict ``X_te``: (N_te,) labels.

    The PyTorch classifier holds out a random 5% of ``X_tr`` for early stopping (SentEval's
    ``validation_split=0.05``)."""
    if cfg.torch:
        return fit_path(X_tr, y_tr, nclasses, [reg], cfg.logreg, cfg.seed, validation_split=0.05).predict(X_te)[0]
    return _fit(_classifier(reg, cfg), X_tr, y_tr).predict(X_te)


def _cv_scores(X, y, nclasses, regs, cfg: ClassifierConfig) -> list[float]:
    """Mean k-fold accuracy (rounded %) per strength; folds are not parallelised here."""
    per_fold = [_strength_scores(X[tr], y[tr], X[te], y[te], nclasses, regs, cfg) for tr, te in _folds(y, cfg).split(X, y)]
    return [_pct(v) for v in np.mean(per_fold, axis=0)]


@_one_blas_thread
def _outer_fold(X, y, tr, te, nclasses, regs, cfg: ClassifierConfig) -> tuple[float, float, float]:
    scores = _cv_scores(X[tr], y[tr], nclasses, regs, cfg)
    best = _pick(scores)
    yhat = _refit_predict(X[tr], y[tr], nclasses, regs[best], X[te], cfg)
    return scores[best], _pct(np.mean(yhat == y[te])), regs[best]


@_one_blas_thread
def inner_kfold(X: np.ndarray, y: np.ndarray, cfg: ClassifierConfig, regs=None) -> dict:
    """Nested cross-validation (MR, CR, SUBJ, MPQA): ``{"devacc", "acc", "ndev", "ntest"}`` (percentages).

    Args:
        X: (N, D) float features. y: (N,) int labels. regs: strengths (default: SentEval's for ``cfg``).
    """
    regs = _regs(cfg, INNER_REGS) if regs is None else regs
    nclasses = int(np.max(y)) + 1
    splits = list(_folds(y, cfg).split(X, y))
    out = _parallel(_outer_fold, [(X, y, tr, te, nclasses, regs, cfg) for tr, te in splits], cfg)
    dev = [o[0] for o in out]
    test = [o[1] for o in out]
    return {"devacc": round(float(np.mean(dev)), 2), "acc": round(float(np.mean(test)), 2), "ndev": len(y), "ntest": len(y)}


@_one_blas_thread
def _fold_path(X, y, tr, te, nclasses, regs, cfg):
    return _strength_scores(X[tr], y[tr], X[te], y[te], nclasses, regs, cfg)


@_one_blas_thread
def kfold_then_test(X_train, y_train, X_test, y_test, cfg: ClassifierConfig, regs=None) -> tuple[dict, np.ndarray]:
    """Cross-validate the strength on train, refit on train, score test (TREC, MRPC).

    Args:
        X_train: (N, D) features, y_train: (N,) int labels; X_test, y_test likewise.
        regs: strengths (default: SentEval's for ``cfg``).

    Returns:
        (``{"devacc", "acc", "ndev", "ntest"}`` in percent, test predictions (N_test,)).
    """
    regs = _regs(cfg, KFOLD_REGS) if regs is None else regs
    nclasses = int(np.max(y_train)) + 1
    splits = list(_folds(y_train, cfg).split(X_train, y_train))
    per_fold = _parallel(_fold_path, [(X_train, y_train, tr, te, nclasses, regs, cfg) for tr, te in splits], cfg)
    scores = [_pct(v) for v in np.mean(per_fold, axis=0)]
    best = _pick(scores)
    yhat = _refit_predict(X_train, y_train, nclasses, regs[best], X_test, cfg)
    res = {"devacc": scores[best], "acc": _pct(np.mean(yhat == y_test)), "ndev": len(y_train), "ntest": len(y_test)}
    return res, yhat


@_one_blas_thread
def split_select(X_train, y_train, X_dev, y_dev, X_test, y_test, cfg: ClassifierConfig, regs=None) -> dict:
    """Pick the strength on dev, report test accuracy (SST2): ``{"devacc", "acc", "ndev", "ntest"}`` (percent).

    SentEval refits the chosen strength with the same seed and the same dev set, which reproduces the
    classifier already fitted for it; that classifier is scored directly."""
    regs = _regs(cfg, INNER_REGS) if regs is None else regs
    if cfg.torch:
        path = fit_path(X_train, y_train, int(np.max(y_train)) + 1, regs, cfg.logreg, cfg.seed,
                        validation_data=(X_dev, y_dev))
        acc = np.stack([path.score(X_dev, y_dev), path.score(X_test, y_test)], axis=1)
    else:
        acc = accuracy_path(X_train, y_train, [(X_dev, y_dev), (X_test, y_test)], regs, cfg)
    scores = [_pct(a) for a in acc[:, 0]]
    best = _pick(scores)
    return {"devacc": scores[best], "acc": _pct(acc[best, 1]), "ndev": len(y_dev), "ntest": len(y_test)}


def pair_features(u: np.ndarray, v: np.ndarray) -> np.ndarray:
    """MRPC's classifier input, as SentEval builds it: ``[|u - v|, u * v]``."""
    return np.concatenate([np.abs(u - v), u * v], axis=1)


def check_finite(X: np.ndarray, task: str) -> np.ndarray:
    bad = ~np.isfinite(X).all(axis=1)
    if bad.any():
        raise ValueError(f"{int(bad.sum())} embedding(s) for {task} contain NaN or inf (row {int(np.argmax(bad))})")
    return X
