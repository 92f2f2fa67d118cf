"""Gradient caching (simcse.training.gradcache + SimCSETrainer.training_step) gives the gradients of the uncached loss."""
from __future__ import annotations

import pytest
import torch

from conftest import logged_losses, make_tiny_model, random_sentences, run_training
from simcse.training.gradcache import RandContext, grad_cache_step, split_chunks
from simcse.models.modeling import SimCSEModel
from simcse.training.trainer import SimCSETrainer


@pytest.fixture(scope="module")
def tiny_dropout_dir(tmp_path_factory):
    return make_tiny_model(tmp_path_factory.mktemp("tiny_bert_dropout"), "bert", dropout=0.1)


@pytest.fixture(scope="module")
def tiny_nodropout_dir(tmp_path_factory):
    return make_tiny_model(tmp_path_factory.mktemp("tiny_bert_nodropout"), "bert", dropout=0.0)


def make_batch(tokenizer, batch: int, views: int, seed: int = 0) -> dict[str, torch.Tensor]:
    """(batch, views, L) int64 tensors from distinct random sentences."""
    sents = random_sentences(batch * views, seed=seed)
    enc = tokenizer(sents, padding=True, return_tensors="pt")
    return {k: v.view(batch, views, -1) for k, v in enc.items()}


def make_trainer(model, tmp_path, chunk=None, **kw):
    from transformers import TrainingArguments

    args = TrainingArguments(output_dir=str(tmp_path / "out"), use_cpu=True, report_to="none",
                             per_device_train_batch_size=8, dataloader_pin_memory=False)
    trainer = SimCSETrainer(model=model, args=args, gradient_cache_chunk_size=chunk, **kw)
    trainer.current_gradient_accumulation_steps = 1  # set by HF's loop; training_step reads it
    return trainer


def grads(model) -> dict[str, torch.Tensor]:
    return {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None}


def assert_grads_close(a, b, rtol=1e-4, atol=1e-6):
    assert a.keys() == b.keys() and len(a) > 10
    for n in a:
        torch.testing.assert_close(a[n], b[n], rtol=rtol, atol=atol, msg=lambda m: f"{n}: {m}")


def reference_chunked_grads(trainer, model, batch, chunk, seed):
    """Uncached: one autograd graph over all chunks (same per-chunk dropout draws as pass 1), one backward."""
    model.zero_grad(set_to_none=True)
    model.train()
    torch.manual_seed(seed)
    z = torch.cat([trainer._embed(model, c) for c in split_chunks(batch, chunk)])  # (B, V, H)
    loss = trainer.contrastive_loss(z)
    loss.backward()
    return loss.detach(), grads(model)


@pytest.mark.parametrize("views", [2, 3], ids=["unsup_2views", "triplets_3views"])
def test_cached_gradients_equal_uncached_with_dropout(tmp_path, tiny_dropout_dir, views, monkeypatch):
    model = SimCSEModel.from_pretrained(str(tiny_dropout_dir), pooler_type="cls")  # cls: the MLP is trained too
    assert model.encoder.config.hidden_dropout_prob == 0.1
    trainer = make_trainer(model, tmp_path, chunk=2)
    batch = make_batch(model.tokenizer, 8, views)
    seed = 123

    ref_loss, ref = reference_chunked_grads(trainer, model, batch, 2, seed)

    model.zero_grad(set_to_none=True)
    torch.manual_seed(seed)
    loss = trainer.training_step(model, batch)
    assert loss.dtype == torch.float32 and torch.isclose(loss, ref_loss, rtol=1e-5)
    assert_grads_close(grads(model), ref)

    # dropout is really on: another seed gives other gradients
    _, other = reference_chunked_grads(trainer, model, batch, 2, seed + 1)
    assert not torch.allclose(other["encoder.embeddings.word_embeddings.weight"], ref["encoder.embeddings.word_embeddings.weight"])

    # and the RNG replay is what makes them equal: without it the test fails
    monkeypatch.setattr(RandContext, "__enter__", lambda self: self)
    monkeypatch.setattr(RandContext, "__exit__", lambda self, *exc: None)
    model.zero_grad(set_to_none=True)
    torch.manual_seed(seed)
    trainer.training_step(model, batch)
    bad = grads(model)
    assert not all(torch.allclose(bad[n], ref[n], rtol=1e-4, atol=1e-6) for n in ref)


@pytest.mark.parametrize("views", [2, 3])
def test_cached_step_equals_hf_training_step_without_dropout(tmp_path, tiny_nodropout_dir, views):
    """Dropout off: the cached step (chunks of 3, uneven last chunk) equals HF's one-pass training_step."""
    model = SimCSEModel.from_pretrained(str(tiny_nodropout_dir), pooler_type="avg")
    trainer = make_trainer(model, tmp_path, chunk=3)
    batch = make_batch(model.tokenizer, 8, views, seed=1)
    for ga in (1, 2):
        trainer.current_gradient_accumulation_steps = ga
        model.zero_grad(set_to_none=True)
        trainer.gradient_cache_chunk_size = None
        ref_loss = trainer.training_step(model, batch)  # HF's Trainer.training_step -> compute_loss
        ref = grads(model)
        model.zero_grad(set_to_none=True)
        trainer.gradient_cache_chunk_size = 3
        loss = trainer.training_step(model, batch)
        assert torch.isclose(loss, ref_loss, rtol=1e-5), (loss, ref_loss)
        assert_grads_close(grads(model), ref)
    assert ref_loss.item() > 0


def test_cached_step_with_mlm_equals_uncached(tmp_path):
    from transformers import BertConfig, BertForMaskedLM

    from simcse.training.data import mask_tokens

    folder = make_tiny_model(tmp_path / "mlm", "bert", dropout=0.0)
    cfg = BertConfig.from_pretrained(folder)
    torch.manual_seed(0)
    BertForMaskedLM(cfg).save_pretrained(folder)
    model = SimCSEModel.from_pretrained(str(folder), pooler_type="avg")
    model.attach_mlm_head(str(folder))
    trainer = make_trainer(model, tmp_path, chunk=2, mlm_weight=0.1)
    batch = make_batch(model.tokenizer, 6, 2, seed=2)
    tok = model.tokenizer
    batch["mlm_input_ids"], batch["mlm_labels"] = mask_tokens(
        batch["input_ids"], batch["attention_mask"], mask_token_id=tok.mask_token_id, vocab_size=len(tok),
        special_ids=tok.all_special_ids, mlm_probability=0.3, generator=torch.Generator().manual_seed(0))
    assert (batch["mlm_labels"] != -100).sum() > 3
    model.zero_grad(set_to_none=True)
    trainer.gradient_cache_chunk_size = None
    ref_loss = trainer.training_step(model, batch)
    ref = grads(model)
    assert any("mlm_head" in n for n in ref)
    model.zero_grad(set_to_none=True)
    trainer.gradient_cache_chunk_size = 2
    loss = trainer.training_step(model, batch)
    assert torch.isclose(loss, ref_loss, rtol=1e-5), (loss, ref_loss)
    assert_grads_close(grads(model), ref)


def test_grad_cache_step_on_a_linear_encoder():
    """The pure function on a toy encoder with dropout: same grads as one graph over the chunks."""
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.Dropout(0.5), torch.nn.Linear(8, 4))
    x = torch.randn(10, 6)

    def loss_fn(z):
        return (z.square().sum(1).log1p() * torch.arange(1, 11)).mean()

    torch.manual_seed(7)
    z = torch.cat([net(c["x"]) for c in split_chunks({"x": x}, 4)])
    loss_fn(z).backward()
    ref = [p.grad.clone() for p in net.parameters()]
    net.zero_grad()
    torch.manual_seed(7)
    calls = []
    loss = grad_cache_step(split_chunks({"x": x}, 4), lambda c: net(c["x"]), loss_fn,
                           lambda s: (calls.append(1), s.backward()))
    assert len(calls) == 3
    for p, r in zip(net.parameters(), ref):
        torch.testing.assert_close(p.grad, r)
    assert loss.requires_grad is False
    # the global RNG stream is left where pass 1 left it
    torch.manual_seed(7)
    with torch.no_grad():
        for c in split_chunks({"x": x}, 4):
            net(c["x"])
    expected_next = torch.rand(1)
    torch.manual_seed(7)
    net.zero_grad()
    grad_cache_step(split_chunks({"x": x}, 4), lambda c: net(c["x"]), loss_fn, lambda s: s.backward())
    assert torch.equal(torch.rand(1), expected_next)


def test_split_chunks_errors():
    with pytest.raises(ValueError, match="chunk_size"):
        split_chunks({"a": torch.zeros(3)}, 0)
    with pytest.raises(ValueError, match="same first dimension"):
        split_chunks({"a": torch.zeros(3), "b": torch.zeros(4)}, 2)
    assert [c["a"].tolist() for c in split_chunks({"a": torch.arange(5)}, 2)] == [[0, 1], [2, 3], [4]]


def test_chunk_size_argument_checked():
    from simcse.training.arguments import ModelArguments

    with pytest.raises(ValueError, match="gradient_cache_chunk_size"):
        ModelArguments(model_name_or_path="x", gradient_cache_chunk_size=-1)
    assert ModelArguments(model_name_or_path="x", gradient_cache_chunk_size=0).gradient_cache_chunk_size is None
    assert ModelArguments(model_name_or_path="x", gradient_cache_chunk_size=4).gradient_cache_chunk_size == 4


@pytest.mark.slow
def test_training_with_gradient_cache_lowers_loss(tmp_path, tiny_bert_dir, train_txt):
    """End to end through scripts/train.py's main: --gradient_cache_chunk_size trains."""
    argv = ["--model_name_or_path", str(tiny_bert_dir), "--train_file", str(train_txt), "--output_dir", str(tmp_path / "o"),
            "--per_device_train_batch_size", "16", "--gradient_cache_chunk_size", "4", "--learning_rate", "1e-3",
            "--max_steps", "20", "--eval_strategy", "no", "--save_strategy", "no", "--report_to", "none",
            "--logging_steps", "1", "--eval_before_training", "false", "--test_after_training", "false",
            "--seed", "0", "--use_cpu", "true", "--dataloader_pin_memory", "false", "--pooler_type", "avg"]
    trainer = run_training(argv)
    assert trainer.gradient_cache_chunk_size == 4
    logs = logged_losses(trainer)
    assert len(logs) == 20
    assert sum(logs[-5:]) / 5 < 0.8 * sum(logs[:5]) / 5, logs
