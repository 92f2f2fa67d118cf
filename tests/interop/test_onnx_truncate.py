"""truncate_dim with the ONNX backend: the exported graph gives the full vector, SimCSE cuts it by the one
rule; the export records the sizes the model was trained at."""
import json

import numpy as np
import pytest

from conftest import SENTENCES, perturbed_model
from simcse import SimCSE

pytest.importorskip("onnxruntime")
pytest.importorskip("onnx")

from simcse.interop.onnx import export_onnx  # noqa: E402


def test_onnx_backend_truncates_like_torch(tmp_path, tiny_bert_dir):
    model = perturbed_model(tiny_bert_dir, "avg")
    model.matryoshka_dims = [32, 8]
    out = export_onnx(model, tmp_path / "m")
    assert json.loads((out / "onnx" / "simcse_onnx.json").read_text())["matryoshka_dims"] == [32, 8]
    full = model.encode(SENTENCES)[:, :8]
    expected = full / np.linalg.norm(full, axis=1, keepdims=True)
    onnx = SimCSE(str(out), backend="onnx", truncate_dim=8)
    assert onnx.hidden_size == 8 and onnx.model.matryoshka_dims == [32, 8]
    np.testing.assert_allclose(onnx.encode(SENTENCES, return_numpy=True), expected, rtol=1e-4, atol=1e-5)
    with pytest.raises(ValueError, match="truncate_dim 64 is larger than the embedding size 32"):
        SimCSE(str(out), backend="onnx", truncate_dim=64)
