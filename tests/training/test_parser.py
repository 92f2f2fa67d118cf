"""simcse.training.parser and SimCSETrainingArguments: one parse of the command line (config files as defaults,
legacy names as aliases), every option checked before anything is loaded, the precision rule, the help, the
Python entry (the docs/training.md example, run here) and a setup that does not change its inputs."""
from __future__ import annotations

import dataclasses
import json
import logging
import re
from pathlib import Path

import pytest
import torch

import simcse.training.precision as precision
from conftest import random_sentences, training_error
from simcse.training import train as train_mod
from simcse.training.parser import parse_args, without_resume

REPO = Path(__file__).resolve().parents[2]
AMX = "processor\t: 0\nflags\t\t: fpu sse avx2 avx512f avx512_bf16 amx_bf16 amx_tile\n"


def _base(model, train_file, out):
    return ["--model_name_or_path", str(model), "--train_file", str(train_file), "--output_dir", str(out),
            "--eval_before_training", "false", "--test_after_training", "false", "--report_to", "none"]


@pytest.fixture
def no_build(monkeypatch):
    def refuse(*args):
        raise AssertionError("the run was built although an option is bad")

    monkeypatch.setattr(train_mod, "build", refuse)


# -------------------------------------------------------------- every option checked before anything is loaded
@pytest.mark.parametrize("extra, expected", [
    (["--learning_rate", "-1"], "--learning_rate must be a finite number > 0, got -1.0"),
    (["--learning_rate", "nan"], "--learning_rate must be a finite number > 0"),
    (["--gradient_accumulation_steps", "0"], "--gradient_accumulation_steps must be a positive int, got 0"),
    (["--num_train_epochs", "0"], "--num_train_epochs must be a finite number > 0 (or give --max_steps N)"),
    (["--weight_decay", "-1"], "--weight_decay must be a finite number >= 0, got -1.0"),
    (["--max_grad_norm", "-1"], "--max_grad_norm must be a finite number >= 0 (0 = no clipping), got -1.0"),
    (["--per_device_eval_batch_size", "0"], "--per_device_eval_batch_size must be a positive int, got 0"),
    (["--per_device_train_batch_size", "0"], "--per_device_train_batch_size must be a positive int, got 0"),
    (["--warmup_steps", "-5"], "--warmup_steps must be a finite number >= 0"),
    (["--adam_beta1", "1.5"], "--adam_beta1 must be a finite number >= 0 and < 1, got 1.5"),
    (["--seed", "-1"], "--seed must be an integer in [0, 4294967295], got -1"),
    (["--dataloader_num_workers", "-1"], "--dataloader_num_workers must be an integer >= 0, got -1"),
    (["--logging_steps", "0"], "--logging_steps must be a finite number > 0"),
])
def test_bad_training_options_are_one_error_line_before_anything_is_loaded(tmp_path, tiny_bert_dir, train_txt,
                                                                           no_build, extra, expected):
    out = tmp_path / "o"
    msg = training_error(_base(tiny_bert_dir, train_txt, out) + extra)
    assert msg == f"error: {expected}" or msg.startswith(f"error: {expected}"), msg
    assert not out.exists()


def test_num_train_epochs_0_is_fine_when_max_steps_counts(tmp_path, tiny_bert_dir, train_txt):
    _, _, t = parse_args(_base(tiny_bert_dir, train_txt, tmp_path / "o") + ["--num_train_epochs", "0",
                                                                           "--max_steps", "3"])
    assert t.max_steps == 3


# -------------------------------------------------------------------------------------- the precision rule
def _cpu_config(tmp_path, *extra):
    train = tmp_path / "train.txt"
    train.write_text("a\nb\n")
    return parse_args([str(REPO / "configs" / "unsup_cpu_minilm.json"), "--train_file", str(train),
                       "--output_dir", str(tmp_path / "o"), *extra])


@pytest.fixture
def amx_cpu_only(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    real = precision.cpu_bf16_flags
    monkeypatch.setattr(precision, "cpu_bf16_flags", lambda text=None: real(AMX))


def test_fp16_from_a_cpu_config_gets_the_documented_fp16_message(tmp_path, amx_cpu_only, no_build, capsys):
    """The config's bf16 auto is a default, not a choice: --fp16 true is what the user chose."""
    train = tmp_path / "train.txt"
    train.write_text("a\nb\n")
    msg = training_error([str(REPO / "configs" / "unsup_cpu_minilm.json"), "--train_file", str(train),
                          "--output_dir", str(tmp_path / "o"), "--fp16", "true"])
    assert msg.startswith("error: --fp16 needs a CUDA GPU and none is in use here"), msg
    assert "At most one of fp16 and bf16" not in msg and "--bf16 auto" not in capsys.readouterr().out


@pytest.mark.parametrize("bf16_gpu", [True, False])
def test_precision_fp16_on_a_gpu_is_not_overridden_by_a_configs_auto(monkeypatch, bf16_gpu):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda: bf16_gpu)
    said = []
    assert precision.resolve_precision("auto", None, "fp16", False, say=said.append) == (False, True, False)
    assert not said  # nothing left open: no detection
    assert precision.resolve_precision("auto", None, None, False, say=said.append) == (bf16_gpu, False, False)
    if bf16_gpu:
        assert precision.resolve_precision(None, None, "bf16", False) == (True, False, False)
    else:
        with pytest.raises(ValueError, match="this GPU has no bf16 support; pass --precision fp16"):
            precision.resolve_precision(None, None, "bf16", False)


@pytest.mark.parametrize("flag", [["--use_cpu"], ["--no_cuda"], ["--use_cpu", "true"]])
def test_a_bare_use_cpu_makes_auto_ask_the_cpu(tmp_path, monkeypatch, capsys, flag):
    """On a machine whose GPU has no bf16 but whose CPU has AMX, auto with --use_cpu must decide for the CPU."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda: False)
    real = precision.cpu_bf16_flags
    monkeypatch.setattr(precision, "cpu_bf16_flags", lambda text=None: real(AMX))
    _, _, t = _cpu_config(tmp_path, *flag)
    assert t.use_cpu and t.bf16 and not t.fp16
    assert "[simcse] --bf16 auto: CPU has amx_bf16 and avx512_bf16 -> bf16 autocast" in capsys.readouterr().out


def test_precision_auto_and_unknown_values(tmp_path, amx_cpu_only):
    _, _, t = _cpu_config(tmp_path, "--bf16", "false", "--precision", "auto")  # bf16 false is a choice
    assert not t.bf16
    with pytest.raises(train_mod.SetupError, match="--bf16 must be true, false or auto, got 'maybe'"):
        _cpu_config(tmp_path, "--bf16", "maybe")


# --------------------------------------------------------------------------- config files and option aliases
def test_config_options_are_defaults_and_the_command_line_wins(tmp_path, tiny_bert_dir, train_txt, caplog):
    other = tmp_path / "other.txt"
    other.write_text("\n".join(random_sentences(8)) + "\n")
    cfg = tmp_path / "cfg.json"
    cfg.write_text(json.dumps({"model_name_or_path": str(tiny_bert_dir), "train_file": str(other), "temp": 0.1,
                               "evaluation_strategy": "steps", "eval_steps": 7, "report_to": "none",
                               "output_dir": str(tmp_path / "o"), "eval_before_training": False}))
    with caplog.at_level(logging.WARNING, logger="simcse.training.compat"):
        m, d, t = parse_args(["--config", str(cfg), "--temp", "0.07", "--train_file", str(train_txt)])
    assert m.temp == 0.07 and d.train_file == str(train_txt)  # the command line wins
    assert t.eval_strategy == "steps" and t.eval_steps == 7  # a config's transformers-4 key, renamed
    assert [r.getMessage() for r in caplog.records if "--evaluation_strategy" in r.getMessage()]
    cfg.write_text(json.dumps({"model_name_or_path": str(tiny_bert_dir), "tmep": 0.1}))
    msg = training_error([str(cfg), "--train_file", str(train_txt)])
    assert "unknown option 'tmep'" in msg and str(cfg) in msg


def test_resume_option_is_removed_by_the_parser_with_everything_else_kept():
    argv = ["cfg.json", "--temp", "0.05", "--resume_from_checkpoint", "o/checkpoint-3", "--bf16", "--seed=1",
            "--resume_from_checkpoint=o/checkpoint-4", "--max_steps", "-1"]
    assert without_resume(argv) == ["cfg.json", "--temp", "0.05", "--bf16", "--seed=1", "--max_steps", "-1"]


# --------------------------------------------------------------------------------------------------- help
def test_help_shows_simcse_options_and_the_config_mechanism_first_with_defaults(capsys):
    with pytest.raises(SystemExit) as exc:
        train_mod.main(["--help"])
    assert exc.value.code == 0
    short = capsys.readouterr().out
    assert short.index("--config") < short.index("--list_configs") < short.index("--model_name_or_path")
    assert short.index("--model_name_or_path") < short.index("--learning_rate")  # SimCSE's, then HF's
    assert re.search(r"--temp TEMP\s+InfoNCE temperature tau \(> 0\); fills the objective's\s+temp argument\. Unset: the objective's own default\s+\(0\.05 for SimCSE\)\.", short)
    assert re.search(r"\(default:\s+TERM,USR1\)", short) and "--help-all" in short
    assert short.startswith("usage: simcse train ")
    assert "--adam_beta1" not in short and len(short.splitlines()) < 500
    with pytest.raises(SystemExit):
        train_mod.main(["--help-all"])
    full = capsys.readouterr().out
    assert "--adam_beta1" in full and "(default: 0.9)" in full


# --------------------------------------------------------------------------------- setup without mutation
def test_build_changes_none_of_its_inputs_and_gives_the_trainer_its_run_command(tmp_path, tiny_bert_dir):
    from simcse.training.build import build

    train = tmp_path / "nine.txt"
    train.write_text("\n".join(random_sentences(9)) + "\n")  # batch 4: a 1-sentence last batch, dropped
    m, d, t = parse_args(_base(tiny_bert_dir, train, tmp_path / "o") + [
        "--per_device_train_batch_size", "4", "--augmentation", "word_deletion", "--eval_strategy", "no",
        "--use_cpu", "true"])
    before = [dataclasses.asdict(m), dataclasses.asdict(d), t.to_dict()]
    trainer = build(m, d, t, "simcse train --x 1")
    assert [dataclasses.asdict(m), dataclasses.asdict(d), t.to_dict()] == before
    assert trainer.args.dataloader_drop_last and not trainer.args.remove_unused_columns  # derived for the trainer
    assert not t.dataloader_drop_last and t.remove_unused_columns
    assert trainer.run_command == "simcse train --x 1"


@pytest.mark.slow
def test_the_python_entry_of_the_docs_trains(tmp_path, monkeypatch, minilm_dir):
    """docs/training.md, "Training from Python": the example runs as written (in a folder with its data file)."""
    text = (REPO / "docs" / "training.md").read_text()
    section = text[text.index("### Training from Python"):]
    code = section[section.index("```python\n") + len("```python\n"):section.index("```\n", section.index("```python"))]
    monkeypatch.chdir(tmp_path)
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "wiki1m_for_simcse.txt").write_text("\n".join(random_sentences(80)) + "\n")
    scope = {}
    exec(compile(code, "docs/training.md", "exec"), scope)
    assert scope["trainer"].state.global_step == 2
    assert (tmp_path / "result" / "from-python" / "model.safetensors").is_file()
    assert scope["training_args"].output_dir == "result/from-python-config"
    assert scope["model_args"].pooler_type == "avg" and scope["training_args"].max_steps == 2  # config + overrides


def test_the_printed_next_step_evaluates_as_the_readme_does(tmp_path, capsys):
    train_mod._print_next_steps(str(tmp_path))
    line = next(ln for ln in capsys.readouterr().out.splitlines() if "evaluate it:" in ln)
    assert "--task_set sts --mode test" in line
    assert "--task_set sts --mode test" in (REPO / "README.md").read_text()


def test_the_printed_use_line_compares_the_sentences_the_readme_does(tmp_path, capsys):
    import re

    train_mod._print_next_steps(str(tmp_path))
    line = next(ln for ln in capsys.readouterr().out.splitlines() if "use it:" in ln)
    pair = re.search(r"similarity\(('[^']+', '[^']+')\)", line).group(1)
    assert f"m.similarity({pair})" in (REPO / "README.md").read_text()


def test_the_dataclasses_read_boolean_strings_by_the_one_rule(tmp_path):
    """From Python, do_mlm="false" (or use_cpu / overwrite_output_dir "false") is False, as on the command line;
    an unreadable value is refused naming the option."""
    from simcse.training.arguments import DataTrainingArguments, ModelArguments
    from simcse.training.training_args import SimCSETrainingArguments

    train = tmp_path / "t.txt"
    train.write_text("a b c\n")
    assert ModelArguments(model_name_or_path="m", do_mlm="false").do_mlm is False
    data = DataTrainingArguments(train_file=str(train), eval_before_training="no", test_after_training="0")
    assert (data.eval_before_training, data.test_after_training) == (False, False)
    run = SimCSETrainingArguments(output_dir=str(tmp_path / "o"), overwrite_output_dir="false", use_cpu="true",
                                  report_to="none")
    assert (run.overwrite_output_dir, run.use_cpu) == (False, True)
    with pytest.raises(ValueError, match=r"--do_mlm must be true or false .* got 'maybe'"):
        ModelArguments(model_name_or_path="m", do_mlm="maybe")
