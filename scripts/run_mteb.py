"""Run MTEB tasks with a simcse model (mteb 2.x).

    python scripts/run_mteb.py --model_name_or_path result/my-sup-simcse --tasks STS12 STSBenchmark
    python scripts/run_mteb.py --model_name_or_path M --local_senteval STSBenchmark:test SICKRelatedness:test
    python scripts/run_mteb.py --model_name_or_path M --backend onnx --tasks STS22

``--tasks`` are mteb task names: mteb downloads their data from the Hugging Face Hub (or reads its cache), so
they need the network once. ``--local_senteval TASK:SPLIT`` builds the STS-B / SICK-R task from the local
SentEval folder (``--data_dir``, else as ``scripts/evaluation.py`` finds it) and runs offline. One line per task
is printed: ``<task> main_score=<value>`` (mteb's main score, cosine Spearman for STS, as a fraction).
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout without installing


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model_name_or_path", required=True, help="model folder (or hub name when online)")
    p.add_argument("--pooler", default=None, help="pooler; default: the saved one")
    p.add_argument("--backend", choices=["torch", "onnx"], default="torch")
    p.add_argument("--onnx_file", default=None, help="with --backend onnx: simcse.onnx (default) or simcse_int8.onnx")
    p.add_argument("--tasks", nargs="*", default=[], help="mteb task names (data from the Hub)")
    p.add_argument("--local_senteval", nargs="*", default=[], metavar="TASK:SPLIT",
                   help="STSBenchmark:test, SICKRelatedness:dev... from the local SentEval folder (offline)")
    p.add_argument("--data_dir", default=None, help="SentEval data/downstream folder")
    p.add_argument("--batch_size", type=int, default=64)
    p.add_argument("--device", default=None)
    p.add_argument("--output_folder", default=None, help="mteb results cache folder (default: results not saved)")
    p.add_argument("--output_json", default=None, help="write {task: main score} here")
    args = p.parse_args(argv)
    if not args.tasks and not args.local_senteval:
        p.error("give --tasks and/or --local_senteval")
    for spec in args.local_senteval:
        if spec.count(":") != 1:
            p.error(f"--local_senteval {spec!r}: expected TASK:SPLIT, e.g. STSBenchmark:test")
    if args.batch_size < 1:
        p.error(f"--batch_size must be a positive integer, got {args.batch_size}")
    return args


def main(argv=None) -> dict:
    args = parse_args(argv)
    from simcse import SimCSE
    from simcse.evaluation.mteb_protocol import run_tasks, senteval_sts_task

    try:
        tasks = [senteval_sts_task(*spec.split(":"), data_dir=args.data_dir) for spec in args.local_senteval]
    except (ValueError, FileNotFoundError) as e:
        sys.exit(f"error: {e}")
    tasks += list(args.tasks)
    extra = {"file_name": args.onnx_file} if args.backend == "onnx" and args.onnx_file else {}
    tool = SimCSE(args.model_name_or_path, device=args.device, pooler=args.pooler, backend=args.backend, **extra)
    scores = run_tasks(tool, tasks, output_folder=args.output_folder, batch_size=args.batch_size)
    for name, score in scores.items():
        print(f"{name} main_score={score:.6f}")
    if args.output_json:
        Path(args.output_json).write_text(json.dumps(scores, indent=2) + "\n")
    return scores


if __name__ == "__main__":
    main()
