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

Why one module: every index kind shares the :class:`VectorIndex` interface, the ``index_config.json`` format and
:func:`make_index` / :func:`load_index`, which dispatch over all of them; kept together, adding a kind touches one
file.
"""
from __future__ import annotations

import importlib.util
import json
import math
import os
from pathlib import Path

import numpy as np

from simcse.files.checks import check_int

INDEX_CONFIG_NAME = "index_config.json"
INDEX_FORMAT_VERSION = 1
_NUMPY_VECTORS = "vectors.npy"
_FAISS_FILE = "index.faiss"
_REFINE_FILE = "refine.f16"


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
        check_int(dim, "dim")
        self.dim = int(dim)
        #: the coarsest dtype the vectors passed through before they were indexed ("float32", or "float16" for
        #: shards written in float16 and an IVF-PQ index's re-ranking copies): the scores' rounding follows it
        #: (:func:`simcse.retrieval.scoring.clip_cosine`). Saved in ``index_config.json``.
        self.vector_dtype = "float32"

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
        check_int(k, "k")
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
        cfg = {"format_version": INDEX_FORMAT_VERSION, "kind": self.kind, "dim": self.dim, "ntotal": self.ntotal,
               "vector_dtype": self.vector_dtype}
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


class _FaissBacked(VectorIndex):
    """An index held in one faiss index object ``self.index``: its size and additions are faiss's own."""

    @property
    def ntotal(self) -> int:
        return int(self.index.ntotal)

    def _add(self, x):
        self.index.add(x)


class FaissFlatIndex(_FaissBacked):
    """Exact inner-product search with ``faiss.IndexFlatIP``."""

    kind = "faiss_flat"

    def __init__(self, dim: int, _index=None):
        super().__init__(dim)
        faiss = _import_faiss()
        self.index = _index if _index is not None else faiss.IndexFlatIP(self.dim)

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
        train_size: how many vectors to buffer before training (default 50,000; with ``expected_size``, enough
            for 39 points per cluster of the default ``nlist``).
        expected_size: the corpus size when known (e.g. from a shard manifest): the default ``nlist`` is then
            ``4 * sqrt(expected_size)`` (faiss's rule of thumb), capped by the training points.
    """

    kind = "faiss_ivf"

    def __init__(self, dim: int, nlist: int | None = None, nprobe: int | None = None, train_size: int | None = None,
                 expected_size: int | None = None, _index=None):
        super().__init__(dim)
        _check_optional_positive(nlist=nlist, nprobe=nprobe, train_size=train_size, expected_size=expected_size)
        self._faiss = _import_faiss()
        self.nlist = nlist
        self.nprobe = nprobe
        self.expected_size = expected_size
        if train_size is None:
            train_size = 50_000 if expected_size is None else max(50_000, 39 * (nlist or _sqrt_rule(expected_size)))
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
        """Train on the buffered vectors (then add them) unless trained already.

        Raises:
            ValueError: no vector was added: an IVF index learns its clusters from its vectors, so an empty one
                cannot be made searchable or saved (it would be an untrained index that fails when loaded).
        """
        if self.index is not None:
            return
        if self._n_pending == 0:
            raise ValueError(f"an {self.kind.replace('faiss_', '').upper()} index learns its clusters from the vectors "
                             "it indexes, and none were given (the input holds no sentence): index at least one "
                             "sentence, or use an exact index")
        self.train(np.concatenate(self._pending))  # trains, then adds the pending vectors

    def _default_nprobe(self, nlist: int) -> int:
        return max(8, nlist // 8)

    def _new_faiss_index(self, quantizer, nlist: int):
        return self._faiss.IndexIVFFlat(quantizer, self.dim, nlist, self._faiss.METRIC_INNER_PRODUCT)

    def train(self, vectors) -> None:
        """Train the clusters on ``vectors`` (float (n, dim); e.g. a random sample of the corpus) instead of the
        first ``train_size`` vectors added. Vectors added so far are kept and added after training.

        Raises:
            RuntimeError: the index is already trained.
        """
        if self.index is not None:
            raise RuntimeError("this IVF index is already trained")
        train = _as_matrix(vectors, self.dim, "vectors")
        n = len(train)
        if n == 0:
            raise ValueError("cannot train an IVF index on 0 vectors")
        target = _sqrt_rule(self.expected_size) if self.expected_size else int(4 * math.sqrt(n))
        nlist = self.nlist or max(1, min(target, n // 39))
        nlist = min(nlist, n)  # k-means needs at least one point per cluster
        quantizer = self._faiss.IndexFlatIP(self.dim)
        index = self._new_faiss_index(quantizer, nlist)
        index.cp.spherical = True  # centroids on the unit sphere, as suits cosine scores
        index.cp.min_points_per_centroid = max(1, min(39, n // nlist))  # small corpora: no faiss warning
        if hasattr(index, "pq"):  # IVF-PQ: its 2**nbits sub-quantizer centroids, same courtesy
            index.pq.cp.min_points_per_centroid = max(1, min(39, n // (1 << index.pq.nbits)))
        index.train(train)
        index.nprobe = min(self.nprobe or self._default_nprobe(nlist), nlist)
        self._quantizer = quantizer  # keep the Python wrapper alive as long as the index
        self.index = index
        self.nlist, self.nprobe = nlist, int(index.nprobe)
        pending = np.concatenate(self._pending) if self._pending else None
        self._pending, self._n_pending = [], 0
        if pending is not None:
            index.add(pending)

    def _search(self, q, k):
        return self.index.search(q, k)

    def set_nprobe(self, nprobe: int) -> None:
        """Clusters visited per query from now on (more: higher recall, slower)."""
        _check_optional_positive(nprobe=nprobe)
        self.nprobe = int(nprobe)
        if self.index is not None:
            self.index.nprobe = min(self.nprobe, self.nlist)

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


class _DiskVectors:
    """float16 copies of the added vectors in a raw file, read back through ``np.memmap`` (for re-ranking).

    Appends go to ``<folder>/refine.f16``; a fresh one lives in a temporary folder until the index is saved.
    RAM use is only the pages the OS caches while re-ranking reads them.
    """

    def __init__(self, dim: int, path: Path | None = None):
        self.dim = dim
        self._owned = path is None  # a saved index's file is never appended to: copied to a temporary one first
        if path is None:
            path = self._temporary_path()
            path.touch()
        self.path = path
        self._n = path.stat().st_size // (2 * dim)
        self._map = None

    def _temporary_path(self) -> Path:
        import shutil
        import tempfile
        import weakref

        tmp = tempfile.mkdtemp(prefix="simcse-refine-")
        weakref.finalize(self, shutil.rmtree, tmp, True)
        return Path(tmp) / _REFINE_FILE

    def __len__(self) -> int:
        return self._n

    def append(self, x: np.ndarray) -> None:
        if not self._owned:
            import shutil

            path = self._temporary_path()
            shutil.copyfile(self.path, path)
            self.path, self._owned = path, True
        with open(self.path, "ab") as f:
            f.write(np.ascontiguousarray(x, dtype=np.float16).tobytes())
        self._n += len(x)
        self._map = None

    def rows(self, ids: np.ndarray) -> np.ndarray:
        """float32 rows for int ids of any shape -> ids.shape + (dim,)."""
        if self._map is None or len(self._map) != self._n:
            self._map = np.memmap(self.path, dtype=np.float16, mode="r", shape=(self._n, self.dim))
        flat = ids.ravel()
        uniq, inv = np.unique(flat, return_inverse=True)  # sorted reads; each row read once
        return self._map[uniq].astype(np.float32)[inv].reshape(*ids.shape, self.dim)

    def save(self, folder: Path) -> None:
        import shutil

        dst = folder / _REFINE_FILE
        if dst.resolve() != self.path.resolve():
            shutil.copyfile(self.path, dst)


class FaissIVFPQIndex(FaissIVFIndex):
    """Approximate search with compressed vectors: ``faiss.IndexIVFPQ`` (inner product), optionally re-ranked.

    Each vector is kept in memory as a product-quantisation code of ``m`` bytes (``m`` sub-vectors of
    ``dim / m`` dimensions, ``nbits`` = 8 bits each) plus its 8-byte id, instead of ``4 * dim`` bytes.
    With ``refine_factor`` > 1 (default 50), a search asks the PQ index for ``refine_factor * k``
    candidates and re-scores them exactly with float16 copies of the vectors kept **on disk** (a memory
    map), which recovers most of the recall PQ loses; RAM holds only the codes. Training, buffering and the
    default ``nlist`` are those of :class:`FaissIVFIndex`; the default ``nprobe`` is about ``nlist / 32`` (a power
    of two, at least 16).

    Args:
        dim: vector size; must be divisible by ``m``.
        m: bytes per code (default ``dim // 8``: 48 for 384-d, 1/32 of float32).
        nbits: bits per sub-quantizer index (default 8).
        refine_factor: candidates per wanted result for the exact re-ranking (1: no re-ranking, no disk copy).
            The defaults (50, and ``nprobe`` about ``nlist / 32``) reach recall@10 0.92 on 1M MiniLM-like
            vectors with 63 bytes per vector in memory (docs/scaling.md).
        nlist, nprobe, train_size, expected_size: as :class:`FaissIVFIndex`.

    Raises:
        ValueError: ``dim`` not divisible by ``m``; non-positive parameters.
    """

    kind = "faiss_ivfpq"

    def __init__(self, dim: int, nlist: int | None = None, nprobe: int | None = None, train_size: int | None = None,
                 expected_size: int | None = None, m: int | None = None, nbits: int = 8, refine_factor: int = 50,
                 _index=None, _refine: "_DiskVectors | None" = None):
        _check_optional_positive(m=m, nbits=nbits, refine_factor=refine_factor)
        m = int(m or max(1, dim // 8))
        if dim % m:
            raise ValueError(f"m={m} must divide dim={dim} (each PQ code byte covers dim/m dimensions)")
        super().__init__(dim, nlist=nlist, nprobe=nprobe, train_size=train_size, expected_size=expected_size,
                         _index=_index)
        self.m, self.nbits, self.refine_factor = m, int(nbits), int(refine_factor)
        self._refine = _refine if _refine is not None or self.refine_factor == 1 else _DiskVectors(self.dim)
        if self._refine is not None:  # exact re-ranking scores come from float16 copies
            self.vector_dtype = "float16"

    def _default_nprobe(self, nlist: int) -> int:
        # about nlist / 32 as a power of two (128 for the 4,000 lists of 1M vectors), at least 16: the setting
        # measured to reach recall@10 >= 0.9 on 1M MiniLM-like vectors (docs/scaling.md)
        return max(16, 1 << max(0, round(math.log2(max(1, nlist) / 32))))

    def _new_faiss_index(self, quantizer, nlist: int):
        return self._faiss.IndexIVFPQ(quantizer, self.dim, nlist, self.m, self.nbits, self._faiss.METRIC_INNER_PRODUCT)

    def train(self, vectors) -> None:
        n = len(_as_matrix(vectors, self.dim, "vectors"))
        if n < 2 ** self.nbits:
            raise ValueError(f"IVF-PQ needs at least {2 ** self.nbits} training vectors (2**nbits), got {n}; "
                             "use an exact or IVF-Flat index for so small a corpus")
        super().train(vectors)

    def _add(self, x):
        if self._refine is not None:
            self._refine.append(x)
        super()._add(x)

    def _search(self, q, k):
        if self._refine is None or self.refine_factor == 1:
            return self.index.search(q, k)
        scores_out, ids_out = [], []
        for s in range(0, len(q), 256):  # bounds the (b, refine_factor * k, dim) candidate block
            qb = q[s : s + 256]
            _, cand = self.index.search(qb, min(k * self.refine_factor, self.ntotal))  # (b, K)
            vec = self._refine.rows(np.maximum(cand, 0))  # (b, K, dim)
            exact = np.einsum("bkd,bd->bk", vec, qb)
            exact[cand < 0] = -np.inf
            order = np.lexsort((cand, -exact), axis=1)[:, :k]  # decreasing score, then id
            ids = np.take_along_axis(cand, order, axis=1)
            scores_out.append(np.take_along_axis(exact, order, axis=1))
            ids_out.append(ids)
        return np.concatenate(scores_out), np.concatenate(ids_out)

    def _save(self, folder):
        cfg = super()._save(folder)
        if self._refine is not None:
            self._refine.save(folder)
        return {**cfg, "m": self.m, "nbits": self.nbits, "refine_factor": self.refine_factor}

    @classmethod
    def _load(cls, folder: Path, cfg: dict) -> "FaissIVFPQIndex":
        index = _import_faiss().read_index(str(folder / _FAISS_FILE))
        index.nprobe = cfg.get("nprobe") or index.nprobe
        refine = None
        if cfg.get("refine_factor", 1) > 1:
            if not (folder / _REFINE_FILE).is_file():
                raise FileNotFoundError(f"{folder / _REFINE_FILE} is missing (the vectors for re-ranking)")
            refine = _DiskVectors(cfg["dim"], folder / _REFINE_FILE)
            if len(refine) != index.ntotal:
                raise ValueError(f"{folder / _REFINE_FILE} holds {len(refine)} vectors, the index {index.ntotal}")
        return cls(cfg["dim"], nlist=cfg.get("nlist"), nprobe=cfg.get("nprobe"), train_size=cfg.get("train_size"),
                   m=cfg["m"], nbits=cfg.get("nbits", 8), refine_factor=cfg.get("refine_factor", 1), _index=index,
                   _refine=refine)


class FaissHNSWIndex(_FaissBacked):
    """Approximate search on a graph: ``faiss.IndexHNSWFlat`` with the inner-product metric.

    No training; vectors are added as they come. Memory is the float32 vectors plus about ``2 * m`` links of
    4 bytes per vector (more than an exact index: HNSW buys speed, not memory).

    Args:
        dim: vector size.
        m: graph neighbours per node (default 32).
        ef_construction: candidate list while building (default 40; more: better graph, slower build).
        ef_search: candidate list while searching (default 64; raised to ``k`` when smaller).
    """

    kind = "faiss_hnsw"

    def __init__(self, dim: int, m: int = 32, ef_construction: int = 40, ef_search: int = 64, _index=None):
        super().__init__(dim)
        _check_optional_positive(m=m, ef_construction=ef_construction, ef_search=ef_search)
        faiss = _import_faiss()
        self.m, self.ef_construction, self.ef_search = int(m), int(ef_construction), int(ef_search)
        if _index is None:
            _index = faiss.IndexHNSWFlat(self.dim, self.m, faiss.METRIC_INNER_PRODUCT)
            _index.hnsw.efConstruction = self.ef_construction
        self.index = _index

    def _search(self, q, k):
        self.index.hnsw.efSearch = max(self.ef_search, k)
        return self.index.search(q, k)

    def _save(self, folder):
        _import_faiss().write_index(self.index, str(folder / _FAISS_FILE))
        return {"m": self.m, "ef_construction": self.ef_construction, "ef_search": self.ef_search}

    @classmethod
    def _load(cls, folder: Path, cfg: dict) -> "FaissHNSWIndex":
        return cls(cfg["dim"], m=cfg.get("m", 32), ef_construction=cfg.get("ef_construction", 40),
                   ef_search=cfg.get("ef_search", 64), _index=_import_faiss().read_index(str(folder / _FAISS_FILE)))


_KINDS = {c.kind: c for c in (NumpyIndex, FaissFlatIndex, FaissIVFIndex, FaissIVFPQIndex, FaissHNSWIndex)}

#: names accepted by :func:`make_index`'s ``kind`` -> the index kind saved in ``index_config.json``
KIND_ALIASES = {"exact": None, "flat": "faiss_flat", "numpy": "numpy", "ivf": "faiss_ivf", "ivfflat": "faiss_ivf",
                "ivfpq": "faiss_ivfpq", "hnsw": "faiss_hnsw", **{k: k for k in _KINDS}}


def _check_optional_positive(**values) -> None:
    for name, v in values.items():
        check_int(v, name, allow_none=True, hint=" or None")


def _sqrt_rule(n: int) -> int:
    """faiss's rule of thumb for the number of IVF clusters: about 4 * sqrt(n)."""
    return max(1, int(4 * math.sqrt(n)))


def make_index(dim: int, use_faiss: bool | None = None, fast: bool = False, kind: str | None = None,
               **params) -> VectorIndex:
    """A new empty index.

    Args:
        dim: vector size.
        use_faiss: True requires faiss (ImportError otherwise), False never uses it, None uses it when
            installed.
        fast: an approximate IVF index (faiss only; without faiss an exact :class:`NumpyIndex` is made and a
            warning says so). Same as ``kind="ivf"``.
        kind: ``"exact"`` (faiss ``IndexFlatIP``, or numpy without faiss), ``"ivf"`` (:class:`FaissIVFIndex`),
            ``"ivfpq"`` (:class:`FaissIVFPQIndex`), ``"hnsw"`` (:class:`FaissHNSWIndex`), or a saved kind name
            (``"numpy"``, ``"faiss_flat"``, ...). Default: from ``fast``.
        params: that kind's parameters (``nlist``, ``nprobe``, ``train_size``, ``expected_size``, ``m``, ``nbits``,
            ``refine_factor``, ``ef_construction``, ``ef_search``); a parameter the kind does not take is a
            ``TypeError``.

    Raises:
        ValueError: an unknown ``kind``, or an approximate kind with ``use_faiss=False``.
    """
    if kind is not None and kind not in KIND_ALIASES:
        raise ValueError(f"unknown index kind {kind!r}; expected one of {sorted(KIND_ALIASES)}")
    kind = KIND_ALIASES[kind] if kind is not None else ("faiss_ivf" if fast else None)
    if use_faiss is None:
        use_faiss = faiss_available() or kind == "numpy"
    if kind == "numpy" or (kind is None and not use_faiss):
        if params:
            raise TypeError(f"an exact index takes no parameters, got {sorted(params)}")
        return NumpyIndex(dim)
    if not use_faiss:
        if kind != "faiss_ivf":
            raise ValueError(f"index kind {kind!r} needs faiss; use_faiss=False allows only the exact numpy index")
        import warnings

        warnings.warn("faiss_fast needs faiss (pip install 'simcse[faiss]'); using exact numpy search", UserWarning,
                      stacklevel=2)
        return NumpyIndex(dim)
    _import_faiss()
    cls = _KINDS[kind or "faiss_flat"]
    if cls is FaissFlatIndex and params:
        raise TypeError(f"an exact index takes no parameters, got {sorted(params)}")
    return cls(dim, **params)


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
    idx.vector_dtype = cfg.get("vector_dtype", idx.vector_dtype)
    if idx.ntotal != cfg.get("ntotal", idx.ntotal):
        raise ValueError(f"{folder}: the config says {cfg['ntotal']} vectors, the index file holds {idx.ntotal}")
    return idx
