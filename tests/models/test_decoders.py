"""Decoder LLMs as encoders: the bidirectional switch for every family, the last-token pooler, and a decoder
trained with unsupervised SimCSE end to end that encodes the same in SimCSE(...) and sentence-transformers."""
from __future__ import annotations

import json

import pytest
import torch

from decoder_models import DECODER_FAMILIES, make_tiny_decoder


@pytest.fixture(scope="module")
def decoders(tmp_path_factory):
    root = tmp_path_factory.mktemp("decoders")
    return {f: make_tiny_decoder(root / f, f, dropout=0.0) for f in DECODER_FAMILIES}


def _hidden(folder, bidirectional, ids):
    from transformers import AutoConfig

    from simcse.models.decoder import set_bidirectional
    from simcse.models.modeling import SimCSEModel

    config = AutoConfig.from_pretrained(folder)
    if bidirectional is not None:
        set_bidirectional(config, bidirectional)
    model = SimCSEModel.from_pretrained(str(folder), pooler_type="avg", config=config).eval()
    with torch.no_grad():
        return model.encoder(input_ids=ids, attention_mask=torch.ones_like(ids)).last_hidden_state


@pytest.mark.parametrize("family", DECODER_FAMILIES)
def test_bidirectional_switch_makes_tokens_see_later_tokens(decoders, family):
    folder = decoders[family]
    ids = torch.tensor([[5, 9, 12, 7, 20, 31]])
    later = ids.clone()
    later[0, 5] = 33  # only the last token differs
    for switch in (None, False, True):
        a, b = _hidden(folder, switch, ids), _hidden(folder, switch, later)
        depends = not torch.allclose(a[0, 2], b[0, 2])
        assert depends == (switch is True), (family, switch)
    # off is the checkpoint's own causal model, exactly
    assert torch.equal(_hidden(folder, False, ids), _hidden(folder, None, ids))


@pytest.mark.parametrize("pooler", ["cls", "cls_before_pooler"])
def test_a_first_token_pooler_is_refused_on_a_causal_decoder_only(decoders, pooler, tmp_path, train_txt):
    """Causal attention computes the first token from itself alone: every sentence would get one vector. Refused
    before any weight is loaded (loading and training); allowed once the attention is bidirectional."""
    from transformers import AutoConfig

    from conftest import training_error
    from simcse.models.decoder import set_bidirectional
    from simcse.models.modeling import SimCSEModel

    folder = decoders["llama"]
    with pytest.raises(ValueError, match=f"pooler_type '{pooler}' reads the first token, which the causal decoder"):
        SimCSEModel.from_pretrained(str(folder), pooler_type=pooler)
    msg = training_error(["--model_name_or_path", str(folder), "--pooler_type", pooler, "--train_file", str(train_txt),
                          "--output_dir", str(tmp_path / "o"), "--max_steps", "1", "--use_cpu", "true"])
    assert "use 'last_token' or 'avg', or train with --bidirectional true" in msg and not (tmp_path / "o").exists()
    config = set_bidirectional(AutoConfig.from_pretrained(folder), True)
    model = SimCSEModel.from_pretrained(str(folder), pooler_type=pooler, config=config).eval()
    enc = model.tokenizer(["a man plays the guitar", "the dog runs"], padding=True, return_tensors="pt")
    with torch.no_grad():
        z = model(**enc)
    assert not torch.allclose(z[0], z[1], atol=1e-4)  # the [BOS] state now reads the sentence


def test_a_plain_decoder_folder_is_read_with_its_last_token(decoders):
    """A decoder folder that records no pooler is read with last_token (as sentence-transformers' lasttoken
    models), never with the first token."""
    from simcse import SimCSE

    for family in ("llama", "gpt2"):
        tool = SimCSE(str(decoders[family]))
        assert tool.model.pooler_type == "last_token", family
        v = tool.encode(["a man plays the guitar", "the dog runs"])
        assert not torch.allclose(torch.as_tensor(v[0]), torch.as_tensor(v[1]), atol=1e-4)


def test_bidirectional_is_refused_for_an_encoder(tiny_bert_dir):
    from transformers import AutoConfig

    from simcse.models.decoder import set_bidirectional

    with pytest.raises(ValueError, match="applies to decoder LLMs.*'bert'"):
        set_bidirectional(AutoConfig.from_pretrained(tiny_bert_dir), True)


def test_last_token_pooler_is_padding_side_free():
    from simcse.models.pooling import get_pooler

    torch.manual_seed(0)
    h = torch.randn(2, 5, 4)
    right = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]])
    left = torch.tensor([[0, 0, 1, 1, 1], [1, 1, 1, 1, 1]])
    fn = get_pooler("last_token").fn
    assert torch.equal(fn(h, right, None), torch.stack([h[0, 2], h[1, 4]]))
    assert torch.equal(fn(h, left, None), torch.stack([h[0, 4], h[1, 4]]))


@pytest.mark.slow
def test_decoder_trains_bidirectional_simcse_and_loads_everywhere(tmp_path, train_txt):
    from conftest import run_training
    from simcse import SimCSE

    folder = make_tiny_decoder(tmp_path / "llama", "llama", dropout=0.1)
    out = tmp_path / "out"
    run_training(["--model_name_or_path", str(folder), "--train_file", str(train_txt), "--output_dir", str(out),
                  "--pooler_type", "last_token", "--bidirectional", "true", "--per_device_train_batch_size", "8",
                  "--max_steps", "3", "--learning_rate", "1e-3", "--use_cpu", "true", "--eval_strategy", "no",
                  "--save_strategy", "no", "--eval_before_training", "false", "--test_after_training", "false",
                  "--report_to", "none", "--dataloader_pin_memory", "false", "--seed", "0"])
    assert json.loads((out / "config.json").read_text())["is_causal"] is False
    assert json.loads((out / "simcse_config.json").read_text())["bidirectional"] is True
    sentences = ["a man plays music .", "the dog runs in the park .", "a child"]
    ours = SimCSE(str(out)).encode(sentences, normalize_to_unit=False)
    ours = ours.numpy() if hasattr(ours, "numpy") else ours
    from sentence_transformers import SentenceTransformer

    theirs = SentenceTransformer(str(out), device="cpu").encode(sentences)
    assert abs(ours - theirs).max() < 1e-5


@pytest.mark.slow
def test_training_prompts_are_saved_and_applied_by_default(tmp_path, train_txt):
    """--prompts prefixes a column before tokenisation; the saved folder records it (simcse and
    sentence-transformers files) and encoding applies the sent0 prompt by default, as sentence-transformers does."""
    from conftest import run_training
    from sentence_transformers import SentenceTransformer

    from simcse import SimCSE

    folder = make_tiny_decoder(tmp_path / "llama", "llama")
    out = tmp_path / "out"
    run_training(["--model_name_or_path", str(folder), "--train_file", str(train_txt), "--output_dir", str(out),
                  "--pooler_type", "last_token", "--prompts", '{"sent0": "red blue "}', "--per_device_train_batch_size",
                  "8", "--max_steps", "2", "--use_cpu", "true", "--eval_strategy", "no", "--save_strategy", "no",
                  "--eval_before_training", "false", "--test_after_training", "false", "--report_to", "none",
                  "--dataloader_pin_memory", "false", "--seed", "0"])
    cfg = json.loads((out / "simcse_config.json").read_text())
    assert cfg["prompts"] == {"sent0": "red blue "} and cfg["default_prompt_name"] == "sent0"
    model = SimCSE(str(out))
    s = ["a man plays music .", "the dog runs ."]
    default = model.encode(s, normalize_to_unit=False)
    assert torch.allclose(default, model.encode(s, prompt="red blue ", normalize_to_unit=False))
    assert not torch.allclose(default, model.encode(s, prompt="", normalize_to_unit=False))
    assert torch.allclose(default, model.encode(s, prompt_name="sent0", normalize_to_unit=False))
    with pytest.raises(ValueError, match="unknown prompt_name 'query'.*sent0"):
        model.encode(s, prompt_name="query")
    theirs = SentenceTransformer(str(out), device="cpu").encode(s)  # applies the saved default prompt itself
    assert abs(default.numpy() - theirs).max() < 1e-5


def test_bad_prompts_option_is_refused(tmp_path, train_txt):
    from conftest import training_error

    argv = ["--model_name_or_path", str(tmp_path / "none"), "--train_file", str(train_txt), "--output_dir",
            str(tmp_path / "o"), "--prompts", '{"query": "x"}']
    assert "--prompts must map view columns" in training_error(argv)


def test_prompts_for_a_column_the_rows_lack_and_empty_lora_targets_are_refused(decoders, tmp_path, train_txt):
    """A one-sentence file has the column sent0 only: a prompt for sent1 would never be applied. An empty
    --lora_target_modules would silently mean the default list."""
    from conftest import training_error

    base = ["--model_name_or_path", str(decoders["llama"]), "--pooler_type", "avg", "--train_file", str(train_txt),
            "--output_dir", str(tmp_path / "o"), "--max_steps", "1", "--use_cpu", "true"]
    msg = training_error([*base, "--prompts", '{"sent1": "Q: "}'])
    assert "--prompts names column(s) ['sent1'] that the training rows do not have (they have ['sent0'])" in msg
    msg = training_error([*base, "--lora_r", "4", "--lora_target_modules", " , "])
    assert "--lora_target_modules ' , ' names no module" in msg
    assert not (tmp_path / "o").exists()


def test_padding_free_forward_is_kept_off_for_causal_attention_without_a_warning(decoders, caplog):
    """The padding-free path attends within each sentence both ways: on a causal decoder it is not tried (no
    alarming mismatch warning), on a bidirectional one it passes its check."""
    import logging

    from transformers import AutoConfig

    from simcse.models.decoder import set_bidirectional
    from simcse.models.modeling import SimCSEModel

    folder = str(decoders["llama"])
    with caplog.at_level(logging.INFO, logger="simcse.models.modeling"):
        assert SimCSEModel.from_pretrained(folder, pooler_type="avg").set_unpadded(True) is False
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING and r.name.startswith("simcse")]
    config = set_bidirectional(AutoConfig.from_pretrained(folder), True)
    assert SimCSEModel.from_pretrained(folder, pooler_type="avg", config=config).set_unpadded(True) is True
