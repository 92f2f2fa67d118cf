"""``SimCSE``: encode, compare and search sentences with a trained (or any HF) sentence encoder.

    >>> from simcse import SimCSE
    >>> model = SimCSE("path/to/saved_model")              # pooler read from simcse_config.json
    >>> emb = model.encode(["A man plays a guitar.", "A dog runs."])   # torch.float32 (2, H), unit rows
    >>> model.similarity("A man plays a guitar.", ["A man plays music.", "A dog runs."])  # np (2,)
    >>> model.build_index("corpus.txt")                     # streams: encodes and adds 10,000 lines at a time
    >>> model.search("Someone plays an instrument.", top_k=3)   # [(sentence, score), ...]

The model side (loading, pooling, tokenising, batching) is :class:`simcse.SimCSEModel`; this class adds
input checks, shapes, cosine scores and the index (:mod:`simcse.index`). Every method takes the reference
SimCSE tool's parameters (``simcse/tool.py`` of princeton-nlp/SimCSE) in its order, with its names and
defaults; this class's own options are keyword-only. What differs (``docs/porting.md``): the pooler is the
one the model folder records (else the ``pooler`` argument, else ``cls``), never guessed from the model's
name; cosines are in [-1, 1]; progress bars only appear on a terminal for long inputs; indexing streams;
sentence files may be CSV/TSV/JSONL.
"""
from __future__ import annotations

import json
import logging
import os
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np
import torch

from .modeling import SimCSEModel

logger = logging.getLogger(__name__)

TOOL_META_NAME = "simcse_index.json"
SENTENCES_NAME = "sentences.jsonl"


def _check_sentences(sentences, name: str = "sentences") -> tuple[list[str], bool]:
    """Return (list of sentences, was a single str). TypeError/ValueError name the bad position.

    Accepts a str, a list/tuple (any ``collections.abc.Sequence`` but bytes), a 1-d numpy array of str, or
    an object with ``tolist()`` (a pandas Series or Index of str).
    """
    if isinstance(sentences, str):
        items, single = [sentences], True
    elif isinstance(sentences, np.ndarray):
        if sentences.ndim != 1:
            raise TypeError(f"{name} must be a str or a list of str (or a 1-d numpy array of str), got a "
                            f"{sentences.ndim}-d numpy array")
        items, single = sentences.tolist(), False
    elif isinstance(sentences, Sequence) and not isinstance(sentences, (bytes, bytearray)):
        items, single = list(sentences), False
    elif hasattr(sentences, "tolist") and not isinstance(sentences, torch.Tensor):  # pandas Series / Index
        items, single = list(sentences.tolist()), False
    else:
        raise TypeError(f"{name} must be a str or a list of str (or a tuple, 1-d numpy array or pandas Series of "
                        f"str), got {type(sentences).__name__}")
    for i, s in enumerate(items):
        where = name if single else f"{name}[{i}]"
        if not isinstance(s, str):
            raise TypeError(f"{where} must be a str, got {type(s).__name__}")
        if not s.strip():
            raise ValueError(f"{where} is empty or only whitespace")
    return [str(s) for s in items], single


def _iter_sentences(path: Path, column: str | None = None) -> Iterator[str]:
    """Non-blank records of a sentence file (text, CSV/TSV column, JSONL; see :mod:`simcse.inputs`).

    Text lines are split only at ``\\n`` and kept without their ending (other whitespace is kept).

    Raises:
        ValueError: not UTF-8, or a bad CSV/JSONL record (the message gives the file and line).
    """
    from .inputs import sentence_rows

    for _, line in sentence_rows(path, column):
        if line.strip():
            yield line


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


def _replace_folder(folder: Path, write) -> None:
    """Call ``write(tmp)`` on a new sibling folder, then put it in ``folder``'s place (the old one is removed)."""
    import shutil
    import tempfile

    from .index import INDEX_CONFIG_NAME

    folder = Path(folder)
    if folder.exists() and not (folder.is_dir() and (not any(folder.iterdir()) or (folder / INDEX_CONFIG_NAME).is_file())):
        raise ValueError(f"{folder} exists and is not a saved index (nor an empty folder); not replacing it")
    folder.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{folder.name}.tmp-", dir=folder.parent))
    try:
        write(tmp)
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


def _default_device() -> str:
    return "cuda" if torch.cuda.is_available() else "cpu"


def resolve_device(device: str | torch.device | None) -> torch.device:
    """``device`` as a ``torch.device`` that this machine has (None: CUDA when available, else CPU).

    Raises:
        ValueError: not a device name; a CUDA device without CUDA (or with fewer GPUs than its index); an
            MPS device without MPS. One line, instead of torch's deep ``AssertionError``.
    """
    if device is None:
        return torch.device(_default_device())
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError) as e:
        raise ValueError(f"device={device!r} is not a torch device name (expected 'cpu', 'cuda', 'cuda:1'...): "
                         f"{str(e).splitlines()[0] if str(e) else type(e).__name__}") from None
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise ValueError(f"device={str(device)!r} but CUDA is not available on this machine "
                             "(torch.cuda.is_available() is False); use device='cpu' or leave device unset")
        if dev.index is not None and dev.index >= torch.cuda.device_count():
            raise ValueError(f"device={str(device)!r} but this machine has {torch.cuda.device_count()} CUDA device(s)")
    elif dev.type == "mps" and not (hasattr(torch.backends, "mps") and torch.backends.mps.is_available()):
        raise ValueError(f"device={str(device)!r} but MPS is not available on this machine; use device='cpu'")
    return dev


# Keyword arguments that SimCSE passes on to SimCSEModel.from_pretrained / transformers' from_pretrained.
MODEL_KWARGS = ("mlp_only_train", "new_mlp_init", "trust_remote_code", "torch_dtype", "dtype",
                "attn_implementation", "revision", "cache_dir", "local_files_only", "token", "subfolder",
                "use_safetensors", "low_cpu_mem_usage", "force_download")
INIT_ARGS = ("model_name_or_path", "device", "num_cells", "num_cells_in_search", "pooler", "max_length", "backend")


def _check_model_kwargs(kwargs: dict) -> None:
    unknown = sorted(set(kwargs) - set(MODEL_KWARGS))
    if unknown:
        raise TypeError(f"SimCSE() got unexpected keyword argument(s) {', '.join(map(repr, unknown))}; it accepts "
                        f"{', '.join(INIT_ARGS)} and the model-loading options {', '.join(MODEL_KWARGS)}")


# Cosines of unit vectors computed in float32 carry a rounding error of about sqrt(H) * 2**-24; a score
# within this of +-1 is reported as +-1, so that a sentence's exact duplicate scores 1.0.
COSINE_ROUNDING = 1e-5


def clip_cosine(scores):
    """Cosine scores (float or array of any shape) put into [-1, 1].

    Values beyond +-1 by float rounding become +-1, and so do values within :data:`COSINE_ROUNDING` of
    +-1 (float32 dot products of unit vectors deviate from the exact cosine by up to about
    ``sqrt(H) * 6e-8``; ``scripts/measure_cosine_rounding.py`` measured up to 1 + 4.8e-7 for H = 384).
    NaN and -inf (an empty result slot) are left as they are. Returns the same type (float -> float,
    array -> float32 array).
    """
    if isinstance(scores, (float, int, np.floating)):
        return float(clip_cosine(np.array([scores], dtype=np.float64))[0])
    a = np.array(scores, dtype=np.float32, copy=True)
    finite = np.isfinite(a)
    a[finite & (a >= 1.0 - COSINE_ROUNDING)] = 1.0
    a[finite & (a <= -1.0 + COSINE_ROUNDING)] = -1.0
    return a


def _pooler_for(model_name_or_path, pooler: str | None) -> str | None:
    """The pooler to load ``model_name_or_path`` with: the one its folder records
    (:func:`simcse.pooling.recorded_pooler`), else ``pooler`` (None: the loader's default).

    Raises:
        ValueError: ``pooler`` differs from the recorded one (embeddings would not be the model's own).
    """
    from .pooling import get_pooler, recorded_pooler

    if pooler is not None:
        get_pooler(pooler)  # an unknown name fails first, with the list of poolers
    rec = recorded_pooler(model_name_or_path)
    if rec is None:
        return pooler
    if pooler is not None and pooler != rec[0]:
        raise ValueError(f"pooler={pooler!r} differs from the pooler {str(model_name_or_path)!r} records "
                         f"({rec[0]!r}, in {rec[1]}); drop pooler= to use it (SimCSEModel.from_pretrained("
                         "..., pooler_type=...) loads a model with another pooler on purpose)")
    return rec[0]


def same_model_path(a: str | os.PathLike, b: str | os.PathLike) -> bool:
    """Whether two model references name the same model: the same folder when both exist locally, else the
    same string (hub names)."""
    if Path(a).exists() and Path(b).exists():
        return Path(a).resolve() == Path(b).resolve()
    return str(a).rstrip("/") == str(b).rstrip("/")


def _check_folder_target(folder: Path) -> None:
    """FileExistsError (one clear line) when ``folder`` or a folder above it is an existing non-folder."""
    for p in (folder, *folder.parents):
        if p.exists():
            if not p.is_dir():
                where = "is" if p == folder else f"lies under {str(p)!r}, which is"
                raise FileExistsError(f"cannot save the index into {str(folder)!r}: it {where} an existing file, "
                                      "not a folder; give a new folder or an index folder to overwrite")
            return


class SimCSE:
    """Sentence encoder with cosine similarity and nearest-neighbour search.

    The constructor and the methods take the reference tool's parameters (princeton-nlp/SimCSE
    ``simcse/tool.py``, PyPI ``simcse`` 0.4) in its positional order, with its names and defaults; this
    class's own options come after them and are keyword-only. ``docs/porting.md`` lists what differs.

    Args:
        model_name_or_path: a folder saved by :meth:`SimCSEModel.save_pretrained` (pooler and MLP from its
            ``simcse_config.json``), a plain HF encoder folder, a hub name (needs the hub), or an already
            built :class:`SimCSEModel`.
        device: ``"cpu"``, ``"cuda"``, ``"cuda:1"``, a ``torch.device``...; default CUDA when available,
            else CPU. An explicit device is used as given.
        num_cells: clusters (``nlist``) of the approximate index that ``build_index(faiss_fast=True)`` builds
            (at most one per indexed sentence), as the reference; ``build_index(..., nlist=...)`` overrides.
        num_cells_in_search: clusters visited per query (``nprobe``), at most ``num_cells``;
            ``build_index(..., nprobe=...)`` overrides.
        pooler: pooler name (:data:`simcse.POOLERS`); overrides the saved one. For a plain HF encoder the
            default is ``cls`` (with a warning from :meth:`SimCSEModel.from_pretrained`).
        max_length: (keyword-only) default truncation length in tokens for :meth:`encode` (capped at
            :attr:`SimCSEModel.max_input_tokens`, what the model's position embeddings allow).
        backend: (keyword-only) ``"torch"`` (default) or ``"onnx"``: onnxruntime on the CPU with a folder written
            by ``simcse export --format onnx`` (:class:`simcse.onnx.ONNXEncoder`); then ``file_name=
            "simcse_int8.onnx"`` picks the int8 model and ``num_threads`` sets onnxruntime's threads.
        model_kwargs: (keyword-only) :meth:`SimCSEModel.from_pretrained` options, :data:`MODEL_KWARGS`
            (``mlp_only_train``, ``torch_dtype``, ``attn_implementation``, ``trust_remote_code``...); for
            ``backend="onnx"`` the :class:`~simcse.onnx.ONNXEncoder` options.

    Raises:
        FileNotFoundError: a local folder that is missing or has no weights (or no ONNX export).
        TypeError: a keyword argument that is none of the above (the message lists the accepted ones).
        ValueError: an unknown pooler name or backend; a device this machine does not have (or not the CPU for
            ``"onnx"``); bad ``num_cells``; a pooler other than the exported one for ``"onnx"``.
    """

    def __init__(self, model_name_or_path: str | os.PathLike | SimCSEModel, device: str | torch.device | None = None,
                 num_cells: int = 100, num_cells_in_search: int = 10, pooler: str | None = None, *,
                 max_length: int = 128, backend: str = "torch", **model_kwargs):
        if backend not in ("torch", "onnx"):
            raise ValueError(f"backend must be 'torch' or 'onnx', got {backend!r}")
        self.backend = backend
        if backend == "torch":
            _check_model_kwargs(model_kwargs)
        self.num_cells = self._check_positive(num_cells, "num_cells")
        self.num_cells_in_search = self._check_positive(num_cells_in_search, "num_cells_in_search")
        self.device = resolve_device("cpu" if backend == "onnx" and device is None else device)  # before the load
        if backend == "onnx":
            self._load_onnx(model_name_or_path, pooler, model_kwargs)
        elif isinstance(model_name_or_path, SimCSEModel):
            if pooler is not None and pooler != model_name_or_path.pooler_type:
                raise ValueError(f"pooler={pooler!r} differs from the given model's {model_name_or_path.pooler_type!r}")
            self.model = model_name_or_path
            self.model_name_or_path = getattr(model_name_or_path.encoder.config, "_name_or_path", "") or ""
        else:
            pooler = _pooler_for(model_name_or_path, pooler)
            self.model = SimCSEModel.from_pretrained(model_name_or_path, pooler_type=pooler, **model_kwargs)
            self.model_name_or_path = str(model_name_or_path)
        if self.model.tokenizer is None:
            raise ValueError("the model has no tokenizer; SimCSE needs one to encode text")
        self.model.to(self.device)
        self.model.eval()
        self.max_length = self._check_positive(max_length, "max_length")
        self.index = None  # a simcse.index.VectorIndex once build_index/load_index ran
        # the indexed sentences, position i has index id i: a list-like simcse.store.SentenceStore on disk
        # (a plain list only for an index loaded from an older sentences.jsonl folder)
        self.sentences = []
        self._index_folder = None  # the folder load_index read, if any

    def _load_onnx(self, path, pooler: str | None, onnx_kwargs: dict) -> None:
        from .onnx import ONNXEncoder

        if isinstance(path, SimCSEModel):
            raise ValueError("backend='onnx' loads an exported folder; got a SimCSEModel")
        self.model = ONNXEncoder(path, **onnx_kwargs)
        if pooler is not None and pooler != self.model.pooler_type:
            raise ValueError(f"pooler={pooler!r} differs from the exported graph's {self.model.pooler_type!r}; "
                             "the ONNX graph holds its pooler (export again with --pooler)")
        self.model_name_or_path = str(path)

    # ---------------------------------------------------------------------------------------- helpers
    @property
    def hidden_size(self) -> int:
        """Embedding size H."""
        return self.model.hidden_size

    @property
    def pooler(self) -> str:
        """The pooler name in use."""
        return self.model.pooler_type

    @property
    def tokenizer(self):
        """The model's HF tokenizer (the reference tool's ``tokenizer`` attribute)."""
        return self.model.tokenizer

    @property
    def is_faiss_index(self) -> bool:
        """True when the current index is a faiss one (the reference tool's attribute)."""
        return self.index is not None and type(self.index).__name__.startswith("Faiss")

    def _use_device(self, device) -> None:
        """Move the model to ``device`` for this and later calls (None: stay), as the reference's ``encode``."""
        if device is not None:
            dev = resolve_device(device)
            if dev != self.device:
                self.device = dev
                self.model.to(dev)

    @staticmethod
    def _check_positive(v, name: str) -> int:
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
            raise ValueError(f"{name} must be a positive int, got {v!r}")
        return int(v)

    # ------------------------------------------------------------------------------------------ encode
    def encode(
        self,
        sentence: str | Sequence[str],
        device: str | torch.device | None = None,
        return_numpy: bool = False,
        normalize_to_unit: bool = True,
        keepdim: bool = False,
        batch_size: int = 64,
        max_length: int | None = None,
        *,
        show_progress: bool | None = None,
        dtype: torch.dtype | None = None,
        **mteb_kwargs,
    ) -> torch.Tensor | np.ndarray:
        """Embed one sentence or a list of sentences (the reference's ``encode``, same parameter order).

        This is also mteb's encoder protocol: called with an mteb DataLoader and/or mteb's keywords
        (``task_metadata``, ``hf_split``, ``hf_subset``, ``prompt_type``, ``show_progress_bar``...), it returns
        unit-length float32 numpy rows (see :func:`simcse.mteb_integration.encode_for_mteb`).

        Args:
            sentence: a str, or a sequence of str (list, tuple, 1-d numpy array, pandas Series), each non-blank.
            device: run on this device for this and later calls (the model moves there, as in the reference).
            return_numpy: return ``np.ndarray`` float32 instead of a CPU ``torch.Tensor`` float32.
            normalize_to_unit: scale each embedding to length 1 (cosine = dot product).
            keepdim: for a single str, return (1, H) instead of (H,).
            batch_size: sentences per forward pass (batches are cut from the token-length-sorted list).
            max_length: truncation in tokens (default: the tool's ``max_length``, 128 as in the reference);
                longer inputs are cut with one warning per call.
            show_progress: (keyword-only) a tqdm bar over batches; None shows it for more than 10 batches
                when stderr is a terminal.
            dtype: (keyword-only) compute precision under autocast, e.g. ``torch.bfloat16`` (output stays
                float32).

        Returns:
            float32 (H,) for a str (``keepdim``: (1, H)); (N, H) for a list, in input order; (0, H) for [].

        Raises:
            TypeError: ``sentence`` is not a str/sequence of str; an item is None, a list, a number...
                (the message names its position, e.g. ``sentences[3]``).
            ValueError: an item is empty or only whitespace; a non-positive ``batch_size``/``max_length``;
                a device this machine does not have.
        """
        sentences = sentence
        if mteb_kwargs or isinstance(sentences, torch.utils.data.DataLoader):
            from .mteb_integration import encode_for_mteb

            return encode_for_mteb(self, sentences, batch_size=batch_size, **mteb_kwargs)
        items, single = _check_sentences(sentences)
        batch_size = self._check_positive(batch_size, "batch_size")
        max_length = self._check_positive(self.max_length if max_length is None else max_length, "max_length")
        self._use_device(device)
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
        if isinstance(x, np.ndarray) and x.dtype.kind in "UO":  # a numpy array of str: sentences
            x = x.tolist() if x.ndim == 1 else x
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

    def similarity(self, queries, keys, device: str | torch.device | None = None,
                   **encode_kwargs) -> float | np.ndarray:
        """Cosine similarity between queries and keys (the reference's ``similarity``, same parameter order).

        Args:
            queries, keys: a str, a sequence of str, or precomputed embeddings: (H,) for one, (n, H) for many
                (numpy or torch; they need not be unit length). A zero vector has similarity 0 to anything.
            device: encode on this device (as :meth:`encode`).
            encode_kwargs: (keyword-only) passed to :meth:`encode` (``batch_size``, ``max_length``, ``dtype``...).

        Returns:
            as the reference: one x one: float; one query x M keys: float32 (M,); N queries x keys:
            float32 (N, M), also when the keys are one str or one (H,) vector (then (N, 1)). Every value is
            in [-1, 1] (:func:`clip_cosine`).

        Raises:
            TypeError/ValueError: as :meth:`encode` for sentences (positions named as ``queries[i]`` /
                ``keys[i]``); a wrong array shape or a NaN/inf in an array.
        """
        self._use_device(device)
        q, q_single = self._vectors(queries, "queries", **encode_kwargs)
        k, k_single = self._vectors(keys, "keys", **encode_kwargs)
        sims = clip_cosine(q @ k.T)  # (N, M)
        if q_single:
            return float(sims[0, 0]) if k_single else sims[0]
        return sims

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
                or a folder of shards written by ``simcse encode --output DIR`` (:mod:`simcse.shards`; nothing
                is encoded again). Blank lines and cells are skipped.
            use_faiss: True: faiss (ImportError when missing); False: numpy; None: faiss when installed.
            faiss_fast: an approximate IVF index with the inner-product metric (see
                :class:`simcse.index.FaissIVFIndex`) with ``num_cells`` clusters and ``num_cells_in_search``
                probes (as the reference); exact search otherwise. Same as ``kind="ivf"``.
            device: encode on this device (as :meth:`encode`); the index itself is on the CPU.
            batch_size: encoding batch size.
            column: (keyword-only) the sentence column/field of a CSV, TSV or JSONL file.
            chunk_size: (keyword-only) sentences encoded and added per step: memory for embeddings is one
                chunk at a time.
            show_progress: (keyword-only) a tqdm bar (sentences); None shows it on a terminal.
            index_kwargs: (keyword-only) ``kind`` (``"exact"``, ``"ivf"``, ``"ivfpq"``, ``"hnsw"``) and that
                kind's parameters (``nlist``, ``nprobe``, ``train_size``, ``m``, ``refine_factor``, ...; see
                :func:`simcse.index.make_index`); for ``faiss_fast``, ``nlist`` / ``nprobe`` default to
                ``num_cells`` / ``num_cells_in_search``.

        The sentences are kept on disk (:class:`simcse.store.SentenceStore`, in ``$TMPDIR`` until
        :meth:`save_index`), not in memory.

        Raises:
            FileNotFoundError: a path that is not a file or a finished shard folder.
            TypeError/ValueError: a bad sentence (its position is named); a bad file record (file:line named);
                shards of another hidden size.
        """
        from .index import make_index
        from .shards import is_shard_folder

        if isinstance(sentences_or_file_path, (str, os.PathLike)) and is_shard_folder(sentences_or_file_path):
            self._build_index_from_shards(Path(sentences_or_file_path), use_faiss, faiss_fast, index_kwargs)
            return
        if faiss_fast:
            index_kwargs.setdefault("nlist", self.num_cells)
            index_kwargs.setdefault("nprobe", min(self.num_cells_in_search, index_kwargs["nlist"] or self.num_cells))
        index = make_index(self.hidden_size, use_faiss=use_faiss, fast=faiss_fast, **index_kwargs)
        old = self.index, self.sentences
        self.index, self.sentences, self._index_folder = index, [], None
        try:
            self.add_to_index(sentences_or_file_path, device, batch_size, column=column, chunk_size=chunk_size,
                              show_progress=show_progress)
        except BaseException:
            self.index, self.sentences = old
            raise
        self.index.finalize()

    def _build_index_from_shards(self, folder: Path, use_faiss, faiss_fast, index_kwargs) -> None:
        from .shards import ShardSet, index_from_shards
        from .store import SentenceStore

        shards = ShardSet(folder)
        if shards.hidden_size != self.hidden_size:
            raise ValueError(f"{folder} holds {shards.hidden_size}-d vectors; this model makes {self.hidden_size}-d ones")
        if shards.manifest.get("pooler") not in (None, self.pooler):
            raise ValueError(f"{folder} was encoded with pooler {shards.manifest['pooler']!r} but this model uses "
                             f"{self.pooler!r}: load the model with pooler={shards.manifest['pooler']!r}")
        index = index_from_shards(shards, use_faiss=use_faiss, fast=faiss_fast, **index_kwargs)
        store = SentenceStore.temporary()
        for chunk in _chunks(shards.iter_sentences(), 100_000):
            store.extend(chunk)
        self.index, self.sentences, self._index_folder = index, store, None

    def _writable_sentences(self):
        """The sentence store to append to: a new temporary one (with the current sentences copied in)
        unless the current one is already such a store."""
        from .store import SentenceStore

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

        Takes the same inputs as :meth:`build_index`. Returns the number of sentences added.
        A list is checked whole before anything is added, so a bad item leaves the index unchanged; a
        file is read, encoded and added ``chunk_size`` lines at a time.
        """
        sentences_or_file = sentences_or_file_path
        self._use_device(device)
        chunk_size = self._check_positive(chunk_size, "chunk_size")
        path = Path(sentences_or_file) if isinstance(sentences_or_file, (str, os.PathLike)) else None
        if path is not None:
            if not path.is_file():
                raise FileNotFoundError(f"{str(path)!r} is not a file (pass a list to index sentences themselves)")
            source: Iterator[str] = _iter_sentences(path, column)
            total = None
        else:
            if column is not None:
                raise ValueError(f"column={column!r} applies to a CSV/TSV/JSONL file, not to a list of sentences")
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
                self._writable_sentences().extend(chunk)
                added += len(chunk)
                if bar is not None:
                    bar.update(len(chunk))
        finally:
            if bar is not None:
                bar.close()
        return added

    def search(self, queries: str | Sequence[str], device: str | torch.device | None = None, threshold: float = 0.6,
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
            [-1, 1], :func:`clip_cosine`); for a sequence: one such list per query, in order.

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
        items, single = _check_sentences(queries, "queries")
        if not items:
            return []
        q = self.encode(items, return_numpy=True, normalize_to_unit=True, **encode_kwargs)
        scores, ids = self.index.search(q, top_k)
        scores = clip_cosine(scores)
        results = []
        for srow, irow in zip(scores, ids):
            results.append([(self.sentences[i], float(s)) for s, i in zip(srow, irow) if i >= 0 and s >= threshold])
        return results[0] if single else results

    def save_index(self, folder: str | os.PathLike) -> None:
        """Write the index, the sentences (an on-disk :class:`simcse.store.SentenceStore`:
        ``sentences.txt`` + ``sentences.offsets``) and a small ``simcse_index.json`` (model path, pooler,
        hidden size) into ``folder``.

        Atomic: everything is written into a temporary sibling folder that then takes ``folder``'s place,
        so an interrupted save leaves the previous index (or nothing) under ``folder``, never a mix.

        The files are written into a temporary sibling folder first and moved in by renames, so a failed save
        leaves ``folder`` as it was.

        Raises:
            RuntimeError: there is no index.
            FileExistsError: ``folder`` (or a folder above it) is an existing file; nothing is written.
            simcse.storage.WriteError: disk full, file size limit, read-only or failing storage (one line
                naming the folder and the space needed vs free).
        """
        from .store import SentenceStore

        if self.index is None:
            raise RuntimeError("no index to save: call build_index(...) first")
        from .storage import writing

        folder = Path(folder)
        _check_folder_target(folder)
        model_ref = self.model_name_or_path
        if model_ref and Path(model_ref).exists():
            model_ref = str(Path(model_ref).resolve())
        meta = {"model_name_or_path": model_ref, "pooler": self.pooler, "hidden_size": self.hidden_size,
                "num_sentences": len(self.sentences)}

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
                another local model folder than this tool's (both folders existing).
        """
        from .index import load_index

        folder = Path(folder)
        index = load_index(folder)
        if index.dim != self.hidden_size:
            raise ValueError(f"index {folder} holds {index.dim}-d vectors; this model makes {self.hidden_size}-d ones")
        from .store import SentenceStore, is_store

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
            if meta.get("pooler") not in (None, self.pooler):
                raise ValueError(f"index {folder} was built with pooler {meta['pooler']!r} but this model uses "
                                 f"{self.pooler!r}: load the model with pooler={meta['pooler']!r} to search it")
            rec = meta.get("model_name_or_path") or ""
            if rec and self.model_name_or_path and Path(rec).exists() and Path(self.model_name_or_path).exists() \
                    and not same_model_path(self.model_name_or_path, rec):
                raise ValueError(f"index {folder} was built with the model {rec}; this tool runs "
                                 f"{self.model_name_or_path}: load that model to search it")
        self.index, self.sentences = index, sentences
        self._index_folder = folder.resolve()

    def similarity_pairwise(self, embeddings1, embeddings2) -> np.ndarray:
        """Row-wise cosine of two (N, H) embedding arrays (numpy or torch): float32 (N,) (mteb's protocol).

        Raises:
            ValueError: the two arrays have different numbers of rows (or a bad shape, as :meth:`similarity`).
        """
        def rows(x):  # (H,) -> (1, H); numpy, torch (any device) or a nested list
            x = x if isinstance(x, (np.ndarray, torch.Tensor)) else np.asarray(x)
            return x.reshape(1, -1) if x.ndim == 1 else x

        a, _ = self._vectors(rows(embeddings1), "embeddings1")
        b, _ = self._vectors(rows(embeddings2), "embeddings2")
        if len(a) != len(b):
            raise ValueError(f"embeddings1 has {len(a)} rows but embeddings2 has {len(b)}; expected the same")
        return (a * b).sum(axis=1)

    @property
    def mteb_model_meta(self):
        """mteb's ``ModelMeta`` for this model (needs ``mteb``; see :func:`simcse.mteb_integration.model_meta`)."""
        from .mteb_integration import model_meta

        return model_meta(self)

    # ------------------------------------------------------------------------------------------ export
    def _torch_model(self, what: str) -> SimCSEModel:
        if not isinstance(self.model, SimCSEModel):
            raise ValueError(f"{what} needs the torch backend; this tool runs an ONNX graph ({self.model_name_or_path})")
        return self.model

    def save_pretrained(self, folder: str | os.PathLike) -> None:
        """Save the model in simcse's format (:meth:`SimCSEModel.save_pretrained`)."""
        self._torch_model("save_pretrained").save_pretrained(folder)

    def export_sentence_transformers(self, folder: str | os.PathLike, max_seq_length: int | None = None) -> Path:
        """Write a sentence-transformers model folder (see :func:`simcse.export.export_sentence_transformers`)."""
        from .export import export_sentence_transformers

        return export_sentence_transformers(self._torch_model("export_sentence_transformers"), folder,
                                            max_seq_length=max_seq_length or self.max_length)

    def export_huggingface(self, folder: str | os.PathLike) -> Path:
        """Write a plain HF model folder (see :func:`simcse.export.export_huggingface`)."""
        from .export import export_huggingface

        return export_huggingface(self._torch_model("export_huggingface"), folder)

    def __repr__(self) -> str:
        n = self.index.ntotal if self.index is not None else 0
        return (f"SimCSE(model={self.model_name_or_path!r}, pooler={self.pooler!r}, device={str(self.device)!r}, "
                f"indexed={n})")
