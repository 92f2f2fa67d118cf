"""Intervals and comparisons, as a user combines them: a collapsed model's missing interval never costs a finished
training run its results; ``--compare_to`` a collapsed model is refused as evaluating it alone is, before this
model's work; the compared model is encoded with its own pooler (or ``--pooler`` when it records none); every
``--truncate_dim`` size gets its intervals, printed and saved; resampling is chunked (bounded memory, the same
intervals whatever the chunk); an interval cell reads ``[low, high]``."""
from __future__ import annotations

import json
import tracemalloc

import numpy as np
import pytest
import torch

from conftest import load_script, random_sentences, run_training, write_senteval
from simcse.evaluation import intervals as I


@pytest.fixture(scope="module")
def senteval_dir(tmp_path_factory):
    return write_senteval(tmp_path_factory.mktemp("senteval") / "downstream")


@pytest.fixture(scope="module")
def collapsed_dir(tmp_path_factory, tiny_bert_dir):
    """A plain HF folder whose last LayerNorm has weight 0: every token's state is its bias, so every sentence
    gets one vector (all cosine similarities 1)."""
    from transformers import AutoModel, AutoTokenizer

    folder = tmp_path_factory.mktemp("collapsed")
    model = AutoModel.from_pretrained(str(tiny_bert_dir))
    norm = model.encoder.layer[-1].output.LayerNorm
    with torch.no_grad():
        norm.weight.zero_()
        norm.bias.copy_(torch.linspace(0.5, 1.5, norm.bias.numel()))
    model.save_pretrained(str(folder))
    AutoTokenizer.from_pretrained(str(tiny_bert_dir)).save_pretrained(str(folder))
    return folder


def _evaluate(argv):
    return load_script("evaluation", "simcse_evaluation_script").main(argv)


def test_bootstrap_of_a_collapsed_model_keeps_the_finished_runs_results(tmp_path, tiny_bert_dir, senteval_dir, capsys):
    train = tmp_path / "train.txt"
    train.write_text("\n".join(random_sentences(32)) + "\n")
    out = tmp_path / "o"
    argv = ["--model_name_or_path", str(tiny_bert_dir), "--train_file", str(train), "--output_dir", str(out),
            "--per_device_train_batch_size", "8", "--max_steps", "2", "--eval_strategy", "steps", "--eval_steps", "1",
            "--save_strategy", "no", "--report_to", "none", "--eval_before_training", "false", "--bootstrap", "5",
            "--test_after_training", "false", "--use_cpu", "true", "--dataloader_pin_memory", "false",
            "--senteval_dir", str(senteval_dir)]

    def collapse(trainer):  # every sentence gets one vector: no Spearman, so no interval
        trainer.model.encode = lambda sentences, **kw: np.ones((len(sentences), 32), dtype=np.float32)

    run_training(argv, on_build=collapse)  # no SystemExit: the run ends as without --bootstrap
    results = json.loads((out / "simcse_results.json").read_text())
    assert "after" in results and "final_stsb_spearman_ci" not in results["after"]
    assert (out / "README.md").is_file() and (out / "model.safetensors").is_file()
    err = capsys.readouterr().err
    assert "warning: --bootstrap 5: no interval for final_stsb_spearman" in err


def test_compare_to_a_collapsed_model_is_refused_before_this_models_evaluation(tiny_bert_dir, collapsed_dir,
                                                                                senteval_dir, capsys):
    with pytest.raises(ValueError, match="all .* cosine similarities equal"):  # evaluated alone: refused
        from simcse.evaluation import evaluate
        from simcse.models.modeling import SimCSEModel

        alone = SimCSEModel.from_pretrained(str(collapsed_dir), pooler_type="avg")
        evaluate(alone.encode, ["STSBenchmark"], senteval_dir)
    with pytest.raises(SystemExit) as e:
        _evaluate(["--model_name_or_path", str(tiny_bert_dir), "--pooler", "avg", "--data_dir", str(senteval_dir),
                   "--tasks", "STSBenchmark", "--compare_to", str(collapsed_dir), "--quiet"])
    assert isinstance(e.value.code, str) and e.value.code.startswith(f"error: --compare_to '{collapsed_dir}': ")
    assert "cosine similarities equal" in e.value.code and "\n" not in e.value.code
    assert "STSBenchmark" not in capsys.readouterr().out  # no table: this model was not evaluated first


def test_the_compared_model_is_encoded_with_pooler_when_it_records_none(tiny_bert_dir, senteval_dir, tmp_path, capsys):
    out = tmp_path / "cmp.json"
    _evaluate(["--model_name_or_path", str(tiny_bert_dir), "--pooler", "avg", "--data_dir", str(senteval_dir),
               "--tasks", "STSBenchmark", "--compare_to", str(tiny_bert_dir), "--bootstrap", "20", "--output_json",
               str(out), "--quiet"])
    row = json.loads(out.read_text())["comparison"]["tasks"]["STSBenchmark"]
    assert row["diff"] == 0.0 and row["a"] == row["b"]  # the same folder, the same pooler: no difference
    assert "compare_to pooler:" in capsys.readouterr().out


def test_every_truncate_size_gets_its_intervals(tiny_bert_dir, senteval_dir, tmp_path, capsys):
    out = tmp_path / "dims.json"
    _evaluate(["--model_name_or_path", str(tiny_bert_dir), "--pooler", "avg", "--data_dir", str(senteval_dir),
               "--tasks", "STSBenchmark", "SICKRelatedness", "--truncate_dim", "32,16", "--bootstrap", "50",
               "--output_json", str(out), "--quiet"])
    saved = json.loads(out.read_text())["bootstrap"]
    assert set(saved["intervals_by_dim"]) == {"32", "16"}
    assert saved["intervals_by_dim"]["32"] != saved["intervals_by_dim"]["16"]
    printed = capsys.readouterr().out
    for d in ("32", "16"):
        low, high = saved["intervals_by_dim"][d]["STSBenchmark"]
        assert f"[{low:.2f}, {high:.2f}]" in printed


def test_resampling_is_chunked_the_same_whatever_the_chunk_and_bounded_in_memory(monkeypatch):
    rng = np.random.default_rng(0)
    gold = rng.uniform(0, 5, 3999)  # odd sizes and an odd resample count: chunks must not shift the draws
    parts = {"a": (gold + rng.normal(0, 2, 3999), gold), "b": (rng.normal(size=901), rng.uniform(0, 5, 901))}
    monkeypatch.setattr(I, "CHUNK_CELLS", 20_000)  # 4 resamples per chunk
    small = I.bootstrap_parts(parts, n_resamples=61, seed=4)
    paired_small = I.paired_bootstrap(parts, {"a": (gold, gold), "b": parts["b"]}, n_resamples=61, seed=4)
    monkeypatch.setattr(I, "CHUNK_CELLS", 10 ** 9)  # all at once
    assert I.bootstrap_parts(parts, n_resamples=61, seed=4) == small
    assert I.paired_bootstrap(parts, {"a": (gold, gold), "b": parts["b"]}, n_resamples=61, seed=4) == paired_small
    monkeypatch.undo()
    tracemalloc.start()
    I.bootstrap_parts(parts, n_resamples=2000, seed=4)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    # all 2,000 resamples at once hold 2,000 x 4,900 indices and several float arrays of that size (> 300 MB)
    assert peak < 150 * 2 ** 20, peak


def test_an_interval_cell_reads_unambiguously():
    from simcse.evaluation.tables import format_interval, format_table

    assert format_interval(-26.48, -18.12) == "[-26.48, -18.12]"
    assert format_interval(-1.5, 2.25, signed=True) == "[-1.50, +2.25]"
    assert "[-26.48, -18.12]" in format_table({"STS12": -22.3}, {"STS12": [-26.48, -18.12]})
