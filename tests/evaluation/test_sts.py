"""STS scoring (simcse.evaluation.sts / evaluate_sts_dev): constant similarities never become nan."""
import logging

import numpy as np
import pytest

from simcse.evaluation import evaluate, evaluate_sts_dev, resolve_senteval_dir
from simcse.evaluation.sts import ConstantScoresError, correlations
from simcse.evaluation.tables import format_tables, table_notes


@pytest.fixture(scope="module")
def senteval_dir():
    return resolve_senteval_dir(None)  # the real SentEval data the set-up links under data/downstream


def constant_encode(sentences):
    return np.tile(np.array([[0.3, -1.0, 2.0]], dtype=np.float32), (len(sentences), 1))


def test_constant_embeddings_raise_naming_the_task(senteval_dir):
    for task in ("STS12", "STSBenchmark", "SICKRelatedness"):
        with pytest.raises(ConstantScoresError, match=f"{task}.*cosine similarities equal.*undefined"):
            evaluate(constant_encode, [task], senteval_dir)


def test_dev_evaluation_of_a_collapsed_model_scores_zero_with_a_warning(senteval_dir, caplog):
    with pytest.raises(ConstantScoresError, match="STSBenchmark/dev"):
        evaluate_sts_dev(constant_encode, senteval_dir)
    with caplog.at_level(logging.WARNING, logger="simcse.evaluation"):
        out = evaluate_sts_dev(constant_encode, senteval_dir, constant_score=0.0)
    assert out == {"stsb_spearman": 0.0, "sickr_spearman": 0.0, "avg_sts": 0.0}
    assert "STSBenchmark/dev" in caplog.text and "stsb_spearman recorded as 0.0" in caplog.text


def test_constant_gold_is_an_error_and_varied_scores_match_scipy():
    from scipy.stats import spearmanr

    with pytest.raises(ValueError, match="gold scores equal 2"):
        correlations([0.1, 0.2, 0.3], [2.0, 2.0, 2.0], task="T")
    got = correlations([0.1, 0.5, 0.3, 0.2], [1.0, 4.0, 2.0, 3.0])
    assert got["spearman"][0] == pytest.approx(spearmanr([0.1, 0.5, 0.3, 0.2], [1, 4, 2, 3])[0])


def test_tables_say_which_aggregation_split_and_classifier():
    results = {"STS12": {"all": {"spearman": {"all": 0.5, "mean": 0.4, "wmean": 0.45}}},
               "STSBenchmark": {"test": {"spearman": (0.7, 0.0)}}, "MR": {"acc": 80.0, "devacc": 81.0}}
    text = format_tables(results, "test")
    assert "'all' (the pairs of all subsets pooled" in text and "test split" in text
    assert "SentEval's PyTorch logistic regression" in text and "10-fold" in text
    assert "dev split" in table_notes("dev")["sts"] and "not paper-comparable" in table_notes("fasttest", "sklearn")["transfer"]


def test_training_survives_a_collapsed_dev_evaluation(tmp_path, tiny_bert_dir, train_txt, caplog):
    from conftest import run_training

    argv = ["--model_name_or_path", str(tiny_bert_dir), "--train_file", str(train_txt), "--output_dir", str(tmp_path / "o"),
            "--per_device_train_batch_size", "8", "--max_steps", "2", "--eval_strategy", "steps", "--eval_steps", "1",
            "--save_strategy", "no", "--report_to", "none", "--eval_before_training", "true",
            "--test_after_training", "false", "--use_cpu", "true", "--dataloader_pin_memory", "false"]

    def collapse(trainer):  # every sentence gets one vector: the dev Spearman is undefined
        trainer.model.encode = lambda sentences, **kw: constant_encode(sentences)

    with caplog.at_level(logging.WARNING, logger="simcse.evaluation"):
        trainer = run_training(argv, on_build=collapse)
    evals = [h for h in trainer.state.log_history if "eval_stsb_spearman" in h]
    assert evals and all(h["eval_stsb_spearman"] == 0.0 for h in evals)
    assert "cosine similarities equal" in caplog.text
