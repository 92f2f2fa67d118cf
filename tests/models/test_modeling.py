"""simcse.models.modeling: the MLP head, the encoder's own pooler, dropout views, save/load, encode order, load errors."""
import json

import numpy as np
import pytest
import torch

from conftest import SENTENCES, make_tiny_model, tokenize
from simcse.models.modeling import SimCSEModel


def test_cls_uses_mlp_and_mlp_only_train(tiny_bert_dir):
    model = SimCSEModel.from_pretrained(str(tiny_bert_dir), pooler_type="cls", mlp_only_train=True)
    batch = tokenize(model, SENTENCES[:2])
    with torch.no_grad():
        model.eval()
        raw = model(**batch)
        cls_vec = model.encoder(**batch).last_hidden_state[:, 0]
        torch.testing.assert_close(raw, cls_vec)  # no MLP when encoding
        model.mlp_only_train = False
        torch.testing.assert_close(model(**batch), model.mlp(cls_vec))  # MLP at inference too


def test_plain_hf_cls_uses_encoder_pooler(tiny_bert_dir):
    from transformers import AutoModel

    model = SimCSEModel.from_pretrained(str(tiny_bert_dir), pooler_type="cls").eval()
    hf = AutoModel.from_pretrained(str(tiny_bert_dir)).eval()
    batch = tokenize(model, SENTENCES[:3])
    with torch.no_grad():
        torch.testing.assert_close(model(**batch), hf(**batch).pooler_output)


def test_two_views_differ_with_dropout_and_match_without(tmp_path):
    folder = make_tiny_model(tmp_path / "m", "bert", dropout=0.1)
    model = SimCSEModel.from_pretrained(str(folder), pooler_type="cls")
    batch = tokenize(model, SENTENCES[:4])
    doubled = {k: v.repeat_interleave(2, dim=0) for k, v in batch.items()}  # each sentence twice, one pass
    model.train()
    z = model(**doubled).view(4, 2, -1)
    assert not torch.allclose(z[:, 0], z[:, 1])  # dropout noise: two different views
    model.eval()
    with torch.no_grad():
        z = model(**doubled).view(4, 2, -1)
    torch.testing.assert_close(z[:, 0], z[:, 1])
    folder0 = make_tiny_model(tmp_path / "m0", "bert", dropout=0.0)
    model0 = SimCSEModel.from_pretrained(str(folder0), pooler_type="cls").train()
    z0 = model0(**doubled).view(4, 2, -1)
    torch.testing.assert_close(z0[:, 0], z0[:, 1])


@pytest.mark.parametrize("pooler", ["cls", "avg"])
def test_save_load_round_trip(tmp_path, tiny_bert_dir, pooler):
    model = SimCSEModel.from_pretrained(str(tiny_bert_dir), pooler_type=pooler, mlp_only_train=False, new_mlp_init="random")
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.01 * torch.randn_like(p))  # make it differ from the source checkpoint
    before = model.encode(SENTENCES)
    model.save_pretrained(tmp_path / "saved")
    cfg = json.loads((tmp_path / "saved" / "simcse_config.json").read_text())
    assert cfg["pooler_type"] == pooler
    loaded = SimCSEModel.from_pretrained(str(tmp_path / "saved"))  # no pooler given: read from the config
    assert loaded.pooler_type == pooler
    np.testing.assert_allclose(loaded.encode(SENTENCES), before, rtol=1e-5, atol=1e-6)
    # the folder is also a plain HF model
    from transformers import AutoModel

    AutoModel.from_pretrained(str(tmp_path / "saved"))


def test_encode_keeps_input_order(tiny_bert_dir):
    model = SimCSEModel.from_pretrained(str(tiny_bert_dir), pooler_type="avg")
    together = model.encode(SENTENCES, batch_size=3)
    one_by_one = np.stack([model.encode([s])[0] for s in SENTENCES])
    np.testing.assert_allclose(together, one_by_one, rtol=1e-4, atol=1e-5)
    assert model.encode([]).shape == (0, 32)
    with pytest.raises(TypeError, match=r"sentences\[1\]"):
        model.encode(["ok", None])


def test_load_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="no weights"):
        SimCSEModel.from_pretrained(str(tmp_path))
    with pytest.raises(FileNotFoundError):
        SimCSEModel.from_pretrained(str(tmp_path / "missing"))
    folder = make_tiny_model(tmp_path / "m", "bert")
    with pytest.raises(ValueError, match="unknown pooler_type"):
        SimCSEModel.from_pretrained(str(folder), pooler_type="mean")  # sentence-transformers' name; ours is avg


# ------------------------------------------------------------------ a folder that cannot be the model it claims
def _copy_without(src, dst, names):
    import shutil

    shutil.copytree(src, dst, ignore=lambda d, files: [f for f in files if f in names])
    return dst


def test_a_folder_without_tokenizer_files_is_refused_not_encoded_with_an_empty_vocabulary(tiny_bert_dir, tmp_path, capsys):
    """Without a vocabulary file transformers builds a tokenizer that maps every word to [UNK]; the model would
    load and encode sentences into embeddings that say nothing about them."""
    from simcse import SimCSE
    from simcse.cli import main as cli_main
    from simcse.models.folder import TOKENIZER_FILES

    folder = _copy_without(tiny_bert_dir, tmp_path / "notok", set(TOKENIZER_FILES) | {"tokenizer_config.json",
                                                                                        "special_tokens_map.json"})
    with pytest.raises(FileNotFoundError, match=r"has no tokenizer: expected one of \['tokenizer.json'"):
        SimCSE(str(folder), device="cpu")
    (tmp_path / "s.txt").write_text("a man plays\n")
    assert cli_main(["encode", "--model", str(folder), "--input", str(tmp_path / "s.txt"),
                     "--output", str(tmp_path / "e.npy")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: model folder") and "has no tokenizer" in err and err.count("\n") == 1
    assert not (tmp_path / "e.npy").exists()


def test_truncated_weights_are_one_line_naming_the_folder(tiny_bert_dir, tmp_path, capsys):
    from simcse.cli import main as cli_main

    folder = _copy_without(tiny_bert_dir, tmp_path / "trunc", set())
    w = folder / "model.safetensors"
    w.write_bytes(w.read_bytes()[:100])
    (tmp_path / "s.txt").write_text("a man plays\n")
    assert cli_main(["encode", "--model", str(folder), "--input", str(tmp_path / "s.txt"),
                     "--output", str(tmp_path / "e.npy")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and f"cannot read the weights in {str(folder)!r}" in err
    assert "truncated or corrupt" in err
    assert err.count("\n") == 1


def test_malformed_simcse_config_names_the_file(tiny_bert_dir, tmp_path):
    from simcse import SimCSEModel

    folder = _copy_without(tiny_bert_dir, tmp_path / "badcfg", set())
    (folder / "simcse_config.json").write_text("{pooler_type: avg}")
    with pytest.raises(ValueError, match=r"simcse_config.json is not valid JSON"):
        SimCSEModel.from_pretrained(str(folder))
    (folder / "simcse_config.json").write_text("[]")
    with pytest.raises(ValueError, match=r"simcse_config.json has no pooler_type"):
        SimCSEModel.from_pretrained(str(folder))
