"""GPU training speed and MFU on a randomly initialised BERT-base-shaped encoder: ours (padding-free and padded)
against sentence-transformers, in the same run on the same device.

    python -m scripts.benchmarks.gpu                                   # on a CUDA machine (timings: docs/performance.md)
    python -m scripts.benchmarks.gpu --device cpu --shape tiny --batch-sizes 8 --warmup 1 --steps 1   # smoke test

Needs no downloaded weights or data, so it runs on a machine with no network: the encoder is a random
``BertModel`` of the chosen shape (``base``: 12 layers, hidden 768, 12 heads, FFN 3072, vocabulary 30522),
the tokenizer is a WordPiece vocabulary written by the script, and the sentences are synthetic (10 to 40
words, a fixed seed), unless ``--data`` gives a text file. For every batch size and every variant it runs one
``scripts/benchmarks/train.py`` worker (unsupervised SimCSE, mean pooling, temperature 0.05 / scale 20,
``--max-seq-length`` 32, bf16 by default, the HF Trainer loop on both sides):

* ``ours``: our trainer with its default padding-free forward;
* ``compiled``: the same with ``--torch_compile true``: the work around the matrix products (bias + GELU, dropout +
  residual + LayerNorm, the autocast casts) fused by inductor, against ``ours`` run eagerly (compile time falls in
  the warm-up steps; a new token count may compile again);
* ``padded``: our trainer with ``--padding_free false`` (every padded position computed);
* ``st``: sentence-transformers' ``SentenceTransformerTrainer`` with ``MultipleNegativesRankingLoss``.

It reports sentences/s, seconds per step, peak GPU memory and model FLOPs utilisation (useful FLOPs of the
real, non-padded tokens, :func:`simcse.research.flops.model_flops`) against the bf16 (or fp32) shape-matched GEMM
ceiling measured on the same device around each batch size's runs: the encoder's own linear-layer products at the
batch's real token count, warmed up, best of several passes, before and after the runs, measured again while the
two disagree by more than 10% (``--max-extra`` times at most; ``scripts.benchmarks.common``). Every measurement line
carries the 1-minute load average. ``--json PATH`` rewrites PATH after every row, so a run cut
short keeps the rows it finished. The last line is machine-readable (``speedup_vs_st`` =
sentence-transformers' s/step over ours)::

    gpu_train device=<name> precision=bf16 batch64_sent_s=... batch64_mfu=... batch64_padded_sent_s=... batch64_st_sent_s=... batch64_speedup_vs_st=... batch512_...
"""
from __future__ import annotations

import argparse
import datetime
import json
import random
import tempfile
from pathlib import Path

from scripts.benchmarks.common import (format_ceiling, int_at_least, int_list_at_least, load_avg, real_tokens_per_step,
                                       run_train_worker, settle_ceilings)
from simcse.files.storage import write_text_atomic
from simcse.models.testing import WORDS, tiny_encoder
from simcse.research.flops import encoder_shape, model_flops

LABEL = {"ours": "simcse padding-free", "compiled": "simcse padding-free, torch.compile", "padded": "simcse padded",
         "st": "sentence-transformers"}
SHAPES = {
    "base": dict(layers=12, hidden=768, heads=12, intermediate=3072),
    "tiny": dict(layers=2, hidden=64, heads=4, intermediate=128),
}
VARIANTS = {"ours": ["--side", "ours"], "compiled": ["--side", "ours", "--ours-args", "--torch_compile", "true"],
            "padded": ["--side", "ours", "--ours-args", "--padding_free", "false"], "st": ["--side", "st"]}


def make_model(folder: Path, shape: str) -> None:
    """Save a random BERT of ``shape`` (embedding table of BERT-base's 30522 rows, 512 positions) and a WordPiece
    tokenizer over :data:`simcse.models.testing.WORDS` into ``folder`` (:func:`simcse.models.testing.tiny_encoder`)."""
    tiny_encoder(folder, **SHAPES[shape], positions=512, vocab_size=30522)


def synthetic_sentences(n: int, seed: int = 0) -> list[str]:
    """``n`` distinct sentences of 10-40 words from :data:`WORDS` (numbered, so no two are equal)."""
    rng = random.Random(seed)
    return [f"{' '.join(rng.choice(WORDS) for _ in range(rng.randint(10, 40)))} {i} ." for i in range(n)]


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="cuda", help="cuda, cuda:N, or cpu (a smoke test)")
    p.add_argument("--shape", default="base", choices=sorted(SHAPES))
    p.add_argument("--batch-sizes", type=int_list_at_least(2), default="64,512")
    p.add_argument("--max-seq-length", type=int_at_least(2), default=32)
    p.add_argument("--precision", default="bf16", choices=["bf16", "fp32"])
    p.add_argument("--warmup", type=int_at_least(1), default=5)
    p.add_argument("--steps", type=int_at_least(1), default=20)
    p.add_argument("--threads", type=int_at_least(1), default=4, help="torch CPU threads (data side)")
    p.add_argument("--data", type=Path, default=None, help="one sentence per line (default: synthetic sentences)")
    p.add_argument("--variants", default="ours,padded,st",
                   help=f"comma-separated, of {','.join(VARIANTS)}: ours padding-free, ours padded, sentence-transformers")
    p.add_argument("--json", type=Path, default=None, help="write the results here after every row")
    p.add_argument("--max-extra", type=int_at_least(0), default=2,
                   help="extra ceiling measurements when the ceilings before and after a run disagree by more than 10%%")
    args = p.parse_args(argv)
    variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    if not variants or any(v not in VARIANTS for v in variants):
        p.error(f"--variants: expected a comma-separated subset of {','.join(VARIANTS)}, got {args.variants!r}")

    import torch

    if args.device.startswith("cuda") and not torch.cuda.is_available():
        p.error(f"--device {args.device}: no CUDA device is visible (use --device cpu for a smoke test)")
    name = torch.cuda.get_device_name(args.device) if args.device.startswith("cuda") else "cpu"
    with tempfile.TemporaryDirectory(prefix="bench_gpu_") as tmp:
        folder = Path(tmp) / "model"
        folder.mkdir()
        make_model(folder, args.shape)
        data = args.data
        if data is None:
            data = Path(tmp) / "sentences.txt"
            data.write_text("\n".join(synthetic_sentences(max(args.batch_sizes) * (args.warmup + args.steps))) + "\n",
                            encoding="utf-8")
        shape = encoder_shape(str(folder))
        common = ["--model", str(folder), "--data", str(data), "--device", args.device, "--threads", str(args.threads),
                  "--max-seq-length", str(args.max_seq_length), "--warmup", str(args.warmup), "--steps", str(args.steps)]
        data_lines = [x for x in data.read_text(encoding="utf-8").splitlines() if x.strip()]
        square = ["--gemm-square", "256"] if args.shape == "tiny" else []  # a smoke test needs no large square
        print(f"{datetime.date.today()} device={name} shape={args.shape} ({shape['layers']} layers, hidden "
              f"{shape['hidden']}) precision={args.precision} max_seq_length={args.max_seq_length} {load_avg()}",
              flush=True)
        print(f"| batch | side | sentences/s | s/step | peak GPU MiB | real tokens/step | {args.precision} shape-matched "
              "GEMM ceiling TFLOP/s | MFU |")
        print("|---|---|---|---|---|---|---|---|")
        summary, rows = {}, {}
        result = {"device": name, "ceiling": {}, "runs": summary, "variants": rows,
                  "args": json.loads(json.dumps(vars(args), default=str))}
        for batch in args.batch_sizes:
            # the shape-matched ceiling: the encoder's linear-layer products at this batch's real token count,
            # measured before and after the batch's runs (again while they disagree by more than 10%, bounded)
            tokens = real_tokens_per_step(str(folder), data_lines[:batch * (args.warmup + args.steps)], batch,
                                          args.max_seq_length)
            gemm = common + ["--gemm", "--gemm-tokens", str(tokens)] + square

            def measure(when: str) -> dict:
                c = run_train_worker(gemm)
                print(f"batch {batch}: GEMM ceiling ({when}, {tokens} tokens): {format_ceiling(c)}, {load_avg()}",
                      flush=True)
                return c

            before = measure("before")
            runs = {v: run_train_worker(common + ["--precision", args.precision, "--batch-size", str(batch)] + VARIANTS[v])
                    for v in variants}
            ceilings, _, _ = settle_ceilings(before, lambda: measure("after"), args.max_extra)
            ceiling = result["ceiling"][batch] = ceilings[args.precision]["model"]
            for variant, d in runs.items():
                s_step = d["wall_s"] / d["steps"]
                mfu = model_flops(shape, d["tokens"], d["sum_sq"]) / d["steps"] / s_step / ceiling
                row = {"sent_s": batch / s_step, "s_step": s_step, "mfu": mfu, "ceiling": ceiling,
                       "peak_gpu_mib": d.get("peak_gpu_mib"), "tokens_per_step": d["tokens"] / d["steps"],
                       "padded_tokens_per_step": d["padded_tokens"] / d["steps"], "attn": d.get("attn"),
                       "padding_free": d.get("padding_free")}
                rows.setdefault(batch, {})[variant] = row
                if variant == "ours":
                    summary[batch] = {k: row[k] for k in ("sent_s", "s_step", "mfu", "ceiling")}
                gpu = f"{row['peak_gpu_mib']:.0f}" if row["peak_gpu_mib"] is not None else "n/a"
                print(f"| {batch} | {LABEL[variant]} | {batch / s_step:.1f} | {s_step:.4f} | {gpu} | "
                      f"{row['tokens_per_step']:.0f} | {ceiling / 1e12:.2f} | {100 * mfu:.1f}% |", flush=True)
            if args.json:
                _write_json(args.json, result)
    fields = []
    for b, by_variant in rows.items():
        for variant, v in by_variant.items():
            key = f"batch{b}" if variant == "ours" else f"batch{b}_{variant}"
            fields.append(f"{key}_sent_s={v['sent_s']:.1f} {key}_mfu={v['mfu']:.3f}")
        if "ours" in by_variant and "st" in by_variant:
            fields.append(f"batch{b}_speedup_vs_st={by_variant['st']['s_step'] / by_variant['ours']['s_step']:.2f}")
        if "ours" in by_variant and "compiled" in by_variant:
            fields.append(f"batch{b}_compiled_vs_eager={by_variant['ours']['s_step'] / by_variant['compiled']['s_step']:.2f}")
    print(f"gpu_train device={name.replace(' ', '_')} precision={args.precision} {' '.join(fields)}")
    return result


def _write_json(path: Path, result: dict) -> None:
    """Rewrite ``path`` with ``result`` (:func:`simcse.files.storage.write_text_atomic`: never half-written)."""
    write_text_atomic(path, json.dumps(result, indent=2, default=str) + "\n")


if __name__ == "__main__":
    main()
