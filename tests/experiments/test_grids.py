"""Grids, random search and selection in a spec, without training: the points and their names, the seeded
draws, every bad input refused before anything is written, the tie rule, and Dodge et al.'s expected maximum
against a hand computation and a simulation."""
from __future__ import annotations

import json
import math

import numpy as np
import pytest
from experiment_world import tiny_world, write_spec  # noqa: F401  (fixture)

from simcse.experiments import SpecError, load_spec, run_experiment
from simcse.experiments.selection import budget_curve, choose, expected_max

SELECT = {"metric": "stsb_dev", "seeds": [1, 2], "test_seeds": [3, 4]}


def tuned_spec(tmp_path, world, selection=SELECT, **over):
    """A spec with ``selection`` (so no top-level seeds) over the tiny world."""
    path = write_spec(tmp_path, world, selection=selection, **over)
    raw = json.loads(path.read_text())
    raw.pop("seeds")
    path.write_text(json.dumps(raw))
    return path


def test_grid_points_are_arms_named_from_their_values(tmp_path, tiny_world):
    spec = load_spec(write_spec(tmp_path, tiny_world, arms={
        "a": {"grid": {"learning_rate": [1e-3, 3e-5], "temp": [0.05, 0.1]}}, "b": {"learning_rate": 1e-3}},
        baseline="b"))
    assert list(spec.arms) == ["a@learning_rate=0.001,temp=0.05", "a@learning_rate=0.001,temp=0.1",
                               "a@learning_rate=3e-05,temp=0.05", "a@learning_rate=3e-05,temp=0.1", "b"]
    opts = {r.arm: r.options for r in spec.runs() if r.seed == 1}
    assert opts["a@learning_rate=3e-05,temp=0.1"]["learning_rate"] == 3e-05
    assert opts["a@learning_rate=3e-05,temp=0.1"]["temp"] == 0.1
    assert spec.selection is None and len(spec.runs()) == 5 * 2


def test_random_search_is_seeded_and_in_range(tmp_path, tiny_world):
    def points(seed):
        arms = {"a": {"grid": {"learning_rate": {"log_uniform": [1e-5, 1e-3]}, "temp": [0.05, 0.1]},
                      "sample": 5, "sample_seed": seed}}
        return load_spec(write_spec(tmp_path, tiny_world, arms=arms, baseline="a@x=1"), check=False)

    with pytest.raises(SpecError, match="baseline 'a@x=1' is not an arm"):
        points(0)
    arms = {"a": {"grid": {"learning_rate": {"log_uniform": [1e-5, 1e-3]}, "temp": [0.05, 0.1]}, "sample": 5}}
    one = load_spec(tuned_spec(tmp_path, tiny_world, arms=arms, baseline="a"))
    two = load_spec(tuned_spec(tmp_path, tiny_world, arms=arms, baseline="a"))
    assert list(one.arms) == list(two.arms) and len(one.arms) == 5  # the same draws every time
    lrs = [a.options["learning_rate"] for a in one.arms.values()]
    assert all(1e-5 <= x <= 1e-3 for x in lrs) and len(set(lrs)) == 5
    assert all(a.options["temp"] in (0.05, 0.1) for a in one.arms.values())
    arms["a"]["sample_seed"] = 7
    other = load_spec(tuned_spec(tmp_path, tiny_world, arms=arms, baseline="a"))
    assert list(other.arms) != list(one.arms)


@pytest.mark.parametrize("arms, selection, message", [
    ({"a": {"grid": {"learnig_rate": [1e-3]}}}, SELECT,
     r"arm 'a': grid key 'learnig_rate' is not an option of simcse train; did you mean 'learning_rate'\?"),
    ({"a": {"grid": {}}}, SELECT, r"arm 'a': 'grid' must be a non-empty object"),
    ({"a": {"grid": {"temp": []}}}, SELECT, r"arm 'a': grid 'temp' must be a non-empty list of values, got \[\]"),
    ({"a": {"grid": {"seed": [1, 2]}}}, SELECT, r"arm 'a': the grid varies 'seed', which the runner sets itself"),
    ({"a": {"grid": {"output_dir": ["x"]}}}, SELECT, r"the grid varies 'output_dir', which the runner sets"),
    ({"a": {"grid": {"temp": {"uniform": [0.01, 0.1]}}}}, SELECT, r"only a random search can draw from"),
    ({"a": {"grid": {"temp": [0.05]}}}, {**SELECT, "metric": "stsb_test"},
     r"selection.metric 'stsb_test' is not a score the evaluation produces on a dev split; expected one of"),
    ({"a": {"grid": {"temp": [0.05]}}}, {**SELECT, "test_seeds": [2, 3]},
     r"selection.test_seeds \[2, 3\] overlap selection.seeds \[1, 2\] \(seed 2\)"),
    ({"a": {"grid": {"temp": [0.05]}}}, {**SELECT, "budget_hours": 1, "seconds_per_run": 1000},
     r"the grid needs 4 runs \(1 grid points x 2 selection seeds \+ 1 methods x 2 test seeds\) x 1000 s per run "
     r"\(selection.seconds_per_run\) = 1.11 h, over selection.budget_hours 1"),
])
def test_bad_input_is_one_line_before_anything_is_written(tmp_path, tiny_world, arms, selection, message):
    path = tuned_spec(tmp_path, tiny_world, selection, arms=arms, baseline="a")
    out = tmp_path / "out"
    with pytest.raises(SpecError, match=message) as e:
        run_experiment(path, out)
    assert "\n" not in str(e.value) and str(path) in str(e.value)
    assert not out.exists()


def test_seeds_beside_selection_and_grid_baseline_without_selection_are_refused(tmp_path, tiny_world):
    with pytest.raises(SpecError, match="'seeds' and 'selection' both given"):
        load_spec(write_spec(tmp_path, tiny_world, arms={"a": {}}, selection=SELECT))
    with pytest.raises(SpecError, match="baseline 'a' has a grid: name one of its points"):
        load_spec(write_spec(tmp_path, tiny_world, arms={"a": {"grid": {"temp": [0.05, 0.1]}}}))


def test_choice_is_the_best_mean_and_a_tie_goes_to_the_grid_order(tmp_path, tiny_world):
    spec = load_spec(tuned_spec(tmp_path, tiny_world, baseline="a", arms={"a": {"grid": {"temp": [0.05, 0.1, 0.2]}}}),
                     check=False)
    rows = [{"point": p, "values": {}, "mean": m} for p, m in zip(spec.arms, (70.0, 72.5, 72.5))]
    rows.append({"point": "a@temp=0.3", "values": {}, "mean": None})  # a seed missing: left out, said
    c = choose(spec, tmp_path, {"a": rows})["a"]
    assert c["point"] == "a@temp=0.1" and c["tied"] == ["a@temp=0.2"] and c["left_out"] == ["a@temp=0.3"]


def test_expected_max_against_a_hand_computation_and_a_simulation():
    # values 1, 2, 3, k = 2: P(max=1) = 1/9, P(max=2) = 3/9, P(max=3) = 5/9
    mean, std = expected_max([3.0, 1.0, 2.0], 2)
    assert mean == pytest.approx(22 / 9)
    assert std == pytest.approx(math.sqrt((1 + 3 * 4 + 5 * 9) / 9 - (22 / 9) ** 2))
    assert expected_max([5.0, 1.0], 1)[0] == pytest.approx(3.0)  # one draw: the plain mean
    values = np.array([70.1, 71.4, 68.2, 73.0, 73.0, 66.5])
    rng = np.random.default_rng(0)
    for k in (1, 3, 6, 10):
        draws = rng.choice(values, size=(200_000, k), replace=True).max(axis=1)
        mean, std = expected_max(values.tolist(), k)
        assert mean == pytest.approx(draws.mean(), abs=0.02)
        assert std == pytest.approx(draws.std(), abs=0.02)
    curve = budget_curve(values.tolist())
    assert [c["k"] for c in curve] == [1, 2, 3, 4, 5, 6]
    assert all(a["expected"] <= b["expected"] for a, b in zip(curve, curve[1:]))
    with pytest.raises(ValueError, match="at least one finite value"):
        expected_max([], 1)
