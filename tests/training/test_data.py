"""simcse.training.data: the training-file readers (text, CSV, consecutive-sentence pairs), the collator and MLM masking."""
from __future__ import annotations

import csv
import random
import tempfile
from pathlib import Path

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from conftest import ANY_TEXT, CONTROL, FAST, ONE, SHARED_PAIRS, WORDY, csv_rows, usable, with_duplicates, write_csv
from simcse.training.data import ContrastiveCollator, load_sentence_dataset, mask_tokens, tokenize_dataset


# ------------------------------------------------------------------------------- next-sentence pairs
def test_next_sentence_pairs_line_i_with_line_i_plus_1():
    from simcse.training.data import consecutive_pairs

    lines = ["s0", "s1", "s2", "", "t0", "t1", "  ", "u0"]
    assert consecutive_pairs(lines, 1) == (["s0", "s1", "t0"], ["s1", "s2", "t1"])
    assert consecutive_pairs(iter(lines), 1, max_pairs=2) == (["s0", "s1"], ["s1", "s2"])


def test_next_3_sentences_draws_from_the_next_three_lines_of_the_block():
    from simcse.training.data import consecutive_pairs

    lines = [f"a{i}" for i in range(8)] + ["", "b0", "b1"]
    seen = {i: set() for i in range(7)}
    for seed in range(60):
        anchors, pos = consecutive_pairs(lines, 3, random.Random(seed))
        assert anchors == [f"a{i}" for i in range(7)] + ["b0"] and pos[-1] == "b1"
        for i, p in enumerate(pos[:7]):
            j = int(p[1:])
            assert i < j <= min(i + 3, 7)
            seen[i].add(j)
    assert seen[0] == {1, 2, 3} and seen[5] == {6, 7} and seen[6] == {7}
    assert consecutive_pairs(lines, 3, random.Random(5)) == consecutive_pairs(lines, 3, random.Random(5))
    with pytest.raises(ValueError, match="rng"):
        consecutive_pairs(lines, 3)


# ------------------------------------------------------------------------------------------- readers
@FAST
@given(lines=with_duplicates(ONE, 24))
def test_text_reader_keeps_every_usable_line_in_order(lines):
    from simcse.training.data import load_sentence_dataset

    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "train.txt"
        p.write_text("\n".join(lines) + "\n", encoding="utf-8")
        expected = [s for s in lines if usable(s)]
        if not expected:
            with pytest.raises(ValueError, match="no usable sentence"):
                load_sentence_dataset(p)
            return
        ds, cols = load_sentence_dataset(p)
        assert cols == ["sent0"] and ds["sent0"][:] == expected


CELL = st.one_of(ANY_TEXT, CONTROL.filter(lambda s: "\x00" not in s), WORDY, st.sampled_from(["1", "2.5", "True", "NA", "nan", "", " "]),
                 st.text(st.sampled_from('ab ,";\n'), max_size=8))


@FAST
@given(rows=with_duplicates(st.tuples(CELL, CELL, CELL), 12), triplets=st.booleans(),
       quoting=st.sampled_from([csv.QUOTE_MINIMAL, csv.QUOTE_NONNUMERIC]))
def test_csv_reader_keeps_every_complete_row_in_order(rows, triplets, quoting):
    from simcse.training.data import load_sentence_dataset

    cols = ["sent0", "sent1", "hard_neg"] if triplets else ["sent0", "sent1"]
    rows = [r[: len(cols)] for r in rows]
    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "train.csv"
        with open(p, "w", encoding="utf-8", newline="") as f:
            w = csv.writer(f, quoting=quoting)
            w.writerow(cols)
            w.writerows(rows)
        expected = [r for r in rows if all(usable(c) for c in r)]
        if not expected:
            with pytest.raises(ValueError, match="no usable sentence|header but no data rows"):
                load_sentence_dataset(p)
            return
        ds, got_cols = load_sentence_dataset(p)
        assert got_cols == cols
        assert list(zip(*(ds[c][:] for c in cols))) == expected


def test_blank_lines_are_skipped_and_counted(tmp_path, caplog):
    from simcse.training.data import load_sentence_dataset

    p = tmp_path / "t.txt"
    p.write_text("one sentence .\n\n   \nanother one .\n")
    with caplog.at_level("WARNING"):
        ds, cols = load_sentence_dataset(p)
    assert ds["sent0"] == ["one sentence .", "another one ."] and cols == ["sent0"]
    assert "skipped 2 blank lines of 4" in caplog.text


def test_collator_pads_and_duplicates():
    from simcse.training.data import ContrastiveCollator

    feats = [{"input_ids": [[2, 7, 3]], "attention_mask": [[1, 1, 1]]}, {"input_ids": [[2, 3]], "attention_mask": [[1, 1]]}]
    b = ContrastiveCollator(pad_token_id=0)(feats)
    assert b["input_ids"].shape == (2, 2, 3)
    assert b["input_ids"][1].tolist() == [[2, 3, 0], [2, 3, 0]]
    assert b["attention_mask"][1].tolist() == [[1, 1, 0], [1, 1, 0]]
    b = ContrastiveCollator(pad_token_id=0, max_seq_length=5, pad_to_max_length=True)(feats)
    assert b["input_ids"].shape == (2, 2, 5)


@pytest.mark.parametrize("name", ["qqp_positive_pairs.csv", "caption_pairs.csv.gz"])
def test_shared_pair_files_load_with_two_views(name, tiny_bert_dir):
    path = SHARED_PAIRS / name
    if not path.is_file():
        pytest.skip(f"{path} not available")
    ds, columns = load_sentence_dataset(path, max_train_samples=32)
    assert columns == ["sent0", "sent1"] and len(ds) == 32 and ds.column_names == ["sent0", "sent1"]
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_bert_dir)
    ds = tokenize_dataset(ds, columns, tok, max_seq_length=32)
    batch = ContrastiveCollator(pad_token_id=tok.pad_token_id)([ds[i] for i in range(8)])
    assert batch["input_ids"].shape[:2] == (8, 2) and batch["input_ids"].shape[2] <= 32


def test_rows_with_an_empty_cell_are_skipped_and_counted(tmp_path, caplog):
    rows = csv_rows(5, 3)
    rows[1][2] = ""  # no hard negative
    rows[3][0] = "   "  # blank premise
    f = write_csv(tmp_path / "t.csv", ["sent0", "sent1", "hard_neg"], rows)
    with caplog.at_level("WARNING"):
        ds, columns = load_sentence_dataset(f)
    assert columns == ["sent0", "sent1", "hard_neg"] and len(ds) == 3
    assert ds["sent0"] == [rows[i][0] for i in (0, 2, 4)]
    assert "skipped 2 rows with an empty cell of 5" in caplog.text


# ---------------------------------------------------------------------------------------------- MLM
def test_mlm_masking_leaves_contrastive_ids_unchanged():
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(5, 60, (4, 3, 12), generator=g)
    ids[..., 0], ids[..., -1] = 2, 3
    mask = torch.ones_like(ids)
    before = ids.clone()
    masked, labels = mask_tokens(ids, mask, mask_token_id=4, vocab_size=60, special_ids=[0, 1, 2, 3, 4],
                                 mlm_probability=0.5, generator=g)
    assert torch.equal(ids, before)  # the input is not modified in place
    assert not torch.equal(masked, ids) and (labels != -100).any()
    assert torch.equal(labels[labels != -100], ids[labels != -100])

    feats = [{"input_ids": [[2, 7, 8, 9, 3], [2, 10, 11, 3]], "attention_mask": [[1] * 5, [1] * 4]} for _ in range(6)]
    plain = ContrastiveCollator(pad_token_id=0)(feats)
    col = ContrastiveCollator(pad_token_id=0, mlm_probability=0.5, mask_token_id=4, vocab_size=60, special_ids=(0, 1, 2, 3, 4))
    torch.manual_seed(0)
    with_mlm = col(feats)
    assert torch.equal(with_mlm["input_ids"], plain["input_ids"])  # contrastive ids: untouched
    assert with_mlm["mlm_input_ids"].shape == plain["input_ids"].shape
    assert not torch.equal(with_mlm["mlm_input_ids"], with_mlm["input_ids"])


def test_mlm_masking_statistics_80_10_10():
    g = torch.Generator().manual_seed(0)
    vocab = 1000
    ids = torch.randint(5, vocab, (400, 500), generator=g)
    attn = torch.ones_like(ids)
    ids[:, 0] = 2  # [CLS]: special, never selected
    attn[:, -50:] = 0  # padding: never selected
    masked, labels = mask_tokens(ids, attn, mask_token_id=4, vocab_size=vocab, special_ids=[0, 1, 2, 3, 4],
                                 mlm_probability=0.15, generator=g)
    sel = labels != -100
    assert not sel[:, 0].any() and not sel[:, -50:].any()
    n = sel.sum().item()
    assert abs(n / (400 * 449) - 0.15) < 0.005
    is_mask = (masked == 4) & sel
    kept = (masked == ids) & sel
    rand = sel & ~is_mask & ~kept
    # 80% [MASK]; 10% random (a random token equals the original or [MASK] with prob ~1/vocab); 10% unchanged
    assert abs(is_mask.sum().item() / n - 0.8) < 0.01
    assert abs(rand.sum().item() / n - 0.1) < 0.01
    assert abs(kept.sum().item() / n - 0.1) < 0.01
    assert torch.equal(masked[~sel], ids[~sel])


# ------------------------------------------------------- .tsv fields are read as written, without CSV quoting
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
    from simcse.training.data import load_sentence_dataset

    ds, columns = load_sentence_dataset(_write_tsv(tmp_path / "pairs.tsv", TSV_ROWS))
    assert columns == ["sent0", "sent1"]
    assert [(r["sent0"], r["sent1"]) for r in ds] == TSV_ROWS


def test_tsv_triplets_keep_quotes(tmp_path):
    from simcse.training.data import load_sentence_dataset

    rows = [(a, b, f'"neg {i}') for i, (a, b) in enumerate(TSV_ROWS)]
    ds, columns = load_sentence_dataset(_write_tsv(tmp_path / "t.tsv", rows, ("sent0", "sent1", "hard_neg")))
    assert columns == ["sent0", "sent1", "hard_neg"]
    assert [(r["sent0"], r["sent1"], r["hard_neg"]) for r in ds] == rows


def test_tsv_field_with_a_tab_is_an_error_naming_the_line(tmp_path):
    from simcse.training.data import load_sentence_dataset

    p = tmp_path / "bad.tsv"
    p.write_text("sent0\tsent1\na\tb\nc\td\textra\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"line 3, saw 3.*cannot hold a tab"):
        load_sentence_dataset(p)


def test_csv_keeps_standard_quoting(tmp_path):
    """A .csv is RFC 4180 CSV: quoted fields may hold commas, newlines and doubled quotes."""
    from simcse.training.data import load_sentence_dataset

    p = tmp_path / "pairs.csv"
    p.write_text('sent0,sent1\n"a, b","say ""hi"""\n"two\nlines",plain\n', encoding="utf-8")
    ds, _ = load_sentence_dataset(p)
    assert [(r["sent0"], r["sent1"]) for r in ds] == [("a, b", 'say "hi"'), ("two\nlines", "plain")]


def test_max_train_samples_reads_only_the_lines_it_uses(tmp_path, monkeypatch):
    """A text file is read up to its N-th non-blank line for --max_train_samples N (the CPU default uses 9600 of
    1,000,000 wiki lines); the rows are the first N non-blank lines, as a full read followed by a cut gives."""
    import simcse.training.data as data_mod

    lines = [f"sentence number {i}" if i % 4 else "" for i in range(2000)]  # every 4th line blank
    path = tmp_path / "corpus.txt"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    read = []
    real = data_mod.iter_lines

    def counting(p, *a, **kw):
        for line in real(p, *a, **kw):
            read.append(line)
            yield line

    monkeypatch.setattr(data_mod, "iter_lines", counting)
    ds, _ = load_sentence_dataset(path, max_train_samples=6)
    assert ds["sent0"] == [s for s in lines if s][:6]
    assert len(read) <= 9  # 6 sentences and the 2 blank lines among them (+1 look-ahead), not 2000 lines
    full, _ = load_sentence_dataset(path)
    assert full["sent0"][:6] == ds["sent0"] and len(full) == 1500
