"""DiffCSE (simcse.training.objectives.diffcse) against an independent forward of the official loss
(voidism/DiffCSE ``diffcse/models.py`` ``cl_forward`` with its patched ``BertModel.forward(cls_input=...)``,
``train.py``'s collator ``mask_tokens`` and ``electra_head``), on fixed tiny weights and inputs, dropout off."""
from __future__ import annotations

import copy
import types

import pytest
import torch
from torch import nn

from conftest import (assert_same_gradients, make_tiny_model, pair_grads, perturb, reference_mask_tokens,
                      reference_flat_views, reference_projection, reversed_pair_batch)
from fidelity_harness import ReferenceBase
from simcse.training.objectives import LossContext, build_objective

LAMBDA, MASK, TEMP = 0.005, 0.30, 0.05
SEED, STEP = 3, 5


# ----------------------------------------------------------------------------------------- the official forward
def official_discriminator(disc, input_ids, attention_mask, token_type_ids, cls_input):
    """The patched BertModel.forward: embeddings, then position 0 replaced by cls_input, then the encoder with
    transformers 4.2's additive extended mask."""
    emb = disc.embeddings(input_ids=input_ids, token_type_ids=token_type_ids)
    emb = torch.cat([cls_input.unsqueeze(1), emb[:, 1:, :]], dim=1)
    ext = (1.0 - attention_mask[:, None, None, :].to(emb.dtype)) * -10000.0
    return disc.encoder(emb, attention_mask=ext).last_hidden_state


def official_loss(enc, mlp, gen, disc, head, tokenizer, batch, gen_seed, lam=LAMBDA, mask_ratio=MASK, temp=TEMP):
    """cl_forward with pooler cls, --batchnorm, --mlp_only_train, before_mlp off: (contrastive, electra) parts."""
    batch_size, num_sent, input_ids, attention_mask, token_type_ids = reference_flat_views(batch)
    mlm_input_ids, _ = reference_mask_tokens(input_ids, tokenizer, mask_ratio, torch.Generator().manual_seed(gen_seed))
    outputs = enc(input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids)
    pooler_output = outputs.last_hidden_state[:, 0]
    pooler_output = mlp(pooler_output).view(batch_size, num_sent, -1)
    with torch.no_grad():
        g_pred = gen(input_ids=mlm_input_ids, attention_mask=attention_mask)[0].argmax(-1)
    g_pred[:, 0] = tokenizer.cls_token_id
    replaced = (g_pred != input_ids) * attention_mask
    e_inputs = g_pred * attention_mask
    mlm_hidden = official_discriminator(disc, e_inputs, attention_mask, token_type_ids,
                                        pooler_output.view(-1, pooler_output.size(-1)))
    z1, z2 = pooler_output[:, 0], pooler_output[:, 1]
    cos_sim = nn.CosineSimilarity(dim=-1)(z1.unsqueeze(1), z2.unsqueeze(0)) / temp
    loss_fct = nn.CrossEntropyLoss()
    cl = loss_fct(cos_sim, torch.arange(cos_sim.size(0)))
    prediction_scores = head(mlm_hidden)
    electra = loss_fct(prediction_scores.view(-1, 2), replaced.view(-1, replaced.size(-1)).view(-1))
    return cl, lam * electra


# ----------------------------------------------------------------------------------------- fixtures
def _make_folders(root, dropout: float):
    """A tiny random encoder and a tiny random BertForMaskedLM generator on its vocabulary."""
    from transformers import BertConfig, BertForMaskedLM

    enc = make_tiny_model(root / "enc", "bert", seed=0, dropout=dropout)
    torch.manual_seed(1)
    BertForMaskedLM(BertConfig.from_pretrained(enc)).save_pretrained(root / "gen")
    return enc, root / "gen"


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    """Dropout off: the fidelity comparisons are of the math."""
    return _make_folders(tmp_path_factory.mktemp("diffcse"), 0.0)


def _build(folders, pooler="cls_before_pooler", **loss_args):
    from simcse.models.modeling import SimCSEModel

    enc, gen = folders
    torch.manual_seed(0)  # the new MLP and the RTD head start from the global generator
    model = SimCSEModel.from_pretrained(str(enc), pooler_type=pooler, mlp_only_train=True, new_mlp_init="random").train()
    model.encoder.config._attn_implementation = "eager"  # as the official 2021 code (the copies inherit it)
    obj = build_objective("diffcse", {"generator_name": str(gen), **loss_args})
    obj.setup(model, types.SimpleNamespace())
    perturb(model.encoder, 0, scale=0.2)
    perturb(obj.discriminator, 1)  # so that a forward through the wrong copy shows
    perturb(obj.electra_head, 2)
    if obj.mlp is not None:
        perturb(obj.mlp, 3, scale=0.1)
    return model.train(), obj.train()


def _ours(model, obj, batch, **ctx):
    b, v, length = batch["input_ids"].shape
    flat = {k: t.reshape(b * v, length) for k, t in batch.items()}
    z = model(**flat).view(b, v, -1)
    context = LossContext(model=model, seed=SEED, global_step=STEP, full_batch=batch, batch_size=b, **ctx)
    batch = obj.prepare_batch(batch, context)
    context.full_batch = batch
    parts = {**obj.loss(z, batch, context), **obj.chunk_loss(z, batch, context)}
    return parts, context


def _reference_modules(model, obj, folders):
    from transformers import BertForMaskedLM, BertModel

    enc_dir, gen_dir = folders
    kw = dict(attn_implementation="eager", add_pooling_layer=False)
    enc = BertModel.from_pretrained(str(enc_dir), **kw).train()
    enc.load_state_dict(model.encoder.state_dict())
    disc = BertModel.from_pretrained(str(enc_dir), **kw).train()
    disc.load_state_dict(obj.discriminator.state_dict())
    gen = BertForMaskedLM.from_pretrained(str(gen_dir), attn_implementation="eager").train()
    head = nn.Linear(model.hidden_size, 2)
    head.load_state_dict(obj.electra_head.state_dict())
    return enc, reference_projection(obj.mlp), gen, disc, head


# ----------------------------------------------------------------------------------------- fidelity
def test_the_projection_head_starts_as_the_official_one(folders):
    """The official ProjectionMLP is built in ``cl_init`` before ``init_weights``: its Linear weights are
    N(0, initializer_range = 0.02) (no biases), its BatchNorm weights 1 and 0 -- not torch's default Linear init
    (uniform, std 1/sqrt(3 * fan_in): 0.10 for the tiny model's 32 inputs)."""
    from simcse.models.modeling import SimCSEModel

    enc, gen = folders
    model = SimCSEModel.from_pretrained(str(enc), pooler_type="cls_before_pooler")
    obj = build_objective("diffcse", {"generator_name": str(gen)})
    obj.setup(model, types.SimpleNamespace())
    std = model.encoder.config.initializer_range
    assert std == 0.02
    for layer in (obj.mlp.net[0], obj.mlp.net[3]):
        assert layer.bias is None
        assert abs(float(layer.weight.detach().std()) - std) < 0.2 * std, float(layer.weight.detach().std())
        assert abs(float(layer.weight.mean())) < 0.2 * std
    default = nn.Linear(model.hidden_size, 2 * model.hidden_size, bias=False)
    assert abs(float(default.weight.detach().std()) - std) > 3 * std  # the control: torch's default start is told apart
    assert torch.equal(obj.mlp.net[1].weight, torch.ones_like(obj.mlp.net[1].weight))
    assert torch.equal(obj.mlp.net[1].bias, torch.zeros_like(obj.mlp.net[1].bias))


def test_loss_and_gradients_equal_the_official_forward(folders):
    model, obj = _build(folders)
    batch = reversed_pair_batch(model.tokenizer)
    assert (batch["attention_mask"] == 0).any()  # padding present: the official RTD mean counts it
    parts, context = _ours(model, obj, batch)
    sum(parts.values()).backward()

    enc, mlp, gen, disc, head = _reference_modules(model, obj, folders)
    seed = context.draw_seed(0)
    cl, electra = official_loss(enc, mlp, gen, disc, head, model.tokenizer, batch, seed)
    (cl + electra).backward()
    cl, electra = cl.detach(), electra.detach()

    assert 0.05 < float(cl) and abs(float(cl) - float(torch.log(torch.tensor(8.0)))) > 0.1  # not solved, not flat
    assert abs(float(parts["contrastive"]) - float(cl)) < 1e-6
    assert abs(float(parts["rtd"]) - float(electra)) < 1e-6
    assert float(electra) > 1e-4

    pairs = [(model.encoder, enc), (obj.discriminator, disc), (obj.electra_head, head)]
    pairs += [(obj.mlp.net[i], mlp[i]) for i in (0, 1, 3)]
    # true gradient 0 (besides the keys' bias): the BatchNorm head removes a shift shared by every row, and the
    # encoder's last LayerNorm bias shifts every [CLS] state alike (its other tokens are unused)
    last_bias = f"encoder.layer.{len(enc.encoder.layer) - 1}.output.LayerNorm.bias"
    checked = assert_same_gradients(*pair_grads(pairs[:1]), near_zero=(last_bias,))
    checked += assert_same_gradients(*pair_grads(pairs[1:]))
    assert checked > 40
    assert all(p.grad is None for p in obj.generator.parameters())  # frozen


@pytest.mark.parametrize("changed", [{"lam": 0.05}, {"mask_ratio": 0.15}, {"temp": 0.1}])
def test_a_changed_hyperparameter_fails_the_comparison(folders, changed):
    """The comparison above can tell the official hyperparameters apart: another lambda, masking ratio or
    temperature in the official forward gives a part that misses ours by far more than the 1e-6 tolerance."""
    model, obj = _build(folders)
    batch = reversed_pair_batch(model.tokenizer)
    with torch.no_grad():
        parts, context = _ours(model, obj, batch)
        ref = official_loss(*_reference_modules(model, obj, folders), model.tokenizer, batch, context.draw_seed(0), **changed)
    mine = (float(parts["contrastive"]), float(parts["rtd"]))
    assert max(abs(a - float(b)) for a, b in zip(mine, ref)) > 1e-4, changed


# ----------------------------------------------------------------------------------------- composition
def test_chunks_add_up_to_the_whole_batch(folders):
    """chunk_loss over chunks of the prepared batch = chunk_loss over the whole batch, value and gradients: the
    RTD term composes with gradient caching (model's cls MLP, batchnorm off)."""
    model, obj = _build(folders, pooler="cls", batchnorm=False)
    assert obj.supports_grad_cache
    batch = reversed_pair_batch(model.tokenizer)
    b, v, length = batch["input_ids"].shape
    ctx = LossContext(model=model, seed=SEED, global_step=STEP, full_batch=batch, batch_size=b)
    batch = obj.prepare_batch(batch, ctx)
    ctx.full_batch = batch

    def run(chunk):
        model.zero_grad()
        obj.zero_grad()
        total = 0.0
        for s in range(0, b, chunk):
            part = {k: t[s:s + chunk] for k, t in batch.items()}
            z = model(**{k: part[k].reshape(-1, length) for k in ("input_ids", "attention_mask", "token_type_ids")})
            term = obj.chunk_loss(z.view(-1, v, model.hidden_size), part, ctx)["rtd"]
            term.backward()
            total += float(term)
        grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
        grads |= {f"objective.{n}": p.grad.clone() for n, p in obj.named_parameters() if p.grad is not None}
        return total, grads

    whole, g_whole = run(b)
    chunked, g_chunked = run(3)
    assert abs(whole - chunked) < 1e-6 and whole > 0
    assert set(g_whole) == set(g_chunked) and any(n.startswith("objective.discriminator") for n in g_whole)
    for n, g in g_whole.items():
        if not n.endswith("attention.self.key.bias"):
            assert float((g - g_chunked[n]).norm() / g.norm()) < 2e-5, n


def test_edits_are_seeded_by_seed_step_rank_and_leave_the_global_stream(folders):
    model, obj = _build(folders, generator_dropout=True)
    obj.generator.config.hidden_dropout_prob = 0.5
    for m in obj.generator.modules():
        if isinstance(m, nn.Dropout):
            m.p = 0.5  # dropout on: the draws must still repeat
    batch = reversed_pair_batch(model.tokenizer)
    ids, mask = batch["input_ids"].reshape(16, -1), batch["attention_mask"].reshape(16, -1)
    before = torch.get_rng_state()
    a = obj.edit(ids, mask, seed=11)
    assert torch.equal(torch.get_rng_state(), before)  # the global generator is untouched
    b = obj.edit(ids, mask, seed=11)
    c = obj.edit(ids, mask, seed=12)
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
    assert not torch.equal(a[0], c[0])
    assert (a[0][:, 0] == model.tokenizer.cls_token_id).all()
    assert (a[1][mask == 0] == 0).all() and (a[0][mask == 0] == 0).all()
    seeds = {LossContext(model=model, seed=s, global_step=t, rank=r).draw_seed(0) for s, t, r in
             [(1, 0, 0), (1, 1, 0), (1, 0, 1), (2, 0, 0)]}
    assert len(seeds) == 4


def test_encoder_tied_generator(folders):
    """The stand-in generator for an encoder without an MLM head: scores tokens with the encoder's own input
    embeddings; frozen; the discriminator still starts as the encoder."""
    model, obj = _build(folders, generator_name="encoder-tied")
    batch = reversed_pair_batch(model.tokenizer)
    parts, _ = _ours(model, obj, batch)
    assert set(parts) == {"contrastive", "rtd"} and float(parts["rtd"]) > 0
    assert not any(p.requires_grad for p in obj.generator.parameters())
    ids = batch["input_ids"].reshape(16, -1)
    mask = batch["attention_mask"].reshape(16, -1)
    logits = obj.generator(ids, mask)
    assert logits.shape == (*ids.shape, model.tokenizer.vocab_size)


# ----------------------------------------------------------------------------------------- refusals
@pytest.mark.parametrize("loss_args,match", [
    ({"lambda_weight": -1}, "lambda_weight"),
    ({"masking_ratio": 1.0}, "masking_ratio"),
    ({"temp": 0}, "temp"),
    ({"before_mlp": True, "batchnorm": False}, "before_mlp"),
    ({"lambda": 0.1}, "unknown key"),
])
def test_bad_hyperparameters_are_refused(loss_args, match):
    with pytest.raises(ValueError, match=match):
        build_objective("diffcse", loss_args)


def test_setup_refusals(folders, tmp_path):
    from transformers import BertConfig, BertForMaskedLM

    with pytest.raises(ValueError, match="cls_before_pooler"):
        _build(folders, pooler="cls")
    assert not _build(folders)[1].supports_grad_cache  # the BatchNorm head: the trainer refuses gradient caching
    other = BertConfig.from_pretrained(folders[1])
    other.vocab_size += 3
    BertForMaskedLM(other).save_pretrained(tmp_path / "gen")
    with pytest.raises(ValueError, match="vocabulary"):
        _build((folders[0], tmp_path / "gen"))


# ----------------------------------------------------------------------------------------- through the trainer
def _train_argv(folders, root, out, *extra, loss_args=None, pooler="cls_before_pooler"):
    import json

    enc, gen = folders
    train = root / "train.txt"
    if not train.exists():
        from conftest import random_sentences

        train.write_text("\n".join(random_sentences(48, seed=7)) + "\n")
    args = {"generator_name": str(gen), "lambda_weight": 0.5, **(loss_args or {})}
    return ["--model_name_or_path", str(enc), "--pooler_type", pooler, "--train_file", str(train),
            "--output_dir", str(out), "--per_device_train_batch_size", "8", "--learning_rate", "1e-3",
            "--max_steps", "6", "--save_strategy", "steps", "--save_steps", "3", "--eval_strategy", "no",
            "--logging_steps", "1", "--report_to", "none", "--use_cpu", "true", "--dataloader_pin_memory", "false",
            "--eval_before_training", "false", "--test_after_training", "false", "--seed", "0",
            "--loss", "diffcse", "--loss_args", json.dumps(args), *extra]


@pytest.fixture(scope="module")
def dropout_folders(tmp_path_factory):
    """An encoder and a generator with dropout on (0.1): resume must replay every random stream."""
    return _make_folders(tmp_path_factory.mktemp("diffcse_dropout"), 0.1)


@pytest.mark.slow
def test_resume_mid_run_equals_the_uninterrupted_run_and_the_folder_is_the_encoder(dropout_folders, tmp_path):
    """6 steps with checkpoint-3, then a run resumed from checkpoint-3: same losses of steps 4-6 and bitwise the
    same weights (generator dropout, masks, discriminator and heads restored). The saved folder holds the
    encoder only (no generator, discriminator or heads) and loads in SimCSE with the [CLS] pooler."""
    import os

    from safetensors.torch import load_file

    from conftest import logged_losses, run_training
    from simcse import SimCSE

    full = run_training(_train_argv(dropout_folders, tmp_path, tmp_path / "full"))
    resumed = run_training(_train_argv(dropout_folders, tmp_path, tmp_path / "resumed", "--resume_from_checkpoint",
                                       str(tmp_path / "full" / "checkpoint-3")))
    losses = logged_losses(full)
    assert logged_losses(resumed)[-3:] == losses[-3:] and len(set(losses)) == 6
    parts = [h for h in full.state.log_history if "loss_rtd" in h]
    assert len(parts) == 6 and all(h["loss_rtd"] > 0 and h["loss_contrastive"] > 0 for h in parts)
    a, b = load_file(str(tmp_path / "full" / "model.safetensors")), load_file(str(tmp_path / "resumed" / "model.safetensors"))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    state = torch.load(tmp_path / "full" / "checkpoint-3" / "objective_state.pt", weights_only=True)
    assert any(k.startswith("discriminator.") for k in state) and any(k.startswith("mlp.") for k in state)
    assert not any("discriminator" in k or "generator" in k or "electra" in k for k in a)
    assert len(a) <= len(load_file(str(dropout_folders[0] / "model.safetensors")))  # the encoder's tensors, no more
    files = os.listdir(tmp_path / "full")
    assert "objective_state.pt" not in files and not any("mlp" in f for f in files)
    model = SimCSE(str(tmp_path / "full"))
    emb = model.encode(["a man is playing the guitar .", "the dog runs in the park ."])
    assert tuple(emb.shape) == (2, 32)


@pytest.mark.slow
def test_gradient_caching_equals_the_whole_batch_and_is_refused_with_the_batchnorm_head(folders, tmp_path):
    """batchnorm off (the model's cls MLP): --gradient_cache_chunk_size 3 trains to the weights of the whole
    batch (dropout off, so the comparison is of the math); with the BatchNorm head it is refused at setup."""
    from safetensors.torch import load_file

    from conftest import run_training, training_error

    args = {"batchnorm": False}
    run_training(_train_argv(folders, tmp_path, tmp_path / "whole", loss_args=args, pooler="cls"))
    run_training(_train_argv(folders, tmp_path, tmp_path / "gc", "--gradient_cache_chunk_size", "3", loss_args=args,
                             pooler="cls"))
    a, b = load_file(str(tmp_path / "whole" / "model.safetensors")), load_file(str(tmp_path / "gc" / "model.safetensors"))
    assert a.keys() == b.keys()
    for k in a:
        assert torch.allclose(a[k], b[k], atol=2e-5, rtol=1e-4), k
    msg = training_error(_train_argv(folders, tmp_path, tmp_path / "refused", "--gradient_cache_chunk_size", "3"))
    assert "--gradient_cache_chunk_size" in msg and "diffcse" in msg


# ----------------------------------------------------------------------------------------- two processes
def _halves(model, obj, batch, world=2):
    """Each rank's half of ``batch``, prepared with that rank's draws (rank is part of the seed)."""
    out = []
    for rank in range(world):
        half = {k: t[rank * 4:(rank + 1) * 4] for k, t in batch.items()}
        ctx = LossContext(model=model, seed=SEED, global_step=STEP, rank=rank, world=world)
        out.append(obj.prepare_batch(half, ctx))
    return out


def _rank_loss(model, obj, half, **ctx):
    b, v, length = half["input_ids"].shape
    z = model(**{k: half[k].reshape(b * v, length) for k in ("input_ids", "attention_mask", "token_type_ids")})
    context = LossContext(model=model, seed=SEED, global_step=STEP, full_batch=half, batch_size=b, **ctx)
    z = z.view(b, v, -1)
    return sum({**obj.loss(z, half, context), **obj.chunk_loss(z, half, context)}.values())


def _gather_worker(rank: int, port: int, enc: str, gen: str, out: str) -> None:
    import os

    import torch.distributed as dist

    from simcse.training.distributed import all_gather_with_grad

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=2)
    from pathlib import Path

    model, obj = _build((Path(enc), Path(gen)), pooler="cls", batchnorm=False)
    half = _halves(model, obj, reversed_pair_batch(model.tokenizer))[rank]
    loss = _rank_loss(model, obj, half, rank=rank, world=2, gather=all_gather_with_grad)
    loss.backward()
    grads = {}
    for n, p in [*model.named_parameters(), *(("objective." + n, p) for n, p in obj.named_parameters())]:
        if p.grad is not None:
            g = p.grad.clone()
            dist.all_reduce(g)
            grads[n] = g / 2  # DDP's average
    lt = loss.detach().clone()
    dist.all_reduce(lt)
    if rank == 0:
        torch.save({"loss": lt / 2, "grads": grads}, out)
    dist.barrier()
    dist.destroy_process_group()


@pytest.mark.slow
def test_two_processes_with_gathered_negatives_equal_one_process(folders, tmp_path):
    """Two gloo processes, each with half the batch and its own (rank-seeded) edits, keys gathered: the mean loss
    and the averaged gradients equal one process on the whole batch with the same edits (batchnorm off: the
    official BatchNorm head normalises per process, as the official multi-GPU code does)."""
    from conftest import free_port, run_processes

    out = tmp_path / "rank0.pt"
    run_processes(_gather_worker, (free_port(), str(folders[0]), str(folders[1]), str(out)), 2, timeout_s=240)
    got = torch.load(out, weights_only=True)

    model, obj = _build(folders, pooler="cls", batchnorm=False)
    halves = _halves(model, obj, reversed_pair_batch(model.tokenizer))
    whole = {k: torch.cat([h[k] for h in halves]) for k in halves[0]}
    loss = _rank_loss(model, obj, whole)
    loss.backward()
    assert abs(float(got["loss"]) - float(loss)) < 1e-5
    mine = {n: p.grad for n, p in [*model.named_parameters(), *(("objective." + n, p) for n, p in obj.named_parameters())]
            if p.grad is not None}
    assert set(mine) == set(got["grads"])
    for n, g in mine.items():
        if not n.endswith("attention.self.key.bias"):
            assert float((g - got["grads"][n]).norm() / g.norm()) < 1e-4, n


# ----------------------------------------------------------------------------------------- several steps, dropout on
class OfficialDiffCSE(ReferenceBase):
    """BertForCL (``--pooler_type cls --batchnorm --mlp_only_train``) and train.py, trained over several steps with
    dropout, built as the official code builds it: ``bert`` and the ``discriminator`` both from the pretrained
    checkpoint (train.py loads the checkpoint's BERT into the discriminator), the generator from its masked-LM
    checkpoint in training mode (a submodule of the trained model: dropout on), the ProjectionMLP (with its
    running statistics, never read) and ``electra_head`` the project's random start (the same start on both
    sides; their distribution is tested above). The draws are the objective's recorded ones: the collator's
    80/10/10 mask from a generator seeded with the objective's (seed, step) seed, the generator's dropout from
    the same seed (the official generator draws from the global stream between the encoder's and the
    discriminator's dropout; the project's from its own seeded stream, so resumes and gradient caching replay
    it). ``generator_train`` / ``discriminator_train`` False are negative controls."""

    def __init__(self, folders, obj, tokenizer, seed, lam=LAMBDA, mask_ratio=MASK, temp=TEMP,
                 generator_train=True, discriminator_train=True):
        from transformers import BertForMaskedLM, BertModel

        enc_dir, gen_dir = folders
        kw = dict(attn_implementation="eager", add_pooling_layer=False)
        self.bert = BertModel.from_pretrained(str(enc_dir), **kw).double().train()
        self.disc = BertModel.from_pretrained(str(enc_dir), **kw).double().train(discriminator_train)
        self.gen = BertForMaskedLM.from_pretrained(str(gen_dir), attn_implementation="eager").train(generator_train)
        self.mlp = reference_projection(obj.mlp).double()
        self.head = nn.Linear(self.bert.config.hidden_size, 2).double()
        self.head.load_state_dict(obj.electra_head.state_dict())
        self.tokenizer, self.seed, self.lam, self.mask_ratio, self.temp = tokenizer, seed, lam, mask_ratio, temp
        self.edits = []

    def parameters(self):
        return [*self.bert.parameters(), *self.mlp.parameters(), *self.disc.parameters(), *self.head.parameters()]

    def step_loss(self, step, batch):
        seed = LossContext(model=None, global_step=step, seed=self.seed).draw_seed(0)
        batch_size, num_sent, input_ids, attention_mask, token_type_ids = reference_flat_views(batch)
        mlm_input_ids, _ = reference_mask_tokens(input_ids, self.tokenizer, self.mask_ratio,
                                                 torch.Generator().manual_seed(seed))
        outputs = self.bert(input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids)
        pooler_output = self.mlp(outputs.last_hidden_state[:, 0]).view(batch_size, num_sent, -1)
        with torch.no_grad(), torch.random.fork_rng(devices=[]):
            torch.random.default_generator.manual_seed(seed)
            g_pred = self.gen(input_ids=mlm_input_ids, attention_mask=attention_mask)[0].argmax(-1)
        g_pred[:, 0] = self.tokenizer.cls_token_id
        replaced = (g_pred != input_ids) * attention_mask
        e_inputs = g_pred * attention_mask
        self.edits.append(e_inputs.view(batch_size, num_sent, -1))
        mlm_hidden = official_discriminator(self.disc, e_inputs, attention_mask, token_type_ids,
                                            pooler_output.view(-1, pooler_output.size(-1)))
        z1, z2 = pooler_output[:, 0], pooler_output[:, 1]
        cos_sim = nn.CosineSimilarity(dim=-1)(z1.unsqueeze(1), z2.unsqueeze(0)) / self.temp
        loss_fct = nn.CrossEntropyLoss()
        cl = loss_fct(cos_sim, torch.arange(cos_sim.size(0)))
        electra = loss_fct(self.head(mlm_hidden).view(-1, 2), replaced.view(-1))
        return cl + self.lam * electra

    def weights(self):
        return {f"encoder.{k}": p for k, p in self.bert.named_parameters()}

    def state(self):
        return {**{f"generator.{k}": p for k, p in self.gen.named_parameters()},
                **{f"discriminator.{k}": p for k, p in self.disc.named_parameters()},
                **{f"electra_head.{k}": p for k, p in self.head.named_parameters()},
                **{f"mlp.net.{k}": p for k, p in self.mlp.named_parameters()}}


def diffcse_state(obj) -> dict:
    """The state DiffCSE carries besides the encoder: the frozen generator, the trained discriminator, RTD head
    and projection head."""
    return {**{f"generator.{k}": p for k, p in obj.generator.named_parameters()},
            **{f"discriminator.{k}": p for k, p in obj.discriminator.named_parameters()},
            **{f"electra_head.{k}": p for k, p in obj.electra_head.named_parameters()},
            **{f"mlp.{k}": p for k, p in obj.mlp.named_parameters()}}


@pytest.fixture(scope="module")
def dropout_multistep(dropout_folders):
    """Our DiffCSE trained 3 steps in float64 with dropout 0.1 (encoder, discriminator, generator)."""
    from fidelity_harness import project_steps, sentence_batches
    from simcse.models.modeling import SimCSEModel

    enc, gen = dropout_folders
    model = SimCSEModel.from_pretrained(str(enc), pooler_type="cls_before_pooler").double().train()
    model.encoder.config._attn_implementation = "eager"
    obj = build_objective("diffcse", {"generator_name": str(gen), "temp": TEMP, "lambda_weight": LAMBDA,
                                      "masking_ratio": MASK})
    torch.manual_seed(0)
    obj.setup(model, types.SimpleNamespace(seed=SEED))
    start = {"mlp": copy.deepcopy(obj.mlp), "electra_head": copy.deepcopy(obj.electra_head)}
    data = sentence_batches(model.tokenizer, n_batches=3, bs=8)
    ours = project_steps(model, obj, data, seed=SEED, state=diffcse_state, set_up=False)
    return ours, types.SimpleNamespace(**start), model.tokenizer, data


def _official_diffcse(dropout_folders, start, tokenizer, data, **changes):
    from fidelity_harness import reference_steps

    ref = OfficialDiffCSE(dropout_folders, start, tokenizer, SEED, **changes)
    return reference_steps(ref, data), ref


def test_diffcse_trains_as_the_official_code_with_dropout(dropout_folders, dropout_multistep):
    """3 SGD steps in the trainer's order, dropout on everywhere the official code has it: the edits equal the
    official rule's on the recorded draws, and loss, encoder, discriminator, RTD head and projection head agree
    after every step."""
    from fidelity_harness import assert_steps_match

    ours, start, tokenizer, data = dropout_multistep
    theirs, ref = _official_diffcse(dropout_folders, start, tokenizer, data)
    for step, edits in zip(ours, ref.edits):
        assert torch.equal(step.batch["diffcse_input_ids"], edits)
    assert any((s.batch["diffcse_labels"] == 1).any() for s in ours)
    assert_steps_match(ours, theirs)


@pytest.mark.parametrize("change", [{"lam": 0.05}, {"mask_ratio": 0.15}, {"temp": 0.1}, {"generator_train": False},
                                    {"discriminator_train": False}],
                         ids=["lambda_weight", "masking_ratio", "temp", "generator_eval", "discriminator_eval"])
def test_diffcse_multistep_comparison_tells_changes_apart(dropout_folders, dropout_multistep, change):
    """Negative controls: a changed hyperparameter or train/eval mode does not match."""
    from fidelity_harness import TOLERANCES, mismatch

    ours, start, tokenizer, data = dropout_multistep
    found = mismatch(ours, _official_diffcse(dropout_folders, start, tokenizer, data, **change)[0])
    assert found["loss"] > 10 * TOLERANCES["loss"] and found["state"] > 10 * TOLERANCES["state"], (change, found)
