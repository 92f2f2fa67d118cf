"""simcse.models.unpadded: the padding-free forward equals the padded one (outputs, gradients, dropout law), its
attention kernel and length buckets, and its fallback (docs/performance.md)."""
from __future__ import annotations

import json
import logging

import pytest
import torch

from conftest import SENTENCES, padded_and_unpadded, tokenize
from simcse.models.modeling import SimCSEModel
import simcse.models.modeling as modeling
import simcse.models.unpadded as unpadded


POOLERS = ["cls", "avg", "avg_first_last", "avg_first_last_embeddings", "avg_top2", "max", "weighted_avg", "avg_sqrt_len",
           "cls_before_pooler+avg"]


@pytest.mark.parametrize("arch", ["bert", "roberta"])
@pytest.mark.parametrize("pooler", POOLERS)
def test_padding_free_forward_equals_padded(request, arch, pooler):
    padded, free = padded_and_unpadded(request.getfixturevalue(f"tiny_{arch}_dir"), pooler)
    batch = tokenize(padded, SENTENCES)
    assert (batch["attention_mask"] == 0).any(), "the batch must contain padding for the test to mean anything"
    with torch.no_grad():
        torch.testing.assert_close(free(**batch), padded(**batch), rtol=1e-5, atol=1e-5)
    assert free.encoder.config._attn_implementation == modeling.UNPADDED_ATTENTION
    assert not padded.unpadded


def test_padding_free_left_padding_and_extra_padding(tiny_bert_dir):
    """Positions are the padded batch's (BERT counts from column 0 whatever the padding side)."""
    padded, free = padded_and_unpadded(tiny_bert_dir, "avg")
    padded.tokenizer.padding_side = "left"
    batch = padded.tokenizer(SENTENCES[:5], return_tensors="pt", padding="max_length", max_length=20)
    with torch.no_grad():
        torch.testing.assert_close(free(**batch), padded(**batch), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("pooler", ["cls", "max+weighted_avg"])
def test_padding_free_gradients_equal_padded(tiny_bert_dir, pooler):
    """Without dropout (eval mode) the parameter gradients of a contrastive loss match."""
    from simcse.training.losses import info_nce

    padded, free = padded_and_unpadded(tiny_bert_dir, pooler)
    batch = tokenize(padded, SENTENCES)
    grads = []
    for model in (padded, free):
        z = model(**batch)
        info_nce(z[:6], z[6:], temp=0.05).backward()
        grads.append({n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None})
    assert grads[0].keys() == grads[1].keys() and len(grads[0]) > 10
    for name in grads[0]:
        torch.testing.assert_close(grads[1][name], grads[0][name], rtol=1e-4, atol=1e-6, msg=name)


def test_padding_free_dropout_is_on_in_training_and_seeded(tiny_bert_dir):
    _, free = padded_and_unpadded(tiny_bert_dir, "avg")
    batch = tokenize(free, SENTENCES)
    free.train()
    torch.manual_seed(3)
    a = free(**batch)
    b = free(**batch)
    torch.manual_seed(3)
    c = free(**batch)
    assert not torch.allclose(a, b), "dropout must differ between two training forwards"
    torch.testing.assert_close(a, c)  # the same seed draws the same masks
    free.eval()
    with torch.no_grad():
        e1, e2 = free(**batch), free(**batch)
    torch.testing.assert_close(e1, e2)


def test_padding_free_falls_back_when_the_check_fails(tiny_bert_dir, monkeypatch, caplog):
    model = SimCSEModel.from_pretrained(str(tiny_bert_dir), pooler_type="avg")
    before = model.encoder.config._attn_implementation
    real = unpadded._padded_position_ids
    monkeypatch.setattr(unpadded, "_padded_position_ids", lambda enc, ids: real(enc, ids).flip(-1))  # wrong positions
    with caplog.at_level(logging.WARNING, logger="simcse.models.modeling"):
        assert model.set_unpadded(True) is False
    assert "padding-free forward is off" in caplog.text and "differ" in caplog.text
    assert not model.unpadded and model.encoder.config._attn_implementation == before


def test_padding_free_toggle_and_save(tiny_bert_dir, tmp_path):
    model = SimCSEModel.from_pretrained(str(tiny_bert_dir), pooler_type="avg").eval()
    before = model.encoder.config._attn_implementation
    assert model.set_unpadded(True) and model.set_unpadded(True)  # idempotent
    model.save_pretrained(tmp_path / "m")
    cfg = json.loads((tmp_path / "m" / "config.json").read_text())
    assert modeling.UNPADDED_ATTENTION not in json.dumps(cfg)  # a saved model never names our kernel
    again = SimCSEModel.from_pretrained(str(tmp_path / "m"))  # loads with the encoder's own attention
    assert again.encoder.config._attn_implementation != modeling.UNPADDED_ATTENTION
    batch = tokenize(model, SENTENCES)
    with torch.no_grad():
        torch.testing.assert_close(again(**batch), model(**batch), rtol=1e-5, atol=1e-5)
    assert model.set_unpadded(False) is False
    assert model.encoder.config._attn_implementation == before


def test_padded_calls_still_work_with_the_kernel_registered(tiny_bert_dir):
    """A direct padded encoder call (as the MLM head makes) falls back to SDPA with the padding mask."""
    padded, free = padded_and_unpadded(tiny_bert_dir, "avg")
    batch = tokenize(padded, SENTENCES)
    with torch.no_grad():
        ref = padded.encoder(**batch).last_hidden_state
        got = free.encoder(**batch).last_hidden_state
    keep = batch["attention_mask"].bool()
    torch.testing.assert_close(got[keep], ref[keep], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("pooler", ["avg", "cls"])
def test_eager_and_sdpa_attention_give_the_same_embeddings(tiny_bert_dir, pooler):
    eager = SimCSEModel.from_pretrained(str(tiny_bert_dir), pooler_type=pooler, attn_implementation="eager").eval()
    sdpa = SimCSEModel.from_pretrained(str(tiny_bert_dir), pooler_type=pooler, attn_implementation="sdpa").eval()
    sdpa.load_state_dict(eager.state_dict())
    assert eager.encoder.config._attn_implementation == "eager"
    assert sdpa.encoder.config._attn_implementation == "sdpa"
    batch = tokenize(eager, SENTENCES)
    with torch.no_grad():
        torch.testing.assert_close(sdpa(**batch), eager(**batch), rtol=1e-5, atol=1e-5)


def test_attention_core_math_path_equals_sdpa():
    """The CPU dropout path (plain matmul/softmax) computes SDPA's attention (dropout ~0 here)."""
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(3, 2, 5, 4, generator=gen) for _ in range(3))
    key_mask = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0], [1, 0, 0, 0, 0]], dtype=torch.bool)[:, None, None, :]
    ref = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=key_mask, scale=0.3)
    got = unpadded._attention_core(q, k, v, key_mask, dropout=1e-12, scaling=0.3)
    torch.testing.assert_close(got, ref, rtol=1e-5, atol=1e-6)
    for fast in (False, True):  # gradients too (the key mask is applied in place), torch's and our dropout masks
        leaves = [x.clone().requires_grad_() for x in (q, k, v)]
        grads = torch.autograd.grad(unpadded._attention_core(*leaves, key_mask, dropout=1e-12, scaling=0.3,
                                                             fast_dropout=fast).square().sum(), leaves)
        ref_leaves = [x.clone().requires_grad_() for x in (q, k, v)]
        ref_grads = torch.autograd.grad(torch.nn.functional.scaled_dot_product_attention(
            *ref_leaves, attn_mask=key_mask, scale=0.3).square().sum(), ref_leaves)
        for a, b in zip(grads, ref_grads):
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
    # and it does drop: with p = 0.5 about half of the attention weights are zeroed
    torch.manual_seed(0)
    dropped = unpadded._attention_core(q, k, torch.eye(5).expand(3, 2, 5, 5), key_mask, dropout=0.5, scaling=0.3)
    kept = dropped[key_mask.expand_as(dropped)]  # attention weights of real keys
    assert 0.3 < (kept == 0).float().mean().item() < 0.7


def test_attention_buckets_cover_every_token_once_in_row_order():
    gen = torch.Generator().manual_seed(0)
    keep = torch.rand(11, 9, generator=gen) < 0.6  # holes, left/right padding and
    keep[3] = False                                 # an empty row
    keep[5] = True                                  # a full row
    total = int(keep.sum())
    buckets, gather, slot_of, token_of_slot = unpadded._attention_buckets(keep, max_buckets=4)
    assert 1 < len(buckets) <= 4
    lengths = keep.sum(1)
    packed = torch.arange(total, dtype=torch.float32)[:, None, None]  # (T, 1, 1): token i holds the value i
    slots = packed.index_select(0, gather)  # (S, 1, 1)
    widths, start = [], 0
    for begin, rows, width, key_mask in buckets:
        assert begin == start  # buckets follow each other in the slots
        grid = slots[begin:begin + rows * width].view(rows, width)  # (R, W)
        assert key_mask.shape == (rows, 1, 1, width) and width == int(key_mask.sum(-1).max())
        for r in range(rows):
            n = int(key_mask[r].sum())
            if n == 0:
                continue  # the empty row: nothing to attend
            got = grid[r, :n]
            assert torch.equal(got, got[0] + torch.arange(n, dtype=torch.float32))  # one sentence, in order
        widths.append(width)
        start += rows * width
    assert start == gather.numel() == token_of_slot.numel()
    assert widths == sorted(widths, reverse=True) and widths[0] == int(lengths.max())
    torch.testing.assert_close(slots.index_select(0, slot_of), packed)  # each token's own slot holds it
    real = token_of_slot < total
    assert int(real.sum()) == total == sum(int(b[3].sum()) for b in buckets)
    assert torch.equal(token_of_slot[real], gather[real]) and bool((token_of_slot[~real] == total).all())


def test_layout_for_heads_fills_contiguous_bucket_blocks_of_token_head_rows():
    gen = torch.Generator().manual_seed(1)
    keep = torch.rand(9, 7, generator=gen) < 0.7
    keep[:, 0] = True
    layout = unpadded._Layout(keep, max_buckets=3)
    heads, total = 3, int(keep.sum())
    buckets, gather, slot_of, token_of_slot = layout.for_heads(heads)
    assert layout.for_heads(heads)[1] is gather  # computed once per head count
    rows = torch.arange(total * heads)  # row t*h + j holds its own number
    slots = rows.index_select(0, gather).split([r * heads * w for r, w, _ in buckets])
    base_buckets, base_gather = unpadded._attention_buckets(keep, max_buckets=3)[:2]
    for (r, w, key_mask), block, (start, _, _, _) in zip(buckets, slots, base_buckets):
        grid = block.view(r, heads, w)  # (R, h, W)
        tokens = base_gather[start:start + r * w].view(r, w)
        for j in range(heads):
            real = key_mask.view(r, w)
            assert torch.equal(grid[:, j][real], (tokens * heads + j)[real])  # token t, head j at [row, j, pos]
    assert torch.equal(rows.index_select(0, gather).index_select(0, slot_of), rows)  # every row's own slot
    real = token_of_slot < total * heads
    assert int(real.sum()) == total * heads and bool((token_of_slot[~real] == total * heads).all())


def test_row_gather_backward_gathers_the_real_slots_gradient():
    """_RowGather: forward = index_select; backward = index_select's own where padding slots get no gradient."""
    x = torch.randn(5, 3, dtype=torch.float64, requires_grad=True)
    index = torch.tensor([2, 0, 0, 4, 1, 3, 3])     # slots 2 and 6 are padding (repeat a neighbour)
    inverse = torch.tensor([1, 4, 0, 5, 3])         # each row's own slot
    grad = torch.randn(7, 3, dtype=torch.float64)
    grad[[2, 6]] = 0                                  # what attention gives padding slots
    y = unpadded._RowGather.apply(x, index, inverse, False)
    torch.testing.assert_close(y, x.index_select(0, index))
    (got,) = torch.autograd.grad(y, x, grad)
    (want,) = torch.autograd.grad(x.index_select(0, index), x, grad)
    torch.testing.assert_close(got, want)
    # the way back: slots -> tokens, padding slots (named 5 = the appended zero row) get no gradient
    s = torch.randn(7, 3, dtype=torch.float64, requires_grad=True)
    back = unpadded._RowGather.apply(s, inverse, torch.tensor([2, 0, 5, 4, 1, 3, 5]), True)
    g = torch.randn(5, 3, dtype=torch.float64)
    (got,) = torch.autograd.grad(back, s, g)
    (want,) = torch.autograd.grad(s.index_select(0, inverse), s, g)
    torch.testing.assert_close(got, want)


def test_padding_free_with_mixed_lengths_equals_padded(tiny_bert_dir):
    """More rows than buckets, very different lengths: bucketed attention gives the padded forward's output."""
    padded, free = padded_and_unpadded(tiny_bert_dir, "avg")
    sentences = [" ".join(["dog"] * n) for n in (1, 30, 2, 17, 5, 9, 3, 25, 1, 12)]
    batch = tokenize(padded, sentences)
    with torch.no_grad():
        torch.testing.assert_close(free(**batch), padded(**batch), rtol=1e-5, atol=1e-5)
