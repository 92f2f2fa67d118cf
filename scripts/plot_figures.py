"""Make the paper's analysis figures from saved models or a training metrics log.

    # Figure 3: models in the alignment-uniformity plane, coloured by STS (from --sts_avg, else from each
    # model folder's simcse_results.json)
    python scripts/plot_figures.py --figure align_uniform --models out/a out/b --out fig3.png
    # many models close together: one marker each, the labels in a legend (all-MiniLM-L6-v2: the embedded model)
    python scripts/plot_figures.py --figure align_uniform --models all-MiniLM-L6-v2 out/a out/b --legend --out f.png
    # Figure 2: alignment/uniformity during training (the AlignUniformCallback's log)
    python scripts/plot_figures.py --figure training_curve --log out/a/align_uniform.jsonl --out fig2.png
    # Figure F.1: singular spectra of the STS-B sentence embeddings
    python scripts/plot_figures.py --figure spectrum --models M M --poolers avg cls_before_pooler --out f1.png
    # Figure G.1: cosine distributions of STS-B pairs by gold-score group
    python scripts/plot_figures.py --figure cosine_bins --models M --out g1.png

The numbers behind each figure are printed as JSON (and written to --json FILE if given).
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout without installing

FIGURES = ("align_uniform", "training_curve", "spectrum", "cosine_bins")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--figure", required=True, choices=FIGURES)
    p.add_argument("--out", required=True, help="output .png path")
    p.add_argument("--models", nargs="+", default=[],
                   help="saved SimCSE model folders (or HF encoder folders; all-MiniLM-L6-v2: the embedded CPU model)")
    p.add_argument("--poolers", nargs="+", default=None,
                   help="pooler per model (or one for all); default: the one saved with each model")
    p.add_argument("--labels", nargs="+", default=None, help="legend label per model (or per --log file)")
    p.add_argument("--log", nargs="+", default=[], help="align_uniform.jsonl file(s) for --figure training_curve")
    p.add_argument("--sts_avg", nargs="+", type=float, default=None,
                   help="align_uniform: STS score per model for the colours (default: each folder's simcse_results.json)")
    p.add_argument("--color_by_stsb", action="store_true",
                   help="align_uniform: colour by the STS-B Spearman x100 of --split, from the same embeddings")
    p.add_argument("--legend", action="store_true",
                   help="align_uniform: one marker per model, labels in a legend (for many close points)")
    p.add_argument("--data_dir", default=None, help="SentEval data/downstream folder (STS-B lives under STS/STSBenchmark)")
    p.add_argument("--split", default="dev", choices=("train", "dev", "test", "all"), help="STS-B split")
    p.add_argument("--center", action="store_true", help="spectrum: centre the embedding matrix first")
    p.add_argument("--l2_normalize", action="store_true", help="spectrum: unit-normalise rows first")
    p.add_argument("--log_scale", action="store_true", help="spectrum: log y axis")
    p.add_argument("--batch_size", type=int, default=64)
    p.add_argument("--max_length", type=int, default=128)
    p.add_argument("--device", default=None, help="e.g. cuda; default: cpu")
    p.add_argument("--title", default=None)
    p.add_argument("--json", default=None, help="also write the numbers to this JSON file")
    return p


def _per_model(values, n: int, what: str, parser) -> list:
    if values is None:
        return [None] * n
    if len(values) == 1:
        return list(values) * n
    if len(values) != n:
        parser.error(f"--{what} needs 1 value or one per model ({n}), got {len(values)}")
    return list(values)


def _labels(args, n: int, defaults: list[str], parser) -> list[str]:
    if args.labels is None:
        return defaults
    if len(args.labels) != n:
        parser.error(f"--labels needs {n} values, got {len(args.labels)}")
    return list(args.labels)


def _saved_sts(model_dir: str) -> float | None:
    f = Path(model_dir) / "simcse_results.json"
    if not f.is_file():
        return None
    after = json.loads(f.read_text()).get("after", {})
    value = after.get("final_avg_sts", after.get("eval_avg_sts"))  # eval_: folders written by older versions
    return None if value is None else 100.0 * float(value)


def _encoders(args, parser):
    """Yield (label, encode) per model."""
    from simcse import SimCSEModel
    from simcse.training.config import resolve_model_name

    if not args.models:
        parser.error(f"--figure {args.figure} needs --models")
    poolers = _per_model(args.poolers, len(args.models), "poolers", parser)
    defaults = [Path(m).name + (f" ({p})" if p else "") for m, p in zip(args.models, poolers)]
    labels = _labels(args, len(args.models), defaults, parser)
    for path, pooler, label in zip(args.models, poolers, labels):
        model = SimCSEModel.from_pretrained(resolve_model_name(path), pooler_type=pooler)  # all-MiniLM-L6-v2: the embedded model
        if args.device:
            model.to(args.device)

        def encode(sentences, model=model):
            return model.encode(sentences, batch_size=args.batch_size, max_length=args.max_length)

        yield label, encode


def _training_curve(args, parser, numbers: dict) -> None:
    from simcse.evaluation import plots
    from simcse.training.callbacks import read_align_uniform_log

    if not args.log:
        parser.error("--figure training_curve needs --log FILE [FILE ...]")
    labels = _labels(args, len(args.log), [Path(f).parent.name or Path(f).stem for f in args.log], parser)
    runs = {label: read_align_uniform_log(f) for label, f in zip(labels, args.log)}
    plots.plot_training_curve(runs, args.out, title=args.title)
    numbers["runs"] = {k: v[-1] for k, v in runs.items()}


def _align_uniform(args, parser, numbers: dict) -> None:
    from simcse.evaluation import analysis
    from simcse.evaluation import plots
    from simcse.evaluation.data import load_stsb
    from simcse.evaluation.sts import correlations

    if args.sts_avg is not None and args.color_by_stsb:
        parser.error("give --sts_avg or --color_by_stsb, not both")
    sts = _per_model(args.sts_avg, len(args.models), "sts_avg", parser)
    pairs = load_stsb(args.data_dir, args.split)
    rows = []
    for (label, encode), model_dir, s in zip(_encoders(args, parser), args.models, sts):
        unique, e1, e2 = analysis.encode_pairs(encode, pairs)
        spearman = 100.0 * correlations(analysis.pair_cosine(e1, e2), pairs.scores)["spearman"][0]
        au = analysis.pairs_alignment_uniformity(pairs.scores, unique, e1, e2)
        rows.append({"model": label, **au, f"stsb_{args.split}_spearman": spearman,
                     "sts": spearman if args.color_by_stsb else (s if s is not None else _saved_sts(model_dir))})
    have_sts = all(r["sts"] is not None for r in rows)
    if args.color_by_stsb:
        sts_label = f"STS-B {args.split} Spearman x100"
    elif args.sts_avg is not None:
        sts_label = "STS"
    else:  # simcse_results.json: mean of STS-B dev and SICK-R dev Spearman
        sts_label = "STS-B/SICK-R dev avg x100"
    plots.plot_align_uniform([r["model"] for r in rows], [r["align"] for r in rows],
                             [r["uniform"] for r in rows], args.out,
                             sts=[r["sts"] for r in rows] if have_sts else None, title=args.title,
                             sts_label=sts_label, legend=args.legend)
    numbers["models"] = rows


def _spectrum_or_bins(args, parser, numbers: dict) -> None:
    from simcse.evaluation import analysis
    from simcse.evaluation import plots
    from simcse.evaluation.data import load_stsb

    pairs = load_stsb(args.data_dir, args.split)
    results, rows = {}, []
    for label, encode in _encoders(args, parser):
        unique, e1, e2 = analysis.encode_pairs(encode, pairs)
        if args.figure == "spectrum":
            s = analysis.singular_spectrum(unique, center=args.center, l2_normalize_rows=args.l2_normalize)
            results[label] = s
            rows.append({"model": label, "n_sentences": int(unique.shape[0]), "first_10": [round(float(v), 4) for v in s[:10]]})
        else:
            groups = analysis.cosine_by_gold_bins(e1, e2, pairs.scores)
            results[label] = groups
            rows.append({"model": label, "bins": [
                {"gold": g.label, "n": int(g.cosines.size),
                 "mean_cos": round(float(g.cosines.mean()), 4) if g.cosines.size else None} for g in groups]})
    if args.figure == "spectrum":
        numbers["center"], numbers["l2_normalize"] = args.center, args.l2_normalize
        plots.plot_singular_spectra(results, args.out, log_scale=args.log_scale, title=args.title)
    else:
        plots.plot_cosine_bins(results, args.out, title=args.title)
    numbers["models"] = rows


def main(argv: list[str] | None = None) -> dict:
    parser = build_parser()
    args = parser.parse_args(argv)
    numbers: dict = {"figure": args.figure, "split": args.split}
    make = {"training_curve": _training_curve, "align_uniform": _align_uniform}.get(args.figure, _spectrum_or_bins)
    try:
        make(args, parser, numbers)
    except (FileNotFoundError, ValueError) as e:
        sys.exit(f"error: {e}")
    numbers["out"] = str(args.out)
    text = json.dumps(numbers, indent=2)
    print(text)
    if args.json:
        Path(args.json).write_text(text + "\n")
    return numbers


if __name__ == "__main__":
    main()
