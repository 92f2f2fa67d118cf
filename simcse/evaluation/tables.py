"""The SimCSE paper's two tables from a results dict, as values and as text.

* STS (test/fasttest): ``STS12 .. STS16`` use ``results[task]["all"]["spearman"]["all"]`` (pooled pairs),
  ``STSBenchmark`` / ``SICKRelatedness`` the test split's Spearman; all times 100. In dev mode the table
  holds the STS-B and SICK-R dev Spearman only (STS12-16 have no dev split), as the reference script.
* Transfer: ``acc`` (test/fasttest) or ``devacc`` (dev) of ``MR CR SUBJ MPQA SST2 TREC MRPC``.

A task that was not evaluated is left out of its table (never shown as 0.00), and ``Avg.`` is printed
only when every task of the table is present.
"""
from __future__ import annotations

from .engine import STS_TASKS as STS_COLUMNS  # the paper's column order is the task order
from .engine import TRANSFER_TASKS as TRANSFER_COLUMNS

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


def format_table(values: dict[str, float]) -> str:
    """A boxed text table: one header row of names, one row of ``%.2f`` values."""
    cells = [(k, f"{v:.2f}") for k, v in values.items()]
    widths = [max(len(a), len(b)) for a, b in cells]
    rule = "+" + "+".join("-" * (w + 2) for w in widths) + "+"
    head = "|" + "|".join(f" {a:^{w}} " for (a, _), w in zip(cells, widths)) + "|"
    row = "|" + "|".join(f" {b:^{w}} " for (_, b), w in zip(cells, widths)) + "|"
    return "\n".join([rule, head, rule, row, rule])


def format_tables(results: dict, mode: str = "test") -> str:
    """Both tables as text, each under a title line."""
    values = table_values(results, mode)
    titles = {"sts": "STS (Spearman x 100)", "transfer": "Transfer (accuracy)"}
    if mode == "dev":
        titles = {"sts": "STS dev (Spearman x 100)", "transfer": "Transfer (dev accuracy)"}
    return "\n".join(f"------ {mode} : {titles[k]} ------\n{format_table(v)}" for k, v in values.items())
