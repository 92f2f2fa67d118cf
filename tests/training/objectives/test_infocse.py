"""InfoCSE (simcse.training.objectives.infocse) against an independent forward of the official loss
(caskcsg/sentemb ``InfoCSE/infocse/models_cls_mlm.py`` ``cl_forward`` with ``skip_from`` and ``c_head``,
``train_cls_mlm.py``'s loading and collator), on fixed tiny weights and inputs, dropout off."""
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

WEIGHT, PROB, TEMP, SKIP = 0.1, 0.4, 0.05, 1  # the fidelity check's weight is large enough for the MLM path's
SEED, STEP = 3, 5                              # gradients to stand out of float noise (official bert-base: 1e-5)


# ----------------------------------------------------------------------------------------- the official forward
def official_loss(enc, mlm, c_head, lm_head, mlp, tokenizer, batch, seed, w=WEIGHT, p=PROB, temp=TEMP):
    """cl_forward with --do_mlm --skip_from --n_head_layers --batchnorm --mlm_eval: (contrastive, mlm) parts.
    ``mlm`` is ``BertForMaskedLM`` with ``num_hidden_layers = skip_from`` loaded from the checkpoint."""
    batch_size, num_sent, input_ids, attention_mask, token_type_ids = reference_flat_views(batch)
    mlm_input_ids, mlm_labels = reference_mask_tokens(input_ids, tokenizer, p, torch.Generator().manual_seed(seed))
    outputs = enc(input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids)
    mlm.eval()
    with torch.no_grad():
        mlm_outputs = mlm(mlm_input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids,
                          output_hidden_states=True, return_dict=True)
    cls_hiddens = outputs.last_hidden_state[:, :1]
    skip_hiddens = mlm_outputs.hidden_states[-1][:, 1:].detach()
    hiddens = torch.cat([cls_hiddens, skip_hiddens], dim=1)
    ext = (1.0 - attention_mask[:, None, None, :].to(hiddens.dtype)) * -10000.0  # get_extended_attention_mask (4.2)
    for layer in c_head:
        out = layer(hiddens, ext)
        hiddens = out[0] if isinstance(out, tuple) else out
    mlm_pred_scores = lm_head(hiddens)
    pooler_output = outputs.last_hidden_state[:, 0]
    pooler_output = mlp(pooler_output).view(batch_size, num_sent, -1)
    z1, z2 = pooler_output[:, 0], pooler_output[:, 1]
    cos_sim = nn.CosineSimilarity(dim=-1)(z1.unsqueeze(1), z2.unsqueeze(0)) / temp
    loss_fct = nn.CrossEntropyLoss()
    cl = loss_fct(cos_sim, torch.arange(cos_sim.size(0)))
    mlm_loss = loss_fct(mlm_pred_scores.view(-1, mlm_pred_scores.size(-1)), mlm_labels.view(-1))
    return cl, w * mlm_loss


# ----------------------------------------------------------------------------------------- fixtures
@pytest.fixture(scope="module")
def mlm_folder(tmp_path_factory):
    """A tiny random BERT checkpoint with its masked-LM head (as bert-base-uncased / Luyu/condenser), dropout off."""
    from transformers import BertConfig, BertForMaskedLM

    folder = make_tiny_model(tmp_path_factory.mktemp("infocse"), "bert", seed=0, dropout=0.0)
    torch.manual_seed(1)
    BertForMaskedLM(BertConfig.from_pretrained(folder)).save_pretrained(folder)
    return folder


def _build(folder, **loss_args):
    from simcse.models.modeling import SimCSEModel

    torch.manual_seed(0)
    model = SimCSEModel.from_pretrained(str(folder), pooler_type="cls_before_pooler")
    model.encoder.config._attn_implementation = "eager"  # as the official 2021 code (the copies inherit it)
    obj = build_objective("infocse", {"mlm_weight": WEIGHT, "mlm_probability": PROB, "skip_from": SKIP, **loss_args})
    obj.setup(model, types.SimpleNamespace())
    return model.train(), obj.train()


def _perturbed(folder, **loss_args):
    model, obj = _build(folder, **loss_args)
    perturb(model.encoder, 0, scale=0.2)  # after setup: the frozen network keeps the checkpoint's weights
    perturb(obj.c_head, 1, scale=0.5)
    perturb(obj.lm_head, 2, scale=1.0)
    perturb(obj.head, 3, scale=0.1)
    return model, obj


def _ours(model, obj, batch):
    b, v, length = batch["input_ids"].shape
    context = LossContext(model=model, seed=SEED, global_step=STEP, full_batch=batch, batch_size=b)
    batch = obj.prepare_batch(batch, context)
    context.full_batch = batch
    z = model(**{k: batch[k].reshape(b * v, length) for k in ("input_ids", "attention_mask", "token_type_ids")})
    z = z.view(b, v, -1)
    return {**obj.loss(z, batch, context), **obj.chunk_loss(z, batch, context)}, context


def _reference_modules(model, obj, folder):
    from transformers import BertConfig, BertForMaskedLM, BertModel
    from transformers.models.bert.modeling_bert import BertLayer

    enc = BertModel.from_pretrained(str(folder), attn_implementation="eager").train()
    enc.load_state_dict(model.encoder.state_dict(), strict=False)
    config = BertConfig.from_pretrained(str(folder), num_hidden_layers=SKIP, attn_implementation="eager")
    mlm = BertForMaskedLM.from_pretrained(str(folder), config=config)  # train_cls_mlm.py: strict=False load
    c_head = nn.ModuleList([BertLayer(config) for _ in range(obj.n_head_layers)]).train()
    c_head.load_state_dict(obj.c_head.state_dict())
    lm_head = copy.deepcopy(BertForMaskedLM.from_pretrained(str(folder)).cls.predictions)
    lm_head.load_state_dict(obj.lm_head.state_dict())
    return enc, mlm, c_head, lm_head, reference_projection(obj.head)


# ----------------------------------------------------------------------------------------- fidelity
def test_the_heads_start_from_the_checkpoint(mlm_folder):
    """The frozen network is the checkpoint's embeddings and first skip_from layers, the MLM prediction head the
    checkpoint's cls.predictions (untied from any embeddings), the head layers at BERT's initialisation."""
    from transformers import BertForMaskedLM

    model, obj = _build(mlm_folder)
    ref = BertForMaskedLM.from_pretrained(str(mlm_folder))
    for k, v in obj.lm_head.state_dict().items():
        assert torch.equal(v, ref.cls.predictions.state_dict()[k]), k
    assert obj.lm_head.decoder.weight is not model.encoder.get_input_embeddings().weight
    frozen = obj.frozen.state_dict()
    assert len(obj.frozen.encoder.layer) == SKIP and not any(p.requires_grad for p in obj.frozen.parameters())
    for k, v in frozen.items():
        assert torch.equal(v, ref.bert.state_dict()[k]), k


def test_the_head_layers_start_from_the_official_init(mlm_folder):
    """The official head layers (``models_cls_mlm.py`` L343-346: ``nn.ModuleList([BertLayer(config) ...])`` then
    ``self.c_head.apply(self.bert._init_weights)``): every Linear weight N(0, initializer_range), every bias 0,
    LayerNorm weight 1 and bias 0 -- checked per tensor, against a control built without ``_init_weights`` (torch's
    Linear default, std 1/sqrt(3 * fan_in)), which must fail the same check."""
    from transformers.models.bert.modeling_bert import BertLayer

    model, obj = _build(mlm_folder)
    std = model.encoder.config.initializer_range

    def official(layers) -> list[str]:
        bad = []
        for name, module in layers.named_modules():
            if isinstance(module, nn.Linear):
                w = module.weight.detach().double()
                if abs(float(w.std()) - std) > 0.15 * std or abs(float(w.mean())) > 4 * std / w.numel() ** 0.5:
                    bad.append(f"{name}.weight std {float(w.std()):.4f}")
                if module.bias is not None and not torch.equal(module.bias, torch.zeros_like(module.bias)):
                    bad.append(f"{name}.bias")
            elif isinstance(module, nn.LayerNorm):
                if not (torch.equal(module.weight, torch.ones_like(module.weight))
                        and torch.equal(module.bias, torch.zeros_like(module.bias))):
                    bad.append(name)
        return bad

    assert len(obj.c_head) == obj.n_head_layers == 2
    assert sum(isinstance(m, nn.Linear) for m in obj.c_head.modules()) == 12  # q, k, v, out, intermediate, output
    assert official(obj.c_head) == []
    torch.manual_seed(0)
    control = nn.ModuleList([BertLayer(model.encoder.config) for _ in range(2)])
    assert official(control), "the check cannot tell torch's default init from the official one"


@pytest.mark.parametrize("batchnorm", [True, False])
def test_the_contrastive_head_starts_as_the_official_one(mlm_folder, batchnorm):
    """The official head (ProjectionMLP with --batchnorm, else MLPLayer) is built in ``cl_init`` before
    ``init_weights``: Linear weights N(0, initializer_range = 0.02), biases 0 -- not torch's default Linear init
    (std 1/sqrt(3 * fan_in): 0.10 for the tiny model's 32 inputs)."""
    model, obj = _build(mlm_folder, batchnorm=batchnorm)
    std = model.encoder.config.initializer_range
    layers = (obj.head.net[0], obj.head.net[3]) if batchnorm else (obj.head.dense,)
    for layer in layers:
        assert abs(float(layer.weight.detach().std()) - std) < 0.2 * std, float(layer.weight.detach().std())
        assert layer.bias is None or torch.equal(layer.bias, torch.zeros_like(layer.bias))
    assert abs(float(nn.Linear(32, 32).weight.detach().std()) - std) > 3 * std  # the control: the default is told apart


def test_loss_and_gradients_equal_the_official_forward(mlm_folder):
    model, obj = _perturbed(mlm_folder)
    batch = reversed_pair_batch(model.tokenizer)
    assert (batch["attention_mask"] == 0).any()
    parts, context = _ours(model, obj, batch)
    sum(parts.values()).backward()

    enc, mlm, c_head, lm_head, mlp = _reference_modules(model, obj, mlm_folder)
    cl, mlm_part = official_loss(enc, mlm, c_head, lm_head, mlp, model.tokenizer, batch, context.draw_seed(0))
    (cl + mlm_part).backward()
    cl, mlm_part = cl.detach(), mlm_part.detach()
    assert 0.05 < float(cl) and abs(float(cl) - float(torch.log(torch.tensor(8.0)))) > 0.1
    assert abs(float(parts["contrastive"]) - float(cl)) < 1e-6
    assert abs(float(parts["mlm"]) - float(mlm_part)) < 1e-6 and float(mlm_part) > 0.1

    pairs = [(model.encoder, enc), (obj.c_head, c_head), (obj.lm_head, lm_head)] + [(obj.head.net[i], mlp[i]) for i in (0, 1, 3)]
    # the encoder's last LayerNorm bias shifts every [CLS] state alike: the BatchNorm head removes that shift, so
    # its contrastive gradient is 0 up to float cancellation; its MLM gradient is compared within that noise
    last_bias = f"encoder.layer.{len(enc.encoder.layer) - 1}.output.LayerNorm.bias"
    checked = assert_same_gradients(*pair_grads(pairs[:1]), near_zero=(last_bias,))
    checked += assert_same_gradients(*pair_grads(pairs[1:]))
    assert checked > 40
    assert all(p.grad is None for p in obj.frozen.parameters())


@pytest.mark.parametrize("changed", [{"w": 0.05}, {"p": 0.3}, {"temp": 0.1}, {"skip": 2}])
def test_a_changed_hyperparameter_fails_the_comparison(mlm_folder, changed):
    """Another mlm_weight, masking probability, temperature or skip_from layer in the official forward gives a part
    that misses ours by far more than the 1e-6 tolerance."""
    from transformers import BertConfig, BertForMaskedLM

    model, obj = _perturbed(mlm_folder)
    batch = reversed_pair_batch(model.tokenizer)
    with torch.no_grad():
        parts, context = _ours(model, obj, batch)
        enc, mlm, c_head, lm_head, mlp = _reference_modules(model, obj, mlm_folder)
        if "skip" in changed:
            config = BertConfig.from_pretrained(str(mlm_folder), num_hidden_layers=changed.pop("skip"),
                                                attn_implementation="eager")
            mlm = BertForMaskedLM.from_pretrained(str(mlm_folder), config=config)
        ref = official_loss(enc, mlm, c_head, lm_head, mlp, model.tokenizer, batch, context.draw_seed(0), **changed)
    mine = (float(parts["contrastive"]), float(parts["mlm"]))
    assert max(abs(a - float(b)) for a, b in zip(mine, ref)) > 1e-4


def test_embeddings_lm_head_for_a_checkpoint_without_one(tmp_path):
    """lm_head 'embeddings' (the CPU config's MiniLM has no MLM head): decoder = a copy of the word embeddings,
    zero bias shared with the decoder; 'pretrained' on such a checkpoint is refused, naming the way out."""
    folder = make_tiny_model(tmp_path / "enc", "bert", dropout=0.0)
    with pytest.raises(ValueError, match="lm_head"):
        _build(folder)
    model, obj = _build(folder, lm_head="embeddings")
    emb = model.encoder.get_input_embeddings().weight
    assert torch.equal(obj.lm_head.decoder.weight, emb) and obj.lm_head.decoder.weight is not emb
    assert obj.lm_head.decoder.bias is obj.lm_head.bias and not obj.lm_head.bias.any()
    parts, _ = _ours(model, obj, reversed_pair_batch(model.tokenizer))
    sum(parts.values()).backward()
    assert all(p.grad is not None for p in obj.lm_head.parameters())


def test_masks_repeat_per_step_and_differ_between_steps(mlm_folder):
    model, obj = _build(mlm_folder)
    batch = reversed_pair_batch(model.tokenizer)

    def labels(step):
        obj._seeds = type(obj._seeds)()
        return obj.prepare_batch(batch, LossContext(model=model, seed=SEED, global_step=step))["infocse_labels"]

    a, b, c = labels(5), labels(5), labels(6)
    assert torch.equal(a, b) and not torch.equal(a, c)
    assert ((a != -100) & (batch["attention_mask"] == 0)).sum() == 0
    assert (a != -100).float().mean() > 0.1


# ----------------------------------------------------------------------------------------- refusals
@pytest.mark.parametrize("loss_args,match", [
    ({"mlm_weight": -1}, "mlm_weight"), ({"mlm_probability": 0}, "mlm_probability"), ({"skip_from": 0}, "skip_from"),
    ({"n_head_layers": 1.5}, "n_head_layers"), ({"lm_head": "tied"}, "lm_head"), ({"temp": -1}, "temp"),
])
def test_bad_hyperparameters_are_refused(loss_args, match):
    with pytest.raises(ValueError, match=match):
        build_objective("infocse", loss_args)


def test_setup_refusals(mlm_folder):
    from simcse.models.modeling import SimCSEModel

    obj = build_objective("infocse", {})
    with pytest.raises(ValueError, match="cls_before_pooler"):
        obj.setup(SimCSEModel.from_pretrained(str(mlm_folder), pooler_type="cls"), None)
    with pytest.raises(ValueError, match="skip_from 6 exceeds the encoder's 2 layers"):
        obj.setup(SimCSEModel.from_pretrained(str(mlm_folder), pooler_type="cls_before_pooler"), None)
    assert not obj.supports_grad_cache


# ----------------------------------------------------------------------------------------- gathered negatives
def test_two_ranks_with_gathered_keys_equal_one_process(mlm_folder):
    """Each of two ranks holds half the batch and its own (rank-seeded) masks; ``gather`` gives all ranks' keys
    with the gradient on its own rows only (what all_gather_with_grad does, simulated in one process). The mean
    of the ranks' losses and of their gradients equal one process with the whole batch's contrastive loss and the
    ranks' MLM means (batchnorm off: the official BatchNorm head normalises per process)."""
    model, obj = _perturbed(mlm_folder, batchnorm=False)
    batch = reversed_pair_batch(model.tokenizer)
    b, v, length = batch["input_ids"].shape
    keys = ("input_ids", "attention_mask", "token_type_ids")
    halves = []
    for rank in range(2):
        half = {k: t[rank * 4:(rank + 1) * 4] for k, t in batch.items()}
        halves.append(obj.prepare_batch(half, LossContext(model=model, seed=SEED, global_step=STEP, rank=rank, world=2)))

    def embed(part):
        return model(**{k: part[k].reshape(-1, length) for k in keys}).view(-1, v, model.hidden_size)

    def grads():
        out = {n: p.grad.clone() for n, p in [*model.named_parameters(), *obj.named_parameters()] if p.grad is not None}
        model.zero_grad()
        obj.zero_grad()
        return out

    # both ranks in one graph: rank r's gather holds the other rank's keys with their graph, so backward sums
    # every rank's loss into every rank's rows (all_gather_with_grad's all_reduce), then / 2 (DDP's average)
    zs = [embed(h) for h in halves]
    positives = [obj._project(z)[:, 1] for z in zs]
    total = 0.0
    for rank, (z, half) in enumerate(zip(zs, halves)):
        def gather(t, rank=rank):
            return torch.cat([t if i == rank else positives[i] for i in range(2)])

        context = LossContext(model=model, full_batch=half, batch_size=4, rank=rank, world=2, gather=gather)
        total = total + sum({**obj.loss(z, half, context), **obj.chunk_loss(z, half, context)}.values()) / 2
    total.backward()
    total, summed = float(total), grads()
    # one process: the contrastive loss of the whole batch; the MLM term is each rank's mean over its own masked
    # tokens, averaged (as DDP averages the official per-GPU means)
    whole = {k: torch.cat([h[k] for h in halves]) for k in halves[0]}
    context = LossContext(model=model, full_batch=whole, batch_size=b)
    loss = obj.loss(embed(whole), whole, context)["contrastive"]
    for half in halves:
        loss = loss + obj.chunk_loss(embed(half), half, LossContext(model=model, full_batch=half))["mlm"] / 2
    loss.backward()
    assert abs(total - float(loss)) < 1e-5
    single = grads()
    assert set(single) == set(summed)
    for n, g in single.items():
        if not n.endswith("attention.self.key.bias"):
            assert float((g - summed[n]).norm() / g.norm()) < 1e-4, n


# ----------------------------------------------------------------------------------------- through the trainer
def _train_argv(folder, root, out, *extra, **loss_args):
    import json

    from conftest import random_sentences

    train = root / "train.txt"
    if not train.exists():
        train.write_text("\n".join(random_sentences(48, seed=7)) + "\n")
    args = {"mlm_weight": 0.5, "skip_from": 1, **loss_args}
    return ["--model_name_or_path", str(folder), "--pooler_type", "cls_before_pooler", "--train_file", str(train),
            "--output_dir", str(out), "--per_device_train_batch_size", "8", "--learning_rate", "1e-3",
            "--max_steps", "6", "--save_strategy", "steps", "--save_steps", "3", "--eval_strategy", "no",
            "--logging_steps", "1", "--report_to", "none", "--use_cpu", "true", "--dataloader_pin_memory", "false",
            "--eval_before_training", "false", "--test_after_training", "false", "--seed", "0",
            "--loss", "infocse", "--loss_args", json.dumps(args), *extra]


@pytest.mark.slow
def test_resume_mid_run_equals_the_uninterrupted_run_and_the_folder_is_the_encoder(tmp_path):
    """Dropout on, the frozen network in training mode (its dropout seeded too): 6 steps with checkpoint-3 and a
    run resumed from it end with the same losses of steps 4-6 and bitwise the same weights; the saved folder
    holds the encoder only and loads in SimCSE; gradient caching is refused in one line."""
    import os

    from safetensors.torch import load_file

    from conftest import logged_losses, make_mlm_model, run_training, training_error
    from simcse import SimCSE

    folder = make_mlm_model(tmp_path / "model", dropout=0.1)
    full = run_training(_train_argv(folder, tmp_path, tmp_path / "full", mlm_eval=False))
    resumed = run_training(_train_argv(folder, tmp_path, tmp_path / "resumed", "--resume_from_checkpoint",
                                       str(tmp_path / "full" / "checkpoint-3"), mlm_eval=False))
    losses = logged_losses(full)
    assert logged_losses(resumed)[-3:] == losses[-3:] and len(set(losses)) == 6
    assert all(h["loss_mlm"] > 0 for h in full.state.log_history if "loss" in h and "loss_mlm" in h)
    a, b = load_file(str(tmp_path / "full" / "model.safetensors")), load_file(str(tmp_path / "resumed" / "model.safetensors"))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    state = torch.load(tmp_path / "full" / "checkpoint-3" / "objective_state.pt", weights_only=True)
    assert any(k.startswith("c_head.") for k in state) and any(k.startswith("lm_head.") for k in state)
    assert not any(k.startswith(("c_head", "lm_head", "frozen", "head", "cls.")) for k in a)
    assert len(a) <= len(load_file(str(folder / "model.safetensors")))
    assert not any("mlp" in f or f == "objective_state.pt" for f in os.listdir(tmp_path / "full"))
    assert tuple(SimCSE(str(tmp_path / "full")).encode(["a man is playing the guitar ."]).shape) == (1, 32)
    msg = training_error(_train_argv(folder, tmp_path, tmp_path / "gc", "--gradient_cache_chunk_size", "4"))
    assert "--gradient_cache_chunk_size" in msg and "infocse" in msg


# ----------------------------------------------------------------------------------------- several steps, dropout on
class OfficialInfoCSE(ReferenceBase):
    """BertForCL (models_cls_mlm.py, ``--do_mlm --batchnorm --mlm_eval``) and train_cls_mlm.py over several steps
    with dropout, built as the official code builds it: the encoder from the checkpoint, the frozen ``mlm``
    network from the checkpoint cut at ``skip_from`` layers (eval mode, under ``no_grad``), ``lm_head`` the
    checkpoint's ``cls.predictions`` (train_cls_mlm.py), the ``c_head`` layers and the ProjectionMLP the
    project's random start (the same start on both sides; the head's distribution is tested above). The masks
    are the collator's rule drawn from the objective's recorded (seed, step) seed. ``c_head_train=False`` is a
    negative control."""

    def __init__(self, folder, obj, tokenizer, seed, w=WEIGHT, p=PROB, temp=TEMP, c_head_train=True):
        from transformers import BertConfig, BertForMaskedLM, BertModel

        self.enc = BertModel.from_pretrained(str(folder), attn_implementation="eager").double().train()
        config = BertConfig.from_pretrained(str(folder), num_hidden_layers=SKIP, attn_implementation="eager")
        self.mlm = BertForMaskedLM.from_pretrained(str(folder), config=config).double()
        self.c_head = copy.deepcopy(obj.c_head).double().train(c_head_train)
        self.lm_head = copy.deepcopy(BertForMaskedLM.from_pretrained(str(folder)).cls.predictions).double().train()
        self.mlp = reference_projection(obj.head).double()
        self.tokenizer, self.seed, self.w, self.p, self.temp = tokenizer, seed, w, p, temp

    def parameters(self):
        return [*self.enc.parameters(), *self.c_head.parameters(), *self.lm_head.parameters(), *self.mlp.parameters()]

    def step_loss(self, step, batch):
        seed = LossContext(model=None, global_step=step, seed=self.seed).draw_seed(0)
        cl, mlm_part = official_loss(self.enc, self.mlm, self.c_head, self.lm_head, self.mlp, self.tokenizer, batch,
                                     seed, w=self.w, p=self.p, temp=self.temp)
        return cl + mlm_part

    def weights(self):
        return {f"encoder.{k}": p for k, p in self.enc.named_parameters() if not k.startswith("pooler.")}

    def state(self):
        return {**{f"c_head.{k}": p for k, p in self.c_head.named_parameters()},
                **{f"lm_head.{k}": p for k, p in self.lm_head.named_parameters()},
                **{f"head.net.{k}": p for k, p in self.mlp.named_parameters()}}


def infocse_state(obj) -> dict:
    """The trained state InfoCSE carries besides the encoder: head layers, MLM head, contrastive head."""
    return {**{f"c_head.{k}": p for k, p in obj.c_head.named_parameters()},
            **{f"lm_head.{k}": p for k, p in obj.lm_head.named_parameters()},
            **{f"head.{k}": p for k, p in obj.head.named_parameters()}}


@pytest.fixture(scope="module")
def dropout_mlm_folder(tmp_path_factory):
    """:func:`mlm_folder` with dropout 0.1."""
    from conftest import make_mlm_model

    return make_mlm_model(tmp_path_factory.mktemp("infocse_dropout"), dropout=0.1)


@pytest.fixture(scope="module")
def dropout_multistep(dropout_mlm_folder):
    """Our InfoCSE trained 3 steps in float64 with dropout 0.1, and the random heads' start."""
    from fidelity_harness import project_steps, sentence_batches
    from simcse.models.modeling import SimCSEModel

    model = SimCSEModel.from_pretrained(str(dropout_mlm_folder), pooler_type="cls_before_pooler").double().train()
    model.encoder.config._attn_implementation = "eager"
    obj = build_objective("infocse", {"mlm_weight": WEIGHT, "mlm_probability": PROB, "skip_from": SKIP, "temp": TEMP})
    torch.manual_seed(0)
    obj.setup(model, types.SimpleNamespace(seed=SEED))
    start = types.SimpleNamespace(c_head=copy.deepcopy(obj.c_head), head=copy.deepcopy(obj.head))
    data = sentence_batches(model.tokenizer, n_batches=3, bs=8)
    ours = project_steps(model, obj, data, seed=SEED, state=infocse_state, set_up=False)
    return ours, start, model.tokenizer, data


def _official_infocse(folder, start, tokenizer, data, **changes):
    from fidelity_harness import reference_steps

    return reference_steps(OfficialInfoCSE(folder, start, tokenizer, SEED, **changes), data)


def test_infocse_trains_as_the_official_code_with_dropout(dropout_mlm_folder, dropout_multistep):
    """3 SGD steps in the trainer's order, dropout on (encoder and head layers; the frozen network in eval mode as
    the official one): loss, encoder, head layers, MLM head and contrastive head agree after every step."""
    from fidelity_harness import assert_steps_match

    ours, start, tokenizer, data = dropout_multistep
    assert_steps_match(ours, _official_infocse(dropout_mlm_folder, start, tokenizer, data))


@pytest.mark.parametrize("change", [{"w": 0.05}, {"p": 0.3}, {"temp": 0.1}, {"c_head_train": False}],
                         ids=["mlm_weight", "mlm_probability", "temp", "c_head_eval"])
def test_infocse_multistep_comparison_tells_changes_apart(dropout_mlm_folder, dropout_multistep, change):
    """Negative controls: a changed hyperparameter or the head layers in eval mode do not match."""
    from fidelity_harness import TOLERANCES, mismatch

    ours, start, tokenizer, data = dropout_multistep
    found = mismatch(ours, _official_infocse(dropout_mlm_folder, start, tokenizer, data, **change))
    assert found["loss"] > 10 * TOLERANCES["loss"] and found["state"] > 10 * TOLERANCES["state"], (change, found)
