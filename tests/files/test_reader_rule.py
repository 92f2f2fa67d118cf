"""One reader rule for every sentence source (simcse.files.inputs.cell_text): a missing value is a blank record,
not a wrong type; rows are numbered from 1 everywhere; a column of numbers is reported as numbers -- for
``--input`` files, ``--dataset_name`` (encode, index, training, streaming) and JSON lines alike."""
from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import pytest

from simcse.files.dataset_source import DatasetRef

datasets = pytest.importorskip("datasets")

CSV = "text,id\nfirst sentence here,1\n,2\nthird sentence here,3\nfourth one,4\n"  # row 2's text is empty


@pytest.fixture
def csv_folder(tmp_path):
    folder = tmp_path / "corpus"
    folder.mkdir()
    (folder / "x.csv").write_text(CSV)
    return folder


def test_empty_cell_of_a_dataset_is_a_blank_row_as_in_the_file(csv_folder, tmp_path, tiny_bert_dir, capsys):
    from simcse import cli

    base = ["encode", "--model", str(tiny_bert_dir), "--pooler", "avg", "--device", "cpu", "--skip-blank"]
    assert cli.main([*base, "--input", str(csv_folder / "x.csv"), "--column", "text", "--output",
                     str(tmp_path / "file.npy")]) == 0
    assert cli.main([*base, "--dataset_name", str(csv_folder), "--sentence_column", "text", "--output",
                     str(tmp_path / "dataset.npy")]) == 0
    a, b = np.load(tmp_path / "file.npy"), np.load(tmp_path / "dataset.npy")
    assert a.shape[0] == 3 and np.array_equal(a, b)
    capsys.readouterr()
    assert cli.main([*base[:-1], "--dataset_name", str(csv_folder), "--output", str(tmp_path / "n.npy")]) == 2
    assert "row 2 is blank (pass --skip-blank" in capsys.readouterr().err


def test_rows_are_numbered_from_one_in_every_message(csv_folder):
    ref = DatasetRef(str(csv_folder), column="id")
    with pytest.raises(ValueError, match=r"^dataset '.*corpus', row 1: column 'id' holds int '1', not text$"):
        list(ref.rows())
    rows = list(DatasetRef(str(csv_folder)).rows())
    assert rows[:2] == [(1, "first sentence here"), (2, "")]


def _data_args(name, **kw):
    base = dict(dataset_name=name, dataset_config_name=None, dataset_split="train", dataset_data_files=None,
                sentence_column="text", sent0_column="sent0", sent1_column="sent1", hard_neg_column="hard_neg",
                neutral_as_negative=False, no_hard_negatives=False, positives="simcse", max_train_samples=None,
                shuffle_buffer_size=0, max_seq_length=16)
    return SimpleNamespace(**{**base, **kw})


def test_training_on_a_column_of_integers_says_so(csv_folder):
    from simcse.training.sources import load_training_dataset

    with pytest.raises(ValueError, match=r"row 1: column 'id' holds int '1', not text") as e:
        load_training_dataset(_data_args(str(csv_folder), sentence_column="id"))
    assert "blank" not in str(e.value)
    ds, columns = load_training_dataset(_data_args(str(csv_folder)))
    assert ds["sent0"] == ["first sentence here", "third sentence here", "fourth one"]  # the missing one dropped


def test_streamed_training_reads_cells_by_the_same_rule(csv_folder, tiny_bert_dir):
    from transformers import AutoTokenizer

    from simcse.training.sources import streaming_training_set

    tok = AutoTokenizer.from_pretrained(str(tiny_bert_dir))
    ds, _ = streaming_training_set(_data_args(str(csv_folder), sentence_column="id"), tok, seed=0, rank=0, world=1,
                                   batch_size=2)
    with pytest.raises(ValueError, match=r"row 1: column 'id' holds int '1', not text"):
        next(iter(ds))
    ds, _ = streaming_training_set(_data_args(str(csv_folder)), tok, seed=0, rank=0, world=1, batch_size=8)
    assert [len(b) for b in ds] == [3]


def test_json_null_is_a_blank_record_and_a_number_is_not_text(tmp_path):
    from simcse.files.inputs import cell_text, sentence_rows

    f = tmp_path / "x.jsonl"
    f.write_text("\n".join(json.dumps(v) for v in ({"text": "a b"}, {"text": None}, {"text": 5})) + "\n")
    rows = sentence_rows(f, "text")
    assert [next(rows), next(rows)] == [(1, "a b"), (2, "")]
    with pytest.raises(ValueError, match=r"x.jsonl:3: the sentence holds int '5', not text"):
        next(rows)
    assert cell_text(float("nan"), "x") == "" and cell_text(None, "x") == ""
