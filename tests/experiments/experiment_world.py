"""A tiny, offline experiment: a tiny random BERT, a SentEval folder of a few pairs, 64 training sentences and a
base config of a few steps (each run is two short subprocesses)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import make_tiny_model, random_sentences, write_senteval

BASE = {"max_steps": 3, "per_device_train_batch_size": 8, "max_seq_length": 16, "pooler_type": "avg",
        "eval_strategy": "no", "save_strategy": "no", "eval_before_training": False, "test_after_training": False,
        "report_to": "none", "logging_steps": 1, "use_cpu": True, "dataloader_pin_memory": False,
        "per_device_eval_batch_size": 32}


@pytest.fixture(scope="session")
def tiny_world(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("experiment_world")
    make_tiny_model(root / "tiny")
    write_senteval(root / "senteval")
    (root / "train.txt").write_text("\n".join(random_sentences(64)) + "\n")
    base = {"model_name_or_path": str(root / "tiny"), "train_file": str(root / "train.txt"),
            "senteval_dir": str(root / "senteval"), **BASE}
    (root / "base.json").write_text(json.dumps(base))
    return root


def write_spec(folder: Path, world: Path, **over) -> Path:
    """A spec file in ``folder`` over the tiny world's base config; ``over`` replaces top-level keys."""
    spec = {"base": str(world / "base.json"), "seeds": [1, 2], "arms": {"a": {}, "b": {"learning_rate": 1e-3}},
            "baseline": "a", "evaluation": {"tasks": ["STSBenchmark"], "bootstrap": 50}}
    spec.update(over)
    path = folder / "spec.json"
    path.write_text(json.dumps(spec))
    return path
