"""Exports: the real sentence-transformers package and HF AutoModel reproduce our embeddings."""
import json

import numpy as np
import pytest
import torch

from conftest import SENTENCES, perturbed_model, st_dense_model
from simcse.interop.export import export_huggingface, export_sentence_transformers
from simcse.models.modeling import SimCSEModel
from simcse.retrieval.tool import SimCSE

sentence_transformers = pytest.importorskip("sentence_transformers")


_model = perturbed_model


def _st_encode(folder, sentences):
    st = sentence_transformers.SentenceTransformer(str(folder), device="cpu")
    return np.asarray(st.encode(sentences, batch_size=4, convert_to_numpy=True)), st


def _assert_same(a, b):
    cos = (a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)
    assert cos.min() > 0.9999
    np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("arch", ["bert", "roberta"])
@pytest.mark.parametrize("pooler, mlp_only_train, modules", [
    ("avg", False, ["Transformer", "Pooling"]),
    ("cls", False, ["Transformer", "Pooling", "Dense"]),  # MLP used at inference -> Dense + Tanh
    ("cls", True, ["Transformer", "Pooling"]),  # unsup. SimCSE: MLP only in training
    ("cls_before_pooler", False, ["Transformer", "Pooling"]),
])
def test_sentence_transformers_export_matches(tmp_path, request, arch, pooler, mlp_only_train, modules):
    model = _model(request.getfixturevalue(f"tiny_{arch}_dir"), pooler, mlp_only_train)
    ours = model.encode(SENTENCES)
    out = export_sentence_transformers(model, tmp_path / "st")
    theirs, st = _st_encode(out, SENTENCES)
    assert [type(m).__name__ for m in st] == modules
    _assert_same(theirs, ours)
    cfg = json.loads((out / "1_Pooling" / "config.json").read_text())
    assert cfg["pooling_mode"] == ("mean" if pooler == "avg" else "cls")
    # the folder is a simcse folder too
    np.testing.assert_allclose(SimCSE(str(out), device="cpu").encode(SENTENCES, return_numpy=True,
                                                                     normalize_to_unit=False), ours, atol=1e-5)


def test_cls_export_differs_without_dense(tmp_path, tiny_bert_dir):
    # negative control: dropping the Dense module changes the embeddings, so the test above can fail
    model = _model(tiny_bert_dir, "cls")
    out = export_sentence_transformers(model, tmp_path / "st")
    mods = json.loads((out / "modules.json").read_text())
    (out / "modules.json").write_text(json.dumps(mods[:2]))
    theirs, _ = _st_encode(out, SENTENCES)
    assert not np.allclose(theirs, model.encode(SENTENCES), atol=1e-3)


def test_reexport_without_mlp_removes_stale_dense(tmp_path, tiny_bert_dir):
    export_sentence_transformers(_model(tiny_bert_dir, "cls"), tmp_path / "st")
    assert (tmp_path / "st" / "2_Dense").is_dir()
    model = _model(tiny_bert_dir, "avg")
    export_sentence_transformers(model, tmp_path / "st")
    assert not (tmp_path / "st" / "2_Dense").exists()
    _assert_same(_st_encode(tmp_path / "st", SENTENCES)[0], model.encode(SENTENCES))


def test_a_sentence_transformers_folder_with_dense_modules_exports_alike(tmp_path, tiny_bert_dir):
    """A folder read from sentence-transformers with concatenated pooling, two Dense modules and Normalize exports
    to sentence-transformers with those modules (same vectors); a plain HF export is refused in one line, as the
    folder could not hold the Dense layers; a later export of a model without them leaves none behind."""
    theirs = st_dense_model(tiny_bert_dir, tmp_path / "src").encode(SENTENCES)
    model = SimCSEModel.from_pretrained(str(tmp_path / "src"))
    out = export_sentence_transformers(model, tmp_path / "st")
    again, st = _st_encode(out, SENTENCES)
    assert [type(m).__name__ for m in st] == ["Transformer", "Pooling", "Dense", "Dense", "Normalize"]
    _assert_same(again, theirs)
    with pytest.raises(ValueError, match=r"applies 2 Dense layer\(s\) after pooling, which a plain HF folder cannot "
                                         r"hold") as e:
        export_huggingface(model, tmp_path / "hf")
    assert "\n" not in str(e.value) and not (tmp_path / "hf").exists()
    plain = _model(tiny_bert_dir, "avg")
    export_sentence_transformers(plain, out)
    assert not any((out / name).exists() for name in ("2_Dense", "3_Dense", "4_Normalize"))
    _assert_same(_st_encode(out, SENTENCES)[0], plain.encode(SENTENCES))


@pytest.mark.parametrize("pooler", ["avg_top2", "avg_first_last"])
def test_poolers_without_st_equivalent_raise(tmp_path, tiny_bert_dir, pooler):
    with pytest.raises(ValueError, match=f"pooler '{pooler}' has no sentence-transformers equivalent"):
        export_sentence_transformers(_model(tiny_bert_dir, pooler), tmp_path / "st")
    assert not (tmp_path / "st").exists()


def test_max_seq_length_written_and_capped(tmp_path, tiny_bert_dir):
    model = _model(tiny_bert_dir, "avg")
    export_sentence_transformers(model, tmp_path / "a", max_seq_length=16)
    assert json.loads((tmp_path / "a" / "sentence_bert_config.json").read_text())["max_seq_length"] == 16
    export_sentence_transformers(model, tmp_path / "b", max_seq_length=512)  # tiny BERT has 64 positions
    assert json.loads((tmp_path / "b" / "sentence_bert_config.json").read_text())["max_seq_length"] == 64


def test_minilm_avg_equals_sentence_transformers(minilm_dir):
    # a real model: our avg pooler on all-MiniLM-L6-v2 gives what sentence-transformers gives for it
    ours = SimCSE(minilm_dir, pooler="avg", device="cpu").encode(SENTENCES, return_numpy=True)
    theirs, _ = _st_encode(minilm_dir, SENTENCES)
    _assert_same(theirs, ours)


@pytest.mark.parametrize("arch", ["bert", "roberta"])
def test_huggingface_export_pooler_holds_mlp(tmp_path, request, arch):
    from transformers import AutoModel, AutoTokenizer

    model = _model(request.getfixturevalue(f"tiny_{arch}_dir"), "cls")
    ours = model.encode(SENTENCES)
    out = export_huggingface(model, tmp_path / "hf")
    assert not (out / "simcse_config.json").exists() and not (out / "simcse_mlp.safetensors").exists()
    assert not (out / "modules.json").exists() and not (out / "README.md").exists()  # no simcse card or ST files
    hf, tok = AutoModel.from_pretrained(str(out)).eval(), AutoTokenizer.from_pretrained(str(out))
    with torch.no_grad():
        pooled = hf(**tok(SENTENCES, padding=True, return_tensors="pt")).pooler_output.numpy()
    _assert_same(pooled, ours)


def test_huggingface_export_avg_and_overwrite(tmp_path, tiny_bert_dir):
    from transformers import AutoModel, AutoTokenizer

    model = _model(tiny_bert_dir, "avg")
    model.save_pretrained(tmp_path / "hf")  # a simcse folder first: the export must remove its simcse files
    out = export_huggingface(model, tmp_path / "hf")
    assert not (out / "simcse_config.json").exists()
    hf, tok = AutoModel.from_pretrained(str(out)).eval(), AutoTokenizer.from_pretrained(str(out))
    b = tok(SENTENCES, padding=True, return_tensors="pt")
    with torch.no_grad():
        h = hf(**b).last_hidden_state
    m = b["attention_mask"].unsqueeze(-1).float()
    _assert_same(((h * m).sum(1) / m.sum(1)).numpy(), model.encode(SENTENCES))


def test_huggingface_export_refuses_encoder_without_pooler(tmp_path):
    from transformers import DistilBertConfig, DistilBertModel

    from conftest import _write_vocab

    folder = tmp_path / "distil"
    folder.mkdir()
    n = _write_vocab(folder / "vocab.txt")
    from transformers import DistilBertTokenizerFast

    DistilBertTokenizerFast(vocab_file=str(folder / "vocab.txt")).save_pretrained(folder)
    DistilBertModel(DistilBertConfig(vocab_size=n, dim=32, n_layers=1, n_heads=2, hidden_dim=64,
                                     max_position_embeddings=64)).save_pretrained(folder)
    model = SimCSEModel.from_pretrained(str(folder), pooler_type="cls", new_mlp_init="random")
    with pytest.raises(ValueError, match="DistilBertModel has no pooler that can hold the cls MLP"):
        export_huggingface(model, tmp_path / "hf")
    assert not (tmp_path / "hf").exists()
    # the sentence-transformers export has a Dense module for it
    out = export_sentence_transformers(model, tmp_path / "st")
    _assert_same(_st_encode(out, SENTENCES)[0], model.encode(SENTENCES))


def test_huggingface_export_of_mlp_only_train_says_what_to_read_and_round_trips(tmp_path, tiny_bert_dir, capsys):
    from transformers import AutoModel, AutoTokenizer

    from simcse.cli import main as cli_main

    model = _model(tiny_bert_dir, "cls", mlp_only_train=True)  # encodes as [CLS] without the MLP
    model.save_pretrained(tmp_path / "m")
    ours = model.encode(SENTENCES)
    assert cli_main(["export", "--model", str(tmp_path / "m"), "--output", str(tmp_path / "hf"), "--format", "huggingface"]) == 0
    err = capsys.readouterr().err
    assert "last_hidden_state[:, 0] (pooler_output is NOT this model's embedding)" in err
    assert f"SimCSE({str(tmp_path / 'hf')!r}, pooler='cls_before_pooler')" in err
    hf, tok = AutoModel.from_pretrained(str(tmp_path / "hf")).eval(), AutoTokenizer.from_pretrained(str(tmp_path / "hf"))
    with torch.no_grad():
        out = hf(**tok(SENTENCES, padding=True, return_tensors="pt"))
    _assert_same(out.last_hidden_state[:, 0].numpy(), ours)  # what the message says to read
    assert np.abs((out.pooler_output.numpy() * ours).sum(1)).max() < 0.9999 * np.linalg.norm(ours, axis=1).max() ** 2
    back = SimCSE(str(tmp_path / "hf"), pooler="cls_before_pooler")
    _assert_same(np.asarray(back.encode(SENTENCES, return_numpy=True, normalize_to_unit=False)), ours)  # round trip
