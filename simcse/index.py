"""Inner-product vector indexes for sentence embeddings, behind one interface.

Three implementations of :class:`VectorIndex` (``add`` / ``search`` / ``save`` / :func:`load_index`):

* :class:`NumpyIndex` (``kind="numpy"``): exact search with numpy matrix products; needs nothing extra.
* :class:`FaissFlatIndex` (``kind="faiss_flat"``): exact search with ``faiss.IndexFlatIP``.
* :class:`FaissIVFIndex` (``kind="faiss_ivf"``): approximate search with ``faiss.IndexIVFFlat`` built with
  the **inner-product** metric (faiss's ``IndexIVFFlat`` defaults to L2; with L2 the returned "scores" are
  distances, which is how the reference tool's fast index gave odd results) and spherical k-means.

All three score by inner product, which is the cosine similarity when the vectors have unit length (the
:class:`simcse.SimCSE` tool always indexes unit vectors). Exact indexes return the same neighbours and
scores (up to float rounding) whichever library runs them.

faiss (``pip install simcse[faiss]``) is imported only when a faiss index is made or loaded, never when
this module is imported.
"""
from __future__ import annotations

import importlib.util
import json
import math
import os
from pathlib import Path

import numpy as np

INDEX_CONFIG_NAME = "index_config.json"
INDEX_FORMAT_VERSION = 1
_NUMPY_VECTORS = "vectors.npy"
_FAISS_FILE = "index.faiss"


def faiss_available() -> bool:
    """True when the ``faiss`` package can be imported (checked without importing it)."""
    return importlib.util.find_spec("faiss") is not None


def _import_faiss():
    try:
        import faiss
    except ImportError as e:  # pragma: no cover - exercised only where faiss is missing
        raise ImportError("faiss is not installed: pip install 'simcse[faiss]' (or faiss-cpu / faiss-gpu)") from e
    return faiss


def _as_matrix(x, dim: int, name: str) -> np.ndarray:
    """``x`` as a C-contiguous float32 (n, dim) array; ValueError on a wrong shape or a non-finite value."""
    a = np.asarray(x.detach().cpu().numpy() if hasattr(x, "detach") else x)
    if a.dtype.kind not in "fiu":
        raise ValueError(f"{name} must be a numeric array, got dtype {a.dtype}")
    if a.ndim == 1:
        a = a[None, :]
    if a.ndim != 2 or a.shape[1] != dim:
        raise ValueError(f"{name} must have shape (n, {dim}), got {tuple(np.shape(x))}")
    a = np.ascontiguousarray(a, dtype=np.float32)
    if not np.isfinite(a).all():
        row = int(np.flatnonzero(~np.isfinite(a).all(axis=1))[0])
        raise ValueError(f"{name}[{row}] has a NaN or infinite value")
    return a


class VectorIndex:
    """Common interface: ``add`` vectors (ids are 0, 1, ... in the order added), ``search`` by inner product.

    Args:
        dim: vector size H (positive int).
    """

    kind = "abstract"

    def __init__(self, dim: int):
        if isinstance(dim, bool) or not isinstance(dim, (int, np.integer)) or dim < 1:
            raise ValueError(f"dim must be a positive int, got {dim!r}")
        self.dim = int(dim)

    # -- to implement
    @property
    def ntotal(self) -> int:
        """Number of vectors added so far (including any not yet in a trained IVF index)."""
        raise NotImplementedError

    def _add(self, x: np.ndarray) -> None:
        raise NotImplementedError

    def _search(self, q: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        raise NotImplementedError

    def _save(self, folder: Path) -> dict:
        raise NotImplementedError

    # -- shared
    def __len__(self) -> int:
        return self.ntotal

    def add(self, vectors) -> None:
        """Append vectors: array-like float (n, dim) or (dim,); they get ids ``ntotal .. ntotal+n-1``.

        Raises:
            ValueError: wrong shape, non-numeric dtype, or a NaN/inf value (the message gives the row).
        """
        x = _as_matrix(vectors, self.dim, "vectors")
        if len(x):
            self._add(x)

    def finalize(self) -> None:
        """Make every added vector searchable (trains a pending IVF index); a no-op for exact indexes."""

    def search(self, queries, k: int) -> tuple[np.ndarray, np.ndarray]:
        """The ``k`` highest inner products for each query.

        Args:
            queries: array-like float (m, dim) or (dim,).
            k: positive int; at most ``ntotal`` results exist, so the width is ``min(k, ntotal)``.

        Returns:
            scores: float32 (m, min(k, ntotal)), each row in decreasing order;
            ids: int64 (m, min(k, ntotal)); -1 marks a slot an approximate index could not fill
            (its score is -inf).

        Raises:
            RuntimeError: the index is empty.
            ValueError: bad ``queries`` or ``k``.
        """
        if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
            raise ValueError(f"k must be a positive int, got {k!r}")
        if self.ntotal == 0:
            raise RuntimeError("the index is empty: add vectors (SimCSE.build_index) before searching")
        q = _as_matrix(queries, self.dim, "queries")
        self.finalize()
        k = min(int(k), self.ntotal)
        if len(q) == 0:
            return np.zeros((0, k), np.float32), np.zeros((0, k), np.int64)
        scores, ids = self._search(q, k)
        scores = np.asarray(scores, dtype=np.float32)
        ids = np.asarray(ids, dtype=np.int64)
        scores[ids < 0] = -np.inf
        return scores, ids

    def save(self, folder: str | os.PathLike) -> None:
        """Write the index into ``folder`` (created if needed): ``index_config.json`` plus the vectors."""
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        self.finalize()
        cfg = {"format_version": INDEX_FORMAT_VERSION, "kind": self.kind, "dim": self.dim, "ntotal": self.ntotal}
        cfg.update(self._save(folder))
        (folder / INDEX_CONFIG_NAME).write_text(json.dumps(cfg, indent=2) + "\n")

    def __repr__(self) -> str:
        return f"{type(self).__name__}(dim={self.dim}, ntotal={self.ntotal})"


class NumpyIndex(VectorIndex):
    """Exact inner-product search in numpy; vectors are kept as float32 chunks, joined on first search.

    Search works through the queries in blocks so that a (block, ntotal) score matrix stays near 128 MiB.
    """

    kind = "numpy"

    def __init__(self, dim: int):
        super().__init__(dim)
        self._chunks: list[np.ndarray] = []
        self._n = 0

    @property
    def ntotal(self) -> int:
        return self._n

    def _add(self, x):
        self._chunks.append(x.copy())
        self._n += len(x)

    def _matrix(self) -> np.ndarray:
        if len(self._chunks) != 1:
            self._chunks = [np.concatenate(self._chunks) if self._chunks else np.zeros((0, self.dim), np.float32)]
        return self._chunks[0]

    @property
    def vectors(self) -> np.ndarray:
        """All added vectors, float32 (ntotal, dim)."""
        return self._matrix()

    def _search(self, q, k):
        m = self._matrix()
        block = max(1, (1 << 25) // max(1, len(m)))
        all_s, all_i = [], []
        for s in range(0, len(q), block):
            sc = q[s : s + block] @ m.T  # (b, N)
            if k < sc.shape[1]:
                top = np.argpartition(-sc, k - 1, axis=1)[:, :k]
            else:
                top = np.broadcast_to(np.arange(sc.shape[1]), sc.shape).copy()
            ts = np.take_along_axis(sc, top, axis=1)
            # decreasing score, then increasing id for ties (deterministic)
            order = np.lexsort((top, -ts), axis=1)
            all_i.append(np.take_along_axis(top, order, axis=1))
            all_s.append(np.take_along_axis(ts, order, axis=1))
        return np.concatenate(all_s), np.concatenate(all_i)

    def _save(self, folder):
        np.save(folder / _NUMPY_VECTORS, self._matrix())
        return {}

    @classmethod
    def _load(cls, folder: Path, cfg: dict) -> "NumpyIndex":
        idx = cls(cfg["dim"])
        vec = np.load(folder / _NUMPY_VECTORS)
        if len(vec):
            idx.add(vec)
        return idx


class FaissFlatIndex(VectorIndex):
    """Exact inner-product search with ``faiss.IndexFlatIP``."""

    kind = "faiss_flat"

    def __init__(self, dim: int, _index=None):
        super().__init__(dim)
        faiss = _import_faiss()
        self.index = _index if _index is not None else faiss.IndexFlatIP(self.dim)

    @property
    def ntotal(self) -> int:
        return int(self.index.ntotal)

    def _add(self, x):
        self.index.add(x)

    def _search(self, q, k):
        return self.index.search(q, k)

    def _save(self, folder):
        _import_faiss().write_index(self.index, str(folder / _FAISS_FILE))
        return {}

    @classmethod
    def _load(cls, folder: Path, cfg: dict) -> "FaissFlatIndex":
        return cls(cfg["dim"], _index=_import_faiss().read_index(str(folder / _FAISS_FILE)))


class FaissIVFIndex(VectorIndex):
    """Approximate search: ``faiss.IndexIVFFlat`` with the inner-product metric, trained on the first vectors.

    Added vectors are buffered until ``train_size`` of them have arrived (or until the first search, save
    or :meth:`finalize`); the coarse quantizer is then trained on the buffer by spherical k-means, the buffer
    is added, and later vectors go straight in. So a streamed build holds at most ``train_size`` vectors
    outside faiss, and the clusters come from the start of the stream (shuffle a sorted corpus first).

    Args:
        dim: vector size.
        nlist: number of clusters; default ``min(4 * sqrt(n_train), n_train // 39)`` (at least 1), so that
            each cluster has the 39 training points faiss asks for.
        nprobe: clusters visited per query; default ``max(1, min(nlist, max(8, nlist // 8)))``.
        train_size: how many vectors to buffer before training (default 50,000).
    """

    kind = "faiss_ivf"

    def __init__(self, dim: int, nlist: int | None = None, nprobe: int | None = None, train_size: int = 50_000,
                 _index=None):
        super().__init__(dim)
        for name, v in (("nlist", nlist), ("nprobe", nprobe), ("train_size", train_size)):
            if v is not None and (isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1):
                raise ValueError(f"{name} must be a positive int or None, got {v!r}")
        self._faiss = _import_faiss()
        self.nlist = nlist
        self.nprobe = nprobe
        self.train_size = int(train_size)
        self.index = _index
        self._pending: list[np.ndarray] = []
        self._n_pending = 0

    @property
    def is_trained(self) -> bool:
        return self.index is not None

    @property
    def ntotal(self) -> int:
        return (int(self.index.ntotal) if self.index is not None else 0) + self._n_pending

    def _add(self, x):
        if self.index is not None:
            self.index.add(x)
            return
        self._pending.append(x.copy())
        self._n_pending += len(x)
        if self._n_pending >= self.train_size:
            self.finalize()

    def finalize(self) -> None:
        if self.index is not None or self._n_pending == 0:
            return
        faiss = self._faiss
        train = np.concatenate(self._pending)
        n = len(train)
        nlist = self.nlist or max(1, min(int(4 * math.sqrt(n)), n // 39))
        nlist = min(nlist, n)  # k-means needs at least one point per cluster
        nprobe = self.nprobe or max(1, min(nlist, max(8, nlist // 8)))
        quantizer = faiss.IndexFlatIP(self.dim)
        index = faiss.IndexIVFFlat(quantizer, self.dim, nlist, faiss.METRIC_INNER_PRODUCT)
        index.cp.spherical = True  # centroids on the unit sphere, as suits cosine scores
        index.cp.min_points_per_centroid = max(1, min(39, n // nlist))  # small corpora: no faiss warning
        index.train(train)
        index.add(train)
        index.nprobe = min(nprobe, nlist)
        self._quantizer = quantizer  # keep the Python wrapper alive as long as the index
        self.index = index
        self.nlist, self.nprobe = nlist, int(index.nprobe)
        self._pending, self._n_pending = [], 0

    def _search(self, q, k):
        return self.index.search(q, k)

    def _save(self, folder):
        self._faiss.write_index(self.index, str(folder / _FAISS_FILE))
        return {"nlist": self.nlist, "nprobe": self.nprobe, "train_size": self.train_size}

    @classmethod
    def _load(cls, folder: Path, cfg: dict) -> "FaissIVFIndex":
        faiss = _import_faiss()
        index = faiss.read_index(str(folder / _FAISS_FILE))
        index.nprobe = cfg.get("nprobe") or index.nprobe
        return cls(cfg["dim"], nlist=cfg.get("nlist"), nprobe=cfg.get("nprobe"), train_size=cfg.get("train_size", 50_000),
                   _index=index)


_KINDS = {c.kind: c for c in (NumpyIndex, FaissFlatIndex, FaissIVFIndex)}


def make_index(dim: int, use_faiss: bool | None = None, fast: bool = False, **ivf_kwargs) -> VectorIndex:
    """A new empty index.

    Args:
        dim: vector size.
        use_faiss: True requires faiss (ImportError otherwise), False never uses it, None uses it when
            installed.
        fast: an approximate IVF index (faiss only; without faiss an exact :class:`NumpyIndex` is made and a
            warning says so).
        ivf_kwargs: ``nlist``, ``nprobe``, ``train_size`` for :class:`FaissIVFIndex`.
    """
    if use_faiss is None:
        use_faiss = faiss_available()
    if use_faiss:
        _import_faiss()
        return FaissIVFIndex(dim, **ivf_kwargs) if fast else FaissFlatIndex(dim)
    if fast:
        import warnings

        warnings.warn("faiss_fast needs faiss (pip install 'simcse[faiss]'); using exact numpy search", UserWarning,
                      stacklevel=2)
    return NumpyIndex(dim)


def load_index(folder: str | os.PathLike) -> VectorIndex:
    """Read an index written by :meth:`VectorIndex.save`.

    Raises:
        FileNotFoundError: ``folder`` has no ``index_config.json``.
        ValueError: an unknown index kind or a newer format version.
        ImportError: a faiss index and faiss is not installed.
    """
    folder = Path(folder)
    f = folder / INDEX_CONFIG_NAME
    if not f.is_file():
        raise FileNotFoundError(f"{folder} is not a saved index: {INDEX_CONFIG_NAME} is missing")
    cfg = json.loads(f.read_text())
    if cfg.get("format_version", 0) > INDEX_FORMAT_VERSION:
        raise ValueError(f"{f} has format_version {cfg['format_version']}; this simcse reads <= {INDEX_FORMAT_VERSION}")
    kind = cfg.get("kind")
    if kind not in _KINDS:
        raise ValueError(f"{f}: unknown index kind {kind!r}; expected one of {sorted(_KINDS)}")
    idx = _KINDS[kind]._load(folder, cfg)
    if idx.ntotal != cfg.get("ntotal", idx.ntotal):
        raise ValueError(f"{folder}: the config says {cfg['ntotal']} vectors, the index file holds {idx.ntotal}")
    return idx
