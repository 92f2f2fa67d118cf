import math

import pytest
import torch
import torch.nn.functional as F

from simcse.losses import info_nce


def naive_info_nce(z1, z2, z3=None, temp=0.05, alpha=1.0, extra=()):
    """Eq. 1/4/5 of the paper written as a per-row loop over python floats (``extra``: more negative sets)."""
    B = z1.shape[0]
    total = 0.0
    for i in range(B):
        def sim(a, b):
            return float(torch.dot(a, b) / (a.norm() * b.norm()))
        pos = math.exp(sim(z1[i], z2[i]) / temp)
        denom = sum(math.exp(sim(z1[i], z2[j]) / temp) for j in range(B))
        if z3 is not None:
            denom += sum((alpha if j == i else 1.0) * math.exp(sim(z1[i], z3[j]) / temp) for j in range(B))
        for e in extra:
            denom += sum(math.exp(sim(z1[i], e[j]) / temp) for j in range(B))
        total += -math.log(pos / denom)
    return total / B


@pytest.mark.parametrize("temp", [0.05, 0.5, 1.0])
def test_info_nce_matches_naive_loop(temp):
    g = torch.Generator().manual_seed(0)
    z1, z2 = torch.randn(6, 8, generator=g, dtype=torch.float64), torch.randn(6, 8, generator=g, dtype=torch.float64)
    assert info_nce(z1, z2, temp=temp).item() == pytest.approx(naive_info_nce(z1, z2, temp=temp), rel=1e-5)


@pytest.mark.parametrize("alpha", [0.0, 0.5, 1.0, 2.0])
def test_hard_negatives_match_naive_loop(alpha):
    g = torch.Generator().manual_seed(1)
    z1, z2, z3 = (torch.randn(5, 4, generator=g, dtype=torch.float64) for _ in range(3))
    got = info_nce(z1, z2, z3, temp=0.1, hard_negative_weight=alpha).item()
    assert got == pytest.approx(naive_info_nce(z1, z2, z3, temp=0.1, alpha=alpha), rel=1e-5)


@pytest.mark.parametrize("alpha", [0.5, 1.0])
def test_more_negative_sets_match_naive_loop(alpha):
    # paper Table 7's neutral hypotheses: a second negative set of weight 1, alpha on the first set only
    g = torch.Generator().manual_seed(3)
    z1, z2, z3, z4, z5 = (torch.randn(5, 4, generator=g, dtype=torch.float64) for _ in range(5))
    got = info_nce(z1, z2, z3, z4, z5, temp=0.1, hard_negative_weight=alpha).item()
    assert got == pytest.approx(naive_info_nce(z1, z2, z3, temp=0.1, alpha=alpha, extra=(z4, z5)), rel=1e-5)
    assert info_nce(z1, z2, None).item() == pytest.approx(info_nce(z1, z2).item(), rel=1e-6)
    with pytest.raises(ValueError, match="negative set 0"):
        info_nce(z1, z2, None, z4)


def test_reference_log_weight_equivalence():
    # reference adds w to the own hard-negative logit; alpha = exp(w) here gives the same loss
    g = torch.Generator().manual_seed(2)
    z1, z2, z3 = (torch.randn(4, 6, generator=g) for _ in range(3))
    w = 0.7
    logits = torch.cat([F.cosine_similarity(z1[:, None], z2[None], dim=-1),
                        F.cosine_similarity(z1[:, None], z3[None], dim=-1)], 1) / 0.05
    logits[:, 4:] += torch.eye(4) * w
    ref = F.cross_entropy(logits, torch.arange(4))
    assert info_nce(z1, z2, z3, temp=0.05, hard_negative_weight=math.exp(w)).item() == pytest.approx(ref.item(), rel=1e-4)


def test_temperature_scales_logits():
    # with 2 rows and cos(z1_0, z2_0)=1, cos(z1_0, z2_1)=0 the loss is log(1 + exp(-1/temp))
    z1 = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    for temp in (0.5, 1.0, 2.0):
        assert info_nce(z1, z1.clone(), temp=temp).item() == pytest.approx(math.log1p(math.exp(-1 / temp)), rel=1e-3)


def test_logits_in_float32_under_bf16():
    z = torch.randn(8, 16).to(torch.bfloat16)
    loss = info_nce(z, z + 0.01 * torch.randn(8, 16).to(torch.bfloat16))
    assert loss.dtype == torch.float32 and torch.isfinite(loss)


def test_extreme_embeddings_stay_finite():
    z = torch.full((4, 8), 1e30)
    assert torch.isfinite(info_nce(z, z.clone()))
    assert torch.isfinite(info_nce(torch.zeros(4, 8), torch.zeros(4, 8)))


@pytest.mark.parametrize("kwargs, match", [
    ({"temp": 0.0}, "temp"), ({"temp": -1.0}, "temp"), ({"temp": float("nan")}, "temp"),
    ({"hard_negative_weight": -0.5}, "hard_negative_weight"),
])
def test_bad_hyperparameters(kwargs, match):
    with pytest.raises(ValueError, match=match):
        info_nce(torch.randn(3, 4), torch.randn(3, 4), torch.randn(3, 4), **kwargs)


def test_single_sentence_batch_is_an_error():
    with pytest.raises(ValueError, match="at least 2"):
        info_nce(torch.randn(1, 4), torch.randn(1, 4))


def test_shape_mismatch():
    with pytest.raises(ValueError, match="z1 and z2"):
        info_nce(torch.randn(3, 4), torch.randn(3, 5))
