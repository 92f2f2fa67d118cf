"""simcse.research.whitening: BERT-whitening against loops, its .npz files and its errors."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from simcse.training.data import read_sentences
from simcse.research.whitening import Whitening, fit_whitening_on_file



# ---------------------------------------------------------------------------------------- whitening
def _corpus(n=300, d=6, seed=6):
    rng = np.random.default_rng(seed)
    mix = rng.normal(size=(d, d)) * np.array([5, 3, 2, 1, 0.5, 0.1])[:d]
    return rng.normal(size=(n, d)) @ mix + 7.0


def _loop_cov(x):
    n, d = len(x), len(x[0])
    mean = [sum(r[j] for r in x) / n for j in range(d)]
    cov = np.zeros((d, d))
    for r in x:
        for i in range(d):
            for j in range(d):
                cov[i, j] += (r[i] - mean[i]) * (r[j] - mean[j]) / n
    return np.array(mean), cov


def test_whitening_gives_identity_covariance():
    x = _corpus()
    w = Whitening.fit(x)
    z = w.transform(x).astype(np.float64)
    mean, cov = _loop_cov(z.tolist())
    np.testing.assert_allclose(mean, 0, atol=1e-5)
    np.testing.assert_allclose(cov, np.eye(x.shape[1]), atol=1e-5)
    assert z.dtype == np.float64 and w.transform(x).dtype == np.float32
    ref_mean, _ = _loop_cov(x.tolist())
    np.testing.assert_allclose(w.mu, ref_mean, rtol=1e-12)
    assert w.transform(torch.tensor(x[0])).shape == (6,)


def test_whitening_keeps_top_k_directions():
    x = _corpus()
    _, cov = _loop_cov(x.tolist())
    eigval = np.sort(np.linalg.eigvalsh(cov))[::-1]
    k = 3
    w = Whitening.fit(x, dim=k)
    assert w.W.shape == (6, k) and w.dim == k
    for j in range(k):  # column j is the j-th eigenvector of the covariance, scaled by 1/sqrt(eigenvalue)
        col = w.W[:, j]
        np.testing.assert_allclose(cov @ col, eigval[j] * col, rtol=1e-7, atol=1e-9)
        assert col @ col == pytest.approx(1.0 / eigval[j], rel=1e-8)
    z = w.transform(x)
    assert z.shape == (300, k)
    full = Whitening.fit(x)
    np.testing.assert_allclose(np.abs(z), np.abs(full.transform(x)[:, :k]), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(np.abs(full.truncated(k).W), np.abs(w.W), rtol=1e-8)
    with pytest.raises(ValueError, match="dim must be an integer in \\[1, 3\\]"):
        w.truncated(4)


def test_whitening_drops_degenerate_directions(caplog):
    x = _corpus(d=5)
    x = np.hstack([x, x[:, :1] - 2 * x[:, 1:2]])  # column 6 is a linear function of columns 1-2: zero variance left
    with caplog.at_level("WARNING", logger="simcse.evaluation.analysis"):
        w = Whitening.fit(x)
    assert w.dim == 5 and "keeps 5 of 6 dimensions" in caplog.text
    _, cov = _loop_cov(w.transform(x).astype(np.float64).tolist())
    np.testing.assert_allclose(cov, np.eye(5), atol=1e-5)
    with pytest.raises(ValueError, match="only 5 non-degenerate"):
        Whitening.fit(x, dim=6)


def test_whitening_save_load_round_trip(tmp_path):
    x = _corpus()
    w = Whitening.fit(x, dim=4)
    path = w.save(tmp_path / "sub" / "white")
    assert path.name == "white.npz"
    back = Whitening.load(path)
    np.testing.assert_array_equal(back.mu, w.mu)
    np.testing.assert_array_equal(back.W, w.W)
    np.testing.assert_array_equal(back.singular_values, w.singular_values)
    np.testing.assert_array_equal(back.transform(x[:5]), w.transform(x[:5]))
    with pytest.raises(FileNotFoundError):
        Whitening.load(tmp_path / "missing.npz")
    np.savez(tmp_path / "bad.npz", mu=np.zeros(3))
    with pytest.raises(ValueError, match="missing \\['W'\\]"):
        Whitening.load(tmp_path / "bad.npz")


def test_whitening_errors():
    rng = np.random.default_rng(7)
    small = rng.normal(size=(3, 6))  # 3 sentences: rank of the covariance is 2
    with pytest.raises(ValueError, match="only 2 non-degenerate directions"):
        Whitening.fit(small, dim=3)
    assert Whitening.fit(small, dim=2).dim == 2
    with pytest.raises(ValueError, match="all identical"):
        Whitening.fit(np.ones((4, 3)))
    with pytest.raises(ValueError, match="dim must be an integer in \\[1, 6\\]"):
        Whitening.fit(small, dim=7)
    w = Whitening.fit(_corpus(), dim=2)
    with pytest.raises(ValueError, match="fitted on 6"):
        w.transform(np.ones((2, 5)))


def test_fit_whitening_on_file(tmp_path):
    x = _corpus(n=20, d=3)
    lines = [f"sentence {i}" for i in range(20)]
    f = tmp_path / "corpus.txt"
    f.write_text("\n".join(lines[:10]) + "\n\n   \n" + "\n".join(lines[10:]) + "\n")
    lookup = dict(zip(lines, x))
    w = fit_whitening_on_file(lambda s: np.stack([lookup[t] for t in s]), f, dim=2)
    np.testing.assert_allclose(w.mu, x.mean(axis=0), rtol=1e-12)
    w10 = fit_whitening_on_file(lambda s: np.stack([lookup[t] for t in s]), f, max_sentences=10)
    np.testing.assert_allclose(w10.mu, x[:10].mean(axis=0), rtol=1e-12)
    (tmp_path / "empty.txt").write_text("\n \n")
    with pytest.raises(ValueError, match="no non-blank line"):
        read_sentences(tmp_path / "empty.txt")
