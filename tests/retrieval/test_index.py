"""Vector indexes: numpy and faiss against a naive loop, IVF metric and streaming, save/load, bad input."""
import subprocess
import sys

import numpy as np
import pytest

from simcse.retrieval import index as idx_mod
from simcse.retrieval.index import FaissFlatIndex, FaissIVFIndex, NumpyIndex, faiss_available, load_index, make_index

needs_faiss = pytest.mark.skipif(not faiss_available(), reason="faiss not installed")
D = 16


def unit_vector(rng, n, d=D):
    x = rng.standard_normal((n, d)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def _clustered(rng, n_clusters=8, per=60, d=D, noise=0.15):
    centres = unit_vector(rng, n_clusters, d)
    x = np.repeat(centres, per, axis=0) + noise * rng.standard_normal((n_clusters * per, d)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def _naive_top_k(data, q, k):
    """Score every (query, vector) pair in a Python loop; sort by score desc then id asc."""
    out_s, out_i = [], []
    for qv in q:
        pairs = sorted(((-float(np.dot(qv, v)), i) for i, v in enumerate(data)))[:k]
        out_i.append([i for _, i in pairs])
        out_s.append([-s for s, _ in pairs])
    return np.array(out_s), np.array(out_i)


def test_numpy_index_matches_naive_loop():
    rng = np.random.default_rng(0)
    data, q = unit_vector(rng, 200), unit_vector(rng, 7)
    ix = NumpyIndex(D)
    ix.add(data[:50])
    ix.add(data[50:])  # two adds: ids continue
    s, i = ix.search(q, 5)
    ns, ni = _naive_top_k(data, q, 5)
    assert s.dtype == np.float32 and i.dtype == np.int64 and s.shape == i.shape == (7, 5)
    np.testing.assert_array_equal(i, ni)
    np.testing.assert_allclose(s, ns, atol=1e-5)


def test_numpy_ties_broken_by_id_and_k_capped():
    ix = NumpyIndex(2)
    ix.add(np.array([[1, 0], [0, 1], [1, 0], [1, 0]], np.float32))
    s, i = ix.search(np.array([1, 0], np.float32), 10)  # a 1-D query is one query
    assert i.tolist() == [[0, 2, 3, 1]] and s.shape == (1, 4)


@needs_faiss
def test_faiss_flat_equals_numpy():
    rng = np.random.default_rng(1)
    data, q = unit_vector(rng, 300), unit_vector(rng, 9)
    a, b = NumpyIndex(D), FaissFlatIndex(D)
    for ix in (a, b):
        ix.add(data)
    sa, ia = a.search(q, 6)
    sb, ib = b.search(q, 6)
    np.testing.assert_array_equal(ia, ib)
    np.testing.assert_allclose(sa, sb, atol=1e-5)


@needs_faiss
def test_ivf_scores_are_inner_products_and_full_probe_is_exact():
    rng = np.random.default_rng(2)
    data, q = _clustered(rng), unit_vector(rng, 10)
    ivf = FaissIVFIndex(D, nlist=8, nprobe=8)
    ivf.add(data)
    s, i = ivf.search(q, 5)
    assert ivf.index.metric_type == idx_mod._import_faiss().METRIC_INNER_PRODUCT
    # with L2 (faiss's default for IndexIVFFlat) these would be distances, not the dot products
    np.testing.assert_allclose(s, np.einsum("qd,qkd->qk", q, data[i]), atol=1e-5)
    ns, ni = _naive_top_k(data, q, 5)
    np.testing.assert_array_equal(i, ni)  # visiting all 8 lists = exact search


@needs_faiss
def test_ivf_default_finds_each_vector_itself():
    rng = np.random.default_rng(3)
    data = _clustered(rng, n_clusters=10, per=80)
    ivf = FaissIVFIndex(D)
    ivf.add(data)
    s, i = ivf.search(data, 1)
    assert (i[:, 0] == np.arange(len(data))).mean() > 0.99
    assert 1 <= ivf.nprobe <= ivf.nlist <= len(data) // 39


@needs_faiss
def test_ivf_streaming_trains_once_on_the_first_vectors():
    rng = np.random.default_rng(4)
    data = _clustered(rng, n_clusters=4, per=100)
    ivf = FaissIVFIndex(D, nlist=4, nprobe=4, train_size=150)
    ivf.add(data[:100])
    assert not ivf.is_trained and ivf.ntotal == 100  # buffered
    ivf.add(data[100:200])  # crosses train_size: trains on the 200 buffered, adds them
    assert ivf.is_trained and ivf.index.ntotal == 200
    trained = ivf.index
    ivf.add(data[200:])
    assert ivf.index is trained and ivf.ntotal == len(data)
    s, i = ivf.search(data[[5, 250, 399]], 1)
    assert i[:, 0].tolist() == [5, 250, 399]


@needs_faiss
def test_ivf_small_untrained_index_trains_on_search():
    rng = np.random.default_rng(5)
    data = unit_vector(rng, 12)
    ivf = FaissIVFIndex(D)
    ivf.add(data)
    s, i = ivf.search(data[3], 12)
    assert ivf.is_trained and i[0, 0] == 3 and s.shape == (1, 12)


def test_empty_and_bad_input():
    ix = NumpyIndex(D)
    with pytest.raises(RuntimeError, match="index is empty"):
        ix.search(np.ones(D), 3)
    ix.add(np.zeros((0, D)))  # adding nothing is fine
    assert ix.ntotal == 0
    with pytest.raises(ValueError, match=r"vectors must have shape \(n, 16\), got \(3, 15\)"):
        ix.add(np.ones((3, 15)))
    with pytest.raises(ValueError, match=r"vectors\[2\] has a NaN"):
        ix.add(np.vstack([np.ones((2, D)), np.full((1, D), np.nan)]))
    with pytest.raises(ValueError, match="numeric"):
        ix.add(np.array([["a"] * D]))
    ix.add(np.ones((2, D)))
    with pytest.raises(ValueError, match=r"queries must have shape"):
        ix.search(np.ones((1, 2, D)), 1)
    with pytest.raises(ValueError, match="k must be a positive int"):
        ix.search(np.ones(D), 0)
    with pytest.raises(ValueError, match="dim"):
        NumpyIndex(0)


@pytest.mark.parametrize("kind", ["numpy", pytest.param("faiss_flat", marks=needs_faiss),
                                  pytest.param("faiss_ivf", marks=needs_faiss)])
def test_save_load_round_trip(tmp_path, kind):
    rng = np.random.default_rng(6)
    data, q = _clustered(rng), unit_vector(rng, 4)
    ix = {"numpy": lambda: NumpyIndex(D), "faiss_flat": lambda: FaissFlatIndex(D),
          "faiss_ivf": lambda: FaissIVFIndex(D, nlist=4, nprobe=2)}[kind]()
    ix.add(data)
    before = ix.search(q, 5)
    ix.save(tmp_path / "ix")
    back = load_index(tmp_path / "ix")
    assert type(back) is type(ix) and back.ntotal == len(data) and back.dim == D
    after = back.search(q, 5)
    np.testing.assert_array_equal(before[1], after[1])
    np.testing.assert_allclose(before[0], after[0], atol=1e-6)
    if kind == "faiss_ivf":
        assert back.index.nprobe == 2


def test_load_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="index_config.json"):
        load_index(tmp_path)
    (tmp_path / "index_config.json").write_text('{"format_version": 1, "kind": "annoy", "dim": 4}')
    with pytest.raises(ValueError, match="unknown index kind 'annoy'"):
        load_index(tmp_path)


def test_make_index_choices(monkeypatch):
    assert isinstance(make_index(D, use_faiss=False), NumpyIndex)
    with pytest.warns(UserWarning, match="faiss_fast needs faiss"):
        assert isinstance(make_index(D, use_faiss=False, fast=True), NumpyIndex)
    if faiss_available():
        assert isinstance(make_index(D), FaissFlatIndex)
        assert isinstance(make_index(D, fast=True), FaissIVFIndex)
    # without faiss: None falls back to numpy, True explains how to install it
    monkeypatch.setattr(idx_mod, "faiss_available", lambda: False)
    monkeypatch.setitem(sys.modules, "faiss", None)  # makes "import faiss" raise ImportError
    assert isinstance(make_index(D), NumpyIndex)
    with pytest.raises(ImportError, match=r"pip install 'simcse\[faiss\]'"):
        make_index(D, use_faiss=True)


def test_importing_simcse_does_not_import_faiss():
    code = ("import sys, simcse, simcse.retrieval.tool, simcse.retrieval.index, simcse.interop.export, simcse.cli; "
            "assert 'faiss' not in sys.modules, 'faiss imported'; "
            "assert 'sentence_transformers' not in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)
