"""Bounded load test of ``simcse serve`` on loopback: throughput, latency percentiles, errors, consistency.

    python -m scripts.benchmarks.serve                          # starts `simcse serve` (the default) itself
    python -m scripts.benchmarks.serve --url http://127.0.0.1:8000   # a server already running here
    python -m scripts.benchmarks.serve --serve-args "--index idx"    # start it with these arguments

1. Sequential pass: each of ``--queries`` distinct queries (lines of the wiki file after the first 10,000,
   i.e. sentences that are not in the default index) is sent once, one at a time; its results are kept.
2. Load: ``--clients`` concurrent clients (one keep-alive connection each) send ``--requests`` GET
   /api/search requests in all, cycling through the same queries. It stops by itself after the last request
   or after ``--max-seconds`` (unsent requests are then reported as not sent).
3. Report: requests sent, errors (non-200 answers or failed connections), answers that differ from the
   sequential pass, wall time, throughput (requests/s), client-side latency p50/p90/p99/max, the
   server's own ``elapsed_ms`` p50, and the load average of the machine before and after.

Only loopback addresses are accepted. Client-side latency includes waiting for the server: requests are
encoded one at a time under a lock (see ``simcse.serving.service.SearchService``), so with 16 clients a request
mostly waits for the ~15 ahead of it and p50 is about 16 x the time of one search.
"""
from __future__ import annotations

import argparse
import asyncio
import itertools
import os
import sys
import time
from pathlib import Path

import numpy as np

from scripts.benchmarks.common import add_busy_option, api_get, check_idle, check_loopback, default_data, int_at_least, start_server


def load_queries(path: Path, n: int, skip: int) -> list[str]:
    """``n`` non-blank lines of ``path`` after the first ``skip`` non-blank ones, stripped."""
    with open(path, encoding="utf-8") as f:
        lines = (s for s in (line.strip() for line in f) if s)
        out = list(itertools.islice(lines, skip, skip + n))
    if len(out) < n:
        raise SystemExit(f"error: {path} has fewer than {skip + n} non-blank lines")
    return out


def _key(results: list[dict]) -> list[tuple]:
    return [(h["rank"], h["sentence"], h["score"]) for h in results]


async def load(url: str, queries: list[str], reference: dict, clients: int, requests: int, top_k: int,
               threshold: float, max_seconds: float) -> dict:
    """Send ``requests`` searches from ``clients`` concurrent clients; per-request latency and outcome."""
    import httpx

    counter = itertools.count()
    latencies, server_ms = [], []
    errors, mismatches, examples = 0, 0, []
    deadline = time.monotonic() + max_seconds

    async def client(http):
        nonlocal errors, mismatches
        while (i := next(counter)) < requests and time.monotonic() < deadline:
            q = queries[i % len(queries)]
            t0 = time.perf_counter()
            try:
                r = await http.get(f"{url}/api/search", params={"query": q, "top_k": top_k, "threshold": threshold})
                ok = r.status_code == 200
                body = r.json() if ok else None
            except (httpx.HTTPError, ValueError) as e:
                ok, body = False, None
                r = e
            latencies.append(time.perf_counter() - t0)
            if not ok:
                errors += 1
                if len(examples) < 3:
                    examples.append(repr(r)[:200])
                continue
            server_ms.append(body["elapsed_ms"])
            if _key(body["results"]) != reference[q]:
                mismatches += 1

    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    async with httpx.AsyncClient(limits=limits, timeout=120) as http:
        t0 = time.perf_counter()
        await asyncio.gather(*(client(http) for _ in range(clients)))
        wall = time.perf_counter() - t0
    return {"latencies": np.array(latencies), "server_ms": np.array(server_ms), "errors": errors,
            "mismatches": mismatches, "wall": wall, "error_examples": examples}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--url", default=None, help="a running server on loopback (default: start one)")
    p.add_argument("--serve-args", default="", help="arguments for `simcse serve` when it is started here")
    p.add_argument("--clients", type=int_at_least(1), default=16)
    p.add_argument("--requests", type=int_at_least(1), default=2000)
    p.add_argument("--queries", type=int_at_least(1), default=200, help="distinct queries (cycled)")
    p.add_argument("--query-file", default=None, help="queries, one a line (default: the wiki file after line 10,000)")
    p.add_argument("--top-k", type=int_at_least(1), default=10)
    p.add_argument("--threshold", type=float, default=0.0)
    p.add_argument("--max-seconds", type=float, default=900, help="stop sending after this long")
    add_busy_option(p)
    args = p.parse_args(argv)
    check_idle(args.allow_busy)

    if args.query_file:
        queries = load_queries(Path(args.query_file), args.queries, 0)
    else:
        queries = load_queries(default_data(), args.queries, 10_000)
    proc, url = (None, check_loopback(args.url)) if args.url else start_server(args.serve_args.split())
    try:
        info = api_get(url, "/api/info")
        load_before = os.getloadavg()
        seq_lat, reference = [], {}
        for q in queries:  # sequential pass: the reference answers (and a warm-up)
            t0 = time.perf_counter()
            body = api_get(url, "/api/search", query=q, top_k=args.top_k, threshold=args.threshold)
            seq_lat.append(time.perf_counter() - t0)
            if "results" not in body:
                raise SystemExit(f"error: the sequential pass failed: {body}")
            reference[q] = _key(body["results"])
        res = asyncio.run(load(url, queries, reference, args.clients, args.requests, args.top_k, args.threshold,
                               args.max_seconds))
        load_after = os.getloadavg()
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait(timeout=30)
    lat_ms = res["latencies"] * 1000
    sent = len(lat_ms)
    p50, p90, p99 = np.percentile(lat_ms, [50, 90, 99])
    print(f"server: model {info['model']} ({info['pooler']}), {info['size']:,} sentences, {info['backend']}, "
          f"device {info['device']}; top_k={args.top_k} threshold={args.threshold}")
    print(f"sequential: {len(queries)} queries, p50 {np.median(seq_lat) * 1000:.1f} ms")
    print(f"load: {args.clients} clients, {sent} of {args.requests} requests sent in {res['wall']:.1f} s "
          f"({args.requests - sent} not sent)")
    print(f"throughput {sent / res['wall']:.1f} requests/s; latency p50 {p50:.1f} ms, p90 {p90:.1f} ms, "
          f"p99 {p99:.1f} ms, max {lat_ms.max():.1f} ms; p99/p50 {p99 / p50:.2f}; "
          f"server time p50 {np.median(res['server_ms']):.1f} ms")
    print(f"errors {res['errors']}; answers differing from the sequential pass {res['mismatches']}"
          + (f"; e.g. {res['error_examples']}" if res["error_examples"] else ""))
    print(f"load average (1, 5, 15 min) before {tuple(round(x, 2) for x in load_before)}, "
          f"after {tuple(round(x, 2) for x in load_after)}; {os.cpu_count()} CPUs")
    print(f"serve_load clients={args.clients} requests={sent} errors={res['errors']} "
          f"mismatches={res['mismatches']} throughput_rps={sent / res['wall']:.1f} p50_ms={p50:.1f} p99_ms={p99:.1f}")
    return 0 if res["errors"] == 0 and res["mismatches"] == 0 and sent == args.requests else 1


if __name__ == "__main__":
    sys.exit(main())
