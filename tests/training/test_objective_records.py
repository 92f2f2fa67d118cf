"""Custom objectives' records: library options fill an objective's arguments only when given; the recorded
``loss_args`` are the constructor's bound arguments (a subclass's own argument included, functions by qualified
name) and rebuild the objective; the best checkpoint's learned values come with its weights; an entry point that
cannot load names ``--loss`` and the entry point; ``resume_from_checkpoint=True`` is checked like a path."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from conftest import objective_argv, run_training, write_corpus, write_senteval
from simcse.training.objectives import build_objective, register_objective
from simcse.training.objectives.compose import simcse_objective
from simcse.training.objectives.infonce import InfoNCE


def scaled_cos(a, b):
    """A similarity function given as a default argument (sentence-transformers' ``similarity_fct`` habit)."""
    return torch.nn.functional.cosine_similarity(a, b)


class AlphaTwo(InfoNCE):
    name = "records_alpha_two"

    def __init__(self, temp: float = 0.05, hard_negative_alpha: float = 2.0):
        super().__init__(temp=temp, hard_negative_alpha=hard_negative_alpha)


class ScaledInfoNCE(InfoNCE):
    """A subclass with an argument of its own and no get_config_dict of its own."""
    name = "records_scaled_infonce"

    def __init__(self, scale: float = 1.0, temp: float = 0.025):
        super().__init__(temp=temp)
        self.scale = scale

    def loss(self, embeddings, batch, context):
        return self.scale * super().loss(embeddings, batch, context)


class WithFunction(InfoNCE):
    name = "records_with_function"

    def __init__(self, temp: float = 0.05, similarity_fct=scaled_cos):
        super().__init__(temp=temp)
        self.similarity_fct = similarity_fct


class LearnedScale(InfoNCE):
    name = "records_learned_scale"

    def __init__(self, temp: float = 0.05):
        super().__init__(temp=temp)
        self.log_scale = torch.nn.Parameter(torch.zeros(()))

    def parameter_groups(self):
        return [{"params": ["log_scale"], "lr": 0.05, "weight_decay": 0.0}]

    def loss(self, embeddings, batch, context):
        return super().loss(embeddings, batch, context) * self.log_scale.exp()


for _cls in (AlphaTwo, ScaledInfoNCE, WithFunction, LearnedScale):
    register_objective(_cls, replace=True)


def test_an_option_not_given_leaves_the_objectives_own_default():
    assert simcse_objective(loss="records_alpha_two").hard_negative_alpha == 2.0
    assert simcse_objective(loss="records_alpha_two", hard_negative_alpha=3.0,
                            hard_negative_given=True).hard_negative_alpha == 3.0
    assert simcse_objective(loss="infonce").hard_negative_alpha == 1.0  # the built-in's own default


def test_a_subclass_is_recorded_with_its_own_argument_and_the_record_rebuilds_it():
    objective = simcse_objective(loss="records_scaled_infonce", loss_args={"scale": 3.0})
    recorded = objective.describe()["loss_args"]
    assert recorded == {"scale": 3.0, "temp": 0.025}
    rebuilt = build_objective("records_scaled_infonce", json.dumps(recorded))
    assert rebuilt.scale == 3.0 and rebuilt.temp == 0.025 and rebuilt.describe()["loss_args"] == recorded


def test_a_function_argument_is_recorded_by_qualified_name_and_an_unchanged_run_resumes(tmp_path, tiny_bert_dir):
    objective = simcse_objective(loss="records_with_function")
    assert objective.describe()["loss_args"]["similarity_fct"] == f"{__name__}:scaled_cos"
    corpus = write_corpus(tmp_path)

    def argv(*extra):
        return objective_argv(tiny_bert_dir, corpus, tmp_path / "o", "records_with_function", {}, "--save_strategy",
                              "steps", "--save_steps", "1", *extra)

    run_training(argv("--max_steps", "2"))
    record = json.loads((tmp_path / "o" / "checkpoint-2" / "simcse_objective.json").read_text())
    assert record["config"]["similarity_fct"] == f"{__name__}:scaled_cos"
    trainer = run_training(argv("--max_steps", "3", "--resume_from_checkpoint", str(tmp_path / "o" / "checkpoint-2")))
    assert trainer.state.global_step == 3


def test_the_best_checkpoint_brings_the_objectives_learned_values(tmp_path, tiny_bert_dir, monkeypatch):
    import simcse.evaluation

    scripted = iter([0.2, 0.9, 0.5, 0.1])  # dev STS-B after steps 1..4: best at step 2

    def fake_dev(encode, data_dir=None, constant_score=None):
        v = next(scripted, 0.0)
        return {"stsb_spearman": v, "sickr_spearman": v, "avg_sts": v}

    monkeypatch.setattr(simcse.evaluation, "evaluate_sts_dev", fake_dev)
    senteval = write_senteval(tmp_path / "senteval")
    out = tmp_path / "o"
    trainer = run_training(objective_argv(
        tiny_bert_dir, write_corpus(tmp_path), out, "records_learned_scale", {}, "--max_steps", "4",
        "--save_strategy", "steps", "--save_steps", "1", "--eval_strategy", "steps", "--eval_steps", "1",
        "--load_best_model_at_end", "true", "--metric_for_best_model", "stsb_spearman", "--senteval_dir",
        str(senteval)))
    best = torch.load(out / "checkpoint-2" / "objective_state.pt", weights_only=True)["log_scale"]
    last = torch.load(out / "checkpoint-4" / "objective_state.pt", weights_only=True)["log_scale"]
    assert abs(float(best) - float(last)) > 1e-3  # the scale moved between the two steps
    assert float(trainer.objective.log_scale) == pytest.approx(float(best), abs=1e-7)
    recorded = json.loads(json.loads((out / "simcse_training_args.json").read_text())["loss_learned"])
    assert recorded["log_scale"] == pytest.approx(float(best), abs=1e-6)


def test_an_entry_point_that_cannot_load_names_the_option_and_the_entry_point(monkeypatch):
    from importlib.metadata import EntryPoint

    import simcse.training.objectives as objectives

    broken = EntryPoint(name="broken_dcl", value="no_such_pkg_xyz.dcl:DCL", group=objectives.ENTRY_POINT_GROUP)
    monkeypatch.setattr(objectives, "_entry_points", lambda: {"broken_dcl": broken})
    with pytest.raises(ValueError) as e:
        objectives.get_objective("broken_dcl")
    text = str(e.value)
    assert text.startswith("--loss broken_dcl: the entry point 'broken_dcl' (no_such_pkg_xyz.dcl:DCL")
    assert "ModuleNotFoundError" in text and "\n" not in text


def test_resume_from_checkpoint_true_gets_the_checks_a_path_gets(tmp_path, tiny_bert_dir):
    from simcse.training.build import SetupError

    corpus = write_corpus(tmp_path)
    out = tmp_path / "o"
    run_training(objective_argv(tiny_bert_dir, corpus, out, "infonce", {}, "--max_steps", "2", "--save_strategy",
                                "steps", "--save_steps", "2"))
    from simcse.training.parser import parse_args
    from simcse.training.train import build_trainer

    model_args, data_args, training_args = parse_args(objective_argv(
        tiny_bert_dir, corpus, out, "records_scaled_infonce", {}, "--max_steps", "4"))
    training_args.resume_from_checkpoint = True
    with pytest.raises(SetupError, match=r"checkpoint-2' was written by a run with --loss infonce"):
        build_trainer(model_args, data_args, training_args)
    training_args.output_dir = str(tmp_path / "empty")
    with pytest.raises(SetupError, match="holds no checkpoint-N folder"):
        build_trainer(model_args, data_args, training_args)
