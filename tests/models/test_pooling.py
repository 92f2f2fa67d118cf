"""simcse.models.pooling: the pooler registry and each pooler against a manual computation."""

import pytest
import torch

from conftest import SENTENCES, tokenize
from simcse.models.modeling import SimCSEModel
from simcse.models.pooling import POOLERS, get_pooler


ALL_POOLERS = ["cls", "cls_before_pooler", "avg", "avg_top2", "avg_first_last", "avg_first_last_embeddings", "last_token",
               "max", "weighted_avg", "avg_sqrt_len"]


def test_registry_names_and_unknown():
    assert sorted(POOLERS) == sorted(ALL_POOLERS + ["prompt_mask", "prompt_mask_before_pooler"])  # the prompt ones: test_prompt.py
    with pytest.raises(ValueError, match="avg_first_last"):
        get_pooler("mean")


@pytest.mark.parametrize("arch", ["bert", "roberta"])
@pytest.mark.parametrize("pooler", ALL_POOLERS)
def test_pooler_shapes_and_padding_invariance(tmp_path_factory, arch, pooler, request):
    folder = request.getfixturevalue(f"tiny_{arch}_dir")
    model = SimCSEModel.from_pretrained(str(folder), pooler_type=pooler).eval()
    with torch.no_grad():
        short = model(**tokenize(model, SENTENCES[:3]))
        padded = model(**tokenize(model, SENTENCES[:3], pad_to=40))
    assert short.shape == (3, 32) and short.dtype == torch.float32
    # attention masks keep padding out of every pooler (cls reads position 0 only)
    torch.testing.assert_close(short, padded, rtol=1e-4, atol=1e-5)


def test_concatenated_poolers_and_what_cannot_be_concatenated(tiny_bert_dir):
    model = SimCSEModel.from_pretrained(str(tiny_bert_dir), pooler_type="cls_before_pooler+avg+max").eval()
    batch = tokenize(model, SENTENCES[:3])
    with torch.no_grad():
        got = model(**batch)
        parts = [SimCSEModel.from_pretrained(str(tiny_bert_dir), pooler_type=p).eval()(**batch)
                 for p in ("cls_before_pooler", "avg", "max")]
    assert got.shape == (3, 96) and model.hidden_size == 96 and get_pooler("avg+max").width == 2
    torch.testing.assert_close(got, torch.cat(parts, dim=-1))
    for name, message in (("avg+mean", "unknown pooler 'mean' in pooler_type 'avg\\+mean'"),
                          ("cls+avg", "pooler 'cls' cannot be concatenated"),
                          ("avg+prompt_mask_before_pooler", "pooler 'prompt_mask_before_pooler' cannot be concatenated")):
        with pytest.raises(ValueError, match=message):
            get_pooler(name)


def test_poolers_against_manual_computation(tiny_bert_dir):
    model = SimCSEModel.from_pretrained(str(tiny_bert_dir), pooler_type="avg").eval()
    batch = tokenize(model, SENTENCES[:2])
    with torch.no_grad():
        hs = model.encoder(**batch, output_hidden_states=True).hidden_states
        m = batch["attention_mask"]
        for i in range(2):
            n = int(m[i].sum())
            expect = {
                "avg": hs[-1][i, :n].mean(0),
                "avg_top2": ((hs[-1][i, :n] + hs[-2][i, :n]) / 2).mean(0),
                "avg_first_last": ((hs[1][i, :n] + hs[-1][i, :n]) / 2).mean(0),
                "avg_first_last_embeddings": ((hs[0][i, :n] + hs[-1][i, :n]) / 2).mean(0),
                "cls_before_pooler": hs[-1][i, 0],
                "max": hs[-1][i, :n].max(0).values,
                "weighted_avg": (hs[-1][i, :n] * torch.arange(1.0, n + 1)[:, None]).sum(0) * 2 / (n * (n + 1)),
                "avg_sqrt_len": hs[-1][i, :n].sum(0) / n ** 0.5,
            }
            for name, vec in expect.items():
                p = get_pooler(name)
                got = p.fn(hs[-1], m, hs)[i]
                torch.testing.assert_close(got, vec, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("arch", ["bert", "roberta"])
def test_avg_first_last_embeddings_is_the_embedding_layer_plus_last_layer(arch, request):
    """The paper's printed "first-last avg.": (word+position+type embeddings, after LayerNorm) + last layer."""
    folder = request.getfixturevalue(f"tiny_{arch}_dir")
    model = SimCSEModel.from_pretrained(str(folder), pooler_type="avg_first_last_embeddings").eval()
    fixed = SimCSEModel.from_pretrained(str(folder), pooler_type="avg_first_last").eval()
    batch = tokenize(model, SENTENCES[:3], pad_to=24)
    with torch.no_grad():
        got = model(**batch)
        emb = model.encoder.embeddings(input_ids=batch["input_ids"])  # (N, L, H): hidden_states[0]
        last = model.encoder(**batch).last_hidden_state  # (N, L, H)
        m = batch["attention_mask"].unsqueeze(-1).float()
        expect = (((emb + last) / 2) * m).sum(1) / m.sum(1)
        other = fixed(**batch)
    torch.testing.assert_close(got, expect, rtol=1e-5, atol=1e-6)
    assert not torch.allclose(got, other, atol=1e-3)  # not the first transformer layer's average


@pytest.mark.parametrize("mode,pooler", [("mean", "avg"), ("cls", "cls_before_pooler"), ("lasttoken", "last_token")])
def test_a_folder_saved_by_the_installed_sentence_transformers_is_read_with_its_pooling(tiny_bert_dir, tmp_path, mode, pooler):
    """sentence-transformers 6 writes ``{"pooling_mode": "mean"}`` (no boolean keys): the folder's pooler is read
    from it, and SimCSE(folder) gives sentence-transformers' own embeddings."""
    import json

    import numpy as np
    from sentence_transformers import SentenceTransformer, models

    from simcse import SimCSE
    from simcse.models.pooling import recorded_pooler

    st = SentenceTransformer(modules=[models.Transformer(str(tiny_bert_dir)), models.Pooling(32, pooling_mode=mode)],
                             device="cpu")
    st.save(str(tmp_path / "st"))
    saved = json.loads((tmp_path / "st" / "1_Pooling" / "config.json").read_text())
    assert saved.get("pooling_mode") == mode and not any(k.startswith("pooling_mode_") for k in saved)
    assert recorded_pooler(tmp_path / "st")[0] == pooler
    ours = SimCSE(str(tmp_path / "st"), device="cpu").encode(SENTENCES[:4], return_numpy=True, normalize_to_unit=False)
    theirs = st.encode(SENTENCES[:4])
    np.testing.assert_allclose(ours, theirs, atol=1e-5)


@pytest.mark.parametrize("pcfg,modes", [
    ({"pooling_mode": "mean"}, ("mean",)),
    ({"pooling_mode": ["cls", "max"]}, ("cls", "max")),
    ({"pooling_mode_cls_token": False, "pooling_mode_mean_tokens": True}, ("mean",)),
    ({"pooling_mode_cls_token": True, "pooling_mode_mean_tokens": False}, ("cls",)),
    ({"pooling_mode_lasttoken": True}, ("lasttoken",)),
    ({"pooling_mode_cls_token": False, "pooling_mode_mean_tokens": False}, ("mean",)),  # as sentence-transformers reads it
    ({"pooling_mode": "cls", "pooling_mode_mean_tokens": True}, ("cls",)),  # the 6.x key wins
])
def test_both_pooling_config_formats(pcfg, modes):
    from simcse.models.st_files import st_pooling_modes

    assert st_pooling_modes(pcfg) == modes
