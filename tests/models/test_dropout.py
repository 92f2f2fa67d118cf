"""simcse.models.dropout: CPU dropout masks (same law as torch's dropout) and setting a config's dropout."""
from __future__ import annotations

import pytest
import torch

from conftest import SENTENCES, padded_and_unpadded, tokenize
import simcse.models.modeling as modeling


# ------------------------------------------------------------------------------ CPU dropout masks
@pytest.mark.parametrize("p", [0.1, 0.3, 0.5])
def test_keep_mask_follows_the_bernoulli_law(p):
    """Keep rate within 4 standard errors of 1 - p; inverted-dropout scale makes E[out] = x."""
    n = 400_000
    torch.manual_seed(0)
    mask, scale = modeling.keep_mask((n,), p)
    assert mask.dtype == torch.bool and mask.shape == (n,)
    rate = mask.float().mean().item()
    assert abs(rate - (1 - p)) < 4 * (p * (1 - p) / n) ** 0.5, rate
    q = round(p * 65536) / 65536
    assert scale == pytest.approx(1 / (1 - q))
    # the four elements of one 64-bit draw (two 32-bit outputs, two halves each) are not correlated, and each
    # of the four lanes keeps at the same rate
    lanes = mask[: n // 4 * 4].view(-1, 4).float()
    corr = torch.corrcoef(lanes.T)
    assert (corr - torch.eye(4)).abs().max().item() < 0.02, corr
    m = lanes.shape[0]
    assert ((lanes.mean(0) - (1 - p)).abs() < 4 * (p * (1 - p) / m) ** 0.5).all(), lanes.mean(0)


@pytest.mark.parametrize("n", [4096, 4093])
def test_keep_mask_spends_half_a_generator_output_per_element(n):
    """n elements take ceil(n / 4) 64-bit draws = 2 * ceil(n / 4) 32-bit outputs of the Mersenne twister, the
    same generator state as drawing that many 31-bit integers (one output each)."""
    a, b = torch.Generator().manual_seed(5), torch.Generator().manual_seed(5)
    modeling.keep_mask((n,), 0.1, generator=a)
    torch.empty(2 * ((n + 3) // 4), dtype=torch.int32).random_(generator=b)
    assert torch.equal(a.get_state(), b.get_state())


def test_cpu_dropout_matches_torch_dropout_in_law_and_gradient():
    torch.manual_seed(1)
    x = torch.randn(300, 200, dtype=torch.float64, requires_grad=True)
    y = modeling.cpu_dropout(x, 0.2)
    kept = y != 0
    scale = 1 / (1 - round(0.2 * 65536) / 65536)
    torch.testing.assert_close(y[kept], x[kept] * scale)
    y.sum().backward()
    torch.testing.assert_close(x.grad, kept.to(x.dtype) * scale)
    ref = torch.nn.functional.dropout(torch.ones(200_000), 0.2, training=True)
    ours = modeling.cpu_dropout(torch.ones(200_000), 0.2)
    assert abs(ours.mean().item() - ref.mean().item()) < 0.01  # both unbiased
    assert modeling.cpu_dropout(x, 0.0) is x
    with pytest.raises(ValueError, match="p must be in"):
        modeling.keep_mask((3,), 1.0)


def test_set_cpu_dropout_swaps_modules_and_keeps_eval_and_seeding(tiny_bert_dir):
    padded, model = padded_and_unpadded(tiny_bert_dir, "avg")
    n = sum(type(m) is torch.nn.Dropout for m in model.modules())
    assert n > 0 and model.set_cpu_dropout(True) == n
    assert not any(type(m) is torch.nn.Dropout for m in model.modules())
    batch = tokenize(model, SENTENCES)
    with torch.no_grad():  # eval mode: identity, so the same embeddings as the untouched model
        torch.testing.assert_close(model(**batch), padded(**batch), rtol=1e-5, atol=1e-5)
    model.train()
    torch.manual_seed(5)
    a, b = model(**batch), model(**batch)
    torch.manual_seed(5)
    c = model(**batch)
    assert not torch.allclose(a, b)
    torch.testing.assert_close(a, c)
    assert model.set_cpu_dropout(False) == n and not any(isinstance(m, modeling.CPUDropout) for m in model.modules())


# ------------------------------------------------------------------------------------------- dropout
def test_set_config_dropout_sets_every_float_dropout_attribute():
    from transformers import BertConfig, DistilBertConfig

    from simcse.models.dropout import set_config_dropout

    cfg = BertConfig(hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1, classifier_dropout=None)
    assert set_config_dropout(cfg, 0.25) == ["attention_probs_dropout_prob", "hidden_dropout_prob"]
    assert cfg.hidden_dropout_prob == cfg.attention_probs_dropout_prob == 0.25 and cfg.classifier_dropout is None
    d = DistilBertConfig()
    assert set(set_config_dropout(d, 0.0)) >= {"dropout", "attention_dropout"}
    assert d.dropout == d.attention_dropout == 0.0
    for bad in (1.0, -0.1, True):
        with pytest.raises(ValueError, match="dropout must be"):
            set_config_dropout(BertConfig(), bad)
