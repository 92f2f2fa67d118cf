"""``SimCSE``: encode, compare and search sentences with a trained (or any HF) sentence encoder.

    >>> from simcse import SimCSE
    >>> model = SimCSE("path/to/saved_model")              # pooler read from simcse_config.json
    >>> emb = model.encode(["A man plays a guitar.", "A dog runs."])   # torch.float32 (2, H), unit rows
    >>> model.similarity("A man plays a guitar.", ["A man plays music.", "A dog runs."])  # np (2,)
    >>> model.build_index("corpus.txt")                     # streams: encodes and adds 10,000 lines at a time
    >>> model.search("Someone plays an instrument.", top_k=3)   # [(sentence, score), ...]

The model side (loading, pooling, tokenising, batching) is :class:`simcse.SimCSEModel`; this class adds
input checks, shapes, cosine scores and the index (:mod:`simcse.retrieval.index`). Every method takes the reference
SimCSE tool's parameters (``simcse/tool.py`` of princeton-nlp/SimCSE) in its order, with its names and
defaults; this class's own options are keyword-only. What differs (``docs/porting.md``): the pooler is the
one the model folder records (else the ``pooler`` argument, else ``cls``), never guessed from the model's
name; cosines are in [-1, 1]; progress bars only appear on a terminal for long inputs; indexing streams;
sentence files may be CSV/TSV/JSONL.
"""
from __future__ import annotations

import logging
import os
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch

from simcse.files.inputs import check_sentences, first_undecodable_line
from simcse.models.folder import model_fingerprint
from simcse.models.modeling import SimCSEModel
from simcse.models.pooling import check_pooler_agrees, pooler_to_use
from simcse.models.truncation import check_truncate_dim, truncate_embeddings
from simcse.retrieval.lifecycle import IndexLifecycle
from simcse.retrieval.scoring import clip_cosine, unit_rows
from simcse.files.checks import check_int

logger = logging.getLogger(__name__)


def utf8_error_location(path: str | Path) -> str:
    """``'<path>:<line>: byte <k> (b'\\xNN') is not UTF-8'`` for the first line of ``path`` that is not UTF-8
    (1-based line and byte), or ``'<path> is not UTF-8'`` when every line decodes on its own."""
    bad = first_undecodable_line(path)
    return f"{path} is not UTF-8" if bad is None else f"{path}:{bad[0]}: byte {bad[1]} ({bad[2]!r}) is not UTF-8"


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
MODEL_KWARGS = ("mlp_only_train", "new_mlp_init", "include_prompt", "append_eos", "trust_remote_code", "torch_dtype",
                "dtype", "attn_implementation", "revision", "cache_dir", "local_files_only", "token", "subfolder",
                "use_safetensors", "low_cpu_mem_usage", "force_download")
DEFAULT_MAX_LENGTH = 128  # the reference tool's truncation
INIT_ARGS = ("model_name_or_path", "device", "num_cells", "num_cells_in_search", "pooler", "max_length", "backend",
             "truncate_dim")


def _check_model_kwargs(kwargs: dict) -> None:
    unknown = sorted(set(kwargs) - set(MODEL_KWARGS))
    if unknown:
        raise TypeError(f"SimCSE() got unexpected keyword argument(s) {', '.join(map(repr, unknown))}; it accepts "
                        f"{', '.join(INIT_ARGS)} and the model-loading options {', '.join(MODEL_KWARGS)}")


class _Exports:
    """Saving and exporting the tool's torch model (a mixin of :class:`SimCSE`)."""

    def save_pretrained(self, folder: str | os.PathLike) -> None:
        """Save the model in simcse's format (:meth:`SimCSEModel.save_pretrained`)."""
        self._torch_model("save_pretrained").save_pretrained(folder)

    def export_sentence_transformers(self, folder: str | os.PathLike, max_seq_length: int | None = None) -> Path:
        """Write a sentence-transformers model folder (see :func:`simcse.interop.export.export_sentence_transformers`)."""
        from simcse.interop.export import export_sentence_transformers

        return export_sentence_transformers(self._torch_model("export_sentence_transformers"), folder,
                                            max_seq_length=max_seq_length or self.max_length)

    def export_huggingface(self, folder: str | os.PathLike) -> Path:
        """Write a plain HF model folder (see :func:`simcse.interop.export.export_huggingface`)."""
        from simcse.interop.export import export_huggingface

        return export_huggingface(self._torch_model("export_huggingface"), folder)


class SimCSE(_Exports, IndexLifecycle):
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
        pooler: pooler name (:data:`simcse.POOLERS`). A folder that records its pooler is encoded with it, and
            another one is a ValueError (:func:`simcse.models.pooling.pooler_to_use`, the evaluator's rule too);
            for a plain HF encoder the default is ``cls`` (with a warning from :meth:`SimCSEModel.from_pretrained`).
        max_length: (keyword-only) default truncation length in tokens for :meth:`encode` (capped at
            :attr:`SimCSEModel.max_input_tokens`, what the model's position embeddings allow); None: 128, the
            reference's, or the one a loaded index records (:meth:`load_index`: an index is searched with the
            settings its vectors were encoded with; an explicit other value is an error there).
        backend: (keyword-only) ``"torch"`` (default) or ``"onnx"``: onnxruntime on the CPU with a folder written
            by ``simcse export --format onnx`` (:class:`simcse.interop.onnx.ONNXEncoder`); then ``file_name=
            "simcse_int8.onnx"`` picks the int8 model and ``num_threads`` sets onnxruntime's threads.
        truncate_dim: (keyword-only) keep the first ``truncate_dim`` coordinates of every embedding (sentence-
            transformers' option, :mod:`simcse.models.truncation`; normalised after the cut): encode, similarity,
            :attr:`hidden_size` and the index (refused when built at another size) use it. Default: the size a
            sentence-transformers folder records (its ``truncate_dim``), else full size.
        model_kwargs: (keyword-only) :meth:`SimCSEModel.from_pretrained` options, :data:`MODEL_KWARGS`
            (``mlp_only_train``, ``dtype``, ``attn_implementation``, ``trust_remote_code``...); for
            ``backend="onnx"`` the :class:`~simcse.interop.onnx.ONNXEncoder` options.

    Raises:
        FileNotFoundError: a local folder that is missing or has no weights (or no ONNX export).
        TypeError: a keyword argument that is none of the above (the message lists the accepted ones).
        ValueError: an unknown pooler name or backend; a device this machine does not have (or not the CPU for
            ``"onnx"``); bad ``num_cells``; a pooler other than the exported one for ``"onnx"``; a
            ``truncate_dim`` below 1 or above the model's embedding size.
    """

    def __init__(self, model_name_or_path: str | os.PathLike | SimCSEModel, device: str | torch.device | None = None,
                 num_cells: int = 100, num_cells_in_search: int = 10, pooler: str | None = None, *,
                 max_length: int | None = None, backend: str = "torch", truncate_dim: int | None = None,
                 **model_kwargs):
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
            check_pooler_agrees(pooler, model_name_or_path.pooler_type, "the given model")
            self.model = model_name_or_path
            self.model_name_or_path = getattr(model_name_or_path.encoder.config, "_name_or_path", "") or ""
        else:
            pooler, _ = pooler_to_use(model_name_or_path, pooler)
            self.model = SimCSEModel.from_pretrained(model_name_or_path, pooler_type=pooler, **model_kwargs)
            self.model_name_or_path = str(model_name_or_path)
        if self.model.tokenizer is None:
            raise ValueError("the model has no tokenizer; SimCSE needs one to encode text")
        if truncate_dim is None:  # the size a sentence-transformers folder records (SimCSEModel.truncate_dim)
            truncate_dim = getattr(self.model, "truncate_dim", None)
        self.truncate_dim = check_truncate_dim(truncate_dim, self.model.hidden_size, "truncate_dim")
        self.model.to(self.device)
        self.model.eval()
        self._max_length_given = max_length is not None  # else a loaded index's record applies (load_index)
        self.max_length = self._check_positive(DEFAULT_MAX_LENGTH if max_length is None else max_length, "max_length")
        self._index_max_length = None  # the (effective) max_length the index's vectors were encoded with
        self.index = None  # a simcse.retrieval.index.VectorIndex once build_index/load_index ran
        # the indexed sentences, position i has index id i: a list-like simcse.retrieval.store.SentenceStore on disk
        # (a plain list only for an index loaded from an older sentences.jsonl folder)
        self.sentences = []
        self._index_folder = None  # the folder load_index read, if any
        self._fingerprint = None  # model_fingerprint(self.model), computed when first needed

    def _load_onnx(self, path, pooler: str | None, onnx_kwargs: dict) -> None:
        from simcse.interop.onnx import ONNXEncoder

        if isinstance(path, SimCSEModel):
            raise ValueError("backend='onnx' loads an exported folder; got a SimCSEModel")
        fixed = sorted(set(onnx_kwargs) - {"file_name", "num_threads"})
        if fixed:
            raise TypeError(f"backend='onnx' takes file_name= and num_threads=; {fixed} are fixed in the exported graph "
                            "(export again with them set, or use backend='torch')")
        self.model = ONNXEncoder(path, **onnx_kwargs)
        check_pooler_agrees(pooler, self.model.pooler_type, "the exported ONNX graph", where=str(path),
                            fix="drop pooler= (the graph holds its pooler), or export again with --pooler")
        self.model_name_or_path = str(path)

    # ---------------------------------------------------------------------------------------- helpers
    @property
    def hidden_size(self) -> int:
        """Size H of the embeddings this tool makes: ``truncate_dim`` when set, else the model's hidden size."""
        return self.truncate_dim or self.model.hidden_size

    @property
    def model_fingerprint(self) -> str:
        """What this tool's model computes, as ``"sha256:<hex>"`` (:func:`simcse.models.folder.model_fingerprint`):
        the identity that shard folders and saved indexes record and are checked against."""
        if self._fingerprint is None:
            self._fingerprint = model_fingerprint(self.model)
        return self._fingerprint

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
        check_int(v, name)
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
        prompt: str | None = None,
        prompt_name: str | None = None,
        **mteb_kwargs,
    ) -> torch.Tensor | np.ndarray:
        """Embed one sentence or a list of sentences (the reference's ``encode``, same parameter order).

        This is also mteb's encoder protocol: called with an mteb DataLoader and/or mteb's keywords
        (``task_metadata``, ``hf_split``, ``hf_subset``, ``prompt_type``, ``show_progress_bar``...), it returns
        unit-length float32 numpy rows (see :func:`simcse.evaluation.mteb_protocol.encode_for_mteb`).

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
            prompt, prompt_name: (keyword-only) a text prefixed to every sentence, or the name of one of the
                model's saved prompts (sentence-transformers' ``prompt``/``prompt_name``); neither: the model's
                default prompt, if it was trained with one.

        Returns:
            float32 (H,) for a str (``keepdim``: (1, H)); (N, H) for a list, in input order; (0, H) for [].
            H is ``truncate_dim`` when the tool was made with one.

        Raises:
            TypeError: ``sentence`` is not a str/sequence of str; an item is None, a list, a number...
                (the message names its position, e.g. ``sentences[3]``).
            ValueError: an item is empty or only whitespace; a non-positive ``batch_size``/``max_length``;
                a device this machine does not have.
        """
        sentences = sentence
        if mteb_kwargs or isinstance(sentences, torch.utils.data.DataLoader):
            from simcse.evaluation.mteb_protocol import encode_for_mteb

            return encode_for_mteb(self, sentences, batch_size=batch_size, **mteb_kwargs)
        items, single = check_sentences(sentences)
        batch_size = self._check_positive(batch_size, "batch_size")
        max_length = self._check_positive(self.max_length if max_length is None else max_length, "max_length")
        self._use_device(device)
        if show_progress is None:
            show_progress = len(items) > 10 * batch_size and sys.stderr.isatty()
        emb = self.model.encode(items, batch_size=batch_size, max_length=max_length, device=self.device,
                                show_progress=show_progress, normalize=False, dtype=dtype, prompt=prompt,
                                prompt_name=prompt_name, truncate_dim=self.model.hidden_size)  # full; cut below
        emb = truncate_embeddings(emb, self.truncate_dim, normalize=normalize_to_unit)
        if single and not keepdim:
            emb = emb[0]
        return emb if return_numpy else torch.from_numpy(emb)


    # -------------------------------------------------------------------------------------- similarity
    def _vectors(self, x, name: str, **encode_kwargs) -> tuple[np.ndarray, bool]:
        """(unit rows float32 (n, H), single): :func:`simcse.retrieval.scoring.unit_rows` with this tool's encoder."""
        return unit_rows(x, name, self.hidden_size,
                         lambda items: self.encode(items, return_numpy=True, normalize_to_unit=False, **encode_kwargs))

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
        """mteb's ``ModelMeta`` for this model (needs ``mteb``; see :func:`simcse.evaluation.mteb_protocol.model_meta`)."""
        from simcse.evaluation.mteb_protocol import model_meta

        return model_meta(self)

    # ------------------------------------------------------------------------------------------ export
    def _torch_model(self, what: str) -> SimCSEModel:
        if not isinstance(self.model, SimCSEModel):
            raise ValueError(f"{what} needs the torch backend; this tool runs an ONNX graph ({self.model_name_or_path})")
        return self.model

    def __repr__(self) -> str:
        n = self.index.ntotal if self.index is not None else 0
        dim = f", truncate_dim={self.truncate_dim}" if self.truncate_dim else ""
        return (f"SimCSE(model={self.model_name_or_path!r}, pooler={self.pooler!r}, device={str(self.device)!r}{dim}, "
                f"indexed={n})")
