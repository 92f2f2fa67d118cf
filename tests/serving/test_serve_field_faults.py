"""`simcse serve` as field reports try it: scores by the tool's one scoring path (float32 and float16-stored
vectors), lone UTF-16 surrogates in JSON strings, HEAD requests and 405 answers with ``Allow``."""
from __future__ import annotations

import pytest

from conftest import random_sentences
from simcse import cli

pytest.importorskip("fastapi", reason="pip install 'simcse[serve]'")
pytest.importorskip("httpx")

from fastapi.testclient import TestClient  # noqa: E402

from simcse import SimCSE  # noqa: E402
from simcse.serving.service import SearchService  # noqa: E402
from simcse.serving.webapp import create_app  # noqa: E402

SENTENCES = random_sentences(120, seed=21)


def _client(tool):
    return TestClient(create_app(SearchService(tool, source="test")))


@pytest.fixture(scope="module")
def float32_client(tiny_bert_dir):
    tool = SimCSE(str(tiny_bert_dir), pooler="avg", device="cpu")
    tool.build_index(SENTENCES, use_faiss=False)
    with _client(tool) as c:
        yield c


@pytest.fixture(scope="module")
def float16_client(tiny_bert_dir, tmp_path_factory):
    root = tmp_path_factory.mktemp("serve_f16")
    (root / "corpus.txt").write_text("\n".join(SENTENCES) + "\n")
    assert cli.main(["encode", "--model", str(tiny_bert_dir), "--pooler", "avg", "--input", str(root / "corpus.txt"),
                     "--output", str(root / "emb"), "--dtype", "float16", "--device", "cpu"]) == 0
    tool = SimCSE(str(tiny_bert_dir), pooler="avg", device="cpu")
    tool.build_index(str(root / "emb"), use_faiss=False)
    with _client(tool) as c:
        yield c


# ------------------------------------------------------------------------------------------- scores
@pytest.mark.parametrize("which", ["float32_client", "float16_client"])
def test_api_scores_are_cosines_and_exact_duplicates_score_one(which, request):
    client = request.getfixturevalue(which)
    r = client.post("/api/search/batch", json={"queries": SENTENCES[:32], "top_k": 1, "threshold": 1.0})
    assert r.status_code == 200, r.text
    got = [q["results"] for q in r.json()["results"]]
    assert got == [[{"rank": 1, "sentence": s, "score": 1.0}] for s in SENTENCES[:32]]
    r = client.post("/api/search", json={"query": SENTENCES[40], "top_k": 100, "threshold": -1})
    scores = [h["score"] for h in r.json()["results"]]
    assert len(scores) == 100 and max(scores) == 1.0 and all(-1.0 <= s <= 1.0 for s in scores)


def test_api_similarity_of_a_sentence_with_itself_is_one(float32_client):
    not_one = []
    for s in SENTENCES[:60]:
        r = float32_client.post("/api/similarity", json={"sentence1": s, "sentence2": s})
        assert r.status_code == 200, r.text
        if r.json()["score"] != 1.0:
            not_one.append(r.json()["score"])
    assert not not_one, f"{len(not_one)} of 60 self-similarities are not 1.0: {not_one[:3]}"


def test_api_scores_equal_the_tools(float32_client, tiny_bert_dir):
    tool = SimCSE(str(tiny_bert_dir), pooler="avg", device="cpu")
    tool.build_index(SENTENCES, use_faiss=False)
    q = "a man plays music ."
    r = float32_client.get("/api/search", params={"query": q, "top_k": 10, "threshold": -1})
    assert [(h["sentence"], h["score"]) for h in r.json()["results"]] == tool.search(q, top_k=10, threshold=-1)
    r = float32_client.get("/api/similarity", params={"sentence1": q, "sentence2": SENTENCES[0]})
    assert r.json()["score"] == tool.similarity(q, SENTENCES[0])


# --------------------------------------------------------------------------------- lone surrogates
@pytest.mark.parametrize("route, body, field", [
    ("/api/search", '{"query": "a dog \\ud83d runs"}', "query"),
    ("/api/search/batch", '{"queries": ["a dog", "a \\ude00 cat"]}', "queries[1]"),
    ("/api/similarity", '{"sentence1": "a dog", "sentence2": "cut \\ud83d"}', "sentence2"),
    ("/api/encode", '{"sentences": ["a", "b", "\\udfff c"]}', "sentences[2]"),
])
def test_lone_surrogate_is_a_4xx_naming_the_field_and_item(float32_client, route, body, field):
    r = float32_client.post(route, content=body.encode(), headers={"content-type": "application/json"})
    assert r.status_code == 422, r.text
    msg = r.json()["error"]
    assert msg.startswith(f"{field} holds a lone UTF-16 surrogate U+"), msg
    assert "expected valid Unicode" in msg


# ------------------------------------------------------------------------------------- HEAD and 405
@pytest.mark.parametrize("path", ["/", "/api/health", "/api/info", "/api/examples", "/static/app.js"])
def test_head_answers_as_get_without_a_body(float32_client, path):
    get = float32_client.get(path)
    head = float32_client.head(path)
    assert get.status_code == 200 and head.status_code == 200, head.text
    assert head.content == b""
    assert head.headers["content-type"] == get.headers["content-type"]
    assert head.headers.get("content-length") == get.headers.get("content-length")


def test_405_names_the_allowed_methods(float32_client):
    r = float32_client.post("/api/health", json={})
    assert r.status_code == 405 and r.headers["allow"] == "GET, HEAD", r.headers
    assert "POST is not allowed on /api/health; allowed: GET, HEAD" in r.json()["error"]
    r = float32_client.put("/api/search", json={})
    assert r.status_code == 405 and set(r.headers["allow"].split(", ")) == {"GET", "HEAD", "POST"}
