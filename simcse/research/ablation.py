"""The paper's ablation tables as experiments: ``python scripts/run_ablation.py --table 3 ...`` picks the packaged
spec ``configs/experiments/ablation_table<T>.json``, applies this command's model, data, budget and seeds to it,
and runs it with :mod:`simcse.experiments` (the runner, its folders, resume and report live there only).

Each row of a table is a config in ``configs/ablations/table<T>_<row>.json`` (a complete paper-scale training
config, runnable alone with ``python scripts/train.py <config>``, plus ``_table``, ``_row`` and
``_paper_stsb_dev``) and an arm of the table's spec. The report (``<output_dir>/report.md``) gives per row the
STS-B dev Spearman of every seed, the mean with its interval, the paper's number beside it, l_align / l_uniform,
steps, training examples/s and peak memory, each row against the table's baseline row paired by seed, and the
figures ``training_curve.png`` (Figure 2 style: untrained -> final in the (uniformity, alignment) plane) and
``align_uniform.png`` (Figure 3 style).

CPU scale (the spec's own options: all-MiniLM-L6-v2, the wiki1m stand-in, 30 steps)::

    python scripts/run_ablation.py --table 3 --seeds 42

Paper scale (GPU; the configs' own model, data and schedule: evaluation every 125 steps, best checkpoint)::

    python scripts/run_ablation.py --table 3 --paper_scale --gpus_per_run 1

The paper's numbers are BERT-base, 1 epoch of 1M sentences, best-of-training checkpoints; a short run on a
small model measures the direction of an effect, not the paper's values.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

TABLES = {
    "1": "Table 1: discrete augmentations vs dropout (unsupervised, STS-B dev)",
    "2": "Table 2: training objectives, one vs two encoders (unsupervised, STS-B dev)",
    "3": "Table 3: dropout probability p (unsupervised, STS-B dev)",
    "6": "Table 6: poolers with and without MLP (unsupervised and supervised, STS-B dev)",
    "7": "Table 7: hard negatives (supervised, STS-B dev)",
}
SUPERVISED_SUFFIXES = (".csv", ".csv.gz", ".tsv")


def table_spec_raw(table: str) -> dict:
    """The packaged spec of ``table`` (``"1"``, ``"2"``, ``"3"``, ``"6"``, ``"7"``) as its JSON object.

    Raises:
        ValueError: an unknown table.
    """
    from simcse.experiments.spec import resolve_spec

    if table not in TABLES:
        raise ValueError(f"--table must be one of {sorted(TABLES)}, got {table!r}")
    return json.loads(resolve_spec(f"ablation_table{table}").read_text(encoding="utf-8"))


def _is_supervised(raw: dict, arm: dict) -> bool:
    """Whether an arm trains on NLI triplets: its own train_file, else its config's, is a CSV."""
    from simcse.training.config import load_config
    from simcse.training.recipes import resolve_config

    if "train_file" in arm:
        return str(arm["train_file"]).endswith(SUPERVISED_SUFFIXES)
    cfg = load_config(resolve_config(arm.get("config") or raw["base"]))
    return str(cfg.get("train_file", "")).endswith(SUPERVISED_SUFFIXES)


def table_spec(table: str, rows: list[str] | None = None, seeds: list[int] | None = None,
               model_name_or_path: str | None = None, train_file: str | None = None,
               sup_train_file: str | None = None, senteval_dir: str | None = None, max_steps: int | None = None,
               per_device_train_batch_size: int | None = None, paper_scale: bool = False, baseline: bool = True,
               options: dict | None = None) -> dict:
    """The spec (a JSON object for :func:`simcse.experiments.parse_spec`) that runs ``table`` with these settings.

    Args:
        rows: the arms to keep (row names as in the configs' file names), in table order; None: all.
        seeds: replaces the spec's seeds. model_name_or_path: every row's start model.
        train_file / sup_train_file: the unsupervised rows' / the supervised rows' training file.
        max_steps: every row's budget; at CPU scale ``max_train_samples`` follows (steps x each row's batch).
        per_device_train_batch_size: every row's batch (default: the spec's, 64 unsupervised, 128 supervised).
        paper_scale: drop the spec's CPU options (the configs' own model, data, batch and schedule).
        baseline: keep the ``untrained`` arm (the starting point of the figures).
        options: further ``simcse train`` options for every row (e.g. ``{"loss": "dcl"}``).

    Raises:
        ValueError: an unknown table or row (naming the table's rows).
    """
    raw = table_spec_raw(table)
    arms = raw["arms"]
    if rows:
        unknown = [r for r in rows if r not in arms or arms[r].get("kind") == "untrained"]
        if unknown:
            raise ValueError(f"unknown row(s) {unknown}; table {table} has "
                             f"{[a for a, v in arms.items() if v.get('kind') != 'untrained']}")
        arms = {a: v for a, v in arms.items() if a in rows or v.get("kind") == "untrained"}
        raw["baseline"] = raw["baseline"] if raw["baseline"] in rows else rows[0]
    arms = {a: dict(v) for a, v in arms.items() if baseline or v.get("kind") != "untrained"}
    supervised = {a for a, v in arms.items() if v.get("kind") != "untrained" and _is_supervised(raw, v)}
    opts = {} if paper_scale else dict(raw.get("options", {}))
    own_batch = ("per_device_train_batch_size", "max_train_samples")
    for a in arms:
        for key in (("train_file", *own_batch) if paper_scale else own_batch if per_device_train_batch_size else ()):
            arms[a].pop(key, None)  # paper scale: the configs' own data and batch; a given batch: every row's
    if model_name_or_path:
        opts["model_name_or_path"] = model_name_or_path
    for a in arms:
        given = sup_train_file if a in supervised else train_file if arms[a].get("kind") != "untrained" else None
        if given:
            arms[a]["train_file"] = given
    if senteval_dir:
        opts["senteval_dir"] = senteval_dir
    if per_device_train_batch_size:
        opts.update(per_device_train_batch_size=per_device_train_batch_size, global_batch_size=None)
    if max_steps:
        opts["max_steps"] = max_steps
    if not paper_scale and (max_steps or per_device_train_batch_size):
        steps = opts.get("max_steps")
        opts["max_train_samples"] = steps * opts.get("per_device_train_batch_size", 64) if steps else None
        for a in arms:
            if "per_device_train_batch_size" in arms[a]:
                arms[a]["max_train_samples"] = steps * arms[a]["per_device_train_batch_size"] if steps else None
    opts.update(options or {})
    raw.update(options=opts, arms=arms, name=f"ablation_table{table}" + ("_paper" if paper_scale else ""))
    if seeds:
        raw["seeds"] = list(seeds)
    return raw


def _pairs(args: list[str]) -> dict:
    """``simcse train`` arguments after ``--`` (``--key value`` pairs) as spec options; JSON values stay JSON."""
    out, i = {}, 0
    while i < len(args):
        key = args[i]
        if not key.startswith("--") or i + 1 >= len(args) or args[i + 1].startswith("--"):
            raise ValueError(f"arguments after '--' must be '--option value' pairs; got {' '.join(args[i:i + 2])!r}")
        value = args[i + 1]
        try:
            out[key[2:]] = json.loads(value) if value[:1] in "{[" else value
        except ValueError:
            out[key[2:]] = value
        i += 2
    return out


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line of ``scripts/run_ablation.py`` (arguments after ``--`` in ``train_args``)."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog="Arguments after `--` go to every row's training options.")
    p.add_argument("--table", required=True, choices=sorted(TABLES))
    p.add_argument("--rows", nargs="+", help="rows to run (default: all), e.g. p0.0 p0.1 fixed0.1")
    p.add_argument("--seeds", nargs="+", type=int, default=None, help="seeds (default: the spec's 42 1 2)")
    p.add_argument("--output_dir", default=None, help="the experiment folder (default result/ablations/table<T>)")
    p.add_argument("--model_name_or_path", default=None,
                   help="every row's start model (default: the spec's all-MiniLM-L6-v2, or the configs' at --paper_scale)")
    p.add_argument("--train_file", default=None, help="the unsupervised rows' corpus (default: the spec's wiki1m)")
    p.add_argument("--sup_train_file", default=None, help="the NLI CSV of Tables 6 (sup) and 7 (default: the spec's)")
    p.add_argument("--senteval_dir", default=None, help="SentEval data/downstream (default: the evaluator's)")
    p.add_argument("--max_steps", type=int, default=None, help="every row's budget (default: the spec's 30)")
    p.add_argument("--per_device_train_batch_size", type=int, default=None,
                   help="every row's batch (default: 64 unsupervised, 128 supervised)")
    p.add_argument("--paper_scale", action="store_true", help="keep the configs' model, data and schedule (GPU)")
    p.add_argument("--no_baseline", action="store_true", help="leave out the untrained model (and the figures)")
    p.add_argument("--align_every", type=int, default=0,
                   help="also measure alignment/uniformity every N training steps (Figure 2 has N = 10; each "
                        "measurement encodes STS-B dev once): simcse train --align_uniform_every N")
    p.add_argument("--executor", choices=["local", "slurm"], default="local", help="as simcse experiment run")
    p.add_argument("--parallel", type=int, default=1, help="as simcse experiment run")
    p.add_argument("--gpus_per_run", type=int, default=0, help="as simcse experiment run")
    p.add_argument("--print_spec", action="store_true", help="print the spec and exit (run it with simcse experiment)")
    own, rest = (argv if argv is not None else sys.argv[1:]), []
    if "--" in own:
        i = own.index("--")
        own, rest = own[:i], own[i + 1:]
    opts = p.parse_args(own)
    opts.train_args = rest
    return opts


def main(argv: list[str] | None = None) -> dict:
    """Build the table's spec and run it (:func:`simcse.experiments.run_experiment`); returns its result. Bad input
    (an unknown row, a row whose data cannot serve it, a folder of other settings) stops in one ``error:`` line
    before any row trains."""
    from simcse.experiments.experiment import run_built_spec

    opts = parse(argv)
    try:
        raw = table_spec(opts.table, opts.rows, opts.seeds, opts.model_name_or_path, opts.train_file,
                         opts.sup_train_file, opts.senteval_dir, opts.max_steps, opts.per_device_train_batch_size,
                         opts.paper_scale, not opts.no_baseline,
                         {**({"align_uniform_every": opts.align_every} if opts.align_every else {}),
                          **_pairs(opts.train_args)})
    except ValueError as e:
        raise SystemExit(f"error: {e}") from None
    if opts.print_spec:
        print(json.dumps(raw, indent=2))
        return {"spec": raw}
    out = Path(opts.output_dir or Path("result") / "ablations" / f"table{opts.table}")
    return run_built_spec(raw, out, f"ablation_table{opts.table} (run_ablation)", executor=opts.executor,
                          parallel=opts.parallel, gpus_per_run=opts.gpus_per_run)
