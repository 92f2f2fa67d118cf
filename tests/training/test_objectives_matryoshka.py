"""Matryoshka, AdaptiveLayer and 2D Matryoshka wrappers against sentence-transformers' MatryoshkaLoss
(over MultipleNegativesRankingLoss) and Matryoshka2dLoss (the oracle) and an independent formula; changed
dimensions or weights must change the value."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from simcse.training.objectives import build_objective, register_objective
from simcse.training.objectives.base import LossContext, Objective

st_losses = pytest.importorskip("sentence_transformers.sentence_transformer.losses")

B, H = 6, 16
DIMS, WEIGHTS = [16, 8, 4], [1.0, 0.5, 0.25]


@register_objective(replace=True)
class _TestInBatch(Objective):
    """In-batch InfoNCE with scale 20 on cosines (sentence-transformers' MultipleNegativesRankingLoss)."""

    name = "_test_in_batch"
    input_columns = ("sent0", "sent1")

    def loss(self, embeddings, batch, context):
        u, v = embeddings[:, 0], embeddings[:, 1]
        logits = 20.0 * F.normalize(u, dim=-1) @ F.normalize(v, dim=-1).T
        return F.cross_entropy(logits, torch.arange(len(u)))


class _Table(nn.Module):
    """A module of fixed embeddings: column k's features give table[k] (the loss's gradient flows into it)."""

    def __init__(self, table):
        super().__init__()
        self.table = table

    def forward(self, features):
        return {**features, "sentence_embedding": self.table[features["column"]]}

    def get_sentence_embedding_dimension(self):
        return self.table[0].shape[-1]


def _fixed_model(table):
    """A real ``SentenceTransformer`` (public constructor, ``modules=[...]``) over :class:`_Table`: the losses call
    whatever private helpers of the model their version needs, so no stand-in model has to know them."""
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(modules=[_Table(table)], device="cpu")


def _emb(seed=0):
    return torch.randn(B, 2, H, generator=torch.Generator().manual_seed(seed))


def _total(value):
    return sum(value.values()) if isinstance(value, dict) else value


def _formula(emb, dims, weights):
    total = 0.0
    for d, w in zip(dims, weights):
        u = emb[:, 0, :d] / emb[:, 0, :d].norm(dim=-1, keepdim=True)
        v = emb[:, 1, :d] / emb[:, 1, :d].norm(dim=-1, keepdim=True)
        total = total + w * F.cross_entropy(20.0 * u @ v.T, torch.arange(B))
    return total


def _st_matryoshka(x, dims, weights):
    model = _fixed_model([x[:, 0], x[:, 1]])
    mnrl = st_losses.MultipleNegativesRankingLoss(model, scale=20.0)
    loss = st_losses.MatryoshkaLoss(model, mnrl, matryoshka_dims=dims, matryoshka_weights=weights)
    return loss([{"column": 0}, {"column": 1}], torch.zeros(B))


def test_matryoshka_equals_sentence_transformers_and_formula():
    emb = _emb()
    ours = build_objective("matryoshka", {"loss": "_test_in_batch", "matryoshka_dims": [4, 16, 8],
                                          "matryoshka_weights": [0.25, 1.0, 0.5]})
    assert ours.matryoshka_dims == DIMS and ours.matryoshka_weights == WEIGHTS  # sorted high to low, as ST
    x1, x2 = emb.clone().requires_grad_(True), emb.clone().requires_grad_(True)
    parts = ours.loss(x1, {}, LossContext(model=None))
    assert set(parts) == {"dim16", "dim8", "dim4"}
    mine, ref = _total(parts), _st_matryoshka(x2, DIMS, WEIGHTS)
    mine.backward(), ref.backward()
    assert abs(mine.item() - ref.item()) < 1e-6 and mine.item() == pytest.approx(_formula(emb, DIMS, WEIGHTS).item(), rel=1e-6)
    assert torch.allclose(x1.grad, x2.grad, rtol=2e-5, atol=1e-7)


@pytest.mark.parametrize("dims,weights", [([16, 8, 2], WEIGHTS), (DIMS, [1.0, 1.0, 0.25]), ([16, 8], [1.0, 0.5])])
def test_matryoshka_fails_on_changed_dims_or_weights(dims, weights):
    emb = _emb()
    ours = _total(build_objective("matryoshka", {"loss": "_test_in_batch", "matryoshka_dims": dims,
                                                 "matryoshka_weights": weights}).loss(emb, {}, None))
    assert abs(ours.item() - _st_matryoshka(emb, DIMS, WEIGHTS).item()) > 1e-4


def test_matryoshka_declarations_follow_the_inner_objective():
    m = build_objective("matryoshka", {"loss": "cosent", "matryoshka_dims": [8]})
    assert m.label_columns == ("score",) and m.input_columns == ("sent0", "sent1")
    with pytest.raises(ValueError, match="score"):
        m.check_columns(["sent0", "sent1"], "x.csv")  # the instance's declarations, not the class's
    emb, scores = _emb(), torch.tensor([0.0, 1.0, 2.0, 3.0, 4.0, 5.0])
    cosent = build_objective("cosent").loss(F.normalize(emb[..., :8], dim=-1), {"score": scores}, None)
    assert _total(m.loss(emb, {"score": scores}, None)).item() == pytest.approx(cosent.item(), rel=1e-6)


def test_matryoshka_bad_arguments_name_the_key(tiny_bert_dir):
    from simcse.models.modeling import SimCSEModel

    for args, key in (({"loss": "cosent"}, "matryoshka_dims"), ({"loss": "cosent", "matryoshka_dims": [0]}, "matryoshka_dims"),
                      ({"loss": "cosent", "matryoshka_dims": [8, 4], "matryoshka_weights": [1]}, "matryoshka_weights"),
                      ({"loss": "matryoshka", "matryoshka_dims": [8]}, "wrapper"),
                      ({"loss": "nope", "matryoshka_dims": [8]}, "unknown --loss")):
        with pytest.raises(ValueError, match=key):
            build_objective("matryoshka", args)
    model = SimCSEModel.from_pretrained(str(tiny_bert_dir), pooler_type="avg")
    with pytest.raises(ValueError, match="hidden size 32"):
        build_objective("matryoshka", {"loss": "cosent", "matryoshka_dims": [64, 8]}).setup(model, None)
    m = build_objective("matryoshka", {"loss": "cosent", "matryoshka_dims": [32, 8]})
    m.setup(model, None)
    assert model.matryoshka_dims == [32, 8]  # recorded for the saved folder


def test_matryoshka_n_dims_per_step_draws_from_the_seed():
    m = build_objective("matryoshka", {"loss": "_test_in_batch", "matryoshka_dims": DIMS, "n_dims_per_step": 1})
    keys = {tuple(m.loss(_emb(), {}, LossContext(model=None, global_step=s))) for s in range(12)}
    assert all(len(k) == 1 for k in keys) and len(keys) > 1
    again = [tuple(m.loss(_emb(), {}, LossContext(model=None, global_step=s))) for s in range(3)]
    assert again == [tuple(m.loss(_emb(), {}, LossContext(model=None, global_step=s))) for s in range(3)]


@pytest.mark.parametrize("kl_temperature,layer_weighting", [(0.3, "uniform"), (0.0, "log"), (1.0, "linear")])
def test_2d_matryoshka_equals_sentence_transformers_matryoshka2dloss(tiny_bert_dir, kl_temperature, layer_weighting):
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer import modules as models

    from simcse.models.modeling import SimCSEModel

    ours_model = SimCSEModel.from_pretrained(str(tiny_bert_dir), pooler_type="avg").eval()  # eval: no dropout
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in ours_model.parameters():
            p.add_(0.3 * torch.randn(p.shape, generator=g))
    st_model = SentenceTransformer(modules=[models.Transformer(str(tiny_bert_dir)), models.Pooling(32, "mean")],
                                   device="cpu").eval()
    st_model[0].auto_model.load_state_dict(ours_model.encoder.state_dict(), strict=False)
    a = ["a b c d", "e f g", "h i j k l", "m n", "o p q r", "s t u"]
    b = ["b c d", "e g", "h j k l", "m n o", "o q r", "s u v w"]
    args = {"loss": "_test_in_batch", "matryoshka_dims": [32, 16, 8], "matryoshka_weights": [1.0, 0.7, 0.4],
            "n_layers_per_step": -1, "n_dims_per_step": -1, "prior_layers_weight": 0.6, "last_layer_weight": 0.9,
            "kl_div_weight": 0.8, "kl_temperature": kl_temperature, "layer_weighting": layer_weighting}
    ours = build_objective("2d_matryoshka", args)
    ours.setup(ours_model, None)
    tok = ours_model.tokenizer(a + b, padding=True, return_tensors="pt")
    batch = {k: torch.stack([v[: len(a)], v[len(a):]], dim=1) for k, v in tok.items()}  # (B, 2, L)
    ctx = LossContext(model=ours_model)
    emb = ours_model(**{k: v.reshape(2 * len(a), -1) for k, v in batch.items()}).reshape(len(a), 2, -1)
    mine = _total(ours.loss(emb, batch, ctx)) + _total(ours.chunk_loss(emb, batch, ctx))

    mnrl = st_losses.MultipleNegativesRankingLoss(st_model, scale=20.0)
    st = st_losses.Matryoshka2dLoss(st_model, mnrl, [32, 16, 8], matryoshka_weights=[1.0, 0.7, 0.4],
                                    n_layers_per_step=-1, n_dims_per_step=-1, last_layer_weight=0.9,
                                    prior_layers_weight=0.6, kl_div_weight=0.8, kl_temperature=kl_temperature,
                                    layer_weighting=layer_weighting)
    features = [st_model.tokenize(a), st_model.tokenize(b)]
    ref = st(features, torch.zeros(len(a)))
    assert mine.item() == pytest.approx(ref.item(), rel=1e-5, abs=1e-6)
    changed = build_objective("2d_matryoshka", {**args, "prior_layers_weight": 0.3})
    other = _total(changed.loss(emb, batch, ctx)) + _total(changed.chunk_loss(emb, batch, ctx))
    assert abs(other.item() - ref.item()) > 1e-4


def test_layer_objectives_refuse_gradient_caching():
    m = build_objective("2d_matryoshka", {"loss": "_test_in_batch", "matryoshka_dims": [8]})
    assert m.supports_grad_cache is False and m.n_layers_per_step == 1 and m.inner.n_dims_per_step == 1
    assert build_objective("adaptive_layer", {"loss": "_test_in_batch"}).supports_grad_cache is False
    with pytest.raises(ValueError, match="layer_weighting"):
        build_objective("adaptive_layer", {"loss": "_test_in_batch", "layer_weighting": "cubic"})
