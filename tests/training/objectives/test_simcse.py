"""SimCSE's InfoNCE objective (``--loss infonce`` / ``simcse``) trained as the official code trains it
(princeton-nlp/SimCSE ``simcse/models.py`` ``cl_forward``: one forward of all views, [CLS] + MLPLayer in training,
``cos_sim`` over in-batch keys, the hard negatives' ``hard_negative_weight`` logit bonus), over several optimizer
steps with dropout on (the shared harness, ``fidelity_harness.py``), unsupervised and supervised, with negative
controls."""
from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from fidelity_harness import (LossReference, OfficialBertForCL, assert_steps_match, assert_told_apart,
                              project_steps, reference_steps, sentence_batches, start_model)
from simcse.training.objectives import build_objective


def official_simcse_loss(temp: float, hard_negative_weight: float = 0.0):
    """cl_forward's loss after pooling (``num_sent`` 2 or 3), as a ``loss_fn`` of :class:`LossReference`."""
    def loss_fn(pooled, batch, cl):
        num_sent = pooled.shape[1]
        z1, z2 = pooled[:, 0], pooled[:, 1]
        sim = lambda x, y: nn.CosineSimilarity(dim=-1)(x, y) / temp  # noqa: E731
        cos_sim = sim(z1.unsqueeze(1), z2.unsqueeze(0))
        if num_sent >= 3:
            z3 = pooled[:, 2]
            z1_z3_cos = sim(z1.unsqueeze(1), z3.unsqueeze(0))
            cos_sim = torch.cat([cos_sim, z1_z3_cos], 1)
        labels = torch.arange(cos_sim.size(0)).long()
        if num_sent == 3:
            z3_weight = hard_negative_weight
            weights = torch.tensor(
                [[0.0] * (cos_sim.size(-1) - z1_z3_cos.size(-1)) + [0.0] * i + [z3_weight]
                 + [0.0] * (z1_z3_cos.size(-1) - i - 1) for i in range(z1_z3_cos.size(-1))], dtype=cos_sim.dtype)
            cos_sim = cos_sim + weights
        return nn.CrossEntropyLoss()(cos_sim, labels)
    return loss_fn


CASES = {  # name: (views per row, our loss_args, the official arguments)
    "unsup": (1, {"temp": 0.05}, {"temp": 0.05}),
    "sup_hard_negative": (3, {"temp": 0.05, "hard_negative_alpha": 2.0}, {"temp": 0.05, "hard_negative_weight": math.log(2.0)}),
}


def _run(folder, case):
    views, ours_args, official = CASES[case]
    model, start = start_model(folder)
    data = sentence_batches(model.tokenizer, n_batches=3, bs=8, views=views)
    ours = project_steps(model, build_objective("infonce", ours_args), data)
    return ours, start, model.encoder.config, data, official


def _official(config, start, data, official, train_mode=True):
    cl = OfficialBertForCL(config, start, train_mode=train_mode)
    return reference_steps(LossReference(cl, official_simcse_loss(**official)), data)


@pytest.mark.parametrize("case", list(CASES))
def test_infonce_trains_as_the_official_code_with_dropout(tiny_bert_dir, case):
    """3 SGD steps, dropout on: loss and every weight agree with the transcription after every step; a changed
    temperature, hard-negative weight or the encoder in eval mode (no dropout) is told apart."""
    ours, start, config, data, official = _run(tiny_bert_dir, case)
    assert_steps_match(ours, _official(config, start, data, official))
    assert_told_apart(ours, _official(config, start, data, {**official, "temp": 0.1}))
    assert_told_apart(ours, _official(config, start, data, official, train_mode=False))
    if "hard_negative_weight" in official:
        assert_told_apart(ours, _official(config, start, data, {**official, "hard_negative_weight": 0.0}))
