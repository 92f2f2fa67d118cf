"""Property-based tests (hypothesis): random unicode, control characters, mixed lengths and duplicates.

Properties: the data readers return exactly the usable lines/rows, in file order, or raise their documented
``ValueError``; ``encode`` / ``similarity`` / ``search`` never crash on valid input, return one result per
input in input order, and reject invalid input (blank sentence, NaN/inf vector) with the documented error
naming the position. Example counts are small so the file runs in well under a minute.
"""
from __future__ import annotations

import csv
import tempfile
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from conftest import SENTENCES, WORDS, make_tiny_model

pytestmark = pytest.mark.filterwarnings("ignore:.*longer than max_length.*:UserWarning")

FAST = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True)

# any character but surrogates and the two line breaks of text files ("\n", "\r")
ANY_TEXT = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\r\n"), max_size=40)
CONTROL = st.text(st.sampled_from("\x00\x01\x07\t\x0b\x0c\x1b\x1c\x1f\x7f\x85\xa0\u200b\u2028\u202e\ufeff "), max_size=6)
WORDY = st.lists(st.sampled_from(WORDS), min_size=1, max_size=12).map(" ".join)
LONG = st.integers(100, 2000).map(lambda n: "word " * n)
ONE = st.one_of(ANY_TEXT, CONTROL, WORDY, LONG, st.tuples(WORDY, CONTROL).map("".join))


def with_duplicates(item, max_size: int = 16):
    """Lists drawn with replacement from a small pool, so duplicates are common."""
    return st.lists(item, min_size=1, max_size=6).flatmap(
        lambda pool: st.lists(st.sampled_from(pool), min_size=1, max_size=max_size))


def usable(s: str) -> bool:
    return bool(s.strip())


@pytest.fixture(scope="module")
def tool(tmp_path_factory):
    from simcse.tool import SimCSE

    torch.set_num_threads(1)
    t = SimCSE(str(make_tiny_model(tmp_path_factory.mktemp("fuzz_model"), "bert")), pooler="avg", device="cpu")
    t.build_index(SENTENCES + ["a man is playing the guitar ."], use_faiss=False)  # one duplicate sentence
    return t


# ------------------------------------------------------------------------------------------- readers
@FAST
@given(lines=with_duplicates(ONE, 24))
def test_text_reader_keeps_every_usable_line_in_order(lines):
    from simcse.data import load_sentence_dataset

    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "train.txt"
        p.write_text("\n".join(lines) + "\n", encoding="utf-8")
        expected = [s for s in lines if usable(s)]
        if not expected:
            with pytest.raises(ValueError, match="no usable sentence"):
                load_sentence_dataset(p)
            return
        ds, cols = load_sentence_dataset(p)
        assert cols == ["sent0"] and ds["sent0"][:] == expected


CELL = st.one_of(ANY_TEXT, CONTROL.filter(lambda s: "\x00" not in s), WORDY, st.sampled_from(["1", "2.5", "True", "NA", "nan", "", " "]),
                 st.text(st.sampled_from('ab ,";\n'), max_size=8))


@FAST
@given(rows=with_duplicates(st.tuples(CELL, CELL, CELL), 12), triplets=st.booleans(),
       quoting=st.sampled_from([csv.QUOTE_MINIMAL, csv.QUOTE_NONNUMERIC]))
def test_csv_reader_keeps_every_complete_row_in_order(rows, triplets, quoting):
    from simcse.data import load_sentence_dataset

    cols = ["sent0", "sent1", "hard_neg"] if triplets else ["sent0", "sent1"]
    rows = [r[: len(cols)] for r in rows]
    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "train.csv"
        with open(p, "w", encoding="utf-8", newline="") as f:
            w = csv.writer(f, quoting=quoting)
            w.writerow(cols)
            w.writerows(rows)
        expected = [r for r in rows if all(usable(c) for c in r)]
        if not expected:
            with pytest.raises(ValueError, match="no usable sentence|header but no data rows"):
                load_sentence_dataset(p)
            return
        ds, got_cols = load_sentence_dataset(p)
        assert got_cols == cols
        assert list(zip(*(ds[c][:] for c in cols))) == expected


@FAST
@given(lines=st.lists(st.lists(st.one_of(ANY_TEXT, st.sampled_from(["2.5", "x", ""])), min_size=0, max_size=8)
                      .map("\t".join), min_size=1, max_size=8))
def test_stsb_reader_parses_or_names_the_line(lines):
    from simcse.evaluation.data import read_stsb

    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "sts-dev.csv"
        p.write_text("\n".join(lines) + "\n", encoding="utf-8")
        try:
            pairs = read_stsb(p)
        except ValueError as e:
            assert str(e).startswith(f"{p}:"), e  # file:line: what was expected
            return
        assert len(pairs) == len(p.read_text(encoding="utf-8").splitlines())


# ------------------------------------------------------------------------------------ encode / search
@FAST
@given(sentences=with_duplicates(ONE, 12), batch_size=st.integers(1, 8))
def test_encode_one_row_per_sentence_in_input_order(tool, sentences, batch_size):
    blank = [i for i, s in enumerate(sentences) if not usable(s)]
    if blank:
        with pytest.raises(ValueError, match=rf"sentences\[{blank[0]}\] is empty"):
            tool.encode(sentences)
        return
    emb = tool.encode(sentences, batch_size=batch_size, return_numpy=True)
    assert emb.shape == (len(sentences), 32) and emb.dtype == np.float32 and np.isfinite(emb).all()
    np.testing.assert_allclose(np.linalg.norm(emb, axis=1), 1.0, atol=1e-5)
    backwards = tool.encode(sentences[::-1], batch_size=batch_size, return_numpy=True)[::-1]
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
def test_similarity_of_arrays(tool, q, k):
    bad_q = np.flatnonzero(~np.isfinite(q).all(axis=1))
    bad_k = np.flatnonzero(~np.isfinite(k).all(axis=1))
    if len(bad_q) or len(bad_k):
        where = f"queries\\[{bad_q[0]}\\]" if len(bad_q) else f"keys\\[{bad_k[0]}\\]"
        with pytest.raises(ValueError, match=f"{where} has a NaN or inf"):
            tool.similarity(q, k)
        return
    with np.errstate(over="raise", invalid="raise", divide="raise"):  # no overflow / invalid value on the way
        sims = tool.similarity(q, k)
    assert sims.shape == (len(q), len(k)) and np.isfinite(sims).all()
    assert (np.abs(sims) <= 1 + 1e-5).all()
    np.testing.assert_allclose(sims, tool.similarity(k, q).T, atol=1e-6)
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
def test_search_keeps_query_order(tool, queries, top_k, threshold):
    results = tool.search(queries, top_k=top_k, threshold=threshold)
    assert len(results) == len(queries)
    for q, res in zip(queries, results):
        assert_same_results(res, tool.search(q, top_k=top_k, threshold=threshold))  # the same as asked alone
        assert len(res) <= min(top_k, len(tool.sentences))
        scores = [s for _, s in res]
        assert scores == sorted(scores, reverse=True) and all(threshold <= s <= 1 + 1e-5 for s in scores)
        assert all(sent in tool.sentences for sent, _ in res)
