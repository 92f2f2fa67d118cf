"""Run the rows of one of the paper's ablation tables under one step budget and print ours beside the paper's.

Each row is a config in ``configs/ablations/table<T>_<row>.json`` (a complete paper-scale training config,
runnable alone with ``python scripts/train.py <config>``, plus ``_table``, ``_row`` and ``_paper_stsb_dev``;
each lists only what differs from its ``base``, see :mod:`simcse.training.config`). The runner loads a table's configs, overrides the model, data and budget from its own options, trains each
row in turn, and evaluates the final model on STS-B dev: Spearman x 100 and, from the same embeddings,
alignment and uniformity (:func:`simcse.evaluation.analysis.pairs_alignment_uniformity`, positives = pairs with
gold > 4). It writes ``<output_dir>/table<T>.json``, one ``rows/<row>.json`` per finished row (a rerun skips
those unless ``--overwrite``), ``table<T>_training_curve.png`` (Figure 2 style: each row's path in the
(uniformity, alignment) plane from the untrained model to the final one) and ``table<T>_align_uniform.png``
(Figure 3 style, coloured by STS-B dev). ``--align_every N`` adds a measurement every N training steps to the
trajectories (:class:`simcse.training.callbacks.AlignUniformCallback`).

CPU scale (the embedded default, all-MiniLM-L6-v2 and the wiki1m stand-in)::

    python scripts/run_ablation.py --table 3 --max_steps 30 --num_threads 1

Paper scale (GPU; the configs' own schedule: evaluation every 125 steps, best checkpoint)::

    python scripts/run_ablation.py --table 3 --model_name_or_path bert-base-uncased --paper_scale

The paper's numbers are BERT-base, 1 epoch of 1M sentences, best-of-training checkpoints; a short run on a
small model measures the direction of an effect, not the paper's values.
"""
from __future__ import annotations

import argparse
import json
import re
import sys
import time
from pathlib import Path

from simcse.training.recipes import config_dir
from simcse.training.config import EMBEDDED_MODEL, load_config, resolve_model_name
from simcse.training.data import default_data_file

# the packaged configs (simcse/configs in a wheel, configs/ in a checkout), found by the one rule of recipes.config_dir
CONFIG_DIR = (config_dir() or Path(__file__).resolve().parents[2] / "configs") / "ablations"
TABLES = {
    "1": "Table 1: discrete augmentations vs dropout (unsupervised, STS-B dev)",
    "2": "Table 2: training objectives, one vs two encoders (unsupervised, STS-B dev)",
    "3": "Table 3: dropout probability p (unsupervised, STS-B dev)",
    "6": "Table 6: poolers with and without MLP (unsupervised and supervised, STS-B dev)",
    "7": "Table 7: hard negatives (supervised, STS-B dev)",
}
# training arguments the runner sets itself at CPU scale (the configs' evaluation/checkpoint schedule is off)
CPU_SCHEDULE = {"eval_strategy": "no", "save_strategy": "no", "load_best_model_at_end": False,
                "eval_before_training": False, "test_after_training": False, "logging_steps": 5,
                "dataloader_pin_memory": False, "report_to": "none"}


CPU_MAX_BATCH = 128


def load_rows(table: str, config_dir: Path = CONFIG_DIR) -> list[dict]:
    """The rows of ``table`` (``"1"``, ``"2"``, ``"3"``, ``"6"``, ``"7"``): one dict per config file, in file order.

    Each dict: ``slug`` (file name after ``table<T>_``), ``name``, ``paper`` (STS-B dev x 100, or None),
    ``note``, ``config`` (the training keys) and ``path``. Table 3's rows are sorted by p, "fixed" last.

    Raises:
        ValueError: an unknown table, or no config for it in ``config_dir``.
    """
    if table not in TABLES:
        raise ValueError(f"--table must be one of {sorted(TABLES)}, got {table!r}")
    rows = []
    for path in sorted(config_dir.glob(f"table{table}_*.json")):
        cfg = load_config(path)
        rows.append({
            "slug": path.stem[len(f"table{table}_"):],
            "name": cfg.get("_row", path.stem),
            "paper": cfg.get("_paper_stsb_dev"),
            "note": cfg.get("_comment"),
            "config": {k: v for k, v in cfg.items() if not k.startswith("_")},
            "path": str(path),
        })
    if not rows:
        raise ValueError(f"no config for table {table} in {config_dir}")
    if table == "3":
        rows.sort(key=lambda r: (r["config"].get("fixed_dropout", False), r["config"].get("dropout", 0.1)))
    return rows


def select_rows(rows: list[dict], wanted: list[str] | None) -> list[dict]:
    """Rows whose slug is in ``wanted`` (all when None), in table order; ``ValueError`` names unknown slugs."""
    if not wanted:
        return rows
    known = {r["slug"] for r in rows}
    unknown = [w for w in wanted if w not in known]
    if unknown:
        raise ValueError(f"unknown row(s) {unknown}; this table has {[r['slug'] for r in rows]}")
    return [r for r in rows if r["slug"] in wanted]


def row_train_file(row: dict, opts) -> str:
    """The training file a row will use: the runner's ``--train_file``/``--sup_train_file``, else the config's."""
    cfg_file = str(row["config"].get("train_file", ""))
    is_sup = cfg_file.endswith((".csv", ".csv.gz", ".tsv"))
    return (opts.sup_train_file if is_sup else opts.train_file) or cfg_file


# Files known to be unfit for a row's data need: the wiki1m sample is 10^6 unrelated sentences, not running text.
SHUFFLED_CORPORA = ("wiki1m_for_simcse.txt",)
CONSECUTIVE_SOURCE = ("a .txt of running text, one sentence per line in reading order, a blank line between "
                      "documents (e.g. a Wikipedia dump through wikiextractor and a sentence splitter)")
NEUTRAL_SOURCE = ("an NLI CSV sent0,sent1,hard_neg,neutral built from SNLI+MNLI (premise; entailment, "
                  "contradiction and neutral hypotheses)")


def check_row_data(row: dict, opts) -> str | None:
    """A one-line reason why ``row``'s training file cannot serve it, or None when it can (or is not checked).

    Table 2's next-sentence rows (``positives`` other than ``simcse``) need consecutive sentences; Table 7's
    "contradiction + neutral" row (``neutral_as_negative``) needs a ``neutral`` column. Only the file name (for the
    known shuffled wiki1m sample) and the CSV header are read.
    """
    from simcse.training.data import NEUTRAL_COLUMN
    from simcse.files.inputs import open_bytes

    cfg, path = row["config"], Path(row_train_file(row, opts))
    if cfg.get("positives", cfg.get("objective", "simcse")) != "simcse" and path.name in SHUFFLED_CORPORA:
        return (f"row {row['slug']!r} ({cfg.get('positives', cfg.get('objective'))}) needs consecutive sentences, but {str(path)!r} is a "
                f"sample of unrelated sentences; pass --train_file with {CONSECUTIVE_SOURCE}")
    if cfg.get("neutral_as_negative"):
        try:
            with open_bytes(path) as f:
                header = f.readline().decode("utf-8", "replace").strip()
        except OSError as e:
            return f"row {row['slug']!r} cannot read its train_file {str(path)!r}: {e.strerror or e}"
        columns = [c.strip().strip('"') for c in header.split("\t" if path.name.endswith(".tsv") else ",")]
        if NEUTRAL_COLUMN not in columns:
            return (f"row {row['slug']!r} needs a {NEUTRAL_COLUMN!r} column, but {str(path)!r} has columns "
                    f"{columns}; pass --sup_train_file with {NEUTRAL_SOURCE}")
    return None


def _cpu_batch(cfg: dict) -> int:
    """The per-device batch of a row at CPU scale: the paper's global batch, at most :data:`CPU_MAX_BATCH`."""
    return min(CPU_MAX_BATCH, cfg.get("global_batch_size") or cfg.get("per_device_train_batch_size", 64))


def row_argv(row: dict, opts, out_dir: Path) -> list[str]:
    """Training argv for one row: the row's config, then the runner's overrides (model, data, budget)."""
    cfg = dict(row["config"])
    cfg["output_dir"] = str(out_dir)
    if opts.model_name_or_path:
        cfg["model_name_or_path"] = opts.model_name_or_path
    cfg["train_file"] = row_train_file(row, opts)
    if opts.senteval_dir:
        cfg["senteval_dir"] = opts.senteval_dir
    if opts.per_device_train_batch_size is not None or not opts.paper_scale:
        # an explicit per-device batch (or the CPU-scale one) replaces the paper's global batch
        cfg["per_device_train_batch_size"] = opts.per_device_train_batch_size or _cpu_batch(cfg)
        cfg.pop("global_batch_size", None)
    for key in ("max_steps", "max_train_samples", "learning_rate", "seed",
                "max_seq_length", "per_device_eval_batch_size"):
        value = getattr(opts, key)
        if value is not None:
            cfg[key] = value
    if not opts.paper_scale:
        cfg.update(CPU_SCHEDULE)
    argv = []
    for k, v in cfg.items():  # a JSON object or list (a config's "loss_args") stays JSON on the command line
        argv += [f"--{k}", json.dumps(v) if isinstance(v, (dict, list)) else str(v)]
    return argv + list(opts.train_args)


def evaluate_stsb_dev(model, senteval_dir: str | None = None, batch_size: int = 128) -> dict:
    """STS-B dev Spearman x 100 (cosine) plus l_align / l_uniform of ``model``, from one encoding pass.

    Returns ``{"stsb_dev": float, "align": float, "uniform": float, "n_pos": int, "n_sentences": int}``.
    The Spearman equals :func:`simcse.evaluation.evaluate_sts_dev`'s ``stsb_spearman`` x 100 (same pairs,
    same cosine); alignment/uniformity are :func:`simcse.evaluation.analysis.stsb_alignment_uniformity` on dev.
    """
    from scipy.stats import spearmanr

    from simcse.evaluation.analysis import encode_pairs, pair_cosine, pairs_alignment_uniformity
    from simcse.evaluation.data import load_stsb

    pairs = load_stsb(senteval_dir, "dev")
    unique, e1, e2 = encode_pairs(lambda s: model.encode(s, batch_size=batch_size), pairs)
    out = pairs_alignment_uniformity(pairs.scores, unique, e1, e2)
    out["stsb_dev"] = 100.0 * float(spearmanr(pair_cosine(e1, e2), pairs.scores)[0])
    return out


def _slug_ok(slug: str) -> str:
    if not re.fullmatch(r"[A-Za-z0-9_.\-]+", slug):
        raise ValueError(f"bad row name {slug!r}")
    return slug


def run_row(row: dict, opts, out_root: Path) -> dict:
    """Train one row and evaluate its final model; returns the row's result record (also written to JSON)."""
    import torch
    from transformers import set_seed

    from simcse.training.train import SetupError, build, parse_args

    slug = _slug_ok(row["slug"])
    out_dir = out_root / "runs" / slug
    argv = row_argv(row, opts, out_dir)
    print(f"[ablation] {row['name']}: python scripts/train.py {' '.join(argv)}", flush=True)
    try:
        model_args, data_args, training_args = parse_args(argv)
        set_seed(training_args.seed)
        trainer = build(model_args, data_args, training_args)
    except SetupError as e:
        return {"slug": slug, "name": row["name"], "paper": row["paper"], "error": str(e)}
    curve_log = out_dir / "align_uniform.jsonl"
    if opts.align_every:
        from simcse.training.callbacks import AlignUniformCallback

        AlignUniformCallback.attach(trainer, every_n_steps=opts.align_every, data_dir=data_args.senteval_dir,
                                    at_start=False, log_file=curve_log)
    t0 = time.time()
    out = trainer.train()
    train_s = time.time() - t0  # includes the --align_every measurements
    if opts.save_models:
        trainer.save_model(str(out_dir))
    model = trainer.accelerator.unwrap_model(trainer.model)
    t1 = time.time()
    metrics = evaluate_stsb_dev(model, data_args.senteval_dir, batch_size=training_args.per_device_eval_batch_size)
    losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    record = {
        "slug": slug, "name": row["name"], "paper": row["paper"], **metrics,
        "steps": out.global_step, "train_s": round(train_s, 1), "eval_s": round(time.time() - t1, 1),
        "first_loss": losses[0] if losses else None, "last_loss": losses[-1] if losses else None,
        "argv": argv,
    }
    if opts.align_every and curve_log.is_file():
        from simcse.training.callbacks import read_align_uniform_log

        record["curve"] = [{k: r[k] for k in ("step", "align", "uniform")} for r in read_align_uniform_log(curve_log)]
    del trainer, model
    torch.cuda.empty_cache() if torch.cuda.is_available() else None
    return record


def run_baseline(opts, rows: list[dict]) -> dict:
    """The untrained starting model of the table's first row (its pooler; dropout plays no role in eval)."""
    from simcse.models.modeling import SimCSEModel

    cfg = rows[0]["config"]
    path = resolve_model_name(opts.model_name_or_path or cfg["model_name_or_path"])
    model = SimCSEModel.from_pretrained(path, pooler_type=cfg.get("pooler_type", "cls"),
                                        mlp_only_train=cfg.get("mlp_only_train", False), new_mlp_init="random")
    t0 = time.time()
    metrics = evaluate_stsb_dev(model, opts.senteval_dir)
    return {"slug": "untrained", "name": "untrained model (step 0)", "paper": None, **metrics, "steps": 0,
            "eval_s": round(time.time() - t0, 1)}


def format_table(table: str, records: list[dict]) -> str:
    """Markdown table: row, paper STS-B dev, ours, l_align, l_uniform, steps, seconds."""
    lines = [f"**{TABLES[table]}**", "",
             "| row | paper STS-B dev | ours STS-B dev | l_align | l_uniform | steps | train s |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    for r in records:
        if "error" in r:
            lines.append(f"| {r['name']} | {r['paper'] if r['paper'] is not None else '-'} | error: {r['error']} | | | | |")
            continue
        paper = f"{r['paper']:.1f}" if r.get("paper") is not None else "-"
        lines.append(f"| {r['name']} | {paper} | {r['stsb_dev']:.2f} | {r['align']:.4f} | {r['uniform']:.4f} | "
                     f"{r['steps']} | {r.get('train_s', '-')} |")
    return "\n".join(lines)


def make_plots(table: str, records: list[dict], out_root: Path) -> list[str]:
    """Figure-2-style trajectories (untrained -> [every --align_every steps] -> final, when the baseline was
    measured) and a Figure-3 scatter of the final models."""
    from simcse.research.plots import plot_align_uniform, plot_training_curve

    done = [r for r in records if "error" not in r and r["slug"] != "untrained"]
    if not done:
        return []
    base = next((r for r in records if r["slug"] == "untrained"), None)
    written = []
    if base is not None:
        runs = {}
        for r in done:
            points = {0: {"step": 0, "align": base["align"], "uniform": base["uniform"]}}
            for c in r.get("curve", []):  # --align_every measurements
                points[c["step"]] = c
            points[r["steps"]] = {"step": r["steps"], "align": r["align"], "uniform": r["uniform"]}
            runs[r["name"]] = [points[k] for k in sorted(points)]
        written.append(str(plot_training_curve(runs, out_root / f"table{table}_training_curve.png",
                                               title=f"Table {table}: untrained -> final (STS-B dev)")))
    pts = ([base] if base is not None else []) + done
    written.append(str(plot_align_uniform([r["name"] for r in pts], [r["align"] for r in pts],
                                          [r["uniform"] for r in pts], out_root / f"table{table}_align_uniform.png",
                                          sts=[r["stsb_dev"] for r in pts], sts_label="STS-B dev Spearman x100",
                                          title=f"Table {table} (STS-B dev)")))
    return written


def parse(argv: list[str] | None = None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog="Arguments after `--` go to every row's training command.")
    p.add_argument("--table", required=True, choices=sorted(TABLES))
    p.add_argument("--rows", nargs="+", help="row slugs to run (default: all), e.g. p0.0 p0.1 fixed0.1")
    p.add_argument("--output_dir", default=None, help="default result/ablations/table<T>")
    p.add_argument("--config_dir", default=str(CONFIG_DIR), help="folder of the table<T>_<row>.json configs")
    p.add_argument("--model_name_or_path", default=None, help="default: all-MiniLM-L6-v2 (CPU scale) or the configs' model (--paper_scale)")
    p.add_argument("--train_file", default=None, help="unsupervised corpus (default: simcse.training.data.default_data_file, "
                   "$SIMCSE_DATA_MIRROR/wiki1m_for_simcse.txt else data/...)")
    p.add_argument("--sup_train_file", default=None, help="NLI CSV for Tables 6 (sup) and 7 (default data/nli_for_simcse.csv)")
    p.add_argument("--senteval_dir", default=None, help="SentEval data/downstream (default: $SIMCSE_SENTEVAL_DIR, then the mirror)")
    p.add_argument("--max_steps", type=int, default=None)
    p.add_argument("--max_train_samples", type=int, default=None, help="default at CPU scale: max_steps x batch size")
    p.add_argument("--per_device_train_batch_size", type=int, default=None)
    p.add_argument("--per_device_eval_batch_size", type=int, default=None)
    p.add_argument("--learning_rate", type=float, default=None)
    p.add_argument("--max_seq_length", type=int, default=None)
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--paper_scale", action="store_true", help="keep the configs' model, data and schedule (GPU)")
    p.add_argument("--no_baseline", action="store_true", help="skip evaluating the untrained model")
    p.add_argument("--align_every", type=int, default=None,
                   help="also measure alignment/uniformity every N steps during training (Figure 2 has N = 10; "
                        "each measurement encodes STS-B dev once)")
    p.add_argument("--save_models", action="store_true", help="save each final model under <output_dir>/runs/<row>")
    p.add_argument("--overwrite", action="store_true", help="rerun rows that already have rows/<row>.json")
    p.add_argument("--num_threads", type=int, default=None, help="torch CPU threads (1 is fastest on a loaded 2-core machine)")
    own, _, rest = (argv if argv is not None else sys.argv[1:]), None, []
    if "--" in own:
        i = own.index("--")
        own, rest = own[:i], own[i + 1:]
    opts = p.parse_args(own)
    opts.train_args = rest
    return opts


def _cpu_scale_defaults(opts, rows: list[dict]) -> None:
    """Fill the CPU-scale defaults into ``opts``: the embedded model, the data files, a sample budget."""
    try:
        opts.model_name_or_path = resolve_model_name(opts.model_name_or_path or EMBEDDED_MODEL)
    except ValueError as e:
        raise SystemExit(f"error: {e}") from e
    opts.train_file = opts.train_file or str(default_data_file("wiki1m_for_simcse.txt"))
    opts.sup_train_file = opts.sup_train_file or str(default_data_file("nli_for_simcse.csv"))
    if opts.max_train_samples is None and opts.max_steps:
        opts.max_train_samples = opts.max_steps * (opts.per_device_train_batch_size or _cpu_batch(rows[0]["config"]))


def _cached_or_run(f: Path, overwrite: bool, run) -> tuple[dict, bool]:
    """``(record, cached)``: the record in ``f`` (unless ``overwrite``), else ``run()``'s, written to ``f``
    unless it is an error record."""
    if f.is_file() and not overwrite:
        return json.loads(f.read_text()), True
    record = run()
    if "error" not in record:
        f.write_text(json.dumps(record, indent=2) + "\n")
    return record, False


def run_table(opts, rows: list[dict], out_root: Path) -> list[dict]:
    """The untrained baseline (unless ``--no_baseline``) and every row, each reused from ``rows/`` when done."""
    records = []
    if not opts.no_baseline:
        rec, _ = _cached_or_run(out_root / "rows" / "untrained.json", opts.overwrite, lambda: run_baseline(opts, rows))
        records.append(rec)
        print(f"[ablation] untrained: STS-B dev {rec['stsb_dev']:.2f}", flush=True)
    for row in rows:
        f = out_root / "rows" / f"{_slug_ok(row['slug'])}.json"
        rec, cached = _cached_or_run(f, opts.overwrite, lambda: run_row(row, opts, out_root))
        records.append(rec)
        if cached:
            print(f"[ablation] {row['name']}: done before ({f})", flush=True)
        elif "error" in rec:
            print(f"[ablation] {row['name']}: error: {rec['error']}", flush=True)
        else:
            print(f"[ablation] {row['name']}: STS-B dev {rec['stsb_dev']:.2f} (paper {rec['paper']}), "
                  f"align {rec['align']:.4f}, uniform {rec['uniform']:.4f}, train {rec['train_s']} s, "
                  f"eval {rec['eval_s']} s", flush=True)
    return records


def main(argv: list[str] | None = None) -> list[dict]:
    """Run the table; returns the records (baseline first when measured)."""
    import logging

    opts = parse(argv)
    logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s", level=logging.WARNING)
    if opts.num_threads:
        import torch

        torch.set_num_threads(opts.num_threads)
    try:
        rows = select_rows(load_rows(opts.table, Path(opts.config_dir)), opts.rows)
    except ValueError as e:
        raise SystemExit(f"error: {e}") from e
    if not opts.paper_scale:
        _cpu_scale_defaults(opts, rows)
    problem = next((p for p in (check_row_data(r, opts) for r in rows) if p), None)
    if problem:  # before any row trains
        raise SystemExit(f"error: {problem}")
    out_root = Path(opts.output_dir or Path("result") / "ablations" / f"table{opts.table}")
    (out_root / "rows").mkdir(parents=True, exist_ok=True)
    t_start = time.time()
    records = run_table(opts, rows, out_root)
    summary = {"table": opts.table, "title": TABLES[opts.table], "wall_s": round(time.time() - t_start, 1),
               "command": "python scripts/run_ablation.py " + " ".join(argv if argv is not None else sys.argv[1:]),
               "rows": records}
    (out_root / f"table{opts.table}.json").write_text(json.dumps(summary, indent=2) + "\n")
    plots = make_plots(opts.table, records, out_root)
    print(format_table(opts.table, records))
    print(f"[ablation] wrote {out_root / f'table{opts.table}.json'} {' '.join(plots)}; {summary['wall_s']:.0f} s", flush=True)
    return records
