"""The report of an experiment folder: every seed's score, the mean over seeds with its intervals, and each arm
against the baseline paired by seed (``simcse experiment report DIR``).

Per arm and task:

* each seed's score (Spearman x 100 of the pooled pairs of the task's split), and how many of the spec's seeds
  ended (``2 of 3 seeds``: a failed or missing seed is named, never averaged in silence);
* the mean over the finished seeds with the 95% *headline* interval (:mod:`simcse.evaluation.seed_intervals`:
  the seeds' part with Student's t over S - 1 degrees of freedom plus the test set's part from the pair
  bootstrap, added in variance), beside the seed-resampling hierarchical bootstrap and the plain t interval over
  the seeds' scores (seeds only);
* against the baseline, on the seeds both arms finished: the mean of the per-seed differences, its headline
  interval and p-value, and the verdict: *shown* when the headline interval excludes 0 (2 or more seeds), else
  *not shown with N seeds* with an estimate of the seeds that would show a difference of the observed size;
  beside them the hierarchical bootstrap and the paired t test over seeds, labelled for what they cover.

It writes ``report.md``, ``report.json`` and ``report.png`` (one panel per task: each arm's seeds as points, the
mean and the headline interval as a bar; needs matplotlib) into the folder, and, when the spec measured
alignment/uniformity and has an ``untrained`` arm, ``training_curve.png`` and ``align_uniform.png`` (the
paper's Figures 2 and 3 from the arms' means). Columns from the runs' records: the paper's number (an arm's
``_paper``), alignment/uniformity, steps, training seconds, training examples/s and peak memory.
"""
from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

from simcse.experiments import runs as R
from simcse.experiments.spec import MIN_RESAMPLES, SpecError, parse_spec, write_json_atomic
from simcse.files.checks import check_int

SPEC_FILE = "spec.json"


def load_experiment(output_dir: str | Path):
    """The :class:`~simcse.experiments.spec.Spec` an experiment folder was run with (its ``spec.json``).

    Raises:
        SpecError: no ``spec.json`` in the folder (not an experiment folder), or an unreadable one.
    """
    folder = Path(output_dir)
    f = folder / SPEC_FILE
    expected = "expected the --output_dir of 'simcse experiment run'"
    if not folder.exists():
        raise SpecError(f"{output_dir}: no such folder; {expected}")
    if not folder.is_dir():
        raise SpecError(f"{output_dir} is a file; {expected}")
    if not f.is_file():
        raise SpecError(f"{output_dir}: no {SPEC_FILE}; {expected}")
    try:
        raw = json.loads(f.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise SpecError(f"{f}: not readable JSON ({e}); it is written by 'simcse experiment run'") from None
    if not isinstance(raw, dict):
        raise SpecError(f"{f} must hold a JSON object, got {type(raw).__name__}; it is written by "
                        "'simcse experiment run'")
    return parse_spec(raw.get("spec", raw), raw.get("path", str(f)))


def check_resamples(n_resamples) -> None:
    """Refuse a report's ``--resamples`` below :data:`~simcse.experiments.spec.MIN_RESAMPLES` (None: the spec's).

    Raises:
        SpecError: one line naming ``--resamples``.
    """
    if n_resamples is not None:
        try:
            check_int(n_resamples, "--resamples", MIN_RESAMPLES)
        except ValueError as e:
            raise SpecError(str(e)) from None


def _seed_record(output_dir, run) -> dict:
    res = R.current_result(output_dir, run) or {}
    return {"seed": run.seed, "status": res.get("status", "pending"), "record": res}


def _fmt(v, digits: int = 2) -> str:
    """A number with ``digits`` decimals; ``-`` for none; anything else as it is (a report never dies on a value)."""
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "-"
    return f"{v:.{digits}f}" if isinstance(v, (int, float, np.number)) and not isinstance(v, bool) else str(v)


def _mean(values):
    values = [v for v in values if v is not None]
    return float(np.mean(values)) if values else None


def _mean_curve(curves: list[list[dict]]) -> list[dict]:
    """The seeds' alignment/uniformity curves averaged step by step (steps every seed measured)."""
    if not curves or not all(curves):
        return []
    steps = sorted(set.intersection(*[{c["step"] for c in curve} for curve in curves]))
    by = [{c["step"]: c for c in curve} for curve in curves]
    return [{"step": s, "align": _mean([b[s]["align"] for b in by]), "uniform": _mean([b[s]["uniform"] for b in by])}
            for s in steps]


def analyse(output_dir: str | Path, n_resamples: int | None = None) -> dict:
    """The report's numbers for an experiment folder (see the module); x 100 throughout.

    Returns:
        ``{"spec": {..., "models": [the arms' model_name_or_path, each once]}, "arms": {arm: {"label", "kind", "paper", "seeds": [{"seed", "status", "error"}],
        "tasks": {task: {"scores": {seed: value}, "n": k, "of": S, "mean", "low", "high" (headline), "seed_sd",
        "pair_se", "h_low", "h_high" (hierarchical bootstrap), "t_low", "t_high" (t over seeds)}},
        "costs": {...}}}, "versus": {arm: {task: {"against": the baseline or the arm's _versus, "seeds": [...],
        "diff", "low", "high", "p" (headline), "shown", "seeds_needed", "seed_sd", "pair_se", "h_low", "h_high",
        "h_p", "t_low", "t_high", "t_p"}}}}`` (the keys of
        :func:`simcse.evaluation.seed_intervals.compare_seeds`).

    Raises:
        SpecError: as :func:`load_experiment`.
    """
    from simcse.evaluation.seed_intervals import compare_seeds, summarize_seeds
    from simcse.experiments.score import read_scores

    check_resamples(n_resamples)
    spec = load_experiment(output_dir)
    ev = spec.evaluation
    resamples = ev.bootstrap if n_resamples is None else n_resamples
    by_arm: dict = {}
    for run in spec.runs():
        by_arm.setdefault(run.arm, []).append(run)
    arms: dict = {}
    parts: dict = {}  # (arm, task) -> {seed: parts}
    for name, arm_runs in by_arm.items():
        seeds = [_seed_record(output_dir, r) for r in arm_runs]
        for s, run in zip(seeds, arm_runs):
            if s["status"] == "done":
                try:
                    scored = read_scores(R.run_dir(output_dir, run) / "scores.npz")
                except (OSError, ValueError) as e:
                    s["status"], s["record"]["error"] = "failed", f"scores.npz unreadable: {e}"
                    continue
                for task in ev.tasks:
                    if task in scored:
                        parts.setdefault((name, task), {})[run.seed] = scored[task]
        tasks = {}
        for task in ev.tasks:
            got = parts.get((name, task), {})
            entry = {"scores": {}, "n": len(got), "of": len(spec.seeds)}
            if got:
                summary = summarize_seeds([got[s] for s in got], resamples, ev.bootstrap_seed)
                entry["scores"] = dict(zip(got, summary.pop("per_seed")))
                entry.update(summary)
            tasks[task] = entry
        records = [s["record"] for s in seeds if s["status"] == "done"]
        costs = {
            "steps": _mean([r.get("train", {}).get("steps") for r in records]),
            "train_s": _mean([r.get("train", {}).get("train_runtime") for r in records]),
            "examples_per_s": _mean([r.get("train", {}).get("train_samples_per_second") for r in records]),
            "peak_rss_mib": _mean([r.get("train_peak_rss_mib") or r.get("peak_rss_mib") for r in records]),
            "align": _mean([r.get("align") for r in records]),
            "uniform": _mean([r.get("uniform") for r in records]),
            "curve": _mean_curve([r.get("curve", []) for r in records]),
        }
        meta = arm_runs[0].meta
        arms[name] = {"label": meta.get("label", name), "kind": arm_runs[0].kind, "paper": meta.get("paper"),
                      "seeds": [{"seed": s["seed"], "status": s["status"], "error": s["record"].get("error")}
                                for s in seeds],
                      "tasks": tasks, "costs": costs}
    versus: dict = {}
    for name in arms:
        other = by_arm[name][0].meta.get("versus") or spec.baseline
        if name == other:
            continue
        for task in ev.tasks:
            a, b = parts.get((name, task), {}), parts.get((other, task), {})
            common = [s for s in spec.seeds if s in a and s in b]
            entry: dict = {"against": other, "seeds": common, "of": len(spec.seeds)}
            if common:
                try:
                    d = compare_seeds([a[s] for s in common], [b[s] for s in common], resamples, ev.bootstrap_seed)
                except ValueError as e:  # scored on other pairs (another SentEval folder): said, the rest reported
                    entry["error"] = str(e)
                    versus.setdefault(name, {})[task] = entry
                    continue
                d["per_seed"] = dict(zip(common, d["per_seed"]))
                entry.update(d)
            versus.setdefault(name, {})[task] = entry
    models = list(dict.fromkeys(str(r.options["model_name_or_path"]) for r in spec.runs()
                                if r.options.get("model_name_or_path")))
    return {"spec": {"name": spec.name, "path": spec.path, "base": spec.base, "seeds": spec.seeds, "models": models,
                     "baseline": spec.baseline, "tasks": ev.tasks, "split": ev.split, "resamples": resamples,
                     "bootstrap_seed": ev.bootstrap_seed},
            "arms": arms, "versus": versus}


def _span(entry: dict, low: str, high: str) -> str:
    return f"[{_fmt(entry.get(low))}, {_fmt(entry.get(high))}]"


def _seeds_text(entry: dict) -> str:
    return f"{entry['n']} of {entry['of']} seeds"


def verdict(entry: dict) -> str:
    """The report's reading of a difference: ``shown`` when its headline interval excludes 0 over 2 or more seeds,
    else ``not shown with N seeds`` and, from the observed spreads, an estimate of the seeds that would show a
    difference of the observed size (:func:`simcse.evaluation.seed_intervals.seeds_for_power`)."""
    n = len(entry.get("seeds", []))
    if entry.get("diff") is None:
        return "-"
    if entry.get("shown"):
        return "shown"
    plural = "s" if n != 1 else ""
    if n < 2:
        return f"not shown with {n} seed{plural} (an interval over seeds needs 2 or more)"
    need = entry.get("seeds_needed")
    if need is None:
        return (f"not shown with {n} seeds; more seeds alone would not show a difference of this size "
                f"(the test set's part alone is +-{1.96 * entry.get('pair_se', float('nan')):.2f})")
    return f"not shown with {n} seeds; about {need} seeds for 80% power at this size (an estimate)"


def markdown(result: dict) -> str:
    """The report as markdown (see the module)."""
    spec, arms = result["spec"], result["arms"]
    split = spec["split"]
    lines = [f"# Experiment {spec['name']}", "",
             f"Spec `{Path(spec['path']).name}`, "
             f"model{'s' if len(spec.get('models', [])) > 1 else ''} {', '.join(f'`{m}`' for m in spec.get('models', [])) or '-'}, "
             f"seeds {spec['seeds']}, baseline `{spec['baseline']}`; Spearman x 100 "
             f"on the {split} split. Intervals are 95%. The *interval* (the headline) covers both the seeds and the "
             "test set: the seeds' part with Student's t over their scores, the test set's part from the pair "
             f"bootstrap ({spec['resamples']} resamples, seed {spec['bootstrap_seed']}), added in variance; its "
             "coverage is shown by simulation in the docs (docs/experiments.md). *Hierarchical* resamples the seeds, "
             "then the test pairs (it undercovers a difference over 3 seeds); *t over seeds* covers the seeds only "
             "(the mean on this test set).", ""]
    paper = any(a["paper"] is not None for a in arms.values())
    for task in spec["tasks"]:
        lines += [f"## {task} ({split})", "",
                  "| arm | seeds | per seed | mean | 95% interval | 95% hierarchical | 95% t over seeds |"
                  + (" paper |" if paper else ""),
                  "| --- | --- | --- | --- | --- | --- | --- |" + (" --- |" if paper else "")]
        for name, a in arms.items():
            e = a["tasks"][task]
            per = ", ".join(f"{s}: {_fmt(e['scores'].get(s))}" for s in spec["seeds"])
            lines.append(f"| {a['label']} | {_seeds_text(e)} | {per} | {_fmt(e.get('mean'))} | "
                         f"{_span(e, 'low', 'high')} | {_span(e, 'h_low', 'h_high')} | {_span(e, 't_low', 't_high')} |"
                         + (f" {_fmt(a['paper'], 1) if a['paper'] is not None else '-'} |" if paper else ""))
        lines.append("")
    if result["versus"]:
        lines += [f"## Against the baseline `{spec['baseline']}` (or the arm's `_versus`), paired by seed", "",
                  "| arm | against | task | seeds | difference | 95% interval | p | reading | 95% hierarchical "
                  "| hierarchical p | 95% paired t | t p |",
                  "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
        for name, by_task in result["versus"].items():
            for task, e in by_task.items():
                lines.append(f"| {arms[name]['label']} | {arms[e['against']]['label']} | {task} | "
                             f"{len(e['seeds'])} of {e['of']} seeds | {_fmt(e.get('diff'))} | "
                             f"{_span(e, 'low', 'high')} | {_fmt(e.get('p'), 3)} | {verdict(e)} | "
                             f"{_span(e, 'h_low', 'h_high')} | {_fmt(e.get('h_p'), 3)} | "
                             f"{_span(e, 't_low', 't_high')} | {_fmt(e.get('t_p'), 3)} |"
                             + (f" {e['error']}" if e.get("error") else ""))
        lines += ["", "A difference is shown only when its 95% interval (the headline, seeds and test set) excludes 0 "
                  "over 2 or more seeds; the seeds-for-power estimate takes the observed spreads as the truth.", ""]
    lines += ["## Cost and geometry (means over finished seeds)", "",
              "| arm | steps | train s | training examples/s | peak RSS MiB | l_align | l_uniform |",
              "| --- | --- | --- | --- | --- | --- | --- |"]
    for a in arms.values():
        c = a["costs"]
        lines.append(f"| {a['label']} | {_fmt(c['steps'], 0)} | {_fmt(c['train_s'], 1)} | "
                     f"{_fmt(c['examples_per_s'], 1)} | {_fmt(c['peak_rss_mib'], 0)} | {_fmt(c['align'], 4)} | "
                     f"{_fmt(c['uniform'], 4)} |")
    problems = [(a["label"], s) for a in arms.values() for s in a["seeds"] if s["status"] != "done"]
    if problems:
        lines += ["", "## Runs without a result", ""]
        lines += [f"- {label} seed {s['seed']}: {s['status']}" + (f": {s['error']}" if s.get("error") else "")
                  for label, s in problems]
    return "\n".join(lines) + "\n"


def figure(result: dict, out: Path) -> Path | None:
    """``report.png``: per task a panel, per arm its seeds' scores (points) and mean with the headline interval
    (bar). None when matplotlib is missing or no arm has a score."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    tasks, arms = result["spec"]["tasks"], result["arms"]
    if not any(a["tasks"][t].get("mean") is not None for a in arms.values() for t in tasks):
        return None
    fig, axes = plt.subplots(1, len(tasks), figsize=(1.2 + 1.1 * len(arms) * len(tasks), 4), squeeze=False)
    for ax, task in zip(axes[0], tasks):
        for x, a in enumerate(arms.values()):
            e = a["tasks"][task]
            if e.get("mean") is None:
                continue
            ys = list(e["scores"].values())
            ax.scatter([x + 0.12] * len(ys), ys, s=14, color="0.45", zorder=3)
            ax.errorbar([x - 0.05], [e["mean"]], yerr=[[e["mean"] - e["low"]], [e["high"] - e["mean"]]], fmt="o",
                        color="C0", capsize=4, zorder=4)
        ax.set_xticks(range(len(arms)), [a["label"] for a in arms.values()], rotation=30, ha="right")
        ax.set_title(f"{task} ({result['spec']['split']})")
        ax.set_ylabel("Spearman x 100")
        ax.grid(axis="y", alpha=0.3)
    fig.suptitle("seeds (grey) and mean with its 95% interval, seeds and test set (blue)", fontsize=9)
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    plt.close(fig)
    return out


def geometry_figures(result: dict, folder: Path) -> list[Path]:
    """The paper's Figure 2 (untrained -> [the runs' ``--align_uniform_every`` measurements] -> final path of
    each arm in the (l_uniform, l_align) plane) and Figure 3
    (final models coloured by the first task's mean), from the arms' mean alignment/uniformity; needs an
    ``untrained`` arm and measured alignment (else nothing)."""
    arms = result["arms"]
    start = next((a for a in arms.values() if a["kind"] == "untrained" and a["costs"]["align"] is not None), None)
    trained = [a for a in arms.values() if a["kind"] != "untrained" and a["costs"]["align"] is not None]
    if start is None or not trained:
        return []
    try:
        from simcse.evaluation.plots import plot_align_uniform, plot_training_curve
    except ImportError:
        return []
    task = result["spec"]["tasks"][0]
    runs = {}
    for a in trained:  # untrained -> [every --align_uniform_every steps] -> final
        points = {0: {"step": 0, "align": start["costs"]["align"], "uniform": start["costs"]["uniform"]}}
        points.update({c["step"]: c for c in a["costs"].get("curve", [])})
        last = int(a["costs"]["steps"] or max(points) + 1)
        points[last] = {"step": last, "align": a["costs"]["align"], "uniform": a["costs"]["uniform"]}
        runs[a["label"]] = [points[k] for k in sorted(points)]
    pts = [start] + trained
    try:
        return [plot_training_curve(runs, folder / "training_curve.png", title="untrained -> final (means over seeds)"),
                plot_align_uniform([a["label"] for a in pts], [a["costs"]["align"] for a in pts],
                                   [a["costs"]["uniform"] for a in pts], folder / "align_uniform.png",
                                   sts=[a["tasks"][task].get("mean") or float("nan") for a in pts],
                                   sts_label=f"{task} Spearman x100", title="final models (means over seeds)")]
    except ImportError:
        return []


def write_report(output_dir: str | Path, n_resamples: int | None = None) -> dict:
    """Analyse the folder and write ``report.md``, ``report.json`` and the figures into it; returns the result
    with ``"files"`` (the paths written)."""
    folder = Path(output_dir)
    result = analyse(folder, n_resamples)
    figures = lambda: [figure(result, folder / "report.png"), *geometry_figures(result, folder)]  # noqa: E731
    return save_report(folder, result, markdown(result), figures)


def save_report(folder: Path, result: dict, text: str, figures) -> dict:
    """Write ``report.md`` (``text``) and ``report.json`` (``result``) into ``folder``, then the figures
    (``figures()``: the paths written, None for one not drawn); returns ``result`` with ``"files"`` (the paths
    written) and ``"markdown"``."""
    from simcse.files.storage import write_text_atomic

    write_text_atomic(folder / "report.md", text)
    write_json_atomic(folder / "report.json", result)
    files = [folder / "report.md", folder / "report.json"] + [f for f in figures() if f]
    result["files"] = [str(f) for f in files]
    result["markdown"] = text
    return result
