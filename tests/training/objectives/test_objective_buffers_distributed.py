"""An objective's buffers under two real gloo processes: per process by default (DDP's broadcast from rank 0 at
every forward would overwrite each process's own state, which its checkpoint saves per process), shared (rank 0's,
DDP's broadcast) when the objective declares ``shared_buffers = True``."""
from __future__ import annotations

import os

import pytest
import torch

from conftest import free_port, make_tiny_model, objective_argv, random_sentences, run_processes
from simcse.training.objectives import register_objective
from simcse.training.objectives.infonce import InfoNCE

pytestmark = pytest.mark.slow
WORLD = 2


class RankCount(InfoNCE):
    """Adds rank + 1 to a buffer before every step's encoding (a per-process running statistic)."""
    name = "buffers_rank_count"

    def __init__(self, temp: float = 0.05):
        super().__init__(temp=temp)
        self.register_buffer("count", torch.zeros(()))

    def prepare_batch(self, batch, context):
        self.count += context.rank + 1
        return batch


class SharedRankCount(RankCount):
    name = "buffers_shared_rank_count"
    shared_buffers = True


register_objective(RankCount, replace=True)
register_objective(SharedRankCount, replace=True)


def _worker(rank: int, port: int, root: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), LOCAL_RANK=str(rank),
                      WORLD_SIZE=str(WORLD), LOCAL_WORLD_SIZE=str(WORLD))
    torch.set_num_threads(1)
    from pathlib import Path

    import torch.distributed as dist

    from simcse.training.train import build_trainer, parse_args

    root, out = Path(root), {}
    for loss in ("buffers_rank_count", "buffers_shared_rank_count"):
        trainer = build_trainer(*parse_args(objective_argv(
            root / "model", root / "train.txt", root / "out" / f"{loss}-{rank}", loss, {}, "--ddp_backend", "gloo",
            "--per_device_train_batch_size", "4")))
        trainer.current_gradient_accumulation_steps = 1
        ddp = trainer.accelerator.prepare_model(trainer.model)
        batches = iter(trainer.get_train_dataloader())
        for _ in range(2):
            trainer.training_step(ddp, next(batches))
        out[loss] = float(trainer.objective.count)
    torch.save(out, root / f"rank{rank}.pt")
    dist.barrier()


def test_objective_buffers_are_per_process_unless_declared_shared(tmp_path):
    make_tiny_model(tmp_path / "model", dropout=0.0)
    (tmp_path / "train.txt").write_text("\n".join(random_sentences(32, seed=5)) + "\n")
    run_processes(_worker, (free_port(), str(tmp_path)), WORLD, timeout_s=240)
    ranks = [torch.load(tmp_path / f"rank{r}.pt") for r in range(WORLD)]
    # per process: 2 steps of +1 on rank 0, of +2 on rank 1
    assert [r["buffers_rank_count"] for r in ranks] == [2.0, 4.0]
    # shared: each forward starts from rank 0's value (its own +1 each step)
    assert [r["buffers_shared_rank_count"] for r in ranks] == [2.0, 2.0]
