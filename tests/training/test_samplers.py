"""simcse.training.samplers: repeated texts never share a batch with the no_duplicates order, and no row is lost."""
import random

import pytest

from simcse.training.samplers import NoDuplicatesSampler, count_repeated_rows


def _pair_rows(n=60, repeats=20, seed=0):
    rng = random.Random(seed)
    rows = [(f"premise {i}", f"hypothesis {i}") for i in range(n - repeats)]
    rows += [(rows[rng.randrange(len(rows))][0], f"other hypothesis {i}") for i in range(repeats)]  # repeated premises
    rng.shuffle(rows)
    return rows


def _batches(order, b):
    return [order[i:i + b] for i in range(0, len(order), b)]


def test_plain_random_batches_hold_repeats_and_the_sampler_removes_them():
    rows = _pair_rows()
    assert count_repeated_rows(rows)[0] >= 20
    sampler = NoDuplicatesSampler(rows, batch_size=16, seed=1)
    for epoch in range(3):
        sampler.set_epoch(epoch)
        order = list(sampler)
        assert sorted(order) == list(range(len(rows)))  # every row exactly once
        for batch in _batches(order, 16):
            texts = [t for i in batch for t in rows[i]]
            assert len(texts) == len(set(texts)), batch
    sampler.set_epoch(0)
    first = list(sampler)
    sampler.set_epoch(1)
    assert list(sampler) != first  # a new order each epoch
    sampler.set_epoch(0)
    assert list(sampler) == first  # and the same order again for the same epoch (resume)


def test_inseparable_repeats_keep_batches_full():
    rows = [("a", f"x{i}") for i in range(5)] + [(f"b{i}", f"y{i}") for i in range(3)]
    order = list(NoDuplicatesSampler(rows, batch_size=4, seed=0))
    assert sorted(order) == list(range(8)) and [len(b) for b in _batches(order, 4)] == [4, 4]
    with pytest.raises(ValueError, match="batch_size must be >= 1"):
        NoDuplicatesSampler(rows, batch_size=0)


@pytest.mark.slow
def test_training_with_no_duplicates_sampler_and_the_warning_without(tmp_path, tiny_bert_dir, caplog):
    import logging

    from conftest import random_sentences, run_training

    sents = random_sentences(48, seed=3)
    import csv as csvlib

    csv = tmp_path / "pairs.csv"
    with open(csv, "w", newline="") as f:  # 12 premises, 3 rows each
        csvlib.writer(f).writerows([("sent0", "sent1")] + [(sents[i % 12], sents[12 + i]) for i in range(36)])
    base = ["--model_name_or_path", str(tiny_bert_dir), "--train_file", str(csv), "--per_device_train_batch_size", "8",
            "--max_steps", "4", "--eval_strategy", "no", "--save_strategy", "no", "--report_to", "none",
            "--eval_before_training", "false", "--test_after_training", "false", "--use_cpu", "true",
            "--dataloader_pin_memory", "false"]
    with caplog.at_level(logging.WARNING):
        run_training(base + ["--output_dir", str(tmp_path / "a")])
    assert "36 of 36 training rows share a text with another row (12 repeated texts)" in caplog.text
    seen = []

    def spy(trainer):
        real = trainer.compute_loss

        def compute_loss(model, inputs, *a, **k):
            seen.append(inputs["input_ids"][:, 0].tolist())  # (B, V, L): the premise view of each row
            return real(model, inputs, *a, **k)

        trainer.compute_loss = compute_loss

    run_training(base + ["--output_dir", str(tmp_path / "b"), "--batch_sampler", "no_duplicates"], on_build=spy)
    assert len(seen) == 4
    for batch in seen:
        assert len(set(map(tuple, batch))) == len(batch)  # no premise twice in a batch
