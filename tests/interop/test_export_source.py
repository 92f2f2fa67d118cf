"""Exporting never changes the source model, and a pooler that disagrees with the one the model folder records
is an error unless asked for (``--override-pooler``)."""
from __future__ import annotations

import numpy as np
import pytest

from conftest import SENTENCES, make_tiny_model
from simcse import SimCSE, SimCSEModel
from simcse.cli import main as cli_main


def _snapshot(folder):
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def _error_line(err: str) -> str:
    lines = [x for x in err.strip().splitlines() if x.startswith("error:")]
    assert len(lines) == 1 and err.strip().endswith(lines[0]) and "Traceback" not in err, err
    return lines[0]


@pytest.fixture
def avg_model(tmp_path):
    folder = tmp_path / "avg_model"
    SimCSEModel.from_pretrained(str(make_tiny_model(tmp_path / "hf")), pooler_type="avg").save_pretrained(folder)
    return folder


def test_a_pooler_other_than_the_recorded_one_is_refused_by_every_format(avg_model, tmp_path, capsys):
    before = _snapshot(avg_model)
    for fmt in ("onnx", "sentence-transformers", "huggingface"):
        out = avg_model if fmt == "onnx" else tmp_path / f"out_{fmt}"
        assert cli_main(["export", "--model", str(avg_model), "--pooler", "cls", "--output", str(out),
                         "--format", fmt]) == 2
        err = _error_line(capsys.readouterr().err)
        assert "--pooler cls differs from the pooler" in err and "records ('avg'" in err
        assert "pass --override-pooler to export with another pooler on purpose" in err
        assert not (tmp_path / f"out_{fmt}").exists()
    assert _snapshot(avg_model) == before


def test_onnx_export_into_the_models_own_folder_changes_none_of_its_files(avg_model, capsys):
    pytest.importorskip("onnxruntime")
    pytest.importorskip("onnx")
    before = _snapshot(avg_model)
    emb = SimCSE(str(avg_model), device="cpu").encode(SENTENCES[:4], return_numpy=True)
    assert cli_main(["export", "--model", str(avg_model), "--pooler", "cls_before_pooler", "--override-pooler",
                     "--output", str(avg_model), "--format", "onnx"]) == 0
    after = _snapshot(avg_model)
    assert {k: v for k, v in after.items() if not k.startswith("onnx/")} == before  # only onnx/ was added
    np.testing.assert_array_equal(SimCSE(str(avg_model), device="cpu").encode(SENTENCES[:4], return_numpy=True), emb)
    onnx_tool = SimCSE(str(avg_model), backend="onnx")
    assert onnx_tool.pooler == "cls_before_pooler"  # the graph holds the pooler it was exported with


def test_onnx_export_of_a_plain_hf_folder_records_no_pooler_there(tmp_path):
    pytest.importorskip("onnxruntime")
    pytest.importorskip("onnx")
    plain = make_tiny_model(tmp_path / "plain")
    before = _snapshot(plain)
    assert cli_main(["export", "--model", str(plain), "--output", str(plain), "--format", "onnx"]) == 0
    assert not (plain / "simcse_config.json").exists()
    assert {k: v for k, v in _snapshot(plain).items() if not k.startswith("onnx/")} == before
    assert SimCSE(str(plain), pooler="avg", device="cpu").pooler == "avg"  # still free to choose


def test_folder_exports_into_the_source_folder_are_refused(avg_model, tmp_path, capsys):
    before = _snapshot(avg_model)
    for fmt in ("sentence-transformers", "huggingface"):
        assert cli_main(["export", "--model", str(avg_model), "--output", str(avg_model), "--format", fmt]) == 2
        err = _error_line(capsys.readouterr().err)
        assert "is the folder the model was loaded from" in err and "give a new folder" in err
    assert _snapshot(avg_model) == before
    assert cli_main(["export", "--model", str(avg_model), "--output", str(tmp_path / "st")]) == 0
