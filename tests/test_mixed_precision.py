"""Mixed precision through the Trainer's own flags: bf16 on CPU trains, with float32 logits and loss."""
from __future__ import annotations

import math

import pytest
import torch

from conftest import run_training
from simcse.trainer import SimCSETrainer


def _train(argv):
    captured = {"encoder_dtypes": []}

    def hook(trainer):
        # a Linear's output: bf16 under autocast (LayerNorm outputs, hence last_hidden_state, stay float32)
        linear = next(m for m in trainer.model.encoder.modules() if isinstance(m, torch.nn.Linear))
        linear.register_forward_hook(lambda m, i, o: captured["encoder_dtypes"].append(o.dtype))

    captured["trainer"] = run_training(argv, hook)
    return captured


@pytest.mark.parametrize("chunk", [None, 4], ids=["plain", "gradcache"])
def test_bf16_on_cpu_trains(tmp_path, tiny_bert_dir, train_txt, chunk, monkeypatch):
    loss_dtypes = []
    real_loss = SimCSETrainer.contrastive_loss

    def spy_loss(self, z):
        loss = real_loss(self, z)
        loss_dtypes.append(loss.dtype)
        return loss

    monkeypatch.setattr(SimCSETrainer, "contrastive_loss", spy_loss)
    argv = ["--model_name_or_path", str(tiny_bert_dir), "--train_file", str(train_txt), "--output_dir", str(tmp_path / "o"),
            "--per_device_train_batch_size", "16", "--learning_rate", "1e-3", "--max_steps", "25", "--bf16", "true",
            "--eval_strategy", "no", "--save_strategy", "no", "--report_to", "none", "--logging_steps", "1",
            "--eval_before_training", "false", "--test_after_training", "false", "--seed", "0", "--use_cpu", "true",
            "--dataloader_pin_memory", "false", "--pooler_type", "avg"]
    if chunk:
        argv += ["--gradient_cache_chunk_size", str(chunk)]
    got = _train(argv)
    trainer = got["trainer"]
    assert trainer.args.bf16 and trainer.accelerator.mixed_precision == "bf16"
    # the encoder really ran in bf16 (accelerate's autocast), the loss was float32
    assert got["encoder_dtypes"] and set(got["encoder_dtypes"]) == {torch.bfloat16}
    assert loss_dtypes and set(loss_dtypes) == {torch.float32}
    assert next(trainer.model.parameters()).dtype == torch.float32  # master weights stay float32
    logs = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    assert len(logs) == 25 and all(math.isfinite(x) for x in logs)
    first, last = sum(logs[:5]) / 5, sum(logs[-5:]) / 5
    assert last < 0.8 * first, logs
