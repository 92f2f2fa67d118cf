"""A tiny model trained with Matryoshka keeps its STS at 1/4 of the dimensions closer to its full-size STS
than the same model trained the same way without it (the point of Kusupati et al. 2022).

Data: word-overlap pairs over the test vocabulary. Train: (sentence, the sentence with a word replaced) pairs,
InfoNCE. STS: Spearman of cosine against the word overlap (Jaccard) of held-out pairs, computed here."""
from __future__ import annotations

import csv
import json
import random

import numpy as np
import pytest
from scipy.stats import spearmanr

from conftest import WORDS, run_training


def _sentence(rng):
    return [rng.choice(WORDS) for _ in range(rng.randint(5, 9))]


def _train_csv(path, n=256, seed=0):
    rng = random.Random(seed)
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["sent0", "sent1"])
        for _ in range(n):
            s = _sentence(rng)
            t = list(s)
            t[rng.randrange(len(t))] = rng.choice(WORDS)
            w.writerow([" ".join(s), " ".join(t)])
    return path


def _sts_pairs(n=200, seed=1):
    """Pairs with every amount of word overlap; gold = Jaccard overlap of the word sets."""
    rng = random.Random(seed)
    a, b, gold = [], [], []
    for _ in range(n):
        s = _sentence(rng)
        t = [w if rng.random() < rng.random() else rng.choice(WORDS) for w in s]
        a.append(" ".join(s)), b.append(" ".join(t))
        gold.append(len(set(s) & set(t)) / len(set(s) | set(t)))
    return a, b, np.array(gold)


def _sts(folder, dim):
    from simcse import SimCSE

    a, b, gold = _sts_pairs()
    tool = SimCSE(str(folder), device="cpu", truncate_dim=dim)
    ea, eb = tool.encode(a, return_numpy=True), tool.encode(b, return_numpy=True)
    return spearmanr((ea * eb).sum(1), gold).statistic


@pytest.mark.slow
def test_matryoshka_keeps_sts_at_a_quarter_of_the_dims(tiny_bert_dir, tmp_path):
    data = _train_csv(tmp_path / "train.csv")
    common = ["--model_name_or_path", str(tiny_bert_dir), "--train_file", str(data), "--pooler_type", "avg",
              "--per_device_train_batch_size", "32", "--num_train_epochs", "6", "--learning_rate", "1e-3",
              "--seed", "0", "--use_cpu", "true", "--eval_strategy", "no", "--eval_before_training", "false",
              "--test_after_training", "false", "--report_to", "none", "--dataloader_pin_memory", "false",
              "--save_on_signal", "none"]
    run_training(common + ["--output_dir", str(tmp_path / "plain"), "--loss", "infonce"])
    run_training(common + ["--output_dir", str(tmp_path / "mrl"), "--loss", "matryoshka", "--loss_args",
                           json.dumps({"loss": "infonce", "matryoshka_dims": [32, 16, 8]})])
    gaps = {}
    for name in ("plain", "mrl"):
        full, quarter = _sts(tmp_path / name, None), _sts(tmp_path / name, 8)
        assert full > 0.3, (name, full)  # training learned the word-overlap similarity
        gaps[name] = full - quarter
    assert gaps["mrl"] < gaps["plain"] - 0.02, gaps
