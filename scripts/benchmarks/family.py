"""The SimCSE family side by side at the unsupervised default's budget, over seeds: the packaged experiment spec
``family_cpu`` (each method's CPU config, 150 steps) run by :mod:`simcse.experiments`, with this command's
methods, budget, model, data and seeds over it.

    python -m scripts.benchmarks.family                                # the eight CPU configs, 3 seeds each
    python -m scripts.benchmarks.family --methods simcse esimcse --max_steps 20 --output_dir result/family-20
    python -m scripts.benchmarks.family --seeds 42                     # one seed (the former one-run table)

Each method is an arm: its CPU config (``configs/<method>_cpu_minilm.json``; plain SimCSE is the embedded
unsupervised default ``configs/unsup_cpu_minilm.json``): the embedded all-MiniLM-L6-v2, the first 9,600 sentences of
the wiki file, batch 64, 32 tokens, learning rate 3e-5, ``--bf16 auto``, STS-B dev evaluated every 50 steps and the
best checkpoint kept. The report (``<output_dir>/report.md``, ``report.json``, ``report.png``) gives each method's
STS-B and SICK-R test per seed, the mean with its 95% hierarchical interval (seeds and test pairs), each method -
SimCSE paired by seed, l_align / l_uniform, steps, training seconds, training examples/s and peak memory; its header
names the model the runs started from. A rerun continues the folder: finished runs are kept, a folder trained with
other settings is refused, naming the setting.

Training is timed: after the spec and the folder are checked, the script prints the 1-minute load average and
refuses to start on a busy machine (:func:`scripts.benchmarks.common.check_idle`) unless ``--allow_busy``; the
scores do not depend on the load.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run from a checkout without installing

from scripts.benchmarks.common import add_busy_option, check_idle, int_at_least  # noqa: E402

SPEC = "family_cpu"


def methods() -> list[str]:
    """The methods of the packaged spec (its arms), SimCSE first."""
    return list(_packaged()["arms"])


def _packaged() -> dict:
    import json

    from simcse.experiments.spec import resolve_spec

    return json.loads(resolve_spec(SPEC).read_text(encoding="utf-8"))


def family_spec(methods_: list[str] | None = None, max_steps: int | None = None, model: str | None = None,
                train_file: str | None = None, seeds: list[int] | None = None, tasks: list[str] | None = None,
                bootstrap: int | None = None) -> dict:
    """The ``family_cpu`` spec with these settings over it: ``methods_`` (SimCSE, the baseline, always kept),
    every run's step budget (``max_train_samples`` follows: steps x 64), start model (RankCSE's teacher stays its
    config's), training file, seeds, STS tasks and bootstrap resamples."""
    raw = _packaged()
    if methods_:
        keep = {raw["baseline"], *methods_}
        raw["arms"] = {a: v for a, v in raw["arms"].items() if a in keep}
    opts = dict(raw.get("options", {}))
    if max_steps:
        opts.update(max_steps=max_steps, max_train_samples=max_steps * 64)
    if model:
        opts["model_name_or_path"] = model
    if train_file:
        opts["train_file"] = train_file
    raw["options"] = opts
    if seeds:
        raw["seeds"] = list(seeds)
    raw["evaluation"] = {**raw["evaluation"], **({"tasks": tasks} if tasks else {}),
                         **({"bootstrap": bootstrap} if bootstrap else {})}
    return raw


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    names = methods()
    p.add_argument("--methods", nargs="+", default=None, choices=names, metavar="METHOD",
                   help=f"methods to train and score, of {names} (default: all); plain SimCSE (the baseline of the "
                        "comparisons) is always among them")
    p.add_argument("--max_steps", type=int_at_least(1), default=None,
                   help="step budget of every run (default: the configs' own, 150)")
    p.add_argument("--model", default=None,
                   help="start model of every run instead of the configs' embedded all-MiniLM-L6-v2 (RankCSE's teacher "
                        "stays its config's)")
    p.add_argument("--train_file", default=None, help="training sentences instead of the configs' wiki file")
    p.add_argument("--seeds", nargs="+", type=int, default=None, help="seeds (default: the spec's 42 1 2)")
    p.add_argument("--output_dir", type=Path, default=Path("result/family"),
                   help="the experiment folder (a rerun continues it; default result/family)")
    p.add_argument("--tasks", nargs="+", default=None, help="STS tasks scored (default: STSBenchmark SICKRelatedness)")
    p.add_argument("--bootstrap", type=int_at_least(2), default=None, help="bootstrap resamples (default 1000)")
    p.add_argument("--parallel", type=int_at_least(1), default=1, help="runs at a time, the CPUs split among them")
    add_busy_option(p)
    return p


def main(argv: list[str] | None = None) -> dict:
    """Run the family spec with the command's settings; returns :func:`simcse.experiments.run_experiment`'s result.
    Bad input stops in one ``error:`` line before anything trains."""
    from simcse.experiments.experiment import run_built_spec

    args = _parser().parse_args(argv)
    raw = family_spec(args.methods, args.max_steps, args.model, args.train_file, args.seeds, args.tasks, args.bootstrap)
    return run_built_spec(raw, args.output_dir, f"{SPEC} (scripts.benchmarks.family)", parallel=args.parallel,
                          before_runs=lambda runs: check_idle(args.allow_busy))


if __name__ == "__main__":
    main()
