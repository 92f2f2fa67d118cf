"""SentEval's PyTorch logistic regression (simcse.evaluation.logreg) against SentEval's loop written out
independently: one classifier per L2 strength, seeded, early-stopped, exactly as SentEval's MLP(nhid=0)."""
import copy

import numpy as np
import pytest
import torch
from torch import nn

from simcse.evaluation.logreg import SETTINGS, LogRegSettings, fit_path
from simcse.evaluation.transfer import ClassifierConfig, inner_kfold, kfold_then_test, split_select


class NaiveSentEvalLogReg:
    """SentEval's MLP(nhid=0) semantics, one classifier at a time (the oracle)."""

    def __init__(self, dim, nclasses, l2reg, s: LogRegSettings, seed=1111):
        np.random.seed(seed)
        torch.manual_seed(seed)
        self.model = nn.Sequential(nn.Linear(dim, nclasses))
        opt = {"adam": torch.optim.Adam, "rmsprop": torch.optim.RMSprop}[s.optim]
        self.optimizer = opt(self.model.parameters())
        self.optimizer.param_groups[0]["weight_decay"] = l2reg
        self.s = s

    def fit(self, X, y, validation_data=None, validation_split=None):
        if validation_data is None:
            p = np.random.permutation(len(X))
            n = int(validation_split * len(X))
            X, y, Xd, yd = X[p[n:]], y[p[n:]], X[p[:n]], y[p[:n]]
        else:
            Xd, yd = validation_data
        X, y = torch.FloatTensor(X), torch.LongTensor(y)
        nepoch, best, stop, count = 0, -1, False, 0
        while not stop and nepoch <= self.s.max_epoch:
            for _ in range(self.s.epoch_size):
                p = np.random.permutation(len(X))
                for i in range(0, len(X), self.s.batch_size):
                    idx = torch.LongTensor(p[i:i + self.s.batch_size])
                    loss = nn.CrossEntropyLoss()(self.model(X[idx]), y[idx])
                    self.optimizer.zero_grad()
                    loss.backward()
                    self.optimizer.step()
            nepoch += self.s.epoch_size
            acc = self.score(Xd, yd)
            if acc > best:
                best, bestmodel = acc, copy.deepcopy(self.model)
            else:
                if count >= self.s.tenacity:
                    stop = True
                count += 1
        self.model = bestmodel
        return best

    def predict(self, X):
        with torch.no_grad():
            return self.model(torch.FloatTensor(X)).argmax(1).numpy()

    def score(self, X, y):
        return float(np.mean(self.predict(X) == y))


def _data(n=120, d=6, classes=3, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, d)).astype(np.float32)
    y = np.argmax(X[:, :classes] + 0.9 * rng.standard_normal((n, classes)), axis=1)
    return X, y


@pytest.mark.parametrize("mode", ["test", "fasttest"])
def test_side_by_side_strengths_equal_separate_classifiers(mode):
    X, y = _data()
    s = SETTINGS[mode]
    regs = [1e-5, 1e-3, 1e-2]
    path = fit_path(X[:90], y[:90], 3, regs, s, 1111, validation_data=(X[90:], y[90:]))
    for r, reg in enumerate(regs):
        naive = NaiveSentEvalLogReg(6, 3, reg, s)
        naive.fit(X[:90], y[:90], validation_data=(X[90:], y[90:]))
        for a, b in zip(path.models[r].parameters(), naive.model.parameters()):
            torch.testing.assert_close(a, b, rtol=0, atol=1e-6)
        assert path.score(X, y)[r] == naive.score(X, y)


def test_validation_split_holds_out_seeded_permutation():
    X, y = _data(100)
    s = LogRegSettings("adam", 16, 2, 2)
    path = fit_path(X, y, 3, [1e-4], s, 1111, validation_split=0.05)
    naive = NaiveSentEvalLogReg(6, 3, 1e-4, s)
    naive.fit(X, y, validation_split=0.05)
    np.testing.assert_array_equal(path.predict(X)[0], naive.predict(X))


def test_inner_kfold_equals_senteval_nested_loop():
    from sklearn.model_selection import StratifiedKFold

    X, y = _data(80, classes=2, seed=3)
    s = SETTINGS["fasttest"]
    regs = [1e-5, 1e-4, 1e-3, 1e-2]
    dev, test = [], []
    for tr, te in StratifiedKFold(3, shuffle=True, random_state=1111).split(X, y):
        scores = []
        for reg in regs:
            accs = []
            for a, b in StratifiedKFold(3, shuffle=True, random_state=1111).split(X[tr], y[tr]):
                c = NaiveSentEvalLogReg(6, 2, reg, s)
                c.fit(X[tr][a], y[tr][a], validation_data=(X[tr][b], y[tr][b]))
                accs.append(c.score(X[tr][b], y[tr][b]))
            scores.append(round(100 * np.mean(accs), 2))
        best = int(np.argmax(scores))
        dev.append(np.max(scores))
        c = NaiveSentEvalLogReg(6, 2, regs[best], s)
        c.fit(X[tr], y[tr], validation_split=0.05)
        test.append(round(100 * c.score(X[te], y[te]), 2))
    got = inner_kfold(X, y, ClassifierConfig(kfold=3, logreg=s, n_jobs=1))
    assert (got["devacc"], got["acc"]) == (round(np.mean(dev), 2), round(np.mean(test), 2))


def test_kfold_then_test_and_split_select_use_senteval_strengths():
    X, y = _data(150, seed=5)
    s = SETTINGS["fasttest"]
    cfg = ClassifierConfig(kfold=3, logreg=s, n_jobs=1)
    res, yhat = kfold_then_test(X[:100], y[:100], X[100:], y[100:], cfg)
    assert res["ntest"] == 50 and yhat.shape == (50,) and res["acc"] == round(100 * np.mean(yhat == y[100:]), 2)
    # SST2-style: the strength picked on dev; the test accuracy is that classifier's (oracle below)
    out = split_select(X[:80], y[:80], X[80:110], y[80:110], X[110:], y[110:], cfg)
    scores = []
    for reg in (1e-5, 1e-4, 1e-3, 1e-2):
        c = NaiveSentEvalLogReg(6, 3, reg, s)
        c.fit(X[:80], y[:80], validation_data=(X[80:110], y[80:110]))
        scores.append((round(100 * c.score(X[80:110], y[80:110]), 2), round(100 * c.score(X[110:], y[110:]), 2)))
    best = int(np.argmax([a for a, _ in scores]))
    assert (out["devacc"], out["acc"]) == scores[best]


def test_settings_are_the_reference_evaluation_settings_and_validated():
    assert SETTINGS["test"] == LogRegSettings("adam", 64, 5, 4)
    assert SETTINGS["fasttest"] == SETTINGS["dev"] == LogRegSettings("rmsprop", 128, 3, 2)
    with pytest.raises(ValueError, match="optim must be one of"):
        LogRegSettings("sgd")
    with pytest.raises(ValueError, match="classifier must be one of senteval, sklearn"):
        ClassifierConfig(classifier="svm")
