"""simcse.augment: the discrete augmentations of paper Table 1 and the augmenting collator."""
from __future__ import annotations

import random

import pytest

from conftest import SENTENCES


# ------------------------------------------------------------------------------------- augmentations
def test_word_augmentations_follow_their_definition():
    from simcse.augment import crop, delete_one_word, word_deletion

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
    from simcse.augment import word_augmenter

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

    from simcse.augment import AugmentingCollator, word_augmenter
    from simcse.data import ContrastiveCollator

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

    from simcse.augment import MLMReplacer, load_mlm_model

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
