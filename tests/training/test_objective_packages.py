"""A researcher's objective in a package outside simcse (``tests/fixtures/objective_pkg``: the module
``simcse_dcl.dcl`` and a dist-info that registers the entry point ``dcl`` of the ``simcse.objectives`` group),
trained by every entry point: ``simcse train --loss simcse_dcl.dcl:DCL``, ``--loss dcl`` (the entry point), the
Python pipeline :func:`simcse.training.train.run_training`, the ablation runner and the methods benchmark; its
name, class, arguments, learned temperature and citation recorded in the folder; its temperature trained at its
own learning rate."""
from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import objective_argv, run_training, write_corpus, write_senteval

PKG = Path(__file__).resolve().parents[1] / "fixtures" / "objective_pkg"
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def on_path(monkeypatch):
    monkeypatch.syspath_prepend(str(PKG))
    yield
    for name in [m for m in sys.modules if m.startswith("simcse_dcl")]:
        del sys.modules[name]
    from simcse.training.objectives import OBJECTIVES

    for key in [k for k in OBJECTIVES if k == "dcl" or k.startswith("simcse_dcl")]:
        del OBJECTIVES[key]


def _record(out: Path) -> dict:
    return json.loads((out / "simcse_training_args.json").read_text())


def test_a_spec_trains_and_the_folder_records_what_trained(on_path, tmp_path, tiny_bert_dir):
    """--loss package.module:Class: trained 3 steps; the temperature moves at its declared rate (1e-2), not the
    encoder's (1e-5); the record and the card name the objective, its arguments, the learned value and citation."""
    corpus = write_corpus(tmp_path)
    out = tmp_path / "o"
    argv = objective_argv(tiny_bert_dir, corpus, out, "simcse_dcl.dcl:DCL", {"uniformity_weight": 0.1},
                          "--max_steps", "3", "--learning_rate", "1e-5", "--weight_decay", "0.1",
                          "--keep_checkpoints", "false")
    trainer = run_training(argv)
    log_temp = float(trainer.objective.log_temp.detach())
    assert abs(log_temp - math.log(0.05)) > 1e-2  # Adam moves ~lr per step: 3 steps at 1e-2, not at 1e-5
    group = next(g for g in trainer.optimizer.param_groups if any(p is trainer.objective.log_temp for p in g["params"]))
    assert group["weight_decay"] == 0.0 and len(group["params"]) == 1
    logs = [h for h in trainer.state.log_history if "loss" in h]
    assert all("loss_decoupled" in h and "loss_uniformity" in h and "temperature" in h for h in logs)
    assert not any("loss_temperature" in h for h in logs)
    rec = _record(out)
    assert rec["loss"] == "dcl" and rec["loss_class"] == "simcse_dcl.dcl:DCL"
    assert json.loads(rec["loss_args"]) == {"temp": 0.05, "weighting_sigma": None, "uniformity_weight": 0.1, "temp_lr": 0.01}
    assert json.loads(rec["loss_learned"])["log_temp"] == pytest.approx(log_temp, abs=1e-6)
    card = (out / "README.md").read_text()
    assert "trained with the `dcl` objective (`simcse_dcl.dcl:DCL`)" in card and "yeh2022decoupled" in card
    assert "| loss_args |" in card and "trained with SimCSE" not in card


def test_the_entry_point_name_trains_from_the_command_line_in_a_fresh_process(tmp_path, tiny_bert_dir):
    """`simcse train --loss dcl` finds the installed entry point (PYTHONPATH holds the package and its dist-info)."""
    corpus = write_corpus(tmp_path)
    out = tmp_path / "o"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(PKG), str(REPO)]), "HF_HUB_OFFLINE": "1"}
    argv = objective_argv(tiny_bert_dir, corpus, out, "dcl", {"weighting_sigma": 0.5}, "--max_steps", "2")
    proc = subprocess.run([sys.executable, "-m", "simcse", "train", *argv], capture_output=True, text=True, env=env,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert _record(out)["loss_class"] == "simcse_dcl.dcl:DCL"
    bad = subprocess.run([sys.executable, "-m", "simcse", "train",
                          *objective_argv(tiny_bert_dir, corpus, tmp_path / "b", "dcll", {}, "--max_steps", "2")],
                         capture_output=True, text=True, env=env, timeout=600)
    assert bad.returncode != 0 and "'dcl'" in bad.stderr and "package.module:ClassName" in bad.stderr
    assert not (tmp_path / "b").exists()


def test_the_python_pipeline_runs_what_the_command_runs(on_path, tmp_path, tiny_bert_dir, capsys):
    """run_training(model_args, data_args, training_args): before/after dev evaluations, test, results, card, lines;
    overwrite_output_dir given with the training arguments, as HF users give it."""
    from simcse.training.arguments import DataTrainingArguments, ModelArguments
    from simcse.training.train import run_training as pipeline
    from simcse.training.training_args import SimCSETrainingArguments

    senteval = write_senteval(tmp_path / "downstream")
    out = tmp_path / "o"
    out.mkdir()
    (out / "old.txt").write_text("an earlier run")
    model_args = ModelArguments(model_name_or_path=str(tiny_bert_dir), pooler_type="avg", loss="dcl")
    data_args = DataTrainingArguments(train_file=str(write_corpus(tmp_path)), senteval_dir=str(senteval))
    training_args = SimCSETrainingArguments(output_dir=str(out), overwrite_output_dir=True, max_steps=2,
                                            per_device_train_batch_size=8, use_cpu=True, report_to="none",
                                            save_strategy="no", eval_strategy="no", save_on_signal="none")
    assert training_args.per_device_eval_batch_size == 128  # not HF's 8
    results = pipeline(model_args, data_args, training_args)
    assert set(results) == {"before", "train", "after", "test"}
    assert json.loads((out / "simcse_results.json").read_text())["test"] == results["test"]
    printed = capsys.readouterr().out
    assert "[simcse] before training" in printed and "[simcse] after training (test)" in printed
    assert _record(out)["loss"] == "dcl"


@pytest.mark.slow
def test_the_ablation_runner_and_the_methods_benchmark_train_it(on_path, monkeypatch, tmp_path, tiny_bert_dir, capsys):
    """The methods benchmark takes the entry-point name (its workers are fresh processes: PYTHONPATH holds the
    package); the ablation runner trains a row with --loss from the passthrough and keeps a config's loss_args
    JSON object as JSON."""
    from conftest import load_script
    from scripts.benchmarks import methods as bench
    from simcse.research.ablation import _pairs

    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(PKG), os.environ.get("PYTHONPATH", "")]))
    corpus = write_corpus(tmp_path)
    results = bench.main(["--methods", "dcl", "--model", str(tiny_bert_dir), "--data", str(corpus), "--batch_size", "4",
                          "--steps", "1", "--warmup", "1", "--max_seq_length", "16", "--threads", "1",
                          "--allow_busy"])
    assert set(results) == {"simcse", "dcl"} and results["dcl"]["step_s"] > 0
    with pytest.raises(SystemExit, match="no_such"):
        bench.method_options("no_such")

    data = write_senteval(tmp_path / "downstream")
    out = tmp_path / "abl"
    res = load_script("run_ablation", "simcse_run_ablation").main(
        ["--table", "3", "--rows", "p0.1", "--model_name_or_path", str(tiny_bert_dir), "--train_file", str(corpus),
         "--senteval_dir", str(data), "--max_steps", "2", "--per_device_train_batch_size", "8", "--no_baseline",
         "--seeds", "42", "--output_dir", str(out), "--", "--loss", "dcl", "--loss_args", '{"temp_lr": 0.001}'])
    assert res["results"]["p0.1/seed42"]["train"]["steps"] == 2
    options = json.loads((out / "runs" / "p0.1" / "seed42" / "config.json").read_text())
    assert options["loss"] == "dcl" and options["loss_args"] == {"temp_lr": 0.001}  # the JSON object stays JSON
    assert _pairs(["--loss", "simcse_dcl.dcl:DCL", "--loss_args", '{"temp_lr": 0.001}']) == {
        "loss": "simcse_dcl.dcl:DCL", "loss_args": {"temp_lr": 0.001}}


@pytest.mark.parametrize("wrap", [["--fixed_dropout", "true"],
                                  ["--loss", "matryoshka", "--loss_args",
                                   '{"loss": "simcse_dcl.dcl:DCL", "loss_args": {"temp_lr": 0.01}, "matryoshka_dims": [32, 16]}']])
def test_a_wrapped_objective_keeps_its_learning_rate_class_and_citation(on_path, tmp_path, tiny_bert_dir, wrap):
    corpus = write_corpus(tmp_path)
    out = tmp_path / "o"
    argv = objective_argv(tiny_bert_dir, corpus, out, "simcse_dcl.dcl:DCL", {"temp_lr": 0.01}, "--max_steps", "2",
                          "--learning_rate", "1e-5", "--pooler_type", "avg")
    if "matryoshka" in wrap:  # the wrapper's own --loss / --loss_args replace the objective's
        argv = argv[:argv.index("--loss")] + argv[argv.index("--loss") + 4:]
    trainer = run_training([*argv, *wrap])
    log_temp = trainer.objective.inner.log_temp
    group = next(g for g in trainer.optimizer.param_groups if any(p is log_temp for p in g["params"]))
    assert group["initial_lr"] == 0.01 and group["weight_decay"] == 0.0  # the scheduler's start: its declared rate
    assert abs(float(log_temp.detach()) - math.log(0.05)) > 5e-3  # its own rate, not the encoder's 1e-5
    rec = _record(out)
    assert rec["loss_class"] == "simcse_dcl.dcl:DCL" and rec["loss_wrappers"] == (wrap[0] if wrap[0] != "--loss" else "--loss matryoshka")
    assert "inner.log_temp" in json.loads(rec["loss_learned"])
    card = (out / "README.md").read_text()
    assert "yeh2022decoupled" in card and "(`simcse_dcl.dcl:DCL`), wrapped by" in card
