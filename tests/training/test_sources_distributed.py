"""--streaming under 2 gloo processes: each rank reads its own part of the stream (datasets' split_dataset_by_node),
the parts are disjoint, and together they are the stream's first N examples (N = steps x batch x processes)."""
from __future__ import annotations

import json
import os
import time

import pytest
import torch
from conftest import free_port, make_tiny_model, random_sentences, run_processes

pytest.importorskip("datasets")

WORLD, BATCH, STEPS = 2, 4, 3



def _worker(rank: int, port: int, base: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), LOCAL_RANK=str(rank),
                      WORLD_SIZE=str(WORLD), LOCAL_WORLD_SIZE=str(WORLD))
    torch.set_num_threads(1)
    from conftest import run_training

    seen = []

    def spy(trainer):
        real = trainer.data_collator

        def collate(features):
            seen.extend(f["input_ids"][0] for f in features)
            return real(features)
        trainer.data_collator = collate

    argv = ["--model_name_or_path", os.path.join(base, "model"), "--pooler_type", "avg",
            "--dataset_name", os.path.join(base, "hub"), "--streaming", "true", "--shuffle_buffer_size", "0",
            "--output_dir", os.path.join(base, "out"), "--per_device_train_batch_size", str(BATCH),
            "--max_steps", str(STEPS), "--learning_rate", "1e-3", "--save_strategy", "no", "--eval_strategy", "no",
            "--report_to", "none", "--use_cpu", "true", "--ddp_backend", "gloo", "--dataloader_pin_memory", "false",
            "--eval_before_training", "false", "--test_after_training", "false", "--seed", "0",
            "--save_on_signal", "none"]
    from simcse.training import train as train_mod

    slow = {}
    if rank == 0:  # the main process's own work after training (results, card) takes 3 s more here
        real = train_mod._print_next_steps

        def late(*a, **k):
            time.sleep(3)
            slow["done"] = time.time()
            return real(*a, **k)
        train_mod._print_next_steps = late
    trainer = run_training(argv, on_build=spy, whole_process=True)  # as `simcse train` runs it
    with open(os.path.join(base, f"rank{rank}.json"), "w") as f:
        json.dump({"seen": seen, "steps": trainer.state.global_step, "returned": time.time(),
                   "main_done": slow.get("done"), "group_left": torch.distributed.is_initialized()}, f)


@pytest.mark.slow
def test_two_gloo_processes_read_disjoint_parts_of_the_stream(tmp_path):
    from transformers import AutoTokenizer

    make_tiny_model(tmp_path / "model", "bert", dropout=0.0)
    sents = random_sentences(40, seed=7)
    (tmp_path / "hub").mkdir()
    (tmp_path / "hub" / "corpus.txt").write_text("\n".join(sents) + "\n")
    run_processes(_worker, (free_port(), str(tmp_path)), WORLD, timeout_s=600)
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(WORLD)]
    assert [r["steps"] for r in ranks] == [STEPS] * WORLD
    # every process waits for the others before ending, and ends without a process group
    assert ranks[1]["returned"] >= ranks[0]["main_done"] and not any(r["group_left"] for r in ranks)
    parts = [[tuple(ids) for ids in r["seen"]] for r in ranks]
    assert [len(p) for p in parts] == [STEPS * BATCH] * WORLD
    assert not set(parts[0]) & set(parts[1])  # disjoint
    tok = AutoTokenizer.from_pretrained(str(tmp_path / "model"))
    first_n = [tuple(ids) for ids in tok(sents[:WORLD * STEPS * BATCH], truncation=True, max_length=32)["input_ids"]]
    assert sorted(parts[0] + parts[1]) == sorted(first_n)  # together: the stream's first N
