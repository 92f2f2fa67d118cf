"""Sentences from files: plain text (one a line), CSV/TSV (a named column) and JSON lines.

Every reader of the package that takes "one sentence per line" (training, the tool, the command line,
evaluation, the analyses) splits lines here, the way ``wc -l`` counts them: only at ``"\\n"``, with a
``"\\r"`` right before it dropped. A lone ``"\\r"``, a form feed, ``"\\x85"``, ``"\\u2028"``... stay inside
their line: Python's universal-newline reading and ``str.splitlines()`` would split there, so that row
``i`` of an output no longer held line ``i`` of the file.

The kind of a sentence file is read from its name: ``.csv`` (comma), ``.tsv``/``.tab`` (tab), ``.jsonl``/
``.ndjson`` (one JSON value a line), anything else plain text.
"""
from __future__ import annotations

import csv
import gzip
import io
import json
import os
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

import numpy as np
import torch

TABLE_SUFFIXES = {".csv": ",", ".tsv": "\t", ".tab": "\t"}
JSONL_SUFFIXES = (".jsonl", ".ndjson")


def strip_line_end(line: str) -> str:
    """``line`` without its ``"\\n"`` / ``"\\r\\n"`` ending (only those; other whitespace is kept)."""
    if line.endswith("\n"):
        line = line[:-1]
        if line.endswith("\r"):
            line = line[:-1]
    return line


def split_lines(text: str) -> list[str]:
    """The lines of ``text`` as :func:`iter_lines` reads them from a file (no trailing empty line)."""
    return [strip_line_end(x) for x in io.StringIO(text, newline="\n")]


def lines_of(stream: Iterable[str]) -> Iterator[str]:
    """The lines of a text stream opened with ``newline="\\n"``, without their endings."""
    for line in stream:
        yield strip_line_end(line)


def open_bytes(p: Path):
    """``p`` opened for reading bytes, decompressed when its name ends in ``.gz``."""
    return gzip.open(p, "rb") if p.name.endswith(".gz") else open(p, "rb")


def first_undecodable_line(path: str | os.PathLike, encoding: str = "utf-8") -> tuple[int, int, bytes] | None:
    """Where ``path`` (plain or ``.gz``) first fails to decode as ``encoding``, line by line.

    Returns ``(line, byte, bad)``: the 1-based line number, the 1-based byte offset within that line and the
    first byte that does not decode; None when every line decodes on its own. The one scan behind the
    "not UTF-8 at line N, byte M" messages of the training readers, the evaluator and the encode tool.
    """
    with open_bytes(Path(path)) as f:
        for i, raw in enumerate(f, 1):
            try:
                raw.decode(encoding)
            except UnicodeDecodeError as e:
                return i, e.start + 1, raw[e.start:e.start + 1]
    return None


def open_text(path: str | os.PathLike, encoding: str = "utf-8"):
    """``open(path)`` for reading text lines split only at ``"\\n"`` (see the module docstring)."""
    return open(path, encoding=encoding, newline="\n")


def _not_utf8(path: Path, what: str) -> ValueError:

    bad = first_undecodable_line(path)
    where = f"{path} is not UTF-8" if bad is None else f"{path}:{bad[0]}: byte {bad[1]} ({bad[2]!r}) is not UTF-8"
    return ValueError(f"{where}; expected a UTF-8 {what}")


def iter_lines(path: str | os.PathLike, encoding: str = "utf-8") -> Iterator[str]:
    """Every line of a text file (blank ones too), without its ending; line ``i`` is ``wc -l``'s line ``i``.

    Raises:
        ValueError: the file is not valid ``encoding`` (the message gives ``file:line`` and the byte).
    """
    p = Path(path)
    try:
        with open_text(p, encoding) as f:
            yield from lines_of(f)
    except UnicodeDecodeError:
        raise _not_utf8(p, "text file, one sentence per line") from None


def file_kind(path: str | os.PathLike) -> str:
    """``"csv"``, ``"tsv"``, ``"jsonl"`` or ``"text"``, from the file name (a ``.gz`` ending is not read)."""
    suffix = Path(path).suffix.lower()
    if suffix in TABLE_SUFFIXES:
        return "csv" if suffix == ".csv" else "tsv"
    return "jsonl" if suffix in JSONL_SUFFIXES else "text"


def sentence_rows(path: str | os.PathLike, column: str | None = None) -> Iterator[tuple[int, str]]:
    """``(line_number, sentence)`` for each record of a sentence file, in file order, blank ones included.

    * text: each line (line numbers as ``wc -l``); ``column`` must be None.
    * CSV / TSV: a header row, then one record a row; ``column`` names the sentence column (it may be
      omitted when the file has a single column). Quoted cells may span lines and hold any character; the
      number is the record's first line. A line break character (``"\\r"``) in an unquoted cell is an
      error naming the line.
    * JSONL: each non-blank line is a JSON string, or an object whose ``column`` field is a string (the field
      may be omitted when every object has a single field); a ``null`` is a blank record (:func:`cell_text`).

    Raises:
        ValueError: ``column`` given for a text file; a missing or unknown column (the message lists the
            file's columns); a short row, a line that is not JSON or a value that is not a string (the message
            gives ``file:line``); a file that is not UTF-8.
    """
    p = Path(path)
    kind = file_kind(p)
    if kind == "text":
        if column is not None:
            raise ValueError(f"column={column!r} applies to .csv/.tsv/.jsonl files; {p} is read as plain text, "
                             "one sentence per line")
        yield from enumerate(iter_lines(p), 1)
    elif kind == "jsonl":
        yield from _jsonl_rows(p, column)
    else:
        yield from _table_rows(p, TABLE_SUFFIXES[p.suffix.lower()], column)


def _table_rows(p: Path, sep: str, column: str | None) -> Iterator[tuple[int, str]]:
    kind = "CSV" if sep == "," else "TSV"
    reader = None
    try:
        # fed lines split only at "\n": a quoted cell may span lines (and hold a "\r"); a lone "\r" in an
        # unquoted cell is a csv.Error naming the line, not a silent extra record as with newline=""
        with open(p, encoding="utf-8-sig", newline="\n") as f:
            reader = csv.reader(f, delimiter=sep)
            header = next(reader, None)
            if not header:
                raise ValueError(f"{p}: a {kind} file needs a header row naming its columns; the first row is empty")
            if column is None:
                if len(header) != 1:
                    raise ValueError(f"{p} is a {kind} file with columns {header}: name the sentence column "
                                     "(column=... / --column)")
                col = 0
            elif column in header:
                col = header.index(column)
            else:
                raise ValueError(f"{p}: no column {column!r}; its {kind} header has {header}")
            start = reader.line_num + 1
            for row in reader:
                if not row:  # an empty line between records
                    start = reader.line_num + 1
                    continue
                if len(row) <= col:
                    raise ValueError(f"{p}:{start}: {len(row)} cell(s), no {header[col]!r} cell (column {col + 1})")
                yield start, row[col]
                start = reader.line_num + 1
    except UnicodeDecodeError:
        raise _not_utf8(p, f"{kind} file") from None
    except csv.Error as e:
        where = f"{p}:{reader.line_num}" if reader is not None and reader.line_num else str(p)
        raise ValueError(f"{where}: not a readable {kind} file: {e} (quote a cell that holds a line break)") from None


def _jsonl_rows(p: Path, column: str | None) -> Iterator[tuple[int, str]]:
    for n, line in enumerate(iter_lines(p), 1):
        if not line.strip():
            yield n, line
            continue
        try:
            value = json.loads(line)
        except json.JSONDecodeError as e:
            raise ValueError(f"{p}:{n}: not JSON ({e.msg}); expected one JSON string or object a line") from None
        if isinstance(value, dict):
            if column is None:
                if len(value) != 1:
                    raise ValueError(f"{p}:{n}: an object with fields {sorted(value)}: name the sentence field "
                                     "(column=... / --column)")
                value = next(iter(value.values()))
            elif column not in value:
                raise ValueError(f"{p}:{n}: no field {column!r}; this object has {sorted(value)}")
            else:
                value = value[column]
        elif column is not None:
            raise ValueError(f"{p}:{n}: a JSON {type(value).__name__}, not an object with field {column!r}")
        value = cell_text(value, f"{p}:{n}: the sentence")  # null: a blank record; a number: an error
        bad = lone_surrogate(value)
        if bad is not None:
            raise ValueError(f"{p}:{n}: the sentence holds {bad} (a \\u escape without its pair); expected valid "
                             "Unicode")
        yield n, value


def cell_text(value, where) -> str:
    """The text of one cell of any sentence source, by one rule (files, datasets, training and the tool alike).

    A str is itself. A missing value -- None (what ``datasets`` gives for an empty CSV cell or a JSON null) or a
    float NaN (what pandas gives) -- is ``""``: a blank record, skipped with ``--skip-blank`` / dropped from
    training as a blank line is. Any other value (a number, a list, ...) is not text and is reported as such.

    Args:
        value: the cell.
        where: a str, or a callable giving one (built only for an error), naming the cell, e.g.
            ``"dataset 'd', row 3: column 'id'"`` (rows are numbered from 1 everywhere, as file lines are).

    Raises:
        ValueError: ``"<where> holds int 7, not text"``.
    """
    if isinstance(value, str):
        return value
    if value is None or (isinstance(value, float) and value != value):
        return ""
    place = where() if callable(where) else where
    raise ValueError(f"{place} holds {type(value).__name__} {str(value)[:40]!r}, not text")


def iter_sentences(path: Path, column: str | None = None) -> Iterator[str]:
    """Non-blank records of a sentence file (text, CSV/TSV column, JSONL; see :mod:`simcse.files.inputs`).

    Text lines are split only at ``\\n`` and kept without their ending (other whitespace is kept).

    Raises:
        ValueError: not UTF-8, or a bad CSV/JSONL record (the message gives the file and line).
    """
    for _, line in sentence_rows(path, column):
        if line.strip():
            yield line


def lone_surrogate(text: str) -> str | None:
    """None when ``text`` is valid Unicode, else a phrase naming its first lone UTF-16 surrogate and where it is
    (``"a lone UTF-16 surrogate U+D83D at character 5"``): what a JSON ``"\\ud83d"`` without its pair (an emoji
    cut in half) decodes to. Such a str cannot be encoded as UTF-8, so no tokenizer can read it.
    The one check behind :func:`check_sentences`, the JSONL reader and ``simcse serve``'s text checks."""
    try:
        text.encode("utf-8")
        return None
    except UnicodeEncodeError as e:
        return f"a lone UTF-16 surrogate U+{ord(text[e.start]):04X} at character {e.start}"


def check_sentences(sentences, name: str = "sentences") -> tuple[list[str], bool]:
    """Return (list of sentences, was a single str). TypeError/ValueError name the bad position: not a str, blank,
    or holding a lone UTF-16 surrogate (:func:`lone_surrogate`).

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
        bad = lone_surrogate(s)
        if bad is not None:
            raise ValueError(f"{where} holds {bad}, which is not text; expected valid Unicode (UTF-8 encodable)")
    return [str(s) for s in items], single
