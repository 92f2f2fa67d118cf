"""On-disk sentence store: equal to the in-memory list, search results unchanged, atomic save, shards -> index."""
from __future__ import annotations

import json

import numpy as np
import pytest

from conftest import SENTENCES, random_sentences
from simcse.retrieval.index import faiss_available
from simcse.retrieval.shards import encode_to_shards
from simcse.retrieval.store import OFFSETS_NAME, TEXT_NAME, SentenceStore
from simcse.retrieval.lifecycle import SENTENCES_NAME
from simcse.retrieval.tool import SimCSE

needs_faiss = pytest.mark.skipif(not faiss_available(), reason="faiss not installed")


@pytest.fixture(scope="module")
def tool(tiny_bert_dir):
    return SimCSE(str(tiny_bert_dir), pooler="avg", device="cpu")


def test_store_reads_back_what_was_written(tmp_path):
    odd = ["plain", "two\nlines", "caf\u00e9 \u4e2d\u6587", "trailing \r", " ", "x" * 5000]
    s = SentenceStore.create(tmp_path / "st")
    s.extend(odd[:2])
    s.extend([])
    s.extend(odd[2:])
    r = SentenceStore(tmp_path / "st")
    assert len(r) == len(odd) and r == odd and list(r) == odd and r[-1] == odd[-1] and r[1:3] == odd[1:3]
    assert (tmp_path / "st" / TEXT_NAME).read_text(encoding="utf-8").split("\n")[0] == "plain"
    with pytest.raises(IndexError, match="out of range"):
        r[6]
    with pytest.raises(RuntimeError, match="read-only"):
        r.extend(["more"])
    with pytest.raises(TypeError, match="must be a str"):
        s.extend(["ok", None])
    assert len(s) == len(odd)  # the bad call appended nothing
    (tmp_path / "st" / OFFSETS_NAME).write_bytes(np.array([0, 3], "<i8").tobytes())
    with pytest.raises(ValueError, match="damaged"):
        SentenceStore(tmp_path / "st")


def test_store_iteration_crosses_read_blocks(tmp_path):
    many = [f"{i} " + "w" * (i % 97) for i in range(30_000)]  # ~1.5 MB: more than one 1 MiB read block
    s = SentenceStore.create(tmp_path / "st")
    s.extend(many)
    assert list(s) == many and s[12_345] == many[12_345]


@pytest.mark.parametrize("use_faiss", [False, pytest.param(True, marks=needs_faiss)])
def test_indexed_sentences_on_disk_give_the_same_search(tool, tmp_path, use_faiss):
    corpus = SENTENCES + ["line one\nline two"]
    t = SimCSE(tool.model, device="cpu")
    t.build_index(corpus, use_faiss=use_faiss)
    assert isinstance(t.sentences, SentenceStore) and t.sentences == corpus
    # the search of an in-memory list of sentences (the tool before the store), computed here by hand
    q = t.encode(SENTENCES[:4], return_numpy=True)
    sims = q @ t.encode(corpus, return_numpy=True).T
    expect = [[corpus[j] for j in np.argsort(-row, kind="stable")[:3]] for row in sims]
    got = t.search(SENTENCES[:4], threshold=-1, top_k=3)
    assert [[s for s, _ in r] for r in got] == expect
    t.save_index(tmp_path / "idx")
    assert {p.name for p in (tmp_path / "idx").iterdir()} >= {TEXT_NAME, OFFSETS_NAME, "simcse_index.json"}
    u = SimCSE(tool.model, device="cpu")
    u.load_index(tmp_path / "idx")
    assert isinstance(u.sentences, SentenceStore) and u.sentences == corpus
    assert u.search(SENTENCES[:4], threshold=-1, top_k=3) == got
    u.add_to_index(["a dog runs ."])  # appends to a copy: the saved folder is unchanged
    assert len(u.sentences) == len(corpus) + 1 and len(SentenceStore(tmp_path / "idx")) == len(corpus)


def test_folder_saved_with_sentences_jsonl_still_loads(tool, tmp_path):
    t = SimCSE(tool.model, device="cpu")
    t.build_index(SENTENCES[:3], use_faiss=False)
    t.index.save(tmp_path / "old")
    (tmp_path / "old" / SENTENCES_NAME).write_text("".join(json.dumps(s) + "\n" for s in SENTENCES[:3]))
    u = SimCSE(tool.model, device="cpu")
    u.load_index(tmp_path / "old")
    assert u.sentences == SENTENCES[:3] and u.search(SENTENCES[1], top_k=1)[0][0] == SENTENCES[1]


def test_save_is_atomic_and_keeps_other_folders(tool, tmp_path, monkeypatch):
    t = SimCSE(tool.model, device="cpu")
    t.build_index(SENTENCES[:5], use_faiss=False)
    t.save_index(tmp_path / "idx")
    t.build_index(SENTENCES, use_faiss=False)

    def boom(folder):
        raise OSError("disk full")

    monkeypatch.setattr(t.index, "save", boom)
    with pytest.raises(OSError, match="disk full"):
        t.save_index(tmp_path / "idx")
    monkeypatch.undo()
    assert SentenceStore(tmp_path / "idx") == SENTENCES[:5]  # the earlier index is untouched
    assert [p.name for p in tmp_path.iterdir()] == ["idx"]  # no temporary folder left
    t.save_index(tmp_path / "idx")  # replaces it
    assert SentenceStore(tmp_path / "idx") == SENTENCES
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "mine.txt").write_text("keep me")
    with pytest.raises(ValueError, match="not a saved index"):
        t.save_index(tmp_path / "notes")
    assert (tmp_path / "notes" / "mine.txt").read_text() == "keep me"


@pytest.mark.parametrize("use_faiss", [False, pytest.param(True, marks=needs_faiss)])
def test_index_from_shards_equals_index_from_file(tool, tmp_path, use_faiss):
    lines = random_sentences(300, seed=11)
    f = tmp_path / "corpus.txt"
    f.write_text("\n".join(lines) + "\n")

    def encode(texts):
        return tool.encode(texts, return_numpy=True)

    encode_to_shards(encode, f, tmp_path / "emb", {"model": "tiny", "pooler": "avg", "hidden_size": 32}, shard_size=64)
    a = SimCSE(tool.model, device="cpu")
    a.build_index(tmp_path / "emb", use_faiss=use_faiss)  # no encoding: vectors from the shards
    b = SimCSE(tool.model, device="cpu")
    b.build_index(f, use_faiss=use_faiss)
    assert a.sentences == b.sentences == lines and a.index.kind == b.index.kind
    ra, rb = a.search(lines[:20], threshold=-1, top_k=5), b.search(lines[:20], threshold=-1, top_k=5)
    assert [[s for s, _ in r] for r in ra] == [[s for s, _ in r] for r in rb]
    np.testing.assert_allclose([[x for _, x in r] for r in ra], [[x for _, x in r] for r in rb], atol=1e-6)
