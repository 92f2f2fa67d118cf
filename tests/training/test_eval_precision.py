"""Evaluations inside a mixed-precision run score the model in full precision, as the reference trainer scores its
dev checkpoints and as the saved model encodes: accelerate's autocast forward wrapper (which ``--bf16`` puts on the
model) covers the training steps only."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from conftest import make_tiny_model, objective_argv, run_training, write_corpus, write_senteval
from simcse.models.modeling import SimCSEModel


def _argv(tmp_path, *extra):
    model_dir, corpus = make_tiny_model(tmp_path / "m", "bert"), write_corpus(tmp_path)
    senteval = write_senteval(tmp_path / "downstream")
    return objective_argv(model_dir, corpus, tmp_path / "out", "simcse", {}, "--max_steps", "3",
                          "--eval_strategy", "steps", "--eval_steps", "1", "--save_strategy", "steps",
                          "--save_steps", "1", "--load_best_model_at_end", "true", "--metric_for_best_model",
                          "stsb_spearman", "--senteval_dir", str(senteval), "--test_after_training", "true",
                          "--bf16", "true", *extra)


@pytest.mark.slow
def test_bf16_run_trains_under_autocast_and_evaluates_in_float32(tmp_path):
    seen = []  # (training mode, autocast on) at every forward of the encoder

    def on_build(trainer):
        trainer.model.encoder.register_forward_pre_hook(
            lambda mod, args: seen.append((mod.training, torch.is_autocast_enabled("cpu"))))

    trainer = run_training(_argv(tmp_path), on_build=on_build)
    train_calls = [on for training, on in seen if training]
    eval_calls = [on for training, on in seen if not training]
    assert len(train_calls) == 3 and all(train_calls), seen  # every step in bf16, also those after an evaluation
    assert eval_calls and not any(eval_calls), seen  # before, during and after training: float32

    # the final dev scores and the test scores are those of the saved model, encoded anew in float32
    import simcse.evaluation as senteval

    saved = SimCSEModel.from_pretrained(str(tmp_path / "out"))
    results = json.loads((tmp_path / "out" / "simcse_results.json").read_text())
    dev = senteval.evaluate_sts_dev(lambda s: saved.encode(s), str(tmp_path / "downstream"), constant_score=0.0)
    assert results["after"]["final_stsb_spearman"] == pytest.approx(float(dev["stsb_spearman"]), abs=1e-12)
    assert results["after"]["final_sickr_spearman"] == pytest.approx(float(dev["sickr_spearman"]), abs=1e-12)
    sentences = ["a man plays a guitar .", "the cat sat on the mat ."]
    assert np.array_equal(trainer.model.encode(sentences), saved.encode(sentences))
    wrapped = trainer.model.forward  # accelerate's wrapper is back in place after encoding
    assert "_original_forward" in trainer.model.__dict__ and wrapped.__func__ is not SimCSEModel.forward


def _count_encodes(monkeypatch):
    calls = []
    real = SimCSEModel.encode

    def spy(self, sentences, *a, **kw):
        calls.append(len(sentences))
        return real(self, sentences, *a, **kw)

    monkeypatch.setattr(SimCSEModel, "encode", spy)
    return calls


def _final_and_last(trainer):
    history = trainer.state.log_history
    last = [h for h in history if "eval_stsb_spearman" in h][-1]
    final = [h for h in history if "final_stsb_spearman" in h]
    assert len(final) == 1
    return final[0], last


@pytest.mark.slow
@pytest.mark.parametrize("extra", [("--load_best_model_at_end", "false"),  # the model in memory, unchanged
                                   ("--eval_steps", "3", "--save_steps", "3")])  # the best = the last, reloaded
def test_final_model_scored_at_the_last_step_is_not_scored_again(tmp_path, monkeypatch, capsys, extra):
    calls = _count_encodes(monkeypatch)
    trainer = run_training(_argv(tmp_path, "--test_after_training", "false", *extra))
    final, last = _final_and_last(trainer)
    assert last["step"] == 3
    assert (final["final_stsb_spearman"], final["final_sickr_spearman"]) == (last["eval_stsb_spearman"],
                                                                              last["eval_sickr_spearman"])
    assert len(calls) == (3 if extra[1] == "false" else 1)  # the dev evaluations during training only
    assert "[simcse] the final model is the one scored at step 3: its dev scores stand" in capsys.readouterr().out


@pytest.mark.slow
def test_weights_changed_after_the_last_evaluation_are_scored_again(tmp_path, monkeypatch):
    from transformers import TrainerCallback

    class Nudge(TrainerCallback):  # changes the weights after the last evaluation, as a weight-averaging callback would
        def on_train_end(self, args, state, control, model=None, **kw):
            with torch.no_grad():
                for p in model.parameters():
                    p.mul_(0.5)

    calls = _count_encodes(monkeypatch)
    trainer = run_training(_argv(tmp_path, "--test_after_training", "false", "--load_best_model_at_end", "false"),
                           on_build=lambda t: t.add_callback(Nudge()))
    final, last = _final_and_last(trainer)
    assert len(calls) == 4  # steps 1-3 and the final model
    saved = SimCSEModel.from_pretrained(str(tmp_path / "out"))
    import simcse.evaluation as senteval

    dev = senteval.evaluate_sts_dev(lambda s: saved.encode(s), str(tmp_path / "downstream"), constant_score=0.0)
    assert final["final_stsb_spearman"] == pytest.approx(float(dev["stsb_spearman"]), abs=1e-12)
