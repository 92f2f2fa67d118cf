"""--gradient_checkpointing (activation checkpointing) on SimCSEModel and DualEncoderModel.

The flag must work with every training option and, since torch's checkpoint replays the random state of each
recomputed layer (dropout included), give the very weights of a run without it. The model's hooks must accept
every keyword the pinned transformers' Trainer passes; a newer Trainer passing more fails the last test.
"""
from __future__ import annotations

import ast
import inspect

import pytest
import torch

from conftest import random_sentences, run_training

OPTIONS = {
    "padding-free + CPU dropout (defaults)": (),
    "padded, torch dropout": ("--padding_free", "false", "--cpu_dropout", "false"),
    "mlm": ("--do_mlm", "true"),
    "two encoders": ("--two_encoders", "true"),
    "gradient cache": ("--gradient_cache_chunk_size", "3"),
}


@pytest.fixture(scope="module")
def mlm_dir(tmp_path_factory):
    from transformers import BertConfig, BertForMaskedLM

    from conftest import make_tiny_model

    folder = make_tiny_model(tmp_path_factory.mktemp("ckpt_mlm"), "bert", dropout=0.1)
    torch.manual_seed(1)
    BertForMaskedLM(BertConfig.from_pretrained(folder)).save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    p = tmp_path_factory.mktemp("ckpt") / "train.txt"
    p.write_text("\n".join(random_sentences(32, seed=7)) + "\n")
    return p


def _args(model_dir, train_file, out, *extra):
    return [
        "--model_name_or_path", str(model_dir), "--pooler_type", "avg", "--train_file", str(train_file),
        "--output_dir", str(out), "--per_device_train_batch_size", "8", "--learning_rate", "1e-3",
        "--max_steps", "3", "--eval_strategy", "no", "--save_strategy", "no", "--report_to", "none",
        "--eval_before_training", "false", "--test_after_training", "false", "--seed", "0", "--use_cpu", "true",
        "--dataloader_pin_memory", "false", "--disable_tqdm", "true", *extra,
    ]


@pytest.mark.parametrize("option", list(OPTIONS))
def test_gradient_checkpointing_gives_the_same_weights(tmp_path, mlm_dir, corpus, option):
    extra = OPTIONS[option]
    plain = run_training(_args(mlm_dir, corpus, tmp_path / "plain", *extra))
    calls = []

    def watch(trainer):
        model = trainer.model
        real = getattr(model, "activation_checkpointing_enable", None)
        if real is None:
            return  # the Trainer falls back to gradient_checkpointing_enable

        def enable(*a, **kw):
            calls.append(kw)
            return real(*a, **kw)

        model.activation_checkpointing_enable = enable

    ckpt = run_training(_args(mlm_dir, corpus, tmp_path / "ckpt", *extra, "--gradient_checkpointing", "true"),
                        on_build=watch)
    assert len(calls) == 1  # the Trainer turned it on
    encoders = [m for m in ckpt.model.modules() if hasattr(m, "gradient_checkpointing") and hasattr(m, "config")]
    assert encoders and all(m.gradient_checkpointing for m in encoders)
    a, b = plain.model.state_dict(), ckpt.model.state_dict()
    assert a.keys() == b.keys()
    for k in a:
        assert torch.equal(a[k], b[k]), f"{k} differs by {(a[k] - b[k]).abs().max().item()}"
    assert plain.state.global_step == ckpt.state.global_step == 3


def _trainer_model_calls() -> dict[str, list[tuple[int, set[str]]]]:
    """{method name: [(positional count, keyword names)]} of every call ``self.model.<name>(...)`` /
    ``model.<name>(...)`` in HF's Trainer source, for the names our models define."""
    from transformers import Trainer

    from simcse.models.dual_encoder import DualEncoderModel
    from simcse.models.modeling import SimCSEModel

    ours = {n for cls in (SimCSEModel, DualEncoderModel) for n, v in vars(cls).items() if callable(v)}
    ours -= {n for n in dir(torch.nn.Module)}  # forward, train, eval, ...: torch's contract, not Trainer hooks
    ours |= {"activation_checkpointing_enable", "gradient_checkpointing_enable"}
    calls: dict[str, list[tuple[int, set[str]]]] = {}
    for node in ast.walk(ast.parse(inspect.getsource(inspect.getmodule(Trainer)))):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in ours:
            owner = ast.unparse(node.func.value)
            if owner in ("self.model", "model", "self.model_wrapped", "unwrapped_model"):
                calls.setdefault(node.func.attr, []).append((len(node.args), {k.arg for k in node.keywords if k.arg}))
    return calls


def test_model_hooks_take_every_keyword_the_trainer_passes():
    from simcse.models.dual_encoder import DualEncoderModel
    from simcse.models.modeling import SimCSEModel

    calls = _trainer_model_calls()
    assert {"activation_checkpointing_enable", "gradient_checkpointing_enable"} & set(calls)  # the parse works
    for name, uses in calls.items():
        for n_args, keywords in uses:
            for cls in (SimCSEModel, DualEncoderModel):
                if not hasattr(cls, name):
                    continue  # the Trainer checks hasattr first (activation_checkpointing_enable) or falls back
                sig = inspect.signature(getattr(cls, name))
                try:
                    sig.bind(None, *[None] * n_args, **{k: None for k in keywords})
                except TypeError as e:
                    pytest.fail(f"transformers' Trainer calls model.{name}(...) with {n_args} positional argument(s) "
                                f"and keywords {sorted(keywords)}; {cls.__name__}.{name}{sig} does not take them ({e})")
