"""Streaming, sharded, resumable (and data-parallel) encoding of a text corpus into ``.npy`` shards.

    simcse encode --model M --input corpus.txt --output emb/            # one process
    torchrun --nproc_per_node 4 -m simcse encode --model M --input corpus.txt --output emb/   # 4 ranks

The corpus is read as a stream, one record per line (UTF-8; lines end at ``\\n``; or CSV/TSV/JSONL
records, :func:`simcse.files.inputs.sentence_rows`). Records ``k * shard_size .. (k + 1) * shard_size - 1`` go to
shard ``k``: ``emb/shard-0000k.npy``
(float32 or float16, ``(rows, H)``) plus a sidecar ``emb/shard-0000k.json`` with its row range, line range,
the SHA-256 of the ``.npy`` file and the SHA-256 of the text it was encoded from. Each shard file is written
under a temporary name and renamed, and its sidecar is renamed into place after it, so a shard with a
sidecar is complete. When every shard is there, ``emb/manifest.json`` lists them all with the run's
settings (model, pooler, dtype, normalisation, max_length, input file).

* **Resume**: a rerun with the same settings skips every shard that has a sidecar (after checking that
  its text hash still matches the input) and encodes the rest; shards are encoded the same way whatever
  happened before, so the result equals an uninterrupted run. Other settings in the same folder are an
  error, not a silent mix. The model is identified by its content (``model_fingerprint``,
  :func:`simcse.models.folder.model_fingerprint`), not by how its path is spelled: the same folder given as
  ``./model`` or by its absolute path resumes, a model retrained into the same folder is refused.
* **Data parallel**: with ``RANK`` / ``WORLD_SIZE`` in the environment (``torchrun`` sets them) rank ``r``
  encodes the shards ``k`` with ``k % WORLD_SIZE == r``; every rank reads the file (reading is cheap next to
  encoding) and the last rank to finish writes the manifest, which is the one a single process writes.
  No process group is needed: ranks coordinate through the files, so a rerun may even use another number
  of ranks.
* **Memory** is one shard's text and embeddings, whatever the corpus size.

Before encoding, the whole input is scanned once for lines that are not UTF-8 or blank, so a bad line
stops the run before any work, naming the line (blank lines are skipped with ``skip_blank``).

:class:`ShardSet` reads a finished folder: shard by shard (for building an index), rows by id (memory
mapped), the sentences again from the corpus (checked against the text hashes), and a full checksum
:meth:`ShardSet.verify`.
"""
from __future__ import annotations

import hashlib
import json
import math
import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np

from simcse.files.dataset_source import DatasetRef
from simcse.files.checks import check_int
from simcse.files.storage import signals_end_the_write

MANIFEST_NAME = "manifest.json"
RUN_NAME = "encode_run.json"
FORMAT = "simcse-shards"
FORMAT_VERSION = 1
DTYPES = ("float32", "float16")
DEFAULT_SHARD_SIZE = 100_000


def shard_stem(k: int) -> str:
    """File name stem of shard ``k``: ``shard-00007``."""
    return f"shard-{k:05d}"


def is_shard_folder(path: str | os.PathLike) -> bool:
    """True when ``path`` is a folder written by :func:`encode_to_shards` (it holds ``manifest.json``)."""
    return Path(path).is_dir() and (Path(path) / MANIFEST_NAME).is_file()


# ------------------------------------------------------------------------------------------- reading
def iter_records(path: str | os.PathLike, skip_blank: bool = False, column: str | None = None
                 ) -> Iterator[tuple[int, str]]:
    """``(line_number, text)`` for each record of a sentence file (:func:`simcse.files.inputs.sentence_rows`: plain
    text split only at ``\\n``, or ``.csv``/``.tsv``/``.jsonl`` with ``column``), 1-based line numbers; or
    ``(row number, text)`` of a :class:`simcse.files.dataset_source.DatasetRef` (``column`` unused).

    Raises:
        ValueError: a line is not UTF-8 or not a valid record (the message gives file and line), or a record
            is blank and ``skip_blank`` is false.
    """
    from simcse.files.inputs import sentence_rows

    rows = path.rows() if isinstance(path, DatasetRef) else sentence_rows(path, column)
    for n, text in rows:
        if not text.strip():
            if skip_blank:
                continue
            where = f"{path}, row {n}" if isinstance(path, DatasetRef) else f"{path}:{n}"
            raise ValueError(f"{where} is blank (pass --skip-blank / skip_blank=True to drop blank lines)")
        yield n, text


def count_records(path: str | os.PathLike, skip_blank: bool = False, column: str | None = None) -> int:
    """Number of records :func:`iter_records` yields; checks every line (same errors)."""
    return sum(1 for _ in iter_records(path, skip_blank, column))


def _text_hash() -> "hashlib._Hash":
    return hashlib.sha256()


def _iter_shard_texts(path, skip_blank: bool, column: str | None, shard_size: int, keep: Callable[[int], bool]):
    """Yield ``(k, first_line, last_line, text_sha256, texts or None)`` per shard; texts only where ``keep(k)``."""
    k, count, first, last, h, texts, want = 0, 0, None, None, _text_hash(), [], keep(0)
    for n, text in iter_records(path, skip_blank, column):
        if first is None:
            first = n
        last = n
        h.update(text.encode("utf-8") + b"\n")
        if want:
            texts.append(text)
        count += 1
        if count == shard_size:
            yield k, first, last, h.hexdigest(), (texts if want else None)
            k, count, first, h, texts = k + 1, 0, None, _text_hash(), []
            want = keep(k)
    if count:
        yield k, first, last, h.hexdigest(), (texts if want else None)


# ------------------------------------------------------------------------------------------- writing
class _HashingFile:
    """File wrapper that feeds every written byte to SHA-256 (``np.save`` writes through ``.write``)."""

    def __init__(self, f):
        self.f, self.h = f, hashlib.sha256()

    def write(self, b) -> int:
        self.h.update(b)
        return self.f.write(b)


@contextmanager
def _temporary_sibling(path: Path):
    """A hidden ``.<name>.tmp-<pid>`` beside ``path`` to write and rename; removed when the block fails or a
    termination signal ends it (:func:`simcse.files.storage.signals_end_the_write`)."""
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        with signals_end_the_write():
            yield tmp
    finally:
        tmp.unlink(missing_ok=True)


def _atomic_write_bytes(path: Path, data: bytes) -> None:
    with _temporary_sibling(path) as tmp:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)


def _atomic_write_json(path: Path, obj) -> None:
    _atomic_write_bytes(path, (json.dumps(obj, indent=1) + "\n").encode("utf-8"))


def _write_shard(folder: Path, k: int, emb: np.ndarray, entry: dict) -> dict:
    """Write shard ``k`` (.npy then its sidecar, each atomically); return the sidecar entry."""
    npy = folder / f"{shard_stem(k)}.npy"
    with _temporary_sibling(npy) as tmp:
        with open(tmp, "wb") as f:
            hf = _HashingFile(f)
            np.lib.format.write_array(hf, np.ascontiguousarray(emb), allow_pickle=False)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, npy)
    entry = {"file": npy.name, **entry, "sha256": hf.h.hexdigest()}
    _atomic_write_json(folder / f"{shard_stem(k)}.json", entry)
    return entry


def _rank_world(rank: int | None, world: int | None) -> tuple[int, int]:
    rank = int(os.environ.get("RANK", 0)) if rank is None else rank
    world = int(os.environ.get("WORLD_SIZE", 1)) if world is None else world
    if world < 1 or not 0 <= rank < world:
        raise ValueError(f"rank {rank} / world size {world}: expected 0 <= rank < world size")
    return rank, world


#: settings recorded for people but not compared on resume: the model's path is only how it was spelled
#: (``./model`` or ``/abs/model``); the model itself is identified by ``model_fingerprint``
DESCRIPTIVE_SETTINGS = ("model",)


def _compared(run: dict, key: str):
    """``run[key]`` as compared on resume: a dataset input by :meth:`DatasetRef.identity` (streaming or not
    reads the same rows)."""
    value = run.get(key)
    if key == "input" and isinstance(value, dict) and "dataset" in value:
        return DatasetRef.from_description(value).identity()
    return value


def _check_run(folder: Path, run: dict) -> None:
    """Write the run settings, or check them against those of the shards already in ``folder``."""
    f = folder / RUN_NAME
    if f.is_file():
        old = json.loads(f.read_text())
        diff = sorted(k for k in set(old) | set(run) if _compared(old, k) != _compared(run, k)
                      and k not in DESCRIPTIVE_SETTINGS)
        if "model_fingerprint" in diff:
            raise ValueError(f"{folder} holds shards of another model than {run.get('model') or 'this one'} "
                             f"(fingerprint {str(old.get('model_fingerprint'))[:19]} there, "
                             f"{str(run.get('model_fingerprint'))[:19]} now: the model changed since, e.g. retrained "
                             "in place); its vectors would not be this model's: encode into a new folder, or delete "
                             f"{folder} to encode again")
        if diff:
            k = diff[0]
            raise ValueError(f"{folder} holds shards of another run ({k}: {old.get(k)!r} there, {run.get(k)!r} now); "
                             "resume with the same settings or write to a new folder")
        return
    stray = sorted(p.name for p in folder.glob("shard-*.json"))
    if stray:
        raise ValueError(f"{folder} holds shards ({stray[0]}...) but no {RUN_NAME}; write to a new folder")
    _atomic_write_json(f, run)


def _manifest_if_complete(folder: Path, run: dict) -> dict | None:
    """Assemble and write ``manifest.json`` when every shard's sidecar exists; else None."""
    entries = []
    for k in range(run["num_shards"]):
        side = folder / f"{shard_stem(k)}.json"
        if not side.is_file():
            return None
        entries.append(json.loads(side.read_text()))
    manifest = {**run, "shards": entries}
    _atomic_write_json(folder / MANIFEST_NAME, manifest)
    for stale in folder.glob(".shard-*.tmp-*"):  # left by a killed run; every shard is complete now
        stale.unlink(missing_ok=True)
    return manifest


def encode_to_shards(
    encode: Callable[[list[str]], np.ndarray],
    input_path: str | os.PathLike,
    output_dir: str | os.PathLike,
    settings: dict,
    shard_size: int = DEFAULT_SHARD_SIZE,
    dtype: str = "float32",
    skip_blank: bool = False,
    column: str | None = None,
    rank: int | None = None,
    world_size: int | None = None,
    log: Callable[[str], None] | None = None,
) -> dict | None:
    """Encode a text file into shards in ``output_dir`` (see the module docstring); resumable.

    Args:
        encode: ``list[str] -> float32 (n, H)``, deterministic (e.g. ``SimCSE.encode`` with fixed options).
        input_path: UTF-8 sentence file: text, one sentence per line, or ``.csv``/``.tsv``/``.jsonl``; or a
            :class:`simcse.files.dataset_source.DatasetRef` (a dataset's text column, recorded in the manifest).
        output_dir: folder for the shards (created); may hold an interrupted run of the same settings.
        settings: what identifies the embeddings (``model_fingerprint``, pooler, normalize, max_length, ...);
            stored in the manifest and compared on resume, except :data:`DESCRIPTIVE_SETTINGS` (``model``: the
            path as given, for people). Must be JSON-serialisable.
        shard_size: records per shard (the last shard may be shorter).
        dtype: ``"float32"`` or ``"float16"`` for the stored arrays.
        skip_blank: drop blank lines (rows then follow the non-blank lines); otherwise a blank line is an error.
        column: the sentence column/field of a ``.csv``/``.tsv``/``.jsonl`` input.
        rank, world_size: this process's share (default: ``RANK`` / ``WORLD_SIZE`` from the environment, else 0/1).
        log: called with one-line progress messages.

    Returns:
        the manifest (dict) when this call completed the set, else None (other ranks still working).

    Raises:
        ValueError: bad ``dtype``/``shard_size``/rank; a bad input line (before anything is encoded); the
            folder holds another run; the input changed under an existing shard.
        FileNotFoundError: ``input_path`` is not a file.
    """
    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {DTYPES}, got {dtype!r}")
    check_int(shard_size, "shard_size")
    rank, world = _rank_world(rank, world_size)
    src = input_path if isinstance(input_path, DatasetRef) else Path(input_path)
    if not isinstance(src, DatasetRef) and not src.is_file():
        raise FileNotFoundError(f"{str(src)!r} is not a file")
    log = log or (lambda msg: None)
    folder = Path(output_dir)
    folder.mkdir(parents=True, exist_ok=True)

    num_rows = count_records(src, skip_blank, column)  # validates every line first: a bad line costs no encoding
    run = {"format": FORMAT, "format_version": FORMAT_VERSION, **settings, "dtype": dtype, "shard_size": shard_size,
           **({"input": src.describe(), "input_bytes": None} if isinstance(src, DatasetRef) else
              {"input": str(src.resolve()), "input_bytes": src.stat().st_size}), "skip_blank": bool(skip_blank),
           "column": column, "num_rows": num_rows, "num_shards": math.ceil(num_rows / shard_size)}
    _check_run(folder, run)

    def done(k: int) -> dict | None:
        side = folder / f"{shard_stem(k)}.json"
        return json.loads(side.read_text()) if side.is_file() and (folder / f"{shard_stem(k)}.npy").is_file() else None

    mine = lambda k: k % world == rank  # noqa: E731
    skipped = written = 0
    t0 = time.perf_counter()
    for k, first, last, text_sha, texts in _iter_shard_texts(src, skip_blank, column, shard_size,
                                                                lambda k: mine(k) and not done(k)):
        if not mine(k):
            continue
        old = done(k) if texts is None else None
        if old is not None:
            if old.get("text_sha256") != text_sha:
                raise ValueError(f"{src} lines {first}-{last} changed since {old['file']} was written; "
                                 "encode into a new folder")
            skipped += 1
            continue
        emb = np.asarray(encode(texts), dtype=np.float32)
        if emb.ndim != 2 or len(emb) != len(texts):
            raise ValueError(f"encode returned shape {emb.shape} for {len(texts)} sentences")
        start = k * shard_size
        _write_shard(folder, k, emb.astype(dtype, copy=False),
                     {"rows": [start, start + len(texts)], "lines": [first, last], "text_sha256": text_sha})
        written += 1
        log(f"rank {rank}/{world}: wrote {shard_stem(k)} (rows {start}-{start + len(texts) - 1}, "
            f"{time.perf_counter() - t0:.0f} s)")
    log(f"rank {rank}/{world}: {written} shards written, {skipped} already there")
    return _manifest_if_complete(folder, run)


# ------------------------------------------------------------------------------------------- reading back
class ShardSet:
    """A finished shard folder (one with ``manifest.json``).

    Attributes:
        manifest: the manifest dict; ``num_rows``, ``hidden_size``, ``dtype`` from it.

    Raises:
        FileNotFoundError: no manifest, or a listed shard file is missing.
        ValueError: an unknown format, or a shard whose size disagrees with the manifest.
    """

    def __init__(self, folder: str | os.PathLike):
        self.folder = Path(folder)
        f = self.folder / MANIFEST_NAME
        if not f.is_file():
            raise FileNotFoundError(f"{self.folder} has no {MANIFEST_NAME}: not a finished shard folder "
                                    "(rerun the same 'simcse encode' to finish it)")
        self.manifest = json.loads(f.read_text())
        if self.manifest.get("format") != FORMAT or self.manifest.get("format_version", 0) > FORMAT_VERSION:
            raise ValueError(f"{f} is not a simcse shard manifest this version reads")
        self.num_rows = int(self.manifest["num_rows"])
        self.dtype = np.dtype(self.manifest["dtype"])
        self._maps: dict[int, np.ndarray] = {}
        self.hidden_size = int(self.manifest.get("hidden_size") or (self._map(0).shape[1] if self.shards else 0))
        self._starts = np.array([s["rows"][0] for s in self.shards] + [self.num_rows], dtype=np.int64)

    @property
    def shards(self) -> list[dict]:
        return self.manifest["shards"]

    def __len__(self) -> int:
        return self.num_rows

    def _map(self, k: int) -> np.ndarray:
        if k not in self._maps:
            s = self.shards[k]
            p = self.folder / s["file"]
            if not p.is_file():
                raise FileNotFoundError(f"{p} is missing (listed in {MANIFEST_NAME})")
            a = np.load(p, mmap_mode="r")
            if a.shape[0] != s["rows"][1] - s["rows"][0] or a.ndim != 2:
                raise ValueError(f"{p} has shape {a.shape}; the manifest says rows {s['rows']}")
            self._maps[k] = a
        return self._maps[k]

    def iter_arrays(self) -> Iterator[tuple[int, np.ndarray]]:
        """``(first_row, float32 (rows, H))`` shard by shard, each read fully into memory then released."""
        for k, s in enumerate(self.shards):
            p = self.folder / s["file"]
            a = np.load(p)
            if a.shape[0] != s["rows"][1] - s["rows"][0]:
                raise ValueError(f"{p} has {a.shape[0]} rows; the manifest says rows {s['rows']}")
            yield s["rows"][0], a.astype(np.float32, copy=False)

    def rows(self, ids) -> np.ndarray:
        """float32 (len(ids), H): the rows with these ids, read through memory maps."""
        ids = np.asarray(ids, dtype=np.int64).ravel()
        if len(ids) and (ids.min() < 0 or ids.max() >= self.num_rows):
            raise IndexError(f"row ids must be in [0, {self.num_rows}), got {int(ids.min())}..{int(ids.max())}")
        out = np.empty((len(ids), self.hidden_size), np.float32)
        shard = np.searchsorted(self._starts, ids, side="right") - 1
        for k in np.unique(shard):
            sel = shard == k
            out[sel] = self._map(int(k))[ids[sel] - self._starts[k]]
        return out

    def sample(self, n: int, seed: int = 0) -> np.ndarray:
        """float32 (min(n, num_rows), H): rows drawn uniformly without replacement (sorted ids)."""
        rng = np.random.default_rng(seed)
        n = min(n, self.num_rows)
        return self.rows(np.sort(rng.choice(self.num_rows, size=n, replace=False)))

    def iter_sentences(self) -> Iterator[str]:
        """The encoded sentences in row order, read again from the input file.

        Raises:
            ValueError: the input file no longer holds the text a shard was encoded from.
            FileNotFoundError: the input file is gone.
        """
        src = self.manifest["input"]
        if isinstance(src, dict):  # a dataset (simcse encode --dataset_name)
            src = DatasetRef.from_description(src)
        elif not Path(src).is_file():
            raise FileNotFoundError(f"{src} (the encoded corpus, named in {self.folder / MANIFEST_NAME}) is missing")
        shard_size = self.manifest["shard_size"]
        seen = 0
        for k, first, last, text_sha, texts in _iter_shard_texts(src, self.manifest["skip_blank"],
                                                                 self.manifest.get("column"), shard_size, lambda k: True):
            if k >= len(self.shards) or self.shards[k]["text_sha256"] != text_sha:
                raise ValueError(f"{src} lines {first}-{last} differ from the text shard {k} was encoded from")
            seen += len(texts)
            yield from texts
        if seen != self.num_rows:
            raise ValueError(f"{src} now has {seen} records; the shards hold {self.num_rows}")

    def verify(self) -> None:
        """Recompute every shard file's SHA-256; ValueError naming the first that differs."""
        for s in self.shards:
            h = hashlib.sha256()
            with open(self.folder / s["file"], "rb") as f:
                for block in iter(lambda: f.read(1 << 22), b""):
                    h.update(block)
            if h.hexdigest() != s["sha256"]:
                raise ValueError(f"{self.folder / s['file']}: SHA-256 differs from the manifest (damaged file)")


def index_from_shards(shards: ShardSet, use_faiss: bool | None = None, fast: bool = False, kind: str | None = None,
                      **params):
    """A :class:`simcse.retrieval.index.VectorIndex` of every row of ``shards``, built shard by shard.

    IVF kinds get ``expected_size`` (the corpus size, for their default ``nlist``) and are trained on a
    uniform random sample of the rows (``train_size`` of them) rather than on the first rows. Rows of a
    set encoded without normalisation are scaled to unit length first (indexes score by inner product).
    Peak memory: the index plus one shard. ``kind`` and ``params``: see :func:`simcse.retrieval.index.make_index`.
    """
    from simcse.retrieval.index import KIND_ALIASES, FaissIVFIndex, make_index

    resolved = KIND_ALIASES.get(kind) if kind is not None else ("faiss_ivf" if fast else None)
    if resolved in ("faiss_ivf", "faiss_ivfpq") and (use_faiss or use_faiss is None):
        params.setdefault("expected_size", max(1, len(shards)))
    index = make_index(shards.hidden_size, use_faiss=use_faiss, fast=fast, kind=kind, **params)
    if shards.dtype == np.float16:  # the stored vectors were rounded to float16: scores round as such
        index.vector_dtype = "float16"
    unit = bool(shards.manifest.get("normalize", True))

    def prep(a: np.ndarray) -> np.ndarray:
        return a if unit else a / np.maximum(np.linalg.norm(a, axis=1, keepdims=True), 1e-12)

    if isinstance(index, FaissIVFIndex) and len(shards):
        index.train(prep(shards.sample(index.train_size)))
    for _, a in shards.iter_arrays():
        index.add(prep(a))
    index.finalize()
    return index
