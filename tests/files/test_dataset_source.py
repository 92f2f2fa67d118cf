"""simcse.files.dataset_source: a local folder in the Hub's layout (README ``configs:``), a save_to_disk folder, an
offline Hub id, columns, and :class:`DatasetRef` rows."""
import time

import pytest

from simcse.files.dataset_source import (
    DatasetRef,
    dataset_texts,
    is_saved_dataset,
    load_dataset_source,
    require_columns,
)

datasets = pytest.importorskip("datasets")

README = """---
configs:
- config_name: wiki
  data_files:
  - split: train
    path: data/wiki.txt
- config_name: other
  data_files:
  - split: train
    path: data/other.txt
---
# a test dataset
"""


@pytest.fixture
def hub_folder(tmp_path):
    root = tmp_path / "hub"
    (root / "data").mkdir(parents=True)
    (root / "data" / "wiki.txt").write_text("first wiki line\nsecond wiki line\n\nfourth\n")
    (root / "data" / "other.txt").write_text("other one\nother two\n")
    (root / "README.md").write_text(README)
    return root


def test_hub_layout_folder_reads_the_config_named_in_its_readme(hub_folder):
    wiki = load_dataset_source(str(hub_folder), "wiki")
    assert wiki["text"] == ["first wiki line", "second wiki line", "", "fourth"]
    assert load_dataset_source(str(hub_folder), "other")["text"] == ["other one", "other two"]
    stream = load_dataset_source(str(hub_folder), "other", streaming=True)
    assert isinstance(stream, datasets.IterableDataset)
    assert [r["text"] for r in stream] == ["other one", "other two"]


def test_unknown_config_and_split_are_one_line(hub_folder):
    with pytest.raises(ValueError) as e:
        load_dataset_source(str(hub_folder), "nope")
    assert "\n" not in str(e.value) and "'nope'" in str(e.value) and str(hub_folder) in str(e.value)
    with pytest.raises(ValueError) as e:
        load_dataset_source(str(hub_folder), "wiki", split="validation")
    assert "\n" not in str(e.value) and "validation" in str(e.value)


def test_data_files_pick_one_file_of_a_folder(tmp_path):
    root = tmp_path / "repo"
    root.mkdir()
    (root / "wiki1m_for_simcse.txt").write_text("a\nb\n")
    (root / "nli_for_simcse.txt").write_text("c\n")
    assert load_dataset_source(str(root), data_files="wiki1m_for_simcse.txt")["text"] == ["a", "b"]


def test_save_to_disk_folders(tmp_path):
    ds = datasets.Dataset.from_dict({"sentence": ["x y", "z w"], "label": [0, 1]})
    ds.save_to_disk(tmp_path / "one")
    assert is_saved_dataset(tmp_path / "one") and not is_saved_dataset(tmp_path)
    assert load_dataset_source(str(tmp_path / "one"))["sentence"] == ["x y", "z w"]
    datasets.DatasetDict({"train": ds, "test": ds.select([1])}).save_to_disk(tmp_path / "dict")
    assert load_dataset_source(str(tmp_path / "dict"), split="test")["sentence"] == ["z w"]
    assert [r["sentence"] for r in load_dataset_source(str(tmp_path / "dict"), streaming=True)] == ["x y", "z w"]
    with pytest.raises(ValueError, match=r"has splits \['test', 'train'\]; --dataset_split 'dev'"):
        load_dataset_source(str(tmp_path / "dict"), split="dev")
    with pytest.raises(ValueError, match="save_to_disk"):
        load_dataset_source(str(tmp_path / "one"), config="x")


def test_offline_hub_id_fails_at_once_with_one_line(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)
    t0 = time.monotonic()
    with pytest.raises(ValueError) as e:
        load_dataset_source("princeton-nlp/datasets-for-simcse", data_files="wiki1m_for_simcse.txt")
    msg = str(e.value)
    assert time.monotonic() - t0 < 10
    assert "\n" not in msg and "'princeton-nlp/datasets-for-simcse'" in msg and "Hub cannot be reached" in msg


def test_missing_folder_and_file(tmp_path):
    with pytest.raises(ValueError, match="no such folder"):
        load_dataset_source(str(tmp_path / "absent"))
    (tmp_path / "f.txt").write_text("a\n")
    with pytest.raises(ValueError, match="is a file"):
        load_dataset_source(str(tmp_path / "f.txt"))


def test_missing_column_lists_the_columns(tmp_path):
    ds = datasets.Dataset.from_dict({"sentence": ["a"], "label": [1]})
    with pytest.raises(ValueError) as e:
        require_columns(ds.column_names, {"--sentence_column": "text"}, "mine")
    assert str(e.value) == "dataset 'mine' has no column 'text' (--sentence_column); its columns: ['sentence', 'label']"
    ds.save_to_disk(tmp_path / "d")
    with pytest.raises(ValueError, match="holds int"):
        list(dataset_texts(str(tmp_path / "d"), "label"))


def test_dataset_ref_rows_are_numbered_from_one(hub_folder):
    ref = DatasetRef(str(hub_folder), config="wiki", streaming=True)
    assert list(ref.rows()) == [(1, "first wiki line"), (2, "second wiki line"), (3, ""), (4, "fourth")]
    assert DatasetRef.from_description(ref.describe()) == ref
