"""The FastAPI application of ``simcse serve``: the search page at ``/`` and the JSON API under ``/api``.

    GET  /api/health                         {"status": "ok"} (200); while the index is built: 503
                                             {"status": "indexing", "indexed", "total", "message"}
    GET  /api/info                           model, pooler, index size and backend, defaults, limits
    GET  /api/examples                       {"examples": [...]}
    GET  /api/search?query=&top_k=&threshold= {"query", "top_k", "threshold", "results": [{rank, sentence,
    POST /api/search   {"query", ...}          score}], "elapsed_ms"}
    POST /api/search/batch {"queries": [...], "top_k", "threshold"}   {"results": [{query, results}], ...}
    GET|POST /api/similarity  sentence1, sentence2                  {"score": cosine, "elapsed_ms"}
    POST /api/encode {"sentences": [...], "normalize": true}        {"embeddings": [[...]], "dim", ...}
    GET  /openapi.json                       the OpenAPI schema
    HEAD on every GET route                  the GET's status and headers, no body (uptime probes, curl -I)

Every error is JSON ``{"error": "<one message>"}`` with a 4xx status for anything a client sent (400 body
not JSON / not UTF-8, 404 unknown route, 405 wrong method (with an ``Allow`` header), 413 body over 1 MiB, 415 not JSON, 422 a value of
the wrong type or out of range), and 503 for a search, similarity or encode request while the index is still
being built at start-up (with the progress, and ``Retry-After``). The page and its script and style are files of the package
(``simcse/serving/static``); they load nothing from elsewhere (a Content-Security-Policy says so to the browser).
"""
from __future__ import annotations

from pathlib import Path
from typing import Optional
from urllib.parse import unquote_to_bytes

from fastapi import FastAPI, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse
from fastapi.staticfiles import StaticFiles
from pydantic import BaseModel, ConfigDict, Field
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match

from simcse.version import __version__
from simcse.serving.service import (DEFAULT_THRESHOLD, DEFAULT_TOP_K, MAX_BATCH, MAX_BODY_BYTES, MAX_ENCODE, NotReady,
                                    RequestError, SearchService, StartingService, check_text, check_texts,
                                    check_threshold, check_top_k, timed)

STATIC_DIR = Path(__file__).resolve().parent / "static"
CSP = ("default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; connect-src 'self'; "
       "base-uri 'none'; form-action 'self'; frame-ancestors 'none'")


# ---------------------------------------------------------------------------------------- schemas
class _Strict(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid")


class SearchRequest(_Strict):
    query: str = Field(description="the query sentence")
    top_k: int = Field(DEFAULT_TOP_K, description="at most this many results (1..100)")
    threshold: float = Field(DEFAULT_THRESHOLD, description="keep results with cosine >= threshold (-1..1)")


class BatchSearchRequest(_Strict):
    queries: list[str] = Field(description=f"1 to {MAX_BATCH} query sentences")
    top_k: int = DEFAULT_TOP_K
    threshold: float = DEFAULT_THRESHOLD


class SimilarityRequest(_Strict):
    sentence1: str
    sentence2: str


class EncodeRequest(_Strict):
    sentences: list[str] = Field(description=f"1 to {MAX_ENCODE} sentences")
    normalize: bool = Field(True, description="scale each vector to unit length")


class Hit(BaseModel):
    rank: int = Field(description="1 for the best match")
    sentence: str
    score: float = Field(description="cosine similarity to the query")


class SearchResponse(BaseModel):
    query: str
    top_k: int
    threshold: float
    results: list[Hit]
    elapsed_ms: float = Field(description="server time to encode the query and search, milliseconds (including "
                                          "any wait for the model while other requests are encoded)")


class QueryResults(BaseModel):
    query: str
    results: list[Hit]


class BatchSearchResponse(BaseModel):
    top_k: int
    threshold: float
    results: list[QueryResults]
    elapsed_ms: float


class SimilarityResponse(BaseModel):
    sentence1: str
    sentence2: str
    score: float = Field(description="cosine similarity")
    elapsed_ms: float


class EncodeResponse(BaseModel):
    dim: int
    normalized: bool
    embeddings: list[list[float]] = Field(description="one float32 vector per sentence, in order")
    elapsed_ms: float


# ------------------------------------------------------------------------------------------ errors
def _error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status)


def _validation_message(exc: RequestValidationError) -> tuple[int, str]:
    """(status, one line) for the first validation error: the field path and what was expected."""
    err = exc.errors()[0]
    if err.get("type") == "json_invalid":
        return 400, f"the request body is not valid JSON ({err.get('ctx', {}).get('error', 'parse error')})"
    loc = [str(x) for x in err.get("loc", ())]
    if loc and loc[0] in ("body", "query", "path", "header"):  # where it was, not which field
        loc = loc[1:]
    if not loc:
        if err.get("type") == "missing":
            return 422, "the request body is missing; expected a JSON object"
        return 422, f"the request body: {err.get('msg')}"
    got = err.get("input")
    quiet = err.get("type") in ("missing", "extra_forbidden") or isinstance(got, (dict, list))
    tail = "" if quiet else f", got {got!r}"
    if err.get("type") == "extra_forbidden":
        return 422, f"unknown field {'.'.join(loc)!r}"
    return 422, f"{'.'.join(loc)}: {err.get('msg')}{tail}"[:500]


def _allowed_methods(request: Request) -> str:
    """The ``Allow`` header of a 405: the methods of every route of the request's path (a path may have a GET
    and a POST route), plus HEAD wherever GET is allowed (:class:`HeadAsGet`)."""
    methods: set[str] = set()
    for route in request.app.routes:
        match, _ = route.matches({**request.scope, "method": "GET"})
        if match != Match.NONE and getattr(route, "methods", None):
            methods |= set(route.methods)
    if "GET" in methods:
        methods.add("HEAD")
    return ", ".join(sorted(methods))


def _add_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(RequestError)
    async def _request_error(request: Request, exc: RequestError):
        response = _error(exc.status, str(exc))
        if isinstance(exc, NotReady):
            response.headers["Retry-After"] = "5"
        return response

    @app.exception_handler(RequestValidationError)
    async def _validation(request: Request, exc: RequestValidationError):
        return _error(*_validation_message(exc))

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException):
        if exc.status_code == 404:
            return _error(404, f"no such page or API route: {request.url.path} (the API is listed at /openapi.json)")
        if exc.status_code == 405:  # with the Allow header the router names (RFC 9110 15.5.6)
            allow = _allowed_methods(request)
            return JSONResponse({"error": f"{request.method} is not allowed on {request.url.path}"
                                          + (f"; allowed: {allow}" if allow else "")},
                                status_code=405, headers={"Allow": allow} if allow else None)
        return _error(exc.status_code, str(exc.detail))

    @app.exception_handler(Exception)
    async def _internal(request: Request, exc: Exception):  # a bug, not the client's input
        return _error(500, f"internal error ({type(exc).__name__}); the server keeps running")


# -------------------------------------------------------------------------------------- middleware
class RequestLimits:
    """ASGI middleware: refuse, before any parsing, a query string that is not UTF-8 (400), a body over
    ``max_body`` bytes (413, whether announced by Content-Length or streamed), a body that is not UTF-8
    (400) and a POST body that is not declared as JSON (415). The body is read here once and replayed."""

    def __init__(self, app, max_body: int = MAX_BODY_BYTES):
        self.app, self.max_body = app, max_body

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        problem = self._head_problem(scope)
        body = b""
        if problem is None and scope["method"] in ("POST", "PUT", "PATCH"):
            body, problem = await self._read_body(receive)
            if problem is None and body and not _is_json(scope):
                problem = (415, "the request body must be JSON (Content-Type: application/json)")
        if problem is not None:
            return await _error(*problem)(scope, receive, send)
        return await self.app(scope, _replay(body, receive), send)

    def _head_problem(self, scope):
        qs = scope.get("query_string", b"")
        try:
            unquote_to_bytes(qs.replace(b"+", b" ")).decode("utf-8")
        except UnicodeDecodeError as e:
            return 400, f"the query string is not UTF-8 (byte {e.object[e.start:e.start + 1]!r}); percent-encode UTF-8"
        headers = dict(scope.get("headers", []))
        length = headers.get(b"content-length")
        if length is not None:
            if not length.isdigit():
                return 400, "the Content-Length header is not a number"
            if int(length) > self.max_body:
                return 413, f"the request body has {int(length)} bytes; at most {self.max_body} are allowed"
        return None

    async def _read_body(self, receive):
        chunks, size = [], 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                break
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_body:
                return b"", (413, f"the request body is over {self.max_body} bytes")
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        try:
            body.decode("utf-8")
        except UnicodeDecodeError as e:
            return b"", (400, f"the request body is not UTF-8 (byte {e.start}: {e.object[e.start:e.start + 1]!r})")
        return body, None


class HeadAsGet:
    """ASGI middleware: a HEAD request is answered as the GET of the same URL without its body (RFC 9110 9.3.2:
    same status and headers, Content-Length included), on every route, as uptime probes and ``curl -I`` expect.
    FastAPI's routes answer only the methods they declare; a route without GET answers 405 with ``Allow``."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or scope["method"] != "HEAD":
            return await self.app(scope, receive, send)

        async def no_body(message):
            if message["type"] == "http.response.body":
                message = {**message, "body": b""}
            await send(message)

        return await self.app({**scope, "method": "GET"}, receive, no_body)


def _is_json(scope) -> bool:
    ctype = dict(scope.get("headers", [])).get(b"content-type", b"").split(b";")[0].strip().lower()
    return ctype == b"application/json" or ctype.endswith(b"+json")


def _replay(body: bytes, receive):
    sent = False

    async def replay():
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay


# ------------------------------------------------------------------------------------------- routes
def _search_response(service: SearchService | StartingService, query, top_k, threshold) -> dict:
    query, top_k, threshold = check_text(query, "query"), check_top_k(top_k), check_threshold(threshold)
    results, ms = timed(service.search, [query], top_k, threshold)
    return {"query": query, "top_k": top_k, "threshold": threshold, "results": results[0], "elapsed_ms": ms}


def _similarity_response(service: SearchService | StartingService, sentence1, sentence2) -> dict:
    sentence1, sentence2 = check_text(sentence1, "sentence1"), check_text(sentence2, "sentence2")
    score, ms = timed(service.similarity, sentence1, sentence2)
    return {"sentence1": sentence1, "sentence2": sentence2, "score": score, "elapsed_ms": ms}


def _add_api_routes(app: FastAPI, service: SearchService | StartingService) -> None:
    @app.get("/api/health", tags=["service"], summary="200 when searches are answered; 503 while indexing")
    def health() -> JSONResponse:
        status, body = service.health()
        return JSONResponse(body, status_code=status)

    @app.get("/api/info", tags=["service"], summary="model, pooler, index size and backend, defaults, limits")
    def info() -> dict:
        return service.info()

    @app.get("/api/examples", tags=["service"], summary="example queries")
    def examples() -> dict:
        return {"examples": list(service.examples)}

    @app.get("/api/search", response_model=SearchResponse, tags=["search"], summary="search (query string)")
    def search_get(query: Optional[str] = Query(None, description="the query sentence"),
                   top_k: int = Query(DEFAULT_TOP_K, description="1..100"),
                   threshold: float = Query(DEFAULT_THRESHOLD, description="-1..1")) -> dict:
        if query is None:
            raise RequestError("query is missing; expected /api/search?query=<sentence>")
        return _search_response(service, query, top_k, threshold)

    @app.post("/api/search", response_model=SearchResponse, tags=["search"], summary="search (JSON body)")
    def search_post(req: SearchRequest) -> dict:
        return _search_response(service, req.query, req.top_k, req.threshold)

    @app.post("/api/search/batch", response_model=BatchSearchResponse, tags=["search"], summary="several queries")
    def search_batch(req: BatchSearchRequest) -> dict:
        queries = check_texts(req.queries, "queries", MAX_BATCH)
        top_k, threshold = check_top_k(req.top_k), check_threshold(req.threshold)
        results, ms = timed(service.search, queries, top_k, threshold)
        return {"top_k": top_k, "threshold": threshold, "elapsed_ms": ms,
                "results": [{"query": q, "results": r} for q, r in zip(queries, results)]}

    @app.get("/api/similarity", response_model=SimilarityResponse, tags=["similarity"], summary="cosine of two")
    def similarity_get(sentence1: Optional[str] = None, sentence2: Optional[str] = None) -> dict:
        for name, v in (("sentence1", sentence1), ("sentence2", sentence2)):
            if v is None:
                raise RequestError(f"{name} is missing; expected /api/similarity?sentence1=...&sentence2=...")
        return _similarity_response(service, sentence1, sentence2)

    @app.post("/api/similarity", response_model=SimilarityResponse, tags=["similarity"], summary="cosine of two")
    def similarity_post(req: SimilarityRequest) -> dict:
        return _similarity_response(service, req.sentence1, req.sentence2)

    @app.post("/api/encode", response_model=EncodeResponse, tags=["encode"], summary=f"vectors of 1..{MAX_ENCODE}")
    def encode(req: EncodeRequest) -> dict:
        sentences = check_texts(req.sentences, "sentences", MAX_ENCODE)
        emb, ms = timed(service.encode, sentences, req.normalize)
        return {"dim": int(emb.shape[1]), "normalized": req.normalize, "embeddings": emb.tolist(), "elapsed_ms": ms}


def create_app(service: SearchService | StartingService) -> FastAPI:
    """The FastAPI application serving ``service``: the page, its static files and the JSON API.

    Args:
        service: a :class:`simcse.serving.service.SearchService` (read-only; shared by all requests), or a
            :class:`simcse.serving.service.StartingService` whose index is still being built: the page, health and
            info answer at once, searches with 503 until it is ready.
    """
    app = FastAPI(title="simcse search", version=__version__, docs_url=None, redoc_url=None,
                  description="Semantic search over an indexed corpus with a SimCSE sentence encoder.")
    _add_error_handlers(app)
    _add_api_routes(app, service)
    page = (STATIC_DIR / "index.html").read_text(encoding="utf-8")

    @app.get("/", response_class=HTMLResponse, include_in_schema=False)
    def index_page() -> HTMLResponse:
        return HTMLResponse(page, headers={"Content-Security-Policy": CSP, "Cache-Control": "no-cache"})

    app.mount("/static", StaticFiles(directory=STATIC_DIR), name="static")
    app.add_middleware(RequestLimits)
    app.add_middleware(HeadAsGet)
    app.state.service = service
    return app
