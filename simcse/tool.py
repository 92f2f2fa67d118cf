"""``SimCSE``: encode, compare and search sentences with a trained (or any HF) sentence encoder.

    >>> from simcse import SimCSE
    >>> model = SimCSE("path/to/saved_model")              # pooler read from simcse_config.json
    >>> emb = model.encode(["A man plays a guitar.", "A dog runs."])   # torch.float32 (2, H), unit rows
    >>> model.similarity("A man plays a guitar.", ["A man plays music.", "A dog runs."])  # np (2,)
    >>> model.build_index("corpus.txt")                     # streams: encodes and adds 10,000 lines at a time
    >>> model.search("Someone plays an instrument.", top_k=3)   # [(sentence, score), ...]

The model side (loading, pooling, tokenising, batching) is :class:`simcse.SimCSEModel`; this class adds
input checks, shapes, cosine scores and the index (:mod:`simcse.index`). The interface follows the reference
SimCSE tool (``simcse/tool.py`` of princeton-nlp/SimCSE) with these differences: the pooler comes from the
saved config or the ``pooler`` argument, never from the model's name; progress bars only appear on a
terminal for long inputs; indexing streams; the fast faiss index uses the inner-product metric.
"""
from __future__ import annotations

import json
import logging
import os
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import torch

from .modeling import SimCSEModel

logger = logging.getLogger(__name__)

TOOL_META_NAME = "simcse_index.json"
SENTENCES_NAME = "sentences.jsonl"


def _check_sentences(sentences, name: str = "sentences") -> tuple[list[str], bool]:
    """Return (list of sentences, was a single str). TypeError/ValueError name the bad position."""
    if isinstance(sentences, str):
        items, single = [sentences], True
    elif isinstance(sentences, (list, tuple)):
        items, single = list(sentences), False
    else:
        raise TypeError(f"{name} must be a str or a list of str, got {type(sentences).__name__}")
    for i, s in enumerate(items):
        where = name if single else f"{name}[{i}]"
        if not isinstance(s, str):
            raise TypeError(f"{where} must be a str, got {type(s).__name__}")
        if not s.strip():
            raise ValueError(f"{where} is empty or only whitespace")
    return items, single


def _iter_lines(path: Path) -> Iterator[str]:
    """Non-blank lines of a UTF-8 text file, without their line ending (other whitespace is kept).

    Raises:
        ValueError: a line is not UTF-8 (the message gives the file, line number and byte).
    """
    try:
        with open(path, encoding="utf-8") as f:
            for line in f:
                line = line.rstrip("\r\n")
                if line.strip():
                    yield line
    except UnicodeDecodeError:
        raise ValueError(f"{utf8_error_location(path)}; expected a UTF-8 text file, one sentence per line") from None


def utf8_error_location(path: str | Path) -> str:
    """``'<path>:<line>: byte <k> (b'\\xNN') is not UTF-8'`` for the first line of ``path`` that is not UTF-8
    (1-based line and byte), or ``'<path> is not UTF-8'`` when every line decodes on its own."""
    from .data import first_undecodable_line

    bad = first_undecodable_line(path)
    return f"{path} is not UTF-8" if bad is None else f"{path}:{bad[0]}: byte {bad[1]} ({bad[2]!r}) is not UTF-8"


def _chunks(it, size: int) -> Iterator[list]:
    buf = []
    for x in it:
        buf.append(x)
        if len(buf) == size:
            yield buf
            buf = []
    if buf:
        yield buf


def _default_device() -> str:
    return "cuda" if torch.cuda.is_available() else "cpu"


class SimCSE:
    """Sentence encoder with cosine similarity and nearest-neighbour search.

    Args:
        model_name_or_path: a folder saved by :meth:`SimCSEModel.save_pretrained` (pooler and MLP from its
            ``simcse_config.json``), a plain HF encoder folder, a hub name (needs the hub), or an already
            built :class:`SimCSEModel`.
        device: ``"cpu"``, ``"cuda"``, ``"cuda:1"``, a ``torch.device``...; default CUDA when available,
            else CPU. An explicit device is used as given.
        pooler: pooler name (:data:`simcse.POOLERS`); overrides the saved one. For a plain HF encoder the
            default is ``cls`` (with a warning from :meth:`SimCSEModel.from_pretrained`).
        max_length: default truncation length in tokens for :meth:`encode` (capped at
            :attr:`SimCSEModel.max_input_tokens`, what the model's position embeddings allow).
        model_kwargs: more :meth:`SimCSEModel.from_pretrained` options (``mlp_only_train``, ``torch_dtype``,
            ``attn_implementation``, ``trust_remote_code``...).

    Raises:
        FileNotFoundError: a local folder that is missing or has no weights.
        ValueError: an unknown pooler name.
    """

    def __init__(self, model_name_or_path: str | os.PathLike | SimCSEModel, device: str | torch.device | None = None,
                 pooler: str | None = None, max_length: int = 128, **model_kwargs):
        if isinstance(model_name_or_path, SimCSEModel):
            if pooler is not None and pooler != model_name_or_path.pooler_type:
                raise ValueError(f"pooler={pooler!r} differs from the given model's {model_name_or_path.pooler_type!r}")
            self.model = model_name_or_path
            self.model_name_or_path = getattr(model_name_or_path.encoder.config, "_name_or_path", "") or ""
        else:
            self.model = SimCSEModel.from_pretrained(model_name_or_path, pooler_type=pooler, **model_kwargs)
            self.model_name_or_path = str(model_name_or_path)
        if self.model.tokenizer is None:
            raise ValueError("the model has no tokenizer; SimCSE needs one to encode text")
        self.device = torch.device(device if device is not None else _default_device())
        self.model.to(self.device)
        self.model.eval()
        self.max_length = self._check_positive(max_length, "max_length")
        self.index = None  # a simcse.index.VectorIndex once build_index/load_index ran
        self.sentences: list[str] = []  # the indexed sentences; position i has index id i

    # ---------------------------------------------------------------------------------------- helpers
    @property
    def hidden_size(self) -> int:
        """Embedding size H."""
        return self.model.hidden_size

    @property
    def pooler(self) -> str:
        """The pooler name in use."""
        return self.model.pooler_type

    @staticmethod
    def _check_positive(v, name: str) -> int:
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
            raise ValueError(f"{name} must be a positive int, got {v!r}")
        return int(v)

    # ------------------------------------------------------------------------------------------ encode
    def encode(
        self,
        sentences: str | list[str],
        batch_size: int = 64,
        max_length: int | None = None,
        normalize_to_unit: bool = True,
        return_numpy: bool = False,
        keepdim: bool = False,
        device: str | torch.device | None = None,
        show_progress: bool | None = None,
        dtype: torch.dtype | None = None,
    ) -> torch.Tensor | np.ndarray:
        """Embed one sentence or a list of sentences.

        Args:
            sentences: a str, or a list/tuple of str (each non-blank).
            batch_size: sentences per forward pass (batches are cut from the token-length-sorted list).
            max_length: truncation in tokens (default: the tool's ``max_length``, 128); longer inputs are
                cut with one warning per call.
            normalize_to_unit: scale each embedding to length 1 (cosine = dot product).
            return_numpy: return ``np.ndarray`` float32 instead of a CPU ``torch.Tensor`` float32.
            keepdim: for a single str, return (1, H) instead of (H,).
            device: run on this device for this call (the model stays there).
            show_progress: a tqdm bar over batches; None shows it for more than 10 batches when stderr is
                a terminal.
            dtype: compute precision under autocast, e.g. ``torch.bfloat16`` (output stays float32).

        Returns:
            float32 (H,) for a str (``keepdim``: (1, H)); (N, H) for a list, in input order; (0, H) for [].

        Raises:
            TypeError: ``sentences`` is not a str/list of str; an item is None, a list, a number...
                (the message names its position, e.g. ``sentences[3]``).
            ValueError: an item is empty or only whitespace; a non-positive ``batch_size``/``max_length``.
        """
        items, single = _check_sentences(sentences)
        batch_size = self._check_positive(batch_size, "batch_size")
        max_length = self._check_positive(self.max_length if max_length is None else max_length, "max_length")
        if device is not None:
            self.device = torch.device(device)
            self.model.to(self.device)
        if show_progress is None:
            show_progress = len(items) > 10 * batch_size and sys.stderr.isatty()
        emb = self.model.encode(items, batch_size=batch_size, max_length=max_length, device=self.device,
                                show_progress=show_progress, normalize=normalize_to_unit, dtype=dtype)
        if single and not keepdim:
            emb = emb[0]
        return emb if return_numpy else torch.from_numpy(emb)

    # -------------------------------------------------------------------------------------- similarity
    def _vectors(self, x, name: str, **encode_kwargs) -> tuple[np.ndarray, bool]:
        """(unit rows float32 (n, H), single) from sentences or from precomputed (H,)/(n, H) vectors."""
        if isinstance(x, (np.ndarray, torch.Tensor)):
            a = x.detach().float().cpu().numpy() if isinstance(x, torch.Tensor) else np.asarray(x)
            if a.dtype.kind not in "fiu":
                raise TypeError(f"{name} must be sentences or a float array, got an array of dtype {a.dtype}")
            if a.ndim not in (1, 2) or a.shape[-1] != self.hidden_size:
                raise ValueError(f"{name} must have shape ({self.hidden_size},) or (n, {self.hidden_size}), "
                                 f"got {tuple(a.shape)}")
            single = a.ndim == 1
            a = np.atleast_2d(a).astype(np.float64)
            if not np.isfinite(a).all():
                raise ValueError(f"{name}[{int(np.flatnonzero(~np.isfinite(a).all(axis=1))[0])}] has a NaN or inf")
        else:
            items, single = _check_sentences(x, name)
            a = self.encode(items, return_numpy=True, normalize_to_unit=False, **encode_kwargs)
        # scale rows to unit length in float64 (then float32): float32 norms of huge vectors overflow to inf
        a = np.asarray(a, dtype=np.float64)
        a = a / np.maximum(np.abs(a).max(axis=1, keepdims=True), 1e-300)  # max-abs 1: the norm cannot overflow
        norms = np.linalg.norm(a, axis=1, keepdims=True)
        return (a / np.maximum(norms, 1e-12)).astype(np.float32), single

    def similarity(self, queries, keys, **encode_kwargs) -> float | np.ndarray:
        """Cosine similarity between queries and keys.

        Args:
            queries, keys: a str, a list of str, or precomputed embeddings: (H,) for one, (n, H) for many
                (numpy or torch; they need not be unit length). A zero vector has similarity 0 to anything.
            encode_kwargs: passed to :meth:`encode` (``batch_size``, ``max_length``, ``dtype``...).

        Returns:
            one x one: float; one x M keys: float32 (M,); N queries x one: (N,); N x M: float32 (N, M).

        Raises:
            TypeError/ValueError: as :meth:`encode` for sentences (positions named as ``queries[i]`` /
                ``keys[i]``); a wrong array shape or a NaN/inf in an array.
        """
        q, q_single = self._vectors(queries, "queries", **encode_kwargs)
        k, k_single = self._vectors(keys, "keys", **encode_kwargs)
        sims = q @ k.T  # (N, M)
        if q_single and k_single:
            return float(sims[0, 0])
        if q_single:
            return sims[0]
        if k_single:
            return sims[:, 0]
        return sims

    # ------------------------------------------------------------------------------------------- index
    def build_index(self, sentences_or_file, use_faiss: bool | None = None, faiss_fast: bool = False,
                    batch_size: int = 64, chunk_size: int = 10_000, show_progress: bool | None = None,
                    **index_kwargs) -> None:
        """Index sentences for :meth:`search`, replacing any current index.

        Args:
            sentences_or_file: a list of str, or a path (str / ``os.PathLike``) to a UTF-8 text file with one
                sentence per line (blank lines are skipped).
            use_faiss: True: faiss (ImportError when missing); False: numpy; None: faiss when installed.
            faiss_fast: an approximate IVF index with the inner-product metric (see
                :class:`simcse.index.FaissIVFIndex`); exact search otherwise.
            batch_size: encoding batch size.
            chunk_size: sentences encoded and added per step: memory for embeddings is one chunk at a time.
            show_progress: a tqdm bar (sentences); None shows it on a terminal.
            index_kwargs: ``nlist``, ``nprobe``, ``train_size`` for the IVF index.

        Raises:
            FileNotFoundError: a path that is not a file.
            TypeError/ValueError: a bad sentence (its position is named).
        """
        from .index import make_index

        index = make_index(self.hidden_size, use_faiss=use_faiss, fast=faiss_fast, **index_kwargs)
        old = self.index, self.sentences
        self.index, self.sentences = index, []
        try:
            self.add_to_index(sentences_or_file, batch_size=batch_size, chunk_size=chunk_size,
                              show_progress=show_progress)
        except BaseException:
            self.index, self.sentences = old
            raise
        self.index.finalize()

    def add_to_index(self, sentences_or_file, batch_size: int = 64, chunk_size: int = 10_000,
                     show_progress: bool | None = None) -> int:
        """Encode and append sentences to the index (an exact one is made first if there is none).

        Takes the same inputs as :meth:`build_index`. Returns the number of sentences added.
        A list is checked whole before anything is added, so a bad item leaves the index unchanged; a
        file is read, encoded and added ``chunk_size`` lines at a time.
        """
        chunk_size = self._check_positive(chunk_size, "chunk_size")
        path = Path(sentences_or_file) if isinstance(sentences_or_file, (str, os.PathLike)) else None
        if path is not None:
            if not path.is_file():
                raise FileNotFoundError(f"{str(path)!r} is not a file (pass a list to index sentences themselves)")
            source: Iterator[str] = _iter_lines(path)
            total = None
        else:
            items, _ = _check_sentences(sentences_or_file)
            source, total = iter(items), len(items)
        if self.index is None:
            from .index import make_index

            self.index = make_index(self.hidden_size)
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
                self.sentences.extend(chunk)
                added += len(chunk)
                if bar is not None:
                    bar.update(len(chunk))
        finally:
            if bar is not None:
                bar.close()
        return added

    def search(self, queries: str | list[str], threshold: float = 0.6, top_k: int = 5,
               **encode_kwargs) -> list[tuple[str, float]] | list[list[tuple[str, float]]]:
        """The indexed sentences most similar to each query.

        Args:
            queries: a str or a list of str.
            threshold: keep results with cosine >= threshold (use -1 to keep all ``top_k``).
            top_k: at most this many results per query.
            encode_kwargs: passed to :meth:`encode` for the queries.

        Returns:
            for a str: ``[(sentence, score), ...]`` sorted by decreasing score (score: float cosine);
            for a list: one such list per query, in order.

        Raises:
            RuntimeError: no index was built or loaded, or it is empty.
            TypeError/ValueError: a bad query (position named), ``top_k`` < 1, a non-finite threshold.
        """
        if self.index is None or self.index.ntotal == 0:
            raise RuntimeError("the index is empty: call build_index(...) or load_index(...) before search(...)")
        top_k = self._check_positive(top_k, "top_k")
        if isinstance(threshold, bool) or not isinstance(threshold, (int, float, np.floating)) or not np.isfinite(threshold):
            raise ValueError(f"threshold must be a finite number, got {threshold!r}")
        items, single = _check_sentences(queries, "queries")
        if not items:
            return []
        q = self.encode(items, return_numpy=True, normalize_to_unit=True, **encode_kwargs)
        scores, ids = self.index.search(q, top_k)
        results = []
        for srow, irow in zip(scores, ids):
            results.append([(self.sentences[i], float(s)) for s, i in zip(srow, irow) if i >= 0 and s >= threshold])
        return results[0] if single else results

    def save_index(self, folder: str | os.PathLike) -> None:
        """Write the index, the sentences (``sentences.jsonl``, one JSON string a line) and a small
        ``simcse_index.json`` (model path, pooler, hidden size) into ``folder``.

        The files are written into a temporary sibling folder first and moved in by renames, so a failed save
        leaves ``folder`` as it was.

        Raises:
            RuntimeError: there is no index.
            simcse.storage.WriteError: disk full, file size limit, read-only or failing storage (one line
                naming the folder and the space needed vs free).
        """
        if self.index is None:
            raise RuntimeError("no index to save: call build_index(...) first")
        from .storage import atomic_folder

        model_ref = self.model_name_or_path
        if model_ref and Path(model_ref).exists():
            model_ref = str(Path(model_ref).resolve())
        meta = {"model_name_or_path": model_ref, "pooler": self.pooler, "hidden_size": self.hidden_size,
                "num_sentences": len(self.sentences)}
        needed = 4 * self.index.ntotal * self.index.dim + sum(len(s.encode()) + 8 for s in self.sentences)
        with atomic_folder(folder, "the index", needed) as tmp:  # whole or not at all; disk-full named
            self.index.save(tmp)
            with open(tmp / SENTENCES_NAME, "w", encoding="utf-8") as f:
                for s in self.sentences:
                    f.write(json.dumps(s, ensure_ascii=False) + "\n")
            (tmp / TOOL_META_NAME).write_text(json.dumps(meta, indent=2) + "\n")

    def load_index(self, folder: str | os.PathLike) -> None:
        """Load an index written by :meth:`save_index`.

        Raises:
            FileNotFoundError: not a saved index folder.
            ValueError: its vectors do not match this model's hidden size, or the sentence count differs.
        """
        from .index import load_index

        folder = Path(folder)
        index = load_index(folder)
        if index.dim != self.hidden_size:
            raise ValueError(f"index {folder} holds {index.dim}-d vectors; this model makes {self.hidden_size}-d ones")
        sents_file = folder / SENTENCES_NAME
        if not sents_file.is_file():
            raise FileNotFoundError(f"{sents_file} is missing")
        with open(sents_file, encoding="utf-8") as f:
            sentences = [json.loads(line) for line in f if line.strip()]
        if len(sentences) != index.ntotal:
            raise ValueError(f"{folder}: {len(sentences)} sentences but {index.ntotal} vectors")
        meta_file = folder / TOOL_META_NAME
        if meta_file.is_file():
            meta = json.loads(meta_file.read_text())
            if meta.get("pooler") not in (None, self.pooler):
                warnings.warn(f"index {folder} was built with pooler {meta['pooler']!r}; this model uses "
                              f"{self.pooler!r}", UserWarning, stacklevel=2)
        self.index, self.sentences = index, sentences

    # ------------------------------------------------------------------------------------------ export
    def save_pretrained(self, folder: str | os.PathLike) -> None:
        """Save the model in simcse's format (:meth:`SimCSEModel.save_pretrained`)."""
        self.model.save_pretrained(folder)

    def export_sentence_transformers(self, folder: str | os.PathLike, max_seq_length: int | None = None) -> Path:
        """Write a sentence-transformers model folder (see :func:`simcse.export.export_sentence_transformers`)."""
        from .export import export_sentence_transformers

        return export_sentence_transformers(self.model, folder, max_seq_length=max_seq_length or self.max_length)

    def export_huggingface(self, folder: str | os.PathLike) -> Path:
        """Write a plain HF model folder (see :func:`simcse.export.export_huggingface`)."""
        from .export import export_huggingface

        return export_huggingface(self.model, folder)

    def __repr__(self) -> str:
        n = self.index.ntotal if self.index is not None else 0
        return (f"SimCSE(model={self.model_name_or_path!r}, pooler={self.pooler!r}, device={str(self.device)!r}, "
                f"indexed={n})")
