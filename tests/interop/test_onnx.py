"""ONNX export (torch exporter + onnxruntime) and SimCSE(path, backend="onnx")."""
import json

import numpy as np
import pytest
import torch

from conftest import SENTENCES, perturbed_model, st_dense_model
from simcse import SimCSE
from simcse.cli import main as cli_main

pytest.importorskip("onnxruntime")
pytest.importorskip("onnx")

from simcse.interop.onnx import ONNX_INT8_NAME, ONNXEncoder, export_onnx  # noqa: E402


_model = perturbed_model


def _cos(a, b):
    return (a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)


@pytest.mark.parametrize("arch, pooler, mlp_only_train", [
    ("bert", "cls", False), ("bert", "cls", True), ("bert", "avg", False), ("bert", "avg_top2", False),
    ("roberta", "cls_before_pooler", False), ("roberta", "avg_first_last", False),
])
def test_onnx_fp32_matches_torch(tmp_path, request, arch, pooler, mlp_only_train):
    model = _model(request.getfixturevalue(f"tiny_{arch}_dir"), pooler, mlp_only_train)
    ours = model.encode(SENTENCES)
    out = export_onnx(model, tmp_path / "onnx")
    meta = json.loads((out / "onnx" / "simcse_onnx.json").read_text())
    assert meta["pooler_type"] == pooler and meta["files"] == ["simcse.onnx"]
    got = ONNXEncoder(out, num_threads=1).encode(SENTENCES, batch_size=5)
    assert _cos(got, ours).min() > 0.9999
    np.testing.assert_allclose(got, ours, rtol=1e-4, atol=1e-5)


def test_onnx_of_a_sentence_transformers_folder_with_dense_modules_matches_it(tmp_path, tiny_bert_dir):
    """The graph holds the concatenated pooling, both Dense layers and the Normalize step of the folder."""
    theirs = st_dense_model(tiny_bert_dir, tmp_path / "src").encode(SENTENCES)
    out = export_onnx(str(tmp_path / "src"), tmp_path / "onnx")
    meta = json.loads((out / "onnx" / "simcse_onnx.json").read_text())
    assert meta["pooler_type"] == "cls_before_pooler+max" and meta["hidden_size"] == 8 and meta["normalize"]
    got = ONNXEncoder(out, num_threads=1).encode(SENTENCES, batch_size=5)
    assert got.shape == theirs.shape and _cos(got, theirs).min() > 0.9999
    np.testing.assert_allclose(got, theirs, rtol=1e-4, atol=1e-5)


def test_onnx_int8_close_and_tool_backend(tmp_path, tiny_bert_dir):
    model = _model(tiny_bert_dir, "cls")
    ours = model.encode(SENTENCES, normalize=True)
    out = export_onnx(model, tmp_path / "m", quantize="int8")
    assert (out / "onnx" / ONNX_INT8_NAME).is_file()
    fp32 = SimCSE(str(out), backend="onnx")
    int8 = SimCSE(str(out), backend="onnx", file_name=ONNX_INT8_NAME)
    assert fp32.pooler == "cls" and fp32.device.type == "cpu"
    a = fp32.encode(SENTENCES, return_numpy=True)
    np.testing.assert_allclose(a, ours, atol=1e-5)
    b = int8.encode(SENTENCES, return_numpy=True)
    assert 0.9 < _cos(b, ours).min() and not np.allclose(b, ours, atol=1e-4)  # quantised: close, not equal
    # the rest of the tool runs on the ONNX encoder
    assert fp32.encode(SENTENCES[0]).shape == (32,)
    assert fp32.similarity(SENTENCES[0], SENTENCES[0]) == pytest.approx(1.0, abs=1e-5)
    fp32.build_index(SENTENCES, use_faiss=False)
    assert fp32.search(SENTENCES[3], top_k=1, threshold=-1)[0][0] == SENTENCES[3]


def test_onnx_backend_errors(tmp_path, tiny_bert_dir):
    with pytest.raises(FileNotFoundError, match="has no ONNX export"):
        SimCSE(str(tiny_bert_dir), backend="onnx")
    with pytest.raises(ValueError, match="backend must be 'torch' or 'onnx'"):
        SimCSE(str(tiny_bert_dir), backend="tensorrt")
    out = export_onnx(_model(tiny_bert_dir, "avg"), tmp_path / "m")
    with pytest.raises(FileNotFoundError, match="simcse_int8.onnx"):
        SimCSE(str(out), backend="onnx", file_name=ONNX_INT8_NAME)
    with pytest.raises(ValueError, match="differs from the pooler the exported ONNX graph records \\('avg'"):
        SimCSE(str(out), backend="onnx", pooler="cls")
    tool = SimCSE(str(out), backend="onnx")
    with pytest.raises(ValueError, match="ONNX backend's reduced precision is the int8 file"):
        tool.encode(SENTENCES, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="needs the torch backend"):
        tool.save_pretrained(tmp_path / "again")
    with pytest.raises(ValueError, match="quantize must be None or one of"):
        export_onnx(_model(tiny_bert_dir, "avg"), tmp_path / "q", quantize="int4")


def test_cli_export_onnx(tmp_path, tiny_bert_dir, capsys):
    model = _model(tiny_bert_dir, "avg")
    model.save_pretrained(tmp_path / "m")
    assert cli_main(["export", "--model", str(tmp_path / "m"), "--output", str(tmp_path / "m"), "--format", "onnx",
                     "--quantize", "int8"]) == 0
    files = json.loads((tmp_path / "m" / "onnx" / "simcse_onnx.json").read_text())["files"]
    assert files == ["simcse.onnx", "simcse_int8.onnx"]
    # the torch folder is intact next to the ONNX files
    np.testing.assert_allclose(SimCSE(str(tmp_path / "m"), device="cpu").encode(SENTENCES, return_numpy=True),
                               SimCSE(str(tmp_path / "m"), backend="onnx").encode(SENTENCES, return_numpy=True),
                               atol=1e-5)
    assert cli_main(["export", "--model", str(tmp_path / "m"), "--output", str(tmp_path / "x"),
                     "--quantize", "int8"]) == 2
    assert "--quantize needs --format onnx" in capsys.readouterr().err


DECODER_SENTENCES = [*SENTENCES[:6], " ".join(SENTENCES)]  # the last one is cut at the model's 64 positions


def _decoder(tmp_path, name, bidirectional, pooler="last_token", **kwargs):
    """A tiny Llama saved by simcse with its attention switched (or not), a default prompt, and ``kwargs``."""
    from transformers import AutoConfig

    from decoder_models import make_tiny_decoder
    from simcse.models.decoder import set_bidirectional
    from simcse.models.modeling import SimCSEModel

    base = tmp_path / "base"
    if not base.is_dir():
        make_tiny_decoder(base, "llama", dropout=0.0)
    config = set_bidirectional(AutoConfig.from_pretrained(base), bidirectional)
    model = SimCSEModel.from_pretrained(str(base), pooler_type=pooler, config=config, **kwargs)
    model.set_prompts({"query": "red blue big "}, "query")
    model.save_pretrained(tmp_path / name)
    return tmp_path / name


def _torch_and_onnx(folder):
    both = [SimCSE(str(folder), **kw).encode(DECODER_SENTENCES, return_numpy=True, normalize_to_unit=False)
            for kw in ({"device": "cpu"}, {"backend": "onnx"})]
    return both[0], both[1]


def test_onnx_decoder_keeps_its_attention_pooler_prompt_and_eos(tmp_path):
    """A tiny Llama, causal and bidirectional, last-token pooled (EOS appended), with a default prompt: the ONNX
    export (`simcse export --format onnx` into the model's folder) encodes as SimCSE(folder)."""
    onnx = {}
    for bidirectional in (False, True):
        folder = _decoder(tmp_path, f"bi{bidirectional}", bidirectional)
        assert cli_main(["export", "--model", str(folder), "--output", str(folder), "--format", "onnx"]) == 0
        assert json.loads((folder / "onnx" / "simcse_onnx.json").read_text())["append_eos"] is True
        ours, onnx[bidirectional] = _torch_and_onnx(folder)
        np.testing.assert_allclose(onnx[bidirectional], ours, atol=1e-4)
    assert not np.allclose(onnx[True], onnx[False], atol=1e-3)  # the bidirectional graph is not the causal one
    # a plain decoder folder exported into itself: its tokenizer adds no EOS, the ONNX backend appends it as
    # SimCSE(folder, pooler="last_token") does
    from simcse.models.modeling import SimCSEModel

    base = tmp_path / "base"
    export_onnx(SimCSEModel.from_pretrained(str(base), pooler_type="last_token"), base)
    plain = [SimCSE(str(base), **kw).encode(DECODER_SENTENCES, return_numpy=True, normalize_to_unit=False)
             for kw in ({"device": "cpu", "pooler": "last_token"}, {"backend": "onnx"})]
    np.testing.assert_allclose(plain[1], plain[0], atol=1e-4)


def test_onnx_include_prompt_false_takes_the_prompt_length(tmp_path):
    import onnx

    folder = _decoder(tmp_path, "mean", True, pooler="avg", include_prompt=False)
    export_onnx(str(folder), folder)
    graph = onnx.load(str(folder / "onnx" / "simcse.onnx")).graph
    assert [i.name for i in graph.input] == ["input_ids", "attention_mask", "prompt_length"]
    ours, got = _torch_and_onnx(folder)
    np.testing.assert_allclose(got, ours, atol=1e-4)
    with_prompt = SimCSE(str(folder), device="cpu", include_prompt=True).encode(
        DECODER_SENTENCES, return_numpy=True, normalize_to_unit=False)
    assert not np.allclose(got, with_prompt, atol=1e-3)


@pytest.mark.parametrize("option", [{"include_prompt": True}, {"append_eos": False}, {"pooler_type": "avg"}])
def test_onnx_backend_names_the_options_the_graph_fixes(tmp_path, option):
    """Loading options of the torch backend are fixed in an exported graph: one clear TypeError, not the encoder
    class's own."""
    with pytest.raises(TypeError, match=r"backend='onnx' takes file_name= and num_threads=; \['" + next(iter(option))):
        SimCSE(str(tmp_path), backend="onnx", **option)
