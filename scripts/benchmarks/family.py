"""The SimCSE family side by side: each method's CPU config trained for the unsupervised default's budget, then
scored on the test splits with 95% bootstrap intervals and compared with plain SimCSE on the same pairs.

    python -m scripts.benchmarks.family                                # the eight CPU configs, their 150 steps each
    python -m scripts.benchmarks.family --methods simcse esimcse --max_steps 20 --output_root result/family-20
    python -m scripts.benchmarks.family --reuse                        # score the folders already trained, train the rest

Each method is its CPU config (:data:`CONFIGS`: ``configs/<method>_cpu_minilm.json``; plain SimCSE is the embedded
unsupervised default ``configs/unsup_cpu_minilm.json``): the embedded all-MiniLM-L6-v2, the first 9,600 sentences of
the wiki file, batch 64, 32 tokens, learning rate 3e-5, seed 42, ``--bf16 auto``, STS-B dev evaluated every 50 steps
and the best checkpoint kept. Each run is ``bash scripts/run_unsup_example.sh`` with ``CONFIG``, ``OUTPUT_DIR``
(``<output_root>/<method>``) and, when given, ``MAX_STEPS``; its log goes to ``<output_root>/<method>.log``. Then
every saved model is scored by ``simcse evaluate --mode test --bootstrap N --compare_to <SimCSE's folder>`` on
STS-B and SICK-R test (``--tasks`` for others, e.g. the seven STS tasks): each Spearman with its percentile
bootstrap interval (:func:`simcse.evaluation.intervals.bootstrap_parts`) and the difference method - SimCSE with
its paired-bootstrap interval and p-value (:func:`simcse.evaluation.intervals.paired_bootstrap`). The table's
last columns are each run's own numbers from its log: STS-B dev before training and at the kept checkpoint, the
steps and the training wall time (``train_runtime``, evaluations during training included).

Training is timed: the script prints the 1-minute load average first and refuses to start on a busy machine
(:func:`scripts.benchmarks.common.check_idle`) unless ``--allow_busy``; the scores do not depend on the load.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

from scripts.benchmarks.common import REPO, add_busy_option, check_idle, checkout_env, int_at_least, load_line

CONFIGS: dict[str, str] = {
    "simcse": "configs/unsup_cpu_minilm.json",
    "esimcse": "configs/esimcse_cpu_minilm.json",
    "simcse_pp": "configs/simcse_pp_cpu_minilm.json",
    "mixcse": "configs/mixcse_cpu_minilm.json",
    "diffcse": "configs/diffcse_cpu_minilm.json",
    "infocse": "configs/infocse_cpu_minilm.json",
    "promptbert": "configs/promptbert_cpu_minilm.json",
    "rankcse": "configs/rankcse_cpu_minilm.json",
}
TASKS = ["STSBenchmark", "SICKRelatedness"]
SHORT = {"STSBenchmark": "STS-B", "SICKRelatedness": "SICK-R"}
_BEFORE = re.compile(r"before training \(dev[^)]*\): eval_stsb_spearman=([0-9.]+)")
_AFTER = re.compile(r"after training \(dev\): final_stsb_spearman=([0-9.]+)")
_TRAINED = re.compile(r"trained (\d+) steps.* in (\d+) s")


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--methods", nargs="+", default=list(CONFIGS), choices=list(CONFIGS), metavar="METHOD",
                   help=f"methods to train and score, of {list(CONFIGS)}; plain SimCSE (the baseline of the "
                        "comparisons) is always among them")
    p.add_argument("--max_steps", type=int_at_least(1), default=None,
                   help="step budget of every run (default: the configs' own, 150)")
    p.add_argument("--model", default=None,
                   help="start model of every run instead of the configs' embedded all-MiniLM-L6-v2 (RankCSE's teacher "
                        "stays its config's)")
    p.add_argument("--train_file", default=None, help="training sentences instead of the configs' wiki file")
    p.add_argument("--output_root", type=Path, default=Path("result/family"),
                   help="each method's model goes to OUTPUT_ROOT/METHOD, its log to OUTPUT_ROOT/METHOD.log")
    p.add_argument("--reuse", action="store_true",
                   help="score a method's folder without training when it already holds a trained model and its log")
    p.add_argument("--tasks", nargs="+", default=TASKS, help=f"STS tasks scored (default: {' '.join(TASKS)})")
    p.add_argument("--bootstrap", type=int_at_least(2), default=1000, help="bootstrap resamples (default 1000)")
    p.add_argument("--bootstrap_seed", type=int, default=1111, help="seed of the resampling (default 1111)")
    p.add_argument("--output_json", type=Path, default=None, help="write every number of the table here")
    add_busy_option(p)
    return p


def _trained(folder: Path, log: Path) -> bool:
    return (folder / "simcse_results.json").is_file() and log.is_file()


def train(method: str, args) -> float:
    """Train ``method``'s CPU config into ``output_root/method`` (log beside it); returns the wall seconds.

    Raises:
        SystemExit: the run failed (its log's last lines are printed, the log named).
    """
    folder, log = args.output_root / method, args.output_root / f"{method}.log"
    env = checkout_env(CONFIG=CONFIGS[method], OUTPUT_DIR=str(folder), TOKENIZERS_PARALLELISM="false")
    for var, value in (("MAX_STEPS", args.max_steps), ("MODEL", args.model), ("TRAIN_FILE", args.train_file)):
        if value is not None:
            env[var] = str(value)
    t0 = time.perf_counter()
    with open(log, "w", encoding="utf-8") as f:
        proc = subprocess.run(["bash", str(REPO / "scripts" / "run_unsup_example.sh")], cwd=REPO, env=env,
                              stdout=f, stderr=subprocess.STDOUT)
    if proc.returncode != 0:
        sys.stderr.write("".join(log.read_text(encoding="utf-8").splitlines(True)[-20:]))
        raise SystemExit(f"error: training {method} ({CONFIGS[method]}) failed with exit status {proc.returncode}; "
                         f"its log: {log}")
    return time.perf_counter() - t0


def log_numbers(log: Path) -> dict:
    """STS-B dev before training and after (the kept checkpoint), steps and training seconds from a run's log
    (None for a line the log lacks)."""
    text = log.read_text(encoding="utf-8", errors="replace")

    def last(rx):
        found = rx.findall(text)
        return found[-1] if found else None

    trained = last(_TRAINED)
    before, after = last(_BEFORE), last(_AFTER)
    return {"dev_before": float(before) if before else None, "dev_after": float(after) if after else None,
            "steps": int(trained[0]) if trained else None, "train_s": int(trained[1]) if trained else None}


def score(method: str, args) -> dict:
    """``simcse evaluate`` of ``method``'s folder on the test splits with intervals (and the paired comparison with
    SimCSE's folder, for the other methods); the command's JSON.

    Raises:
        SystemExit: the evaluation failed (its stderr tail is printed).
    """
    folder = args.output_root / method
    out = args.output_root / f"{method}.eval.json"
    cmd = [sys.executable, "-m", "simcse", "evaluate", "--model_name_or_path", str(folder), "--mode", "test",
           "--tasks", *args.tasks, "--bootstrap", str(args.bootstrap), "--bootstrap_seed", str(args.bootstrap_seed),
           "--quiet", "--output_json", str(out)]
    if method != "simcse":
        cmd += ["--compare_to", str(args.output_root / "simcse")]
    proc = subprocess.run(cmd, cwd=REPO, env=checkout_env(TOKENIZERS_PARALLELISM="false"), capture_output=True, text=True)
    if proc.returncode != 0:
        sys.stderr.write(proc.stderr[-3000:])
        raise SystemExit(f"error: scoring {method} ({folder}) failed with exit status {proc.returncode}")
    return json.loads(out.read_text(encoding="utf-8"))


def rows(method: str, ev: dict, logged: dict, tasks: list[str]) -> dict:
    """One method's numbers for the table, x 100: per task the score and interval, and (not SimCSE) the paired
    difference with SimCSE."""
    row = {"method": method, "config": CONFIGS[method], **logged, "tasks": {}}
    for task in tasks:
        low, high = ev["bootstrap"]["intervals"][task]
        cell = {"score": ev["tables"]["sts"][task], "low": low, "high": high}
        if "comparison" in ev:
            cell["vs_simcse"] = ev["comparison"]["tasks"][task]
        row["tasks"][task] = cell
    return row


def format_table(results: list[dict], tasks: list[str]) -> str:
    """The Markdown table: per method each task's score [interval], the difference with SimCSE [interval] and p,
    STS-B dev before / after, steps and training seconds."""
    head = ["method"]
    for t in tasks:
        name = SHORT.get(t, t)
        head += [f"{name} test", f"{name} - SimCSE", "p"]
    head += ["STS-B dev before / after", "steps", "train s", "s/step"]
    lines = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    for r in results:
        cells = [r["method"]]
        for t in tasks:
            c = r["tasks"][t]
            cells.append(f"{c['score']:.2f} [{c['low']:.2f}, {c['high']:.2f}]")
            d = c.get("vs_simcse")
            cells += ([f"{d['diff']:+.2f} [{d['low']:+.2f}, {d['high']:+.2f}]", f"{d['p_value']:.3f}"] if d else ["", ""])
        fmt = (lambda v: f"{100 * v:.2f}" if v is not None else "?")
        cells.append(f"{fmt(r['dev_before'])} / {fmt(r['dev_after'])}")
        cells += [str(r["steps"]), str(r["train_s"]),
                  f"{r['train_s'] / r['steps']:.2f}" if r["steps"] and r["train_s"] is not None else "?"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> list[dict]:
    args = _parser().parse_args(argv)
    from simcse.evaluation.engine import STS_TASKS

    bad = [t for t in args.tasks if t not in STS_TASKS]
    if bad:
        raise SystemExit(f"error: --tasks {' '.join(bad)}: not STS tasks ({', '.join(STS_TASKS)})")
    methods = ["simcse", *[m for m in dict.fromkeys(args.methods) if m != "simcse"]]
    args.output_root = args.output_root if args.output_root.is_absolute() else REPO / args.output_root
    args.output_root.mkdir(parents=True, exist_ok=True)
    todo = [m for m in methods if not (args.reuse and _trained(args.output_root / m, args.output_root / f"{m}.log"))]
    idle = check_idle(args.allow_busy) if todo else None
    t_all = time.perf_counter()
    for m in todo:
        seconds = train(m, args)
        n = log_numbers(args.output_root / f"{m}.log")
        print(f"{m:10s} trained {n['steps']} steps in {n['train_s']} s ({seconds:.0f} s with model load and the test "
              f"evaluation); STS-B dev {n['dev_before']} -> {n['dev_after']}; {load_line()}", flush=True)
    results = []
    for m in methods:
        ev = score(m, args)
        results.append(rows(m, ev, log_numbers(args.output_root / f"{m}.log"), args.tasks))
    budget = f"{args.max_steps} steps" if args.max_steps else "the configs' step budget"
    print(f"\nall-MiniLM-L6-v2, each method's CPU config, {budget}, batch 64, seed 42; Spearman x 100 on the test "
          f"splits [95% bootstrap interval, {args.bootstrap} resamples, seed {args.bootstrap_seed}]; method - SimCSE "
          "on the same pairs (paired bootstrap; an interval containing 0 is no difference)\n")
    print(format_table(results, args.tasks))
    print(f"\n{len(todo)} run(s) trained, whole benchmark {time.perf_counter() - t_all:.0f} s; at the end: {load_line()}"
          + ("; BUSY MACHINE at the start: timings not comparable" if idle and idle["busy"] else ""))
    if args.output_json:
        args.output_json.write_text(json.dumps({"results": results, "load_at_start": idle, "args": {
            "methods": methods, "max_steps": args.max_steps, "tasks": args.tasks, "bootstrap": args.bootstrap,
            "bootstrap_seed": args.bootstrap_seed}}, indent=2), encoding="utf-8")
    return results


if __name__ == "__main__":
    main()
