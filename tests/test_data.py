"""Training-file readers (simcse.data): TSV fields are read as written, without CSV quoting."""
from __future__ import annotations

import pytest

# Seven rows whose fields begin with, end with or contain double quotes. Read with CSV quoting, a field that
# opens with '"' swallows the following tab and line, and '"full quoted"' loses its quotes.
TSV_ROWS = [
    ('"Hello," she said', 'a "quoted" word'),
    ("plain one", "plain two"),
    ('"starts with a quote', 'ends with a quote"'),
    ('x ""doubled"" y', '"'),
    ("it's", 'say "hi"'),
    ('"full quoted"', "another"),
    ("last", 'row "x'),
]


def _write_tsv(path, rows, header=("sent0", "sent1")):
    path.write_text("".join("\t".join(r) + "\n" for r in [header, *rows]), encoding="utf-8")
    return path


def test_tsv_rows_come_back_exactly_as_written(tmp_path):
    from simcse.data import load_sentence_dataset

    ds, columns = load_sentence_dataset(_write_tsv(tmp_path / "pairs.tsv", TSV_ROWS))
    assert columns == ["sent0", "sent1"]
    assert [(r["sent0"], r["sent1"]) for r in ds] == TSV_ROWS


def test_tsv_triplets_keep_quotes(tmp_path):
    from simcse.data import load_sentence_dataset

    rows = [(a, b, f'"neg {i}') for i, (a, b) in enumerate(TSV_ROWS)]
    ds, columns = load_sentence_dataset(_write_tsv(tmp_path / "t.tsv", rows, ("sent0", "sent1", "hard_neg")))
    assert columns == ["sent0", "sent1", "hard_neg"]
    assert [(r["sent0"], r["sent1"], r["hard_neg"]) for r in ds] == rows


def test_tsv_field_with_a_tab_is_an_error_naming_the_line(tmp_path):
    from simcse.data import load_sentence_dataset

    p = tmp_path / "bad.tsv"
    p.write_text("sent0\tsent1\na\tb\nc\td\textra\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"line 3, saw 3.*cannot hold a tab"):
        load_sentence_dataset(p)


def test_csv_keeps_standard_quoting(tmp_path):
    """A .csv is RFC 4180 CSV: quoted fields may hold commas, newlines and doubled quotes."""
    from simcse.data import load_sentence_dataset

    p = tmp_path / "pairs.csv"
    p.write_text('sent0,sent1\n"a, b","say ""hi"""\n"two\nlines",plain\n', encoding="utf-8")
    ds, _ = load_sentence_dataset(p)
    assert [(r["sent0"], r["sent1"]) for r in ds] == [("a, b", 'say "hi"'), ("two\nlines", "plain")]
