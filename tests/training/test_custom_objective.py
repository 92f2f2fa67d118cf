"""A new objective defined in this file alone: registered, trained through ``simcse train`` and through the
Python entry, resumed bit-exactly with its own state (a learnable parameter and a step counter)."""
from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from simcse.training.objectives import Objective, register_objective


class ScaledInfoNCE(Objective):
    """InfoNCE whose inverse temperature is learned (as CLIP's logit scale), plus a small penalty on it."""

    name = "test_scaled_infonce"

    def __init__(self, init_scale: float = 20.0, penalty: float = 1e-3):
        super().__init__()
        if not init_scale > 0:
            raise ValueError(f"init_scale must be > 0, got {init_scale}")
        self.log_scale = nn.Parameter(torch.tensor(math.log(init_scale)))
        self.penalty = penalty
        self.register_buffer("steps_seen", torch.zeros((), dtype=torch.long))

    def loss(self, embeddings, batch, context):
        q = F.normalize(embeddings[:, 0].float(), dim=-1)
        k = F.normalize(context.gather(embeddings[:, 1]).float(), dim=-1)
        labels = torch.arange(q.shape[0], device=q.device) + context.rank * q.shape[0]
        logits = self.log_scale.exp() * q @ k.T
        return {"contrastive": F.cross_entropy(logits, labels), "scale_penalty": self.penalty * self.log_scale ** 2}

    def on_step_end(self, model, context):
        self.steps_seen += 1


register_objective(ScaledInfoNCE)


@pytest.fixture
def corpus(train_txt):
    return train_txt


def _argv(model_dir, train_file, out, *extra):
    return ["--model_name_or_path", str(model_dir), "--train_file", str(train_file), "--output_dir", str(out),
            "--loss", "test_scaled_infonce", "--loss_args", '{"init_scale": 10.0}', "--pooler_type", "avg",
            "--per_device_train_batch_size", "8", "--learning_rate", "1e-3", "--seed", "0", "--use_cpu", "true",
            "--eval_strategy", "no", "--eval_before_training", "false", "--test_after_training", "false",
            "--report_to", "none", "--logging_steps", "1", "--dataloader_pin_memory", "false", "--save_on_signal", "none",
            *extra]


def _state(trainer) -> dict[str, torch.Tensor]:
    sd = {f"model.{k}": v.detach().clone() for k, v in trainer.model.state_dict().items()}
    return sd


def test_custom_objective_trains_through_simcse_train(tmp_path, tiny_bert_dir, corpus):
    from simcse.cli import main as cli_main
    from simcse.training import train as train_mod

    captured = {}
    real_build = train_mod.build
    train_mod.build = lambda *a: captured.setdefault("trainer", real_build(*a))
    try:
        rc = cli_main(["train", *_argv(tiny_bert_dir, corpus, tmp_path / "o", "--max_steps", "3",
                                       "--save_strategy", "steps", "--save_steps", "3")])
        assert rc in (0, None)
    finally:
        train_mod.build = real_build
    trainer = captured["trainer"]
    objective = trainer.objective
    assert isinstance(objective, ScaledInfoNCE)
    assert int(objective.steps_seen) == 3  # the step hook ran after each optimizer step
    assert objective.log_scale.item() != pytest.approx(math.log(10.0), abs=1e-6)  # it was trained
    logs = [h for h in trainer.state.log_history if "loss" in h]
    assert len(logs) == 3 and all("loss_contrastive" in h and "loss_scale_penalty" in h for h in logs)
    # the objective's state is in the checkpoint, not in the inference folder
    assert (tmp_path / "o" / "checkpoint-3" / "objective_state.pt").is_file()
    assert not (tmp_path / "o" / "objective_state.pt").exists()
    saved = torch.load(tmp_path / "o" / "checkpoint-3" / "objective_state.pt", weights_only=True)
    assert int(saved["steps_seen"]) == 3 and torch.equal(saved["log_scale"], objective.log_scale.detach())


def test_custom_objective_resumes_bit_exactly(tmp_path, tiny_bert_dir, corpus):
    from conftest import run_training

    full = run_training(_argv(tiny_bert_dir, corpus, tmp_path / "full", "--max_steps", "4",
                              "--save_strategy", "steps", "--save_steps", "2"))
    resumed = run_training(_argv(tiny_bert_dir, corpus, tmp_path / "resumed", "--max_steps", "4",
                                 "--save_strategy", "steps", "--save_steps", "2",
                                 "--resume_from_checkpoint", str(tmp_path / "full" / "checkpoint-2")))
    assert int(resumed.objective.steps_seen) == 4  # 2 restored from the checkpoint + 2 trained
    a, b = _state(full), _state(resumed)
    assert a.keys() == b.keys() and any(k.startswith("model.objective.") for k in a)
    for k in a:
        assert torch.equal(a[k], b[k]), k
    full_losses = [h["loss"] for h in full.state.log_history if "loss" in h]
    resumed_losses = [h["loss"] for h in resumed.state.log_history if "loss" in h]
    assert len(full_losses) == 4 and resumed_losses == full_losses  # HF restores the first 2 from the checkpoint


def test_unknown_loss_lists_the_valid_names(tmp_path, tiny_bert_dir, corpus):
    from conftest import training_error

    argv = _argv(tiny_bert_dir, corpus, tmp_path / "o", "--max_steps", "1")
    argv[argv.index("test_scaled_infonce")] = "no_such_loss"
    msg = training_error(argv)
    assert "unknown --loss 'no_such_loss'" in msg and "'infonce'" in msg and "'test_scaled_infonce'" in msg


def test_bad_loss_args_are_refused_before_loading(tmp_path, corpus):
    from conftest import training_error

    argv = _argv(tmp_path / "no_model_here", corpus, tmp_path / "o", "--max_steps", "1")
    argv[argv.index('{"init_scale": 10.0}')] = '{"init_scale": -1}'
    assert "init_scale must be > 0" in training_error(argv)
    argv[argv.index('{"init_scale": -1}')] = '{"temperature": 1}'
    assert "unknown key(s) ['temperature']" in training_error(argv)


def test_the_docs_show_this_objective():
    """docs/training.md's "Write your own objective" example is this file's objective, verbatim."""
    import inspect
    from pathlib import Path

    docs = (Path(__file__).resolve().parents[2] / "docs" / "training.md").read_text(encoding="utf-8")
    assert "#### Write your own objective" in docs
    assert inspect.getsource(ScaledInfoNCE) in docs
    assert "register_objective(ScaledInfoNCE)" in docs


def test_gradient_caching_trains_a_parameter_of_the_loss_as_without_caching(tmp_path, tiny_bert_dir, corpus):
    """The learned scale is used on the whole batch's embeddings: gradient caching takes its gradient from the one
    loss evaluation and carries it into the last chunk's backward, so 2 cached steps (chunks of 4 of a batch of 8;
    dropout off, as chunks draw other masks than the whole batch) end with the same scale and encoder as 2 uncached
    steps."""
    from conftest import run_training, trainer_state

    plain = run_training(_argv(tiny_bert_dir, corpus, tmp_path / "plain", "--max_steps", "2", "--dropout", "0.0"))
    cached = run_training(_argv(tiny_bert_dir, corpus, tmp_path / "cached", "--max_steps", "2", "--dropout", "0.0",
                                "--gradient_cache_chunk_size", "4"))
    assert cached.objective.log_scale.item() != pytest.approx(math.log(10.0), abs=1e-6)  # it trained
    a, b = trainer_state(plain), trainer_state(cached)
    assert a.keys() == b.keys()
    for k in a:
        torch.testing.assert_close(b[k], a[k], rtol=1e-4, atol=1e-5, msg=k)


def test_gradient_caching_trains_an_objective_without_parameters_in_its_loss(tmp_path, tiny_bert_dir, corpus):
    """The same objective with its scale frozen: nothing in the loss needs a gradient, caching runs."""
    from conftest import run_training

    frozen = {}

    def freeze(trainer):
        trainer.objective.log_scale.requires_grad_(False)
        frozen["scale"] = trainer.objective.log_scale.item()

    trainer = run_training(_argv(tiny_bert_dir, corpus, tmp_path / "o", "--max_steps", "2",
                                 "--gradient_cache_chunk_size", "4"), on_build=freeze)
    assert trainer.state.global_step == 2 and trainer.objective.log_scale.item() == frozen["scale"]
