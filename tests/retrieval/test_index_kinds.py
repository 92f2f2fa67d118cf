"""IVF-PQ (re-ranked from vectors on disk) and HNSW indexes; kinds and parameters; save/load; shards -> index."""
from __future__ import annotations

import numpy as np
import pytest

from simcse.retrieval.index import (FaissFlatIndex, FaissHNSWIndex, FaissIVFIndex, FaissIVFPQIndex, NumpyIndex, faiss_available,
                          load_index, make_index)

pytestmark = pytest.mark.skipif(not faiss_available(), reason="faiss not installed")
D = 32


def _clustered(rng, n, n_clusters=40, noise=0.35, d=D):
    centres = rng.standard_normal((n_clusters, d)).astype(np.float32)
    x = centres[rng.integers(0, n_clusters, n)] + noise * rng.standard_normal((n, d)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def _recall(ids, true_ids):
    return np.mean([len(set(a) & set(b)) / len(b) for a, b in zip(ids, true_ids)])


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(0)
    x = _clustered(rng, 6000)
    q = _clustered(rng, 200)
    exact = NumpyIndex(D)
    exact.add(x)
    return x, q, exact.search(q, 10)


def test_ivfpq_reranking_from_disk_restores_recall(data):
    x, q, (true_s, true_i) = data
    plain = FaissIVFPQIndex(D, nlist=16, nprobe=16, m=8, refine_factor=1)  # 8 bytes a vector (1/16 of float32)
    refined = FaissIVFPQIndex(D, nlist=16, nprobe=16, m=8, refine_factor=10)
    for ix in (plain, refined):
        ix.train(x[:3000])
        for s in range(0, len(x), 1000):  # streamed adds
            ix.add(x[s : s + 1000])
    _, i_plain = plain.search(q, 10)
    s_ref, i_ref = refined.search(q, 10)
    r_plain, r_ref = _recall(i_plain, true_i), _recall(i_ref, true_i)
    assert r_ref >= 0.9 and r_ref > r_plain + 0.1, (r_plain, r_ref)
    # re-ranked scores are the inner products (from float16 copies), sorted
    np.testing.assert_allclose(s_ref, np.einsum("qd,qkd->qk", q, x[i_ref]), atol=2e-3)
    assert (np.diff(s_ref, axis=1) <= 0).all()
    assert refined.index.code_size == 8 and refined._refine.path.stat().st_size == len(x) * D * 2


def test_ivfpq_save_load_roundtrip(data, tmp_path):
    x, q, _ = data
    ix = FaissIVFPQIndex(D, nlist=16, nprobe=8, m=8)
    ix.add(x)  # buffered, trained on the first train_size (default) vectors at finalize
    s, i = ix.search(q, 5)
    ix.save(tmp_path / "pq")
    back = load_index(tmp_path / "pq")
    assert isinstance(back, FaissIVFPQIndex) and (back.m, back.nprobe, back.refine_factor) == (8, 8, 50)
    s2, i2 = back.search(q, 5)
    np.testing.assert_array_equal(i, i2)
    np.testing.assert_allclose(s, s2)
    back.add(x[:10])  # appends to a temporary copy of the saved vectors, not to the saved file
    assert (tmp_path / "pq" / "refine.f16").stat().st_size == len(x) * D * 2 and back.ntotal == len(x) + 10


def test_hnsw_matches_exact_closely(data, tmp_path):
    x, q, (_, true_i) = data
    h = FaissHNSWIndex(D, m=16, ef_search=16)
    h.add(x)
    r_small = _recall(h.search(q, 10)[1], true_i)
    h.ef_search = 256  # a longer search list: closer to exact
    s, i = h.search(q, 10)
    assert _recall(i, true_i) >= 0.95 and _recall(i, true_i) > r_small, (r_small, _recall(i, true_i))
    np.testing.assert_allclose(s, np.einsum("qd,qkd->qk", q, x[i]), atol=1e-5)
    h.save(tmp_path / "h")
    back = load_index(tmp_path / "h")
    assert isinstance(back, FaissHNSWIndex) and back.ef_search == 256
    np.testing.assert_array_equal(back.search(q, 10)[1], i)


def test_ivf_defaults_follow_expected_size():
    ivf = FaissIVFIndex(D, expected_size=1_000_000)
    assert ivf.train_size == 39 * 4000  # 39 points per cluster of 4 * sqrt(N) clusters
    rng = np.random.default_rng(1)
    small = FaissIVFIndex(D, expected_size=10_000)
    small.train(_clustered(rng, small.train_size))
    assert small.nlist == 400 and small.nprobe == 50


def test_make_index_kinds_and_bad_parameters():
    assert isinstance(make_index(D, kind="exact"), FaissFlatIndex)
    assert isinstance(make_index(D, kind="exact", use_faiss=False), NumpyIndex)
    assert isinstance(make_index(D, kind="ivf", nlist=4), FaissIVFIndex)
    assert isinstance(make_index(D, kind="ivfpq", m=8), FaissIVFPQIndex)
    assert isinstance(make_index(D, kind="hnsw", ef_search=10), FaissHNSWIndex)
    with pytest.raises(ValueError, match="unknown index kind 'annoy'"):
        make_index(D, kind="annoy")
    with pytest.raises(ValueError, match="needs faiss"):
        make_index(D, kind="hnsw", use_faiss=False)
    with pytest.raises(ValueError, match="m=5 must divide dim=32"):
        make_index(D, kind="ivfpq", m=5)
    with pytest.raises(TypeError):
        make_index(D, kind="hnsw", nlist=3)
    with pytest.raises(ValueError, match="at least 256 training vectors"):
        FaissIVFPQIndex(D, m=8).train(np.eye(D, dtype=np.float32))
