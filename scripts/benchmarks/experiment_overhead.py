"""The experiment runner's own cost per run: one run of a tiny grid through ``simcse experiment run`` against
the same two commands (``simcse train``, then the scoring process) typed by hand.

    python -m scripts.benchmarks.experiment_overhead                  # the embedded model, 20 steps, 3 repeats
    python -m scripts.benchmarks.experiment_overhead --max_steps 5 --repeats 1 --allow_busy   # a smoke run
    python -m scripts.benchmarks.experiment_overhead --model DIR --train_file FILE   # another model / sentence file

Both sides train the packaged ``smoke_cpu`` spec's ``simcse`` arm (seed 1) with ``--max_steps``; the runner's side
is a fresh ``--output_dir`` each repeat (so it trains and scores, as a first run of a grid does). The difference
of the medians is the runner's overhead per run: the spec check, the run folder's JSON files and the progress
poll. Timings need an idle machine (``--allow_busy`` to run anyway; the output then says ``busy``).
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run from a checkout without installing

from scripts.benchmarks.common import add_busy_option, check_idle  # noqa: E402


def _timed(cmd: list[str]) -> float:
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - t0


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--max_steps", type=int, default=20, help="training steps of the one run (default 20)")
    p.add_argument("--repeats", type=int, default=3, help="repeats of each side (default 3)")
    p.add_argument("--model", default=None, help="model folder or name (default: the spec's, all-MiniLM-L6-v2)")
    p.add_argument("--train_file", default=None, help="one sentence per line (default: the spec's wiki1m file)")
    add_busy_option(p)
    args = p.parse_args(argv)
    idle = check_idle(args.allow_busy)
    from simcse.experiments import runs as R
    from simcse.experiments.spec import load_spec, write_json_atomic

    bare, runner = [], []
    with tempfile.TemporaryDirectory(prefix="exp_overhead_") as tmp:
        raw = json.loads(Path(load_spec("smoke_cpu", check=False).path).read_text())
        raw["options"]["max_steps"] = args.max_steps
        for key, value in (("model_name_or_path", args.model), ("train_file", args.train_file)):
            if value:
                raw["options"][key] = str(Path(value).resolve()) if Path(value).exists() else value
        raw["arms"] = {"simcse": {}}
        raw["seeds"] = [1]
        spec_file = Path(tmp) / "spec.json"
        spec_file.write_text(json.dumps(raw))
        run = load_spec(spec_file).runs()[0]
        for k in range(args.repeats):
            d = Path(tmp) / f"bare{k}"
            d.mkdir()
            write_json_atomic(d / "config.json", run.options)
            bare.append(_timed(R.train_command(run, d)) + _timed(R.score_command(run, d)))
            runner.append(_timed([sys.executable, "-m", "simcse", "experiment", "run", str(spec_file),
                                  "--output_dir", str(Path(tmp) / f"runner{k}"), "--no_report"]))
    out = {"max_steps": args.max_steps, "repeats": args.repeats, "bare_s": bare, "runner_s": runner,
           "overhead_s": statistics.median(runner) - statistics.median(bare), **idle}
    print(f"bare commands: median {statistics.median(bare):.1f} s; through the runner: median "
          f"{statistics.median(runner):.1f} s; overhead per run {out['overhead_s']:+.1f} s"
          + (" (busy machine)" if idle.get("busy") else ""))
    print("RESULT " + json.dumps(out))
    return out


if __name__ == "__main__":
    main()
