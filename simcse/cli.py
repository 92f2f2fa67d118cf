"""The ``simcse`` command.

    simcse encode   --model M --input sentences.txt --output emb.npy [--pooler avg] [--bf16]
    simcse encode   --model M --input corpus.txt --output DIR [--shard-size 100000] [--dtype float16]
    torchrun --nproc_per_node N -m simcse encode --model M --input corpus.txt --output DIR
    simcse index    --model M --input corpus.txt|SHARD_DIR --output DIR [--kind exact|ivf|ivfpq|hnsw] [--no-faiss]
    simcse encode|index --model M --dataset_name NAME_OR_FOLDER [--sentence_column text] [--streaming] --output ...
    simcse search   --index DIR --query "a man plays guitar" [--query ...] [--model M] [--top-k 5] [--json]
    simcse serve    [--index DIR | --model M --input corpus.txt] [--host 127.0.0.1] [--port 8000]
    simcse export   --model M --output DIR --format sentence-transformers|huggingface|onnx [--quantize int8]
    simcse convert  --model REFERENCE_CHECKPOINT --pooler cls|cls_before_pooler|... --output DIR [--mlp_only_train]
    simcse train    [--config unsup_bert_base] ...   # simcse.training.train.main; --list_configs lists packaged configs
    simcse evaluate --model_name_or_path M [--pooler cls] [--mode test] [--task_set sts]   # simcse.evaluation.cli
    simcse download wiki|nli|senteval|all [--dest PATH]   # honours $SIMCSE_DATA_MIRROR (simcse.files.download)
    simcse experiment run SPEC --output_dir DIR [--executor local|slurm]; simcse experiment report DIR

``python -m simcse ...`` is the same command.

Input files (UTF-8) hold one sentence per line, split only at ``\n`` as ``wc -l`` counts (a lone ``\r`` and the
other characters ``str.splitlines()`` breaks at stay inside their line); ``.csv``/``.tsv`` files with a header
read the column ``--column`` names, ``.jsonl`` files one JSON string or object (field ``--column``) a line.
``encode`` writes a float32 ``.npy`` of shape (N, H), row i for record i; a blank record is an error unless
``--skip-blank`` (then rows follow the non-blank records). ``search`` encodes the queries with the model and
pooler the index records; a different ``--model``/``--pooler`` is an error.
With ``--output`` a folder, ``encode`` streams the file into resumable shards (:mod:`simcse.retrieval.shards`),
split across ranks under ``torchrun``.
Instead of ``--input``, ``encode`` and ``index`` read a dataset's text column with ``--dataset_name NAME_OR_FOLDER
[--dataset_config_name C] [--dataset_split train] [--dataset_data_files F] [--sentence_column text] [--streaming]``
(:mod:`simcse.files.dataset_source`: a Hub id, a local folder in the Hub's layout, a ``save_to_disk`` folder);
rows stand where lines do (a blank row is an error unless ``--skip-blank``).
Problems with the inputs end the command with ``error: ...`` on stderr and exit status 2.

This module parses and dispatches only; each command lives in its wing: :mod:`simcse.retrieval.commands`
(encode, index, search), :mod:`simcse.interop.commands` (export, convert), :mod:`simcse.serving.serve`,
:mod:`simcse.training.train`, :mod:`simcse.evaluation.cli`, :mod:`simcse.files.download` and
:mod:`simcse.experiments.experiment`.
"""
from __future__ import annotations

import argparse
import sys

from simcse.evaluation.cli import DefaultsHelpFormatter, add_both_spellings
from simcse.files.errors import UsageError, running_command
from simcse.interop.commands import cmd_convert, cmd_export
from simcse.retrieval.commands import cmd_encode, cmd_index, cmd_search
from simcse.retrieval.lifecycle import SEARCH_THRESHOLD

EXIT_USAGE = 2


CLIError = UsageError  # a problem with the command's inputs: ``error: ...``, exit status 2 (the older name)


def _add_model_args(p: argparse.ArgumentParser, required: bool = True, reads_index: bool = False) -> None:
    """The model options of encode/index/search/serve; ``reads_index``: the command opens a built ``--index``,
    whose recorded pooler, truncation and size are the defaults (the help says so only there)."""
    p.add_argument("--model_name_or_path", "--model", dest="model", required=required,
                   help="model folder saved by simcse, a plain HF encoder folder, or a hub name"
                        + (" (default: the one the --index records)" if reads_index else ""))
    p.add_argument("--pooler", default=None, help="pooler (default: the one the model folder"
                   + (" or --index" if reads_index else "") + " records; cls for a plain HF encoder)")
    p.add_argument("--device", default=None, help="torch device (default: cuda when available, else cpu)")
    p.add_argument("--batch_size", "--batch-size", type=int, default=64, help="sentences encoded per forward pass")
    p.add_argument("--max_length", "--max-length", type=int, default=None,
                   help="truncation in tokens (default " + ("the one the --index was built with" if reads_index else "128") + ")")
    p.add_argument("--bf16", action="store_true", help="compute in bfloat16 (autocast); output stays float32 "
                   "(default: float32)")
    p.add_argument("--truncate_dim", "--truncate-dim", dest="truncate_dim", type=int, default=None,
                   help="keep the first N coordinates of each embedding (a Matryoshka-trained model); unit rows are "
                        "normalised after the cut (default: " + ("the size the --index was built at" if reads_index else "the full size") + ")")


def _add_dataset_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("a dataset instead of --input (simcse.files.dataset_source)")
    g.add_argument("--dataset_name", "--dataset-name", dest="dataset_name", default=None,
                   help="Hub dataset id, local folder in the Hub's layout, or save_to_disk folder")
    g.add_argument("--dataset_config_name", "--dataset-config-name", dest="dataset_config_name", default=None,
                   help="the configuration of --dataset_name (a config_name of its README; default: its only one)")
    g.add_argument("--dataset_split", "--dataset-split", dest="dataset_split", default="train",
                   help="the split of --dataset_name to read")
    g.add_argument("--dataset_data_files", "--dataset-data-files", dest="dataset_data_files", default=None,
                   help="file name or glob pattern inside the dataset")
    g.add_argument("--sentence_column", "--sentence-column", dest="sentence_column", default="text",
                   help="the dataset's sentence column (default text)")
    g.add_argument("--streaming", action="store_true", help="read the dataset as a stream (never loaded whole; "
                   "default: loaded as a dataset)")


def _spelled(argv: list[str], dest: str) -> str:
    """The spelling of option ``dest`` that ``argv`` used (``--batch_size`` or ``--batch-size``), for messages."""
    dashed = "--" + dest.replace("_", "-")
    return dashed if any(a == dashed or a.startswith(dashed + "=") for a in argv) else "--" + dest


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="simcse", description="SimCSE sentence embeddings: encode, index, search, "
                                "serve, export, convert, train, evaluate, download.")
    sub = p.add_subparsers(dest="command",
                           metavar="{encode,index,search,serve,export,convert,train,evaluate,download,experiment}")

    e = sub.add_parser("encode", help="embed the lines of a text file into a .npy array")
    _add_model_args(e)
    e.add_argument("--input", default=None, help="text file, one sentence per line ('-' for stdin); or .csv/.tsv/"
                   ".jsonl with --column (or give --dataset_name)")
    e.add_argument("--column", default=None, help="the sentence column of a .csv/.tsv file (field of a .jsonl file)")
    e.add_argument("--output", required=True, help=".npy file to write (float32, N x H), or a folder: the file "
                   "streamed into resumable shards plus manifest.json (data-parallel under torchrun)")
    _add_dataset_args(e)
    e.add_argument("--no_normalize", "--no-normalize", action="store_true", help="keep raw embeddings (default: unit length)")
    e.add_argument("--skip_blank", "--skip-blank", action="store_true", help="skip blank lines instead of failing on "
                   "them (default: a blank line is an error)")
    e.add_argument("--chunk_size", "--chunk-size", type=int, default=10_000, help="lines encoded per step")
    e.add_argument("--shard_size", "--shard-size", type=int, default=None, help="folder output: rows per shard (default 100000)")
    e.add_argument("--dtype", choices=["float32", "float16"], default="float32", help="folder output: stored dtype")

    i = sub.add_parser("index", help="build a search index of the lines of a text file")
    _add_model_args(i)
    i.add_argument("--input", default=None, help="text file, one sentence per line (blank lines skipped); or "
                   ".csv/.tsv/.jsonl with --column; or a shard folder written by 'simcse encode --output DIR' "
                   "(not encoded again); or give --dataset_name")
    i.add_argument("--column", default=None, help="the sentence column of a .csv/.tsv file (field of a .jsonl file)")
    _add_dataset_args(i)
    i.add_argument("--output", required=True, help="folder to write the index into")
    g = i.add_mutually_exclusive_group()
    g.add_argument("--faiss", dest="use_faiss", action="store_true", default=None,
                   help="require faiss (default: faiss when installed, else numpy)")
    g.add_argument("--no_faiss", "--no-faiss", dest="use_faiss", action="store_false",
                   help="numpy exact search (default: faiss when installed)")
    i.add_argument("--fast", action="store_true", help="the same as --kind ivf (approximate faiss IVF-Flat index, "
                   "inner product, nlist ~4*sqrt(N) unless --nlist); with another --kind it is an error (default: off)")
    i.add_argument("--kind", choices=["exact", "ivf", "ivfpq", "hnsw"], default=None,
                   help="exact (faiss IndexFlatIP / numpy), ivf (IVF-Flat), ivfpq (IVF-PQ, re-ranked from vectors "
                   "on disk), hnsw; default exact (ivf with --fast)")
    for flag, what in (("--nlist", "IVF clusters (default ~4*sqrt(N))"),
                       ("--nprobe", "IVF clusters visited per query (default: the index kind's own)"),
                       ("--train_size", "IVF training vectors (default: the index kind's own)"),
                       ("--pq_m", "IVF-PQ bytes per code (default H/8)"),
                       ("--refine_factor", "IVF-PQ candidates re-ranked per result (1: none; default 50)"),
                       ("--hnsw_m", "HNSW neighbours per node (default 32)"),
                       ("--ef_search", "HNSW search list (default 64)")):
        i.add_argument(flag, type=int, default=None, help=what)
    i.add_argument("--chunk_size", "--chunk-size", type=int, default=10_000, help="lines encoded and added per step")

    s = sub.add_parser("search", help="query an index built by 'simcse index'")
    _add_model_args(s, required=False, reads_index=True)
    s.add_argument("--index", required=True, help="index folder")
    s.add_argument("--query", action="append", default=[], help="a query sentence (repeatable; default: none, "
                   "give --query or --query_file)")
    s.add_argument("--query_file", "--query-file", default=None, help="text file of queries, one per line")
    s.add_argument("--top_k", "--top-k", type=int, default=5, help="results per query, at most")
    s.add_argument("--threshold", type=float, default=SEARCH_THRESHOLD,
                   help=f"minimum cosine: results below it are left out, so fewer than --top_k can come back "
                        f"(default {SEARCH_THRESHOLD}, the reference tool's SimCSE.search default; -1 keeps all "
                        "--top_k; simcse serve's page starts at 0.0)")
    s.add_argument("--json", action="store_true", help="print JSON lines {query, results: [[sentence, score]]} "
                   "(default: text)")

    x = sub.add_parser("export", help="write the model as a sentence-transformers or plain HF folder")
    x.add_argument("--model_name_or_path", "--model", dest="model", required=True,
                   help="model folder saved by simcse, a plain HF encoder folder, or a hub name")
    x.add_argument("--pooler", default=None, help="default: the pooler the model folder records; another one is an "
                   "error unless --override-pooler")
    x.add_argument("--override_pooler", "--override-pooler", action="store_true",
                   help="export with --pooler although the model folder records another pooler (the export then "
                        "encodes differently from the source model, which stays as it is; default: refused)")
    x.add_argument("--output", required=True, help="folder to write the export into")
    x.add_argument("--format", choices=["sentence-transformers", "huggingface", "onnx"], default="sentence-transformers",
                   help="onnx: onnx/simcse.onnx (the whole model, pooler included) for SimCSE(DIR, backend='onnx')")
    x.add_argument("--max_length", "--max-length", type=int, default=128, help="sentence-transformers max_seq_length")
    x.add_argument("--quantize", choices=["int8"], default=None,
                   help="with --format onnx: also write onnx/simcse_int8.onnx (dynamic int8 quantisation)")

    v = sub.add_parser("serve", help="search demo: a web page and a JSON API over an index")
    _add_model_args(v, required=False, reads_index=True)
    from simcse.serving.serve import add_arguments as add_serve_arguments

    add_serve_arguments(v)

    c = sub.add_parser("convert", help="write a reference SimCSE trainer checkpoint (or any encoder) in simcse's format")
    c.add_argument("--model_name_or_path", "--model", "--path", dest="model", required=True,
                   help="folder written by the reference's train.py (pytorch_model.bin with bert./roberta. and mlp.* keys)")
    c.add_argument("--pooler", "--pooler_type", dest="pooler", required=True,
                   help="the pooler the model was trained for (not recorded in reference checkpoints): cls for "
                        "supervised runs; cls_before_pooler --mlp_only_train for unsupervised ones (recorded as cls "
                        "with mlp_only_train: encodes as cls_before_pooler, the MLP is kept)")
    c.add_argument("--mlp_only_train", action="store_true",
                   help="the MLP is used in training only: kept for further training, not used when encoding "
                        "(default: the MLP encodes, for cls)")
    c.add_argument("--output", required=True, help="new folder (must not exist or be empty)")

    for name in ("encode", "index", "search", "serve", "export", "convert"):  # every --help shows the defaults
        sub.choices[name].formatter_class = DefaultsHelpFormatter
        add_both_spellings(sub.choices[name])
    sub.add_parser("train", help="train ('simcse train --help'; --config NAME for a packaged config)", add_help=False)
    sub.add_parser("evaluate", help="SentEval STS/transfer evaluation ('simcse evaluate --help')", add_help=False)
    sub.add_parser("download", help="get wiki, nli or senteval data ('simcse download --help')", add_help=False)
    sub.add_parser("experiment", help="arms x seeds of training runs, here or on Slurm, with a report over seeds "
                   "('simcse experiment --help')", add_help=False)
    p.sub_commands = sub.choices  # name -> its parser: errors about its arguments are its own (main)
    return p


def cmd_train(argv: list[str]) -> int:
    from simcse.training.train import program

    program(argv)
    return 0


def cmd_evaluate(argv: list[str]) -> int:
    from simcse.evaluation.cli import main as evaluation_main

    evaluation_main(argv)
    return 0


def cmd_download(argv: list[str]) -> int:
    from simcse.files.download import main as download_main

    return download_main(argv)


def cmd_serve(args) -> int:
    from simcse.serving.serve import run

    return run(args)


def cmd_experiment(argv: list[str]) -> int:
    from simcse.experiments.experiment import main as experiment_main

    return experiment_main(argv)


# commands that parse their own arguments (and --help): everything after the name is handed over
PASS_THROUGH = {"train": cmd_train, "evaluate": cmd_evaluate, "download": cmd_download, "experiment": cmd_experiment}
COMMANDS = {"encode": cmd_encode, "index": cmd_index, "search": cmd_search, "serve": cmd_serve, "export": cmd_export,
            "convert": cmd_convert}


def main(argv: list[str] | None = None) -> int:
    """Run the ``simcse`` command with ``argv`` (default ``sys.argv[1:]``); return the exit status."""
    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        # train/evaluate own their argument parsing (and --help): hand everything after the name over
        if argv and argv[0] in PASS_THROUGH:  # their parsers name "simcse <name>" (simcse.files.errors.command_prog)
            with running_command(argv[0]):
                return PASS_THROUGH[argv[0]](argv[1:])
        parser = build_parser()
        args, unknown = parser.parse_known_args(argv)
        if unknown:  # argparse would name the top parser ("simcse: error: unrecognized arguments")
            (parser.sub_commands.get(args.command) or parser).error(f"unrecognized arguments: {' '.join(unknown)}")
        if args.command is None:
            parser.print_help(sys.stderr)
            return EXIT_USAGE
        for name in ("batch_size", "max_length", "chunk_size", "top_k", "max_lines", "shard_size", "nlist", "nprobe",
                     "train_size", "pq_m", "refine_factor", "hnsw_m", "ef_search", "truncate_dim"):
            v = getattr(args, name, None)
            if v is not None and v < 1:
                raise CLIError(f"{_spelled(argv, name)} must be a positive integer, got {v}")
        return COMMANDS[args.command](args)
    except (CLIError, OSError, ValueError, TypeError, RuntimeError, ImportError) as e:
        # one line (HF's OSErrors span several); OSError covers a model that cannot be fetched offline
        print(f"error: {str(e).splitlines()[0] if str(e) else type(e).__name__}", file=sys.stderr)
        return EXIT_USAGE


if __name__ == "__main__":
    sys.exit(main())
