"""simcse.evaluation.analysis: alignment, uniformity, singular spectrum, cosine by gold bins, the STS-B setting.

Every metric is compared with a direct Python/numpy loop on small random data.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch

from conftest import STSB_ROWS, loop_alignment, loop_cos, loop_uniformity, unit_vector, write_fake_stsb
from simcse.evaluation import analysis as A


def _fake_encoder(dim=5, seed=0):
    rng = np.random.default_rng(seed)
    table = {}

    def encode(sentences):
        for s in sentences:
            if s not in table:
                table[s] = rng.normal(size=dim)
        return np.stack([table[s] for s in sentences])

    return encode, table


# ---------------------------------------------------------------------------------- alignment/uniformity
@pytest.mark.parametrize("alpha", [2, 1, 0.5])
def test_alignment_matches_loop(alpha):
    rng = np.random.default_rng(1)
    x, y = rng.normal(size=(9, 4)) * 3, rng.normal(size=(9, 4))
    assert A.alignment(x, y, alpha=alpha) == pytest.approx(loop_alignment(x, y, alpha), rel=1e-12)


def test_alignment_accepts_torch_and_is_zero_for_parallel_pairs():
    rng = np.random.default_rng(2)
    x = rng.normal(size=(5, 3))
    assert A.alignment(torch.tensor(x), torch.tensor(2.5 * x)) == pytest.approx(0.0, abs=1e-12)
    assert A.alignment(x, -x) == pytest.approx(4.0)  # antipodal unit vectors: squared distance 4
    got = A.alignment(torch.tensor(x, dtype=torch.bfloat16), torch.tensor(-x, dtype=torch.bfloat16))
    assert got == pytest.approx(4.0, rel=1e-6)


@pytest.mark.parametrize("t", [2.0, 0.5])
@pytest.mark.parametrize("chunk_size", [1, 3, 2048])
def test_uniformity_matches_loop(t, chunk_size):
    rng = np.random.default_rng(3)
    x = rng.normal(size=(11, 4)) + 0.5
    assert A.uniformity(x, t=t, chunk_size=chunk_size) == pytest.approx(loop_uniformity(x, t), rel=1e-10)


def test_uniformity_extremes():
    x = np.tile([[1.0, 2.0, 3.0]], (6, 1))
    assert A.uniformity(x) == pytest.approx(0.0, abs=1e-12)  # all identical
    assert A.uniformity(np.array([[1.0, 0.0], [-3.0, 0.0]]), t=2) == pytest.approx(-8.0)  # -t * 4


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda: A.alignment(np.ones((3, 2)), np.ones((4, 2))), "same"),
        (lambda: A.alignment(np.ones(3), np.ones(3)), "2-D"),
        (lambda: A.alignment(np.array([[1.0, 0.0], [0.0, 0.0]]), np.ones((2, 2))), "row 1 is a zero vector"),
        (lambda: A.alignment(np.array([[np.nan, 1.0]]), np.ones((1, 2))), "NaN"),
        (lambda: A.alignment(np.ones((2, 2)), np.ones((2, 2)), alpha=0), "alpha"),
        (lambda: A.uniformity(np.ones((1, 3))), "at least 2"),
        (lambda: A.uniformity(np.ones((3, 3)), t=-1), "t must"),
        (lambda: A.uniformity(np.ones((3, 3)), chunk_size=0), "chunk_size"),
        (lambda: A.uniformity(np.zeros((3, 0))), "no columns"),
    ],
)
def test_metric_errors(call, match):
    with pytest.raises(ValueError, match=match):
        call()


# --------------------------------------------------------------------------------------- spectrum
def _loop_singular_values(x):
    n, d = len(x), len(x[0])
    gram = np.zeros((d, d))
    for i in range(d):
        for j in range(d):
            gram[i, j] = sum(x[r][i] * x[r][j] for r in range(n))
    eig = np.sort(np.clip(np.linalg.eigvalsh(gram), 0, None))[::-1]
    return np.sqrt(eig[: min(n, d)])


@pytest.mark.parametrize("shape", [(8, 4), (3, 5)])
def test_singular_spectrum_matches_loop(shape):
    rng = np.random.default_rng(4)
    x = rng.normal(size=shape) + 2.0
    ref = _loop_singular_values(x.tolist())
    np.testing.assert_allclose(A.singular_spectrum(x, normalize=None), ref, rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(A.singular_spectrum(x), ref / ref[0], rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(A.singular_spectrum(x, normalize="sum"), ref / ref.sum(), rtol=1e-9, atol=1e-9)
    means = [sum(col) / len(col) for col in zip(*x.tolist())]
    centred = [[v - m for v, m in zip(row, means)] for row in x.tolist()]
    ref_c = _loop_singular_values(centred)
    np.testing.assert_allclose(A.singular_spectrum(x, center=True), ref_c / ref_c[0], rtol=1e-8, atol=1e-8)
    units = [unit_vector(r) for r in x.tolist()]
    ref_u = _loop_singular_values(units)
    np.testing.assert_allclose(A.singular_spectrum(x, l2_normalize_rows=True), ref_u / ref_u[0], rtol=1e-9, atol=1e-9)


def test_singular_spectrum_errors():
    with pytest.raises(ValueError, match="normalize"):
        A.singular_spectrum(np.ones((3, 3)), normalize="min")
    with pytest.raises(ValueError, match="zero singular"):
        A.singular_spectrum(np.ones((3, 3)), center=True)


# ------------------------------------------------------------------------------------ cosine bins
def test_cosine_by_gold_bins_matches_loop():
    rng = np.random.default_rng(5)
    n = 40
    e1, e2 = rng.normal(size=(n, 6)), rng.normal(size=(n, 6))
    gold = rng.uniform(0, 5, size=n)
    gold[:5] = [0.0, 1.0, 4.0, 5.0, 3.999]  # edges: each goes to the bin it opens; 5 closes the last bin
    groups = A.cosine_by_gold_bins(e1, e2, gold)
    assert [(g.low, g.high) for g in groups] == [(0, 1), (1, 2), (2, 3), (3, 4), (4, 5)]
    expected = {k: [] for k in range(5)}
    for i in range(n):
        g = gold[i]
        k = 4 if g >= 4 else 3 if g >= 3 else 2 if g >= 2 else 1 if g >= 1 else 0
        expected[k].append(loop_cos(e1[i], e2[i]))
    for k, grp in enumerate(groups):
        np.testing.assert_allclose(grp.cosines, expected[k], rtol=1e-12)
    assert sum(g.cosines.size for g in groups) == n
    assert groups[4].label == "4-5"


def test_cosine_by_gold_bins_custom_edges_and_errors():
    e = np.eye(3)
    groups = A.cosine_by_gold_bins(e, e, [0.2, 0.5, 0.9], bins=[0, 0.5, 1])
    assert [g.cosines.size for g in groups] == [1, 2]
    with pytest.raises(ValueError, match="outside the bins"):
        A.cosine_by_gold_bins(e, e, [0.2, 5.5, 1.0])
    with pytest.raises(ValueError, match="strictly increasing"):
        A.cosine_by_gold_bins(e, e, [1, 2, 3], bins=[0, 3, 2])
    with pytest.raises(ValueError, match="length N=3"):
        A.cosine_by_gold_bins(e, e, [1, 2])


def test_stsb_alignment_uniformity_matches_loop(tmp_path):
    root = write_fake_stsb(tmp_path / "downstream")
    encode, table = _fake_encoder()
    got = A.stsb_alignment_uniformity(encode, root, split="dev")
    positives = [(s1, s2) for g, s1, s2 in STSB_ROWS if g > 4]
    assert got["n_pos"] == len(positives) == 3
    distinct = list(dict.fromkeys(s for _, s1, s2 in STSB_ROWS for s in (s1, s2)))
    assert got["n_sentences"] == len(distinct) == 2 * len(STSB_ROWS) - 2
    ref_align = loop_alignment([table[a] for a, _ in positives], [table[b] for _, b in positives], 2)
    ref_uniform = loop_uniformity([table[s] for s in distinct], 2)
    assert got["align"] == pytest.approx(ref_align, rel=1e-12)
    assert got["uniform"] == pytest.approx(ref_uniform, rel=1e-12)
    with pytest.raises(ValueError, match="no pair with gold score > 5"):
        A.stsb_alignment_uniformity(encode, root, threshold=5)
    with pytest.raises(ValueError, match="encode must return"):
        A.stsb_alignment_uniformity(lambda s: np.ones((len(s) - 1, 3)), root)
