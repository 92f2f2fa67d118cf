"""Grids and random search in a spec: one arm, many option sets, each an arm of its own.

An arm may give a ``grid`` (every combination of the listed values is a point)::

    "simcse": {"grid": {"learning_rate": [1e-5, 3e-5, 5e-5], "temp": [0.05, 0.1]}}

or a random search: ``"sample": N`` draws N distinct points from the ``grid``'s space, where a value is a list
(a choice) or a range ``{"log_uniform": [lo, hi]}`` (learning rates), ``{"uniform": [lo, hi]}`` or
``{"int_uniform": [lo, hi]}`` (both ends included); ``"sample_seed"`` (default 0) seeds the draws, so a spec
always draws the same points (every arm with the same space and seed draws the same ones). A drawn float keeps 3
significant digits.

A point is an ordinary arm named from its values, ``<arm>@<option>=<value>,...`` in the grid's key order
(``simcse@learning_rate=3e-05,temp=0.05``): a folder name that stays the same when the grid grows. With the spec's
``selection`` (:mod:`simcse.experiments.selection`) the arm is a *method*, its points are tried on the selection
seeds and the best one is tested; without it every point runs on the spec's seeds like any arm.

:func:`expand_grids` turns a spec's JSON object into one with the points as arms; every error is a
:class:`GridError` line naming the arm and what was expected.
"""
from __future__ import annotations

import difflib
import itertools
import math
import random
import re

GRID_KEYS = ("grid", "sample", "sample_seed")
RANGES = ("log_uniform", "uniform", "int_uniform")
SELECTION_KEYS = {"metric", "seeds", "test_seeds", "budget_hours", "seconds_per_run"}
# a selection metric -> the STS task whose dev split it is (the tasks with a dev split)
METRICS = {"stsb_dev": "STSBenchmark", "sickr_dev": "SICKRelatedness",
           "STSBenchmark": "STSBenchmark", "SICKRelatedness": "SICKRelatedness"}
VALUE_TEXT = re.compile(r"[^A-Za-z0-9_.+\-]")


class GridError(ValueError):
    """A grid, random search or selection that cannot be run (one line; the spec module adds the file)."""


def format_value(value) -> str:
    """A grid value as it appears in a point's name: ``true``/``false``, an int, a float's shortest exact text
    (``3e-05``), a string with characters outside ``[A-Za-z0-9_.+-]`` replaced by ``_``."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return repr(value)
    return VALUE_TEXT.sub("_", str(value))


def point_name(arm: str, values: dict) -> str:
    """``<arm>@<key>=<value>,...`` (:func:`format_value`), keys in the order given."""
    return f"{arm}@" + ",".join(f"{k}={format_value(v)}" for k, v in values.items())


def _train_options() -> list[str]:
    from simcse.training.parser import _types

    import dataclasses

    return sorted({f.name for cls in _types() for f in dataclasses.fields(cls) if f.init})


def _check_key(arm: str, key, kind: str, runner_options) -> None:
    if not isinstance(key, str) or not key:
        raise GridError(f"arm {arm!r}: grid key {key!r} must be an option name")
    if key in runner_options:
        raise GridError(f"arm {arm!r}: the grid varies {key!r}, which the runner sets itself (seeds come from "
                        "'seeds' or selection.seeds / selection.test_seeds); remove it from the grid")
    if key in ("kind", "config") or key.startswith("_"):
        raise GridError(f"arm {arm!r}: the grid varies {key!r}; expected simcse train options (give another "
                        "config as an arm of its own)")
    if kind == "sentence_transformers":
        return  # its options are checked with the arm's (simcse.experiments.st_train)
    from simcse.training.compat import legacy_config_options

    fields = _train_options()
    if any(k not in fields for k in legacy_config_options({key: None})):
        close = difflib.get_close_matches(key, fields, n=3, cutoff=0.6)
        hint = f"; did you mean {' or '.join(repr(c) for c in close)}?" if close else " (see simcse train --help)"
        raise GridError(f"arm {arm!r}: grid key {key!r} is not an option of simcse train{hint}")


def _is_scalar(v) -> bool:
    return isinstance(v, (bool, int, float, str)) and not (isinstance(v, float) and not math.isfinite(v))


def _check_values(arm: str, key: str, values, sampling: bool) -> None:
    if isinstance(values, dict):
        if not sampling:
            raise GridError(f"arm {arm!r}: grid {key!r} is a range {values!r}, which only a random search can "
                            "draw from; add \"sample\": N, or give a list of values")
        if len(values) != 1 or next(iter(values)) not in RANGES:
            shapes = ", ".join(f"{{{r!r}: [lo, hi]}}" for r in RANGES)
            raise GridError(f"arm {arm!r}: grid {key!r}: a range is one of {shapes}, got {values!r}")
        kind, ends = next(iter(values.items()))
        number = int if kind == "int_uniform" else (int, float)
        if (not isinstance(ends, list) or len(ends) != 2
                or not all(isinstance(e, number) and not isinstance(e, bool) for e in ends) or not ends[0] < ends[1]
                or (kind == "log_uniform" and ends[0] <= 0)):
            raise GridError(f"arm {arm!r}: grid {key!r}: {kind} needs [lo, hi] with lo < hi"
                            + (" and lo > 0" if kind == "log_uniform" else "")
                            + (", integers" if kind == "int_uniform" else "") + f", got {ends!r}")
        return
    if not isinstance(values, list) or not values:
        raise GridError(f"arm {arm!r}: grid {key!r} must be a non-empty list of values, got {values!r}")
    bad = [v for v in values if not _is_scalar(v)]
    if bad:
        raise GridError(f"arm {arm!r}: grid {key!r}: value {bad[0]!r} is not a number, string or true/false")
    names = [format_value(v) for v in values]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise GridError(f"arm {arm!r}: grid {key!r} lists {dup[0]} twice; each value once")


def _draw(rng: random.Random, space):
    if isinstance(space, list):
        return space[rng.randrange(len(space))]
    kind, (lo, hi) = next(iter(space.items()))
    if kind == "int_uniform":
        return rng.randint(lo, hi)
    x = math.exp(rng.uniform(math.log(lo), math.log(hi))) if kind == "log_uniform" else rng.uniform(lo, hi)
    return float(f"{x:.3g}")


def grid_points(arm: str, grid, sample=None, sample_seed=0, kind: str = "simcse",
                runner_options=("output_dir", "seed")) -> list[dict]:
    """The points of one arm's grid: every combination (``sample`` None) or ``sample`` distinct random draws.

    Args:
        arm: the arm's name (messages). grid: option -> list of values (or a range with ``sample``).
        sample: None, or the number of points to draw. sample_seed: the draws' seed (an integer).
        kind: the arm's kind (``sentence_transformers`` keys are checked later, with its options).
        runner_options: options a grid may not vary.

    Returns:
        a list of ``{option: value}``, keys in the grid's order; combinations in the grid's order (the last key
        varies fastest), draws in the order drawn.

    Raises:
        GridError: an empty grid or value list, a key that is not an option (close names suggested) or that the
            runner owns, a range without ``sample``, a bad ``sample``/``sample_seed``, fewer distinct points than
            ``sample`` asks for.
    """
    if not isinstance(grid, dict) or not grid:
        raise GridError(f"arm {arm!r}: 'grid' must be a non-empty object of option -> list of values, got {grid!r}")
    sampling = sample is not None
    if sampling and (isinstance(sample, bool) or not isinstance(sample, int) or sample < 1):
        raise GridError(f"arm {arm!r}: 'sample' must be an integer >= 1 (the number of random points), got {sample!r}")
    if isinstance(sample_seed, bool) or not isinstance(sample_seed, int) or sample_seed < 0:
        raise GridError(f"arm {arm!r}: 'sample_seed' must be an integer >= 0, got {sample_seed!r}")
    for key, values in grid.items():
        _check_key(arm, key, kind, runner_options)
        _check_values(arm, key, values, sampling)
    if not sampling:
        return [dict(zip(grid, combo)) for combo in itertools.product(*grid.values())]
    finite = all(isinstance(v, list) for v in grid.values())
    size = math.prod(len(v) for v in grid.values()) if finite else None
    if size is not None and sample > size:
        raise GridError(f"arm {arm!r}: 'sample' {sample} asks for more points than the {size} the grid has; "
                        "drop 'sample' to run them all")
    rng = random.Random(sample_seed)
    points: dict = {}
    for _ in range(1000 * sample):
        p = {k: _draw(rng, v) for k, v in grid.items()}
        points.setdefault(point_name(arm, p), p)
        if len(points) == sample:
            return list(points.values())
    raise GridError(f"arm {arm!r}: 'sample' {sample}: only {len(points)} distinct points drawn from the ranges "
                    "(3 significant digits); widen the ranges or ask for fewer")


def _seeds(value, what: str) -> list:
    if (not isinstance(value, list) or not value
            or not all(isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in value)):
        raise GridError(f"{what} must be a non-empty list of integers >= 0, got {value!r}")
    dup = sorted({s for s in value if value.count(s) > 1})
    if dup:
        raise GridError(f"{what} lists seed {dup[0]} twice; each seed once")
    return list(value)


def parse_selection(raw_selection, methods: list[str]) -> dict:
    """The spec's ``selection`` checked: ``{"metric": the given name, "task": the STS task scored on dev,
    "seeds", "test_seeds", "budget_hours", "seconds_per_run"}``.

    Raises:
        GridError: an unknown key, a metric the evaluation does not produce on a dev split, bad or overlapping
            seeds, a budget or time per run that is not a positive number.
    """
    if not isinstance(raw_selection, dict):
        raise GridError(f"'selection' must be an object {{metric, seeds, test_seeds}}, got {raw_selection!r}")
    unknown = sorted(k for k in raw_selection if k not in SELECTION_KEYS and not k.startswith("_"))
    if unknown:
        raise GridError(f"selection: unknown key {unknown[0]!r}; expected {sorted(SELECTION_KEYS)}")
    for key in ("metric", "seeds", "test_seeds"):
        if key not in raw_selection:
            raise GridError(f"selection: missing {key!r}")
    metric = raw_selection["metric"]
    if metric not in METRICS:
        raise GridError(f"selection.metric {metric!r} is not a score the evaluation produces on a dev split; "
                        f"expected one of {sorted(METRICS)} (STS-B or SICK-R dev Spearman)")
    seeds = _seeds(raw_selection["seeds"], "selection.seeds")
    test_seeds = _seeds(raw_selection["test_seeds"], "selection.test_seeds")
    both = [s for s in test_seeds if s in seeds]
    if both:
        raise GridError(f"selection.test_seeds {test_seeds} overlap selection.seeds {seeds} (seed {both[0]}); the "
                        "test runs need fresh seeds: give seeds the selection did not use")
    out = {"metric": metric, "task": METRICS[metric], "seeds": seeds, "test_seeds": test_seeds,
           "budget_hours": None, "seconds_per_run": None}
    for key in ("budget_hours", "seconds_per_run"):
        v = raw_selection.get(key)
        if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float)) or not v > 0):
            raise GridError(f"selection.{key} must be a positive number, got {v!r}")
        out[key] = v
    return out


def expand_arm(name: str, value: dict, runner_options=("output_dir", "seed")) -> dict:
    """One arm's JSON object as ``{arm name: arm object}``: itself when it has no ``grid``, else its points,
    each the arm's options with the point's values over them and ``_method`` / ``_point`` / ``_label``
    metadata (the label: the arm's ``_label`` or name, then the point's values).

    Raises:
        GridError: as :func:`grid_points`; a grid key the arm also sets; ``sample`` without ``grid``.
    """
    if not isinstance(value, dict) or not any(k in value for k in GRID_KEYS):
        return {name: dict(value) if isinstance(value, dict) else value}
    if "grid" not in value:
        raise GridError(f"arm {name!r}: 'sample' draws from a 'grid' of ranges or lists; add \"grid\"")
    rest = {k: v for k, v in value.items() if k not in GRID_KEYS}
    grid = value["grid"]
    points = grid_points(name, grid, value.get("sample"), value.get("sample_seed", 0),
                         rest.get("kind", "simcse"), runner_options)
    both = [k for k in grid if k in rest]
    if both:
        raise GridError(f"arm {name!r}: {both[0]!r} is both an option of the arm and a grid key; give it in one "
                        "place")
    label = rest.get("_label", name)
    return {point_name(name, p): {**rest, **p, "_method": name, "_point": p,
                                  "_label": f"{label} ({', '.join(f'{k}={format_value(v)}' for k, v in p.items())})"}
            for p in points}


def expand_grids(raw: dict, runner_options=("output_dir", "seed")) -> tuple[dict, dict | None]:
    """A spec's JSON object with every gridded arm replaced by its points (:func:`expand_arm`), and its
    checked ``selection`` (None without one).

    With ``selection``: the spec gives no ``seeds`` (the selection's seeds are the returned object's), every
    arm is a method (an arm without a grid: a method of one point), the ``baseline`` and ``_versus`` name
    methods, and the returned object's baseline is the baseline method's first point. The selection dict adds
    ``methods``: ``{method: {"points": [point names], "label", "versus", "kind"}}`` and ``baseline``.

    Raises:
        GridError: as :func:`expand_arm` and :func:`parse_selection`; two points of one name; a baseline or
            ``_versus`` naming a gridded arm without ``selection``; ``seeds`` beside ``selection``.
    """
    arms = raw.get("arms")
    if not isinstance(arms, dict):
        return raw, None
    selecting = "selection" in raw
    expanded: dict = {}
    methods: dict = {}
    for name, value in arms.items():
        if isinstance(name, str) and "@" in name and not (isinstance(value, dict) and "_method" in value):
            raise GridError(f"arm name {name!r}: '@' is kept for grid points (<arm>@<option>=<value>); rename it")
        points = expand_arm(name, value, runner_options)
        clash = [p for p in points if p in expanded]
        if clash:
            raise GridError(f"arm {name!r}: point {clash[0]!r} is already an arm; rename one")
        expanded.update(points)
        if isinstance(value, dict):
            methods[name] = {"points": list(points), "label": value.get("_label", name),
                             "versus": value.get("_versus"), "kind": value.get("kind", "simcse")}
    out = {**raw, "arms": expanded}
    gridded = [m for m, v in methods.items() if v["points"] != [m]]
    if not selecting:
        for arm, other in [("baseline", raw.get("baseline"))] + [(m, v["versus"]) for m, v in methods.items()]:
            if other in gridded:
                what = "baseline" if arm == "baseline" else f"arm {arm!r}: _versus"
                raise GridError(f"{what} {other!r} has a grid: name one of its points (e.g. "
                                f"{methods[other]['points'][0]!r}), or add 'selection' to choose one on dev")
        return out, None
    if "seeds" in raw:
        raise GridError("'seeds' and 'selection' both given; with a selection the seeds are selection.seeds "
                        "(grid points, dev) and selection.test_seeds (the chosen points, test)")
    selection = parse_selection(raw["selection"], list(methods))
    baseline = raw.get("baseline")
    if baseline not in methods:
        raise GridError(f"baseline {baseline!r} is not an arm; expected one of {list(methods)}")
    for m, v in methods.items():
        if v["versus"] is not None and (v["versus"] not in methods or v["versus"] == m):
            raise GridError(f"arm {m!r}: _versus {v['versus']!r} is not another arm; expected one of "
                            f"{[a for a in methods if a != m]}")
    for point in expanded.values():  # the comparisons are the test phase's, between methods
        point.pop("_versus", None) if isinstance(point, dict) else None
    out.update(seeds=selection["seeds"], baseline=methods[baseline]["points"][0])
    out.pop("selection")
    selection.update(methods=methods, baseline=baseline)
    return out, selection
