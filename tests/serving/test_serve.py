"""`simcse serve`: the JSON API, its answers to bad input, concurrency, and the command (tiny random model)."""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

from conftest import SENTENCES, random_sentences

pytest.importorskip("fastapi", reason="pip install 'simcse[serve]'")
httpx = pytest.importorskip("httpx")

from fastapi.testclient import TestClient  # noqa: E402

from simcse import SimCSE  # noqa: E402
from simcse.cli import main as cli_main  # noqa: E402
from simcse.serving.serve import running_server, start_indexing  # noqa: E402
from simcse.serving.service import MAX_BODY_BYTES, SearchService, StartingService  # noqa: E402
from simcse.serving.webapp import create_app  # noqa: E402

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def tool(tiny_bert_dir):
    t = SimCSE(str(tiny_bert_dir), pooler="avg", device="cpu")
    t.build_index(SENTENCES + random_sentences(40, seed=3), use_faiss=False)
    return t


@pytest.fixture(scope="module")
def service(tool):
    return SearchService(tool, source="test corpus", examples=["a man plays music .", "the dog runs ."])


@pytest.fixture(scope="module")
def client(service):
    with TestClient(create_app(service)) as c:
        yield c


def _same_hits(api_hits: list[dict], expected: list[tuple[str, float]]) -> None:
    """The API's hits are ``expected`` ((sentence, score) pairs, best first): same sentences, scores within 1e-6."""
    assert [h["sentence"] for h in api_hits] == [s for s, _ in expected]
    assert [h["score"] for h in api_hits] == pytest.approx([sc for _, sc in expected], abs=1e-6)


# ------------------------------------------------------------------------------------ good requests
def test_search_get_returns_the_tools_neighbours_with_ranks_and_time(client, tool):
    r = client.get("/api/search", params={"query": "a man is playing music .", "top_k": 4, "threshold": -1})
    assert r.status_code == 200, r.text
    body = r.json()
    _same_hits(body["results"], tool.search("a man is playing music .", top_k=4, threshold=-1))
    assert [h["rank"] for h in body["results"]] == [1, 2, 3, 4]
    scores = [h["score"] for h in body["results"]]
    assert scores == sorted(scores, reverse=True)
    assert body["elapsed_ms"] > 0 and body["top_k"] == 4 and body["threshold"] == -1


def test_threshold_drops_lower_scores(client, tool):
    all_hits = client.get("/api/search", params={"query": "the cat sits .", "top_k": 10, "threshold": -1}).json()
    cut = all_hits["results"][4]["score"]
    kept = client.get("/api/search", params={"query": "the cat sits .", "top_k": 10, "threshold": cut}).json()
    assert [h["sentence"] for h in kept["results"]] == [h["sentence"] for h in all_hits["results"][:5]]


def test_post_and_batch_give_the_get_results(client):
    q = ["a woman sings .", "the red car is on the road ."]
    got = [client.get("/api/search", params={"query": x, "top_k": 3, "threshold": -1}).json()["results"] for x in q]
    posted = [client.post("/api/search", json={"query": x, "top_k": 3, "threshold": -1}).json()["results"] for x in q]
    batch = client.post("/api/search/batch", json={"queries": q, "top_k": 3, "threshold": -1}).json()
    assert posted == got
    assert [b["query"] for b in batch["results"]] == q
    for b, g in zip(batch["results"], got):
        _same_hits(b["results"], [(h["sentence"], h["score"]) for h in g])


def test_similarity_and_encode_match_the_tool(client, tool):
    a, b = "a man plays the guitar .", "the dog runs in the park ."
    for r in (client.get("/api/similarity", params={"sentence1": a, "sentence2": b}),
              client.post("/api/similarity", json={"sentence1": a, "sentence2": b})):
        assert r.status_code == 200 and r.json()["score"] == pytest.approx(tool.similarity(a, b), abs=1e-6)
    r = client.post("/api/encode", json={"sentences": [a, b]})
    emb = np.array(r.json()["embeddings"], dtype=np.float32)
    assert emb.shape == (2, tool.hidden_size) and r.json()["dim"] == tool.hidden_size
    np.testing.assert_allclose(emb, tool.encode([a, b], return_numpy=True), atol=1e-6)
    raw = np.array(client.post("/api/encode", json={"sentences": [a], "normalize": False}).json()["embeddings"])
    np.testing.assert_allclose(raw, tool.encode([a], return_numpy=True, normalize_to_unit=False), atol=1e-5)
    assert abs(np.linalg.norm(raw) - 1) > 1e-3  # really not normalised


def test_health_info_examples_openapi(client, tool):
    assert client.get("/api/health").json() == {"status": "ok"}
    info = client.get("/api/info").json()
    assert (info["size"], info["pooler"], info["backend"], info["dim"]) == (len(tool.sentences), "avg", "numpy", 32)
    assert info["model"] == tool.model_name_or_path and info["source"] == "test corpus"
    assert client.get("/api/examples").json() == {"examples": ["a man plays music .", "the dog runs ."]}
    paths = client.get("/openapi.json").json()["paths"]
    assert {"/api/search", "/api/search/batch", "/api/similarity", "/api/encode", "/api/info",
            "/api/health", "/api/examples"} <= set(paths)
    assert {"get", "post"} <= set(paths["/api/search"])


def test_page_is_served_with_its_files_and_nothing_from_elsewhere(client):
    r = client.get("/")
    assert r.status_code == 200 and 'id="search-form"' in r.text
    assert "default-src 'self'" in r.headers["content-security-policy"]
    static = REPO / "simcse" / "serving" / "static"
    for name in ("app.js", "style.css"):
        assert client.get(f"/static/{name}").text == (static / name).read_text(encoding="utf-8")
    for f in static.iterdir():  # no CDN or other outside address anywhere in the page's files
        assert "http://" not in f.read_text() and "https://" not in f.read_text(), f.name


# ------------------------------------------------------------------------------------- bad requests
BIG = "x" * (MAX_BODY_BYTES + 10)
BAD = [
    # (method, path, request kwargs, status, words of the message)
    ("GET", "/api/search", {}, 422, "query is missing"),
    ("GET", "/api/search", {"params": {"query": ""}}, 422, "query is empty"),
    ("GET", "/api/search", {"params": {"query": "  \t "}}, 422, "query is empty"),
    ("GET", "/api/search", {"params": {"query": "a" * 2001}}, 422, "2001 characters; at most 2000"),
    ("GET", "/api/search", {"params": {"query": "a", "top_k": 0}}, 422, "top_k must be between 1 and 100, got 0"),
    ("GET", "/api/search", {"params": {"query": "a", "top_k": -3}}, 422, "top_k must be between 1 and 100"),
    ("GET", "/api/search", {"params": {"query": "a", "top_k": 10**12}}, 422, "top_k must be between 1 and 100"),
    ("GET", "/api/search", {"params": {"query": "a", "top_k": "ten"}}, 422, "top_k: Input should be a valid integer"),
    ("GET", "/api/search", {"params": {"query": "a", "threshold": 1.5}}, 422, "threshold must be a cosine between -1 and 1"),
    ("GET", "/api/search", {"params": {"query": "a", "threshold": -1.01}}, 422, "threshold must be a cosine"),
    ("GET", "/api/search", {"params": {"query": "a", "threshold": "nan"}}, 422, "threshold must be a cosine"),
    ("GET", "/api/search", {"params": {"query": "a", "threshold": "inf"}}, 422, "threshold must be a cosine"),
    ("GET", "/api/search?query=caf%E9", {}, 400, "query string is not UTF-8"),
    ("POST", "/api/search", {"json": {"query": 5}}, 422, "query: Input should be a valid string"),
    ("POST", "/api/search", {"json": {"query": None}}, 422, "query: Input should be a valid string"),
    ("POST", "/api/search", {"json": {"query": ["a"]}}, 422, "query: Input should be a valid string"),
    ("POST", "/api/search", {"json": {"query": "a", "top_k": "5"}}, 422, "top_k: Input should be a valid integer"),
    ("POST", "/api/search", {"json": {"query": "a", "top_k": True}}, 422, "top_k: Input should be a valid integer"),
    ("POST", "/api/search", {"json": {"query": "a", "top_k": 2.5}}, 422, "top_k: Input should be a valid integer"),
    ("POST", "/api/search", {"json": {"query": "a", "threshold": "0.5"}}, 422, "threshold: Input should be a valid number"),
    ("POST", "/api/search", {"json": {"query": "a", "top_k": 0}}, 422, "top_k must be between 1 and 100"),
    ("POST", "/api/search", {"json": {"query": "a", "limit": 3}}, 422, "unknown field 'limit'"),
    ("POST", "/api/search", {"json": {"top_k": 3}}, 422, "query: Field required"),
    ("POST", "/api/search", {"json": ["a"]}, 422, "the request body"),
    ("POST", "/api/search", {"json": "a"}, 422, "the request body"),
    ("POST", "/api/search", {"content": b"", "headers": {"content-type": "application/json"}}, 422, "body is missing"),
    ("POST", "/api/search", {"content": b'{"query": ', "headers": {"content-type": "application/json"}}, 400,
     "not valid JSON"),
    ("POST", "/api/search", {"content": b'{"query": "caf\xe9"}', "headers": {"content-type": "application/json"}},
     400, "body is not UTF-8 (byte 14"),
    ("POST", "/api/search", {"content": b"query=a", "headers": {"content-type": "application/x-www-form-urlencoded"}},
     415, "must be JSON"),
    ("POST", "/api/search", {"content": BIG.encode(), "headers": {"content-type": "application/json"}}, 413,
     f"at most {MAX_BODY_BYTES}"),
    ("POST", "/api/search/batch", {"json": {"queries": []}}, 422, "queries is empty"),
    ("POST", "/api/search/batch", {"json": {"queries": ["a"] * 33}}, 422, "queries has 33 items; at most 32"),
    ("POST", "/api/search/batch", {"json": {"queries": ["a", 3]}}, 422, "queries.1: Input should be a valid string"),
    ("POST", "/api/search/batch", {"json": {"queries": ["a", " "]}}, 422, "queries[1] is empty"),
    ("POST", "/api/search/batch", {"json": {"queries": "a"}}, 422, "queries: Input should be a valid list"),
    ("POST", "/api/encode", {"json": {"sentences": ["a"] * 65}}, 422, "sentences has 65 items; at most 64"),
    ("POST", "/api/encode", {"json": {"sentences": ["a"], "normalize": "yes"}}, 422, "normalize: Input should be a valid boolean"),
    ("GET", "/api/similarity", {"params": {"sentence1": "a"}}, 422, "sentence2 is missing"),
    ("POST", "/api/similarity", {"json": {"sentence1": "a", "sentence2": ""}}, 422, "sentence2 is empty"),
    ("GET", "/api/nothing", {}, 404, "no such page or API route: /api/nothing"),
    ("GET", "/static/missing.js", {}, 404, "no such page"),
    ("DELETE", "/api/search", {}, 405, "DELETE is not allowed on /api/search"),
    ("GET", "/api/encode", {}, 405, "GET is not allowed on /api/encode"),
]


@pytest.mark.parametrize("method,path,kwargs,status,words", BAD, ids=[f"{b[0]} {b[1]} {b[4][:30]}" for b in BAD])
def test_bad_request_gets_one_clear_json_error(client, method, path, kwargs, status, words):
    r = client.request(method, path, **kwargs)
    assert r.status_code == status, r.text
    body = r.json()
    assert set(body) == {"error"} and "\n" not in body["error"], body
    assert words in body["error"], body["error"]


# ---------------------------------------------------------------------------- a real server (uvicorn)
@pytest.fixture(scope="module")
def server(service):
    with running_server(create_app(service)) as url:
        yield url


def _results(http, url, q):
    r = http.get(f"{url}/api/search", params={"query": q, "top_k": 5, "threshold": -1})
    assert r.status_code == 200, r.text
    return r.json()["results"]


def test_concurrent_requests_give_the_sequential_results(server):
    queries = random_sentences(32, seed=11)
    with httpx.Client(timeout=60) as http:
        sequential = {q: _results(http, server, q) for q in queries}
    with httpx.Client(timeout=60, limits=httpx.Limits(max_connections=16)) as http, ThreadPoolExecutor(16) as pool:
        work = queries * 3
        concurrent = list(pool.map(lambda q: (q, _results(http, server, q)), work))
    assert len(concurrent) == len(work)
    for q, res in concurrent:
        assert res == sequential[q], q  # identical sentences, ranks and scores (same float)


def _raw(url, data: bytes, read: bool = True, timeout: float = 10) -> bytes:
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=timeout) as s:
        s.sendall(data)
        if not read:
            return b""
        chunks = []
        try:
            while chunk := s.recv(65536):
                chunks.append(chunk)
        except (socket.timeout, ConnectionResetError):
            pass
        return b"".join(chunks)


def test_malformed_http_and_stalled_clients_do_not_stop_the_server(server):
    assert _raw(server, b"\xff\xfe NOT HTTP \x00\r\n\r\n").startswith(b"HTTP/1.1 400")
    huge_header = b"GET /api/health HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 200_000 + b"\r\n\r\n"
    assert not _raw(server, huge_header).startswith(b"HTTP/1.1 200")
    chunked = (b"POST /api/search HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
               b"Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n")
    for _ in range(20):  # 20 x 64 KiB streamed without a Content-Length: refused once over 1 MiB
        chunked += b"10000\r\n" + b" " * 0x10000 + b"\r\n"
    chunked += b"0\r\n\r\n"
    reply = _raw(server, chunked)
    assert reply.startswith(b"HTTP/1.1 413"), reply[:200]
    # clients that stop half-way (head, then a body that never comes) hold only their own connection
    stalled = []
    for _ in range(4):
        host, port = server.removeprefix("http://").split(":")
        s = socket.create_connection((host, int(port)))
        s.sendall(b"POST /api/search HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{")
        stalled.append(s)
    half_head = socket.create_connection((host, int(port)))
    half_head.sendall(b"GET /api/search?query=a HTTP/1.1\r\nHo")
    try:
        t0 = time.perf_counter()
        with httpx.Client(timeout=10) as http:
            assert http.get(f"{server}/api/health").json() == {"status": "ok"}
            assert _results(http, server, "a man plays music .")
        assert time.perf_counter() - t0 < 10
    finally:
        for s in stalled + [half_head]:
            s.close()


# ------------------------------------------------------------------------------- start-up: serve first
def _until(check, timeout: float = 60.0):
    deadline = time.monotonic() + timeout
    while not (value := check()):
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)
    return value


def test_page_answers_at_once_and_searches_get_503_until_the_index_is_built(tiny_bert_dir):
    """While the background thread indexes (held after its first chunk here), the page and /api/info answer,
    /api/health and every search say how far indexing is with 503; then the same requests give the results of
    the finished index."""
    corpus = SENTENCES + random_sentences(30, seed=4)
    gate = threading.Event()

    def held_corpus():  # the first 10 sentences, then a wait for the test
        yield from corpus[:10]
        gate.wait(60)
        yield from corpus[10:]

    tool = SimCSE(str(tiny_bert_dir), pooler="avg", device="cpu")
    starting = StartingService(tool, len(corpus), source="held corpus")
    with TestClient(create_app(starting)) as c:
        thread = start_indexing(starting, held_corpus(), chunk_size=10)
        _until(lambda: c.get("/api/health").json().get("indexed") == 10)
        health = c.get("/api/health")
        n = len(corpus)
        assert health.status_code == 503
        assert health.json() == {"status": "indexing", "indexed": 10, "total": n,
                                 "message": f"indexing 10 / {n} sentences"}
        assert c.get("/").status_code == 200 and "<h1>" in c.get("/").text
        info = c.get("/api/info").json()
        assert (info["status"], info["size"], info["total"], info["pooler"]) == ("indexing", 10, n, "avg")
        for method, path, kwargs in [("get", "/api/search", {"params": {"query": "a dog"}}),
                                     ("post", "/api/search/batch", {"json": {"queries": ["a dog"]}}),
                                     ("get", "/api/similarity", {"params": {"sentence1": "a", "sentence2": "b"}}),
                                     ("post", "/api/encode", {"json": {"sentences": ["a dog"]}})]:
            r = getattr(c, method)(path, **kwargs)
            assert r.status_code == 503 and r.headers["retry-after"] == "5", path
            assert r.json() == {"error": f"the index is not ready yet (indexing 10 / {n} sentences); searches are "
                                         "answered when it is done (GET /api/health says when)"}, path
        gate.set()
        thread.join(60)
        assert c.get("/api/health").status_code == 200 and c.get("/api/health").json() == {"status": "ok"}
        info = c.get("/api/info").json()
        assert (info["status"], info["size"], info["backend"]) == ("ok", n, tool.index.kind)
        body = c.get("/api/search", params={"query": corpus[12], "top_k": 3, "threshold": -1}).json()
        reference = SimCSE(str(tiny_bert_dir), pooler="avg", device="cpu")
        reference.build_index(corpus, use_faiss=tool.index.kind != "numpy")
        _same_hits(body["results"], reference.search(corpus[12], top_k=3, threshold=-1))


def test_indexing_that_fails_is_reported_by_health_and_searches(tiny_bert_dir, capsys):
    def bad_corpus():
        yield "a man plays ."
        raise ValueError("corpus.txt:2: not UTF-8")

    tool = SimCSE(str(tiny_bert_dir), pooler="avg", device="cpu")
    starting = StartingService(tool, 2, source="corpus.txt")
    stopped = threading.Event()
    start_indexing(starting, bad_corpus(), chunk_size=1, on_failure=stopped.set).join(60)
    assert stopped.is_set()
    assert "error: indexing corpus.txt failed: corpus.txt:2: not UTF-8" in capsys.readouterr().err
    with TestClient(create_app(starting)) as c:
        assert c.get("/api/health").status_code == 503
        assert c.get("/api/health").json() == {"status": "failed", "error": "corpus.txt:2: not UTF-8"}
        r = c.get("/api/search", params={"query": "a dog"})
        assert r.status_code == 503 and r.json() == {
            "error": "the index could not be built (corpus.txt:2: not UTF-8); this server cannot search"}


# ------------------------------------------------------------------------------------------ command
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_healthy(url: str, proc: subprocess.Popen, timeout: float = 240) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"simcse serve exited with {proc.returncode}: {proc.stderr.read()[-2000:]}")
        try:
            if httpx.get(f"{url}/api/health", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.25)
    raise AssertionError(f"simcse serve did not answer within {timeout} s")


def start_serve(args: list[str], env_extra: dict | None = None):
    """Start ``python -m simcse serve ARGS --port P`` (1 torch thread); return (process, base URL)."""
    port = _free_port()
    env = dict(os.environ, PYTHONPATH=str(REPO), OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1", **(env_extra or {}))
    proc = subprocess.Popen([sys.executable, "-m", "simcse", "serve", *args, "--port", str(port)], cwd=REPO,
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_healthy(url, proc)
    except BaseException:
        proc.kill()
        proc.wait()
        raise
    return proc, url


def stop_serve(proc: subprocess.Popen) -> str:
    """Ctrl+C the server; return its stderr. Fails if it does not exit within 20 s."""
    proc.send_signal(signal.SIGINT)
    try:
        _, err = proc.communicate(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        raise AssertionError("simcse serve did not stop on SIGINT")
    return err


@pytest.mark.slow
def test_python_m_simcse_serve_indexes_a_file_and_serves_it(tiny_bert_dir, tmp_path):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(SENTENCES) + "\n\n", encoding="utf-8")
    proc, url = start_serve(["--model", str(tiny_bert_dir), "--pooler", "avg", "--input", str(corpus)])
    try:
        info = httpx.get(f"{url}/api/info").json()
        assert (info["size"], info["pooler"], info["source"]) == (len(SENTENCES), "avg", str(corpus))
        body = httpx.get(f"{url}/api/search", params={"query": SENTENCES[3], "top_k": 2}).json()
        assert body["results"][0] == {"rank": 1, "sentence": SENTENCES[3], "score": pytest.approx(1.0, abs=1e-5)}
        assert "<h1>" in httpx.get(url).text
    finally:
        err = stop_serve(proc)
    assert f"indexed {len(SENTENCES)} sentences" in err and "indexing" in err  # progress was shown


@pytest.mark.slow
def test_serve_loads_an_index_folder_written_by_simcse_index(tiny_bert_dir, tmp_path, capsys):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(SENTENCES) + "\n", encoding="utf-8")
    idx = tmp_path / "idx"
    assert cli_main(["index", "--model", str(tiny_bert_dir), "--pooler", "avg", "--input", str(corpus),
                     "--output", str(idx), "--no-faiss"]) == 0
    proc, url = start_serve(["--index", str(idx)])  # the model is read from the folder
    try:
        info = httpx.get(f"{url}/api/info").json()
        assert (info["size"], info["backend"], info["pooler"]) == (len(SENTENCES), "numpy", "avg")
        assert info["model"] == info["model_path"] == str(Path(tiny_bert_dir).resolve())
    finally:
        stop_serve(proc)


@pytest.mark.parametrize("argv,words", [
    (["--index", "no/such/dir"], "--index 'no/such/dir' is not a folder: expected a folder written by 'simcse index'"),
    (["--model", "M", "--index", "no/such/dir"], "--index 'no/such/dir' is not a folder"),
    (["--model", "{tiny}", "--input", "no/such/file.txt"], "--input 'no/such/file.txt' is not a file"),
    (["--max-lines", "0"], "--max-lines must be a positive integer, got 0"),
    (["--model", "{tiny}", "--input", "{corpus}", "--port", "70000"], "--port must be between 0 and 65535"),
])
def test_serve_bad_arguments_end_with_one_error_line(tiny_bert_dir, tmp_path, capsys, argv, words):
    corpus = tmp_path / "c.txt"
    corpus.write_text("a man plays .\n", encoding="utf-8")
    argv = [a.format(tiny=tiny_bert_dir, corpus=corpus) for a in argv]
    assert cli_main(["serve", *argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("error: ") and words in err[-1], err


def test_serve_index_and_input_together_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as e:
        cli_main(["serve", "--index", "a", "--input", "b"])
    assert e.value.code == 2 and "not allowed with argument" in capsys.readouterr().err


@pytest.mark.slow
def test_serve_without_arguments_serves_minilm_over_the_wiki_file(minilm_dir):
    from simcse.serving.serve import default_corpus

    try:
        wiki = default_corpus()
    except FileNotFoundError as e:
        if os.environ.get("CI") == "true":
            raise
        pytest.skip(str(e))
    proc, url = start_serve(["--max-lines", "64"])  # the default model and corpus, fewer lines
    try:
        info = httpx.get(f"{url}/api/info").json()
        assert (info["model"], info["model_path"]) == ("all-MiniLM-L6-v2", minilm_dir)
        assert (info["pooler"], info["size"], info["source"]) == ("avg", 64, str(wiki))
        with open(wiki, encoding="utf-8") as f:
            first = f.readline().rstrip("\r\n")
        top = httpx.get(f"{url}/api/search", params={"query": first, "top_k": 1}).json()["results"][0]
        assert top["sentence"] == first and top["score"] > 0.99
    finally:
        stop_serve(proc)


def test_load_service_reads_the_first_lines_of_a_csv_column(tiny_bert_dir, tmp_path):
    from simcse.serving.serve import load_service

    csv = tmp_path / "pairs.csv"
    csv.write_text("id,text\n" + "".join(f'{i},"{s}"\n' for i, s in enumerate(SENTENCES)), encoding="utf-8")
    service = load_service(model=str(tiny_bert_dir), pooler="avg", input=str(csv), column="text", max_lines=5)
    assert service.tool.sentences == SENTENCES[:5]
    assert service.search([SENTENCES[2]], top_k=1, threshold=-1)[0][0]["sentence"] == SENTENCES[2]
    with pytest.raises(ValueError, match="--max-lines must be a positive integer"):
        load_service(model=str(tiny_bert_dir), input=str(csv), column="text", max_lines=0)


def test_info_and_page_show_the_pooler_that_encodes(tmp_path, tiny_bert_dir):
    """A cls model trained with mlp_only_train encodes with the [CLS] vector: /api/info's "pooler" (shown by the
    page) is cls_before_pooler, "pooler_type" the recorded cls."""
    from conftest import perturbed_model

    perturbed_model(tiny_bert_dir, "cls", mlp_only_train=True).save_pretrained(tmp_path / "m")
    t = SimCSE(str(tmp_path / "m"), device="cpu")
    t.build_index(SENTENCES, use_faiss=False)
    with TestClient(create_app(SearchService(t, source="c"))) as c:
        info = c.get("/api/info").json()
    assert (info["pooler"], info["pooler_type"]) == ("cls_before_pooler", "cls")
    page_js = (REPO / "simcse" / "serving" / "static" / "app.js").read_text()
    assert "(pooler ${info.pooler})" in page_js  # the page shows "pooler", the one in use


@pytest.mark.slow
def test_the_default_corpus_is_never_looked_for_beside_the_installed_package(tmp_path):
    """An installed wheel: the package in site-packages, a wiki file in site-packages' parent's data/ (what
    ``parents[2]`` of the module reaches); the working folder has none: the corpus is not found, in one line."""
    import shutil
    import subprocess
    import sys

    import simcse

    site = tmp_path / "lib" / "site-packages"
    shutil.copytree(Path(simcse.__file__).parent, site / "simcse", ignore=shutil.ignore_patterns("__pycache__"))
    (site / "data").mkdir()
    (site / "data" / "wiki1m_for_simcse.txt").write_text("a sentence\n")
    work = tmp_path / "work"
    work.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "SIMCSE_DATA_MIRROR"}
    env["PYTHONPATH"] = str(site)
    code = ("from simcse.serving.serve import default_corpus\n"
            "try:\n    print('found', default_corpus())\nexcept FileNotFoundError as e:\n    print('missing', e)\n")
    r = subprocess.run([sys.executable, "-c", code], cwd=work, env=env, capture_output=True, text=True, timeout=120)
    assert r.stdout.startswith("missing no --input or --index given"), r.stdout + r.stderr[-2000:]
    assert str(work / "data") in r.stdout
    (work / "data").mkdir()
    (work / "data" / "wiki1m_for_simcse.txt").write_text("a sentence\n")
    r = subprocess.run([sys.executable, "-c", code], cwd=work, env=env, capture_output=True, text=True, timeout=120)
    assert r.stdout.strip() == "found data/wiki1m_for_simcse.txt", r.stdout + r.stderr[-2000:]
