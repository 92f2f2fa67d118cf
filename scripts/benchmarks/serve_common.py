"""Helpers shared by scripts/screenshot_serve.py and scripts/benchmark_serve.py: start `simcse serve` on a
free loopback port and call its JSON API (standard library only)."""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "[::1]")


def check_loopback(url: str) -> str:
    """``url`` without a trailing slash if it is an http URL on this machine's loopback; SystemExit otherwise."""
    parsed = urllib.parse.urlsplit(url)
    host = parsed.hostname or ""
    if parsed.scheme != "http" or not (host in ("localhost", "::1") or host.startswith("127.")):
        raise SystemExit(f"error: --url {url!r} must be http://127.x.x.x:PORT, http://localhost:PORT or http://[::1]:PORT")
    return url.rstrip("/")


def api_get(base_url: str, path: str, **params) -> dict:
    """GET ``base_url + path`` with query ``params``; the decoded JSON (any status)."""
    url = f"{base_url}{path}?{urllib.parse.urlencode(params)}" if params else base_url + path
    try:
        with urllib.request.urlopen(url, timeout=60) as r:
            return json.loads(r.read())
    except urllib.error.HTTPError as e:
        return json.loads(e.read())


def start_server(serve_args: list[str], timeout: float = 1800) -> tuple[subprocess.Popen, str]:
    """Start ``python -m simcse serve SERVE_ARGS`` on a free loopback port; (process, base URL) once healthy."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
    proc = subprocess.Popen([sys.executable, "-m", "simcse", "serve", *serve_args, "--host", "127.0.0.1",
                             "--port", str(port)], cwd=REPO, env=env)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"error: simcse serve exited with status {proc.returncode}")
        try:
            if api_get(url, "/api/health") == {"status": "ok"}:
                return proc, url
        except OSError:
            time.sleep(0.5)
    proc.kill()
    raise SystemExit(f"error: simcse serve did not answer within {timeout:.0f} s")
