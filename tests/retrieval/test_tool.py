"""SimCSE tool: shapes, order, checks of bad input, similarity, search, save/load of the index."""
import warnings

import numpy as np
import pytest
import torch
from hypothesis import strategies as st
from hypothesis import HealthCheck, given, settings
from hypothesis.extra.numpy import arrays

from conftest import (ANY_TEXT, FAST, LONG, ONE, SENTENCES, WORDS, WORDY, logs_warning, make_tiny_model, usable,
                      with_duplicates)
from simcse.retrieval.index import faiss_available
from simcse.models.modeling import SimCSEModel
from simcse.retrieval.tool import SimCSE

H = 32


@pytest.fixture(scope="module")
def tool(tiny_bert_dir):
    return SimCSE(str(tiny_bert_dir), pooler="avg", device="cpu")


@pytest.fixture(scope="module")
def indexed(tiny_bert_dir):
    t = SimCSE(str(tiny_bert_dir), pooler="avg", device="cpu")
    t.build_index(SENTENCES, use_faiss=False)
    return t


def _manual_avg(tool, sentences):
    """Masked mean of the last layer computed here, one sentence at a time, with HF's AutoModel."""
    from transformers import AutoModel

    enc = AutoModel.from_pretrained(tool.model_name_or_path).eval()
    out = []
    with torch.no_grad():
        for s in sentences:
            b = tool.model.tokenizer([s], return_tensors="pt")
            h = enc(**b).last_hidden_state[0]  # (L, H), no padding in a batch of one
            out.append(h.mean(0).numpy())
    return np.stack(out)


# ------------------------------------------------------------------------------------------------ encode
def test_encode_shapes_types_and_norm(tool):
    one = tool.encode(SENTENCES[0])
    assert isinstance(one, torch.Tensor) and one.shape == (H,) and one.dtype == torch.float32
    assert tool.encode(SENTENCES[0], keepdim=True).shape == (1, H)
    many = tool.encode(SENTENCES, return_numpy=True)
    assert isinstance(many, np.ndarray) and many.shape == (len(SENTENCES), H) and many.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(many, axis=1), 1.0, rtol=1e-5)
    raw = tool.encode(SENTENCES, return_numpy=True, normalize_to_unit=False)
    assert not np.allclose(np.linalg.norm(raw, axis=1), 1.0, atol=1e-3)
    np.testing.assert_allclose(raw / np.linalg.norm(raw, axis=1, keepdims=True), many, rtol=1e-5, atol=1e-6)
    assert tool.encode([]).shape == (0, H)
    assert tool.encode([], return_numpy=True).shape == (0, H)


def test_encode_matches_manual_pooling_in_input_order(tool):
    # lengths deliberately unsorted, batch size that splits them, so sorting and restoring order is exercised
    sents = [SENTENCES[6], SENTENCES[0] + " " + SENTENCES[1], "a dog .", SENTENCES[3]]
    got = tool.encode(sents, batch_size=3, return_numpy=True, normalize_to_unit=False)
    np.testing.assert_allclose(got, _manual_avg(tool, sents), rtol=1e-4, atol=1e-5)


def test_plain_hf_cls_uses_encoder_pooler(tiny_bert_dir):
    from transformers import AutoModel

    t = SimCSE(str(tiny_bert_dir), device="cpu")  # no pooler, no simcse_config.json: cls
    assert t.pooler == "cls"
    hf = AutoModel.from_pretrained(str(tiny_bert_dir)).eval()
    b = t.model.tokenizer(SENTENCES[:3], return_tensors="pt", padding=True)
    with torch.no_grad():
        expected = hf(**b).pooler_output.numpy()
    got = t.encode(SENTENCES[:3], return_numpy=True, normalize_to_unit=False)
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5)


def test_saved_format_pooler_and_mlp_are_read(tmp_path, tiny_bert_dir):
    model = SimCSEModel.from_pretrained(str(tiny_bert_dir), pooler_type="cls", new_mlp_init="random")
    model.save_pretrained(tmp_path / "saved")
    t = SimCSE(str(tmp_path / "saved"), device="cpu")
    assert t.pooler == "cls"
    np.testing.assert_allclose(t.encode(SENTENCES, return_numpy=True, normalize_to_unit=False),
                               model.encode(SENTENCES), rtol=1e-5, atol=1e-6)
    wrapped = SimCSE(model, device="cpu")  # an in-memory model works too
    assert wrapped.encode(SENTENCES[0]).shape == (H,)


def test_bf16_close_to_fp32(tool):
    a = tool.encode(SENTENCES, return_numpy=True)
    b = tool.encode(SENTENCES, return_numpy=True, dtype=torch.bfloat16)
    assert b.dtype == np.float32
    assert (a * b).sum(1).min() > 0.99


def test_default_and_explicit_device(tiny_bert_dir):
    t = SimCSE(str(tiny_bert_dir), pooler="avg")
    assert t.device.type == ("cuda" if torch.cuda.is_available() else "cpu")
    assert SimCSE(str(tiny_bert_dir), pooler="avg", device="cpu").model.device.type == "cpu"


@pytest.mark.parametrize(
    "bad, exc, where",
    [
        ("", ValueError, r"^sentences is empty"),
        ("   \n\t", ValueError, r"^sentences is empty"),
        (None, TypeError, r"^sentences must be a str or a list"),
        (42, TypeError, r"^sentences must be a str or a list"),
        ((s for s in SENTENCES), TypeError, r"^sentences must be a str or a list"),
        (["ok", None], TypeError, r"^sentences\[1\] must be a str, got NoneType"),
        (["ok", "fine", ["nested"]], TypeError, r"^sentences\[2\] must be a str, got list"),
        (["ok", 3.5], TypeError, r"^sentences\[1\] must be a str, got float"),
        (["ok", ""], ValueError, r"^sentences\[1\] is empty"),
        (["ok", "fine", " \u3000 "], ValueError, r"^sentences\[2\] is empty"),
    ],
)
def test_bad_sentences_name_the_position(tool, bad, exc, where):
    with pytest.raises(exc, match=where):
        tool.encode(bad)


def test_bad_sizes(tool):
    for kw in ({"batch_size": 0}, {"batch_size": 2.0}, {"max_length": -1}):
        with pytest.raises(ValueError, match=next(iter(kw))):
            tool.encode(SENTENCES, **kw)


def test_long_inputs_truncated_with_one_warning(tool):
    words = " ".join(WORDS)  # every word is one token of the tiny vocabulary
    long1, long2 = words, " ".join(reversed(WORDS))
    with logs_warning("truncated") as rec:
        got = tool.encode([long1, "a dog .", long2], max_length=10, return_numpy=True)
    msgs = [r.getMessage() for r in rec if "truncated" in r.getMessage()]
    assert len(msgs) == 1 and msgs[0].startswith("2 of 3 sentences")
    # truncation keeps [CLS] + the first 8 words + [SEP]
    np.testing.assert_allclose(got[0], tool.encode(" ".join(WORDS[:8]), return_numpy=True), rtol=1e-5, atol=1e-6)
    with pytest.raises(AssertionError, match="no warning"), logs_warning("truncated"):
        tool.encode(["a dog ."] * 3, max_length=5)  # exactly max_length tokens: no warning


def test_max_length_capped_at_model_positions(tool):
    # the tiny BERT has 64 positions; the default max_length (128) must not index past them
    very_long = " ".join(WORDS * 3)  # ~180 tokens
    with logs_warning("truncated"):
        e = tool.encode(very_long, return_numpy=True)
    assert np.isfinite(e).all()


def test_load_errors(tmp_path, tiny_bert_dir):
    with pytest.raises(FileNotFoundError, match="no weights"):
        SimCSE(str(tmp_path))
    with pytest.raises(FileNotFoundError):
        SimCSE(str(tmp_path / "missing"))
    with pytest.raises(ValueError, match="unknown pooler_type 'mean'"):
        SimCSE(str(tiny_bert_dir), pooler="mean")


# -------------------------------------------------------------------------------------------- similarity
def test_similarity_shapes_and_values(tool):
    e = tool.encode(SENTENCES, return_numpy=True)
    full = e[:3] @ e.T
    s = tool.similarity(SENTENCES[0], SENTENCES[1])
    assert isinstance(s, float) and s == pytest.approx(float(full[0, 1]), abs=1e-5)
    np.testing.assert_allclose(tool.similarity(SENTENCES[0], SENTENCES), full[0], atol=1e-5)
    # N queries x one key: (N, 1), as the reference tool (sklearn's cosine_similarity, only the query axis squeezed)
    np.testing.assert_allclose(tool.similarity(SENTENCES[:3], SENTENCES[5]), full[:, 5:6], atol=1e-5)
    got = tool.similarity(SENTENCES[:3], SENTENCES)
    assert got.shape == (3, len(SENTENCES))
    np.testing.assert_allclose(got, full, atol=1e-5)


def test_similarity_accepts_arrays_unnormalised(tool):
    raw = tool.encode(SENTENCES, return_numpy=True, normalize_to_unit=False)
    ref = tool.similarity(SENTENCES[:2], SENTENCES)
    np.testing.assert_allclose(tool.similarity(raw[:2] * 3.0, torch.from_numpy(raw)), ref, atol=1e-5)
    np.testing.assert_allclose(tool.similarity(raw[0], SENTENCES), ref[0], atol=1e-5)
    assert tool.similarity(np.zeros(H), raw[0]) == 0.0  # zero vector: 0, not NaN
    with pytest.raises(ValueError, match=r"keys must have shape \(32,\) or \(n, 32\)"):
        tool.similarity(SENTENCES[0], np.ones((2, 5)))
    with pytest.raises(ValueError, match=r"queries\[1\] has a NaN"):
        tool.similarity(np.array([raw[0], raw[1] * np.nan]), raw)
    with pytest.raises(TypeError, match=r"keys\[1\] must be a str"):
        tool.similarity("a dog .", ["a cat .", None])


# ---------------------------------------------------------------------------------------------- search
def test_search_finds_each_sentence_first(indexed):
    res = indexed.search(SENTENCES, threshold=-1.0, top_k=3)
    assert len(res) == len(SENTENCES)
    for s, hits in zip(SENTENCES, res):
        assert len(hits) == 3 and hits[0][0] == s and hits[0][1] == pytest.approx(1.0, abs=1e-5)
        scores = [x[1] for x in hits]
        assert scores == sorted(scores, reverse=True)
        # scores are the cosine similarities
        for sent, score in hits:
            assert score == pytest.approx(indexed.similarity(s, sent), abs=1e-5)


def test_search_threshold_and_top_k(indexed):
    sims = indexed.similarity(SENTENCES[2], SENTENCES)
    thr = float(np.sort(sims)[-4])  # exactly 4 sentences at or above
    hits = indexed.search(SENTENCES[2], threshold=thr - 1e-6, top_k=10)
    assert isinstance(hits, list) and isinstance(hits[0], tuple) and len(hits) == 4
    assert len(indexed.search(SENTENCES[2], threshold=-1, top_k=100)) == len(SENTENCES)
    assert indexed.search(SENTENCES[2], threshold=1.01) == []
    assert indexed.search([], top_k=2) == []
    with pytest.raises(ValueError, match="top_k"):
        indexed.search("a dog .", top_k=0)
    with pytest.raises(ValueError, match="threshold"):
        indexed.search("a dog .", threshold=float("nan"))
    with pytest.raises(ValueError, match=r"queries\[1\] is empty"):
        indexed.search(["a dog .", " "])


def test_search_without_or_with_empty_index(tool, tmp_path):
    fresh = SimCSE(tool.model, device="cpu")
    with pytest.raises(RuntimeError, match="index is empty"):
        fresh.search("a dog .")
    empty = tmp_path / "blank.txt"
    empty.write_text("\n  \n\n")
    fresh.build_index(str(empty), use_faiss=False)
    with pytest.raises(RuntimeError, match="index is empty"):
        fresh.search("a dog .")


def test_build_index_from_file_streams_in_chunks(tool, indexed, tmp_path):
    f = tmp_path / "corpus.txt"
    f.write_text("\n".join(SENTENCES[:5]) + "\n\n   \n" + "\n".join(SENTENCES[5:]) + "\n")
    t = SimCSE(tool.model, device="cpu")
    t.build_index(f, use_faiss=False, chunk_size=5)  # 3 chunks, blank lines skipped
    assert t.sentences == SENTENCES and t.index.ntotal == len(SENTENCES)
    a = t.search(SENTENCES[:4], threshold=-1, top_k=4)
    b = indexed.search(SENTENCES[:4], threshold=-1, top_k=4)
    assert [[s for s, _ in r] for r in a] == [[s for s, _ in r] for r in b]
    with pytest.raises(FileNotFoundError, match="not a file"):
        t.build_index(str(tmp_path / "nope.txt"))
    assert t.index.ntotal == len(SENTENCES)  # a failed build keeps the old index


def test_add_to_index_and_bad_item_leaves_index_unchanged(tool):
    t = SimCSE(tool.model, device="cpu")
    t.build_index(SENTENCES[:6], use_faiss=False)
    assert t.add_to_index(SENTENCES[6:]) == 6
    assert t.search(SENTENCES[9], top_k=1)[0][0] == SENTENCES[9]
    with pytest.raises(TypeError, match=r"sentences\[1\]"):
        t.add_to_index(["a dog .", None])
    assert t.index.ntotal == len(SENTENCES) == len(t.sentences)


@pytest.mark.skipif(not faiss_available(), reason="faiss not installed")
@pytest.mark.parametrize("fast", [False, True])
def test_faiss_matches_numpy(indexed, fast):
    t = SimCSE(indexed.model, device="cpu")
    t.build_index(SENTENCES, use_faiss=True, faiss_fast=fast)
    assert t.index.kind == ("faiss_ivf" if fast else "faiss_flat")
    a = t.search(SENTENCES, threshold=-1, top_k=4)
    b = indexed.search(SENTENCES, threshold=-1, top_k=4)
    for ra, rb in zip(a, b):
        assert [s for s, _ in ra] == [s for s, _ in rb]
        np.testing.assert_allclose([x for _, x in ra], [x for _, x in rb], atol=1e-5)


@pytest.mark.parametrize("use_faiss", [False, pytest.param(True, marks=pytest.mark.skipif(
    not faiss_available(), reason="faiss not installed"))])
def test_save_and_load_index(indexed, tmp_path, use_faiss):
    t = SimCSE(indexed.model, device="cpu")
    t.build_index(SENTENCES + ["line one\nline two"], use_faiss=use_faiss)
    t.save_index(tmp_path / "idx")
    u = SimCSE(indexed.model, device="cpu")
    u.load_index(tmp_path / "idx")
    assert u.sentences == t.sentences
    assert u.search(SENTENCES[:3], threshold=-1, top_k=3) == t.search(SENTENCES[:3], threshold=-1, top_k=3)
    with pytest.raises(FileNotFoundError):
        u.load_index(tmp_path / "nothing")
    with pytest.raises(RuntimeError, match="no index"):
        SimCSE(indexed.model, device="cpu").save_index(tmp_path / "x")
    # an index of vectors of another size is refused
    from simcse.retrieval.index import NumpyIndex

    small = NumpyIndex(16)
    small.add(np.eye(16, dtype=np.float32)[:2])
    small.save(tmp_path / "small")
    (tmp_path / "small" / "sentences.jsonl").write_text('"a"\n"b"\n')
    with pytest.raises(ValueError, match="16-d vectors; this model makes 32-d"):
        u.load_index(tmp_path / "small")


# ------------------------------------------------------------------------------------ property-based
_pieces = st.one_of(
    st.text(max_size=30),  # any unicode (no surrogates), incl. control and combining characters
    st.sampled_from(["", " ", "\t\n", "\u00a0", "\u200b", "\u3000", "\r\n "]),
    st.lists(st.sampled_from(WORDS), min_size=1, max_size=90).map(" ".join),  # up to past 64 positions
)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(batch=st.lists(_pieces, min_size=0, max_size=6), top_k=st.integers(1, 15),
       threshold=st.floats(-1.0, 1.0))
@pytest.mark.slow
def test_property_random_text_never_crashes(indexed, batch, top_k, threshold):
    blank = [i for i, s in enumerate(batch) if not s.strip()]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # truncation warnings for the long mixes
        if blank:
            with pytest.raises(ValueError, match=rf"sentences\[{blank[0]}\] is empty"):
                indexed.encode(batch)
            with pytest.raises(ValueError, match=rf"queries\[{blank[0]}\] is empty"):
                indexed.search(batch)
            return
        e = indexed.encode(batch, return_numpy=True, batch_size=4)
        assert e.shape == (len(batch), H) and np.isfinite(e).all()
        if batch:
            np.testing.assert_allclose(np.linalg.norm(e, axis=1), 1.0, rtol=1e-4)
            sims = indexed.similarity(batch, SENTENCES)
            assert sims.shape == (len(batch), len(SENTENCES))
            assert np.all(np.abs(sims) <= 1.0 + 1e-5)
        res = indexed.search(batch, threshold=threshold, top_k=top_k)
        assert len(res) == len(batch)
        for hits in res:
            assert len(hits) <= min(top_k, len(SENTENCES))
            scores = [s for _, s in hits]
            assert scores == sorted(scores, reverse=True) and all(s >= threshold for s in scores)


@pytest.fixture(scope="module")
def tool_with_duplicate(tmp_path_factory):
    from simcse.retrieval.tool import SimCSE

    torch.set_num_threads(1)
    t = SimCSE(str(make_tiny_model(tmp_path_factory.mktemp("fuzz_model"), "bert")), pooler="avg", device="cpu")
    t.build_index(SENTENCES + ["a man is playing the guitar ."], use_faiss=False)  # one duplicate sentence
    return t


# ------------------------------------------------------------------------------------ encode / search
@FAST
@given(sentences=with_duplicates(ONE, 12), batch_size=st.integers(1, 8))
def test_encode_one_row_per_sentence_in_input_order(tool_with_duplicate, sentences, batch_size):
    blank = [i for i, s in enumerate(sentences) if not usable(s)]
    if blank:
        with pytest.raises(ValueError, match=rf"sentences\[{blank[0]}\] is empty"):
            tool_with_duplicate.encode(sentences)
        return
    emb = tool_with_duplicate.encode(sentences, batch_size=batch_size, return_numpy=True)
    assert emb.shape == (len(sentences), 32) and emb.dtype == np.float32 and np.isfinite(emb).all()
    np.testing.assert_allclose(np.linalg.norm(emb, axis=1), 1.0, atol=1e-5)
    backwards = tool_with_duplicate.encode(sentences[::-1], batch_size=batch_size, return_numpy=True)[::-1]
    np.testing.assert_allclose(backwards, emb, atol=1e-5)
    for s in set(sentences):  # duplicates get the same row
        rows = emb[[i for i, x in enumerate(sentences) if x == s]]
        np.testing.assert_allclose(rows, np.broadcast_to(rows[0], rows.shape), atol=1e-5)


FLOATS = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True, width=32),
    st.sampled_from([0.0, 1e-30, 3e38, -3e38, 1.0]),
)


@FAST
@given(q=arrays(np.float32, st.tuples(st.integers(1, 5), st.just(32)), elements=FLOATS),
       k=arrays(np.float64, st.tuples(st.integers(1, 5), st.just(32)), elements=FLOATS))
def test_similarity_of_arrays(tool_with_duplicate, q, k):
    bad_q = np.flatnonzero(~np.isfinite(q).all(axis=1))
    bad_k = np.flatnonzero(~np.isfinite(k).all(axis=1))
    if len(bad_q) or len(bad_k):
        where = f"queries\\[{bad_q[0]}\\]" if len(bad_q) else f"keys\\[{bad_k[0]}\\]"
        with pytest.raises(ValueError, match=f"{where} has a NaN or inf"):
            tool_with_duplicate.similarity(q, k)
        return
    with np.errstate(over="raise", invalid="raise", divide="raise"):  # no overflow / invalid value on the way
        sims = tool_with_duplicate.similarity(q, k)
    assert sims.shape == (len(q), len(k)) and np.isfinite(sims).all()
    assert (np.abs(sims) <= 1 + 1e-5).all()
    np.testing.assert_allclose(sims, tool_with_duplicate.similarity(k, q).T, atol=1e-6)
    zero_q = ~q.any(axis=1)
    assert (sims[zero_q] == 0).all()  # a zero vector has similarity 0 to anything


def assert_same_results(a, b, tol=1e-5):
    """Equal result lists, up to float rounding of the scores (and the order of near-equal scores)."""
    assert len(a) == len(b) or any(abs(s - t) < tol for s, t in zip(
        [x[1] for x in a + b], [x[1] for x in b + a])), (a, b)
    for (sa, xa), (sb, xb) in zip(a, b):
        assert xa == pytest.approx(xb, abs=tol)
        assert sa == sb or any(abs(x - xa) < tol for s, x in b if s == sa), (a, b)


@FAST
@given(queries=with_duplicates(st.one_of(WORDY, ANY_TEXT.filter(usable), LONG), 6), top_k=st.integers(1, 20),
       threshold=st.sampled_from([-1.0, 0.0, 0.5, 0.99]))
def test_search_keeps_query_order(tool_with_duplicate, queries, top_k, threshold):
    results = tool_with_duplicate.search(queries, top_k=top_k, threshold=threshold)
    assert len(results) == len(queries)
    for q, res in zip(queries, results):
        assert_same_results(res, tool_with_duplicate.search(q, top_k=top_k, threshold=threshold))  # the same as asked alone
        assert len(res) <= min(top_k, len(tool_with_duplicate.sentences))
        scores = [s for _, s in res]
        assert scores == sorted(scores, reverse=True) and all(threshold <= s <= 1 + 1e-5 for s in scores)
        assert all(sent in tool_with_duplicate.sentences for sent, _ in res)


@pytest.mark.slow
def test_one_liner_prints_only_what_concerns_the_user(tmp_path, tiny_bert_dir):
    """A fresh interpreter that loads a saved folder with SimCSE, reloads its weights and encodes a sentence
    over max_length prints one stderr line, the truncation: no weight-loading progress bar, no deprecation
    warning from this package's own calls, no source line."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    saved = tmp_path / "m"
    SimCSEModel.from_pretrained(str(tiny_bert_dir), pooler_type="avg").save_pretrained(saved)
    code = (f"from simcse import SimCSE; m = SimCSE({str(saved)!r}, device='cpu'); m.model.load_weights({str(saved)!r}); "
            "print(tuple(m.encode(' '.join(['a dog'] * 40), max_length=16).shape))")
    repo = str(Path(__file__).resolve().parents[2])
    env = dict(os.environ, PYTHONPATH=repo, OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1")
    r = subprocess.run([sys.executable, "-W", "default", "-c", code], capture_output=True, text=True, env=env,
                       timeout=600)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == f"({H},)"
    lines = [line for line in r.stderr.splitlines() if line.strip()]
    assert lines == ["1 of 1 sentences are longer than max_length=16 tokens and were truncated"], r.stderr
