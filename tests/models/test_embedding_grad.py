"""simcse.models.embedding_grad: the word-embedding gradient built in one tensor kept between steps.

The reference is torch's own ``nn.Embedding`` (its dense backward), run beside it on a copy of the same weights.
"""
from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

from conftest import SENTENCES, tokenize
from simcse.models.embedding_grad import ReusedGradEmbedding
from simcse.models.modeling import SimCSEModel


def _pair(padding_idx=0, vocab=50, dim=8):
    torch.manual_seed(0)
    ref = nn.Embedding(vocab, dim, padding_idx=padding_idx)
    ours = copy.deepcopy(ref)
    ours.__class__ = ReusedGradEmbedding
    return ref, ours


@pytest.mark.parametrize("padding_idx", [0, None])
def test_steps_give_nn_embedding_gradients_in_one_reused_tensor(padding_idx):
    """AdamW steps with zero_grad(set_to_none=True), repeated ids and the padding id in every batch: every step's
    gradient equals nn.Embedding's (so do the weights after the steps), and from the second step on it is the same
    tensor (no fresh allocation): rows written by an earlier step are zero again where this step writes none."""
    ref, ours = _pair(padding_idx)
    opts = [torch.optim.AdamW(m.parameters(), lr=0.1) for m in (ref, ours)]
    pointers = []
    gen = torch.Generator().manual_seed(1)
    for step in range(5):
        ids = torch.randint(0, 50, (6, 7), generator=gen)
        ids[:, -2:] = 0  # padding id (and a repeated id)
        for m in (ref, ours):
            (m(ids) ** 2).sum().backward()
        torch.testing.assert_close(ours.weight.grad, ref.weight.grad, rtol=1e-6, atol=1e-6)
        pointers.append(ours.weight.grad.data_ptr())
        for o in opts:
            o.step()
            o.zero_grad(set_to_none=True)
    torch.testing.assert_close(ours.weight, ref.weight)
    assert len(set(pointers[1:])) == 1


@pytest.mark.parametrize("tied", [False, True])
def test_accumulation_a_tied_weight_and_a_kept_grad_are_as_nn_embedding(tied):
    """Two backward passes before a step accumulate; a decoder tied to the weight adds its dense gradient; a
    ``.grad`` someone keeps is never written after it was handed out (the next step takes a fresh tensor)."""
    ref, ours = _pair()
    gen = torch.Generator().manual_seed(2)
    held = None
    for step in range(3):
        for m in (ref, ours):
            m.weight.grad = None
        for micro in range(2):
            ids = torch.randint(1, 50, (4, 5), generator=gen)
            h = torch.randn(4, 5, 8, generator=gen)
            for m in (ref, ours):
                out = m(ids)
                # an MLM decoder tied to the embeddings, or one of its own
                logits = nn.functional.linear(out + h, m.weight if tied else m.weight.detach())
                logits.logsumexp(-1).sum().backward()
        torch.testing.assert_close(ours.weight.grad, ref.weight.grad, rtol=1e-5, atol=1e-6)
        if held is not None:
            torch.testing.assert_close(held, held_copy)  # the kept .grad of step 1 is untouched
        if step == 0:
            held, held_copy = ours.weight.grad, ours.weight.grad.clone()


def test_eval_no_grad_and_frozen_weights_take_the_plain_lookup():
    ref, ours = _pair()
    ids = torch.randint(0, 50, (3, 4))
    with torch.no_grad():
        torch.testing.assert_close(ours(ids), ref(ids))
    ours.weight.requires_grad_(False)
    out = ours(ids)
    assert out.grad_fn is None
    assert "_reused_grad" not in copy.deepcopy(ours).__dict__


def test_simcse_model_switch_trains_to_the_same_gradients(tiny_bert_dir):
    """A SimCSEModel (padding-free forward, two InfoNCE steps) with the switch on and off: same gradients of
    every parameter; the state dict and a save are unaffected; off swaps nn.Embedding back."""
    from simcse.training.losses import info_nce

    models = [SimCSEModel.from_pretrained(str(tiny_bert_dir), pooler_type="avg").eval() for _ in range(2)]
    models[1].load_state_dict(models[0].state_dict())
    for m in models:
        m.set_unpadded(True)
    assert models[1].set_reused_embedding_grad(True) is True
    assert isinstance(models[1].encoder.get_input_embeddings(), ReusedGradEmbedding)
    assert models[0].state_dict().keys() == models[1].state_dict().keys()
    batch = tokenize(models[0], SENTENCES)
    for step in range(2):
        grads = []
        for m in models:
            m.zero_grad(set_to_none=True)
            z = m(**batch)
            info_nce(z[:6], z[6:], temp=0.05).backward()
            grads.append({k: p.grad.clone() for k, p in m.named_parameters() if p.grad is not None})
        assert grads[0].keys() == grads[1].keys()
        for k in grads[0]:
            torch.testing.assert_close(grads[1][k], grads[0][k], rtol=1e-5, atol=1e-7, msg=k)
    assert models[1].set_reused_embedding_grad(False) is False
    assert type(models[1].encoder.get_input_embeddings()) is nn.Embedding


def _ddp_worker(rank: int, port: int, out: str) -> None:
    import os

    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=2)
    try:
        torch.set_num_threads(1)
        ref, ours = _pair()
        models = [DDP(ref), DDP(ours)]
        opts = [torch.optim.AdamW(m.parameters(), lr=0.1) for m in models]
        gen = torch.Generator().manual_seed(10 + rank)  # each process its own tokens
        worst = 0.0
        for step in range(4):
            ids = torch.randint(1, 50, (3, 4), generator=gen)
            for m in models:
                (m(ids) ** 2).sum().backward()
            worst = max(worst, float((ours.weight.grad - ref.weight.grad).abs().max()))
            for o in opts:
                o.step()
                o.zero_grad(set_to_none=True)
        torch.save(worst, os.path.join(out, f"rank{rank}.pt"))
        del models, opts  # DDP's reducers go before their process group does
        dist.barrier()
    finally:
        dist.destroy_process_group()


def test_two_ddp_processes_get_nn_embedding_gradients(tmp_path):
    """Under DDP (two gloo processes, different tokens each) the averaged gradient, every process's rows, is written
    back into .grad: each step's gradient still equals nn.Embedding's under DDP."""
    from conftest import free_port, run_processes

    run_processes(_ddp_worker, (free_port(), str(tmp_path)), 2, timeout_s=300)
    for rank in range(2):
        assert torch.load(tmp_path / f"rank{rank}.pt") < 1e-6
