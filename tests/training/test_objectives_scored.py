"""CoSENT and AnglE objectives against sentence-transformers' CoSENTLoss / AnglELoss (a real peer as the
oracle), an independent forward of each paper's formula, and a transcription of the official AnglE code
(github.com/SeanLee97/AnglE angle_emb/loss.py, format A): loss to 1e-6, gradients to 2e-5 relative, and a
changed key hyperparameter must change the value."""
from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from simcse.training.objectives import build_objective, get_objective

st_losses = pytest.importorskip("sentence_transformers.sentence_transformer.losses")

B, H = 7, 12


def _inputs(seed=0, h=H):
    g = torch.Generator().manual_seed(seed)
    emb = torch.randn(B, 2, h, generator=g, dtype=torch.float64).float()
    # STS-like scores with one tie, range 0..5
    scores = torch.tensor([0.4, 3.2, 4.8, 2.0, 3.2, 1.6, 5.0])
    return emb, scores


def _grad(fn, emb):
    x = emb.clone().requires_grad_(True)
    loss = fn(x)
    loss.backward()
    return loss.detach(), x.grad


def _close(ours, ref, emb):
    (l1, g1), (l2, g2) = _grad(ours, emb), _grad(ref, emb)
    assert abs(l1.item() - l2.item()) < 1e-6 * max(1.0, abs(l2.item())), (l1.item(), l2.item())
    assert torch.allclose(g1, g2, rtol=2e-5, atol=1e-7), (g1 - g2).abs().max()


def _total(value):
    return sum(value.values()) if isinstance(value, dict) else value


# ---------------------------------------------------------------------------- independent formulas
def _cosent_formula(pair_scores, labels, scale):
    """log(1 + sum over y_i > y_j of exp(scale*(s_j - s_i))), written as a double loop."""
    total = torch.ones((), dtype=torch.float64)
    for i in range(len(labels)):
        for j in range(len(labels)):
            if labels[i] > labels[j]:
                total = total + torch.exp(scale * (pair_scores[j].double() - pair_scores[i].double()))
    return torch.log(total).float()


def _angle_formula(u, v):
    """|Re + Im| summed of the complex quotient (a+bi)/(c+di), scaled by |w|/|z| (paper eq. for delta theta),
    with Python complex numbers per coordinate."""
    out = []
    for x, y in zip(u.tolist(), v.tolist()):
        h = len(x) // 2
        z = [complex(x[k], x[k + h]) for k in range(h)]
        w = [complex(y[k], y[k + h]) for k in range(h)]
        nz = math.sqrt(sum(abs(c) ** 2 for c in z))
        nw = math.sqrt(sum(abs(c) ** 2 for c in w))
        q = [zk * wk.conjugate() / (nz * nw) for zk, wk in zip(z, w)]
        out.append(abs(sum(c.real + c.imag for c in q)))
    return out


# ---------------------------------------------------------------------------- official AnglE, transcribed
def _official_cosine_loss(y_true, y_pred, tau):
    y_true = y_true[::2, 0]
    y_true = (y_true[:, None] < y_true[None, :]).float()
    y_pred = F.normalize(y_pred, p=2, dim=1)
    y_pred = torch.sum(y_pred[::2] * y_pred[1::2], dim=1) * tau
    y_pred = y_pred[:, None] - y_pred[None, :]
    y_pred = (y_pred - (1 - y_true) * 1e12).view(-1)
    return torch.logsumexp(torch.cat((torch.zeros(1), y_pred)), dim=0)


def _official_angle_loss(y_true, y_pred, tau):
    y_true = y_true[::2, 0]
    y_true = (y_true[:, None] < y_true[None, :]).float()
    re_, im_ = torch.chunk(y_pred, 2, dim=1)
    a, b, c, d = re_[::2], im_[::2], re_[1::2], im_[1::2]
    z = torch.sum(c ** 2 + d ** 2, dim=1, keepdim=True)
    re = (a * c + b * d) / z
    im = (b * c - a * d) / z
    dz = torch.sum(a ** 2 + b ** 2, dim=1, keepdim=True) ** 0.5
    dw = torch.sum(c ** 2 + d ** 2, dim=1, keepdim=True) ** 0.5
    re = re / (dz / dw)
    im = im / (dz / dw)
    y_pred = torch.abs(torch.sum(torch.cat((re, im), dim=1), dim=1)) * tau
    y_pred = y_pred[:, None] - y_pred[None, :]
    y_pred = (y_pred - (1 - y_true) * 1e12).view(-1)
    return torch.logsumexp(torch.cat((torch.zeros(1), y_pred)), dim=0)


def _official_target_matrix(y_true, n):
    idxs = torch.arange(0, n).int()
    y_true = y_true.int()
    idxs_1 = idxs[None, :] * y_true.T + (y_true.T == 0).int() * -2
    idxs_2 = (idxs + 1 - idxs % 2 * 2)[:, None] * y_true + (y_true == 0).int() * -1
    return (idxs_1 == idxs_2).float()


def _official_ibn_loss(y_true, y_pred, tau):
    target = _official_target_matrix(y_true, y_pred.shape[0])
    y_pred = F.normalize(y_pred, dim=1, p=2)
    sim = (y_pred @ y_pred.T - torch.eye(y_pred.shape[0]) * 1e12) * tau
    return (-(F.log_softmax(sim, dim=1) * target).sum(dim=1)).mean()


def _official_format_a(emb, scores, cosine_w=1.0, ibn_w=1.0, angle_w=0.02, tau=20.0):
    zig = emb.reshape(-1, emb.shape[-1])  # [a0, b0, a1, b1, ...]
    labels = scores.repeat_interleave(2)[:, None]
    return (cosine_w * _official_cosine_loss(labels, zig, tau) + ibn_w * _official_ibn_loss(labels, zig, tau)
            + angle_w * _official_angle_loss(labels, zig, tau))


# ---------------------------------------------------------------------------- CoSENT
def test_cosent_equals_sentence_transformers_and_formula():
    emb, scores = _inputs()
    ours = build_objective("cosent")
    st = st_losses.CoSENTLoss(model=None, scale=20.0)
    _close(lambda x: ours.loss(x, {"score": scores}, None),
           lambda x: st.compute_loss_from_embeddings([x[:, 0], x[:, 1]], scores), emb)
    cos = F.cosine_similarity(emb[:, 0], emb[:, 1], dim=-1)
    assert ours.loss(emb, {"score": scores}, None).item() == pytest.approx(_cosent_formula(cos, scores, 20.0).item(), rel=1e-6)
    # only the order of the scores matters: any score range
    assert ours.loss(emb, {"score": scores / 5}, None).item() == pytest.approx(ours.loss(emb, {"score": scores}, None).item(), rel=1e-7)


def test_cosent_scale_is_a_key_hyperparameter():
    emb, scores = _inputs()
    a = build_objective("cosent").loss(emb, {"score": scores}, None)
    b = build_objective("cosent", '{"scale": 10}').loss(emb, {"score": scores}, None)
    st = st_losses.CoSENTLoss(model=None, scale=20.0).compute_loss_from_embeddings([emb[:, 0], emb[:, 1]], scores)
    assert abs(a.item() - st.item()) < 1e-6 and abs(b.item() - st.item()) > 1e-3


def test_cosent_declarations_and_bad_input():
    cls = get_objective("cosent")
    assert cls.label_columns == ("score",) and cls.input_columns == ("sent0", "sent1")
    with pytest.raises(ValueError, match="score"):
        cls().check_columns(["sent0", "sent1"], "pairs.csv")
    with pytest.raises(ValueError, match="scale"):
        build_objective("cosent", '{"scale": 0}')
    emb, _ = _inputs()
    with pytest.raises(ValueError, match="'score'"):
        build_objective("cosent").loss(emb, {}, None)


# ---------------------------------------------------------------------------- AnglE
def test_angle_term_equals_sentence_transformers_anglelos_and_formula():
    emb, scores = _inputs()
    ours = build_objective("angle", {"cosine_w": 0, "ibn_w": 0, "angle_w": 1.0})
    st = st_losses.AnglELoss(model=None, scale=20.0)
    _close(lambda x: _total(ours.loss(x, {"score": scores}, None)),
           lambda x: st.compute_loss_from_embeddings([x[:, 0], x[:, 1]], scores), emb)
    from simcse.training.objectives.angle import angle_similarity

    ang = angle_similarity(emb[:, 0], emb[:, 1])
    assert torch.allclose(ang, torch.tensor(_angle_formula(emb[:, 0], emb[:, 1])), atol=1e-6)
    formula = _cosent_formula(torch.tensor(_angle_formula(emb[:, 0], emb[:, 1])), scores, 20.0)
    assert _total(ours.loss(emb, {"score": scores}, None)).item() == pytest.approx(formula.item(), rel=1e-6)


def test_angle_equals_official_code_with_its_weights():
    emb, scores = _inputs()
    labels = scores.repeat_interleave(2)[:, None]
    n = 2 * B
    partner = torch.zeros(n, n)
    for k in range(n):
        if int(labels[k, 0]) != 0:
            partner[k, k ^ 1] = 1
    # these scores hit no accidental match of the official target matrix (its j*label == partner*label test)
    assert torch.equal(_official_target_matrix(labels, n), partner)
    ours = build_objective("angle")
    assert ours.get_config_dict()["angle_w"] == 0.02 and ours.get_config_dict()["ibn_tau"] == 20.0
    _close(lambda x: _total(ours.loss(x, {"score": scores}, None)), lambda x: _official_format_a(x, scores), emb)
    parts = ours.loss(emb, {"score": scores}, None)
    assert set(parts) == {"cosine", "ibn", "angle"}


@pytest.mark.parametrize("changed", [{"angle_w": 0.05}, {"ibn_w": 0.5}, {"cosine_tau": 10.0}, {"ibn_tau": 10.0},
                                     {"angle_tau": 1.0}, {"cosine_w": 0.0}])
def test_angle_fails_on_a_changed_hyperparameter(changed):
    emb, scores = _inputs()
    official = _official_format_a(emb, scores).item()
    ours = _total(build_objective("angle", changed).loss(emb, {"score": scores}, None)).item()
    assert abs(ours - official) > 1e-4


def test_angle_odd_hidden_size_pads_like_sentence_transformers():
    emb, scores = _inputs(h=11)
    ours = build_objective("angle", {"cosine_w": 0, "ibn_w": 0, "angle_w": 1.0})
    st = st_losses.AnglELoss(model=None).compute_loss_from_embeddings([emb[:, 0], emb[:, 1]], scores)
    assert _total(ours.loss(emb, {"score": scores}, None)).item() == pytest.approx(st.item(), rel=1e-6)


def test_angle_bad_arguments_name_the_key():
    for args, key in (({"angle_w": -1}, "angle_w"), ({"ibn_tau": 0}, "ibn_tau"),
                      ({"angle_pooling_strategy": "max"}, "angle_pooling_strategy"),
                      ({"cosine_w": 0, "ibn_w": 0, "angle_w": 0}, "all 0"), ({"cosine_weight": 1}, "unknown")):
        with pytest.raises(ValueError, match=key):
            build_objective("angle", args)
