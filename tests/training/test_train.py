"""simcse.training.train and simcse.training.arguments: short training runs (text, pairs, triplets, MLM, speed options) and
one-line setup errors."""
import json
import math

import pytest
import torch

from conftest import csv_rows, logged_losses, make_tiny_model, random_sentences, run_training, training_error, write_csv
import simcse.models.modeling as modeling
from simcse.training.train import main


def _args(model_dir, train_file, out, *extra):
    return [
        "--model_name_or_path", str(model_dir), "--train_file", str(train_file), "--output_dir", str(out),
        "--per_device_train_batch_size", "8", "--learning_rate", "1e-3", "--max_steps", "30",
        "--eval_strategy", "no", "--save_strategy", "no", "--report_to", "none", "--logging_steps", "1",
        "--eval_before_training", "false", "--test_after_training", "false", "--seed", "0",
        "--use_cpu", "true", "--dataloader_pin_memory", "false", *extra,
    ]


@pytest.mark.parametrize("arch", ["bert", "roberta"])
@pytest.mark.slow
def test_short_training_lowers_loss(tmp_path, request, arch, train_txt):
    folder = request.getfixturevalue(f"tiny_{arch}_dir")
    out = tmp_path / "out"
    logs = logged_losses(run_training(_args(folder, train_txt, out, "--pooler_type", "avg")))
    assert len(logs) == 30
    first, last = sum(logs[:5]) / 5, sum(logs[-5:]) / 5
    assert last < 0.7 * first, (first, last)
    assert json.loads((out / "simcse_config.json").read_text())["pooler_type"] == "avg"


def test_cls_mlp_only_train_is_saved(tmp_path, tiny_bert_dir, train_txt):
    out = tmp_path / "out"
    main(_args(tiny_bert_dir, train_txt, out, "--pooler_type", "cls", "--mlp_only_train", "true", "--max_steps", "2"))
    cfg = json.loads((out / "simcse_config.json").read_text())
    assert cfg == {"format_version": 1, "pooler_type": "cls", "mlp_only_train": True, "hidden_size": 32}
    assert (out / "simcse_mlp.safetensors").is_file()


_run_error = training_error


@pytest.mark.parametrize("extra, expected", [
    (["--pooler_type", "median"], "unknown pooler_type 'median'"),
    (["--temp", "0"], "--temp must be"),
    (["--temp", "-0.05"], "--temp must be"),
    (["--max_seq_length", "1"], "--max_seq_length must be"),
    (["--per_device_train_batch_size", "1"], "per_device_train_batch_size must be >= 2"),
    (["--cpu_dropout", "maybe"], "argument --cpu_dropout"),
])
def test_bad_arguments_give_one_line_error(tmp_path, tiny_bert_dir, train_txt, extra, expected):
    out = tmp_path / "out"
    msg = _run_error(_args(tiny_bert_dir, train_txt, out) + extra)
    assert expected in msg
    assert not out.exists()  # nothing written


def test_missing_and_empty_train_file(tmp_path, tiny_bert_dir):
    out = tmp_path / "out"
    msg = _run_error(_args(tiny_bert_dir, tmp_path / "wiki1m_for_simcse.txt", out))
    assert "does not exist" in msg and "data/download_wiki.sh" in msg
    empty = tmp_path / "empty.txt"
    empty.write_text("")
    assert "is empty" in _run_error(_args(tiny_bert_dir, empty, out))
    blank = tmp_path / "blank.txt"
    blank.write_text("\n  \n\n")
    assert "no usable sentence" in _run_error(_args(tiny_bert_dir, blank, out))
    assert not out.exists()


def test_missing_senteval_data_stops_before_training(tmp_path, tiny_bert_dir, train_txt):
    out = tmp_path / "out"
    argv = _args(tiny_bert_dir, train_txt, out) + ["--eval_before_training", "true", "--senteval_dir", str(tmp_path / "nope")]
    msg = _run_error(argv)
    assert "nope" in msg and "download_senteval.sh" in msg
    assert not out.exists()


def test_bad_config_file_and_output_dir_give_one_line_error(tmp_path, tiny_bert_dir, train_txt):
    assert "cannot read config file" in _run_error([str(tmp_path / "nope.json")])
    bad = tmp_path / "bad.json"
    bad.write_text('{"temp": 0.05,')
    assert "is not valid JSON" in _run_error([str(bad)])
    listed = tmp_path / "list.json"
    listed.write_text("[1, 2]")
    assert "must hold a JSON object" in _run_error([str(listed)])
    a_file = tmp_path / "taken"
    a_file.write_text("x")
    for out in (a_file, a_file / "sub"):
        msg = _run_error(_args(tiny_bert_dir, train_txt, out))
        assert f"{str(a_file)!r} is a file, not a folder" in msg
    assert a_file.read_text() == "x"


def _train_losses(tmp_path, folder, train_txt, *extra):
    trainer = run_training([
            "--model_name_or_path", str(folder), "--train_file", str(train_txt), "--output_dir", str(tmp_path),
            "--per_device_train_batch_size", "16", "--learning_rate", "1e-3", "--max_steps", "6",
            "--eval_strategy", "no", "--save_strategy", "no", "--report_to", "none", "--logging_steps", "1",
            "--eval_before_training", "false", "--test_after_training", "false", "--seed", "0",
            "--use_cpu", "true", "--dataloader_pin_memory", "false", "--pooler_type", "avg", "--dropout", "0", *extra,
    ])
    return logged_losses(trainer), trainer


@pytest.mark.slow
def test_training_with_and_without_padding_free_is_the_same(tmp_path, tiny_bert_dir, train_txt):
    """With dropout 0 (nothing random in the step) the two forwards train identically, up to float rounding."""
    free, t_free = _train_losses(tmp_path / "a", tiny_bert_dir, train_txt)
    padded, t_padded = _train_losses(tmp_path / "b", tiny_bert_dir, train_txt, "--padding_free", "false")
    assert t_free.model.unpadded and not t_padded.model.unpadded
    assert len(free) == len(padded) == 6
    for a, b in zip(free, padded):
        assert a == pytest.approx(b, rel=1e-3, abs=1e-5), (free, padded)
    assert free[-1] != free[0]  # it trained


def test_bad_attn_implementation_is_refused(tiny_bert_dir, train_txt):
    from simcse.training.arguments import ModelArguments

    with pytest.raises(ValueError, match="attn_implementation"):
        ModelArguments(model_name_or_path=str(tiny_bert_dir), attn_implementation="flash")


def test_training_uses_cpu_dropout_by_default_and_can_turn_it_off(tmp_path, tiny_bert_dir, train_txt):
    _, on = _train_losses(tmp_path / "a", tiny_bert_dir, train_txt)
    _, off = _train_losses(tmp_path / "b", tiny_bert_dir, train_txt, "--cpu_dropout", "false")
    assert any(isinstance(m, modeling.CPUDropout) for m in on.model.modules())
    assert not any(isinstance(m, modeling.CPUDropout) for m in off.model.modules())


def test_training_reuses_the_embedding_gradient_by_default_and_trains_alike_without(tmp_path, tiny_bert_dir, train_txt):
    """--reuse_embedding_grad (default on) swaps the word embeddings' class; with dropout 0 the losses of 6 steps
    equal those of a run with it off (the same gradient up to the summation order of repeated tokens)."""
    from simcse.models.embedding_grad import ReusedGradEmbedding

    on_losses, on = _train_losses(tmp_path / "a", tiny_bert_dir, train_txt)
    off_losses, off = _train_losses(tmp_path / "b", tiny_bert_dir, train_txt, "--reuse_embedding_grad", "false")
    assert isinstance(on.model.encoder.get_input_embeddings(), ReusedGradEmbedding)
    assert type(off.model.encoder.get_input_embeddings()) is torch.nn.Embedding
    assert len(on_losses) == len(off_losses) == 6 and on_losses[-1] != on_losses[0]
    for a, b in zip(on_losses, off_losses):
        assert a == pytest.approx(b, rel=1e-5, abs=1e-7), (on_losses, off_losses)


def _argv(model_dir, train_file, out, *extra):
    return ["--model_name_or_path", str(model_dir), "--train_file", str(train_file), "--output_dir", str(out),
            "--per_device_train_batch_size", "8", "--learning_rate", "1e-3", "--max_steps", "15",
            "--eval_strategy", "no", "--save_strategy", "no", "--report_to", "none", "--logging_steps", "1",
            "--eval_before_training", "false", "--test_after_training", "false", "--seed", "0", "--use_cpu", "true",
            "--dataloader_pin_memory", "false", "--pooler_type", "avg", *extra]


def _train(argv):
    """Run train.main; return (trainer, list of the row shapes of every SimCSEModel.forward call)."""
    calls = []

    def hook(trainer):
        trainer.model.register_forward_hook(lambda m, args, kwargs, out: calls.append(tuple(kwargs["input_ids"].shape)),
                                            with_kwargs=True)

    return run_training(argv, hook), calls


_losses = logged_losses


_error = training_error


# ------------------------------------------------------------------------------------------ training
@pytest.mark.parametrize("columns", [3, 2], ids=["triplets", "pairs"])
def test_csv_trains_all_views_in_one_forward_pass(tmp_path, tiny_bert_dir, columns):
    header = ["sent0", "sent1", "hard_neg"][:columns] + ["source"]  # an extra column is ignored
    f = write_csv(tmp_path / "train.csv", header, [r + ["x"] for r in csv_rows(48, columns)])
    trainer, calls = _train(_argv(tiny_bert_dir, f, tmp_path / "out", "--hard_negative_weight", "0.0"))
    losses = _losses(trainer)
    assert len(losses) == 15 and all(math.isfinite(x) for x in losses)
    # one encoder call per step, holding the B * V rows (queries, positives [, hard negatives]) together
    assert len(calls) == 15 and {c[0] for c in calls} == {8 * columns}, calls
    assert sum(losses[-5:]) / 5 < 0.8 * sum(losses[:5]) / 5, losses


# ---------------------------------------------------------------------------------------- bad input
def test_csv_missing_column_names_the_columns(tmp_path, tiny_bert_dir):
    f = write_csv(tmp_path / "nli.csv", ["sent0", "hard_neg"], csv_rows(4, 2))
    msg = _error(_argv(tiny_bert_dir, f, tmp_path / "out"))
    assert "['sent0', 'hard_neg']" in msg and "sent0,sent1" in msg and "hard_neg" in msg
    assert not (tmp_path / "out").exists()


def test_empty_csv_stops(tmp_path, tiny_bert_dir):
    empty = tmp_path / "nli_for_simcse.csv"
    empty.write_text("")
    msg = _error(_argv(tiny_bert_dir, empty, tmp_path / "out"))
    assert "is empty" in msg and "data/download_nli.sh" in msg
    assert not (tmp_path / "out").exists()


def test_header_only_csv_names_the_file(tmp_path, tiny_bert_dir):
    header_only = write_csv(tmp_path / "header.csv", ["sent0", "sent1", "hard_neg"], [])
    msg = _error(_argv(tiny_bert_dir, header_only, tmp_path / "out"))
    assert "header.csv" in msg


def test_do_mlm_without_mlm_head_is_a_clear_error(tmp_path, tiny_bert_dir, train_txt, capfd, caplog):
    # tiny_bert_dir holds a bare BertModel: no masked-LM head
    capfd.readouterr()
    caplog.set_level("INFO")
    msg = _error(_argv(tiny_bert_dir, train_txt, tmp_path / "out", "--do_mlm", "true"))
    assert "masked-LM head" in msg and str(tiny_bert_dir) in msg
    assert not (tmp_path / "out").exists()
    printed = "".join(capfd.readouterr()) + caplog.text
    assert "LOAD REPORT" not in printed and "MISSING" not in printed  # the error is not buried under transformers' table


def test_do_mlm_trains_on_a_masked_lm_checkpoint(tmp_path):
    from transformers import BertConfig, BertForMaskedLM

    folder = make_tiny_model(tmp_path / "mlm_model", "bert")
    torch.manual_seed(0)
    BertForMaskedLM(BertConfig.from_pretrained(folder)).save_pretrained(folder)
    f = write_csv(tmp_path / "train.csv", ["sent0", "sent1", "hard_neg"], csv_rows(48, 3, seed=3))
    trainer, calls = _train(_argv(folder, f, tmp_path / "out", "--do_mlm", "true", "--mlm_weight", "0.1",
                                  "--mlm_probability", "0.3"))
    head = trainer.model.mlm_head
    fresh = BertForMaskedLM.from_pretrained(folder).cls
    # the head was loaded from the checkpoint and trained
    assert not torch.equal(head.predictions.transform.dense.weight, fresh.predictions.transform.dense.weight)
    assert head.predictions.decoder.weight is trainer.model.encoder.get_input_embeddings().weight  # tied
    losses = _losses(trainer)
    assert len(losses) == 15 and all(math.isfinite(x) for x in losses)
    assert sum(losses[-5:]) / 5 < 0.8 * sum(losses[:5]) / 5, losses
    assert {c[0] for c in calls} == {24}  # the MLM pass uses mlm_logits, not a second contrastive forward


# ------------------------------------ batches of one sentence; max_seq_length against the model's positions
def _args_b4(model_dir, train_file, out, *extra):
    return [
        "--model_name_or_path", str(model_dir), "--pooler_type", "avg", "--train_file", str(train_file),
        "--output_dir", str(out), "--per_device_train_batch_size", "4", "--learning_rate", "1e-4",
        "--eval_strategy", "no", "--save_strategy", "no", "--report_to", "none", "--logging_steps", "1",
        "--eval_before_training", "false", "--test_after_training", "false", "--seed", "0",
        "--use_cpu", "true", "--dataloader_pin_memory", "false", "--disable_tqdm", "true", *extra,
    ]


def test_last_batch_of_one_sentence_is_dropped(tmp_path, tiny_bert_dir, caplog):
    """9 sentences, batch 4, 2 epochs: each epoch has 2 full batches and a 1-sentence rest, which InfoNCE cannot
    contrast. Training finishes with 2 steps per epoch (4 in all) and says so once."""
    train = tmp_path / "nine.txt"
    train.write_text("\n".join(random_sentences(9)) + "\n")
    trainer = run_training(_args_b4(tiny_bert_dir, train, tmp_path / "out", "--num_train_epochs", "2"))
    assert trainer.state.global_step == 4
    assert trainer.state.epoch == 2.0
    notes = [r.getMessage() for r in caplog.records if "last batch of 1 sentence" in r.getMessage()]
    assert len(notes) == 1 and "each epoch trains on 8 examples" in notes[0]


def test_one_triplet_batch_is_kept(tmp_path, tiny_bert_dir):
    """A 1-row batch with a hard negative has 2 candidates: it is a valid batch and is not dropped."""
    train = tmp_path / "five.tsv"
    s = random_sentences(15)
    train.write_text("sent0\tsent1\thard_neg\n" + "".join(f"{s[i]}\t{s[i + 5]}\t{s[i + 10]}\n" for i in range(5)))
    trainer = run_training(_args_b4(tiny_bert_dir, train, tmp_path / "out", "--num_train_epochs", "1"))
    assert trainer.state.global_step == 2  # batches of 4 and 1


def test_max_seq_length_above_model_positions_is_refused(tmp_path, tiny_bert_dir):
    """The tiny BERT has 64 positions; a sentence of 80 words with --max_seq_length 100 would index past them."""
    train = tmp_path / "long.txt"
    train.write_text("\n".join(random_sentences(7)) + "\n" + " ".join(["dog"] * 80) + "\n")
    out = tmp_path / "out"
    msg = training_error(_args_b4(tiny_bert_dir, train, out, "--max_seq_length", "100", "--max_steps", "2"))
    assert "--max_seq_length 100 is more than the 64 tokens" in msg and "use --max_seq_length 64 or less" in msg
    assert not out.exists()
    # at the limit it trains
    trainer = run_training(_args_b4(tiny_bert_dir, train, out, "--max_seq_length", "64", "--max_steps", "2"))
    assert trainer.state.global_step == 2


@pytest.mark.parametrize("steps", ["0", "-2"])
def test_max_steps_that_train_nothing_are_refused_in_one_line(tmp_path, tiny_bert_dir, steps, monkeypatch):
    """HF's Trainer reads --max_steps 0 as "not set" and still takes an optimizer step; zero steps is refused before
    anything is built or written (-1, the default, still means --num_train_epochs)."""
    from simcse.training import train as train_mod

    def no_build(*args):
        raise AssertionError("the run was built although --max_steps trains nothing")

    monkeypatch.setattr(train_mod, "build", no_build)
    train = tmp_path / "t.txt"
    train.write_text("\n".join(random_sentences(16)) + "\n")
    out = tmp_path / "out"
    msg = training_error(_args_b4(tiny_bert_dir, train, out, "--max_steps", steps))
    assert msg == (f"error: --max_steps {steps} trains nothing: give a positive number of optimizer steps, or -1 "
                   "(the default) to train --num_train_epochs")
    assert not out.exists()


def _eval_run_args(model_dir, train_file, out, senteval, *extra):
    return _args(model_dir, train_file, out, "--max_steps", "4", "--eval_strategy", "steps", "--eval_steps", "2",
                 "--save_strategy", "steps", "--save_steps", "2", "--metric_for_best_model", "stsb_spearman",
                 "--load_best_model_at_end", "true", "--senteval_dir", str(senteval), "--pooler_type", "avg",
                 "--eval_before_training", "true", "--test_after_training", "true", "--disable_tqdm", "true", *extra)


def test_final_folder_holds_the_model_only_with_keep_checkpoints_false(tmp_path, tiny_bert_dir, train_txt, capsys):
    """--keep_checkpoints false (the paper and CPU default configs' value): after the final save the checkpoint-N folders are
    removed, the output says so; by default (HF Trainer's behaviour) they stay and the output names them. Each
    evaluation starts with a progress line; the STS-B dev change is printed from the measured values."""
    from conftest import write_senteval

    senteval = write_senteval(tmp_path / "downstream")
    out = tmp_path / "clean"
    main(_eval_run_args(tiny_bert_dir, train_txt, out, senteval, "--keep_checkpoints", "false"))
    printed = capsys.readouterr().out
    assert not list(out.glob("checkpoint-*")) and not list(out.glob(".checkpoint-*"))
    assert (out / "model.safetensors").is_file() and (out / "README.md").is_file()
    assert "[simcse] checkpoints:   removed after the final save (--keep_checkpoints false)" in printed
    for step in (0, 2, 4):
        assert f"[simcse] evaluating at step {step}: STS-B and SICK-R dev" in printed
    results = json.loads((out / "simcse_results.json").read_text())
    before, after = results["before"]["eval_stsb_spearman"], results["after"]["final_stsb_spearman"]
    assert (f"[simcse] STS-B dev: {100 * before:.2f} before training -> {100 * after:.2f} after "
            f"({100 * (after - before):+.2f})") in printed
    assert "[simcse] before training (dev; the starting model with pooler avg)" in printed

    kept = tmp_path / "kept"
    main(_eval_run_args(tiny_bert_dir, train_txt, kept, senteval))
    printed = capsys.readouterr().out
    names = sorted(p.name for p in kept.glob("checkpoint-*"))
    assert names, "HF Trainer's default keeps checkpoints"
    assert f"[simcse] checkpoints:   kept in {(kept / names[0]).resolve()}" in printed


def test_packaged_configs_remove_checkpoints_and_the_cpu_default_uses_the_models_own_pooling():
    """The configs leave a clean model folder; the unsupervised CPU default trains all-MiniLM-L6-v2 with its own
    (mean) pooling, so the run starts from the model's own score; the GPU configs keep the paper's cls recipe."""
    from pathlib import Path

    from simcse.training.config import load_config

    configs = Path(__file__).resolve().parents[2] / "configs"
    paper_and_cpu = sorted(configs.glob("*sup_*.json"))  # the paper's eight runs and the two CPU defaults
    assert len(paper_and_cpu) == 10
    for f in paper_and_cpu:
        assert load_config(f)["keep_checkpoints"] is False, f.name
    cfg = load_config(configs / "unsup_cpu_minilm.json")
    assert cfg["pooler_type"] == "avg" and not cfg.get("mlp_only_train")
    for name in ("unsup_bert_base", "unsup_roberta_base"):
        cfg = load_config(configs / f"{name}.json")
        assert (cfg["pooler_type"], cfg["mlp_only_train"]) == ("cls", True), name


def _fake_python(tmp_path):
    """A PYTHON for scripts/launch_train.sh that prints the scripts/train.py command line instead of training."""
    import sys

    fake = tmp_path / "fakepython"
    fake.write_text(f'#!/bin/sh\nif [ "$1" = scripts/train.py ]; then shift; echo "TRAIN $*"; exit 0; fi\n'
                    f'exec {sys.executable} "$@"\n')
    fake.chmod(0o755)
    return fake


@pytest.mark.parametrize("env, expected", [
    ({"MAX_STEPS": "20"}, "--output_dir result/unsup-simcse-minilm-cpu-steps20"),
    ({"MAX_STEPS": "20", "OUTPUT_DIR": "result/mine"}, "--output_dir result/mine"),
    ({}, None),
])
def test_short_form_of_the_example_writes_its_own_folder(tmp_path, train_txt, env, expected):
    import os
    import subprocess
    from pathlib import Path

    repo = Path(__file__).resolve().parents[2]
    run = subprocess.run(["bash", "scripts/run_unsup_example.sh"], cwd=repo, capture_output=True, text=True,
                         env={**os.environ, "PYTHON": str(_fake_python(tmp_path)), "NUM_GPU": "0",
                              "TRAIN_FILE": str(train_txt), **env}, timeout=120)
    assert run.returncode == 0, run.stderr
    line = next(x for x in run.stdout.splitlines() if x.startswith("TRAIN "))
    if expected is None:
        assert "--output_dir" not in line  # the config's output_dir applies
    else:
        assert line.endswith(expected) or f"{expected} " in line, line


def test_training_on_a_cpu_only_machine_warns_nothing_of_its_own(tmp_path, tiny_bert_dir, train_txt, monkeypatch):
    """HF's default --dataloader_pin_memory true made torch warn at every DataLoader on a machine without an
    accelerator; the trainer turns pinning off there. --gradient_checkpointing is passed under today's name."""
    import warnings

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    argv = [a for a in _args(tiny_bert_dir, train_txt, tmp_path / "out", "--max_steps", "2", "--pooler_type", "avg",
                             "--gradient_checkpointing", "true")]
    for flag in ("--dataloader_pin_memory", "--use_cpu"):  # HF's defaults (pinning on), as the reference's scripts
        i = argv.index(flag)
        del argv[i:i + 2]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        main(argv)
    ours = [w for w in caught if "pin_memory" in str(w.message) or "gradient_checkpointing" in str(w.message)]
    assert not ours, [str(w.message) for w in ours]


def test_a_resumed_run_says_how_many_steps_it_trained(tmp_path, tiny_bert_dir, train_txt, capsys):
    out = tmp_path / "out"
    main(_argv(tiny_bert_dir, train_txt, out, "--max_steps", "2", "--save_strategy", "steps", "--save_steps", "2"))
    assert "[simcse] trained 2 steps in" in capsys.readouterr().out
    main(_argv(tiny_bert_dir, train_txt, out, "--max_steps", "3", "--resume_from_checkpoint", str(out / "checkpoint-2")))
    assert "[simcse] trained 1 steps (steps 3-3, resumed from step 2) in" in capsys.readouterr().out


def test_bootstrap_intervals_on_the_training_lines(tmp_path, tiny_bert_dir, train_txt, capsys):
    """--bootstrap N: the before / after (dev) and test lines carry 95% intervals that hold the printed values;
    simcse_results.json records them."""
    from conftest import write_senteval

    senteval = write_senteval(tmp_path / "downstream")
    out = tmp_path / "out"
    main(_eval_run_args(tiny_bert_dir, train_txt, out, senteval, "--bootstrap", "200"))
    printed = capsys.readouterr().out
    results = json.loads((out / "simcse_results.json").read_text())
    for section, prefix in (("before", "eval_"), ("after", "final_"), ("test", "test_")):
        value, (low, high) = results[section][f"{prefix}stsb_spearman"], results[section][f"{prefix}stsb_spearman_ci"]
        assert low <= value <= high
        assert f"{prefix}stsb_spearman={value:.4f} [{low:.4f}, {high:.4f}]" in printed
    assert "error: --bootstrap" in training_error(_argv(tiny_bert_dir, train_txt, tmp_path / "b", "--bootstrap", "1"))


def test_the_last_lines_name_an_earlier_runs_checkpoints_apart(tmp_path, capsys):
    import os
    import time

    from simcse.training.train import _print_next_steps

    (tmp_path / "checkpoint-3").mkdir()
    os.utime(tmp_path / "checkpoint-3", (time.time() - 1000, time.time() - 1000))
    (tmp_path / "checkpoint-5").mkdir()
    _print_next_steps(str(tmp_path), True, since=time.time() - 10)
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("[simcse] checkpoints:"))
    assert f"kept in {tmp_path.resolve() / 'checkpoint-5'}; from before this run: {tmp_path.resolve() / 'checkpoint-3'}" in line
