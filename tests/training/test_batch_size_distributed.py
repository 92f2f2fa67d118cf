"""--global_batch_size under 2 gloo processes: scripts/train.py's own argument parsing derives a per-device batch of
4 from a global batch of 8, and the first step's loss on that global batch equals the loss of 1 process (batch 8)."""
from __future__ import annotations

import json
import os

import pytest
import torch

from conftest import free_port, make_tiny_model, random_sentences, run_processes

WORLD, GLOBAL = 2, 8



def _first_step(base: str, rank: int | None):
    """(per-device batch, loss of training_step on this process's share of the first GLOBAL examples)."""
    from simcse.training.train import build, parse_args

    argv = [os.path.join(base, "cfg.json"), "--model_name_or_path", os.path.join(base, "model"),
            "--train_file", os.path.join(base, "train.txt"), "--output_dir", os.path.join(base, f"out{rank}"),
            "--use_cpu", "true", "--pooler_type", "avg", "--eval_strategy", "no", "--eval_before_training", "false",
            "--test_after_training", "false", "--report_to", "none", "--dataloader_pin_memory", "false", "--seed", "0"]
    if rank is not None:
        argv += ["--ddp_backend", "gloo"]
    model_args, data_args, training_args = parse_args(argv)
    torch.manual_seed(0)
    trainer = build(model_args, data_args, training_args)
    per_device = training_args.per_device_train_batch_size
    batch = trainer.data_collator([trainer.train_dataset[i] for i in range(GLOBAL)])  # (GLOBAL, 2, L)
    lo = 0 if rank is None else rank * per_device
    shard = {k: v[lo:lo + per_device] for k, v in batch.items()}
    trainer.current_gradient_accumulation_steps = 1
    model = trainer.model if rank is None else trainer.accelerator.prepare_model(trainer.model)
    return per_device, float(trainer.training_step(model, shard))


def _worker(rank: int, port: int, base: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), LOCAL_RANK=str(rank),
                      WORLD_SIZE=str(WORLD), LOCAL_WORLD_SIZE=str(WORLD))
    torch.set_num_threads(1)
    per_device, loss = _first_step(base, rank)
    with open(os.path.join(base, f"rank{rank}.json"), "w") as f:
        json.dump({"per_device": per_device, "loss": loss}, f)
    import torch.distributed as dist

    dist.barrier()


@pytest.mark.slow
def test_two_gloo_processes_train_the_same_global_batch_as_one(tmp_path, monkeypatch):
    make_tiny_model(tmp_path / "model", "bert", dropout=0.0)
    (tmp_path / "train.txt").write_text("\n".join(random_sentences(32)) + "\n")
    (tmp_path / "cfg.json").write_text(json.dumps({"global_batch_size": GLOBAL, "learning_rate": 1e-3}))
    run_processes(_worker, (free_port(), str(tmp_path)), WORLD, timeout_s=300)
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(WORLD)]
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    per_device, single_loss = _first_step(str(tmp_path), None)
    assert [r["per_device"] for r in ranks] == [GLOBAL // WORLD] * WORLD and per_device == GLOBAL
    # each rank's loss is the mean over its queries against all GLOBAL keys; their mean is the global loss
    two = sum(r["loss"] for r in ranks) / WORLD
    assert abs(two - single_loss) < 1e-4 * max(1.0, abs(single_loss)), (two, single_loss)
    assert abs(ranks[0]["loss"] - ranks[1]["loss"]) > 1e-6  # the ranks saw different halves (the test can fail)
