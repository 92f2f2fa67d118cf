"""The prompt_mask poolers (simcse.models.prompt): template ids as the official PromptBERT code builds them,
encoding as its evaluation (``sentemb_forward``) does, the saved folder (SimCSE(path) encodes with the
template; sentence-transformers refuses it), and the errors."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from conftest import SENTENCES, make_tiny_model
from simcse.models.modeling import SimCSEModel
from simcse.models.prompt import BoundPrompt, PromptConfig, parse_template

T1 = '*cls*_the_man_of_"*sent_0*"_is*mask*.*sep+*'


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return make_tiny_model(tmp_path_factory.mktemp("prompt"), "bert", dropout=0.0)


def _model(folder, **prompt):
    m = SimCSEModel.from_pretrained(str(folder), pooler_type="prompt_mask", mlp_only_train=True, new_mlp_init="random",
                                    prompt={"templates": [T1], **prompt})
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in m.parameters():
            p.add_(0.3 * torch.randn(p.shape, generator=g))
    return m.eval()


def test_official_notation_is_converted():
    assert parse_template(T1) == ' the man of "{sentence}" is{mask}.'
    with pytest.raises(ValueError, match="one \\{sentence\\} followed by one \\{mask\\}"):
        parse_template("{mask} {sentence}")


def test_wrap_gives_the_official_token_layout(tiny):
    m = _model(tiny)
    tok, b = m.tokenizer, m.bound_prompts()[0]
    # train.py: bs = encode(prefix)[:-1], es = encode(suffix)[1:], the sentence's ids in between
    assert b.prefix.tolist() == tok.encode(' the man of "')[:-1]
    assert b.suffix.tolist() == tok.encode('" is' + tok.mask_token + '.')[1:]
    enc = tok(SENTENCES, padding=True, return_tensors="pt")
    ids, mask, mpos, sent = b.wrap(enc["input_ids"], enc["attention_mask"])
    for i, s in enumerate(SENTENCES):
        row = b.prefix.tolist() + tok.encode(s, add_special_tokens=False) + b.suffix.tolist()
        assert ids[i, : len(row)].tolist() == row and int(mask[i].sum()) == len(row)
        assert (ids[i, len(row):] == tok.pad_token_id).all() and ids[i, mpos[i]] == tok.mask_token_id
        assert sent[i] == len(tok.encode(s, add_special_tokens=False))


def test_encode_equals_the_official_evaluation(tiny):
    """sentemb_forward without delta (the unsupervised evaluation): the [MASK] state of [CLS] bs s es [SEP]."""
    m = _model(tiny)
    tok = m.tokenizer
    bs, es = tok.encode(' the man of "', add_special_tokens=False), tok.encode('" is' + tok.mask_token + '.', add_special_tokens=False)
    rows = [[tok.cls_token_id] + bs + tok.encode(s, add_special_tokens=False) + es + [tok.sep_token_id] for s in SENTENCES]
    width = max(map(len, rows))
    ids = torch.tensor([r + [tok.pad_token_id] * (width - len(r)) for r in rows])
    with torch.no_grad():
        last = m.encoder(input_ids=ids, attention_mask=(ids != tok.pad_token_id).long()).last_hidden_state
    ref = last[ids == tok.mask_token_id].numpy()
    np.testing.assert_allclose(m.encode(SENTENCES), ref, atol=1e-5)


def test_denoising_at_inference_subtracts_the_bare_template(tiny):
    plain, denoised = _model(tiny), _model(tiny, denoise_at_inference=True)
    tok, b = plain.tokenizer, plain.bound_prompts()[0]
    s = SENTENCES[0]
    n = len(tok.encode(s, add_special_tokens=False))
    bare = torch.cat([b.prefix, b.suffix])[None]
    pos = torch.arange(bare.shape[1])[None].clone()
    pos[:, len(b.prefix):] += n  # the suffix where a sentence of n tokens would put it
    with torch.no_grad():
        # the whole row attends (an explicit mask: transformers >= 5.25 splits a mask-less row where positions jump)
        delta = plain.encoder(input_ids=bare, attention_mask=torch.ones_like(bare),
                              position_ids=pos).last_hidden_state[0, len(b.prefix) + b.mask_index]
    np.testing.assert_allclose(denoised.encode([s])[0], plain.encode([s])[0] - delta.numpy(), atol=1e-5)


def test_saved_folder_encodes_with_its_template(tiny, tmp_path):
    from simcse import SimCSE

    m = _model(tiny)
    m.save_pretrained(tmp_path / "saved")
    cfg = json.loads((tmp_path / "saved" / "simcse_config.json").read_text())
    assert cfg["pooler_type"] == "prompt_mask" and cfg["prompt"]["templates"] == [parse_template(T1)]
    tool = SimCSE(str(tmp_path / "saved"))
    np.testing.assert_allclose(np.asarray(tool.encode(SENTENCES, normalize_to_unit=False)), m.encode(SENTENCES), atol=1e-5)
    again = SimCSEModel.from_pretrained(str(tmp_path / "saved"), pooler_type="prompt_mask_before_pooler")
    assert again.prompt == m.prompt  # the agreeing pooler keeps the template


def test_sentence_transformers_refuses_a_prompt_folder(tiny, tmp_path):
    st = pytest.importorskip("sentence_transformers")
    from simcse.interop.export import export_sentence_transformers

    m = _model(tiny)
    m.save_pretrained(tmp_path / "saved")
    with pytest.raises(ValueError, match="prompt_mask"):
        st.SentenceTransformer(str(tmp_path / "saved"))
    with pytest.raises(ValueError, match="cannot insert a prompt template"):
        export_sentence_transformers(m, tmp_path / "st")


def test_max_input_tokens_leaves_room_for_the_template(tiny):
    m = _model(tiny)
    plain = SimCSEModel.from_pretrained(str(tiny), pooler_type="cls_before_pooler")
    assert m.max_input_tokens == plain.max_input_tokens - m.bound_prompts()[0].extra_tokens
    long = " ".join(["man"] * 200)
    assert m.encode([long]).shape == (1, m.hidden_size)  # truncated so that the template still fits


def test_errors(tiny):
    no_template = SimCSEModel.from_pretrained(str(tiny), pooler_type="prompt_mask")
    with pytest.raises(ValueError, match="needs a prompt template"):
        no_template.encode(["a man"])
    cls = SimCSEModel.from_pretrained(str(tiny), pooler_type="cls")
    with pytest.raises(ValueError, match="needs pooler_type one of"):
        cls.set_prompt(PromptConfig((T1,)))
    with pytest.raises(ValueError, match="2 mask tokens"):
        BoundPrompt.bind("{sentence} [MASK] {mask}", no_template.tokenizer)


def test_onnx_export_refuses_a_prompt_model(tiny, tmp_path):
    pytest.importorskip("onnx")
    pytest.importorskip("onnxruntime")
    from simcse.interop.onnx import export_onnx

    with pytest.raises(ValueError, match="cannot be exported to ONNX"):
        export_onnx(_model(tiny), tmp_path / "onnx")
    assert not (tmp_path / "onnx").exists()
