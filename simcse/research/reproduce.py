"""The SimCSE paper's central findings, re-measured on a raw (MLM-pretrained only) encoder, in one command.

    python -m simcse.research.reproduce --model_name_or_path result/raw-bert --output_dir result/reproduce-raw

Parts (``--parts``, default all, run in this order; each writes ``<output_dir>/<part>.json`` and a rerun
skips the parts already written unless ``--overwrite``; ``table3`` is re-assembled, its runner reading
finished rows back, so rows can be added in later runs):

* ``raw``: the untrained encoder with the ``avg``, ``cls_before_pooler`` and ``avg_first_last`` poolers and
  BERT-whitening of ``avg_first_last`` (fitted on the first ``--whitening_sentences`` lines of the training
  text), each on the 7 STS test sets (paper Tables 5/6 baselines; Table 1 of BERT-whitening).
* ``table3``: the dropout rows of Table 3 (p = 0, 0.01, 0.05, 0.1, 0.15, 0.2, 0.5, fixed 0.1) with
  :mod:`simcse.research.ablation`'s runner, STS-B dev of each final model, and Figure 2's alignment/uniformity every
  ``--align_every`` steps (``table3_training_curve.png``). The p = 0.1 row is unsupervised SimCSE with the
  paper's recipe (temp 0.05, ``cls`` + ``mlp_only_train``), scaled down to ``--steps`` steps; its model
  is saved and scored on the 7 STS test sets as the ``unsup`` row.
* ``sup``: supervised SimCSE (NLI triplets, hard negatives with weight 1, ``cls`` with the MLP kept),
  the same step budget, 7 STS test sets.
* ``spectrum``: anisotropy: the singular values of the STS-B dev embedding matrix (normalised to largest 1)
  and the average cosine between distinct sentences, raw vs trained (``spectrum.png``).

``summary.md`` collects the tables. Seeds: ``--seed`` for every training run (data order, dropout
masks, the random MLP); evaluation is deterministic.
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
from pathlib import Path

import numpy as np

logger = logging.getLogger("simcse.research.reproduce")

PARTS = ("raw", "table3", "sup", "spectrum")
RAW_POOLERS = ("avg", "cls_before_pooler", "avg_first_last")
STS_TASKS = ["STS12", "STS13", "STS14", "STS15", "STS16", "STSBenchmark", "SICKRelatedness"]
# BERT-base, 7-task STS test average and STS-B test (Spearman x 100): SimCSE Table 5 (first-last avg.,
# whitening, unsup, sup); "avg" and "cls" are Sentence-BERT's Table 1 rows "Avg. BERT embeddings" and
# "BERT CLS-vector"
PAPER_STS_AVG = {"avg": 54.81, "cls_before_pooler": 29.19, "avg_first_last": 56.70, "whitening": 66.28,
                 "unsup": 76.25, "sup": 81.57}
PAPER_STSB_TEST = {"avg": 46.35, "cls_before_pooler": 16.50, "avg_first_last": 53.87, "whitening": 68.24,
                   "unsup": 76.85, "sup": 84.25}


def _data_path(name: str) -> str:
    """``data/<name>`` in the working directory, else ``$SIMCSE_DATA_MIRROR/<name>`` (errors name the first)."""
    local = Path("data") / name
    mirror = os.environ.get("SIMCSE_DATA_MIRROR")
    if not local.exists() and mirror and (Path(mirror) / name).exists():
        return str(Path(mirror) / name)
    return str(local)


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--model_name_or_path", required=True, help="the raw encoder (e.g. scripts/pretrain_mlm.py's output)")
    p.add_argument("--output_dir", required=True)
    p.add_argument("--parts", nargs="+", choices=PARTS, default=list(PARTS))
    p.add_argument("--train_file", default=None, help="unsupervised text (default data/ or $SIMCSE_DATA_MIRROR wiki1m)")
    p.add_argument("--sup_train_file", default=None, help="NLI triplets CSV (default data/ or mirror nli_for_simcse.csv)")
    p.add_argument("--senteval_dir", default=None, help="SentEval data/downstream (default: see simcse.evaluation)")
    p.add_argument("--steps", type=int, default=250, help="training steps of every SimCSE run")
    p.add_argument("--batch_size", type=int, default=64)
    p.add_argument("--learning_rate", type=float, default=1e-4)
    p.add_argument("--max_seq_length", type=int, default=32)
    p.add_argument("--align_every", type=int, default=25, help="Figure 2: alignment/uniformity every N steps (0 = off)")
    p.add_argument("--table3_rows", nargs="+", default=None, help="Table 3 row slugs (default: all eight)")
    p.add_argument("--whitening_sentences", type=int, default=10000)
    p.add_argument("--sts_tasks", nargs="+", default=STS_TASKS, help="test sets for raw/unsup/sup rows")
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--bf16", action="store_true",
                   help="bfloat16 autocast in every SimCSE training run (CPU or GPU; evaluation stays fp32)")
    p.add_argument("--num_threads", type=int, default=None, help="torch CPU threads")
    p.add_argument("--overwrite", action="store_true", help="rerun parts whose JSON exists")
    args = p.parse_args(argv)
    for name in ("steps", "batch_size", "max_seq_length", "whitening_sentences"):
        if getattr(args, name) < 1:
            p.error(f"--{name} must be >= 1, got {getattr(args, name)}")
    if args.align_every < 0:
        p.error(f"--align_every must be >= 0, got {args.align_every}")
    args.train_file = args.train_file or _data_path("wiki1m_for_simcse.txt")
    args.sup_train_file = args.sup_train_file or _data_path("nli_for_simcse.csv")
    return args


# ------------------------------------------------------------------------------------------ scoring
def sts_scores(encode, tasks: list[str], senteval_dir: str | None) -> dict[str, float]:
    """Spearman x 100 on ``tasks`` (test sets; "Avg." when all 7) plus STS-B and SICK-R dev (``*_dev``)."""
    from simcse.evaluation import evaluate, evaluate_sts_dev, table_values

    out = dict(table_values(evaluate(encode, tasks, data_dir=senteval_dir, mode="test")).get("sts", {}))
    dev = evaluate_sts_dev(encode, senteval_dir)
    out["STSBenchmark_dev"] = round(100 * dev["stsb_spearman"], 2)
    out["SICKRelatedness_dev"] = round(100 * dev["sickr_spearman"], 2)
    return out


def _encoder(model, batch_size: int = 128):
    return lambda s: model.encode(s, batch_size=batch_size)


def run_raw(args) -> dict:
    """The raw encoder's poolers and BERT-whitening (of ``avg_first_last``) on the STS test sets."""
    from simcse.research.whitening import fit_whitening_on_file
    from simcse.models.modeling import SimCSEModel

    rows = {}
    for pooler in RAW_POOLERS:
        t0 = time.time()
        model = SimCSEModel.from_pretrained(args.model_name_or_path, pooler_type=pooler).eval()
        rows[pooler] = {**sts_scores(_encoder(model), args.sts_tasks, args.senteval_dir), "s": round(time.time() - t0, 1)}
        logger.info("raw %s: %s", pooler, rows[pooler])
    t0 = time.time()
    white = fit_whitening_on_file(_encoder(model), args.train_file, max_sentences=args.whitening_sentences)
    rows["whitening"] = {**sts_scores(lambda s: white.transform(model.encode(s, batch_size=128)), args.sts_tasks,
                                      args.senteval_dir), "dim": white.dim, "s": round(time.time() - t0, 1)}
    return rows


def _ablation_main():
    from simcse.research.ablation import main

    return main


def table3_rows(report: dict) -> list[dict]:
    """The rows of a Table 3 experiment's report (:func:`simcse.experiments.analyse`), one per arm, means over its
    finished seeds: ``slug``, ``name``, ``paper``, ``stsb_dev``, ``align``, ``uniform``, ``steps``, ``train_s``,
    ``curve`` (``--align_every``) and ``error`` (the first failed seed's log line)."""
    rows = []
    for slug, arm in report["arms"].items():
        stsb = arm["tasks"].get("STSBenchmark", {})
        errors = [s["error"] for s in arm["seeds"] if s.get("error")]
        rows.append({"slug": slug, "name": arm["label"], "paper": arm["paper"], "stsb_dev": stsb.get("mean"),
                     "align": arm["costs"]["align"], "uniform": arm["costs"]["uniform"],
                     "steps": arm["costs"]["steps"], "train_s": arm["costs"]["train_s"], "curve": arm["costs"]["curve"],
                     "error": (errors[0] if errors else "no finished seed") if stsb.get("mean") is None else None})
    return rows


def run_table3(args, out: Path) -> dict:
    """Table 3's rows under one budget (the experiment runner, one seed), then the p = 0.1 model on the STS test
    sets."""
    from simcse.models.modeling import SimCSEModel

    argv = ["--table", "3", "--model_name_or_path", args.model_name_or_path, "--output_dir", str(out / "table3"),
            "--train_file", args.train_file, "--max_steps", str(args.steps), "--per_device_train_batch_size",
            str(args.batch_size), "--seeds", str(args.seed)]
    argv += ["--senteval_dir", args.senteval_dir] if args.senteval_dir else []
    argv += ["--rows", *args.table3_rows] if args.table3_rows else []
    argv += ["--align_every", str(args.align_every)] if args.align_every else []
    # after "--": every row's training options
    argv += ["--", "--learning_rate", str(args.learning_rate), "--max_seq_length", str(args.max_seq_length)]
    argv += ["--bf16", "true"] if args.bf16 else []
    t0 = time.time()
    ran = _ablation_main()(argv)
    result = {"command": "python scripts/run_ablation.py " + " ".join(argv), "s": round(time.time() - t0, 1),
              "rows": table3_rows(ran["report"]) if ran.get("report") else []}
    unsup_dir = out / "table3" / "runs" / "p0.1" / f"seed{args.seed}" / "model"
    if (unsup_dir / "config.json").is_file():
        model = SimCSEModel.from_pretrained(str(unsup_dir)).eval()
        result["unsup"] = sts_scores(_encoder(model), args.sts_tasks, args.senteval_dir)
        result["unsup_model"] = str(unsup_dir)
    return result


def run_sup(args, out: Path) -> dict:
    """Supervised SimCSE (hard negatives, weight 1) for ``--steps`` steps; its model on the STS test sets."""
    from transformers import set_seed

    from simcse.models.modeling import SimCSEModel
    from simcse.training.train import build, parse_args

    run_dir = out / "sup"
    cfg = {"model_name_or_path": args.model_name_or_path, "train_file": args.sup_train_file,
           "output_dir": str(run_dir), "max_steps": args.steps, "max_train_samples": args.steps * args.batch_size,
           "per_device_train_batch_size": args.batch_size, "learning_rate": args.learning_rate,
           "max_seq_length": args.max_seq_length, "pooler_type": "cls", "mlp_only_train": False, "temp": 0.05,
           "hard_negative_weight": 0.0, "seed": args.seed, "eval_strategy": "no", "save_strategy": "no",
           "logging_steps": 10, "report_to": "none", "dataloader_pin_memory": False}
    argv = [a for k, v in cfg.items() for a in (f"--{k}", str(v))]
    argv += ["--bf16", "true"] if args.bf16 else []  # on a machine without CUDA, train.py adds --use_cpu true
    argv += ["--senteval_dir", args.senteval_dir] if args.senteval_dir else []
    model_args, data_args, training_args = parse_args(argv)
    set_seed(training_args.seed)
    trainer = build(model_args, data_args, training_args)
    t0 = time.time()
    trained = trainer.train()
    train_s = round(time.time() - t0, 1)
    trainer.save_model(str(run_dir))
    model = SimCSEModel.from_pretrained(str(run_dir)).eval()
    losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    return {"command": "python scripts/train.py " + " ".join(argv), "steps": trained.global_step, "train_s": train_s,
            "first_loss": losses[0] if losses else None, "last_loss": losses[-1] if losses else None,
            "scores": sts_scores(_encoder(model), args.sts_tasks, args.senteval_dir), "model": str(run_dir)}


def average_cosine(x: np.ndarray) -> float:
    """Mean cosine similarity over all ordered pairs of distinct rows of ``x`` (N, D), N >= 2."""
    from simcse.evaluation.analysis import l2_normalize

    u = l2_normalize(x)
    n = u.shape[0]
    total = float(np.square(u.sum(axis=0)).sum())  # sum over all (i, j) of cos, diagonal included (= n)
    return (total - n) / (n * (n - 1))


def run_spectrum(args, out: Path, models: dict[str, tuple[str, str | None]]) -> dict:
    """Singular spectrum and average cosine of STS-B dev embeddings for ``{label: (folder, pooler)}``."""
    from simcse.evaluation.analysis import encode_pairs, singular_spectrum
    from simcse.evaluation.data import load_stsb
    from simcse.models.modeling import SimCSEModel
    from simcse.evaluation.plots import plot_singular_spectra

    pairs = load_stsb(args.senteval_dir, "dev")
    rows, spectra = {}, {}
    for label, (path, pooler) in models.items():
        model = SimCSEModel.from_pretrained(path, pooler_type=pooler).eval()
        unique, _, _ = encode_pairs(_encoder(model), pairs)
        s = singular_spectrum(unique)
        spectra[label] = s
        rows[label] = {"avg_cosine": round(average_cosine(unique), 4), "sv2_over_sv1": round(float(s[1]), 4),
                       "sv10_over_sv1": round(float(s[min(9, len(s) - 1)]), 4), "n_sentences": len(unique)}
    figure = plot_singular_spectra(spectra, out / "spectrum.png", log_scale=True,
                                   title="STS-B dev embeddings: singular values (largest = 1)")
    return {"rows": rows, "figure": str(figure)}


# ------------------------------------------------------------------------------------------ report
def _sts_row(label: str, scores: dict, key: str) -> str:
    cells = [f"{scores[t]:.2f}" if t in scores else "-" for t in STS_TASKS + ["Avg.", "STSBenchmark_dev"]]
    return f"| {label} | " + " | ".join(cells) + f" | {PAPER_STSB_TEST[key]:.2f} | {PAPER_STS_AVG[key]:.2f} |"


def summary_markdown(results: dict) -> str:
    """The measured tables (STS test + dev, Table 3, anisotropy) as markdown."""
    head = "| model | " + " | ".join(STS_TASKS) + " | Avg. | STS-B dev | paper STS-B test | paper Avg. |"
    lines = ["### STS (Spearman x 100, test sets; STS-B dev; paper: BERT-base)", "", head, "|" + " --- |" * 12]
    for pooler, row in results.get("raw", {}).items():
        lines.append(_sts_row(f"raw, {pooler}", row, pooler))
    if "unsup" in results.get("table3", {}):
        lines.append(_sts_row("unsup SimCSE (p = 0.1)", results["table3"]["unsup"], "unsup"))
    if "sup" in results:
        lines.append(_sts_row("sup SimCSE (hard neg.)", results["sup"]["scores"], "sup"))
    if "table3" in results:
        lines += ["", "### Table 3 (STS-B dev, Spearman x 100)", "",
                  "| p | paper | ours | l_align | l_uniform | loss first -> last |", "| --- | --- | --- | --- | --- | --- |"]
        for r in results["table3"]["rows"]:
            if r.get("error"):
                lines.append(f"| {r['name']} | {r['paper']} | error: {r['error']} | | | |")
                continue
            loss = f"{r['first_loss']:.3g} -> {r['last_loss']:.3g}" if r.get("first_loss") is not None else "-"
            lines.append(f"| {r['name']} | {r['paper'] if r['paper'] is not None else '-'} | {r['stsb_dev']:.2f} | "
                         f"{r['align']:.4f} | {r['uniform']:.4f} | {loss} |")
    if "spectrum" in results:
        lines += ["", "### Anisotropy (STS-B dev sentences)", "", "| model | average cosine | s2/s1 | s10/s1 |",
                  "| --- | --- | --- | --- |"]
        for label, r in results["spectrum"]["rows"].items():
            lines.append(f"| {label} | {r['avg_cosine']:.4f} | {r['sv2_over_sv1']:.4f} | {r['sv10_over_sv1']:.4f} |")
    return "\n".join(lines) + "\n"


def _spectrum_models(args, results: dict) -> dict:
    models = {"raw, cls_before_pooler": (args.model_name_or_path, "cls_before_pooler"),
              "raw, avg": (args.model_name_or_path, "avg")}
    if results.get("table3", {}).get("unsup_model"):
        models["unsup SimCSE"] = (results["table3"]["unsup_model"], None)
    if results.get("sup", {}).get("model"):
        models["sup SimCSE"] = (results["sup"]["model"], None)
    return models


def main(argv: list[str] | None = None) -> dict:
    """Run the requested parts; returns ``{part: result}`` (also in ``<output_dir>/<part>.json``)."""
    logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s", level=logging.WARNING)
    args = parse(argv)
    if args.num_threads:
        import torch

        torch.set_num_threads(args.num_threads)
    out = Path(args.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    results = {}
    for part in PARTS:
        f = out / f"{part}.json"
        rerun = part in args.parts and (args.overwrite or part == "table3")  # the runner skips finished rows
        if f.is_file() and not rerun:
            results[part] = json.loads(f.read_text())
            continue
        if part not in args.parts:
            continue
        t0 = time.time()
        if part == "raw":
            results[part] = run_raw(args)
        elif part == "table3":
            results[part] = run_table3(args, out)
        elif part == "sup":
            results[part] = run_sup(args, out)
        else:
            results[part] = run_spectrum(args, out, _spectrum_models(args, results))
        f.write_text(json.dumps(results[part], indent=2) + "\n")
        print(f"[reproduce] {part} done in {time.time() - t0:.0f} s -> {f}", flush=True)
    text = summary_markdown(results)
    (out / "summary.md").write_text(text, encoding="utf-8")
    print(text, flush=True)
    return results


if __name__ == "__main__":
    sys.exit(0 if main() is not None else 1)
