"""Training: arguments, configs, data, collators, samplers, the InfoNCE loss and the Trainer.

The Python entry (docs/training.md, "Training from Python")::

    from simcse.training import training_arguments, build_trainer
    model_args, data_args, training_args = training_arguments("unsup_cpu_minilm", max_steps=3, output_dir="out")
    trainer = build_trainer(model_args, data_args, training_args)
    trainer.train()

``run_training(model_args, data_args, training_args)`` runs all of ``simcse train`` (evaluations before and after,
test, ``simcse_results.json``, card, printed lines); or with the dataclasses themselves (:class:`ModelArguments`, :class:`DataTrainingArguments`,
:class:`SimCSETrainingArguments`). Names are imported on first use (``import simcse.training`` stays light).
"""
from __future__ import annotations

_EXPORTS = {
    "ModelArguments": "simcse.training.arguments",
    "DataTrainingArguments": "simcse.training.arguments",
    "SimCSETrainingArguments": "simcse.training.training_args",
    "build_trainer": "simcse.training.train",
    "run_training": "simcse.training.train",
    "training_arguments": "simcse.training.parser",
    "parse_args": "simcse.training.parser",
    "SetupError": "simcse.training.build",
}
__all__ = list(_EXPORTS)


def __getattr__(name: str):
    if name in _EXPORTS:
        import importlib

        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'simcse.training' has no attribute {name!r}")
