"""simcse.training.config: config files with a ``base`` chain, and the embedded model name."""
from __future__ import annotations

import json

import pytest

from simcse.training.config import EMBEDDED_MODEL, ConfigError, load_config, resolve_model_name


def _write(path, obj):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(obj) if not isinstance(obj, str) else obj)
    return path


def test_base_chain_overrides_key_by_key_and_drops_base_comments(tmp_path):
    _write(tmp_path / "root.json", {"_comment": "root", "a": 1, "b": [1, 2], "c": "x"})
    _write(tmp_path / "sub" / "mid.json", {"base": "../root.json", "_row": "mid", "b": [3], "d": True})
    leaf = _write(tmp_path / "sub" / "leaf.json", {"_row": "leaf", "base": "mid.json", "c": "y"})
    assert load_config(leaf) == {"a": 1, "b": [3], "c": "y", "d": True, "_row": "leaf"}
    assert list(load_config(leaf))[:4] == ["a", "b", "c", "d"]  # base options first, in file order


@pytest.mark.parametrize("content, match", [
    ('{"base": "self.json"}', "its own base"),
    ('{"base": 3}', "must be a path"),
    ("[1, 2]", "JSON object"),
    ("{not json", "not valid JSON"),
    ('{"base": "missing.json"}', "cannot read"),
])
def test_bad_config_files_name_the_problem(tmp_path, content, match):
    f = _write(tmp_path / "self.json", content)
    with pytest.raises(ConfigError, match=match):
        load_config(f)


def test_embedded_model_name_resolves_to_the_package_folder(minilm_dir, tmp_path, monkeypatch):
    assert resolve_model_name(EMBEDDED_MODEL) == minilm_dir
    assert resolve_model_name("bert-base-uncased") == "bert-base-uncased"
    monkeypatch.chdir(tmp_path)
    (tmp_path / EMBEDDED_MODEL).mkdir()  # a local folder of that name wins
    assert resolve_model_name(EMBEDDED_MODEL) == EMBEDDED_MODEL


def test_hub_model_id_names_the_embedded_model_by_its_hub_id(minilm_dir, tiny_bert_dir):
    from simcse.training.config import hub_model_id

    assert hub_model_id(EMBEDDED_MODEL) == "sentence-transformers/all-MiniLM-L6-v2"
    assert hub_model_id(minilm_dir) == "sentence-transformers/all-MiniLM-L6-v2"  # the folder training resolved it to
    assert hub_model_id(minilm_dir + "/") == "sentence-transformers/all-MiniLM-L6-v2"
    assert hub_model_id("bert-base-uncased") == "bert-base-uncased"
    assert hub_model_id("princeton-nlp/sup-simcse-bert-base-uncased") == "princeton-nlp/sup-simcse-bert-base-uncased"
    assert hub_model_id(str(tiny_bert_dir)) is None  # a local folder of unknown origin
    assert hub_model_id("./my/local/model") is None and hub_model_id(None) is None
