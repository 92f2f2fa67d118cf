"""MixCSE's objective against an independent transcription of the official code (BDBC-KG-NLP/MixCSE_AAAI2022,
``mixcse/models_mix.py`` cl_forward, unsupervised: the rolled, detached mixes of positives and of anchors, the
multiplicative masks, the ``hard_negative_weight`` logit bonus). Loss within 1e-6, gradients within 2e-5
relative, through the model (a tiny BERT, [CLS] + MLP); and over several optimizer steps with dropout on (the
shared harness, ``fidelity_harness.py``), with negative controls."""
from __future__ import annotations

import pytest
import torch
from torch import nn

from conftest import assert_same_gradients, random_sentences, spread_cls_model
from fidelity_harness import (LossReference, OfficialBertForCL, assert_steps_match, assert_told_apart,
                              project_steps, reference_steps, sentence_batches, start_model)
from simcse.training.objectives import LossContext, build_objective

HP = {"temp": 0.05, "lambdas": 0.2, "hard_negative_weight": 0.0}


def official_mixcse_loss(z1, z2, temp, lambdas, hard_negative_weight):
    """cl_forward after pooling, one process, two views (num_sent == 2)."""
    sim = lambda x, y: nn.CosineSimilarity(dim=-1)(x, y) / temp  # noqa: E731
    cos_sim = sim(z1.unsqueeze(1), z2.unsqueeze(0))
    labels = torch.arange(cos_sim.size(0)).long()

    def bonus(cos_sim, block):
        return torch.tensor([[0.0] * (cos_sim.size(-1) - block.size(-1)) + [0.0] * i + [hard_negative_weight]
                             + [0.0] * (block.size(-1) - i - 1) for i in range(block.size(-1))])

    z3 = torch.cat([z2[1:], z2[:1]], dim=0)
    lam = torch.Tensor([lambdas] * z3.size(0))
    z3 = (lam.unsqueeze(1) * z2 + (1 - lam).unsqueeze(1) * z3).detach()
    z1_z3_cos = sim(z1.unsqueeze(1), z3.unsqueeze(0))
    mask = torch.eye(z1_z3_cos.size(0))
    mask = 1 - torch.cat([mask[-1:], mask[:-1]])
    z1_z3_cos = mask * z1_z3_cos
    cos_sim = torch.cat([cos_sim, z1_z3_cos], 1)
    cos_sim = cos_sim + bonus(cos_sim, z1_z3_cos)

    z4 = torch.cat([z1[1:], z1[:1]], dim=0)
    lam = torch.Tensor([lambdas] * z4.size(0))
    z4 = (lam.unsqueeze(1) * z1 + (1 - lam).unsqueeze(1) * z4).detach()
    z4_z2_cos = sim(z4.unsqueeze(1), z2.unsqueeze(0))
    mask = torch.eye(z4_z2_cos.size(0))
    mask = 1 - torch.cat([mask[:, -1:], mask[:, :-1]], dim=1)
    z4_z2_cos = mask * z4_z2_cos
    cos_sim = torch.cat([cos_sim, z4_z2_cos], 1)
    cos_sim = cos_sim + bonus(cos_sim, z4_z2_cos)
    return nn.CrossEntropyLoss()(cos_sim, labels)


@pytest.fixture
def setup(tiny_bert_dir):
    from transformers import BertModel

    model = spread_cls_model(tiny_bert_dir)
    enc = model.tokenizer(random_sentences(8, seed=4), padding=True, return_tensors="pt")
    batch = {k: torch.stack([v, v], 1) for k, v in enc.items()}
    bert = BertModel.from_pretrained(str(tiny_bert_dir), attn_implementation="eager", add_pooling_layer=False).train()
    bert.load_state_dict(model.encoder.state_dict())
    mlp = nn.Sequential(nn.Linear(model.hidden_size, model.hidden_size), nn.Tanh())
    mlp[0].load_state_dict(model.mlp.dense.state_dict())
    return model, batch, bert, mlp


def official_forward(bert, mlp, batch, seed, **hp):
    ids = batch["input_ids"]
    bs, _, length = ids.shape
    torch.manual_seed(seed)
    out = bert(**{k: v.view(-1, length) for k, v in batch.items()})
    pooled = mlp(out.last_hidden_state[:, 0]).view(bs, 2, -1)
    return official_mixcse_loss(pooled[:, 0], pooled[:, 1], **{**HP, **hp}), pooled


@pytest.mark.parametrize("weight", [0.0, 0.7])
def test_mixcse_equals_official_forward(setup, weight):
    model, batch, bert, mlp = setup
    hp = {**HP, "hard_negative_weight": weight}
    torch.manual_seed(5)  # dropout 0.1 on: both sides draw the same masks
    z = model(**{k: v.reshape(16, -1) for k, v in batch.items()}).view(8, 2, -1)
    loss = build_objective("mixcse", hp).loss(z, batch, LossContext(model=model))
    loss.backward()
    ref, pooled = official_forward(bert, mlp, batch, seed=5, **hp)
    assert torch.allclose(z, pooled, atol=1e-6) and (z[:, 0] - z[:, 1]).abs().max() > 1e-2
    ref.backward()
    a, b = float(loss.detach()), float(ref.detach())
    assert 0.1 < b < 20, b  # a real loss over 3 x 8 logits
    assert abs(a - b) < 1e-6 * max(1.0, abs(b)), (a, b)  # float32: relative to a loss of ~6
    ours = {k: p.grad for k, p in model.named_parameters() if p.grad is not None}
    theirs = {**{f"encoder.{k}": p.grad for k, p in bert.named_parameters()},
              "mlp.dense.weight": mlp[0].weight.grad, "mlp.dense.bias": mlp[0].bias.grad}
    assert_same_gradients(ours, theirs)

    # the comparison tells a changed key hyperparameter apart (mixing ratio, temperature, hard-negative weight)
    for changed in ({"lambdas": 0.3}, {"temp": 0.1}, {"hard_negative_weight": weight + 0.5}):
        other, _ = official_forward(bert, mlp, batch, seed=5, **{**hp, **changed})
        assert abs(float(other.detach()) - b) > 1e-4, changed


def test_embedding_gradients_equal_official_and_differ_from_simcse(setup):
    """On fixed embeddings: the gradient with respect to both views equals the transcription's (whose mixes are
    detached), and the loss is not SimCSE's InfoNCE."""
    from simcse.training.losses import info_nce

    model, batch, _, _ = setup
    with torch.no_grad():
        z = model.eval()(**{k: v.reshape(16, -1) for k, v in batch.items()}).view(8, 2, -1)
    z = (z + 0.05 * torch.randn(z.shape, generator=torch.Generator().manual_seed(1))).requires_grad_(True)
    loss = build_objective("mixcse", HP).loss(z, batch, LossContext(model=model))
    (g,) = torch.autograd.grad(loss, z)
    z1, z2 = z.detach()[:, 0].clone().requires_grad_(True), z.detach()[:, 1].clone().requires_grad_(True)
    ref = official_mixcse_loss(z1, z2, **HP)
    g1, g2 = torch.autograd.grad(ref, (z1, z2))
    assert abs(float(ref.detach()) - float(loss.detach())) < 1e-6
    ref_g = torch.stack([g1, g2], 1)
    assert float((g - ref_g).norm() / ref_g.norm()) < 2e-5
    assert abs(float(loss.detach()) - float(info_nce(z[:, 0], z[:, 1]).detach())) > 1e-3


def test_bad_hyperparameters_are_refused():
    for bad in ({"temp": 0}, {"lambdas": 1.5}, {"hard_negative_weight": float("nan")}):
        with pytest.raises(ValueError, match=next(iter(bad))):
            build_objective("mixcse", bad)


# ---------------------------------------------------------------- several steps, the shared harness
def _official_mixcse(config, start, data, train_mode=True, **hp):
    def loss_fn(pooled, batch, cl):
        return official_mixcse_loss(pooled[:, 0], pooled[:, 1], **{**HP, **hp})
    return reference_steps(LossReference(OfficialBertForCL(config, start, train_mode=train_mode), loss_fn), data)


@pytest.mark.parametrize("weight", [0.0, 0.7])
def test_mixcse_trains_as_the_official_code_with_dropout(tiny_bert_dir, weight):
    """3 SGD steps in the trainer's order, dropout on (matched masks), float64: loss and every weight agree with
    the transcription after every step; a changed mixing ratio, temperature or hard-negative weight, or the
    encoder in eval mode, is told apart."""
    model, start = start_model(tiny_bert_dir)
    data = sentence_batches(model.tokenizer, n_batches=3, bs=8)
    ours = project_steps(model, build_objective("mixcse", {**HP, "hard_negative_weight": weight}), data)
    config = model.encoder.config
    assert_steps_match(ours, _official_mixcse(config, start, data, hard_negative_weight=weight))
    for changed in ({"lambdas": 0.3}, {"temp": 0.1}, {"hard_negative_weight": weight + 0.5}):
        assert_told_apart(ours, _official_mixcse(config, start, data, **{"hard_negative_weight": weight, **changed}))
    assert_told_apart(ours, _official_mixcse(config, start, data, train_mode=False, hard_negative_weight=weight))
