"""The SimCSE paper's two tables from a results dict, as values and as text.

* STS (test/fasttest): ``STS12 .. STS16`` use ``results[task]["all"]["spearman"]["all"]`` (pooled pairs),
  ``STSBenchmark`` / ``SICKRelatedness`` the test split's Spearman; all times 100. In dev mode the table
  holds the STS-B and SICK-R dev Spearman only (STS12-16 have no dev split), as the reference script.
* Transfer: ``acc`` (test/fasttest) or ``devacc`` (dev) of ``MR CR SUBJ MPQA SST2 TREC MRPC``.

A task that was not evaluated is left out of its table (never shown as 0.00), and ``Avg.`` is printed
only when every task of the table is present.
"""
from __future__ import annotations

from simcse.evaluation.engine import STS_TASKS as STS_COLUMNS  # the paper's column order is the task order
from simcse.evaluation.engine import TRANSFER_TASKS as TRANSFER_COLUMNS

DEV_STS_COLUMNS = ("STSBenchmark", "SICKRelatedness")


def _first(x) -> float:
    return float(x[0]) if isinstance(x, (tuple, list)) else float(x)


def table_values(results: dict, mode: str = "test") -> dict[str, dict[str, float]]:
    """``{"sts": {column: value}, "transfer": {column: value}}`` rounded to 2 decimals, with ``Avg.``."""
    split = "dev" if mode == "dev" else "test"
    sts: dict[str, float] = {}
    for task in DEV_STS_COLUMNS if mode == "dev" else STS_COLUMNS:
        res = results.get(task)
        if res is None:
            continue
        if task in DEV_STS_COLUMNS:
            if split in res:
                sts[task] = 100 * _first(res[split]["spearman"])
        else:
            sts[task] = 100 * float(res["all"]["spearman"]["all"])
    transfer = {t: float(results[t]["devacc" if mode == "dev" else "acc"]) for t in TRANSFER_COLUMNS if t in results}
    out = {}
    for name, values, columns in (("sts", sts, DEV_STS_COLUMNS if mode == "dev" else STS_COLUMNS), ("transfer", transfer, TRANSFER_COLUMNS)):
        if not values:
            continue
        if len(values) == len(columns):
            values["Avg."] = sum(values.values()) / len(values)
        out[name] = {k: round(v, 2) for k, v in values.items()}
    return out


def table_intervals(results: dict, mode: str = "test") -> dict[str, list[float]]:
    """The 95% bootstrap interval (x 100, 2 decimals) of each STS column that carries one
    (``evaluate(..., bootstrap=N)``): ``{column: [low, high]}``; empty when none was computed."""
    out: dict[str, list[float]] = {}
    for task in DEV_STS_COLUMNS if mode == "dev" else STS_COLUMNS:
        res = results.get(task)
        if res is None:
            continue
        split = "dev" if mode == "dev" else "test"
        ci = res.get(split, {}).get("spearman_ci") if task in DEV_STS_COLUMNS else res["all"].get("spearman_ci", {}).get("all")
        if ci is not None:
            out[task] = [round(100 * float(ci[0]), 2), round(100 * float(ci[1]), 2)]
    return out


def format_interval(low: float, high: float, signed: bool = False) -> str:
    """The one cell format of an interval, ``[low, high]`` with 2 decimals (``[-26.48, -18.12]``: a bracket and a
    comma, never a dash that reads as a minus sign); ``signed`` puts ``+`` before positive bounds (differences)."""
    fmt = "+.2f" if signed else ".2f"
    return f"[{low:{fmt}}, {high:{fmt}}]"


def format_table(values: dict[str, float], intervals: dict[str, list[float]] | None = None) -> str:
    """A boxed text table: one header row of names, one row of ``%.2f`` values, and, when ``intervals`` is given,
    a row of ``[low, high]`` intervals under them (empty cells for columns without one, such as ``Avg.``)."""
    cells = [(k, f"{v:.2f}", format_interval(*intervals[k]) if intervals and k in intervals else "")
             for k, v in values.items()]
    widths = [max(len(a), len(b), len(c)) for a, b, c in cells]
    rule = "+" + "+".join("-" * (w + 2) for w in widths) + "+"
    head = "|" + "|".join(f" {a:^{w}} " for (a, _, _), w in zip(cells, widths)) + "|"
    row = "|" + "|".join(f" {b:^{w}} " for (_, b, _), w in zip(cells, widths)) + "|"
    lines = [rule, head, rule, row]
    if intervals:
        lines.append("|" + "|".join(f" {c:^{w}} " for (_, _, c), w in zip(cells, widths)) + "|")
    return "\n".join(lines + [rule])


def format_dims_table(by_dim: dict, mode: str = "test", intervals: dict | None = None) -> str:
    """The STS table at several embedding sizes (``--truncate_dim a,b,c``): one row per size, one column per
    task present in every row (and ``Avg.`` when all have it). ``by_dim``: {dim: :func:`table_values`};
    ``intervals`` (``--bootstrap``): {dim: :func:`table_intervals`}, printed as a row of ``[low, high]`` under each
    size's row."""
    rows = {d: v.get("sts", {}) for d, v in by_dim.items()}
    columns = [c for c in next(iter(rows.values()), {}) if all(c in r for r in rows.values())]
    cells = [["dim", *columns]]
    for d, r in rows.items():
        cells.append([str(d), *(f"{r[c]:.2f}" for c in columns)])
        ci = (intervals or {}).get(d)
        if ci:
            cells.append(["", *(format_interval(*ci[c]) if c in ci else "" for c in columns)])
    widths = [max(len(row[i]) for row in cells) for i in range(len(cells[0]))]
    rule = "+" + "+".join("-" * (w + 2) for w in widths) + "+"
    lines = ["|" + "|".join(f" {x:^{w}} " for x, w in zip(row, widths)) + "|" for row in cells]
    note = table_notes(mode)["sts"] + ("; under each size: its 95% bootstrap interval" if intervals else "")
    title = f"------ {mode} : STS (Spearman x 100) at each embedding size ------\n{note}"
    return "\n".join([title, rule, lines[0], rule, *lines[1:], rule])


def table_notes(mode: str = "test", classifier: str = "senteval") -> dict[str, str]:
    """What each table's numbers are (metric, aggregation, split, classifier), for the printed table and JSON.

    Args:
        mode: ``"test"``, ``"fasttest"`` or ``"dev"``. classifier: ``"senteval"`` or ``"sklearn"``.
    """
    split = "dev" if mode == "dev" else "test"
    sts = f"Spearman x 100 of cosine similarity; STSBenchmark and SICKRelatedness: {split} split"
    if mode != "dev":
        sts += "; STS12-16: 'all' (the pairs of all subsets pooled, not the mean or wmean of subsets)"
    folds = 10 if mode == "test" else 5
    clf = ("SentEval's PyTorch logistic regression (paper-comparable)" if classifier == "senteval"
           else "scikit-learn logistic regression (not paper-comparable)")
    what = "dev accuracy (%), mean of the inner cross-validation" if mode == "dev" else "test accuracy (%)"
    return {"sts": sts, "transfer": f"{what}; {clf}; {folds}-fold cross-validation where the task has no split"}


def format_tables(results: dict, mode: str = "test", classifier: str = "senteval") -> str:
    """Both tables as text, each under a title line and a line saying what the numbers are."""
    values = table_values(results, mode)
    titles = {"sts": "STS (Spearman x 100)", "transfer": "Transfer (accuracy)"}
    if mode == "dev":
        titles = {"sts": "STS dev (Spearman x 100)", "transfer": "Transfer (dev accuracy)"}
    notes = table_notes(mode, classifier)
    intervals = {"sts": table_intervals(results, mode)}
    if intervals["sts"]:
        notes["sts"] += "; second row: 95% bootstrap interval (pairs resampled; STS12-16 within each subset)"
    return "\n".join(f"------ {mode} : {titles[k]} ------\n{notes[k]}\n{format_table(v, intervals.get(k))}"
                     for k, v in values.items())
