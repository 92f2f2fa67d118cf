"""The reference's command lines: transformers-4 options, --overwrite_output_dir, --fp16 without CUDA,
--hard_negative_weight with the reference's meaning, the reference's extra HF options."""
import csv
import json
import logging
import math

import pytest
import torch

from conftest import run_training, training_error, write_senteval
from simcse.training.compat import check_output_dir
from simcse.training.train import SetupError, parse_args

# run_unsup_example.sh of the reference, model / train file / output dir to be filled in, --fp16 dropped
REFERENCE_UNSUP = [
    "--num_train_epochs", "1", "--per_device_train_batch_size", "64", "--learning_rate", "3e-5",
    "--max_seq_length", "32", "--evaluation_strategy", "steps", "--metric_for_best_model", "stsb_spearman",
    "--load_best_model_at_end", "--eval_steps", "125", "--pooler_type", "cls", "--mlp_only_train",
    "--overwrite_output_dir", "--temp", "0.05", "--do_train", "--do_eval",
]
REFERENCE_SUP = [
    "--num_train_epochs", "3", "--per_device_train_batch_size", "128", "--learning_rate", "5e-5",
    "--max_seq_length", "32", "--evaluation_strategy", "steps", "--metric_for_best_model", "stsb_spearman",
    "--load_best_model_at_end", "--eval_steps", "125", "--pooler_type", "cls", "--overwrite_output_dir",
    "--temp", "0.05", "--do_train", "--do_eval",
]


def _base(model, train_file, out):
    return ["--model_name_or_path", str(model), "--train_file", str(train_file), "--output_dir", str(out)]


# ------------------------------------------------------------------------------ transformers-4 options
def test_legacy_options_are_renamed_or_dropped_with_one_line_each(caplog, tmp_path, tiny_bert_dir, train_txt):
    argv = ["--evaluation_strategy", "steps", "--no_cuda", "--per_gpu_train_batch_size=16", "--fp16_opt_level",
            "O2", "--sharded_ddp", "true", "--adafactor", "--logging_dir", "runs/x", "--eval_steps", "5"]
    with caplog.at_level(logging.WARNING, logger="simcse.training.compat"):
        _, _, t = parse_args(_base(tiny_bert_dir, train_txt, tmp_path / "o") + argv)
    assert t.eval_strategy == "steps" and t.use_cpu and t.per_device_train_batch_size == 16
    assert t.optim == "adafactor" and t.eval_steps == 5
    lines = [r.getMessage() for r in caplog.records if r.name == "simcse.training.compat"]
    assert len(lines) == 7 and all("\n" not in m for m in lines)
    assert "--evaluation_strategy" in lines[0] and "--eval_strategy" in lines[0]
    assert any("--logging_dir" in m and "TENSORBOARD_LOGGING_DIR" in m for m in lines)


def test_do_eval_counts_only_when_given_as_in_transformers_4(tmp_path, tiny_bert_dir, train_txt):
    base = _base(tiny_bert_dir, train_txt, tmp_path / "o") + ["--eval_strategy", "steps"]
    assert parse_args(base)[2].do_eval is False  # transformers 5 alone would set it from eval_strategy
    assert parse_args(base + ["--do_eval"])[2].do_eval is True
    assert parse_args(base + ["--do_eval", "false"])[2].do_eval is False


def test_adafactor_false_adds_nothing_and_other_arguments_pass_through(tmp_path, tiny_bert_dir, train_txt):
    default = parse_args(_base(tiny_bert_dir, train_txt, tmp_path / "o"))
    m, _, t = parse_args(_base(tiny_bert_dir, train_txt, tmp_path / "o") + [
        "--adafactor", "false", "--temp", "0.07", "--hard_negative_weight", "-1"])
    assert t.optim == default[2].optim != "adafactor"
    assert m.temp == 0.07 and m.hard_negative_weight == -1


def test_reference_unsup_command_line_parses_with_the_reference_meaning(tmp_path, tiny_bert_dir, train_txt):
    m, d, t = parse_args(_base(tiny_bert_dir, train_txt, tmp_path / "o") + REFERENCE_UNSUP)
    assert t.eval_strategy == "steps" and t.eval_steps == 125 and t.load_best_model_at_end
    assert t.metric_for_best_model == "stsb_spearman" and t.do_train and t.do_eval
    assert d.overwrite_output_dir and d.max_seq_length == 32
    assert m.pooler_type == "cls" and m.mlp_only_train and m.temp == 0.05
    assert m.hard_negative_weight == 0.0 and m.hard_negative_alpha == 1.0  # the reference's default


@pytest.mark.slow
def test_reference_sup_command_line_trains_on_triplets(tmp_path, tiny_bert_dir):
    """--evaluation_strategy steps evaluates during training; --do_eval adds the transfer tasks at the end."""
    from conftest import random_sentences
    rows = random_sentences(48, seed=3)
    f = tmp_path / "nli.csv"
    with open(f, "w", newline="") as fh:
        csv.writer(fh).writerows([["sent0", "sent1", "hard_neg"], *zip(rows[:16], rows[16:32], rows[32:])])
    argv = _base(tiny_bert_dir, f, tmp_path / "o") + REFERENCE_SUP + [
        "--per_device_train_batch_size", "8", "--max_steps", "2", "--eval_steps", "2", "--save_steps", "2",
        "--eval_before_training", "false", "--test_after_training", "false", "--report_to", "none",
        "--senteval_dir", str(write_senteval(tmp_path / "downstream"))]
    trainer = run_training(argv)
    assert trainer.state.global_step == 2
    assert trainer.args.eval_strategy == "steps"
    evals = [h for h in trainer.state.log_history if "eval_stsb_spearman" in h]
    assert len(evals) == 1 and "eval_avg_transfer" not in evals[0]  # during training (step 2): STS only
    final = json.loads((tmp_path / "o" / "simcse_results.json").read_text())["after"]
    tasks = ["MR", "CR", "SUBJ", "MPQA", "SST2", "TREC", "MRPC"]
    assert all(0 <= final[f"final_{t}"] <= 100 for t in tasks)
    assert final["final_avg_transfer"] == pytest.approx(sum(final[f"final_{t}"] for t in tasks) / 7)


@pytest.mark.slow
def test_eval_transfer_scores_transfer_tasks_at_every_evaluation(tmp_path, tiny_bert_dir, train_txt, capsys,
                                                                  monkeypatch):
    import simcse.training.dev_eval as dev_eval

    argv = _base(tiny_bert_dir, train_txt, tmp_path / "o") + [
        "--per_device_train_batch_size", "8", "--max_steps", "1", "--eval_strategy", "steps", "--eval_steps", "1",
        "--eval_before_training", "false", "--test_after_training", "false", "--report_to", "none",
        "--eval_transfer", "--senteval_dir", str(write_senteval(tmp_path / "downstream"))]
    monkeypatch.setattr(dev_eval, "PROGRESS_BAR_FROM", 10)  # the tiny tasks' few sentences count as a long encode
    trainer = run_training(argv)
    evals = [h for h in trainer.state.log_history if "eval_stsb_spearman" in h]
    assert evals and all("eval_avg_transfer" in h and "eval_TREC" in h for h in evals)
    captured = capsys.readouterr()
    assert "[simcse] evaluating at step 1: STS-B and SICK-R dev and the 7 transfer tasks" in captured.out
    assert "encoding" in captured.err  # the progress bar of the transfer tasks' encode


# ------------------------------------------------------------------------------------------ output folder
def test_existing_output_dir_is_refused_unless_overwriting(tmp_path, tiny_bert_dir, train_txt):
    out = tmp_path / "o"
    out.mkdir()
    (out / "keep.txt").write_text("precious")
    msg = training_error(_base(tiny_bert_dir, train_txt, out) + ["--eval_before_training", "false"])
    assert "already exists and is not empty" in msg and "--overwrite_output_dir" in msg
    assert (out / "keep.txt").read_text() == "precious" and len(list(out.iterdir())) == 1
    check_output_dir(str(out), overwrite=True, resuming=False)  # allowed
    check_output_dir(str(out), overwrite=False, resuming=True)  # allowed
    empty = tmp_path / "empty"
    empty.mkdir()
    check_output_dir(str(empty), overwrite=False, resuming=False)  # an empty folder is fine, as in the reference


# ------------------------------------------------------------------------------------------------ fp16
@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the machine without CUDA")
def test_fp16_without_cuda_is_one_line_saying_what_to_use(tmp_path, tiny_bert_dir, train_txt):
    msg = training_error(_base(tiny_bert_dir, train_txt, tmp_path / "o") + ["--fp16"])
    assert "--fp16 needs a CUDA GPU" in msg and "--bf16" in msg
    assert not (tmp_path / "o").exists()


def test_fp16_with_use_cpu_is_refused_too(tmp_path, tiny_bert_dir, train_txt):
    with pytest.raises(SetupError, match="--fp16 needs a CUDA GPU"):
        parse_args(_base(tiny_bert_dir, train_txt, tmp_path / "o") + ["--fp16", "--use_cpu", "true"])


# --------------------------------------------------------------------------------------- hard negatives
@pytest.mark.parametrize("extra, weight, alpha", [
    ([], 0.0, 1.0),
    (["--hard_negative_weight", "0"], 0.0, 1.0),
    (["--hard_negative_weight", "1.5"], 1.5, math.exp(1.5)),
    (["--hard_negative_alpha", "2"], math.log(2), 2.0),
    (["--hard_negative_alpha", "0"], -math.inf, 0.0),
])
def test_hard_negative_weight_is_the_reference_log_weight(tmp_path, tiny_bert_dir, train_txt, extra, weight, alpha):
    m, _, _ = parse_args(_base(tiny_bert_dir, train_txt, tmp_path / "o") + extra)
    assert m.hard_negative_weight == pytest.approx(weight) and m.hard_negative_alpha == pytest.approx(alpha)


@pytest.mark.parametrize("extra, expected", [
    (["--hard_negative_weight", "0", "--hard_negative_alpha", "1"], "give one"),
    (["--hard_negative_alpha", "-1"], "--hard_negative_alpha must be"),
    (["--hard_negative_weight", "nan"], "--hard_negative_weight must be"),
    (["--hard_negative_weight", "1000"], "--hard_negative_weight must be"),
])
def test_bad_hard_negative_options(tmp_path, tiny_bert_dir, train_txt, extra, expected):
    assert expected in training_error(_base(tiny_bert_dir, train_txt, tmp_path / "o") + extra)


# ----------------------------------------------------------------------- the reference's other options
def test_reference_hf_options_are_accepted(tmp_path, tiny_bert_dir, train_txt):
    m, d, _ = parse_args(_base(tiny_bert_dir, train_txt, tmp_path / "o") + [
        "--model_type", "bert", "--config_name", str(tiny_bert_dir), "--tokenizer_name", str(tiny_bert_dir),
        "--cache_dir", str(tmp_path / "cache"), "--use_fast_tokenizer", "false", "--model_revision", "main",
        "--overwrite_cache", "--validation_split_percentage", "5", "--eval_transfer"])
    assert m.tokenizer_name == str(tiny_bert_dir) and m.use_fast_tokenizer is False and d.eval_transfer


def test_dataset_name_together_with_train_file_is_refused_in_one_line(tmp_path, tiny_bert_dir, train_txt):
    msg = training_error(_base(tiny_bert_dir, train_txt, tmp_path / "o") + ["--dataset_name", "wikitext"])
    assert "--dataset_name 'wikitext'" in msg and "--train_file" in msg and "give one" in msg


def test_tokenizer_name_resizes_embeddings_as_the_reference(tmp_path, tiny_bert_dir, train_txt):
    from transformers import BertTokenizerFast

    tok_dir = tmp_path / "tok"
    tok = BertTokenizerFast.from_pretrained(str(tiny_bert_dir))
    tok.add_tokens(["newword1", "newword2"])
    tok.save_pretrained(tok_dir)
    from simcse.training.train import build

    m, d, t = parse_args(_base(tiny_bert_dir, train_txt, tmp_path / "o") + [
        "--tokenizer_name", str(tok_dir), "--eval_before_training", "false", "--test_after_training", "false",
        "--eval_strategy", "no", "--per_device_train_batch_size", "8"])
    trainer = build(m, d, t)
    assert len(trainer.model.tokenizer) == len(tok)
    assert trainer.model.encoder.get_input_embeddings().num_embeddings == len(tok)


def test_gradient_checkpointing_is_passed_as_activation_checkpointing_without_a_future_warning(tmp_path, tiny_bert_dir,
                                                                                            train_txt):
    import warnings

    from simcse.training.compat import translate_legacy_args
    from simcse.training.train import parse_args

    assert translate_legacy_args(["--gradient_checkpointing", "true", "--gradient_checkpointing_kwargs={}"]) == [
        "--activation_checkpointing", "true", "--activation_checkpointing_kwargs={}"]
    with warnings.catch_warnings():
        warnings.simplefilter("error", FutureWarning)  # transformers warns for the old name
        _, _, args = parse_args(["--model_name_or_path", str(tiny_bert_dir), "--train_file", str(train_txt),
                                 "--output_dir", str(tmp_path / "o"), "--use_cpu", "true",
                                 "--gradient_checkpointing", "true"])
    assert args.activation_checkpointing is True and args.gradient_checkpointing is True
