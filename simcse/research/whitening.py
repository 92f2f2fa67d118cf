"""BERT-whitening (Su et al. 2021, "Whitening sentence representations for better semantics and faster
retrieval"): a post-processing baseline of the paper's STS table (Table 5) and of Appendices F-G; fitted on
embedding matrices, saved to and loaded from .npz files (docs/analysis.md)."""
from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Callable

import numpy as np

from simcse.evaluation.analysis import _as_matrix, _encode_checked, _to_numpy
from simcse.files.checks import check_int

logger = logging.getLogger(__name__)


class Whitening:
    """BERT-whitening (Su et al. 2021, Section 3 there): ``x -> (x - mu) W[:, :k]``.

    Fitted on a corpus of embeddings X (N, D): ``mu`` is the mean row, ``Sigma = (X - mu)^T (X - mu) / N``
    the (population, 1/N) covariance, ``Sigma = U S U^T`` its SVD, and ``W = U sqrt(S^-1)``; keeping the
    first k columns (largest variances) reduces the dimension. The whitened corpus then has zero mean and
    identity covariance (Su et al. use the 1/(N-1) covariance: a uniform scale factor, which changes no
    cosine similarity).

    Attributes:
        mu: float64 (D,).
        W: float64 (D, k).
        singular_values: float64 (D,), the eigenvalues of Sigma, largest first (for inspection).

    Use :meth:`fit` to create one, :meth:`transform` to apply it, :meth:`truncated` to keep fewer
    dimensions, :meth:`save` / :meth:`load` for .npz files.
    """

    def __init__(self, mu, W, singular_values=None):
        mu = _to_numpy(mu, "mu")
        W = _to_numpy(W, "W")
        if mu.ndim != 1 or W.ndim != 2 or W.shape[0] != mu.shape[0] or W.shape[1] < 1:
            raise ValueError(f"Whitening needs mu (D,) and W (D, k) with k >= 1; got {mu.shape} and {W.shape}")
        if not (np.all(np.isfinite(mu)) and np.all(np.isfinite(W))):
            raise ValueError("Whitening mu or W has NaN/inf entries")
        self.mu = mu
        self.W = W
        self.singular_values = None if singular_values is None else _to_numpy(singular_values, "singular_values")

    @property
    def input_dim(self) -> int:
        return self.W.shape[0]

    @property
    def dim(self) -> int:
        return self.W.shape[1]

    def __repr__(self) -> str:
        return f"Whitening(input_dim={self.input_dim}, dim={self.dim})"

    @classmethod
    def fit(cls, x, dim: int | None = None, rtol: float = 1e-10) -> "Whitening":
        """Fit on corpus embeddings ``x`` (N, D); keep ``dim`` (k) output dimensions.

        Directions whose variance is at most ``rtol`` times the largest are degenerate: sqrt(1/S) would
        blow float rounding noise up to unit variance. Encoders whose last op is a LayerNorm produce a few
        (all-MiniLM-L6-v2: 3 of 384, variance ratio < 1e-16 against > 1e-4 for the others), and a corpus
        of N <= D sentences has at most N-1 non-degenerate directions. ``dim=None`` keeps every
        non-degenerate direction (D when there is none, with a warning otherwise).

        Raises:
            ValueError: bad ``x``; ``dim`` not in [1, D]; ``dim`` larger than the number of non-degenerate
                directions (the message gives that number); an all-constant corpus.
        """
        a = _as_matrix(x, "x", min_rows=2)
        n, d = a.shape
        check_int(dim, "dim", 1, d, allow_none=True, hint=" (the embedding size)")
        mu = a.mean(axis=0)  # (D,)
        centred = a - mu
        cov = centred.T @ centred / n  # (D, D)
        u, s, _ = np.linalg.svd(cov)  # symmetric PSD: u holds the eigenvectors, s the eigenvalues, descending
        rank = int(np.sum(s > rtol * s[0])) if s[0] > 0 else 0
        if rank == 0:
            raise ValueError(f"the corpus embeddings are all identical (N={n}): nothing to whiten")
        if dim is None:
            k = rank
            if rank < d:
                logger.warning("whitening keeps %d of %d dimensions: the other %d have (near-)zero variance "
                               "in the corpus (N=%d sentences)", rank, d, d - rank, n)
        elif dim > rank:
            raise ValueError(
                f"the corpus covariance has only {rank} non-degenerate directions (N={n} sentences, D={d}); "
                f"cannot whiten to dim={dim}: use dim <= {rank} or a larger corpus"
            )
        else:
            k = dim
        W = u[:, :k] / np.sqrt(s[:k])  # (D, k): column j scaled by 1/sqrt(s_j)
        return cls(mu, W, s)

    def truncated(self, dim: int) -> "Whitening":
        """The same whitening keeping only the first ``dim`` output dimensions (the largest variances);
        equal to fitting with ``dim`` on the same corpus.

        Raises:
            ValueError: ``dim`` not in [1, self.dim].
        """
        check_int(dim, "dim", 1, self.dim, hint=" (this whitening's output size)")
        return Whitening(self.mu, self.W[:, :dim], self.singular_values)

    def transform(self, x) -> np.ndarray:
        """Whiten ``x`` (M, D) -> float32 (M, k). A 1-D (D,) input gives (k,).

        Raises:
            ValueError: ``x``'s last dimension is not D, or it has NaN/inf.
        """
        arr = _to_numpy(x, "x")
        single = arr.ndim == 1
        arr = _as_matrix(arr[None, :] if single else arr, "x", min_rows=0)
        if arr.shape[1] != self.input_dim:
            raise ValueError(f"x has {arr.shape[1]} dimensions; this Whitening was fitted on {self.input_dim}")
        out = ((arr - self.mu) @ self.W).astype(np.float32)
        return out[0] if single else out

    __call__ = transform

    def save(self, path: str | os.PathLike) -> Path:
        """Write ``mu``, ``W`` and ``singular_values`` to an .npz file (suffix added by numpy if absent);
        returns the path written."""
        path = Path(path)
        if path.suffix != ".npz":
            path = path.with_name(path.name + ".npz")
        path.parent.mkdir(parents=True, exist_ok=True)
        arrays = {"mu": self.mu, "W": self.W}
        if self.singular_values is not None:
            arrays["singular_values"] = self.singular_values
        np.savez(path, **arrays)
        return path

    @classmethod
    def load(cls, path: str | os.PathLike) -> "Whitening":
        """Read a file written by :meth:`save`.

        Raises:
            FileNotFoundError: no such file.
            ValueError: the file lacks ``mu`` or ``W`` or their shapes do not match.
        """
        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(f"whitening file {str(path)!r} does not exist")
        with np.load(path, allow_pickle=False) as data:
            missing = {"mu", "W"} - set(data.files)
            if missing:
                raise ValueError(f"{path} is not a Whitening file: missing {sorted(missing)}")
            sv = data["singular_values"] if "singular_values" in data.files else None
            return cls(data["mu"], data["W"], sv)


def fit_whitening_on_file(
    encode: Callable[[list[str]], np.ndarray], path: str | os.PathLike, dim: int | None = None,
    max_sentences: int | None = None,
) -> Whitening:
    """Encode the sentences of a text file (one per line) and fit :class:`Whitening` on them.

    Raises: see :func:`simcse.training.data.read_sentences` and :meth:`Whitening.fit`.
    """
    from simcse.training.data import read_sentences

    sentences = read_sentences(path, max_sentences)
    return Whitening.fit(_encode_checked(encode, sentences), dim=dim)
