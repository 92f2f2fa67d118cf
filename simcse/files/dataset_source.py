"""Sentences from the Hugging Face ``datasets`` ecosystem: a Hub dataset id, a local folder in the Hub's layout,
or a folder written by ``Dataset.save_to_disk``.

One home for opening such a source (training, ``simcse encode`` and ``simcse index`` all come here):
:func:`load_dataset_source` returns a ``datasets.Dataset`` (or, with ``streaming=True``, a
``datasets.IterableDataset`` read lazily), :func:`column_names` and :func:`require_columns` check what it holds,
and :func:`dataset_rows` yields one column as numbered strings. :class:`DatasetRef` names one column of one split,
for the readers that take a file or a dataset alike (``simcse encode``, ``simcse index``, the shard encoder).

* A folder with ``state.json`` (one split) or ``dataset_dict.json`` (several) is a ``save_to_disk`` folder:
  read with ``datasets.load_from_disk`` (config and data files do not apply to it).
* Any other existing folder, or a Hub id, goes through ``datasets.load_dataset(name, config, data_files=...,
  split=...)``: the Hub layout (data files, optionally a README whose YAML header has a ``configs:`` block).
* With the Hub unreachable (``HF_HUB_OFFLINE=1``, no network) a name that is not a local folder fails at once
  with one line naming what was looked for.

``datasets`` is imported inside the functions: it is only needed when a dataset is named.
"""
from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__


def is_saved_dataset(path: str | os.PathLike) -> bool:
    """Whether ``path`` is a folder written by ``Dataset.save_to_disk`` / ``DatasetDict.save_to_disk``."""
    p = Path(path)
    return p.is_dir() and ((p / "state.json").is_file() or (p / "dataset_dict.json").is_file())


def load_dataset_source(name: str, config: str | None = None, split: str = "train", data_files=None,
                        streaming: bool = False, cache_dir: str | None = None, flag: str = "--dataset_name"):
    """Open the split ``split`` of the dataset ``name`` (see the module docstring for what ``name`` may be).

    Args:
        name: a Hub dataset id (``princeton-nlp/datasets-for-simcse``), a local folder in the Hub's layout, or a
            ``save_to_disk`` folder.
        config: the configuration (``config_name`` of a README ``configs:`` block); None: the dataset's default.
        split: the split to read (``train``).
        data_files: a file name, glob pattern or list of them inside the dataset (e.g. ``wiki1m_for_simcse.txt``
            of a repository holding several files); None: the dataset's own files.
        streaming: return a ``datasets.IterableDataset`` that reads lazily (a ``save_to_disk`` folder is
            turned into one with ``to_iterable_dataset``) instead of a ``datasets.Dataset``.
        cache_dir: ``datasets``' cache folder (None: its default).
        flag: the option the name came from, for messages.

    Returns:
        ``datasets.Dataset`` (rows in file order) or ``datasets.IterableDataset``.

    Raises:
        ValueError: one line naming ``name`` and what went wrong: no such folder and no reachable Hub, an
            unknown split or config, unreadable data, config/data files given for a ``save_to_disk`` folder.
    """
    import datasets

    if not isinstance(name, str) or not name.strip():
        raise ValueError(f"{flag} must name a dataset (a Hub id or a folder), got {name!r}")
    if is_saved_dataset(name):
        if config or data_files:
            raise ValueError(f"{flag} {name!r} is a folder written by save_to_disk: --dataset_config_name and "
                             "--dataset_data_files do not apply to it")
        try:
            ds = datasets.load_from_disk(name)
        except Exception as e:  # any failure of the reader is reported as one line
            raise ValueError(f"{flag} {name!r}: cannot read the save_to_disk folder: {_first_line(e)}") from e
        if isinstance(ds, datasets.DatasetDict):
            if split not in ds:
                raise ValueError(f"{flag} {name!r} has splits {sorted(ds)}; --dataset_split {split!r} is not one of them")
            ds = ds[split]
        return ds.to_iterable_dataset() if streaming else ds
    local = Path(name).expanduser()
    if not local.exists() and (name.startswith((".", "/", "~")) or name.count("/") > 1):
        raise ValueError(f"{flag} {name!r}: no such folder (expected a Hub dataset id or a local dataset folder)")
    if local.exists() and not local.is_dir():
        raise ValueError(f"{flag} {name!r} is a file; give a dataset folder or a Hub id (a single file is read "
                         "with --train_file)")
    try:
        return datasets.load_dataset(str(local) if local.is_dir() else name, config, split=split,
                                     data_files=data_files, streaming=streaming, cache_dir=cache_dir)
    except ConnectionError as e:
        raise ValueError(f"{flag} {name!r}: not a local folder ({str(local.resolve())!r} does not exist) and the "
                         f"Hub cannot be reached ({_first_line(e)})") from e
    except Exception as e:  # datasets raises many kinds; the user gets one line either way
        what = f" (config {config!r}, split {split!r}{f', data files {data_files!r}' if data_files else ''})"
        raise ValueError(f"{flag} {name!r}{what} could not be loaded: {_first_line(e)}") from e


def column_names(ds) -> list[str]:
    """The columns of a ``Dataset`` or ``IterableDataset`` (for a stream without declared features, the keys of its
    first row). An empty list for an empty stream."""
    names = ds.column_names
    if names is not None:
        return list(names)
    first = next(iter(ds.take(1)), None)
    return [] if first is None else list(first)


def require_columns(have: list[str], wanted: dict[str, str], name: str) -> None:
    """Check that the columns ``have`` (:func:`column_names`) of dataset ``name`` hold every column of ``wanted``
    (``{option: column}``), else one line listing the columns it has.

    Raises:
        ValueError: e.g. ``dataset 'x' has no column 'text' (--sentence_column); its columns: ['sentence']``.
    """
    missing = [(opt, col) for opt, col in wanted.items() if col not in have]
    if missing:
        parts = ", ".join(f"{col!r} ({opt})" for opt, col in missing)
        raise ValueError(f"dataset {name!r} has no column {parts}; its columns: {have}")


def dataset_rows(name: str, column: str = "text", config: str | None = None, split: str = "train",
                 data_files=None, streaming: bool = False) -> Iterator[tuple[int, str]]:
    """``(row number, text)`` of a dataset's ``column`` (:func:`load_dataset_source`) in row order, rows numbered
    from 1 (as file lines are); lazily with ``streaming``. Cells are read by the one rule of every source
    (:func:`simcse.files.inputs.cell_text`): a missing value is a blank row, a number is not text.

    Raises:
        ValueError: see :func:`load_dataset_source`; a missing column (the message lists the columns); a cell
            that is neither text nor missing (the message names the row and the type).
    """
    from simcse.files.inputs import cell_text

    ds = load_dataset_source(name, config, split, data_files, streaming)
    require_columns(column_names(ds), {"--sentence_column": column}, name)
    ds = ds.select_columns([column])
    for n, row in enumerate(ds, 1):
        yield n, cell_text(row[column], lambda: f"dataset {name!r}, row {n}: column {column!r}")


def dataset_texts(name: str, column: str = "text", config: str | None = None, split: str = "train",
                  data_files=None, streaming: bool = False) -> Iterator[str]:
    """The texts of :func:`dataset_rows` (missing values as ``""``), in row order."""
    return (text for _, text in dataset_rows(name, column, config, split, data_files, streaming))


@dataclass(frozen=True)
class DatasetRef:
    """One text column of one split of a dataset, as a sentence source (``simcse encode/index --dataset_name``).

    Attributes mirror :func:`load_dataset_source`: ``name``, ``config``, ``split``, ``data_files``, ``streaming``
    (read lazily, never loaded whole), and ``column`` (the sentence column, ``text`` by default). A ``name`` that
    is an existing local folder is kept as its absolute path (``./corpus``, ``corpus`` and ``/abs/corpus`` are one
    dataset, and a record read from another working folder still names it, not a Hub id). :meth:`identity` is
    what tells two references apart: ``streaming`` is how the rows are read, not which rows.
    """

    name: str
    column: str = "text"
    config: str | None = None
    split: str = "train"
    data_files: str | None = None
    streaming: bool = False

    def __post_init__(self):
        local = Path(self.name).expanduser() if isinstance(self.name, str) and self.name else None
        if local is not None and local.exists():
            object.__setattr__(self, "name", str(local.resolve()))

    def identity(self) -> dict:
        """The fields that decide which rows are read (all but ``streaming``), JSON-ready."""
        return {k: v for k, v in asdict(self).items() if k != "streaming"}

    def rows(self) -> Iterator[tuple[int, str]]:
        """``(row number, text)`` in dataset order, numbered from 1 (as file lines are; :func:`dataset_rows`).

        Raises:
            ValueError: see :func:`dataset_rows`.
        """
        return dataset_rows(self.name, self.column, self.config, self.split, self.data_files, self.streaming)

    def check(self) -> DatasetRef:
        """Open the dataset and check its column now (before a model is loaded); returns ``self``.

        Raises:
            ValueError: see :func:`load_dataset_source` and :func:`require_columns`.
        """
        ds = load_dataset_source(self.name, self.config, self.split, self.data_files, self.streaming)
        require_columns(column_names(ds), {"--sentence_column": self.column}, self.name)
        return self

    def describe(self) -> dict:
        """The reference as a JSON-ready dict (``DatasetRef(**d)`` makes it again); recorded in shard manifests."""
        return {"dataset": asdict(self)}

    @classmethod
    def from_description(cls, d: dict) -> DatasetRef:
        """The reference :meth:`describe` wrote."""
        return cls(**d["dataset"])

    def __str__(self) -> str:
        return f"dataset {self.name!r} ({self.split}, column {self.column!r})"
