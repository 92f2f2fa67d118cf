"""Discrete augmentations in training (simcse.augment): fresh draws each epoch, the same whatever the workers."""
from __future__ import annotations

import pytest

from conftest import random_sentences, run_training


def _args(model_dir, train_file, out, *extra):
    return [
        "--model_name_or_path", str(model_dir), "--pooler_type", "avg", "--train_file", str(train_file),
        "--output_dir", str(out), "--per_device_train_batch_size", "4", "--learning_rate", "1e-4",
        "--num_train_epochs", "2", "--augmentation", "delete_one_word", "--eval_strategy", "no",
        "--report_to", "none", "--logging_steps", "1", "--eval_before_training", "false",
        "--test_after_training", "false", "--seed", "0", "--use_cpu", "true", "--dataloader_pin_memory", "false",
        "--disable_tqdm", "true", *extra,
    ]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    p = tmp_path_factory.mktemp("aug") / "train.txt"
    p.write_text("\n".join(random_sentences(16, seed=3)) + "\n")  # 16 sentences of 4..10 words: 4 steps per epoch
    return p


def _draws(tiny_bert_dir, corpus, out, *extra):
    """Train 2 epochs; return {sentence ids (view 0): [augmented ids (view 1) per epoch]} and the trainer."""
    seen: list[list[tuple]] = []

    def spy_on(trainer):
        real = trainer.compute_loss

        def compute_loss(model, inputs, *a, **kw):
            ids = inputs["input_ids"]  # (B, 2, L)
            seen.append([(tuple(r[0][r[0] != 0].tolist()), tuple(r[1][r[1] != 0].tolist())) for r in ids])
            return real(model, inputs, *a, **kw)

        trainer.compute_loss = compute_loss

    trainer = run_training(_args(tiny_bert_dir, corpus, out, *extra), on_build=spy_on)
    return seen, trainer


def _by_sentence(batches):
    out: dict[tuple, list[tuple]] = {}
    for batch in batches:
        for original, augmented in batch:
            out.setdefault(original, []).append(augmented)
    return out


def test_draws_are_new_each_epoch_and_independent_of_workers(tmp_path, tiny_bert_dir, corpus):
    base, _ = _draws(tiny_bert_dir, corpus, tmp_path / "w0", "--save_strategy", "no")
    per_sentence = _by_sentence(base)
    assert len(base) == 8 and len(per_sentence) == 16 and all(len(v) == 2 for v in per_sentence.values())
    # delete_one_word on 4..10 words: an epoch-2 draw equals the epoch-1 one with chance 1/n; 16 equal would be ~1e-12
    same = sum(v[0] == v[1] for v in per_sentence.values())
    assert same < 8, f"{same} of 16 sentences got the same augmentation in both epochs"
    for workers, persistent in (("1", "false"), ("2", "true")):
        other, _ = _draws(tiny_bert_dir, corpus, tmp_path / f"w{workers}", "--save_strategy", "no",
                          "--dataloader_num_workers", workers, "--dataloader_persistent_workers", persistent)
        assert other == base, f"{workers} worker(s), persistent={persistent}: different batches or draws"


def test_resume_inside_epoch_two_repeats_the_draws(tmp_path, tiny_bert_dir, corpus):
    extra = ("--save_strategy", "steps", "--save_steps", "6", "--dataloader_num_workers", "1")
    full, _ = _draws(tiny_bert_dir, corpus, tmp_path / "full", *extra)
    resumed, trainer = _draws(tiny_bert_dir, corpus, tmp_path / "cut", *extra, "--max_steps", "6")
    assert trainer.state.global_step == 6 and (tmp_path / "cut" / "checkpoint-6").is_dir()
    rest, trainer = _draws(tiny_bert_dir, corpus, tmp_path / "cut", *extra,
                           "--resume_from_checkpoint", str(tmp_path / "cut" / "checkpoint-6"))
    assert trainer.state.global_step == 8
    assert resumed + rest == full  # steps 7 and 8 (epoch 2) see the same sentences and the same augmentations
