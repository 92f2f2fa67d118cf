"""SentEval's PyTorch logistic-regression classifier, the one behind the SimCSE paper's transfer table.

SentEval (``senteval/tools/classifier.py``, ``MLP`` with ``nhid=0``) trains ``nn.Linear(D, C)`` with a
cross-entropy loss (mean over the batch), an optimizer with default hyper-parameters whose
``weight_decay`` is the L2 strength, and early stopping on a validation set. The facts reproduced here:

* every classifier starts by seeding numpy's global generator and torch with the seed (1111), so its
  initial weights, its validation split and its batch order depend only on the seed and the data;
* validation: the given ``(X_dev, y_dev)``, or the first ``int(validation_split * N)`` rows of a fresh
  ``np.random.permutation(N)`` (the rest trains);
* one "epoch" of the early-stopping loop is ``epoch_size`` passes over the training rows, each in the
  order of a new ``np.random.permutation``, in batches of ``batch_size``; after it the validation accuracy
  is measured; a better accuracy keeps a copy of the model, otherwise a counter grows and training stops
  once it had reached ``tenacity``; at most ``max_epoch`` passes; the best copy is the result;
* the L2 strengths tried are ``1e-5, 1e-4, 1e-3, 1e-2`` (:data:`L2_REGS`).

The settings of the reference SimCSE ``evaluation.py`` are :data:`SETTINGS` (``test``: adam, batch 64,
tenacity 5, epoch_size 4; ``fasttest``/``dev``: rmsprop, batch 128, tenacity 3, epoch_size 2).

One difference in how the work is done, not in the result: the classifiers of several L2 strengths on the
same data are trained side by side (they share the seed, hence the initial weights and every batch order, and
their parameters are independent), so one pass over the data serves all of them. A classifier that stopped
early takes no further updates.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

L2_REGS: tuple[float, ...] = (1e-5, 1e-4, 1e-3, 1e-2)

_OPTIMIZERS = {"adam": torch.optim.Adam, "rmsprop": torch.optim.RMSprop}


@dataclass(frozen=True)
class LogRegSettings:
    """SentEval's ``params["classifier"]`` for ``nhid = 0``.

    Attributes:
        optim: ``"adam"`` or ``"rmsprop"`` (torch defaults: lr 1e-3 and 1e-2).
        batch_size: rows per optimizer step.
        tenacity: validation checks without improvement tolerated before stopping.
        epoch_size: passes over the training rows between two validation checks.
        max_epoch: passes after which training stops in any case (SentEval's default 200).
    """

    optim: str = "adam"
    batch_size: int = 64
    tenacity: int = 5
    epoch_size: int = 4
    max_epoch: int = 200

    def __post_init__(self):
        if self.optim not in _OPTIMIZERS:
            raise ValueError(f"optim must be one of {sorted(_OPTIMIZERS)}, got {self.optim!r}")
        for name in ("batch_size", "epoch_size", "max_epoch"):
            if int(getattr(self, name)) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)!r}")
        if int(self.tenacity) < 0:
            raise ValueError(f"tenacity must be >= 0, got {self.tenacity!r}")


#: The reference SimCSE ``evaluation.py`` settings per mode (``dev`` uses the fasttest ones).
SETTINGS: dict[str, LogRegSettings] = {
    "test": LogRegSettings("adam", 64, 5, 4),
    "fasttest": LogRegSettings("rmsprop", 128, 3, 2),
    "dev": LogRegSettings("rmsprop", 128, 3, 2),
}


class LogRegPath:
    """Linear classifiers ``W_r x + b_r`` trained as SentEval does, one per L2 strength in ``regs``.

    Args:
        dim: input size D. nclasses: number of labels C (labels are ints in ``[0, C)``).
        regs: L2 strengths (SentEval's ``l2reg``, the optimizer's ``weight_decay``).
        settings: :class:`LogRegSettings`. seed: SentEval's seed (1111).
    """

    def __init__(self, dim: int, nclasses: int, regs, settings: LogRegSettings, seed: int = 1111):
        np.random.seed(seed)  # SentEval seeds the global generators when a classifier is built
        torch.manual_seed(seed)
        first = nn.Linear(dim, nclasses)  # draws its initial weights from the seeded torch generator
        self.models = [first] + [copy.deepcopy(first) for _ in regs[1:]]
        self.regs, self.s = list(regs), settings
        groups = [{"params": list(m.parameters()), "weight_decay": float(r)} for m, r in zip(self.models, self.regs)]
        self.optimizer = _OPTIMIZERS[settings.optim](groups)

    def fit(self, X: np.ndarray, y: np.ndarray, validation_data=None, validation_split: float | None = None) -> list[float]:
        """Train with early stopping; keep each strength's best model. Returns its validation accuracies.

        Args:
            X: (N, D) float features. y: (N,) int labels.
            validation_data: ``(X_dev, y_dev)``; otherwise ``validation_split`` (fraction of X held out).
        """
        if validation_data is not None:
            Xt, yt, Xd, yd = X, y, *validation_data
        else:
            perm = np.random.permutation(len(X))
            cut = int(validation_split * len(X))
            Xt, yt, Xd, yd = X[perm[cut:]], y[perm[cut:]], X[perm[:cut]], y[perm[:cut]]
        Xt, yt = torch.as_tensor(np.asarray(Xt), dtype=torch.float32), torch.as_tensor(np.asarray(yt), dtype=torch.long)
        R = len(self.models)
        best, best_models, waited, active = [-1.0] * R, [None] * R, [0] * R, list(range(R))
        nepoch = 0
        while active and nepoch <= self.s.max_epoch:
            self._passes(Xt, yt, active)
            nepoch += self.s.epoch_size
            accs = self.score(Xd, yd)
            for r in list(active):
                if accs[r] > best[r]:
                    best[r], best_models[r] = accs[r], copy.deepcopy(self.models[r])
                else:  # SentEval: stop once the counter had reached tenacity, then count
                    if waited[r] >= self.s.tenacity:
                        active.remove(r)
                    waited[r] += 1
        self.models = best_models
        return best

    def _passes(self, Xt: torch.Tensor, yt: torch.Tensor, active: list[int]) -> None:
        bs = self.s.batch_size
        models = [self.models[r] for r in active]
        for _ in range(self.s.epoch_size):
            perm = torch.from_numpy(np.random.permutation(len(Xt)))
            for i in range(0, len(Xt), bs):
                idx = perm[i:i + bs]
                xb, yb = Xt.index_select(0, idx), yt.index_select(0, idx)
                # (B, D) -> R x (B, C); each strength's loss only reaches its own parameters
                loss = sum(F.cross_entropy(m(xb), yb) for m in models)
                self.optimizer.zero_grad(set_to_none=True)  # stopped models keep grad None: no update
                loss.backward()
                self.optimizer.step()

    @torch.no_grad()
    def predict(self, X: np.ndarray) -> np.ndarray:
        """(R, N) int64 predicted labels, one row per L2 strength."""
        x = torch.as_tensor(np.asarray(X), dtype=torch.float32)
        return np.stack([m(x).argmax(1).numpy() for m in self.models])

    def score(self, X: np.ndarray, y: np.ndarray) -> list[float]:
        """Accuracy (fraction) of each strength's model on ``(X, y)``."""
        return [float(np.mean(p == np.asarray(y))) for p in self.predict(X)]


def fit_path(X, y, nclasses, regs, settings, seed, validation_data=None, validation_split=None) -> LogRegPath:
    """Build a :class:`LogRegPath` for ``X`` (N, D), ``y`` (N,) with ``nclasses`` labels (the task's count, as
    SentEval's config gives it, not the count in this subset) and fit it (see :meth:`LogRegPath.fit`)."""
    path = LogRegPath(X.shape[1], nclasses, regs, settings, seed)
    path.fit(X, y, validation_data=validation_data, validation_split=validation_split)
    return path
