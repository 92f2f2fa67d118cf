"""The SimCSE-family objectives through the whole training path (``--loss NAME --loss_args JSON``): exact resume
mid-run (bf16 on), streaming, gradient caching (same gradients, or refused at setup), the multi-process loss
(rank losses average to the one-process loss of the whole batch) and the saved folder (loads in ``SimCSE``,
without the objective's helper modules). One row per objective in :data:`METHODS`."""
from __future__ import annotations

import pytest
import torch
from safetensors.torch import load_file

from conftest import logged_losses, make_tiny_model, random_sentences, run_training, training_error

# name -> (--loss_args, state keys the checkpoint must hold, whether gradient caching is supported)
METHODS = {
    "esimcse": ({"neg_size": 12, "momentum": 0.9}, ("momentum_encoder.",), True),
    "simcse_pp": ({"pos_ratio": 0.9}, (), False),
    "mixcse": ({"lambdas": 0.3, "hard_negative_weight": 0.5}, (), True),
}


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    root = tmp_path_factory.mktemp("objective_runs")
    make_tiny_model(root / "model")
    sents = random_sentences(48, seed=5)
    (root / "train.txt").write_text("\n".join(sents) + "\n")
    hub = root / "hub"
    (hub / "data").mkdir(parents=True)
    (hub / "data" / "wiki.txt").write_text("\n".join(sents) + "\n")
    (hub / "README.md").write_text("---\nconfigs:\n- config_name: wiki\n  data_files:\n  - split: train\n"
                                   "    path: data/wiki.txt\n---\n")
    return root


def _argv(files, out, method, *extra, steps=8):
    import json

    return ["--model_name_or_path", str(files / "model"), "--pooler_type", "cls", "--mlp_only_train", "true",
            "--train_file", str(files / "train.txt"), "--output_dir", str(out), "--per_device_train_batch_size", "8",
            "--learning_rate", "1e-3", "--max_steps", str(steps), "--save_strategy", "steps", "--save_steps", "4",
            "--eval_strategy", "no", "--logging_steps", "1", "--report_to", "none", "--use_cpu", "true",
            "--dataloader_pin_memory", "false", "--eval_before_training", "false", "--test_after_training", "false",
            "--seed", "0", "--loss", method, "--loss_args", json.dumps(METHODS[method][0]), *extra]


@pytest.mark.slow
@pytest.mark.parametrize("method", sorted(METHODS))
def test_resume_equals_uninterrupted_run_and_the_folder_has_no_helper_modules(files, tmp_path, method):
    from simcse import SimCSE

    full = run_training(_argv(files, tmp_path / "full", method, "--bf16", "true"))
    ckpt = tmp_path / "full" / "checkpoint-4"
    state = torch.load(ckpt / "objective_state.pt", weights_only=True) if (ckpt / "objective_state.pt").is_file() else {}
    for prefix in METHODS[method][1]:
        assert any(k.startswith(prefix) for k in state), (prefix, sorted(state)[:5])
    resumed = run_training(_argv(files, tmp_path / "resumed", method, "--bf16", "true",
                                 "--resume_from_checkpoint", str(ckpt)))
    assert logged_losses(resumed)[-4:] == logged_losses(full)[-4:]
    a, b = load_file(str(tmp_path / "full" / "model.safetensors")), load_file(str(tmp_path / "resumed" / "model.safetensors"))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert not any("objective" in k or "momentum" in k for k in a)  # helper modules stay out of the folder
    assert sorted(p.name for p in (tmp_path / "full").glob("*.safetensors")) == ["model.safetensors", "simcse_mlp.safetensors"]
    emb = SimCSE(str(tmp_path / "full")).encode(["a cat sits", "the dog runs"])
    assert emb.shape == (2, 32) and torch.isfinite(torch.as_tensor(emb)).all()


@pytest.mark.parametrize("method", sorted(METHODS))
def test_streaming_trains(files, tmp_path, method):
    argv = _argv(files, tmp_path / "out", method, steps=3)
    i = argv.index("--train_file")
    argv[i:i + 2] = ["--dataset_name", str(files / "hub"), "--dataset_config_name", "wiki", "--streaming", "true"]
    trainer = run_training(argv)
    assert trainer.state.global_step == 3 and all(torch.isfinite(torch.tensor(logged_losses(trainer))))


# the token-level and prompt methods, streamed: name -> (--loss_args, extra options); "{model}" is the tiny model
STREAMED = {
    "diffcse": ({"generator_name": "encoder-tied", "lambda_weight": 0.5}, ("--pooler_type", "cls_before_pooler")),
    "infocse": ({"mlm_weight": 0.5, "skip_from": 1, "lm_head": "embeddings"}, ("--pooler_type", "cls_before_pooler")),
    "promptbert": ({"template": "the {sentence} is {mask} .", "template2": "a {sentence} was {mask} ."},
                   ("--pooler_type", "prompt_mask")),
    "rankcse": ({"teachers": ["{model}"], "distillation": "listmle"}, ()),
}


@pytest.mark.slow
@pytest.mark.parametrize("method", sorted(STREAMED))
def test_the_other_methods_train_streamed(files, tmp_path, method):
    """DiffCSE, InfoCSE, PromptBERT and RankCSE read a streamed dataset (never loaded whole) like the rest: 3 steps of
    the method's objective, finite losses."""
    import json

    from conftest import objective_argv

    loss_args, extra = STREAMED[method]
    loss_args = json.loads(json.dumps(loss_args).replace("{model}", str(files / "model")))
    argv = objective_argv(files / "model", files / "train.txt", tmp_path / "out", method, loss_args, "--max_steps", "3",
                          "--save_strategy", "no", *extra)
    i = argv.index("--train_file")
    argv[i:i + 2] = ["--dataset_name", str(files / "hub"), "--dataset_config_name", "wiki", "--streaming", "true"]
    trainer = run_training(argv)
    assert trainer.state.global_step == 3 and all(torch.isfinite(torch.tensor(logged_losses(trainer))))
    assert trainer.objective.name == method


@pytest.mark.parametrize("method", sorted(METHODS))
def test_gradient_caching_equals_the_whole_batch_or_is_refused(files, tmp_path, method):
    if not METHODS[method][2]:
        msg = training_error(_argv(files, tmp_path / "o", method, "--gradient_cache_chunk_size", "4"))
        assert "--gradient_cache_chunk_size" in msg and method in msg
        return
    from simcse.training.objectives.base import BatchSeeds
    from simcse.training.train import build, parse_args

    trainer = build(*parse_args(_argv(files, tmp_path / "o", method, "--dropout", "0.0")))
    trainer.current_gradient_accumulation_steps = 1
    model = trainer.model.train()
    batch = next(iter(trainer.get_train_dataloader()))
    objective = trainer.objective

    def grads_of(chunk):
        model.zero_grad(set_to_none=True)
        trainer.gradient_cache_chunk_size = chunk
        if hasattr(objective, "_seeds"):
            objective._seeds = BatchSeeds()  # the same random draws (word repetition) in both computations
        if chunk:
            loss = trainer.training_step(model, dict(batch))
        else:
            loss = trainer.compute_loss(model, dict(batch))
            loss.backward()
        if hasattr(objective, "_pending"):
            objective._pending.clear()
        return float(loss.detach()), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}

    if hasattr(objective, "_queue"):
        objective._queue = torch.randn(12, 32)  # a full queue: its negatives are in both computations
    whole, g_whole = grads_of(None)
    cached, g_cached = grads_of(3)
    assert abs(whole - cached) < 1e-5 and g_whole.keys() == g_cached.keys() and len(g_whole) > 10
    for n in g_whole:
        torch.testing.assert_close(g_cached[n], g_whole[n], rtol=1e-4, atol=1e-6, msg=lambda m: f"{n}: {m}")


@pytest.mark.parametrize("method", sorted(METHODS))
def test_rank_losses_average_to_the_one_process_loss(files, method):
    """With the in-batch keys gathered, the mean over 2 processes of their losses (each on its own half of the
    queries) equals one process's loss on the whole batch: labels are offset by rank, nothing is counted twice.
    (Dropout off; ESimCSE's queue empty at the first step; SimCSE++'s off-dropout keys and DCL and MixCSE's
    rolled mixes are over the gathered rows.)"""
    from simcse.models.modeling import SimCSEModel
    from simcse.training.objectives import LossContext, build_objective
    from simcse.training.objectives.base import encode_without_dropout, view_inputs

    model = SimCSEModel.from_pretrained(str(files / "model"), pooler_type="cls", mlp_only_train=True).eval()
    enc = model.tokenizer(random_sentences(8, seed=1), padding=True, return_tensors="pt")
    batch = {k: torch.stack([v, v], 1) for k, v in enc.items()}
    objective = build_objective(method, METHODS[method][0])
    objective.setup(model, None)
    with torch.no_grad():
        z = model(**{k: v.reshape(16, -1) for k, v in batch.items()}).view(8, 2, -1)
        z = z + 0.05 * torch.randn(z.shape, generator=torch.Generator().manual_seed(0))  # views differ

    def total(out):
        return sum(out.values()) if isinstance(out, dict) else out

    one = total(objective.loss(z, batch, LossContext(model=model)))
    with torch.no_grad():
        z0 = encode_without_dropout(model, view_inputs(batch, 0))  # SimCSE++'s off-dropout pass
    per_rank = []
    for rank in (0, 1):
        rows = slice(4 * rank, 4 * rank + 4)

        def gather(t, rank=rank, rows=rows):
            # the gathered (B, H) tensor is view 0, view 1 or the off-dropout pass: find which, then fill in
            # the other process's rows
            full = next(f for f in (z[:, 0], z[:, 1], z0) if torch.allclose(t, f[rows], atol=1e-5))
            return torch.cat([t if r == rank else full[4 * r:4 * r + 4] for r in (0, 1)])

        ctx = LossContext(model=model, rank=rank, world=2, gather=gather, gather_nograd=lambda t, g=gather: g(t).detach())
        per_rank.append(total(objective.loss(z[rows], {k: v[rows] for k, v in batch.items()}, ctx)))
    assert abs(float((per_rank[0] + per_rank[1]) / 2) - float(one)) < 1e-5, (per_rank, one)
