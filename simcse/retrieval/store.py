"""An on-disk sentence store: the indexed sentences stay in a file, not in memory.

A store is two files in one folder:

* ``sentences.txt``: the sentences as UTF-8, each followed by ``"\\n"`` (readable with ``sed -n 5p``; a
  sentence may itself hold a newline, because reads go by byte offsets, not by lines);
* ``sentences.offsets``: raw little-endian int64, ``n + 1`` values; sentence ``i`` is the bytes
  ``offsets[i] .. offsets[i+1] - 1`` of ``sentences.txt`` (the last byte of each slot is the newline).

:class:`SentenceStore` reads both through ``np.memmap`` and ``os.pread``: opening a store of any size
costs no memory beyond the pages the operating system caches, and ``store[i]`` is one read. It behaves
like a read-only list of str (``len``, indexing and slicing, iteration, ``==`` with a list).
:meth:`SentenceStore.create` / :meth:`SentenceStore.temporary` make a store that
:meth:`SentenceStore.extend` appends to in a stream, writing the offsets as it goes (8 bytes per sentence on
disk, nothing kept per sentence in memory).

The reference tool kept every indexed sentence as a Python string (tens of bytes of overhead each), which
is how a corpus of tens of millions of sentences ran out of memory.
"""
from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np

from simcse.files.checks import is_integer

TEXT_NAME = "sentences.txt"
OFFSETS_NAME = "sentences.offsets"
_OFFSET_DTYPE = np.dtype("<i8")


def is_store(folder: str | os.PathLike) -> bool:
    """True when ``folder`` holds a sentence store."""
    return (Path(folder) / TEXT_NAME).is_file() and (Path(folder) / OFFSETS_NAME).is_file()


class SentenceStore(Sequence):
    """List-like view of the sentences of a store (ids 0 .. n-1 in the order they were appended).

    Memory: the offsets are memory-mapped and each access reads one sentence with ``os.pread``; nothing
    per sentence is held in Python objects. Opened as given it is read-only; :meth:`create` and
    :meth:`temporary` return stores that :meth:`extend` appends to.

    Raises:
        FileNotFoundError: a store file is missing.
        ValueError: the files do not agree (offsets not increasing, or not ending at the text file's size).
    """

    def __init__(self, folder: str | os.PathLike, _writable: bool = False):
        self.folder = Path(folder)
        self._writable = _writable
        self._fd = None
        text, off = self.folder / TEXT_NAME, self.folder / OFFSETS_NAME
        for p in (text, off):
            if not p.is_file():
                raise FileNotFoundError(f"{p} is missing (not a sentence store)")
        size = off.stat().st_size
        if size < _OFFSET_DTYPE.itemsize or size % _OFFSET_DTYPE.itemsize:
            raise ValueError(f"{off}: {size} bytes is not a whole number of int64 offsets (at least one)")
        self._offsets = np.memmap(off, dtype=_OFFSET_DTYPE, mode="r")
        text_size = text.stat().st_size
        if int(self._offsets[0]) != 0 or int(self._offsets[-1]) != text_size:
            raise ValueError(f"{off} does not match {text} ({text_size} bytes): the store is damaged")
        self._fd = os.open(text, os.O_RDWR | os.O_APPEND if _writable else os.O_RDONLY)

    @property
    def writable(self) -> bool:
        """True for a store made by :meth:`create` / :meth:`temporary` (``extend`` appends)."""
        return self._writable

    # ------------------------------------------------------------------ making and appending
    @classmethod
    def create(cls, folder: str | os.PathLike) -> "SentenceStore":
        """An empty, appendable store in ``folder`` (created; store files already there are replaced)."""
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        (folder / TEXT_NAME).write_bytes(b"")
        (folder / OFFSETS_NAME).write_bytes(np.zeros(1, _OFFSET_DTYPE).tobytes())
        return cls(folder, _writable=True)

    @classmethod
    def temporary(cls) -> "SentenceStore":
        """An empty, appendable store in a new temporary folder, deleted when the store is garbage-collected
        (the folder is under ``$TMPDIR``: point that at a disk with room for the corpus)."""
        import shutil
        import tempfile
        import weakref

        store = cls.create(tempfile.mkdtemp(prefix="simcse-sentences-"))
        weakref.finalize(store, shutil.rmtree, str(store.folder), True)
        return store

    def extend(self, sentences: Iterable[str]) -> None:
        """Append sentences (each a str) in order; they get ids ``len(self), len(self) + 1, ...``.

        Raises:
            TypeError: an item is not a str (nothing of this call is appended).
            RuntimeError: the store was opened read-only.
        """
        if not self._writable:
            raise RuntimeError(f"{self.folder} was opened read-only")
        data, ends, pos = [], [], int(self._offsets[-1])
        for s in sentences:
            if not isinstance(s, str):
                raise TypeError(f"a stored sentence must be a str, got {type(s).__name__}")
            b = s.encode("utf-8") + b"\n"
            data.append(b)
            pos += len(b)
            ends.append(pos)
        if not data:
            return
        os.write(self._fd, b"".join(data))
        with open(self.folder / OFFSETS_NAME, "ab") as f:
            f.write(np.asarray(ends, _OFFSET_DTYPE).tobytes())
        self._offsets = np.memmap(self.folder / OFFSETS_NAME, dtype=_OFFSET_DTYPE, mode="r")

    def copy_to(self, folder: str | os.PathLike) -> None:
        """Copy the store's two files into ``folder`` (streamed; a no-op when it is this store's folder)."""
        import shutil

        folder = Path(folder)
        if folder.resolve() == self.folder.resolve():
            return
        for name in (TEXT_NAME, OFFSETS_NAME):
            shutil.copyfile(self.folder / name, folder / name)

    def __len__(self) -> int:
        return len(self._offsets) - 1

    def _get(self, i: int) -> str:
        start, end = int(self._offsets[i]), int(self._offsets[i + 1])
        return os.pread(self._fd, end - start - 1, start).decode("utf-8")

    def __getitem__(self, i):
        """``store[i]`` (str; negative ``i`` counts from the end) or ``store[a:b]`` (list of str)."""
        n = len(self)
        if isinstance(i, slice):
            return [self._get(j) for j in range(*i.indices(n))]
        if not is_integer(i):
            raise TypeError(f"store indices must be integers or slices, got {type(i).__name__}")
        j = int(i) + n if i < 0 else int(i)
        if not 0 <= j < n:
            raise IndexError(f"sentence id {int(i)} is out of range for a store of {n} sentences")
        return self._get(j)

    def __iter__(self):
        # read in blocks of ~1 MiB rather than one pread per sentence
        n, i = len(self), 0
        while i < n:
            j = int(np.searchsorted(self._offsets, self._offsets[i] + (1 << 20), side="right")) - 1
            j = min(max(j, i + 1), n)
            start = int(self._offsets[i])
            blob = os.pread(self._fd, int(self._offsets[j]) - start, start)
            for a, b in zip(self._offsets[i:j], self._offsets[i + 1 : j + 1]):
                yield blob[int(a) - start : int(b) - start - 1].decode("utf-8")
            i = j

    def __eq__(self, other) -> bool:
        if isinstance(other, (SentenceStore, list, tuple)):
            return len(self) == len(other) and all(a == b for a, b in zip(self, other))
        return NotImplemented

    __hash__ = None

    def close(self) -> None:
        """Release the file handle (the store cannot be read afterwards)."""
        if getattr(self, "_fd", None) is not None:
            os.close(self._fd)
            self._fd = None

    def __del__(self):
        try:
            self.close()
        except Exception:  # pragma: no cover - interpreter shutdown
            pass

    def __repr__(self) -> str:
        return f"SentenceStore({str(self.folder)!r}, n={len(self)})"
