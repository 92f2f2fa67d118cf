"""Scored pairs through ``simcse train``: the score column reaches the loss as float32 (B,), from a
--train_file CSV and from a --dataset_name with --score_column; missing or non-numeric scores are refused
naming the column; Matryoshka runs record their dimensions in the saved folder; 2D Matryoshka trains."""
from __future__ import annotations

import csv
import json

import pytest
import torch

from conftest import random_sentences, run_training, training_error


def _scored_csv(path, n=24, bad_row=None, header="sent0,sent1,score"):
    a, b = random_sentences(n, seed=5), random_sentences(n, seed=6)
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(header.split(","))
        for i in range(n):
            w.writerow([a[i], b[i], "abc" if i == bad_row else f"{(i * 7) % 11 / 2:.1f}"])
    return path, {(a[i], b[i]): (i * 7) % 11 / 2 for i in range(n)}


def _argv(model_dir, out, *extra):
    return ["--model_name_or_path", str(model_dir), "--output_dir", str(out), "--pooler_type", "avg",
            "--per_device_train_batch_size", "8", "--max_steps", "2", "--seed", "0", "--use_cpu", "true",
            "--eval_strategy", "no", "--eval_before_training", "false", "--test_after_training", "false",
            "--report_to", "none", "--logging_steps", "1", "--dataloader_pin_memory", "false",
            "--save_on_signal", "none", *extra]


def _record_scores(trainer, seen):
    real = trainer.objective.loss

    def spy(embeddings, batch, context):
        seen.append(batch["score"].clone())
        return real(embeddings, batch, context)

    trainer.objective.loss = spy


@pytest.mark.parametrize("loss", ["cosent", "angle"])
def test_train_file_scores_reach_the_loss(tiny_bert_dir, tmp_path, loss):
    csv, truth = _scored_csv(tmp_path / "pairs.csv")
    seen = []
    trainer = run_training(_argv(tiny_bert_dir, tmp_path / "o", "--train_file", str(csv), "--loss", loss),
                           on_build=lambda t: _record_scores(t, seen))
    assert len(seen) == 2 and all(s.dtype == torch.float32 and s.shape == (8,) for s in seen)
    assert {round(float(x), 4) for s in seen for x in s} <= {round(v, 4) for v in truth.values()}
    assert len({float(x) for s in seen for x in s}) > 2  # real, varied scores, not a constant
    assert all(h["loss"] > 0 for h in trainer.state.log_history if "loss" in h)


def test_dataset_score_column(tiny_bert_dir, tmp_path):
    csv, truth = _scored_csv(tmp_path / "pairs.csv", header="sent0,sent1,similarity")
    seen = []
    run_training(_argv(tiny_bert_dir, tmp_path / "o", "--dataset_name", "csv", "--dataset_data_files", str(csv),
                       "--score_column", "similarity", "--loss", "cosent"), on_build=lambda t: _record_scores(t, seen))
    assert {round(float(x), 4) for s in seen for x in s} <= {round(v, 4) for v in truth.values()}


def test_missing_or_bad_scores_are_refused(tiny_bert_dir, tmp_path):
    csv, _ = _scored_csv(tmp_path / "nos.csv", header="sent0,sent1,other")
    msg = training_error(_argv(tiny_bert_dir, tmp_path / "o", "--train_file", str(csv), "--loss", "cosent"))
    assert "--loss cosent needs the column(s) ['score']" in msg
    bad, _ = _scored_csv(tmp_path / "bad.csv", bad_row=3)
    msg = training_error(_argv(tiny_bert_dir, tmp_path / "o2", "--train_file", str(bad), "--loss", "angle"))
    assert "column 'score' of line 5 is 'abc'; expected a number" in msg


def test_matryoshka_run_records_its_dims_and_2d_trains(tiny_bert_dir, tmp_path):
    corpus = tmp_path / "c.txt"
    corpus.write_text("\n".join(random_sentences(32, seed=2)) + "\n")
    args = json.dumps({"loss": "infonce", "matryoshka_dims": [32, 16, 8], "matryoshka_weights": [1, 1, 1]})
    trainer = run_training(_argv(tiny_bert_dir, tmp_path / "m", "--train_file", str(corpus), "--loss", "matryoshka",
                                 "--loss_args", args))
    assert json.loads((tmp_path / "m" / "simcse_config.json").read_text())["matryoshka_dims"] == [32, 16, 8]
    assert {"loss_dim32", "loss_dim8"} <= set(trainer.state.log_history[0])
    args2 = json.dumps({"loss": "infonce", "matryoshka_dims": [32, 8], "n_layers_per_step": -1})
    t2 = run_training(_argv(tiny_bert_dir, tmp_path / "m2", "--train_file", str(corpus), "--loss", "2d_matryoshka",
                            "--loss_args", args2))
    logged = t2.state.log_history[0]
    assert {"loss_last_layer", "loss_prior_layers", "loss_kl"} <= set(logged) and logged["loss_prior_layers"] > 0
