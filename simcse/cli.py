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
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

EXIT_USAGE = 2


class CLIError(Exception):
    """A problem with the command's inputs, reported as ``error: ...`` with exit status 2."""


def _add_model_args(p: argparse.ArgumentParser, required: bool = True) -> None:
    p.add_argument("--model", "--model_name_or_path", dest="model", required=required,
                   help="model folder saved by simcse, a plain HF encoder folder, or a hub name")
    p.add_argument("--pooler", default=None, help="pooler (default: the one the model folder or index records; cls for a plain HF encoder)")
    p.add_argument("--device", default=None, help="torch device (default: cuda when available, else cpu)")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--max-length", type=int, default=128, help="truncation in tokens")
    p.add_argument("--bf16", action="store_true", help="compute in bfloat16 (autocast); output stays float32")


def _add_dataset_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("a dataset instead of --input (simcse.files.dataset_source)")
    g.add_argument("--dataset_name", "--dataset-name", dest="dataset_name", default=None,
                   help="Hub dataset id, local folder in the Hub's layout, or save_to_disk folder")
    g.add_argument("--dataset_config_name", "--dataset-config-name", dest="dataset_config_name", default=None)
    g.add_argument("--dataset_split", "--dataset-split", dest="dataset_split", default="train")
    g.add_argument("--dataset_data_files", "--dataset-data-files", dest="dataset_data_files", default=None,
                   help="file name or glob pattern inside the dataset")
    g.add_argument("--sentence_column", "--sentence-column", dest="sentence_column", default="text",
                   help="the dataset's sentence column (default text)")
    g.add_argument("--streaming", action="store_true", help="read the dataset as a stream (never loaded whole)")


def _source(args):
    """``args.input``, or the :class:`~simcse.files.dataset_source.DatasetRef` of ``--dataset_name`` (exactly one)."""
    from simcse.files.dataset_source import DatasetRef

    if args.dataset_name is None:
        if args.input is None:
            raise CLIError("give --input (a sentence file) or --dataset_name (a dataset)")
        if args.streaming or args.dataset_config_name or args.dataset_data_files:
            raise CLIError("--streaming, --dataset_config_name and --dataset_data_files apply to --dataset_name")
        return args.input
    if args.input is not None:
        raise CLIError(f"--input {args.input!r} and --dataset_name {args.dataset_name!r} both name the sentences: give one")
    if args.column is not None:
        raise CLIError("--column applies to a .csv/.tsv/.jsonl --input; for --dataset_name use --sentence_column")
    return DatasetRef(args.dataset_name, args.sentence_column, args.dataset_config_name, args.dataset_split,
                      args.dataset_data_files, args.streaming).check()


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="simcse", description="SimCSE sentence embeddings: encode, index, search, "
                                "serve, export, convert, train, evaluate, download.")
    sub = p.add_subparsers(dest="command",
                           metavar="{encode,index,search,serve,export,convert,train,evaluate,download}")

    e = sub.add_parser("encode", help="embed the lines of a text file into a .npy array")
    _add_model_args(e)
    e.add_argument("--input", default=None, help="text file, one sentence per line ('-' for stdin); or .csv/.tsv/"
                   ".jsonl with --column (or give --dataset_name)")
    e.add_argument("--column", default=None, help="the sentence column of a .csv/.tsv file (field of a .jsonl file)")
    e.add_argument("--output", required=True, help=".npy file to write (float32, N x H), or a folder: the file "
                   "streamed into resumable shards plus manifest.json (data-parallel under torchrun)")
    _add_dataset_args(e)
    e.add_argument("--no-normalize", action="store_true", help="keep raw embeddings (default: unit length)")
    e.add_argument("--skip-blank", action="store_true", help="skip blank lines instead of failing on them")
    e.add_argument("--chunk-size", type=int, default=10_000, help="lines encoded per step")
    e.add_argument("--shard-size", type=int, default=None, help="folder output: rows per shard (default 100000)")
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
    g.add_argument("--faiss", dest="use_faiss", action="store_true", default=None, help="require faiss")
    g.add_argument("--no-faiss", dest="use_faiss", action="store_false", help="numpy exact search")
    i.add_argument("--fast", action="store_true", help="the same as --kind ivf (approximate faiss IVF-Flat index, "
                   "inner product, nlist ~4*sqrt(N) unless --nlist); with another --kind it is an error")
    i.add_argument("--kind", choices=["exact", "ivf", "ivfpq", "hnsw"], default=None,
                   help="exact (faiss IndexFlatIP / numpy), ivf (IVF-Flat), ivfpq (IVF-PQ, re-ranked from vectors "
                   "on disk), hnsw; default exact (ivf with --fast)")
    for flag, what in (("--nlist", "IVF clusters (default ~4*sqrt(N))"), ("--nprobe", "IVF clusters visited per query"),
                       ("--train-size", "IVF training vectors"), ("--pq-m", "IVF-PQ bytes per code (default H/8)"),
                       ("--refine-factor", "IVF-PQ candidates re-ranked per result (1: none; default 50)"),
                       ("--hnsw-m", "HNSW neighbours per node (default 32)"),
                       ("--ef-search", "HNSW search list (default 64)")):
        i.add_argument(flag, type=int, default=None, help=what)
    i.add_argument("--chunk-size", type=int, default=10_000, help="lines encoded and added per step")

    s = sub.add_parser("search", help="query an index built by 'simcse index'")
    _add_model_args(s, required=False)
    s.add_argument("--index", required=True, help="index folder")
    s.add_argument("--query", action="append", default=[], help="a query sentence (repeatable)")
    s.add_argument("--query-file", default=None, help="text file of queries, one per line")
    s.add_argument("--top-k", type=int, default=5)
    s.add_argument("--threshold", type=float, default=0.6, help="minimum cosine (-1 keeps all top-k)")
    s.add_argument("--json", action="store_true", help="print JSON lines {query, results: [[sentence, score]]}")

    x = sub.add_parser("export", help="write the model as a sentence-transformers or plain HF folder")
    x.add_argument("--model", "--model_name_or_path", dest="model", required=True)
    x.add_argument("--pooler", default=None, help="default: the pooler the model folder records; another one is an "
                   "error unless --override-pooler")
    x.add_argument("--override-pooler", action="store_true",
                   help="export with --pooler although the model folder records another pooler (the export then "
                        "encodes differently from the source model, which stays as it is)")
    x.add_argument("--output", required=True)
    x.add_argument("--format", choices=["sentence-transformers", "huggingface", "onnx"], default="sentence-transformers",
                   help="onnx: onnx/simcse.onnx (the whole model, pooler included) for SimCSE(DIR, backend='onnx')")
    x.add_argument("--max-length", type=int, default=128, help="sentence-transformers max_seq_length")
    x.add_argument("--quantize", choices=["int8"], default=None,
                   help="with --format onnx: also write onnx/simcse_int8.onnx (dynamic int8 quantisation)")

    v = sub.add_parser("serve", help="search demo: a web page and a JSON API over an index")
    _add_model_args(v, required=False)
    from simcse.serving.serve import add_arguments as add_serve_arguments

    add_serve_arguments(v)

    c = sub.add_parser("convert", help="write a reference SimCSE trainer checkpoint (or any encoder) in simcse's format")
    c.add_argument("--model", "--model_name_or_path", "--path", dest="model", required=True,
                   help="folder written by the reference's train.py (pytorch_model.bin with bert./roberta. and mlp.* keys)")
    c.add_argument("--pooler", "--pooler_type", dest="pooler", required=True,
                   help="the pooler the model was trained for (not recorded in reference checkpoints): cls for "
                        "supervised runs; cls_before_pooler --mlp_only_train for unsupervised ones (recorded as cls "
                        "with mlp_only_train: encodes as cls_before_pooler, the MLP is kept)")
    c.add_argument("--mlp_only_train", action="store_true",
                   help="the MLP is used in training only: kept for further training, not used when encoding")
    c.add_argument("--output", required=True, help="new folder (must not exist or be empty)")

    sub.add_parser("train", help="train ('simcse train --help'; --config NAME for a packaged config)", add_help=False)
    sub.add_parser("evaluate", help="SentEval STS/transfer evaluation ('simcse evaluate --help')", add_help=False)
    sub.add_parser("download", help="get wiki, nli or senteval data ('simcse download --help')", add_help=False)
    return p


def _read_lines(path, skip_blank: bool, column: str | None = None) -> list[str]:
    """The records of an input file (see the module docstring) or of a
    :class:`~simcse.files.dataset_source.DatasetRef`; a blank one is an error unless ``skip_blank``."""
    from simcse.files.dataset_source import DatasetRef
    from simcse.files.inputs import lines_of, sentence_rows

    if isinstance(path, DatasetRef):
        rows = path.rows()
        if skip_blank:
            return [s for _, s in rows if s.strip()]
        out = []
        for n, s in rows:
            if not s.strip():
                raise CLIError(f"{path}, row {n} is blank (pass --skip-blank to drop blank rows)")
            out.append(s)
        return out
    if path == "-":
        import io

        if column is not None:
            raise CLIError("--column needs a .csv/.tsv/.jsonl --input file, not stdin")
        stream = io.TextIOWrapper(sys.stdin.buffer, encoding="utf-8", newline="\n")
        try:
            rows = list(enumerate(lines_of(stream), 1))
        except UnicodeDecodeError as e:
            raise CLIError(f"stdin is not UTF-8 ({e.reason}); expected UTF-8 text") from None
    else:
        if not Path(path).is_file():
            raise CLIError(f"--input {path!r} is not a file")
        rows = list(sentence_rows(path, column))
    if skip_blank:
        return [s for _, s in rows if s.strip()]
    for n, s in rows:
        if not s.strip():
            raise CLIError(f"{path}:{n} is blank (pass --skip-blank to drop blank lines)")
    return [s for _, s in rows]


def _tool(args, model: str):
    from simcse.retrieval.tool import SimCSE

    try:
        return SimCSE(model, device=args.device, pooler=args.pooler, max_length=args.max_length)
    except FileNotFoundError:
        raise
    except OSError as e:  # e.g. a hub name with HF_HUB_OFFLINE=1 or no network: HF's message spans lines
        raise CLIError(f"cannot load model {model!r}: {str(e).splitlines()[0] if str(e) else type(e).__name__}") from e


def _dtype(args):
    import torch

    return torch.bfloat16 if getattr(args, "bf16", False) else None


def _is_folder_output(out: Path) -> bool:
    return out.is_dir() or (out.suffix == "" and not out.exists())


def cmd_encode_shards(args) -> int:
    """``simcse encode --output DIR``: streaming, sharded, resumable; this rank's share under torchrun."""
    import os

    from simcse.files.dataset_source import DatasetRef
    from simcse.retrieval.shards import DEFAULT_SHARD_SIZE, encode_to_shards

    source = _source(args)
    if not isinstance(source, DatasetRef) and (args.input == "-" or not Path(args.input).is_file()):
        raise CLIError(f"--input {args.input!r} is not a file (a folder output needs a file: it is read again to resume)")
    if "LOCAL_RANK" in os.environ and args.device is None:  # torchrun: one GPU per process when there are GPUs
        import torch

        if torch.cuda.is_available():
            args.device = f"cuda:{int(os.environ['LOCAL_RANK']) % torch.cuda.device_count()}"
    tool = _tool(args, args.model)
    model_ref = str(Path(args.model).resolve()) if Path(args.model).exists() else args.model
    settings = {"model": model_ref, "model_fingerprint": tool.model_fingerprint, "pooler": tool.pooler,
                "hidden_size": tool.hidden_size,
                "normalize": not args.no_normalize, "max_length": args.max_length,
                "compute_dtype": "bfloat16" if args.bf16 else "float32"}

    def encode(texts):
        return tool.encode(texts, batch_size=args.batch_size, return_numpy=True, normalize_to_unit=not args.no_normalize,
                           dtype=_dtype(args), show_progress=False)

    manifest = encode_to_shards(encode, source, args.output, settings, shard_size=args.shard_size or DEFAULT_SHARD_SIZE,
                                dtype=args.dtype, skip_blank=args.skip_blank, column=args.column,
                                log=lambda m: print(m, file=sys.stderr, flush=True))
    if manifest is not None:
        print(f"wrote {args.output} ({manifest['num_rows']} x {tool.hidden_size} {args.dtype} in "
              f"{manifest['num_shards']} shards)", file=sys.stderr)
    return 0


def cmd_encode(args) -> int:
    import numpy as np

    out = Path(args.output)
    if out.suffix != ".npy" and _is_folder_output(out):
        return cmd_encode_shards(args)
    if out.suffix != ".npy":
        raise CLIError(f"--output {args.output!r} must end in .npy (one array) or name a folder (shards)")
    if args.shard_size is not None or args.dtype != "float32":
        raise CLIError("--shard-size and --dtype apply to a folder --output (shards), not to a .npy file")
    sentences = _read_lines(_source(args), args.skip_blank, args.column)
    tool = _tool(args, args.model)
    from simcse.files.storage import check_room, writing

    needed = 4 * len(sentences) * tool.hidden_size + 128
    check_room(out.parent, needed, f"the embeddings {out.name}", largest_file=needed)
    out.parent.mkdir(parents=True, exist_ok=True)
    partial = out.with_name(f".{out.name}.partial")
    try:
        with writing(f"the embeddings {out.name}", out.parent, needed):
            # written chunk by chunk into a memory-mapped .npy, so a big file never needs all embeddings in RAM;
            # under a hidden name, renamed when complete
            arr = np.lib.format.open_memmap(partial, mode="w+", dtype=np.float32, shape=(len(sentences), tool.hidden_size))
            for start in range(0, len(sentences), args.chunk_size):
                chunk = sentences[start : start + args.chunk_size]
                arr[start : start + len(chunk)] = tool.encode(chunk, batch_size=args.batch_size, return_numpy=True,
                                                               normalize_to_unit=not args.no_normalize, dtype=_dtype(args))
            arr.flush()
            del arr
            os.replace(partial, out)
    finally:
        partial.unlink(missing_ok=True)
    print(f"wrote {out} ({len(sentences)} x {tool.hidden_size} float32)", file=sys.stderr)
    return 0


def _index_params(args) -> dict:
    """The index kind and its parameters from the options; ``--fast`` is ``--kind ivf`` (one rule), and every
    conflict is named by the options the user gave."""
    if args.fast and args.kind not in (None, "ivf"):
        raise CLIError(f"--fast is --kind ivf; it conflicts with --kind {args.kind}: give one of them")
    kind = args.kind or ("ivf" if args.fast else None)
    given = f"--kind {kind}" if args.kind else ("--fast (--kind ivf)" if args.fast else "the default --kind exact")
    names = {"nlist": "nlist", "nprobe": "nprobe", "train_size": "train_size", "pq_m": "m",
             "refine_factor": "refine_factor", "hnsw_m": "m", "ef_search": "ef_search"}
    takes = {"ivf": {"nlist", "nprobe", "train_size"}, "ivfpq": {"nlist", "nprobe", "train_size", "pq_m", "refine_factor"},
             "hnsw": {"hnsw_m", "ef_search"}}.get(kind or "exact", set())
    params = {}
    for opt, key in names.items():
        v = getattr(args, opt)
        if v is None:
            continue
        if opt not in takes:
            raise CLIError(f"--{opt.replace('_', '-')} does not apply to {given}")
        params[key] = v
    if kind:
        params["kind"] = kind
    return params


def cmd_index(args) -> int:
    from simcse.files.dataset_source import DatasetRef
    from simcse.retrieval.lifecycle import check_index_target
    from simcse.retrieval.shards import is_shard_folder

    source = _source(args)
    if not isinstance(source, DatasetRef) and not Path(source).is_file() and not is_shard_folder(source):
        raise CLIError(f"--input {args.input!r} is not a file or a finished shard folder (with manifest.json)")
    params = _index_params(args)
    try:
        check_index_target(args.output)  # before the model loads and the corpus is encoded
    except (FileExistsError, ValueError) as e:
        raise CLIError(f"--output: {e}") from None
    tool = _tool(args, args.model)
    tool.build_index(source, use_faiss=args.use_faiss, batch_size=args.batch_size,
                     column=args.column, chunk_size=args.chunk_size, **params)
    tool.save_index(args.output)
    print(f"indexed {len(tool.sentences)} sentences ({type(tool.index).__name__}) into {args.output}", file=sys.stderr)
    return 0


def cmd_search(args) -> int:
    queries = list(args.query)
    if args.query_file:
        queries += _read_lines(args.query_file, skip_blank=True)
    if not queries:
        raise CLIError("give at least one --query or a --query-file")
    from simcse.retrieval.lifecycle import model_for_index

    model, args.pooler = model_for_index(args.index, args.model, args.pooler)
    tool = _tool(args, model)
    tool.load_index(args.index)
    results = tool.search(queries, threshold=args.threshold, top_k=args.top_k, batch_size=args.batch_size,
                          dtype=_dtype(args))
    for q, res in zip(queries, results):
        if args.json:
            print(json.dumps({"query": q, "results": [[s, round(score, 6)] for s, score in res]}, ensure_ascii=False))
        else:
            print(q)
            for s, score in res:
                print(f"  {score:.4f}  {s}")
            if not res:
                print(f"  (nothing with cosine >= {args.threshold})")
    return 0


def cmd_export(args) -> int:
    from simcse.interop.export import export_huggingface, export_sentence_transformers, huggingface_reading
    from simcse.models.modeling import SimCSEModel
    from simcse.models.pooling import pooler_for

    if args.quantize and args.format != "onnx":
        raise CLIError(f"--quantize needs --format onnx (got --format {args.format})")
    if args.override_pooler and args.pooler is None:
        raise CLIError("--override-pooler needs --pooler (the pooler to export with)")
    pooler = args.pooler if args.override_pooler else pooler_for(
        args.model, args.pooler, "--pooler ", "pass --override-pooler to export with another pooler on purpose")
    model = SimCSEModel.from_pretrained(args.model, pooler_type=pooler)
    if args.format == "onnx":
        from simcse.interop.onnx import export_onnx

        out = export_onnx(model, args.output, quantize=args.quantize)
    elif args.format == "sentence-transformers":
        out = export_sentence_transformers(model, args.output, max_seq_length=args.max_length)
    else:
        out = export_huggingface(model, args.output)
        reading, pooler = huggingface_reading(model)
        print(f"the embedding of this model in the plain HF folder: {reading}; load it back with "
              f"SimCSE({str(out)!r}, pooler={pooler!r})", file=sys.stderr)
    print(f"wrote {args.format} folder {out}", file=sys.stderr)
    return 0


def cmd_convert(args) -> int:
    from simcse.models.modeling import SimCSEModel
    from simcse.models.pooling import get_pooler
    from simcse.models.reference_checkpoints import conversion_pooler, read_reference_mlp

    out = Path(args.output)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise CLIError(f"--output {args.output!r} exists and is not an empty folder")
    get_pooler(args.pooler)  # an unknown name fails first, with the list of poolers
    pooler, mlp_only_train, note = conversion_pooler(args.pooler, args.mlp_only_train,
                                                     read_reference_mlp(args.model) is not None)
    model = SimCSEModel.from_pretrained(args.model, pooler_type=pooler, mlp_only_train=mlp_only_train or None)
    model.save_pretrained(out)
    if note:
        print(f"note: {note}", file=sys.stderr)
    print(f"wrote {out} (pooler {model.pooler_type}, mlp_only_train {model.mlp_only_train})", file=sys.stderr)
    return 0


def cmd_train(argv: list[str]) -> int:
    from simcse.training.train import main as train_main

    train_main(argv)
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


# commands that parse their own arguments (and --help): everything after the name is handed over
PASS_THROUGH = {"train": cmd_train, "evaluate": cmd_evaluate, "download": cmd_download}
COMMANDS = {"encode": cmd_encode, "index": cmd_index, "search": cmd_search, "serve": cmd_serve, "export": cmd_export,
            "convert": cmd_convert}


def main(argv: list[str] | None = None) -> int:
    """Run the ``simcse`` command with ``argv`` (default ``sys.argv[1:]``); return the exit status."""
    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        # train/evaluate own their argument parsing (and --help): hand everything after the name over
        if argv and argv[0] in PASS_THROUGH:
            return PASS_THROUGH[argv[0]](argv[1:])
        parser = build_parser()
        args = parser.parse_args(argv)
        if args.command is None:
            parser.print_help(sys.stderr)
            return EXIT_USAGE
        for name in ("batch_size", "max_length", "chunk_size", "top_k", "max_lines", "shard_size", "nlist", "nprobe",
                     "train_size", "pq_m", "refine_factor", "hnsw_m", "ef_search"):
            v = getattr(args, name, None)
            if v is not None and v < 1:
                raise CLIError(f"--{name.replace('_', '-')} must be a positive integer, got {v}")
        return COMMANDS[args.command](args)
    except (CLIError, OSError, ValueError, TypeError, RuntimeError, ImportError) as e:
        # one line (HF's OSErrors span several); OSError covers a model that cannot be fetched offline
        print(f"error: {str(e).splitlines()[0] if str(e) else type(e).__name__}", file=sys.stderr)
        return EXIT_USAGE


if __name__ == "__main__":
    sys.exit(main())
