"""SimCSE++'s objective against an independent transcription of the official code (Jiahao004/SimCSE-plus-plus,
``simcse/models_re_vicreg.py`` cl_forward at commit 4c36662: ``sampling_strategy == "off_dropout"``,
``sw_sampling_strategy == "None"``, the BatchNorm1d(affine=False) DCL term). Dropout is on (0.1): both sides
draw the same masks from the same seed, so the off-dropout negatives really differ from the dropout views.
Loss within 1e-6, gradients within 2e-5 relative; and over several optimizer steps in the trainer's order (the
shared harness, ``fidelity_harness.py``), with negative controls."""
from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
from torch import nn

from conftest import assert_same_gradients, random_sentences, spread_cls_model
from fidelity_harness import LossReference, OfficialBertForCL, reference_steps
from simcse.training.objectives import LossContext, build_objective

HP = {"temp": 0.05, "pos_ratio": 0.9, "sw_weight": 0.1, "sw_temp": 5.0}


class OfficialSimCSEPP:
    """BertForCL (models_re_vicreg.py) cl_forward for the cls pooler, n_samples 2, off-dropout + DCL."""

    def __init__(self, bert, mlp, temp, pos_ratio, sw_weight, sw_temp):
        self.bert, self.mlp = bert, mlp
        self.bn = nn.BatchNorm1d(mlp[0].out_features, affine=False)
        self.temp, self.pos_ratio, self.sw_weight, self.sw_temp = temp, pos_ratio, sw_weight, sw_temp

    def sim(self, x, y):
        return nn.CosineSimilarity(dim=-1)(x, y) / self.temp

    def __call__(self, batch):
        ids0, mask0, tt0 = batch["input_ids"][:, 0], batch["attention_mask"][:, 0], batch["token_type_ids"][:, 0]
        bs, length = ids0.shape
        out = self.bert(input_ids=torch.stack([ids0, ids0], 1).view(-1, length),
                        attention_mask=torch.stack([mask0, mask0], 1).view(-1, length),
                        token_type_ids=torch.stack([tt0, tt0], 1).view(-1, length))
        pooler_output = self.mlp(out.last_hidden_state[:, 0].view(bs, 2, -1))
        z1, z2 = pooler_output[:, 0], pooler_output[:, 1]
        small = np.log(1e-45)
        # off-dropout: under transformers 4.2 every dropout of BERT is an nn.Dropout module and the official code
        # switches those to eval; under transformers 5 attention dropout follows the attention module's mode, so
        # the same "no dropout" is the encoder's eval mode (BERT has no other train/eval-dependent layer)
        self.bert.eval()
        out0 = self.bert(input_ids=ids0, attention_mask=mask0, token_type_ids=tt0)
        self.bert.train()
        z0 = self.mlp(out0.last_hidden_state[:, 0])
        pos_sim = self.pos_ratio * self.sim(z1, z2)
        pos_loss = -pos_sim
        cos_sim = self.sim(z0.unsqueeze(0), z0.unsqueeze(1))
        neg_mask = torch.eye(z1.size(0)) * small
        neg_loss = torch.logsumexp(torch.cat([cos_sim + neg_mask, pos_sim.unsqueeze(-1)], dim=-1), dim=-1)
        loss = (pos_loss + neg_loss).mean()
        if self.sw_weight > 0:
            b1, b2 = self.bn(z1), self.bn(z2)
            cov = b1.T @ b2 / bs / self.sw_temp
            nu = torch.diag(cov)
            loss = loss + self.sw_weight * (-nu + torch.logsumexp(cov, dim=-1)).mean()
        return loss, (z1, z2)


def make_batch(tokenizer, n=8, seed=2):
    enc = tokenizer(random_sentences(n, seed=seed), padding=True, return_tensors="pt")
    assert (enc["attention_mask"] == 0).any()
    return {k: torch.stack([v, v], 1) for k, v in enc.items()}  # (n, 2, L): the collator's two copies


def official(tiny_bert_dir, state, batch, seed, **hp):
    from transformers import BertModel

    bert = BertModel.from_pretrained(str(tiny_bert_dir), attn_implementation="eager", add_pooling_layer=False).train()
    bert.load_state_dict({k[len("encoder."):]: v for k, v in state.items() if k.startswith("encoder.")})
    hidden = bert.config.hidden_size
    mlp = nn.Sequential(nn.Linear(hidden, hidden), nn.Tanh())
    mlp[0].load_state_dict({k[len("mlp.dense."):]: v for k, v in state.items() if k.startswith("mlp.dense.")})
    torch.manual_seed(seed)
    loss, views = OfficialSimCSEPP(bert, mlp, **{**HP, **hp})(batch)
    return loss, views, bert, mlp


@pytest.fixture
def model(tiny_bert_dir):
    return spread_cls_model(tiny_bert_dir)


def test_simcse_pp_equals_official_forward(model, tiny_bert_dir):
    batch = make_batch(model.tokenizer)
    state = copy.deepcopy(model.state_dict())
    objective = build_objective("simcse_pp", HP)
    torch.manual_seed(11)
    z = model(**{k: v.reshape(-1, v.shape[-1]) for k, v in batch.items()}).view(8, 2, -1)
    parts = objective.loss(z, batch, LossContext(model=model))
    assert set(parts) == {"contrastive", "dcl"} and all(m.training for m in model.modules())
    loss = sum(parts.values())
    loss.backward()

    ref_loss, (r1, r2), bert, mlp = official(tiny_bert_dir, state, batch, seed=11)
    assert torch.allclose(z[:, 0], r1, atol=1e-6) and torch.allclose(z[:, 1], r2, atol=1e-6)  # same dropout masks
    assert (z[:, 0] - z[:, 1]).abs().max() > 1e-2  # dropout is really on
    ref_loss.backward()
    a, b = float(loss.detach()), float(ref_loss.detach())
    assert 0.3 < b < 20 and float(parts["dcl"].detach()) > 0.01, (a, b)
    assert abs(a - b) < 1e-6, (a, b)
    ours = {k: p.grad for k, p in model.named_parameters() if p.grad is not None}
    theirs = {**{f"encoder.{k}": p.grad for k, p in bert.named_parameters()},
              "mlp.dense.weight": mlp[0].weight.grad, "mlp.dense.bias": mlp[0].bias.grad}
    assert_same_gradients(ours, theirs)

    # the comparison tells a changed key hyperparameter apart
    for changed in ({"temp": 0.1}, {"pos_ratio": 1.0}, {"sw_weight": 0.2}, {"sw_temp": 20.0}):
        other, _, _, _ = official(tiny_bert_dir, state, batch, seed=11, **changed)
        assert abs(float(other.detach()) - b) > 1e-4, changed


def test_off_dropout_negatives_matter(model):
    """Off-dropout sampling is not SimCSE's in-batch loss: the two strategies give different values on the
    same embeddings, and without DCL the dict has one part."""
    batch = make_batch(model.tokenizer)
    torch.manual_seed(3)
    with torch.no_grad():
        z = model(**{k: v.reshape(-1, v.shape[-1]) for k, v in batch.items()}).view(8, 2, -1)
        ctx = LossContext(model=model)
        off = build_objective("simcse_pp", {**HP, "sw_weight": 0.0}).loss(z, batch, ctx)
        none = build_objective("simcse_pp", {**HP, "sw_weight": 0.0, "sampling_strategy": "None"}).loss(z, batch, ctx)
    assert set(off) == {"contrastive"} and abs(float(off["contrastive"]) - float(none["contrastive"])) > 1e-3


def test_bad_hyperparameters_are_refused():
    for bad in ({"temp": 0}, {"pos_ratio": -1}, {"sw_weight": -0.1}, {"sw_temp": 0}, {"sampling_strategy": "mean"}):
        with pytest.raises(ValueError, match=next(iter(bad))):
            build_objective("simcse_pp", bad)


# ---------------------------------------------------------------- several steps, the shared harness
def official_pp_loss(temp, pos_ratio, sw_weight, sw_temp, off_dropout_train: bool = False):
    """models_re_vicreg.py cl_forward after pooling (off_dropout, sw_sampling_strategy None) as a ``loss_fn`` of
    :class:`LossReference`: the off-dropout pass of view 0 through the same BertForCL in eval mode (with its
    graph); the DCL BatchNorm1d(affine=False) is a module of the model (``cls.bn``) kept over the steps (its
    running statistics move but are never read: the training forward normalises with the batch's)."""
    bn = None
    small = np.log(1e-45)

    def loss_fn(pooled, batch, cl):
        nonlocal bn
        if bn is None:
            bn = nn.BatchNorm1d(pooled.shape[-1], affine=False).to(pooled.dtype).train()
        z1, z2 = pooled[:, 0], pooled[:, 1]
        z0 = cl.encode(batch, view=0, train=off_dropout_train)
        sim = lambda x, y: nn.CosineSimilarity(dim=-1)(x, y) / temp  # noqa: E731
        pos_sim = pos_ratio * sim(z1, z2)
        cos_sim = sim(z0.unsqueeze(0), z0.unsqueeze(1))
        neg = torch.cat([cos_sim + torch.eye(z1.size(0), dtype=cos_sim.dtype) * small, pos_sim.unsqueeze(-1)], dim=-1)
        loss = (-pos_sim + torch.logsumexp(neg, dim=-1)).mean()
        if sw_weight > 0:
            cov = bn(z1).T @ bn(z2) / z1.size(0) / sw_temp
            loss = loss + sw_weight * (-torch.diag(cov) + torch.logsumexp(cov, dim=-1)).mean()
        return loss
    return loss_fn


DEFAULTS = {"temp": 0.05, "pos_ratio": 1.0, "sw_weight": 0.1, "sw_temp": 5.0}


def _official_pp(config, start, data, **changes):
    train = changes.pop("off_dropout_train", False)
    loss_fn = official_pp_loss(**{**DEFAULTS, **changes}, off_dropout_train=train)
    return reference_steps(LossReference(OfficialBertForCL(config, start), loss_fn), data)


def test_simcse_pp_trains_as_the_official_code_with_dropout(tiny_bert_dir):
    """3 SGD steps in the trainer's order with the config's hyperparameters, dropout on (matched masks), float64:
    loss and every weight agree with the transcription after every step; a changed temperature, positive ratio,
    DCL weight or DCL temperature, or the off-dropout pass with dropout, is told apart."""
    from fidelity_harness import assert_steps_match, assert_told_apart, project_steps, sentence_batches, start_model

    model, start = start_model(tiny_bert_dir)
    data = sentence_batches(model.tokenizer, n_batches=3, bs=8)
    ours = project_steps(model, build_objective("simcse_pp", DEFAULTS), data)
    config = model.encoder.config
    assert_steps_match(ours, _official_pp(config, start, data))
    for changed in ({"temp": 0.1}, {"pos_ratio": 0.9}, {"sw_weight": 0.0}, {"sw_temp": 20.0},
                    {"off_dropout_train": True}):
        assert_told_apart(ours, _official_pp(config, start, data, **changed))
