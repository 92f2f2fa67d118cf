"""The index lifecycle of the :class:`simcse.SimCSE` tool: build, add, search, save and load an index of
sentences (the reference tool's ``build_index`` / ``add_to_index`` / ``search``, plus ``save_index`` /
``load_index``), and the rule that ties a saved index to the model and pooler that made its vectors.

:class:`IndexLifecycle` is a mixin: it relies on the tool's ``encode``, ``hidden_size``, ``pooler``,
``model_name_or_path``, ``num_cells`` / ``num_cells_in_search``, ``_use_device`` and ``_check_positive``.
"""
from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np
import torch

from simcse.files.dataset_source import DatasetRef
from simcse.files.inputs import check_sentences, iter_sentences
from simcse.files.storage import make_temp_folder, ordinary_permissions, writing
from simcse.retrieval.index import INDEX_CONFIG_NAME, KIND_ALIASES, load_index, make_index
from simcse.retrieval.scoring import search_index
from simcse.models.pooling import check_pooler_agrees
from simcse.retrieval.shards import MANIFEST_NAME as SHARD_MANIFEST, ShardSet, index_from_shards, is_shard_folder
from simcse.retrieval.store import SentenceStore, is_store

TOOL_META_NAME = "simcse_index.json"
SENTENCES_NAME = "sentences.jsonl"


def _chunks(it, size: int) -> Iterator[list]:
    buf = []
    for x in it:
        buf.append(x)
        if len(buf) == size:
            yield buf
            buf = []
    if buf:
        yield buf


SEARCH_THRESHOLD = 0.6  # search()'s default minimum cosine: the reference tool's SimCSE.search default (simcse search too)


def _replace_folder(folder: Path, write) -> None:
    """Call ``write(tmp)`` on a new sibling folder, then put it in ``folder``'s place (the old one is removed)."""
    folder = Path(folder)
    check_index_target(folder)
    folder.parent.mkdir(parents=True, exist_ok=True)
    tmp = make_temp_folder(folder.parent, f".{folder.name}.tmp-")  # published with an ordinary folder's mode
    try:
        write(tmp)
        ordinary_permissions(tmp)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    old = None
    if folder.exists():
        old = Path(tempfile.mkdtemp(prefix=f".{folder.name}.old-", dir=folder.parent))
        os.rmdir(old)
        os.replace(folder, old)
    os.replace(tmp, folder)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def same_model_path(a: str | os.PathLike, b: str | os.PathLike) -> bool:
    """Whether two model references name the same model: the same folder when both exist locally, else the
    same string (hub names)."""
    if Path(a).exists() and Path(b).exists():
        return Path(a).resolve() == Path(b).resolve()
    return str(a).rstrip("/") == str(b).rstrip("/")


def check_index_target(folder: str | os.PathLike) -> None:
    """The rule for where an index may be saved, checked by :meth:`IndexLifecycle.save_index` and by ``simcse
    index`` before anything is encoded: a new folder, an empty one, or a saved index (replaced).

    Raises:
        FileExistsError: ``folder`` or a folder above it is an existing file (one clear line).
        ValueError: ``folder`` is an existing folder that is neither empty nor a saved index.
    """
    folder = Path(folder)
    for p in (folder, *folder.parents):
        if p.exists():
            if not p.is_dir():
                where = "is" if p == folder else f"lies under {str(p)!r}, which is"
                raise FileExistsError(f"cannot save the index into {str(folder)!r}: it {where} an existing file, "
                                      "not a folder; give a new folder or an index folder to overwrite")
            break
    if folder.is_dir() and any(folder.iterdir()) and not (folder / INDEX_CONFIG_NAME).is_file():
        raise ValueError(f"{folder} exists and is not a saved index (nor an empty folder); not replacing it: give a "
                         "new folder, an empty one or an index folder to overwrite")


def _recorded_model_and_pooler(meta_file: Path, model: str | None, pooler: str | None) -> tuple[str, str | None]:
    """The model and pooler an index was built with (from its ``simcse_index.json``), checked against the
    explicit ``--model`` / ``--pooler``: a query encoded otherwise than the indexed vectors scores wrongly.

    Raises:
        ValueError: no model anywhere; an explicit pooler or model that differs from the recorded one.
    """
    meta = json.loads(meta_file.read_text()) if meta_file.is_file() else {}
    rec_model, rec_pooler = meta.get("model_name_or_path") or None, meta.get("pooler")
    check_pooler_agrees(pooler, rec_pooler, "the index", option="--pooler", where=str(meta_file))
    if model is None:
        if rec_model is None:
            raise ValueError(f"no --model and {meta_file} " + ("does not name the model" if meta_file.is_file()
                                                               else "is missing") + ": pass --model")
        model = rec_model
    elif rec_model is not None and meta.get("model_fingerprint") is None and Path(rec_model).exists() \
            and not same_model_path(model, rec_model):  # older indexes; else load_index compares the content
        raise ValueError(f"--model {model} differs from the model the index was built with ({rec_model}, "
                         f"{meta_file}); drop --model to use it")
    return model, pooler if pooler is not None else rec_pooler


def model_for_index(index: str, model: str | None, pooler: str | None,
                    max_length: int | None = None) -> tuple[str, str | None]:
    """(model, pooler) to query the index folder ``index`` with: the recorded ones unless given (see
    :func:`_recorded_model_and_pooler`); checks that ``index`` holds an index before any model is loaded, and
    that an explicit ``max_length`` (``--max-length``) is the one the index records (the tool applies the record
    when none is given: :meth:`IndexLifecycle.load_index`).

    Raises:
        ValueError: no model given or recorded; a given model/pooler/max_length that differs from the recorded
            one; ``index`` is not a saved index.
    """
    if not Path(index).is_dir():
        raise ValueError(f"--index {index!r} is not a folder: expected a folder written by 'simcse index'")
    meta_file = Path(index) / TOOL_META_NAME
    recorded = json.loads(meta_file.read_text()).get("max_length") if meta_file.is_file() else None
    if max_length is not None and recorded is not None and max_length != recorded:
        raise ValueError(f"--max-length {max_length} differs from the max length the index was encoded with "
                         f"({recorded}, {meta_file}); drop --max-length to use it")
    model, pooler = _recorded_model_and_pooler(meta_file, model, pooler)
    if not (Path(index) / INDEX_CONFIG_NAME).is_file():  # before the (slow) model load
        raise ValueError(f"--index {index!r} is not a saved index: {INDEX_CONFIG_NAME} is missing")
    return model, pooler


def _check_fast_and_kind(faiss_fast: bool, kind: str | None) -> None:
    """ValueError when ``faiss_fast`` (an IVF index) is combined with another ``kind``."""
    if faiss_fast and kind is not None and KIND_ALIASES.get(kind, kind) != "faiss_ivf":
        raise ValueError(f"faiss_fast=True asks for an IVF index, but kind={kind!r} asks for another kind; give one "
                         "of them")


class IndexIdentity:
    """What ties an index's vectors to the encoding that made them, checked by :class:`IndexLifecycle`: the model
    (:func:`simcse.models.folder.model_fingerprint`, earlier records' fingerprint accepted) and the ``max_length``
    the vectors were encoded with (recorded, applied on load, one per index)."""

    def _check_same_model(self, recorded_fingerprint: str | None, recorded_model: str | None, what: str) -> None:
        """ValueError unless the model that made some stored vectors is this tool's model: compared by
        :attr:`model_fingerprint` (content) when recorded, else (records older than fingerprints) by folder when
        both folders exist. Queries encoded by another model would search vectors they do not match."""
        if recorded_fingerprint is not None:
            if recorded_fingerprint == self.model_fingerprint or recorded_fingerprint == self._legacy_fingerprint():
                return
        elif not (recorded_model and self.model_name_or_path and Path(recorded_model).exists()
                  and Path(self.model_name_or_path).exists()
                  and not same_model_path(self.model_name_or_path, recorded_model)):
            return
        mine = f"{self.model_name_or_path} ({self.model_fingerprint[:19]})"
        theirs = f"{recorded_model or 'a model'}" + (f" ({recorded_fingerprint[:19]})" if recorded_fingerprint else "")
        raise ValueError(f"{what} another model: {theirs}; this tool runs {mine}. Its queries would search vectors "
                         "of another model: load that model, or encode the corpus again with this one")

    def _effective_max_length(self, max_length: int) -> int:
        """The truncation an encode with ``max_length`` applies (capped at the model's input limit)."""
        return min(int(max_length), int(getattr(self.model, "max_input_tokens", max_length)))

    def _check_index_max_length(self) -> None:
        """Record the tool's max_length for a new index; ValueError when vectors of an index encoded with
        another one would be mixed with this tool's (one index, one encoding)."""
        mine = self._effective_max_length(self.max_length)
        if self.index.ntotal == 0 or self._index_max_length is None and self._index_folder is None:
            self._index_max_length = mine
        elif self._index_max_length is not None and self._index_max_length != mine:
            raise ValueError(f"the index was encoded with max_length {self._index_max_length}; this tool now encodes "
                             f"with max_length {self.max_length}: set it back before adding to the index")

    def _legacy_fingerprint(self) -> str | None:
        """The fingerprint earlier versions recorded for this model (without the tokenizer's settings), so that
        their indexes and shards still load; None for a model with its own fingerprint (ONNX)."""
        from simcse.models.folder import model_fingerprint

        return None if callable(getattr(self.model, "fingerprint", None)) else model_fingerprint(self.model, legacy=True)

    def _recorded_max_length(self, recorded: int | None, folder: Path) -> int | None:
        """Apply the ``max_length`` an index (or the shards it is built from) records (None: saved before it was
        recorded): the tool's queries are then cut as the indexed sentences were. Returns the effective value.

        Raises:
            ValueError: the tool was given another ``max_length`` explicitly.
        """
        if recorded is None:
            return None
        recorded = self._effective_max_length(recorded)
        if self._max_length_given and self._effective_max_length(self.max_length) != recorded:
            raise ValueError(f"{folder} was encoded with max_length {recorded}, this tool encodes with "
                             f"max_length {self.max_length}: its queries would be cut otherwise than the indexed "
                             f"sentences; leave max_length unset (or give {recorded}) to search it")
        self.max_length = recorded  # queries encoded as the indexed sentences were
        return recorded


class IndexLifecycle(IndexIdentity):
    """build_index / add_to_index / search / save_index / load_index of :class:`simcse.SimCSE` (see the module)."""

    index = None

    # ------------------------------------------------------------------------------------------- index
    def build_index(self, sentences_or_file_path, use_faiss: bool | None = None, faiss_fast: bool = False,
                    device: str | torch.device | None = None, batch_size: int = 64, *, column: str | None = None,
                    chunk_size: int = 10_000, show_progress: bool | None = None, **index_kwargs) -> None:
        """Index sentences for :meth:`search`, replacing any current index (the reference's ``build_index``,
        same parameter order).

        Args:
            sentences_or_file_path: a sequence of str, a path (str / ``os.PathLike``) to a UTF-8 sentence
                file: plain text, one sentence per line (split only at ``\\n``); ``.csv``/``.tsv`` with a
                header (``column`` names the sentence column); ``.jsonl`` (one JSON string or object a line);
                or a folder of shards written by ``simcse encode --output DIR`` (:mod:`simcse.retrieval.shards`; nothing
                is encoded again); or a :class:`simcse.files.dataset_source.DatasetRef` (a dataset's text
                column). Blank lines and cells are skipped.
            use_faiss: True: faiss (ImportError when missing); False: numpy; None: faiss when installed.
            faiss_fast: the reference's approximate index: an IVF index with the inner-product metric (see
                :class:`simcse.retrieval.index.FaissIVFIndex`) with ``nlist`` = ``num_cells`` (100) clusters and
                ``nprobe`` = ``num_cells_in_search`` (10) probes unless given. ``kind="ivf"`` alone is the same index
                with the sizes of :class:`~simcse.retrieval.index.FaissIVFIndex` (about ``4 * sqrt(N)`` clusters);
                ``simcse index --fast`` is ``--kind ivf``. With another ``kind`` it is a ValueError.
            device: encode on this device (as :meth:`encode`); the index itself is on the CPU.
            batch_size: encoding batch size.
            column: (keyword-only) the sentence column/field of a CSV, TSV or JSONL file.
            chunk_size: (keyword-only) sentences encoded and added per step: memory for embeddings is one
                chunk at a time.
            show_progress: (keyword-only) a tqdm bar (sentences); None shows it on a terminal.
            index_kwargs: (keyword-only) ``kind`` (``"exact"``, ``"ivf"``, ``"ivfpq"``, ``"hnsw"``) and that
                kind's parameters (``nlist``, ``nprobe``, ``train_size``, ``m``, ``refine_factor``, ...; see
                :func:`simcse.retrieval.index.make_index`); for ``faiss_fast``, ``nlist`` / ``nprobe`` default to
                ``num_cells`` / ``num_cells_in_search``.

        The sentences are kept on disk (:class:`simcse.retrieval.store.SentenceStore`, in ``$TMPDIR`` until
        :meth:`save_index`), not in memory.

        Raises:
            FileNotFoundError: a path that is not a file or a finished shard folder.
            TypeError/ValueError: a bad sentence (its position is named); a bad file record (file:line named);
                shards of another hidden size, pooler or model (:attr:`model_fingerprint`); ``faiss_fast`` with a
                ``kind`` other than IVF; an IVF/IVF-PQ index of an input with no sentence (nothing to train on;
                the previous index stays).
        """
        _check_fast_and_kind(faiss_fast, index_kwargs.get("kind"))
        if faiss_fast:  # the reference's sizes, for sentences and shards alike
            index_kwargs.setdefault("nlist", self.num_cells)
            index_kwargs.setdefault("nprobe", min(self.num_cells_in_search, index_kwargs["nlist"] or self.num_cells))
        if isinstance(sentences_or_file_path, (str, os.PathLike)) and is_shard_folder(sentences_or_file_path):
            self._build_index_from_shards(Path(sentences_or_file_path), use_faiss, faiss_fast, index_kwargs)
            return
        index = make_index(self.hidden_size, use_faiss=use_faiss, fast=faiss_fast, **index_kwargs)
        old = self.index, self.sentences
        old = old + (self._index_max_length,)
        self.index, self.sentences, self._index_folder, self._index_max_length = index, [], None, None
        try:
            self.add_to_index(sentences_or_file_path, device, batch_size, column=column, chunk_size=chunk_size,
                              show_progress=show_progress)
            self.index.finalize()  # an IVF index with no vector cannot be trained: ValueError, the old index stays
        except BaseException:
            self.index, self.sentences, self._index_max_length = old
            raise

    def _build_index_from_shards(self, folder: Path, use_faiss, faiss_fast, index_kwargs) -> None:
        shards = ShardSet(folder)
        if shards.hidden_size != self.hidden_size:
            raise ValueError(f"{folder} holds {shards.hidden_size}-d vectors; this model makes {self.hidden_size}-d ones")
        recorded = shards.manifest.get("pooler")
        check_pooler_agrees(self.pooler, recorded, f"the shards in {folder}", where=SHARD_MANIFEST,
                            fix=f"load the model with pooler={recorded!r} to use them")
        self._check_same_model(shards.manifest.get("model_fingerprint"), shards.manifest.get("model"),
                               f"the shards in {folder} were encoded by")
        recorded = shards.manifest.get("max_length")
        self._recorded_max_length(recorded, folder)  # before the (long) build: another explicit one is refused
        index = index_from_shards(shards, use_faiss=use_faiss, fast=faiss_fast, **index_kwargs)
        store = SentenceStore.temporary()
        for chunk in _chunks(shards.iter_sentences(), 100_000):
            store.extend(chunk)
        self.index, self.sentences, self._index_folder = index, store, None
        self._index_max_length = self._recorded_max_length(recorded, folder)

    def _writable_sentences(self):
        """The sentence store to append to: a new temporary one (with the current sentences copied in)
        unless the current one is already such a store."""
        if not (isinstance(self.sentences, SentenceStore) and self.sentences.writable):
            store = SentenceStore.temporary()
            for chunk in _chunks(iter(self.sentences), 100_000):
                store.extend(chunk)
            self.sentences = store
        return self.sentences

    def add_to_index(self, sentences_or_file_path, device: str | torch.device | None = None, batch_size: int = 64, *,
                     column: str | None = None, chunk_size: int = 10_000, show_progress: bool | None = None) -> int:
        """Encode and append sentences to the index (the reference's ``add_to_index``, same parameter order);
        an exact index is made first if there is none.

        Takes the same inputs as :meth:`build_index`, and a :class:`simcse.files.dataset_source.DatasetRef` (a
        dataset's text column, read row by row; blank rows skipped). Returns the number of sentences added.
        A list is checked whole before anything is added, so a bad item leaves the index unchanged; a
        file is read, encoded and added ``chunk_size`` lines at a time.
        """
        sentences_or_file = sentences_or_file_path
        self._use_device(device)
        chunk_size = self._check_positive(chunk_size, "chunk_size")
        path = Path(sentences_or_file) if isinstance(sentences_or_file, (str, os.PathLike)) else None
        if isinstance(sentences_or_file, DatasetRef):  # a dataset's text column, read row by row
            source, total = (t for _, t in sentences_or_file.rows() if t.strip()), None
        elif path is not None:
            if not path.is_file():
                raise FileNotFoundError(f"{str(path)!r} is not a file (pass a list to index sentences themselves)")
            source: Iterator[str] = iter_sentences(path, column)
            total = None
        else:
            if column is not None:
                raise ValueError(f"column={column!r} applies to a CSV/TSV/JSONL file, not to a list of sentences")
            items, _ = check_sentences(sentences_or_file)
            source, total = iter(items), len(items)
        if self.index is None:
            self.index = make_index(self.hidden_size)
        self._check_index_max_length()
        if show_progress is None:
            show_progress = sys.stderr.isatty()
        bar = None
        if show_progress:
            from tqdm.auto import tqdm

            bar = tqdm(total=total, desc="indexing", unit="sentence")
        added = 0
        try:
            for chunk in _chunks(source, chunk_size):
                emb = self.encode(chunk, batch_size=batch_size, return_numpy=True, normalize_to_unit=True,
                                  show_progress=False)
                self.index.add(emb)
                self._writable_sentences().extend(chunk)
                added += len(chunk)
                if bar is not None:
                    bar.update(len(chunk))
        finally:
            if bar is not None:
                bar.close()
        return added

    def search(self, queries: str | Sequence[str], device: str | torch.device | None = None, threshold: float = SEARCH_THRESHOLD,
               top_k: int = 5, **encode_kwargs) -> list[tuple[str, float]] | list[list[tuple[str, float]]]:
        """The indexed sentences most similar to each query (the reference's ``search``, same parameter order).

        Args:
            queries: a str or a sequence of str.
            device: encode the queries on this device (as :meth:`encode`).
            threshold: keep results with cosine >= threshold (use -1 to keep all ``top_k``); an exact
                duplicate of an indexed sentence scores 1.0, so ``threshold=1.0`` finds it.
            top_k: at most this many results per query.
            encode_kwargs: (keyword-only) passed to :meth:`encode` for the queries.

        Returns:
            for a str: ``[(sentence, score), ...]`` sorted by decreasing score (score: float cosine in
            [-1, 1], :func:`simcse.retrieval.scoring.clip_cosine`); for a sequence: one such list per query, in order.

        Raises:
            RuntimeError: no index was built or loaded, or it is empty.
            TypeError/ValueError: a bad query (position named), ``top_k`` < 1, a non-finite threshold.
        """
        self._use_device(device)
        if self.index is None or self.index.ntotal == 0:
            raise RuntimeError("the index is empty: call build_index(...) or load_index(...) before search(...)")
        top_k = self._check_positive(top_k, "top_k")
        if isinstance(threshold, bool) or not isinstance(threshold, (int, float, np.floating)) or not np.isfinite(threshold):
            raise ValueError(f"threshold must be a finite number, got {threshold!r}")
        items, single = check_sentences(queries, "queries")
        if not items:
            return []
        q = self.encode(items, return_numpy=True, normalize_to_unit=True, **encode_kwargs)
        results = [[(self.sentences[i], s) for i, s in hits] for hits in self.search_vectors(q, top_k, threshold)]
        return results[0] if single else results

    def search_vectors(self, queries: np.ndarray, top_k: int, threshold: float) -> list[list[tuple[int, float]]]:
        """For each unit query vector, ``[(id, cosine), ...]`` of its ``top_k`` nearest indexed vectors with
        cosine >= ``threshold``, best first: :func:`simcse.retrieval.scoring.search_index` (scores in [-1, 1],
        rounded as the stored dtype allows), the one search path of :meth:`search` and ``simcse serve``.

        Args:
            queries: float32 (Q, H) unit rows.
        """
        scores, ids = search_index(self.index, queries, top_k)
        return [[(int(i), float(s)) for s, i in zip(srow, irow) if i >= 0 and s >= threshold]
                for srow, irow in zip(scores, ids)]

    def save_index(self, folder: str | os.PathLike) -> None:
        """Write the index, the sentences (an on-disk :class:`simcse.retrieval.store.SentenceStore`:
        ``sentences.txt`` + ``sentences.offsets``) and a small ``simcse_index.json`` (model path, pooler,
        hidden size) into ``folder``.

        Atomic: everything is written into a temporary sibling folder that then takes ``folder``'s place,
        so an interrupted save leaves the previous index (or nothing) under ``folder``, never a mix.

        The files are written into a temporary sibling folder first and moved in by renames, so a failed save
        leaves ``folder`` as it was.

        Raises:
            RuntimeError: there is no index.
            FileExistsError: ``folder`` (or a folder above it) is an existing file; nothing is written.
            ValueError: ``folder`` is a non-empty folder that is not a saved index (:func:`check_index_target`).
            simcse.files.storage.WriteError: disk full, file size limit, read-only or failing storage (one line
                naming the folder and the space needed vs free).
        """
        if self.index is None:
            raise RuntimeError("no index to save: call build_index(...) first")
        folder = Path(folder)
        check_index_target(folder)
        model_ref = self.model_name_or_path
        if model_ref and Path(model_ref).exists():
            model_ref = str(Path(model_ref).resolve())
        meta = {"model_name_or_path": model_ref, "model_fingerprint": self.model_fingerprint, "pooler": self.pooler,
                "hidden_size": self.hidden_size, "num_sentences": len(self.sentences),
                "max_length": self._index_max_length}  # what its vectors were encoded with: applied on load

        def write(tmp: Path) -> None:
            self.index.save(tmp)
            if isinstance(self.sentences, SentenceStore):
                self.sentences.copy_to(tmp)
            else:
                SentenceStore.create(tmp).extend(self.sentences)
            (tmp / TOOL_META_NAME).write_text(json.dumps(meta, indent=2) + "\n")

        same = self._index_folder is not None and folder.resolve() == self._index_folder
        needed = 4 * self.index.ntotal * self.index.dim  # the vectors (the sentences come on top)
        with writing("the index", folder.parent, needed):  # disk full etc.: one line; the old folder is kept
            _replace_folder(folder, write)
        if same:  # the loaded files were replaced: read the index and sentences from the new ones
            self.load_index(folder)

    def load_index(self, folder: str | os.PathLike) -> None:
        """Load an index written by :meth:`save_index`.

        Raises:
            FileNotFoundError: not a saved index folder.
            ValueError: its vectors do not match this model's hidden size, the sentence count differs, or the
                index records another pooler than this model's (its vectors were made with that pooler, so
                queries encoded with this one would score wrongly; load the model with the index's pooler), or
                another model than this tool's: another :attr:`model_fingerprint` (content: a copy of the model
                folder is the same model), or, for indexes saved before fingerprints, another existing folder.
        """
        folder = Path(folder)
        index = load_index(folder)
        if index.dim != self.hidden_size:
            raise ValueError(f"index {folder} holds {index.dim}-d vectors; this model makes {self.hidden_size}-d ones")
        sents_file = folder / SENTENCES_NAME
        if is_store(folder):
            sentences = SentenceStore(folder)
        elif sents_file.is_file():  # folders saved before the on-disk store
            with open(sents_file, encoding="utf-8", newline="\n") as f:
                sentences = [json.loads(line) for line in f if line.strip()]
        else:
            raise FileNotFoundError(f"{folder} holds no sentences (sentences.txt + sentences.offsets, or {SENTENCES_NAME})")
        if len(sentences) != index.ntotal:
            raise ValueError(f"{folder}: {len(sentences)} sentences but {index.ntotal} vectors")
        meta_file = folder / TOOL_META_NAME
        if meta_file.is_file():
            meta = json.loads(meta_file.read_text())
            check_pooler_agrees(self.pooler, meta.get("pooler"), f"index {folder}", where=TOOL_META_NAME,
                                fix=f"load the model with pooler={meta.get('pooler')!r} to search it")
            self._check_same_model(meta.get("model_fingerprint"), meta.get("model_name_or_path") or None,
                                   f"index {folder} was built with")
        recorded = self._recorded_max_length(meta.get("max_length") if meta_file.is_file() else None, folder)
        self.index, self.sentences, self._index_max_length = index, sentences, recorded
        self._index_folder = folder.resolve()
