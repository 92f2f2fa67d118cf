"""simcse.training.losses: InfoNCE against a loop (Eq. 1, 4, 5, more negative sets), its numerics and its errors."""
import math

import pytest
import torch
import torch.nn.functional as F

from simcse.training.losses import info_nce


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
    got = info_nce(z1, z2, z3, temp=0.1, hard_negative_alpha=alpha).item()
    assert got == pytest.approx(naive_info_nce(z1, z2, z3, temp=0.1, alpha=alpha), rel=1e-5)


@pytest.mark.parametrize("alpha", [0.5, 1.0])
def test_more_negative_sets_match_naive_loop(alpha):
    # paper Table 7's neutral hypotheses: a second negative set of weight 1, alpha on the first set only
    g = torch.Generator().manual_seed(3)
    z1, z2, z3, z4, z5 = (torch.randn(5, 4, generator=g, dtype=torch.float64) for _ in range(5))
    got = info_nce(z1, z2, z3, z4, z5, temp=0.1, hard_negative_alpha=alpha).item()
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
    assert info_nce(z1, z2, z3, temp=0.05, hard_negative_alpha=math.exp(w)).item() == pytest.approx(ref.item(), rel=1e-4)


def test_temperature_scales_logits():
    # with 2 rows and cos(z1_0, z2_0)=1, cos(z1_0, z2_1)=0 the loss is log(1 + exp(-1/temp))
    z1 = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    for temp in (0.5, 1.0, 2.0):
        assert info_nce(z1, z1.clone(), temp=temp).item() == pytest.approx(math.log1p(math.exp(-1 / temp)), rel=1e-3)


@pytest.mark.parametrize("kwargs, match", [
    ({"temp": 0.0}, "temp"), ({"temp": -1.0}, "temp"), ({"temp": float("nan")}, "temp"),
    ({"hard_negative_alpha": -0.5}, "hard_negative_alpha"),
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


# ------------------------------------------------------------------------------------------ 6. numerics
def test_fp16_and_bf16_inputs_give_float32_finite_loss_and_grads():
    from simcse.training.losses import info_nce

    torch.manual_seed(0)
    for dtype in (torch.float16, torch.bfloat16):
        z1 = torch.randn(16, 32).to(dtype).requires_grad_(True)
        z2 = (z1.detach() + 0.01 * torch.randn(16, 32).to(dtype)).requires_grad_(True)
        z3 = torch.randn(16, 32).to(dtype)
        for temp in (0.05, 1e-4):  # 1/temp = 10,000 would overflow fp16 (max 65504) after a few products
            loss = info_nce(z1, z2, z3, temp=temp)
            assert loss.dtype == torch.float32 and torch.isfinite(loss), (dtype, temp)
            g1, g2 = torch.autograd.grad(loss, (z1, z2))
            assert torch.isfinite(g1).all() and torch.isfinite(g2).all()
        ref = info_nce(z1.detach().float(), z2.detach().float(), z3.float())
        assert info_nce(z1, z2, z3).item() == pytest.approx(ref.item(), abs=1e-6)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_logits_stay_float32_under_autocast(dtype):
    """Under autocast the matmul of the cosine logits would run in half precision (bf16 resolves a logit of
    20 only to steps of 0.125); it must equal the float32 computation."""
    from simcse.training.losses import cosine_logits, info_nce

    torch.manual_seed(0)
    a, b = torch.randn(8, 16), torch.randn(8, 16)
    want = cosine_logits(a, b, 0.05)
    with torch.autocast(device_type="cpu", dtype=dtype):
        got = cosine_logits(a, b, 0.05)
        loss = info_nce(a, b, temp=0.05)
    assert got.dtype == torch.float32
    torch.testing.assert_close(got, want, rtol=0, atol=1e-6)
    assert loss.item() == pytest.approx(info_nce(a, b, temp=0.05).item(), abs=1e-6)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_extreme_embeddings_keep_loss_and_grads_finite(dtype):
    from simcse.training.losses import info_nce

    big = torch.finfo(dtype).max / 2
    torch.manual_seed(0)
    cases = {
        "all equal": torch.ones(8, 16),
        "all zero": torch.zeros(8, 16),
        "huge norms": torch.randn(8, 16).sign() * big,
        "huge and tiny rows": torch.cat([torch.full((4, 16), big), torch.full((4, 16), 1e-30)]),
    }
    for name, z in cases.items():
        z = z.to(dtype).requires_grad_(True)
        for temp in (0.05, 1e-4):
            loss = info_nce(z, z.detach().clone(), z.detach().flip(0), temp=temp)
            (g,) = torch.autograd.grad(loss, z)
            assert torch.isfinite(loss), (name, dtype, temp)
            # The gradient with respect to a (near-)zero embedding is ~1/eps = 1e8 times the upstream one
            # (cosine is undefined at 0; nn.CosineSimilarity, used by the reference, behaves the same): finite
            # in float32/bf16, but it overflows float16 -- fp16 AMP's GradScaler then skips that step.
            if not (dtype == torch.float16 and name == "huge and tiny rows"):
                assert torch.isfinite(g).all(), (name, dtype, temp)
    # equal embeddings: every logit equal, so the loss is log(number of candidates)
    z = torch.ones(8, 16, dtype=dtype)
    assert info_nce(z, z).item() == pytest.approx(math.log(8), abs=1e-5)
    assert info_nce(z, z, z).item() == pytest.approx(math.log(16), abs=1e-5)


def test_mlm_loss_mean_chunk_sums_and_nothing_masked():
    from simcse.training.losses import mlm_loss

    g = torch.Generator().manual_seed(4)
    logits = torch.randn(4, 6, 11, generator=g, requires_grad=True)
    labels = torch.full((4, 6), -100)
    labels[0, 1], labels[1, 3], labels[3, 0], labels[3, 5] = 2, 7, 10, 0
    masked = labels != -100
    want = -torch.log_softmax(logits, -1)[masked].gather(1, labels[masked][:, None]).mean()
    assert mlm_loss(logits, labels).item() == pytest.approx(want.item(), rel=1e-6)
    halves = mlm_loss(logits[:2], labels[:2], n_masked=4) + mlm_loss(logits[2:], labels[2:], n_masked=4)
    assert halves.item() == pytest.approx(want.item(), rel=1e-6)  # chunks add up to the batch mean
    none = mlm_loss(logits, torch.full((4, 6), -100))
    assert none.item() == 0.0 and none.requires_grad
