"""The search service behind ``simcse serve``, without a web framework: the request limits and their checks,
:class:`RequestError`, :class:`SearchService` (thread-safe, read-only search over a :class:`simcse.SimCSE`
tool with an index) and :class:`StartingService` (what answers while the index is still being built). The FastAPI application (:mod:`simcse.serving.webapp`) calls it; the entry point that loads
the model and the index is :mod:`simcse.serving.serve`.
"""
from __future__ import annotations

import math
import threading
import time

from simcse.files.inputs import lone_surrogate
from simcse.training.config import EMBEDDED_MODEL
from simcse.version import __version__
from simcse.files.checks import is_integer

DEFAULT_TOP_K = 10
DEFAULT_THRESHOLD = 0.0
MAX_TOP_K = 100
MAX_TEXT_CHARS = 2_000  # one query or sentence (the model reads at most max_length tokens of it anyway)
MAX_BATCH = 32  # queries in one batch search
MAX_ENCODE = 64  # sentences in one encode request
MAX_BODY_BYTES = 1 << 20  # a request body above 1 MiB is refused before it is parsed
DEFAULT_MODEL_NAME = EMBEDDED_MODEL  # the name the page and /api/info show for the embedded default
EXAMPLES = (
    "A man is playing a guitar.",
    "The stock market fell sharply today.",
    "Who won the football world cup?",
    "The city was founded by the Romans.",
    "A new species of frog was discovered.",
    "The album reached number one on the charts.",
)


class RequestError(ValueError):
    """A request that cannot be answered: ``status`` is the HTTP status (4xx for a bad request, 503 for
    :class:`NotReady`) and the message says what was expected."""

    def __init__(self, message: str, status: int = 422):
        super().__init__(message)
        self.status = status


class NotReady(RequestError):
    """The server is still building its index, or could not (HTTP 503); the message says which and how far."""

    def __init__(self, message: str):
        super().__init__(message, status=503)


# ------------------------------------------------------------------------------------------- checks
def check_text(value, name: str) -> str:
    """``value`` if it is a str with a non-blank character and at most :data:`MAX_TEXT_CHARS` characters.

    Raises:
        RequestError (422): not a str, blank, too long, or holding a lone UTF-16 surrogate
            (:func:`simcse.files.inputs.lone_surrogate`; the message names ``name``, e.g. ``queries[2]``).
    """
    if not isinstance(value, str):
        raise RequestError(f"{name} must be a string, got {type(value).__name__}")
    if not value.strip():
        raise RequestError(f"{name} is empty; expected a sentence")
    if len(value) > MAX_TEXT_CHARS:
        raise RequestError(f"{name} has {len(value)} characters; at most {MAX_TEXT_CHARS} are allowed")
    bad = lone_surrogate(value)
    if bad is not None:
        raise RequestError(f"{name} holds {bad} (a \\u escape without its pair, e.g. an emoji cut in half); "
                           "expected valid Unicode text")
    return value


def check_texts(values, name: str, limit: int) -> list[str]:
    """A non-empty list of at most ``limit`` texts, each checked by :func:`check_text` as ``name[i]``."""
    if not isinstance(values, (list, tuple)):
        raise RequestError(f"{name} must be a list of strings, got {type(values).__name__}")
    if not values:
        raise RequestError(f"{name} is empty; expected 1 to {limit} sentences")
    if len(values) > limit:
        raise RequestError(f"{name} has {len(values)} items; at most {limit} are allowed")
    return [check_text(v, f"{name}[{i}]") for i, v in enumerate(values)]


def check_top_k(value) -> int:
    """``top_k`` as an int in [1, :data:`MAX_TOP_K`]; RequestError (422) otherwise."""
    if not is_integer(value):
        raise RequestError(f"top_k must be an integer, got {type(value).__name__}")
    if not 1 <= value <= MAX_TOP_K:
        raise RequestError(f"top_k must be between 1 and {MAX_TOP_K}, got {value}")
    return value


def check_threshold(value) -> float:
    """``threshold`` (a cosine) as a float in [-1, 1]; RequestError (422) otherwise (NaN included)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise RequestError(f"threshold must be a number, got {type(value).__name__}")
    if not (math.isfinite(value) and -1.0 <= value <= 1.0):
        raise RequestError(f"threshold must be a cosine between -1 and 1, got {value}")
    return float(value)


# ------------------------------------------------------------------------------------------ service
class SearchService:
    """Read-only, thread-safe search over a :class:`simcse.SimCSE` tool that holds an index.

    Encoding runs under one lock: a fast tokenizer's truncation settings and the model's train/eval flag
    are shared state, so two threads must not encode at once. The index is finalised and searched once
    at construction and never changed afterwards, so searching it needs no lock (numpy and faiss flat
    searches only read). Results are therefore the same whether requests come one by one or together.

    Args:
        tool: a :class:`simcse.SimCSE` with a non-empty index (``build_index`` / ``load_index`` done).
        model_name: the model's name shown on the page (default ``tool.model_name_or_path``).
        source: where the index came from (a folder or a text file), shown in :meth:`info`.
        examples: example queries for the page.
        dtype: compute dtype of query encoding (``torch.bfloat16`` or None for float32).

    Raises:
        ValueError: the tool has no index or an empty one.
    """

    def __init__(self, tool, model_name: str | None = None, source: str = "", examples=EXAMPLES, dtype=None):
        if tool.index is None or tool.index.ntotal == 0:
            raise ValueError("the tool has no index (or an empty one); build or load one before serving")
        self.tool = tool
        self.model_name = model_name or tool.model_name_or_path
        self.source = str(source)
        self.examples = [check_text(e, "example") for e in examples]
        self.dtype = dtype
        self._lock = threading.Lock()
        tool.index.finalize()
        tool.index.search(_unit_probe(tool.hidden_size), 1)  # joins numpy chunks now, not during a request

    def info(self) -> dict:
        """Model, pooler, index size and backend, limits and defaults (JSON-ready); ``status`` ``"ok"``."""
        return _info(self.tool, self.model_name, self.source, "ok", len(self.tool.sentences), self.tool.index.kind)

    def health(self) -> tuple[int, dict]:
        """(HTTP status, body) of ``GET /api/health``: 200 ``{"status": "ok"}``, searches are answered."""
        return 200, {"status": "ok"}

    def _encode(self, sentences: list[str], normalize: bool = True):
        """float32 (N, H) embeddings of ``sentences`` (unit rows when ``normalize``), one thread at a time."""
        with self._lock:
            return self.tool.encode(sentences, return_numpy=True, normalize_to_unit=normalize,
                                    show_progress=False, dtype=self.dtype)

    def search(self, queries: list[str], top_k: int = DEFAULT_TOP_K,
               threshold: float = DEFAULT_THRESHOLD) -> list[list[dict]]:
        """For each query, its ``top_k`` nearest indexed sentences with cosine >= ``threshold``, scored as
        :meth:`simcse.SimCSE.search` scores (:func:`simcse.retrieval.scoring.search_index`: in [-1, 1], an exact
        duplicate 1.0).

        Returns:
            one list per query of ``{"rank": 1.., "sentence": str, "score": float cosine}``, best first.
        """
        q = self._encode(queries)  # (Q, H) unit rows
        return [[{"rank": r, "sentence": self.tool.sentences[i], "score": s} for r, (i, s) in enumerate(hits, 1)]
                for hits in self.tool.search_vectors(q, top_k, threshold)]  # the tool's scoring path

    def similarity(self, sentence1: str, sentence2: str) -> float:
        """Cosine similarity of two sentences (float in [-1, 1]), as :meth:`simcse.SimCSE.similarity` computes it
        (a sentence's similarity with itself is 1.0)."""
        with self._lock:
            return float(self.tool.similarity(sentence1, sentence2, show_progress=False, dtype=self.dtype))

    def encode(self, sentences: list[str], normalize: bool = True):
        """float32 (N, H) embeddings, unit length unless ``normalize`` is False."""
        return self._encode(sentences, normalize)


class StartingService:
    """What ``simcse serve`` answers while its index is being built (by another thread), then the
    :class:`SearchService` it hands over: thread-safe.

    Until :meth:`ready`: ``/api/health`` answers 503 ``{"status": "indexing", "indexed", "total", "message":
    "indexing 3,000 / 10,000 sentences"}``, ``/api/info`` the model and the progress, and search, similarity and
    encode raise :class:`NotReady` (HTTP 503) with that progress. After :meth:`failed`, they say the index could not
    be built and why. After :meth:`ready`, every call goes to the :class:`SearchService`.

    Args:
        tool: the :class:`simcse.SimCSE` being indexed (its model is loaded).
        total: how many sentences will be indexed (for the progress line).
        model_name, source, examples: as :class:`SearchService`.
    """

    def __init__(self, tool, total: int, model_name: str | None = None, source: str = "", examples=EXAMPLES):
        self.tool = tool
        self.total = int(total)
        self.model_name = model_name or tool.model_name_or_path
        self.source = str(source)
        self.examples = [check_text(e, "example") for e in examples]
        self._lock = threading.Lock()
        self._indexed = 0
        self._service: SearchService | None = None
        self._error: str | None = None

    # ------------------------------------------------------------------- the indexing thread's calls
    def progress(self, indexed: int) -> None:
        """``indexed`` sentences are in the index so far."""
        with self._lock:
            self._indexed = int(indexed)

    def ready(self, service: SearchService) -> None:
        """The index is complete: from now on ``service`` answers."""
        with self._lock:
            self._service, self._indexed = service, len(service.tool.sentences)

    def failed(self, message: str) -> None:
        """The index could not be built (``message`` says why): requests get 503 with it."""
        with self._lock:
            self._error = message

    # --------------------------------------------------------------------------------- the requests
    @property
    def progress_line(self) -> str:
        """``"indexing 3,000 / 10,000 sentences"``."""
        return f"indexing {self._indexed:,} / {self.total:,} sentences"

    def _state(self) -> tuple[SearchService | None, str | None]:
        with self._lock:
            return self._service, self._error

    def _service_or_503(self) -> SearchService:
        service, error = self._state()
        if service is not None:
            return service
        if error is not None:
            raise NotReady(f"the index could not be built ({error}); this server cannot search")
        raise NotReady(f"the index is not ready yet ({self.progress_line}); searches are answered when it is done "
                       "(GET /api/health says when)")

    def health(self) -> tuple[int, dict]:
        """(HTTP status, body) of ``GET /api/health``: 503 while indexing or after a failure, then 200."""
        service, error = self._state()
        if service is not None:
            return service.health()
        if error is not None:
            return 503, {"status": "failed", "error": error}
        return 503, {"status": "indexing", "indexed": self._indexed, "total": self.total, "message": self.progress_line}

    def info(self) -> dict:
        """:meth:`SearchService.info`; while indexing, ``status`` ``"indexing"``, ``size`` the sentences indexed
        so far, ``total`` and ``backend`` None."""
        service, error = self._state()
        if service is not None:
            return service.info()
        out = _info(self.tool, self.model_name, self.source, "failed" if error else "indexing", self._indexed, None)
        out["total"] = self.total
        return out

    def search(self, *args, **kwargs):
        return self._service_or_503().search(*args, **kwargs)

    def similarity(self, *args, **kwargs):
        return self._service_or_503().similarity(*args, **kwargs)

    def encode(self, *args, **kwargs):
        return self._service_or_503().encode(*args, **kwargs)


def _info(tool, model_name: str, source: str, status: str, size: int, backend: str | None) -> dict:
    # "pooler": what encodes (cls_before_pooler for a cls model trained with mlp_only_train); "pooler_type": as recorded
    in_use = getattr(tool.model, "inference_pooler", tool.pooler)
    return {"status": status, "model": model_name, "model_path": tool.model_name_or_path, "pooler": in_use,
            "pooler_type": tool.pooler,
            "size": size, "backend": backend, "dim": tool.hidden_size, "source": source, "device": str(tool.device),
            "version": __version__, "defaults": {"top_k": DEFAULT_TOP_K, "threshold": DEFAULT_THRESHOLD},
            "limits": {"max_top_k": MAX_TOP_K, "max_text_chars": MAX_TEXT_CHARS, "max_batch": MAX_BATCH,
                       "max_encode": MAX_ENCODE, "max_body_bytes": MAX_BODY_BYTES}}


def _unit_probe(dim: int):
    import numpy as np

    v = np.zeros((1, dim), np.float32)
    v[0, 0] = 1.0
    return v


def timed(fn, *args, **kwargs) -> tuple[object, float]:
    """``(fn(*args, **kwargs), elapsed milliseconds)``."""
    t0 = time.perf_counter()
    out = fn(*args, **kwargs)
    return out, (time.perf_counter() - t0) * 1000.0


