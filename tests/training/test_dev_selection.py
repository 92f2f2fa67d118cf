"""Checkpoint selection as the official runs select: the dev evaluations *during* training encode as the method's
official run scored its dev checkpoints (MixCSE: with the MLP, ``--dev_mlp``; PromptBERT: the first template's
delta subtracted, ``denoise_at_dev``), while the evaluation before training, the final one and the saved model
encode as the saved model does."""
from __future__ import annotations

import json

import numpy as np
import pytest

from conftest import SENTENCES, make_tiny_model, objective_argv, run_training, training_error, write_corpus
from simcse.models.modeling import SimCSEModel
from simcse.training.objectives import build_objective

PROMPT_ARGS = {"template": "the {sentence} is {mask} .", "template2": "a {sentence} was {mask} ."}


def _record_encodings(monkeypatch):
    """Patch SimCSEModel.encode to note, at each call, whether the MLP and the prompt's denoising apply."""
    calls = []
    real = SimCSEModel.encode

    def spy(self, *a, **kw):
        prompt = getattr(self, "prompt", None)
        calls.append({"mlp": self.mlp is not None and not self.mlp_only_train,
                      "denoise": bool(prompt is not None and prompt.denoise_at_inference)})
        return real(self, *a, **kw)

    monkeypatch.setattr(SimCSEModel, "encode", spy)
    return calls


def _dev_argv(tmp_path, loss, loss_args, *extra):
    from conftest import write_senteval

    model_dir, corpus = make_tiny_model(tmp_path / "m", "bert"), write_corpus(tmp_path)
    senteval = write_senteval(tmp_path / "downstream")
    return objective_argv(model_dir, corpus, tmp_path / "out", loss, loss_args, "--max_steps", "2",
                          "--eval_strategy", "steps", "--eval_steps", "1", "--save_strategy", "steps",
                          "--save_steps", "1", "--load_best_model_at_end", "true", "--metric_for_best_model",
                          "stsb_spearman", "--eval_before_training", "true", "--senteval_dir", str(senteval), *extra)


def _phases(calls):
    """The encode calls, one per evaluation (STS-B dev and SICK-R dev's distinct sentences in one call)."""
    assert calls
    return calls


def test_mixcse_dev_mlp_selects_with_the_mlp_and_saves_without(tmp_path, monkeypatch):
    calls = _record_encodings(monkeypatch)
    trainer = run_training(_dev_argv(tmp_path, "mixcse", {}, "--pooler_type", "cls", "--mlp_only_train", "true",
                                     "--dev_mlp", "true"))
    phases = _phases(calls)
    # before training, step 1, step 2 (the selection), the final evaluation of the saved model
    assert [p["mlp"] for p in phases] == [False, True, True, False]
    assert trainer.model.mlp_only_train  # restored after each dev evaluation
    saved = json.loads((tmp_path / "out" / "simcse_config.json").read_text())
    assert saved["pooler_type"] == "cls" and saved["mlp_only_train"] is True


def test_without_dev_mlp_every_evaluation_encodes_as_the_saved_model(tmp_path, monkeypatch):
    calls = _record_encodings(monkeypatch)
    run_training(_dev_argv(tmp_path, "mixcse", {}, "--pooler_type", "cls", "--mlp_only_train", "true"))
    assert [p["mlp"] for p in _phases(calls)] == [False, False, False, False]


@pytest.mark.parametrize("extra", [("--pooler_type", "cls"), ("--pooler_type", "avg", "--mlp_only_train", "true")])
def test_dev_mlp_without_a_training_only_mlp_is_refused(tmp_path, extra):
    err = training_error(_dev_argv(tmp_path, "mixcse", {}, *extra, "--dev_mlp", "true"))
    assert "--dev_mlp" in err and "--mlp_only_train" in err and "\n" not in err.strip()


@pytest.mark.slow
@pytest.mark.parametrize("denoise_at_dev, expected", [(None, True), (False, False)])
def test_promptbert_selects_denoised_and_saves_plain(tmp_path, monkeypatch, denoise_at_dev, expected):
    calls = _record_encodings(monkeypatch)
    args = PROMPT_ARGS if denoise_at_dev is None else {**PROMPT_ARGS, "denoise_at_dev": denoise_at_dev}
    trainer = run_training(_dev_argv(tmp_path, "promptbert", args, "--pooler_type", "prompt_mask",
                                     "--mlp_only_train", "true"))
    assert [p["denoise"] for p in _phases(calls)] == [False, expected, expected, False]
    assert trainer.model.prompt.denoise_at_inference is False  # restored
    saved = json.loads((tmp_path / "out" / "simcse_config.json").read_text())
    assert saved["prompt"]["denoise_at_inference"] is False


def test_promptbert_dev_encoding_subtracts_the_first_templates_delta(tiny_bert_dir):
    """Inside the objective's dev encoding the model encodes as one built with denoising at inference."""
    plain = SimCSEModel.from_pretrained(str(tiny_bert_dir), pooler_type="prompt_mask", new_mlp_init="random")
    objective = build_objective("promptbert", PROMPT_ARGS)
    objective.setup(plain, None)
    plain.eval()
    denoised = SimCSEModel.from_pretrained(str(tiny_bert_dir), pooler_type="prompt_mask", new_mlp_init="random")
    denoised.load_state_dict(plain.state_dict())
    denoised.set_prompt({**plain.prompt.to_dict(), "denoise_at_inference": True})
    denoised.eval()
    before = plain.encode(SENTENCES[:4])
    with objective.dev_encoding(plain):
        inside = plain.encode(SENTENCES[:4])
    after = plain.encode(SENTENCES[:4])
    np.testing.assert_allclose(inside, denoised.encode(SENTENCES[:4]), atol=1e-5)
    np.testing.assert_allclose(before, after)
    assert np.abs(np.asarray(inside) - np.asarray(before)).max() > 1e-3  # the delta is not negligible


def test_the_recipes_select_as_the_official_runs():
    from simcse.training.config import load_config
    from simcse.training.recipes import config_dir

    mix = load_config(str(config_dir() / "mixcse_bert_base.json"))
    assert mix["mlp_only_train"] is True and mix["dev_mlp"] is True and mix["pooler_type"] == "cls"
    prompt = load_config(str(config_dir() / "promptbert_bert_base.json"))
    assert prompt["loss_args"]["denoise_at_dev"] is True and prompt["loss_args"]["denoise_at_inference"] is False
    assert prompt["loss_args"]["denoise_positions"] == "first_template"
