"""Select on dev, test on fresh seeds: a spec's ``selection`` and the report of a tuned experiment.

A spec with ``selection`` (its arms' ``grid``/``sample``: :mod:`simcse.experiments.grids`)::

    "selection": {"metric": "stsb_dev", "seeds": [42, 1, 2], "test_seeds": [3, 4, 5],
                  "budget_hours": 12, "seconds_per_run": 400}

runs in two phases, each an ordinary experiment folder of the runner (the same checks, executors, resumption):

1. ``DIR/selection``: every method's grid points on ``seeds``, scored on the **dev** split only (the tasks of
   the evaluation that have one, the metric's task first; ``test_after_training`` off, so no process of this
   phase reads a test file);
2. ``DIR/test``: per method the point with the best mean ``metric`` over ``seeds`` (ties: the first point in
   the grid's order, said in the report), trained on ``test_seeds`` and scored as the spec's ``evaluation``
   says; each method is compared with the baseline method by the report's paired comparison.

The choice is recorded in ``DIR/selection.json``; once the test phase has runs, a choice that changes (the grid
or its results changed) is refused. ``budget_hours`` refuses, before any run, a grid whose runs (points x seeds
+ methods x test seeds) times the time per run (measured: the mean of the runs already done in the folder; else
``seconds_per_run``) exceed it.

The report (``DIR/report.md``, ``report.json``, ``budget.png``): per method its grid with the dev scores, the
point chosen, and the expected best dev score after k points tried (Dodge et al. 2019, "Show Your Work:
Improved Reporting of Experimental Results", EMNLP: :func:`expected_max`); then the test phase's report.
"""
from __future__ import annotations

import math
from pathlib import Path

from simcse.experiments import runs as R
from simcse.experiments.grids import format_value
from simcse.experiments.report import analyse, markdown, save_report, verdict
from simcse.experiments.spec import Spec, SpecError, parse_spec, write_json_atomic

SELECTION_DIR, TEST_DIR, CHOICE_FILE = "selection", "test", "selection.json"
DEV_TASKS = ("STSBenchmark", "SICKRelatedness")


class SelectionError(SpecError):
    """A choice that cannot be made (a method with no point scored on every selection seed) or that differs
    from the one the test phase already ran with."""


def expected_max(values, k: int) -> tuple[float, float]:
    """The expected maximum of ``k`` draws with replacement from ``values`` and its standard deviation.

    Dodge et al. 2019 ("Show Your Work", EMNLP), eq. 1: with v_(1) <= ... <= v_(N) the N observed scores,
    P(max = v_(i)) = (i/N)^k - ((i-1)/N)^k, so E[max] = sum_i v_(i) [(i/N)^k - ((i-1)/N)^k].

    Args:
        values: N >= 1 finite scores (one per hyperparameter point). k: draws, >= 1.

    Raises:
        ValueError: no values, a non-finite one, or k < 1.
    """
    v = sorted(float(x) for x in values)
    if not v or not all(math.isfinite(x) for x in v):
        raise ValueError(f"expected_max needs at least one finite value, got {list(values)!r}")
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ValueError(f"k must be an integer >= 1, got {k!r}")
    n = len(v)
    p = [(i / n) ** k - ((i - 1) / n) ** k for i in range(1, n + 1)]
    mean = sum(pi * x for pi, x in zip(p, v))
    var = sum(pi * (x - mean) ** 2 for pi, x in zip(p, v))
    return mean, math.sqrt(max(var, 0.0))


def budget_curve(values) -> list[dict]:
    """``[{"k", "expected", "std"}]`` for k = 1 .. N (:func:`expected_max`); [] without finite values."""
    finite = [x for x in values if x is not None and math.isfinite(x)]
    return [dict(zip(("k", "expected", "std"), (k, *expected_max(finite, k)))) for k in range(1, len(finite) + 1)]


def _phase_raw(spec: Spec, arms: dict, seeds: list, baseline: str, evaluation: dict, phase: str) -> dict:
    raw = {k: v for k, v in spec.raw.items() if k in ("base", "options", "description")}
    return {**raw, "name": f"{spec.name} ({phase})", "seeds": seeds, "arms": arms, "baseline": baseline,
            "evaluation": evaluation}


def selection_spec(spec: Spec) -> Spec:
    """The selection phase as an ordinary spec: the grid points on the selection seeds, scored on dev (the
    evaluation's tasks with a dev split, the metric's first), ``test_after_training`` off in every point."""
    from simcse.experiments.grids import expand_grids

    sel = spec.selection
    points, _ = expand_grids(spec.raw)
    arms = {name: ({**value, "test_after_training": False} if value.get("kind", "simcse") == "simcse" else value)
            for name, value in points["arms"].items()}
    ev = dict(spec.raw.get("evaluation", {}))
    tasks = [sel["task"]] + [t for t in ev.get("tasks", list(DEV_TASKS)) if t in DEV_TASKS and t != sel["task"]]
    ev.update(split="dev", tasks=tasks, alignment=False)
    raw = _phase_raw(spec, arms, sel["seeds"], points["baseline"], ev, "selection")
    return parse_spec(raw, f"{spec.path} (selection)")


def test_spec(spec: Spec, choice: dict) -> Spec:
    """The test phase as an ordinary spec: per method (named as in the spec) its chosen point's options, on
    the test seeds, with the spec's evaluation, the baseline method as the baseline."""
    from simcse.experiments.grids import expand_grids

    sel = spec.selection
    points = expand_grids(spec.raw)[0]["arms"]
    arms = {}
    for method, info in sel["methods"].items():
        value = {k: v for k, v in points[choice[method]["point"]].items() if k not in ("_method", "_label")}
        value["_label"] = info["label"]
        if info["versus"]:
            value["_versus"] = info["versus"]
        arms[method] = value
    raw = _phase_raw(spec, arms, sel["test_seeds"], sel["baseline"], spec.raw.get("evaluation", {}), "test")
    return parse_spec(raw, f"{spec.path} (test)")


def _done_records(folder: Path, spec: Spec) -> dict:
    """``{(arm, seed): result record}`` of the runs of ``spec`` done in ``folder`` (same digest)."""
    out = {}
    for run in spec.runs():
        rec = R.read_json(R.run_dir(folder, run) / "result.json") or {}
        if rec.get("status") == "done" and rec.get("digest") == run.digest:
            out[(run.arm, run.seed)] = rec
    return out


def grid_scores(spec: Spec, output_dir: str | Path) -> dict:
    """Per method its points' dev scores from ``DIR/selection``: ``{method: [{"point", "values", "scores":
    {seed: x100}, "mean" (None unless every selection seed is done), "n", "of"}]}`` in grid order."""
    sel, sspec = spec.selection, selection_spec(spec)
    done = _done_records(Path(output_dir) / SELECTION_DIR, sspec)
    out = {}
    for method, info in sel["methods"].items():
        rows = []
        for point in info["points"]:
            scores = {s: done[(point, s)].get("spearman", {}).get(sel["task"]) for s in sel["seeds"]
                      if (point, s) in done}
            values = [x for x in scores.values() if x is not None and math.isfinite(x)]
            full = len(values) == len(sel["seeds"])
            rows.append({"point": point, "values": sspec.arms[point].meta.get("_point", {}), "scores": scores,
                         "mean": sum(values) / len(values) if full else None, "n": len(values),
                         "of": len(sel["seeds"])})
        out[method] = rows
    return out


def choose(spec: Spec, output_dir: str | Path, scores: dict | None = None) -> dict:
    """Per method the point with the best mean dev score over every selection seed.

    Returns:
        ``{method: {"point", "values", "mean", "tied": [other points of the same mean], "left_out": [points
        without a score on every seed]}}``; a tie goes to the first point in the grid's order.

    Raises:
        SelectionError: a method none of whose points has a score on every selection seed.
    """
    scores = scores if scores is not None else grid_scores(spec, output_dir)
    out = {}
    for method, rows in scores.items():
        complete = [r for r in rows if r["mean"] is not None]
        if not complete:
            raise SelectionError(f"{output_dir}: method {method!r}: no grid point has a dev score on every "
                                 f"selection seed {spec.selection['seeds']}; see {SELECTION_DIR}/report.md "
                                 "(the same command runs the failed runs again)")
        best = max(complete, key=lambda r: r["mean"])  # max keeps the first of equal means: the grid's order
        out[method] = {"point": best["point"], "values": best["values"], "mean": best["mean"],
                       "tied": [r["point"] for r in complete if r is not best and abs(r["mean"] - best["mean"]) < 1e-9],
                       "left_out": [r["point"] for r in rows if r["mean"] is None]}
    return out


def planned_runs(spec: Spec) -> tuple[int, str]:
    """How many runs a tuned spec makes, and the sum in words."""
    sel = spec.selection
    points = sum(len(m["points"]) for m in sel["methods"].values())
    n = points * len(sel["seeds"]) + len(sel["methods"]) * len(sel["test_seeds"])
    return n, (f"{points} grid points x {len(sel['seeds'])} selection seeds + {len(sel['methods'])} methods x "
               f"{len(sel['test_seeds'])} test seeds")


def check_budget(spec: Spec, output_dir: str | Path) -> None:
    """Refuse a grid whose runs cannot fit ``selection.budget_hours`` (nothing to check without one).

    The time per run is measured (the mean ``seconds`` of the runs done in the folder) or else stated
    (``selection.seconds_per_run``).

    Raises:
        SpecError: over the budget (``N runs (...) x S s per run (measured over K runs) = H h, over ...``), or
            a budget without a time per run to check it with.
    """
    sel = spec.selection
    if sel.get("budget_hours") is None:
        return
    n, parts = planned_runs(spec)
    seconds = [rec["seconds"] for folder in (SELECTION_DIR, TEST_DIR)
               for rec in (R.read_json(p) for p in (Path(output_dir) / folder / "runs").glob("*/seed*/result.json"))
               if rec and rec.get("status") == "done" and isinstance(rec.get("seconds"), (int, float))]
    if seconds:
        per, how = sum(seconds) / len(seconds), f"measured over {len(seconds)} finished runs"
    elif sel.get("seconds_per_run"):
        per, how = float(sel["seconds_per_run"]), "selection.seconds_per_run"
    else:
        raise SpecError(f"spec {spec.path}: selection.budget_hours {sel['budget_hours']} needs a time per run to "
                        "check the grid against: give selection.seconds_per_run (no run in the folder to measure)")
    hours = n * per / 3600
    if hours > sel["budget_hours"]:
        raise SpecError(f"spec {spec.path}: the grid needs {n} runs ({parts}) x {per:.0f} s per run ({how}) = "
                        f"{hours:.2f} h, over selection.budget_hours {sel['budget_hours']}; shrink the grids or "
                        "the seeds, or raise the budget")


def check_choice(spec: Spec, output_dir: str | Path, choice: dict) -> None:
    """Refuse a choice other than the one the test phase already ran with (``DIR/selection.json``).

    Raises:
        SelectionError: names the method, the recorded and the new point.
    """
    old = R.read_json(Path(output_dir) / CHOICE_FILE)
    started = any((Path(output_dir) / TEST_DIR / "runs").glob("*/seed*/run.json"))
    if not old or not started:
        return
    for method, c in choice.items():
        before = old.get("choice", {}).get(method, {}).get("point")
        if before is not None and before != c["point"]:
            raise SelectionError(f"{output_dir}: method {method!r}: the test phase ran with {before!r}, but the "
                                 f"selection now chooses {c['point']!r} (the grid or its dev scores changed); give "
                                 f"a new --output_dir, or remove {TEST_DIR}/ and {CHOICE_FILE} to test the new choice")


def check_grid(spec: Spec, output_dir: str | Path) -> None:
    """Refuse, before any run, a grid other than the one whose choice the test phase ran with: once ``DIR/test``
    has runs, each method's points must be those recorded in ``DIR/selection.json``.

    Raises:
        SelectionError: names the method and the points added or removed.
    """
    old = R.read_json(Path(output_dir) / CHOICE_FILE)
    if not old or not any((Path(output_dir) / TEST_DIR / "runs").glob("*/seed*/run.json")):
        return
    for method, info in spec.selection["methods"].items():
        before = old.get("points", {}).get(method)
        if before != info["points"]:
            added = [p for p in info["points"] if p not in (before or [])]
            removed = [p for p in (before or []) if p not in info["points"]]
            raise SelectionError(f"{output_dir}: method {method!r}: the grid changed after the test phase started "
                                 f"(added {added or 'none'}, removed {removed or 'none'}); give a new --output_dir, "
                                 f"or remove {TEST_DIR}/ and {CHOICE_FILE} to select and test again")


def record_choice(spec: Spec, output_dir: str | Path, choice: dict) -> None:
    """Write ``DIR/selection.json``: the choice and every method's points (what the test phase runs with)."""
    write_json_atomic(Path(output_dir) / CHOICE_FILE, {
        "metric": spec.selection["metric"], "seeds": spec.selection["seeds"], "choice": choice,
        "points": {m: info["points"] for m, info in spec.selection["methods"].items()}})


def analyse_tuned(spec: Spec, output_dir: str | Path, n_resamples: int | None = None) -> dict:
    """The tuned report's numbers: ``{"spec": {name, path, metric, task, seeds, test_seeds, baseline,
    runs}, "methods": {method: {"label", "grid": grid_scores rows, "choice" (None before the selection
    ended), "curve": budget_curve of the complete points' means, "changed": points added or removed since the
    recorded choice}}, "test": analyse of DIR/test or None}``."""
    out = Path(output_dir)
    sel = spec.selection
    scores = grid_scores(spec, out)
    try:
        choice = choose(spec, out, scores)
    except SelectionError:
        choice = {}
    recorded = R.read_json(out / CHOICE_FILE) or {}
    methods = {}
    for method, rows in scores.items():
        before = recorded.get("points", {}).get(method)
        now = sel["methods"][method]["points"]
        changed = ({"added": [p for p in now if p not in before], "removed": [p for p in before if p not in now]}
                   if before is not None and before != now else None)
        methods[method] = {"label": sel["methods"][method]["label"], "grid": rows, "choice": choice.get(method),
                           "curve": budget_curve([r["mean"] for r in rows if r["mean"] is not None]),
                           "changed": changed}
    test = analyse(out / TEST_DIR, n_resamples) if (out / TEST_DIR / "spec.json").is_file() else None
    return {"spec": {"name": spec.name, "path": spec.path, "metric": sel["metric"], "task": sel["task"],
                     "seeds": sel["seeds"], "test_seeds": sel["test_seeds"], "baseline": sel["baseline"],
                     "runs": planned_runs(spec)[1]},
            "methods": methods, "test": test}


def _f(v, digits: int = 2) -> str:
    return "-" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:.{digits}f}"


def markdown_tuned(result: dict) -> str:
    """The tuned report as markdown (see the module)."""
    spec, methods = result["spec"], result["methods"]
    sizes = {m: len(info["grid"]) for m, info in methods.items()}
    lines = [f"# Tuned experiment {spec['name']}", "",
             f"Spec `{Path(spec['path']).name}`: each method's grid on selection seeds {spec['seeds']}, scored on "
             f"the dev split ({spec['metric']}: {spec['task']} dev Spearman x 100); the point with the best mean "
             f"is trained on test seeds {spec['test_seeds']} and scored on test. Runs: {spec['runs']}.", ""]
    if len(set(sizes.values())) > 1:
        tried = ", ".join(f"{m}: {n}" for m, n in sizes.items())
        lines += [f"The methods tried different numbers of points ({tried}): "
                  "compare them at the same k in the expected-best table, not by their chosen points alone.", ""]
    lines += ["## Grids and choices (dev)", ""]
    for method, info in methods.items():
        keys = list(dict.fromkeys(k for r in info["grid"] for k in r["values"]))
        lines += [f"### {info['label']}", "",
                  "| point | " + " | ".join(keys) + " | " + " | ".join(f"seed {s}" for s in spec["seeds"])
                  + " | mean dev | chosen |",
                  "| --- |" + " --- |" * (len(keys) + len(spec["seeds"]) + 2)]
        c = info["choice"]
        for r in info["grid"]:
            mark = "**chosen**" if c and r["point"] == c["point"] else ("tie" if c and r["point"] in c["tied"] else "")
            lines.append(f"| `{r['point']}` | " + " | ".join(format_value(r["values"][k]) if k in r["values"] else "-"
                                                             for k in keys)
                         + " | " + " | ".join(_f(r["scores"].get(s)) for s in spec["seeds"])
                         + f" | {_f(r['mean'])} | {mark} |")
        lines.append("")
        if c is None:
            lines += ["No point has a dev score on every selection seed yet: nothing chosen.", ""]
        else:
            lines.append(f"Chosen: `{c['point']}`, mean dev {_f(c['mean'])} over {len(spec['seeds'])} seeds."
                         + (f" Tied with {', '.join(f'`{t}`' for t in c['tied'])}: the first in the grid's order "
                            "was taken." if c["tied"] else "")
                         + (f" Left out (not scored on every seed): {', '.join(f'`{p}`' for p in c['left_out'])}."
                            if c["left_out"] else ""))
            lines.append("")
        if info["changed"]:
            lines += [f"The grid changed since the choice was recorded: added {info['changed']['added'] or 'none'}, "
                      f"removed {info['changed']['removed'] or 'none'}.", ""]
    n = max((len(info["curve"]) for info in methods.values()), default=0)
    lines += ["## Expected best dev score after k points tried", "",
              "Expected maximum of the mean dev score over k points drawn at random (with replacement) from each "
              "method's grid results, +- its standard deviation (Dodge et al. 2019, \"Show Your Work\"). A method "
              "ahead only at large k wins by tuning; ahead at k = 1, by default.", "",
              "| k | " + " | ".join(info["label"] for info in methods.values()) + " |",
              "| --- |" + " --- |" * len(methods)]
    for k in range(1, n + 1):
        cells = [f"{_f(info['curve'][k - 1]['expected'])} +- {_f(info['curve'][k - 1]['std'])}"
                 if k <= len(info["curve"]) else "-" for info in methods.values()]
        lines.append(f"| {k} | " + " | ".join(cells) + " |")
    lines.append("")
    test = result["test"]
    lines += ["## Test of the chosen points", ""]
    if test is None:
        lines += ["Not run yet (the selection phase has not ended).", ""]
    else:
        task = spec["task"] if spec["task"] in test["spec"]["tasks"] else test["spec"]["tasks"][0]
        lines += [f"{task} ({test['spec']['split']}), the baseline `{spec['baseline']}`; the intervals are the "
                  "report's paired comparison (below).", "",
                  "| method | chosen point | mean dev | mean test | seeds | test - baseline | 95% interval | reading |",
                  "| --- | --- | --- | --- | --- | --- | --- | --- |"]
        for method, info in methods.items():
            arm = test["arms"].get(method, {}).get("tasks", {}).get(task, {})
            vs = test["versus"].get(method, {}).get(task, {})
            c = info["choice"] or {}
            lines.append(f"| {info['label']} | `{c.get('point', '-')}` | {_f(c.get('mean'))} | {_f(arm.get('mean'))} "
                         f"| {arm.get('n', 0)} of {arm.get('of', len(spec['test_seeds']))} | "
                         + (f"{_f(vs.get('diff'))} | [{_f(vs.get('low'))}, {_f(vs.get('high'))}] | {verdict(vs)} |"
                            if vs else "(baseline) | - | - |"))
        lines.append("")
        lines += ["#" + line if line.startswith("#") else line for line in markdown(test).splitlines()]
    return "\n".join(lines) + "\n"


def budget_figure(result: dict, out: Path) -> Path | None:
    """``budget.png``: per method the expected best dev score against the number of points tried, with a
    +- 1 standard deviation band. None without matplotlib or a curve."""
    curves = {info["label"]: info["curve"] for info in result["methods"].values() if info["curve"]}
    if not curves:
        return None
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    fig, ax = plt.subplots(figsize=(5.5, 3.8))
    for label, curve in curves.items():
        k = [c["k"] for c in curve]
        m = [c["expected"] for c in curve]
        s = [c["std"] for c in curve]
        ax.plot(k, m, marker="o", label=label)
        ax.fill_between(k, [a - b for a, b in zip(m, s)], [a + b for a, b in zip(m, s)], alpha=0.15)
    ax.set_xlabel("grid points tried (k)")
    ax.set_ylabel(f"expected best {result['spec']['task']} dev (x100)")
    ax.set_xticks(range(1, max(len(c) for c in curves.values()) + 1))
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    ax.set_title("expected best dev score vs tuning budget (Dodge et al. 2019)", fontsize=9)
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    plt.close(fig)
    return out


def write_tuned_report(spec: Spec, output_dir: str | Path, n_resamples: int | None = None) -> dict:
    """Write ``report.md``, ``report.json`` and ``budget.png`` of a tuned experiment folder; returns the
    result with ``"files"`` and ``"markdown"``."""
    folder = Path(output_dir)
    result = analyse_tuned(spec, folder, n_resamples)
    return save_report(folder, result, markdown_tuned(result), lambda: [budget_figure(result, folder / "budget.png")])
