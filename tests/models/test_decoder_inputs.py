"""What a decoder's rows hold: the EOS token that last-token pooling reads (every family, every surface:
training's tokenisation, encode, the saved folder in sentence-transformers), and mean pooling that leaves an
instruction prompt out (sentence-transformers' ``include_prompt=False``), checked against sentence-transformers
and against the encoder's token states averaged by hand."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from decoder_models import DECODER_FAMILIES, make_tiny_decoder
from simcse.models.modeling import SimCSEModel

S = ["a man plays music .", "the dog runs in the park with a ball .", "a child"]
LONG = " ".join(["a man plays music ."] * 30)  # longer than the tiny models' 64 positions
PROMPT = "red blue big small "  # in the tiny vocabulary: no <unk> (a special token) at its end


@pytest.fixture(scope="module")
def decoders(tmp_path_factory):
    root = tmp_path_factory.mktemp("decoder_inputs")
    return {f: make_tiny_decoder(root / f, f, dropout=0.0) for f in DECODER_FAMILIES}


def _st(folder):
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(str(folder), device="cpu")


def _rows(ids, mask=None):
    ids = [list(map(int, r)) for r in ids]
    return ids if mask is None else [[t for t, m in zip(r, mr) if m] for r, mr in zip(ids, mask.tolist())]


@pytest.mark.parametrize("family", DECODER_FAMILIES)
def test_last_token_rows_end_with_one_eos_everywhere(decoders, family, tmp_path):
    from transformers import AutoTokenizer

    from simcse.training.data import tokenize_views

    raw = AutoTokenizer.from_pretrained(decoders[family])  # the family's own tokenizer: no EOS
    eos = raw.eos_token_id
    texts = [*S, LONG]
    plain = [raw(t)["input_ids"] for t in texts]
    assert all(eos not in r for r in plain)
    model = SimCSEModel.from_pretrained(str(decoders[family]), pooler_type="last_token")  # append_eos auto
    model.save_pretrained(tmp_path / "m")
    assert json.loads((tmp_path / "m" / "simcse_config.json").read_text())["append_eos"] is True
    n = 16
    flat, lengths, offsets = model._tokenize_flat(texts, n)  # what encode (and so index/serve) runs on
    surfaces = {
        "encode": [flat["input_ids"][offsets[i]:offsets[i + 1]].tolist() for i in range(len(texts))],
        "training": [r[0] for r in tokenize_views({"sent0": texts}, ["sent0"], model.tokenizer, n)["input_ids"]],
        "reloaded": _rows(SimCSEModel.from_pretrained(str(tmp_path / "m")).tokenizer(
            texts, truncation=True, max_length=n)["input_ids"]),
    }
    st = _st(tmp_path / "m")
    st.max_seq_length = n
    feats = st.preprocess(texts)
    surfaces["sentence-transformers"] = _rows(feats["input_ids"], feats["attention_mask"])
    for name, rows in surfaces.items():
        for row, ref in zip(rows, plain):
            # the text, cut so that the EOS still fits, then the EOS once
            assert row == ref[: n - 1] + [eos] and row.count(eos) == 1, (family, name, row)
    ours = SimCSEModel.from_pretrained(str(tmp_path / "m")).encode(texts, max_length=n)
    theirs = st.encode(texts)
    np.testing.assert_allclose(ours, theirs, atol=1e-5)


def test_append_eos_settings(decoders):
    folder = str(decoders["llama"])

    def ends(model):
        return model.tokenizer(S[0])["input_ids"][-1] == model.tokenizer.eos_token_id

    avg = SimCSEModel.from_pretrained(folder, pooler_type="avg")  # auto: off for a mean pooler
    assert not avg.append_eos and not ends(avg)
    forced = SimCSEModel.from_pretrained(folder, pooler_type="avg", append_eos=True)
    assert forced.append_eos and ends(forced)
    off = SimCSEModel.from_pretrained(folder, pooler_type="last_token", append_eos="false")
    assert not off.append_eos and not ends(off)
    with pytest.raises(ValueError, match="append_eos must be one of"):
        SimCSEModel.from_pretrained(folder, pooler_type="last_token", append_eos="maybe")


def test_append_eos_is_refused_for_a_tokenizer_without_eos(tiny_bert_dir):
    with pytest.raises(ValueError, match="append_eos: the tokenizer of .* has no eos_token"):
        SimCSEModel.from_pretrained(str(tiny_bert_dir), pooler_type="avg", append_eos=True)


def test_exclude_prompt_masks_as_sentence_transformers():
    from sentence_transformers.models import Pooling

    from simcse.models.prompt_pooling import exclude_prompt

    right = torch.tensor([[1, 1, 1, 1, 0, 0], [1, 1, 1, 1, 1, 1], [1, 1, 0, 0, 0, 0]])
    left = torch.tensor([[0, 0, 1, 1, 1, 1], [1, 1, 1, 1, 1, 1], [0, 0, 0, 0, 1, 1]])
    for mask in (right, left):
        for k in (0, 1, 3):
            theirs = Pooling._exclude_prompt_from_mask(mask, k) if k else mask
            assert torch.equal(exclude_prompt(mask, k), theirs), (mask, k)
    assert torch.equal(exclude_prompt(left, torch.tensor([1, 2, 0])),
                       torch.tensor([[0, 0, 0, 1, 1, 1], [0, 0, 1, 1, 1, 1], [0, 0, 0, 0, 1, 1]]))


@pytest.mark.parametrize("family, append_eos", [("llama", False), ("llama", True), ("gpt2", False)])
def test_include_prompt_false_encodes_as_sentence_transformers(decoders, tmp_path, family, append_eos):
    """A BOS counts as a prompt token; an EOS after the prompt alone does not (sentence-transformers' rule)."""
    folder = tmp_path / "m"
    model = SimCSEModel.from_pretrained(str(decoders[family]), pooler_type="avg", include_prompt=False,
                                        append_eos=append_eos)
    model.set_prompts({"query": PROMPT}, "query")
    model.save_pretrained(folder)
    assert json.loads((folder / "simcse_config.json").read_text())["include_prompt"] is False
    assert json.loads((folder / "1_Pooling" / "config.json").read_text())["include_prompt"] is False
    loaded = SimCSEModel.from_pretrained(str(folder))
    ours = loaded.encode(S)
    st = _st(folder)
    np.testing.assert_allclose(ours, st.encode(S), atol=1e-5)
    # by hand: the mean of the token states after the prompt's own tokens (BOS included, a trailing EOS not)
    tok, enc = loaded.tokenizer, loaded.encoder
    alone = tok(PROMPT)["input_ids"]
    skip = len(alone) - (alone[-1] == tok.eos_token_id)
    for i, s in enumerate(S):
        ids = torch.tensor([tok(PROMPT + s)["input_ids"]])
        with torch.no_grad():
            states = enc(input_ids=ids, attention_mask=torch.ones_like(ids)).last_hidden_state[0]
        np.testing.assert_allclose(ours[i], states[skip:].mean(0).numpy(), atol=1e-5)
    with_prompt = SimCSEModel.from_pretrained(str(folder), include_prompt=True).encode(S)
    assert not np.allclose(ours, with_prompt, atol=1e-3)
    # a sentence-transformers folder without simcse's file: its 1_Pooling says to leave the prompt out
    import shutil

    shutil.copytree(folder, tmp_path / "st_only")
    (tmp_path / "st_only" / "simcse_config.json").unlink()
    np.testing.assert_allclose(SimCSEModel.from_pretrained(str(tmp_path / "st_only")).encode(S, prompt=PROMPT),
                               st.encode(S, prompt=PROMPT), atol=1e-5)
    # without a prompt nothing is left out (as sentence-transformers)
    np.testing.assert_allclose(loaded.encode(S, prompt=""), SimCSEModel.from_pretrained(
        str(folder), include_prompt=True).encode(S, prompt=""), atol=1e-6)


def test_training_rows_carry_the_prompt_length(decoders):
    """Training's tokenisation and collator give the forward what encode gives it: the same pooled vectors."""
    from simcse.training.data import ContrastiveCollator, tokenize_views

    model = SimCSEModel.from_pretrained(str(decoders["llama"]), pooler_type="avg", include_prompt=False).eval()
    tok = model.tokenizer
    rows = tokenize_views({"sent0": S, "sent1": S}, ["sent0", "sent1"], tok, 32, prompts={"sent0": PROMPT},
                          count_prompts=True)
    features = [{k: rows[k][i] for k in rows} for i in range(len(S))]
    batch = ContrastiveCollator(pad_token_id=tok.pad_token_id)(features)
    assert batch["prompt_length"].tolist() == [[len(tok(PROMPT)["input_ids"]), 0]] * len(S)
    from simcse.training.objectives.base import view_inputs

    with torch.no_grad():
        views = [model(**view_inputs(batch, v)).numpy() for v in (0, 1)]
    np.testing.assert_allclose(views[0], model.encode(S, prompt=PROMPT), atol=1e-5)
    np.testing.assert_allclose(views[1], model.encode(S, prompt=""), atol=1e-5)


def test_include_prompt_false_is_refused_where_it_means_nothing(decoders, tmp_path, train_txt):
    from conftest import training_error

    with pytest.raises(ValueError, match="include_prompt false .* pooler 'last_token' is not a mean"):
        SimCSEModel.from_pretrained(str(decoders["llama"]), pooler_type="last_token", include_prompt=False)
    base = ["--model_name_or_path", str(decoders["llama"]), "--train_file", str(train_txt), "--output_dir",
            str(tmp_path / "o"), "--include_prompt", "false", "--eval_strategy", "no", "--eval_before_training", "false",
            "--test_after_training", "false"]
    assert "--include_prompt false leaves the --prompts' tokens out of the mean, but no --prompts" in training_error(base)
    prompts = ["--prompts", '{"sent0": "red "}']
    assert "pooler 'last_token' is not a mean" in training_error(base + prompts + ["--pooler_type", "last_token"])
    assert "not supported with --loss mntp" in training_error(base + prompts + ["--pooler_type", "avg", "--loss", "mntp"])
    assert "--append_eos must be one of" in training_error(base[:6] + ["--append_eos", "yes"])


@pytest.mark.slow
def test_training_with_include_prompt_false_saves_a_folder_sentence_transformers_pools_alike(tmp_path, train_txt):
    from conftest import run_training

    folder = make_tiny_decoder(tmp_path / "llama", "llama")
    out = tmp_path / "out"
    run_training(["--model_name_or_path", str(folder), "--train_file", str(train_txt), "--output_dir", str(out),
                  "--pooler_type", "avg", "--prompts", json.dumps({"sent0": PROMPT}), "--include_prompt", "false",
                  "--per_device_train_batch_size", "8", "--max_steps", "2", "--use_cpu", "true",
                  "--eval_strategy", "no", "--save_strategy", "no", "--eval_before_training", "false",
                  "--test_after_training", "false", "--report_to", "none", "--dataloader_pin_memory", "false",
                  "--seed", "0"])
    assert json.loads((out / "simcse_config.json").read_text())["include_prompt"] is False
    ours = SimCSEModel.from_pretrained(str(out)).encode(S)
    np.testing.assert_allclose(ours, _st(out).encode(S), atol=1e-5)
    assert not np.allclose(ours, SimCSEModel.from_pretrained(str(out), include_prompt=True).encode(S), atol=1e-3)


def test_append_eos_keeps_a_sequence_post_processor(decoders):
    """Llama 3's tokenizer has a ByteLevel post-processor followed by a BOS template: the EOS goes after the text,
    the BOS stays."""
    from tokenizers import processors
    from transformers import AutoTokenizer

    from simcse.models.decoder import append_eos

    tok = AutoTokenizer.from_pretrained(decoders["llama"])
    bos, eos = tok.bos_token_id, tok.eos_token_id
    tok.backend_tokenizer.post_processor = processors.Sequence([
        processors.ByteLevel(trim_offsets=False),
        processors.TemplateProcessing(single="<s> $A", pair="<s> $A <s> $B:1", special_tokens=[("<s>", bos)])])
    words = tok(S[0], add_special_tokens=False)["input_ids"]
    assert append_eos(tok) is True and append_eos(tok) is False  # the second call finds the EOS already there
    assert tok(S[0])["input_ids"] == [bos, *words, eos]
