"""The report of an experiment folder: every seed's score, the mean over seeds with its intervals, and each arm
against the baseline paired by seed (``simcse experiment report DIR``).

Per arm and task:

* each seed's score (Spearman x 100 of the pooled pairs of the task's split), and how many of the spec's seeds
  ended (``2 of 3 seeds``: a failed or missing seed is named, never averaged in silence);
* the mean over the finished seeds with the 95% hierarchical bootstrap interval
  (:func:`simcse.evaluation.intervals.hierarchical_bootstrap`: seeds resampled, then test pairs within each
  seed), beside the plain t interval over the seeds' scores (seeds only; none for one seed);
* against the baseline, on the seeds both arms finished: the mean of the per-seed differences, its 95% paired
  hierarchical interval and two-sided p-value (the same seed and pair draws on both sides), beside the paired t
  test over seeds.

It writes ``report.md``, ``report.json`` and ``report.png`` (one panel per task: each arm's seeds as points, the
mean and the hierarchical interval as a bar; needs matplotlib) into the folder, and, when the spec measured
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
        "tasks": {task: {"scores": {seed: value}, "n": k, "of": S, "mean", "low", "high", "t_low", "t_high"}},
        "costs": {...}}}, "versus": {arm: {task: {"against": the baseline or the arm's _versus, "seeds": [...], "diff", "low", "high", "p", "t_low", "t_high",
        "t_p"}}}}``.

    Raises:
        SpecError: as :func:`load_experiment`.
    """
    from simcse.evaluation.intervals import (hierarchical_bootstrap, paired_hierarchical_bootstrap,
                                             paired_seed_t, seed_t_interval)
    from simcse.experiments.score import read_scores

    if n_resamples is not None:
        try:
            check_int(n_resamples, "--resamples", MIN_RESAMPLES)
        except ValueError as e:
            raise SpecError(str(e)) from None
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
                est = hierarchical_bootstrap([got[s] for s in got], resamples, ev.bootstrap_seed)
                entry["scores"] = {s: 100 * v for s, v in zip(got, est.per_seed)}
                _, t_low, t_high = seed_t_interval([100 * v for v in est.per_seed])
                entry.update(mean=100 * est.mean, low=100 * est.low, high=100 * est.high, t_low=t_low, t_high=t_high)
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
                    d = paired_hierarchical_bootstrap([a[s] for s in common], [b[s] for s in common], resamples,
                                                      ev.bootstrap_seed)
                except ValueError as e:  # scored on other pairs (another SentEval folder): said, the rest reported
                    entry["error"] = str(e)
                    versus.setdefault(name, {})[task] = entry
                    continue
                va = [arms[name]["tasks"][task]["scores"][s] for s in common]
                vb = [arms[other]["tasks"][task]["scores"][s] for s in common]
                _, t_low, t_high, t_p = paired_seed_t(va, vb)
                entry.update(diff=100 * d.diff, low=100 * d.low, high=100 * d.high, p=d.p_value, t_low=t_low,
                             t_high=t_high, t_p=t_p)
            versus.setdefault(name, {})[task] = entry
    models = list(dict.fromkeys(str(r.options["model_name_or_path"]) for r in spec.runs()
                                if r.options.get("model_name_or_path")))
    return {"spec": {"name": spec.name, "path": spec.path, "base": spec.base, "seeds": spec.seeds, "models": models,
                     "baseline": spec.baseline, "tasks": ev.tasks, "split": ev.split, "resamples": resamples,
                     "bootstrap_seed": ev.bootstrap_seed},
            "arms": arms, "versus": versus}


def _seeds_text(entry: dict) -> str:
    return f"{entry['n']} of {entry['of']} seeds"


def markdown(result: dict) -> str:
    """The report as markdown (see the module)."""
    spec, arms = result["spec"], result["arms"]
    split = spec["split"]
    lines = [f"# Experiment {spec['name']}", "",
             f"Spec `{Path(spec['path']).name}`, "
             f"model{'s' if len(spec.get('models', [])) > 1 else ''} {', '.join(f'`{m}`' for m in spec.get('models', [])) or '-'}, "
             f"seeds {spec['seeds']}, baseline `{spec['baseline']}`; Spearman x 100 "
             f"on the {split} split. Intervals are 95%: *hierarchical* resamples the seeds, then the test pairs "
             f"within each seed ({spec['resamples']} resamples, seed {spec['bootstrap_seed']}); *t* is the plain "
             "t interval over the seeds' scores (seeds only).", ""]
    paper = any(a["paper"] is not None for a in arms.values())
    for task in spec["tasks"]:
        lines += [f"## {task} ({split})", "",
                  "| arm | seeds | per seed | mean | 95% hierarchical | 95% t over seeds |" + (" paper |" if paper else ""),
                  "| --- | --- | --- | --- | --- | --- |" + (" --- |" if paper else "")]
        for name, a in arms.items():
            e = a["tasks"][task]
            per = ", ".join(f"{s}: {_fmt(e['scores'].get(s))}" for s in spec["seeds"])
            mean = _fmt(e.get("mean"))
            lines.append(f"| {a['label']} | {_seeds_text(e)} | {per} | {mean} | [{_fmt(e.get('low'))}, "
                         f"{_fmt(e.get('high'))}] | [{_fmt(e.get('t_low'))}, {_fmt(e.get('t_high'))}] |"
                         + (f" {_fmt(a['paper'], 1) if a['paper'] is not None else '-'} |" if paper else ""))
        lines.append("")
    if result["versus"]:
        lines += [f"## Against the baseline `{spec['baseline']}` (or the arm's `_versus`), paired by seed", "",
                  "| arm | against | task | seeds | difference | 95% hierarchical | p | 95% paired t | t p |",
                  "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
        for name, by_task in result["versus"].items():
            for task, e in by_task.items():
                lines.append(f"| {arms[name]['label']} | {arms[e['against']]['label']} | {task} | "
                             f"{len(e['seeds'])} of {e['of']} seeds | "
                             f"{_fmt(e.get('diff'))} | [{_fmt(e.get('low'))}, {_fmt(e.get('high'))}] | "
                             f"{_fmt(e.get('p'), 3)} | [{_fmt(e.get('t_low'))}, {_fmt(e.get('t_high'))}] | "
                             f"{_fmt(e.get('t_p'), 3)} |" + (f" {e['error']}" if e.get("error") else ""))
        lines += ["", "A difference whose interval contains 0 is not shown to be a difference.", ""]
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
    """``report.png``: per task a panel, per arm its seeds' scores (points) and mean with the hierarchical
    interval (bar). None when matplotlib is missing or no arm has a score."""
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
    fig.suptitle("seeds (grey) and mean with 95% hierarchical interval (blue)", fontsize=9)
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
    text = markdown(result)
    from simcse.files.storage import write_text_atomic

    write_text_atomic(folder / "report.md", text)
    write_json_atomic(folder / "report.json", result)
    files = [folder / "report.md", folder / "report.json"]
    fig = figure(result, folder / "report.png")
    files += [fig] if fig else []
    files += geometry_figures(result, folder)
    result["files"] = [str(f) for f in files]
    result["markdown"] = text
    return result
