"""simcse.models.testing: the tiny random encoder folders that tests, benchmarks and the GPU check build offline."""
from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file

from simcse.models.testing import SPECIAL_TOKENS, WORDS, tiny_encoder


def test_the_tokenizer_knows_every_word_and_the_model_encodes(tmp_path):
    from transformers import AutoTokenizer

    from simcse.models.modeling import SimCSEModel

    folder = tiny_encoder(tmp_path / "m")
    tok = AutoTokenizer.from_pretrained(folder)
    ids = tok(" ".join(WORDS), add_special_tokens=False)["input_ids"]
    assert len(ids) == len(WORDS) and tok.unk_token_id not in ids  # a tokenizer that read no vocabulary gives [UNK]s
    assert ids == list(range(len(SPECIAL_TOKENS), len(SPECIAL_TOKENS) + len(WORDS)))
    emb = SimCSEModel.from_pretrained(str(folder), pooler_type="avg").encode(["a man is playing the guitar ."])
    assert emb.shape == (1, 32)


def test_same_seed_same_weights_other_seed_other_weights(tmp_path):
    a, b, c = (load_file(tiny_encoder(tmp_path / n, seed=s) / "model.safetensors") for n, s in (("a", 0), ("b", 0), ("c", 1)))
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert not all(torch.equal(a[k], c[k]) for k in a)


def test_shape_options_reach_the_config(tmp_path):
    cfg = json.loads((tiny_encoder(tmp_path / "m", arch="roberta", layers=3, hidden=48, heads=4, intermediate=96,
                                   positions=128, vocab_size=500, init_std=0.2, dropout=0.0) / "config.json").read_text())
    assert cfg["model_type"] == "roberta" and cfg["type_vocab_size"] == 1 and cfg["pad_token_id"] == 0
    assert (cfg["num_hidden_layers"], cfg["hidden_size"], cfg["num_attention_heads"], cfg["intermediate_size"]) == (3, 48, 4, 96)
    assert (cfg["max_position_embeddings"], cfg["vocab_size"], cfg["initializer_range"]) == (128, 500, 0.2)
    assert cfg["hidden_dropout_prob"] == cfg["attention_probs_dropout_prob"] == 0.0


@pytest.mark.parametrize("kwargs, match", [({"arch": "gpt2"}, "arch: expected 'bert' or 'roberta'"),
                                           ({"hidden": 30, "heads": 4}, "divisible by heads"),
                                           ({"vocab_size": 10}, "smaller than the vocabulary"),
                                           ({"words": ["a", "b", "a"]}, "words must be distinct")])
def test_bad_arguments(tmp_path, kwargs, match):
    with pytest.raises(ValueError, match=match):
        tiny_encoder(tmp_path / "m", **kwargs)


def test_make_tiny_decoder_refuses_a_trained_model_folder(tmp_path, capsys):
    """scripts/make_tiny_decoder.py never writes random weights into a trained model's folder."""
    import pytest

    from conftest import load_script

    (tmp_path / "simcse_config.json").write_text("{}")
    script = load_script("make_tiny_decoder")
    with pytest.raises(SystemExit) as exc:
        script.main([str(tmp_path), "--family", "gpt2"])
    assert exc.value.code == 2 and "holds a trained simcse model" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["simcse_config.json"]


@pytest.mark.parametrize("arch", ["bert", "roberta"])
def test_a_tiny_encoder_with_its_mlm_head_trains_with_do_mlm(tmp_path, arch):
    """tiny_encoder(..., mlm_head=True) saves the masked-LM model: the encoder loads as usual and --do_mlm finds
    its head (the plain tiny encoder has none)."""
    from conftest import run_training, write_corpus
    from simcse.models.modeling import SimCSEModel
    from simcse.models.testing import tiny_encoder

    folder = tiny_encoder(tmp_path / "m", arch=arch, mlm_head=True)
    SimCSEModel.from_pretrained(str(folder), pooler_type="avg").attach_mlm_head(str(folder))
    trainer = run_training(["--model_name_or_path", str(folder), "--train_file", str(write_corpus(tmp_path)),
                            "--output_dir", str(tmp_path / "o"), "--do_mlm", "true", "--max_steps", "1",
                            "--per_device_train_batch_size", "8", "--use_cpu", "true", "--eval_strategy", "no",
                            "--save_strategy", "no", "--eval_before_training", "false", "--test_after_training",
                            "false", "--report_to", "none", "--logging_steps", "1", "--pooler_type", "avg"])
    assert any("loss_mlm" in h for h in trainer.state.log_history)
