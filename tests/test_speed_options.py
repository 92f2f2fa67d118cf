"""Speed options keep results equal (docs/performance.md): padding-free forward, attention kernel choice,
and the FLOP/token accounting of scripts/benchmark_train.py."""
from __future__ import annotations

import json
import logging

import pytest
import torch

import simcse.modeling as modeling
import simcse.unpadded as unpadded
from conftest import SENTENCES, load_script, logged_losses, run_training
from simcse.modeling import SimCSEModel

POOLERS = ["cls", "avg", "avg_first_last", "avg_top2"]


def _batch(model, sentences, **kw):
    return model.tokenizer(sentences, return_tensors="pt", padding=True, **kw)


def _pair(folder, pooler, **kw):
    """(padded model, padding-free model) with the same weights, in eval mode."""
    padded = SimCSEModel.from_pretrained(str(folder), pooler_type=pooler, **kw).eval()
    free = SimCSEModel.from_pretrained(str(folder), pooler_type=pooler, **kw).eval()
    free.load_state_dict(padded.state_dict())
    assert free.set_unpadded(True) is True
    return padded, free


@pytest.mark.parametrize("arch", ["bert", "roberta"])
@pytest.mark.parametrize("pooler", POOLERS)
def test_padding_free_forward_equals_padded(request, arch, pooler):
    padded, free = _pair(request.getfixturevalue(f"tiny_{arch}_dir"), pooler)
    batch = _batch(padded, SENTENCES)
    assert (batch["attention_mask"] == 0).any(), "the batch must contain padding for the test to mean anything"
    with torch.no_grad():
        torch.testing.assert_close(free(**batch), padded(**batch), rtol=1e-5, atol=1e-5)
    assert free.encoder.config._attn_implementation == modeling.UNPADDED_ATTENTION
    assert not padded.unpadded


def test_padding_free_left_padding_and_extra_padding(tiny_bert_dir):
    """Positions are the padded batch's (BERT counts from column 0 whatever the padding side)."""
    padded, free = _pair(tiny_bert_dir, "avg")
    padded.tokenizer.padding_side = "left"
    batch = padded.tokenizer(SENTENCES[:5], return_tensors="pt", padding="max_length", max_length=20)
    with torch.no_grad():
        torch.testing.assert_close(free(**batch), padded(**batch), rtol=1e-5, atol=1e-5)


def test_padding_free_gradients_equal_padded(tiny_bert_dir):
    """Without dropout (eval mode) the parameter gradients of a contrastive loss match."""
    from simcse.losses import info_nce

    padded, free = _pair(tiny_bert_dir, "cls")
    batch = _batch(padded, SENTENCES)
    grads = []
    for model in (padded, free):
        z = model(**batch)
        info_nce(z[:6], z[6:], temp=0.05).backward()
        grads.append({n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None})
    assert grads[0].keys() == grads[1].keys() and len(grads[0]) > 10
    for name in grads[0]:
        torch.testing.assert_close(grads[1][name], grads[0][name], rtol=1e-4, atol=1e-6, msg=name)


def test_padding_free_dropout_is_on_in_training_and_seeded(tiny_bert_dir):
    _, free = _pair(tiny_bert_dir, "avg")
    batch = _batch(free, SENTENCES)
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
    with caplog.at_level(logging.WARNING, logger="simcse.modeling"):
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
    again = SimCSEModel.from_pretrained(str(tmp_path / "m"))
    assert not again.unpadded
    batch = _batch(model, SENTENCES)
    with torch.no_grad():
        torch.testing.assert_close(again(**batch), model(**batch), rtol=1e-5, atol=1e-5)
    assert model.set_unpadded(False) is False
    assert model.encoder.config._attn_implementation == before


def test_padded_calls_still_work_with_the_kernel_registered(tiny_bert_dir):
    """A direct padded encoder call (as the MLM head makes) falls back to SDPA with the padding mask."""
    padded, free = _pair(tiny_bert_dir, "avg")
    batch = _batch(padded, SENTENCES)
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
    batch = _batch(eager, SENTENCES)
    with torch.no_grad():
        torch.testing.assert_close(sdpa(**batch), eager(**batch), rtol=1e-5, atol=1e-5)


def _train_losses(tmp_path, folder, train_txt, *extra):
    trainer = run_training([
            "--model_name_or_path", str(folder), "--train_file", str(train_txt), "--output_dir", str(tmp_path),
            "--per_device_train_batch_size", "16", "--learning_rate", "1e-3", "--max_steps", "6",
            "--eval_strategy", "no", "--save_strategy", "no", "--report_to", "none", "--logging_steps", "1",
            "--eval_before_training", "false", "--test_after_training", "false", "--seed", "0",
            "--use_cpu", "true", "--dataloader_pin_memory", "false", "--pooler_type", "avg", "--dropout", "0", *extra,
    ])
    return logged_losses(trainer), trainer


def test_training_with_and_without_padding_free_is_the_same(tmp_path, tiny_bert_dir, train_txt):
    """With dropout 0 (nothing random in the step) the two forwards train identically, up to float rounding."""
    free, t_free = _train_losses(tmp_path / "a", tiny_bert_dir, train_txt)
    padded, t_padded = _train_losses(tmp_path / "b", tiny_bert_dir, train_txt, "--padding_free", "false")
    assert t_free.model.unpadded and not t_padded.model.unpadded
    assert len(free) == len(padded) == 6
    for a, b in zip(free, padded):
        assert a == pytest.approx(b, rel=1e-3, abs=1e-5), (free, padded)
    assert free[-1] != free[0]  # it trained


def test_bad_attn_implementation_is_refused(tiny_bert_dir, train_txt):
    from simcse.arguments import ModelArguments

    with pytest.raises(ValueError, match="attn_implementation"):
        ModelArguments(model_name_or_path=str(tiny_bert_dir), attn_implementation="flash")


# ------------------------------------------------------------------------------ benchmark accounting
def _bench():
    return load_script("benchmark_train")


def test_benchmark_flop_count_and_token_counter():
    bench = _bench()
    shape = {"layers": 6, "hidden": 384, "linear_params": 6 * (4 * 384 * 384 + 2 * 384 * 1536)}
    # 6 FLOPs per linear weight per token, 12 * layers * hidden per squared length
    assert bench.model_flops(shape, tokens=10, sum_sq_lengths=0) == 6 * shape["linear_params"] * 10
    assert bench.model_flops(shape, tokens=0, sum_sq_lengths=4) == 12 * 6 * 384 * 4

    mask = torch.tensor([[[1, 1, 1, 0], [1, 1, 1, 0]], [[1, 1, 0, 0], [1, 1, 0, 0]]])  # (B=2, V=2, L=4)
    counter = bench._CountingCollator(lambda feats: {"attention_mask": mask}, lambda b: [b["attention_mask"]])
    counter([{}])
    assert counter.batches == [{"tokens": 10, "padded_tokens": 16, "sum_sq": 2 * 9 + 2 * 4, "padded_sum_sq": 4 * 16}]


def test_attention_core_math_path_equals_sdpa():
    """The CPU dropout path (plain matmul/softmax) computes SDPA's attention (dropout ~0 here)."""
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(3, 2, 5, 4, generator=gen) for _ in range(3))
    key_mask = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0], [1, 0, 0, 0, 0]], dtype=torch.bool)[:, None, None, :]
    ref = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=key_mask, scale=0.3)
    got = unpadded._attention_core(q, k, v, key_mask, dropout=1e-12, scaling=0.3)
    torch.testing.assert_close(got, ref, rtol=1e-5, atol=1e-6)
    # and it does drop: with p = 0.5 about half of the attention weights are zeroed
    torch.manual_seed(0)
    dropped = unpadded._attention_core(q, k, torch.eye(5).expand(3, 2, 5, 5), key_mask, dropout=0.5, scaling=0.3)
    kept = dropped[key_mask.expand_as(dropped)]  # attention weights of real keys
    assert 0.3 < (kept == 0).float().mean().item() < 0.7


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
    # neighbouring elements (the two halves of one 32-bit draw) are not correlated
    pairs = mask[: n // 2 * 2].view(-1, 2).float()
    corr = torch.corrcoef(pairs.T)[0, 1].item()
    assert abs(corr) < 0.01, corr


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
    padded, model = _pair(tiny_bert_dir, "avg")
    n = sum(type(m) is torch.nn.Dropout for m in model.modules())
    assert n > 0 and model.set_cpu_dropout(True) == n
    assert not any(type(m) is torch.nn.Dropout for m in model.modules())
    batch = _batch(model, SENTENCES)
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


def test_training_uses_cpu_dropout_by_default_and_can_turn_it_off(tmp_path, tiny_bert_dir, train_txt):
    _, on = _train_losses(tmp_path / "a", tiny_bert_dir, train_txt)
    _, off = _train_losses(tmp_path / "b", tiny_bert_dir, train_txt, "--cpu_dropout", "false")
    assert any(isinstance(m, modeling.CPUDropout) for m in on.model.modules())
    assert not any(isinstance(m, modeling.CPUDropout) for m in off.model.modules())


def test_gpu_benchmark_script_runs_on_cpu_as_a_smoke_test(capsys):
    """scripts/benchmark_gpu.py (for a lent GPU) builds its own random model, tokenizer and data; on CPU with
    the tiny shape it must run end to end and report a finite rate and MFU for every batch size."""
    mod = load_script("benchmark_gpu")
    out = mod.main(["--device", "cpu", "--shape", "tiny", "--batch-sizes", "4,8", "--warmup", "1", "--steps", "1",
                    "--threads", "1"])
    assert sorted(out["runs"]) == [4, 8]
    for r in out["runs"].values():
        assert r["sent_s"] > 0 and 0 < r["mfu"] < 1
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert last.startswith("gpu_train device=cpu precision=bf16 batch4_sent_s=") and "batch8_mfu=" in last
    sentences = mod.synthetic_sentences(50)
    assert len(set(sentences)) == 50 and all(10 <= len(s.split()) - 2 <= 40 for s in sentences)


def test_attention_buckets_cover_every_token_once_in_row_order():
    gen = torch.Generator().manual_seed(0)
    keep = torch.rand(11, 9, generator=gen) < 0.6  # holes, left/right padding and
    keep[3] = False                                 # an empty row
    keep[5] = True                                  # a full row
    total = int(keep.sum())
    buckets, restore = unpadded._attention_buckets(keep, max_buckets=4)
    assert 1 < len(buckets) <= 4
    lengths = keep.sum(1)
    packed = torch.arange(total, dtype=torch.float32)[:, None, None]  # (T, 1, 1): token i holds the value i
    outs, widths = [], []
    for gather, rows, width, key_mask, real in buckets:
        grid = packed.index_select(0, gather).view(rows, width)  # (R, W)
        assert key_mask.shape == (rows, 1, 1, width) and width == int(key_mask.sum(-1).max())
        for r in range(rows):
            n = int(key_mask[r].sum())
            if n == 0:
                continue  # the empty row: nothing to attend
            got = grid[r, :n]
            assert torch.equal(got, got[0] + torch.arange(n, dtype=torch.float32))  # one sentence, in order
        outs.append(packed.index_select(0, gather).index_select(0, real))
        widths.append(width)
    assert widths == sorted(widths, reverse=True) and widths[0] == int(lengths.max())
    torch.testing.assert_close(torch.cat(outs).index_select(0, restore), packed)
    assert sum(int(b[3].sum()) for b in buckets) == total


def test_padding_free_with_mixed_lengths_equals_padded(tiny_bert_dir):
    """More rows than buckets, very different lengths: bucketed attention gives the padded forward's output."""
    padded, free = _pair(tiny_bert_dir, "avg")
    sentences = [" ".join(["dog"] * n) for n in (1, 30, 2, 17, 5, 9, 3, 25, 1, 12)]
    batch = _batch(padded, sentences)
    with torch.no_grad():
        torch.testing.assert_close(free(**batch), padded(**batch), rtol=1e-5, atol=1e-5)
