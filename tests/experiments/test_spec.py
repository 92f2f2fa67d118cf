"""Specs: what is refused before any run, in one line naming the input (simcse.experiments.spec)."""
from __future__ import annotations

import json

import pytest
from experiment_world import tiny_world, write_spec  # noqa: F401  (fixture)

from simcse.experiments import SpecError, load_spec, plan
from simcse.experiments import runs as R
from simcse.experiments.spec import list_specs, run_digest


def test_unknown_arm_option_is_named(tmp_path, tiny_world):
    path = write_spec(tmp_path, tiny_world, arms={"a": {}, "odd": {"learning_rat": 1e-3}})
    with pytest.raises(SpecError, match=r"arm 'odd': 'learning_rat' is not an option of simcse train"):
        load_spec(path)


def test_bad_arm_value_is_named(tmp_path, tiny_world):
    path = write_spec(tmp_path, tiny_world, arms={"a": {}, "neg": {"max_steps": "many"}})
    with pytest.raises(SpecError, match=r"arm 'neg'.*max_steps"):
        load_spec(path)


def test_duplicate_seeds(tmp_path, tiny_world):
    with pytest.raises(SpecError, match=r"seed 2 is listed 2 times"):
        load_spec(write_spec(tmp_path, tiny_world, seeds=[1, 2, 2]))


def test_baseline_must_be_an_arm(tmp_path, tiny_world):
    with pytest.raises(SpecError, match=r"baseline 'c' is not an arm; expected one of \['a', 'b'\]"):
        load_spec(write_spec(tmp_path, tiny_world, baseline="c"))


def test_runner_owned_options_and_unknown_keys(tmp_path, tiny_world):
    with pytest.raises(SpecError, match=r"arm 'a' sets 'seed'"):
        load_spec(write_spec(tmp_path, tiny_world, arms={"a": {"seed": 3}}))
    with pytest.raises(SpecError, match=r"unknown key 'arm'"):
        load_spec(write_spec(tmp_path, tiny_world, arm={}))
    with pytest.raises(SpecError, match=r"evaluation.split must be 'test' or 'dev'"):
        load_spec(write_spec(tmp_path, tiny_world, evaluation={"split": "train"}))
    with pytest.raises(SpecError, match=r"'options' has 'nope'"):
        load_spec(write_spec(tmp_path, tiny_world, options={"nope": 1}))


def test_runs_resolve_base_spec_and_arm_options(tmp_path, tiny_world):
    spec = load_spec(write_spec(tmp_path, tiny_world, options={"max_steps": 5},
                                arms={"a": {}, "b": {"learning_rate": 1e-3, "max_seq_length": None}}))
    runs = {r.key: r for r in spec.runs()}
    assert list(runs) == ["a/seed1", "a/seed2", "b/seed1", "b/seed2"]
    assert runs["a/seed1"].options["max_steps"] == 5 and runs["a/seed1"].options["seed"] == 1
    assert runs["b/seed2"].options["learning_rate"] == 1e-3 and "max_seq_length" not in runs["b/seed2"].options
    assert len({r.digest for r in runs.values()}) == 4


def test_spec_changed_under_existing_folder_names_the_field(tmp_path, tiny_world):
    out = tmp_path / "out"
    spec = load_spec(write_spec(tmp_path, tiny_world))
    for run in spec.runs():
        R.prepare(out, run)
    assert plan(spec, out)  # the same spec: accepted
    changed = load_spec(write_spec(tmp_path, tiny_world, arms={"a": {}, "b": {"learning_rate": 2e-3}}))
    with pytest.raises(R.RunConflict, match=r"runs/b/seed1 holds a run of another spec \(options.learning_rate: "
                                           r"0.001 -> 0.002\)"):
        plan(changed, out)


def test_digest_is_stable_and_order_free():
    assert run_digest({"a": 1, "b": [1, 2]}) == run_digest({"b": [1, 2], "a": 1})
    assert run_digest({"a": 1}) != run_digest({"a": 2})


def test_packaged_specs_parse():
    from simcse.experiments.spec import resolve_spec, parse_spec

    names = list_specs()
    assert "cpu_default_seeds" in names
    for name in names:
        spec = parse_spec(json.loads(resolve_spec(name).read_text()), name)
        assert spec.baseline in spec.arms and len(set(spec.seeds)) == len(spec.seeds)


def test_sentence_transformers_arm_options_are_checked_before_any_run(tmp_path, tiny_world):
    st = {"kind": "sentence_transformers", "model_name_or_path": str(tiny_world / "tiny"),
          "train_file": str(tiny_world / "pairs.csv"), "loss": "CoSENTLoss", "loss_args": {"scale": 20.0}}
    spec = load_spec(write_spec(tmp_path, tiny_world, arms={"a": {}, "st": st}))
    run = next(r for r in spec.runs() if r.arm == "st")
    assert run.kind == "sentence_transformers" and run.options["loss"] == "CoSENTLoss" and run.options["seed"] == 1
    with pytest.raises(SpecError, match=r"arm 'st': 'temp' is not an option of a sentence_transformers arm"):
        load_spec(write_spec(tmp_path, tiny_world, arms={"a": {}, "st": {**st, "temp": 0.05}}))
    with pytest.raises(SpecError, match=r"arm 'st': loss 'CosineLoss' is not one of"):
        load_spec(write_spec(tmp_path, tiny_world, arms={"a": {}, "st": {**st, "loss": "CosineLoss"}}))
    with pytest.raises(SpecError, match=r"arm 'st': 'config' must be a config name or file \(a sentence_transformers"):
        load_spec(write_spec(tmp_path, tiny_world, arms={"a": {}, "st": {**st, "config": "unsup_cpu_minilm"}}))


# ---------------------------------------------------------------------- the whole spec, checked before any run
def _refused_before_any_run(path, out, match: str) -> None:
    from simcse.experiments import run_experiment

    with pytest.raises(SpecError, match=match):
        run_experiment(path, out)
    assert not out.exists()  # nothing started, nothing written


def test_a_key_given_twice_is_refused(tmp_path, tiny_world):
    base = json.dumps(str(tiny_world / "base.json"))
    text = ('{"base": %s, "seeds": [1], "arms": {"a": {}, "b": {"learning_rate": 1e-3}, "b": {"learning_rate": 2e-3}},'
            ' "baseline": "a"}' % base)
    (tmp_path / "twice.json").write_text(text)
    _refused_before_any_run(tmp_path / "twice.json", tmp_path / "out", r"twice.json: cannot be read as JSON: key 'b' is given twice in one object")
    (tmp_path / "seeds.json").write_text('{"base": %s, "seeds": [1], "seeds": [2], "arms": {"a": {}}, "baseline": "a"}'
                                         % base)
    with pytest.raises(SpecError, match=r"key 'seeds' is given twice"):
        load_spec(tmp_path / "seeds.json")


def test_a_seed_out_of_the_generators_range_is_refused(tmp_path, tiny_world):
    path = write_spec(tmp_path, tiny_world, seeds=[1, 4294967296])
    _refused_before_any_run(path, tmp_path / "out", r"each of 'seeds' must be an integer in \[0, 4294967295\], "
                                                    r"got 4294967296$")
    assert load_spec(write_spec(tmp_path, tiny_world, seeds=[4294967295])).seeds == [4294967295]
    from simcse.training.build import SetupError
    from simcse.training.parser import arguments_from

    with pytest.raises(SetupError, match=r"--seed must be an integer in \[0, 4294967295\], got 4294967296"):
        arguments_from({"output_dir": str(tmp_path / "o"), "model_name_or_path": "x", "seed": 2**32,
                        "train_file": str(tiny_world / "train.txt")})


@pytest.mark.parametrize("meta, match", [
    ({"_paper": "76.3"}, r"arm 'b': _paper must be a number \(the paper's score x 100\) or null, got '76.3'"),
    ({"_label": 3}, r"arm 'b': _label must be a string, got 3"),
    ({"_versus": ["a"]}, r"arm 'b': _versus must be another arm's name, got \['a'\]"),
])
def test_the_report_metadata_types_are_checked_before_any_run(tmp_path, tiny_world, meta, match):
    path = write_spec(tmp_path, tiny_world, arms={"a": {}, "b": {"learning_rate": 1e-3, **meta}})
    _refused_before_any_run(path, tmp_path / "out", match)


def test_a_report_value_of_another_type_is_shown_not_fatal():
    from simcse.experiments.report import _fmt

    assert (_fmt(76.3, 1), _fmt(None), _fmt("76.3", 1), _fmt(float("nan"))) == ("76.3", "-", "76.3", "-")


def test_an_objective_that_needs_another_pooler_is_refused_per_arm(tmp_path, tiny_world):
    path = write_spec(tmp_path, tiny_world, arms={"a": {}, "prompt": {"loss": "promptbert"}})
    _refused_before_any_run(path, tmp_path / "out", r"arm 'prompt': --loss promptbert needs --pooler_type prompt_mask "
                                                    r"\(or prompt_mask_before_pooler\), got 'avg'$")
    ok = {"loss": "promptbert", "pooler_type": "prompt_mask"}
    assert load_spec(write_spec(tmp_path, tiny_world, arms={"a": {}, "prompt": ok})).arms["prompt"].options == ok


def test_arms_that_resolve_to_the_same_run_are_refused(tmp_path, tiny_world):
    path = write_spec(tmp_path, tiny_world, arms={"a": {}, "b": {"learning_rate": 1e-3}, "again": {"max_steps": 3}})
    _refused_before_any_run(path, tmp_path / "out", r"arms 'a' and 'again' resolve to the same options")


def test_report_resamples_out_of_range_is_refused(tmp_path, capsys):
    from simcse.experiments.experiment import main

    assert main(["report", str(tmp_path), "--resamples", "0"]) == 2
    assert capsys.readouterr().err == "error: --resamples must be an integer >= 2, got 0\n"
