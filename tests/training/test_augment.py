"""simcse.training.augment: the discrete augmentations of paper Table 1 and the augmenting collator."""
from __future__ import annotations

import random

import pytest

from conftest import SENTENCES, random_sentences, run_training


# ------------------------------------------------------------------------------------- augmentations
def test_word_augmentations_follow_their_definition():
    from simcse.training.augment import crop, delete_one_word, word_deletion

    words = [f"w{i}" for i in range(10)]
    rng = random.Random(0)
    for _ in range(50):
        c = crop(words, 0.3, rng)
        assert len(c) == 7
        start = words.index(c[0])
        assert c == words[start : start + 7]  # one contiguous span
        d = word_deletion(words, 0.2, rng)
        assert len(d) == 8 and d == [w for w in words if w in d]  # 2 deleted, order kept
        o = delete_one_word(words, rng)
        assert len(o) == 9 and o == [w for w in words if w in o]
    starts = {words.index(crop(words, 0.5, rng)[0]) for _ in range(200)}
    assert starts == set(range(6))  # every start position of a 5-word span is drawn
    assert crop(["one"], 0.9, rng) == ["one"] and word_deletion(["one"], 0.5, rng) == ["one"]
    assert delete_one_word(["one"], rng) == ["one"] and crop([], 0.1, rng) == []
    with pytest.raises(ValueError, match="ratio"):
        crop(words, 1.0, rng)


def test_word_augmenter_is_reproducible_with_a_seed():
    from simcse.training.augment import word_augmenter

    f = word_augmenter("word_deletion", 0.3)
    s = "a b c d e f g h i j"
    out1 = [f(s, r) for r in [random.Random(7)] for _ in range(5)]
    out2 = [f(s, r) for r in [random.Random(7)] for _ in range(5)]
    out3 = [f(s, r) for r in [random.Random(8)] for _ in range(5)]
    assert out1 == out2 and out1 != out3
    assert all(len(o.split()) == 7 for o in out1)
    with pytest.raises(ValueError, match="unknown word-level augmentation"):
        word_augmenter("synonym")


def test_augmenting_collator_augments_only_the_second_view(tiny_bert_dir):
    from transformers import AutoTokenizer

    from simcse.training.augment import AugmentingCollator, word_augmenter
    from simcse.training.data import ContrastiveCollator

    tok = AutoTokenizer.from_pretrained(tiny_bert_dir)
    col = AugmentingCollator(tok, ContrastiveCollator(pad_token_id=0), 32,
                             word_augment=word_augmenter("delete_one_word"), seed=3)
    feats = [{"sent0": s} for s in SENTENCES[:4]]
    b = col(feats)
    assert b["input_ids"].shape[:2] == (4, 2)
    rng = random.Random(3)
    aug = word_augmenter("delete_one_word")
    for i, s in enumerate(SENTENCES[:4]):
        v0 = b["input_ids"][i, 0][b["attention_mask"][i, 0].bool()].tolist()
        v1 = b["input_ids"][i, 1][b["attention_mask"][i, 1].bool()].tolist()
        assert v0 == tok(s)["input_ids"]
        assert v1 == tok(aug(s, rng))["input_ids"] and len(v1) == len(v0) - 1


def test_mlm_replacement_changes_exactly_k_non_special_tokens(tiny_mlm_dir):
    from transformers import AutoTokenizer

    from simcse.training.augment import MLMReplacer, load_mlm_model

    tok = AutoTokenizer.from_pretrained(tiny_mlm_dir)
    rep = MLMReplacer(load_mlm_model(str(tiny_mlm_dir)), tok.mask_token_id, tok.all_special_ids, ratio=0.3)
    ids = tok(SENTENCES)["input_ids"]
    new = rep(ids, random.Random(0))
    special = set(tok.all_special_ids)
    for a, b in zip(ids, new):
        assert len(a) == len(b)
        m = sum(t not in special for t in a)
        changed = [j for j in range(len(a)) if a[j] != b[j]]
        assert len(changed) == max(1, round(0.3 * m))
        assert all(a[j] not in special and b[j] not in special for j in changed)
    assert rep(ids, random.Random(0)) == new  # seeded
    assert rep(ids, random.Random(1)) != new


# ----------------------------------------------- in training: new draws each epoch, the same whatever the workers
def _epoch_args(model_dir, train_file, out, *extra):
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

    trainer = run_training(_epoch_args(tiny_bert_dir, corpus, out, *extra), on_build=spy_on)
    return seen, trainer


def _by_sentence(batches):
    out: dict[tuple, list[tuple]] = {}
    for batch in batches:
        for original, augmented in batch:
            out.setdefault(original, []).append(augmented)
    return out


@pytest.mark.slow
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


@pytest.mark.slow
def test_resume_inside_epoch_two_repeats_the_draws(tmp_path, tiny_bert_dir, corpus):
    extra = ("--save_strategy", "steps", "--save_steps", "6", "--dataloader_num_workers", "1")
    full, _ = _draws(tiny_bert_dir, corpus, tmp_path / "full", *extra)
    resumed, trainer = _draws(tiny_bert_dir, corpus, tmp_path / "cut", *extra, "--max_steps", "6")
    assert trainer.state.global_step == 6 and (tmp_path / "cut" / "checkpoint-6").is_dir()
    rest, trainer = _draws(tiny_bert_dir, corpus, tmp_path / "cut", *extra,
                           "--resume_from_checkpoint", str(tmp_path / "cut" / "checkpoint-6"))
    assert trainer.state.global_step == 8
    assert resumed + rest == full  # steps 7 and 8 (epoch 2) see the same sentences and the same augmentations
