"""truncate_dim on every surface that makes or uses a vector: SimCSE encode/similarity/index, the saved folder
(and sentence-transformers loading it with its own truncate_dim), simcse encode/index/search/serve; bad values
get one error naming the option. The expected vectors are computed here from the full embeddings."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from simcse import cli
from simcse.models.truncation import check_truncate_dim, truncate_embeddings
from simcse.retrieval.tool import SimCSE
from tests.conftest import random_sentences

SENTS = ["a man plays a guitar .", "the dog runs in the park .", "a woman is cooking .", "two kids play football ."]


def _unit(x):
    return x / np.linalg.norm(x, axis=-1, keepdims=True)


@pytest.fixture(scope="module")
def full(tiny_bert_dir):
    return SimCSE(str(tiny_bert_dir), pooler="avg", device="cpu")


@pytest.fixture(scope="module")
def cut(tiny_bert_dir):
    return SimCSE(str(tiny_bert_dir), pooler="avg", device="cpu", truncate_dim=8)


def test_rule_cuts_then_normalises_like_sentence_transformers():
    x = np.random.default_rng(0).normal(size=(3, 10)).astype(np.float32)
    np.testing.assert_allclose(truncate_embeddings(x, 4, normalize=True), _unit(x[:, :4]), rtol=1e-6)
    np.testing.assert_array_equal(truncate_embeddings(x, 4), x[:, :4])
    t = torch.from_numpy(x)
    torch.testing.assert_close(truncate_embeddings(t, 4, normalize=True), torch.from_numpy(_unit(x[:, :4])))
    assert check_truncate_dim(None, 10) is None and check_truncate_dim(10, 10) == 10
    for bad, msg in ((0, "positive"), (11, "larger than the embedding size 10"), (True, "positive integer"),
                     (2.5, "positive integer")):
        with pytest.raises(ValueError, match=f"--truncate_dim .*{msg}|{msg}"):
            check_truncate_dim(bad, 10)


def test_encode_and_similarity_use_the_prefix(full, cut):
    raw = full.encode(SENTS, return_numpy=True, normalize_to_unit=False)
    assert cut.hidden_size == 8 and raw.shape == (4, 32)
    np.testing.assert_allclose(cut.encode(SENTS, return_numpy=True), _unit(raw[:, :8]), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(cut.encode(SENTS, return_numpy=True, normalize_to_unit=False), raw[:, :8], rtol=1e-5, atol=1e-6)
    assert cut.encode(SENTS[0]).shape == (8,)
    u = _unit(raw[:, :8])
    np.testing.assert_allclose(cut.similarity(SENTS[0], SENTS[1:]), u[0] @ u[1:].T, rtol=1e-5, atol=1e-6)
    assert not np.allclose(full.similarity(SENTS[0], SENTS[1:]), u[0] @ u[1:].T, atol=1e-3)
    with pytest.raises(ValueError, match=r"shape \(8,\)"):
        cut.similarity(raw[0], raw[1])  # full-size vectors are not this tool's


@pytest.mark.parametrize("bad,msg", [(0, "positive"), (33, "larger than the embedding size 32")])
def test_bad_values_are_refused_naming_the_option(tiny_bert_dir, bad, msg):
    with pytest.raises(ValueError, match=f"truncate_dim.*{msg}"):
        SimCSE(str(tiny_bert_dir), pooler="avg", device="cpu", truncate_dim=bad)


def test_index_is_built_at_the_truncated_size_and_refused_at_another(tiny_bert_dir, cut, full, tmp_path):
    corpus = SENTS + random_sentences(20, seed=1)
    cut.build_index(corpus, use_faiss=False)
    assert cut.index.dim == 8
    hits = cut.search(SENTS[0], top_k=3, threshold=-1)
    vecs = cut.encode(corpus, return_numpy=True)
    expected = np.argsort(-(vecs @ vecs[0]), kind="stable")[:3]
    assert [s for s, _ in hits] == [corpus[i] for i in expected]
    cut.save_index(tmp_path / "idx")
    assert json.loads((tmp_path / "idx" / "simcse_index.json").read_text())["truncate_dim"] == 8
    with pytest.raises(ValueError, match="8-d vectors; this model makes 32-d ones .*truncate_dim=8"):
        full.load_index(tmp_path / "idx")
    other = SimCSE(str(tiny_bert_dir), pooler="avg", device="cpu", truncate_dim=16)
    with pytest.raises(ValueError, match="8-d vectors; this model makes 16-d ones \\(truncate_dim=16\\)"):
        other.load_index(tmp_path / "idx")


def test_saved_folder_records_trained_dims_and_sentence_transformers_truncates_alike(tiny_bert_dir, tmp_path):
    from sentence_transformers import SentenceTransformer

    from simcse.models.modeling import SimCSEModel

    model = SimCSEModel.from_pretrained(str(tiny_bert_dir), pooler_type="avg")
    model.matryoshka_dims = [32, 16, 8]
    model.save_pretrained(tmp_path / "m")
    assert json.loads((tmp_path / "m" / "simcse_config.json").read_text())["matryoshka_dims"] == [32, 16, 8]
    assert SimCSEModel.from_pretrained(str(tmp_path / "m")).matryoshka_dims == [32, 16, 8]
    ours = SimCSE(str(tmp_path / "m"), device="cpu", truncate_dim=8).encode(SENTS, return_numpy=True)
    st = SentenceTransformer(str(tmp_path / "m"), device="cpu", truncate_dim=8)
    theirs = st.encode(SENTS, normalize_embeddings=True)
    assert theirs.shape == (4, 8)
    np.testing.assert_allclose(ours, theirs, rtol=1e-4, atol=1e-5)


def test_cli_encode_index_search(tiny_bert_dir, tmp_path, capsys):
    corpus = tmp_path / "c.txt"
    corpus.write_text("\n".join(SENTS + random_sentences(10, seed=2)) + "\n")
    base = ["--model", str(tiny_bert_dir), "--pooler", "avg", "--device", "cpu"]
    assert cli.main(["encode", *base, "--input", str(corpus), "--output", str(tmp_path / "e.npy"), "--truncate_dim", "8"]) == 0
    arr = np.load(tmp_path / "e.npy")
    full = SimCSE(str(tiny_bert_dir), pooler="avg", device="cpu").encode(SENTS, return_numpy=True, normalize_to_unit=False)
    np.testing.assert_allclose(arr[:4], _unit(full[:, :8]), rtol=1e-5, atol=1e-6)
    assert cli.main(["index", *base, "--input", str(corpus), "--output", str(tmp_path / "i"), "--no-faiss",
                     "--truncate-dim", "8"]) == 0
    capsys.readouterr()
    assert cli.main(["search", "--index", str(tmp_path / "i"), "--query", SENTS[0], "--json", "--threshold", "-1"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["results"][0][0] == SENTS[0] and out["results"][0][1] == pytest.approx(1.0, abs=1e-5)
    assert cli.main(["search", "--index", str(tmp_path / "i"), "--query", SENTS[0], "--truncate_dim", "16"]) == 2
    assert "--truncate_dim 16 does not match the 8 dimensions the index" in capsys.readouterr().err
    assert cli.main(["encode", *base, "--input", str(corpus), "--output", str(tmp_path / "z.npy"), "--truncate_dim", "0"]) == 2
    assert "--truncate_dim must be a positive integer, got 0" in capsys.readouterr().err
    assert cli.main(["encode", *base, "--input", str(corpus), "--output", str(tmp_path / "z.npy"), "--truncate_dim", "64"]) == 2
    assert "truncate_dim 64 is larger than the embedding size 32" in capsys.readouterr().err
    assert not (tmp_path / "z.npy").exists()


def test_serve_answers_at_the_truncated_size(tiny_bert_dir, tmp_path):
    pytest.importorskip("fastapi")
    from fastapi.testclient import TestClient

    from simcse.serving.serve import load_service
    from simcse.serving.webapp import create_app

    corpus = tmp_path / "c.txt"
    corpus.write_text("\n".join(SENTS) + "\n")
    service = load_service(model=str(tiny_bert_dir), pooler="avg", input=str(corpus), device="cpu", truncate_dim=8)
    with TestClient(create_app(service)) as c:
        r = c.post("/api/encode", json={"sentences": SENTS[:2]})
        assert r.status_code == 200 and r.json()["dim"] == 8
        ref = SimCSE(str(tiny_bert_dir), pooler="avg", device="cpu", truncate_dim=8).encode(SENTS[:2], return_numpy=True)
        np.testing.assert_allclose(np.array(r.json()["embeddings"]), ref, rtol=1e-5, atol=1e-6)
    service.tool.save_index(tmp_path / "i")
    with pytest.raises(ValueError, match="--truncate_dim 4 does not match the 8 dimensions"):
        load_service(index=str(tmp_path / "i"), truncate_dim=4)
    again = load_service(index=str(tmp_path / "i"), device="cpu")  # the index's size unless given
    assert again.tool.hidden_size == 8
