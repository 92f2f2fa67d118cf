"""A wrapper's loss parts never replace the wrapped objective's: InfoCSE's own MLM term (through its head from the
[CLS] state) and ``--do_mlm``'s term both train, each logged under its own name (found by the two-process
composition matrix: InfoCSE's head got no gradient, and DDP stopped at the second step)."""
from __future__ import annotations

import math

from conftest import objective_argv, run_training, write_corpus


def test_infocse_keeps_its_mlm_term_under_do_mlm(tmp_path, tiny_mlm_dir):
    grads = {}

    def watch(trainer):
        def hook(grad):
            grads["c_head"] = grads.get("c_head", 0.0) + float(grad.abs().sum())

        next(trainer.objective.inner.c_head.parameters()).register_hook(hook)

    trainer = run_training(objective_argv(tiny_mlm_dir, write_corpus(tmp_path), tmp_path / "o", "infocse",
                                          {"skip_from": 1, "mlm_weight": 0.5}, "--do_mlm", "true", "--max_steps", "2",
                                          "--pooler_type", "cls_before_pooler"), on_build=watch)
    logs = [h for h in trainer.state.log_history if "loss" in h]
    assert logs and all("loss_mlm" in h and "loss_infocse_mlm" in h for h in logs), [{k: v for k, v in h.items() if "mlm" in k} for h in logs]
    assert all(math.isfinite(h["loss_infocse_mlm"]) and h["loss_infocse_mlm"] > 0 for h in logs), [{k: v for k, v in h.items() if "mlm" in k} for h in logs]
    assert grads.get("c_head", 0.0) > 0.0  # InfoCSE's head trains
