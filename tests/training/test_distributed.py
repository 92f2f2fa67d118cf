"""Exact negatives across devices: 2 gloo processes on CPU give the loss and gradients of 1 process on the
global batch.

Each worker builds a SimCSETrainer in a real torch.distributed setting (TrainingArguments/accelerate initialise
the gloo process group from RANK/WORLD_SIZE as torchrun would set them), wraps the model in DDP with
``trainer.accelerator.prepare_model`` exactly as HF's training loop does, and runs ``trainer.training_step`` on
its half of the global batch: compute_loss -> all_gather_with_grad -> info_nce -> accelerator.backward -> DDP's
gradient averaging. Dropout is off so the comparison is exact up to float rounding.
"""
from __future__ import annotations

import os

import pytest
import torch

from conftest import free_port, gather_without_cross_process_gradient, make_tiny_model, random_sentences, run_processes

WORLD = 2
GLOBAL_BATCH = 8

# name -> (views, gradient_cache_chunk_size, do_mlm, gather variant, pooler). The avg pooler is used because a tiny
# random BERT's [CLS] vectors are nearly identical (loss ~ log B, gradients ~1e-4, relative float noise ~1e-3).
CONFIGS = {
    "pairs": (2, None, False, "ours", "avg"),
    "triplets": (3, None, False, "ours", "avg"),
    "triplets_gradcache": (3, 2, False, "ours", "avg"),
    "pairs_mlm": (2, None, True, "ours", "avg"),
    "pairs_mlm_gradcache": (2, 2, True, "ours", "avg"),
    # the reference's gather (no gradient to other ranks' keys): must NOT match -- proves the test can fail
    "triplets_reference_gather": (3, None, False, "reference", "avg"),
}



def _make_trainer(model, out_dir, chunk, mlm):
    from transformers import TrainingArguments

    from simcse.training.trainer import SimCSETrainer

    backend = {"ddp_backend": "gloo"} if "WORLD_SIZE" in os.environ else {}  # set by _worker only
    args = TrainingArguments(output_dir=out_dir, use_cpu=True, report_to="none", **backend,
                             per_device_train_batch_size=GLOBAL_BATCH, dataloader_pin_memory=False, seed=0)
    trainer = SimCSETrainer(model=model, args=args, temp=0.05, hard_negative_alpha=0.5, mlm_weight=0.1 if mlm else 0.0,
                            gradient_cache_chunk_size=chunk)
    trainer.current_gradient_accumulation_steps = 1  # set by HF's training loop
    return trainer


def _load_model(model_dir, mlm, pooler):
    from simcse.models.modeling import SimCSEModel

    torch.manual_seed(0)  # the folder holds BertForMaskedLM weights: BertModel's pooler (copied into the MLP) is new
    model = SimCSEModel.from_pretrained(model_dir, pooler_type=pooler)
    if mlm:
        model.attach_mlm_head(model_dir)
    return model


def _worker(rank: int, port: int, model_dir: str, data_path: str, out_dir: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), LOCAL_RANK=str(rank),
                      WORLD_SIZE=str(WORLD), LOCAL_WORLD_SIZE=str(WORLD))
    torch.set_num_threads(1)
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    import simcse.training.objective_hooks as trainer_mod  # where the trainer takes its gather from

    data = torch.load(data_path)
    results = {}
    for name, (views, chunk, mlm, gather, pooler) in CONFIGS.items():
        batch = {k: v[rank * GLOBAL_BATCH // WORLD : (rank + 1) * GLOBAL_BATCH // WORLD] for k, v in data[(views, mlm)].items()}
        model = _load_model(model_dir, mlm, pooler)
        trainer = _make_trainer(model, out_dir, chunk, mlm)
        assert dist.is_initialized() and dist.get_world_size() == WORLD and dist.get_backend() == "gloo"
        ddp = trainer.accelerator.prepare_model(model)
        assert isinstance(ddp, DistributedDataParallel)
        real_gather = trainer_mod.all_gather_with_grad
        if gather == "reference":
            trainer_mod.all_gather_with_grad = gather_without_cross_process_gradient
        try:
            loss = trainer.training_step(ddp, batch)
        finally:
            trainer_mod.all_gather_with_grad = real_gather
        grads = {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None}
        results[name] = {"loss": loss.detach(), "grads": grads}
    torch.save(results, os.path.join(out_dir, f"rank{rank}.pt"))
    dist.barrier()


def _global_batches(tokenizer):
    from simcse.training.data import mask_tokens

    data = {}
    for views in (2, 3):
        sents = random_sentences(GLOBAL_BATCH * views, seed=views)
        enc = tokenizer(sents, padding=True, return_tensors="pt")
        batch = {k: v.view(GLOBAL_BATCH, views, -1) for k, v in enc.items()}
        data[(views, False)] = batch
        if views == 2:
            mlm = dict(batch)
            mlm["mlm_input_ids"], mlm["mlm_labels"] = mask_tokens(
                batch["input_ids"], batch["attention_mask"], mask_token_id=tokenizer.mask_token_id,
                vocab_size=len(tokenizer), special_ids=tokenizer.all_special_ids, mlm_probability=0.25,
                generator=torch.Generator().manual_seed(0))
            # same number of masked tokens on each rank, so the mean of per-rank MLM means is the global mean
            per_rank = (mlm["mlm_labels"] != -100).view(WORLD, -1).sum(1)
            keep = int(per_rank.min())
            for r in range(WORLD):
                lab = mlm["mlm_labels"][r * GLOBAL_BATCH // WORLD : (r + 1) * GLOBAL_BATCH // WORLD]
                idx = (lab != -100).nonzero()
                for i in idx[keep:]:
                    lab[tuple(i)] = -100
            assert (mlm["mlm_labels"] != -100).view(WORLD, -1).sum(1).tolist() == [keep] * WORLD and keep > 0
            data[(views, True)] = mlm
    return data


@pytest.fixture(scope="module")
def ddp_results(tmp_path_factory):
    from transformers import BertConfig, BertForMaskedLM

    base = tmp_path_factory.mktemp("ddp")
    model_dir = make_tiny_model(base / "model", "bert", dropout=0.0)
    torch.manual_seed(0)
    BertForMaskedLM(BertConfig.from_pretrained(model_dir)).save_pretrained(model_dir)  # encoder + MLM head
    from transformers import AutoTokenizer

    data = _global_batches(AutoTokenizer.from_pretrained(model_dir))
    torch.save(data, base / "data.pt")
    out = base / "out"
    out.mkdir()
    run_processes(_worker, (free_port(), str(model_dir), str(base / "data.pt"), str(out)), WORLD, timeout_s=240)
    ranks = [torch.load(out / f"rank{r}.pt") for r in range(WORLD)]

    # single process, whole global batch, same weights
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        single = {}
        for name, (views, chunk, mlm, _, pooler) in CONFIGS.items():
            model = _load_model(str(model_dir), mlm, pooler)
            trainer = _make_trainer(model, str(base / "single"), None, mlm)
            loss = trainer.training_step(model, data[(views, mlm)])
            single[name] = {"loss": loss.detach(),
                            "grads": {k: p.grad.detach().clone() for k, p in model.named_parameters() if p.grad is not None}}
    finally:
        torch.set_num_threads(n)
    return ranks, single


def _atol(g):
    """Float32 summation-order noise scales with the gradient's magnitude."""
    return max(1e-7, 1e-5 * float(g.abs().max()))


def _close(a, b):
    return torch.allclose(a, b, rtol=1e-4, atol=_atol(b))


@pytest.mark.parametrize("name", [c for c in CONFIGS if CONFIGS[c][3] == "ours"])
@pytest.mark.slow
def test_two_processes_equal_one_process(ddp_results, name):
    ranks, single = ddp_results
    ref = single[name]
    # HF logs the mean over ranks of each rank's loss: that is the global mean loss
    mean_loss = torch.stack([r[name]["loss"] for r in ranks]).mean()
    assert torch.isclose(mean_loss, ref["loss"], rtol=1e-5), (mean_loss, ref["loss"])
    assert ref["grads"].keys() == ranks[0][name]["grads"].keys() and len(ref["grads"]) > 10
    if CONFIGS[name][2]:
        assert any("mlm_head" in k for k in ref["grads"])
    for k, g in ref["grads"].items():
        for r in range(WORLD):  # DDP leaves the same averaged gradient on every rank
            torch.testing.assert_close(ranks[r][name]["grads"][k], g, rtol=1e-4, atol=_atol(g), msg=lambda m: f"rank {r} {k}: {m}")


@pytest.mark.slow
def test_reference_gather_does_not_match(ddp_results):
    """Control: dropping the cross-rank gradient of the gathered keys (the original code) changes the gradients
    (the loss is the same), so the equality above is a real check of the gather's backward."""
    ranks, single = ddp_results
    name = "triplets_reference_gather"
    mean_loss = torch.stack([r[name]["loss"] for r in ranks]).mean()
    assert torch.isclose(mean_loss, single[name]["loss"], rtol=1e-5)
    g_ref = single[name]["grads"]["encoder.embeddings.word_embeddings.weight"]
    assert not _close(ranks[0][name]["grads"]["encoder.embeddings.word_embeddings.weight"], g_ref)
