"""The retrieval commands of ``simcse``: ``encode`` (one ``.npy`` or resumable shards), ``index`` and ``search``
(see :mod:`simcse.cli` for the command lines). :mod:`simcse.cli` parses the arguments and calls these; a problem
with the inputs raises :class:`simcse.files.errors.UsageError` (``error: ...``, exit status 2).
"""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from simcse.files.errors import UsageError

def _source(args):
    """``args.input``, or the :class:`~simcse.files.dataset_source.DatasetRef` of ``--dataset_name`` (exactly one)."""
    from simcse.files.dataset_source import DatasetRef

    if args.dataset_name is None:
        if args.input is None:
            raise UsageError("give --input (a sentence file) or --dataset_name (a dataset)")
        if args.streaming or args.dataset_config_name or args.dataset_data_files:
            raise UsageError("--streaming, --dataset_config_name and --dataset_data_files apply to --dataset_name")
        return args.input
    if args.input is not None:
        raise UsageError(f"--input {args.input!r} and --dataset_name {args.dataset_name!r} both name the sentences: give one")
    if args.column is not None:
        raise UsageError("--column applies to a .csv/.tsv/.jsonl --input; for --dataset_name use --sentence_column")
    return DatasetRef(args.dataset_name, args.sentence_column, args.dataset_config_name, args.dataset_split,
                      args.dataset_data_files, args.streaming).check()


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
                raise UsageError(f"{path}, row {n} is blank (pass --skip-blank to drop blank rows)")
            out.append(s)
        return out
    if path == "-":
        import io

        if column is not None:
            raise UsageError("--column needs a .csv/.tsv/.jsonl --input file, not stdin")
        stream = io.TextIOWrapper(sys.stdin.buffer, encoding="utf-8", newline="\n")
        try:
            rows = list(enumerate(lines_of(stream), 1))
        except UnicodeDecodeError as e:
            raise UsageError(f"stdin is not UTF-8 ({e.reason}); expected UTF-8 text") from None
    else:
        if not Path(path).is_file():
            raise UsageError(f"--input {path!r} is not a file")
        rows = list(sentence_rows(path, column))
    if skip_blank:
        return [s for _, s in rows if s.strip()]
    for n, s in rows:
        if not s.strip():
            raise UsageError(f"{path}:{n} is blank (pass --skip-blank to drop blank lines)")
    return [s for _, s in rows]


def _tool(args, model: str):
    from simcse.retrieval.tool import SimCSE

    try:
        return SimCSE(model, device=args.device, pooler=args.pooler, max_length=args.max_length)
    except FileNotFoundError:
        raise
    except OSError as e:  # e.g. a hub name with HF_HUB_OFFLINE=1 or no network: HF's message spans lines
        raise UsageError(f"cannot load model {model!r}: {str(e).splitlines()[0] if str(e) else type(e).__name__}") from e


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
        raise UsageError(f"--input {args.input!r} is not a file (a folder output needs a file: it is read again to resume)")
    if "LOCAL_RANK" in os.environ and args.device is None:  # torchrun: one GPU per process when there are GPUs
        import torch

        if torch.cuda.is_available():
            args.device = f"cuda:{int(os.environ['LOCAL_RANK']) % torch.cuda.device_count()}"
    tool = _tool(args, args.model)
    model_ref = str(Path(args.model).resolve()) if Path(args.model).exists() else args.model
    settings = {"model": model_ref, "model_fingerprint": tool.model_fingerprint, "pooler": tool.pooler,
                "hidden_size": tool.hidden_size,
                "normalize": not args.no_normalize, "max_length": tool.max_length,
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
        raise UsageError(f"--output {args.output!r} must end in .npy (one array) or name a folder (shards)")
    if args.shard_size is not None or args.dtype != "float32":
        raise UsageError("--shard-size and --dtype apply to a folder --output (shards), not to a .npy file")
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
        raise UsageError(f"--fast is --kind ivf; it conflicts with --kind {args.kind}: give one of them")
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
            raise UsageError(f"--{opt.replace('_', '-')} does not apply to {given}")
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
        raise UsageError(f"--input {args.input!r} is not a file or a finished shard folder (with manifest.json)")
    params = _index_params(args)
    try:
        check_index_target(args.output)  # before the model loads and the corpus is encoded
    except (FileExistsError, ValueError) as e:
        raise UsageError(f"--output: {e}") from None
    tool = _tool(args, args.model)
    tool.build_index(source, use_faiss=args.use_faiss, batch_size=args.batch_size,
                     column=args.column, chunk_size=args.chunk_size, **params)
    if tool.index.ntotal == 0:  # an empty index searches nothing: refused as the IVF kinds are, nothing written
        raise UsageError(f"{args.input or args.dataset_name!r} holds no sentence (only blank lines or nothing): "
                         "nothing to index; nothing written")
    tool.save_index(args.output)
    print(f"indexed {len(tool.sentences)} sentences ({type(tool.index).__name__}) into {args.output}", file=sys.stderr)
    return 0


def cmd_search(args) -> int:
    queries = list(args.query)
    if args.query_file:
        queries += _read_lines(args.query_file, skip_blank=True)
    if not queries:
        raise UsageError("give at least one --query or a --query-file")
    from simcse.retrieval.lifecycle import model_for_index

    model, args.pooler = model_for_index(args.index, args.model, args.pooler, args.max_length)
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
