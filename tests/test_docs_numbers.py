"""The CPU defaults' numbers have one source: the ``[simcse]`` lines of docs/training.md ("Output of the CPU
defaults"), printed by the commands named there. The results table of docs/training.md is read off those lines,
README.md repeats its rows, and docs/supervised.md links to it instead of giving numbers of its own."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
TRAINING = REPO / "docs" / "training.md"
README = REPO / "README.md"
COLUMNS = ["run", "command", "precision", "STS-B dev before", "STS-B dev after", "STS-B test after",
           "SICK-R test after", "steps", "training time", "wall time (script)"]


def _table(text: str, first_column: str = "run") -> list[dict[str, str]]:
    """The rows of the markdown table whose header starts with ``| first_column |``."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"| {first_column} |"))
    header = [c.strip() for c in lines[start].strip("|").split("|")]
    rows = []
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        rows.append(dict(zip(header, (c.strip() for c in line.strip("|").split("|")))))
    return rows


def _output_sections(text: str) -> dict[str, list[str]]:
    """The output block's runs: ``{header: [its lines]}``, a header being a ``# what (COMMAND)`` line."""
    block = text.split("### Output of the CPU defaults", 1)[1].split("```", 2)[1]
    sections: dict[str, list[str]] = {}
    current = None
    for line in block.splitlines():
        if line.startswith("# "):
            current = line
            sections[current] = []
        elif current is not None:
            sections[current].append(line)
    return sections


def _value(lines: list[str], key: str) -> float:
    for line in lines:
        m = re.search(rf"\b{key}=([0-9.]+)", line)
        if m:
            return float(m.group(1))
    raise AssertionError(f"no {key}= in {lines}")


def _section_for(sections: dict[str, list[str]], command: str) -> list[str]:
    found = [lines for header, lines in sections.items() if re.search(rf"\({re.escape(command)}[,)]", header)]
    assert len(found) == 1, f"one output section for `{command}` expected in docs/training.md, found {len(found)}"
    return found[0]


def test_readme_result_rows_are_the_rows_of_the_training_doc_table():
    ours, theirs = _table(README.read_text()), _table(TRAINING.read_text())
    assert [r["run"] for r in ours] and list(ours[0]) == COLUMNS
    by_command = {r["command"]: r for r in theirs}
    for row in ours:
        assert row["command"] in by_command, f"README row {row['command']} is not in docs/training.md's table"
        other = by_command[row["command"]]
        assert {k: v for k, v in row.items() if k != "run"} == {k: v for k, v in other.items() if k != "run"}


@pytest.mark.parametrize("row", _table(TRAINING.read_text()), ids=lambda r: r["command"])
def test_training_doc_table_is_read_off_the_printed_lines(row):
    lines = _section_for(_output_sections(TRAINING.read_text()), row["command"].strip("`"))
    cells = {
        "STS-B dev before": _value(lines, "eval_stsb_spearman"),
        "STS-B dev after": _value(lines, "final_stsb_spearman"),
        "STS-B test after": _value(lines, "test_stsb_spearman"),
        "SICK-R test after": _value(lines, "test_sickr_spearman"),
    }
    for column, fraction in cells.items():
        assert row[column] == f"{100 * fraction:.2f}", (column, row[column], fraction)
    trained = next(re.search(r"trained (\d+) steps in (\d+) s \(([0-9.]+) training examples/s", x) for x in lines
                   if "] trained " in x)
    steps, seconds, rate = trained.groups()
    assert row["steps"].startswith(f"{steps} x ") and row["training time"].startswith(f"{seconds} s ({rate} ")
    assert row["wall time (script)"] == f"{_wall_seconds(lines)} s"
    for gain in (x for x in lines if "] STS-B dev: " in x):  # the change line, where the log has it
        assert f"{row['STS-B dev before']} before training -> {row['STS-B dev after']} after" in gain


def _wall_seconds(lines: list[str]) -> int:
    """The script's wall time: its ``[simcse] wall time: N s`` line, or the ``Elapsed (wall clock)`` line of
    ``/usr/bin/time -v`` (``m:ss.xx`` or ``h:mm:ss``), in whole seconds."""
    for x in lines:
        m = re.search(r"\] wall time: (\d+) s", x)
        if m:
            return int(m.group(1))
        m = re.search(r"Elapsed \(wall clock\) time \(h:mm:ss or m:ss\): ([0-9:.]+)", x)
        if m:
            seconds = 0.0
            for part in m.group(1).split(":"):
                seconds = 60 * seconds + float(part)
            return round(seconds)
    raise AssertionError(f"no wall time in {lines}")


def test_other_pages_give_no_numbers_of_their_own_for_the_defaults():
    sup = (REPO / "docs" / "supervised.md").read_text()
    measured = next(p for p in sup.split("\n\n") if "run_sup_example.sh" in p and "Measured" in p)
    assert not re.search(r"\b\d\d\.\d\d\b", measured), measured  # a link to the table, not a copy of it
    assert "training.md#results-of-the-cpu-defaults" in measured


METHODS_PAGE = REPO / "docs" / "methods.md"
METHOD_KEYS = {"ESimCSE": "esimcse", "SimCSE++": "simcse_pp", "MixCSE": "mixcse", "DiffCSE": "diffcse",
               "InfoCSE": "infocse", "PromptBERT": "promptbert", "RankCSE": "rankcse"}


def test_methods_cost_column_is_read_off_one_printed_run():
    """docs/methods.md: the table's "step time / SimCSE" cells (and their peak-memory ratios) are the lines of the
    one benchmark run printed in its Cost section, every method from that same run."""
    text = METHODS_PAGE.read_text()
    cost = text.split("\n### Cost\n", 1)[1].split("\n### ", 1)[0]
    assert cost.count("$ python -m scripts.benchmarks.methods") == 1, "one run, its command printed"
    def ratios(name):
        return dict(kv.split("=") for kv in re.search(rf"^{name} (.+)$", cost, re.M).group(1).split())

    wall, cpu = ratios("method_step_time_ratio_vs_simcse"), ratios("method_cpu_time_ratio_vs_simcse")
    memory = dict(re.findall(r"^round 1 ([a-z_]+) .*, peak RSS \d+ MiB \(x([0-9.]+)\)", cost, re.M))
    rows = _table(text, "method")
    assert sorted(r["method"] for r in rows) == sorted(METHOD_KEYS) and sorted(wall) == sorted(METHOD_KEYS.values())
    for row in rows:
        key = METHOD_KEYS[row["method"]]
        want = f"{wall[key]}x wall, {cpu[key]}x CPU (peak RSS {memory[key]}x)"
        assert row["step time / SimCSE"].startswith(want), (row["step time / SimCSE"], want)


def test_methods_cpu_run_column_is_read_off_the_printed_family_run():
    """docs/methods.md: the table's "our CPU run" cells are the rows of the one printed run of
    scripts/benchmarks/family.py in "The family at the unsupervised budget" (STS-B test with its interval, and the
    paired difference with SimCSE), every method from that same run, SimCSE's row among them."""
    text = METHODS_PAGE.read_text()
    section = text.split("\n### The family at the unsupervised budget\n", 1)[1].split("\n### ", 1)[0]
    assert section.count("$ python -m scripts.benchmarks.family") == 1, "one run, its command printed"
    output = section.split("$ python -m scripts.benchmarks.family", 1)[1]
    header = next(x for x in output.splitlines() if x.startswith("| method |"))
    assert header == ("| method | STS-B test | STS-B - SimCSE | p | SICK-R test | SICK-R - SimCSE | p | "
                      "STS-B dev before / after | steps | train s | s/step |")
    printed = {c[0]: c for c in ([x.strip() for x in line.strip("|").split("|")] for line in output.splitlines()
                                 if line.startswith("| ") and not line.startswith(("| method |", "| --- |")))}
    assert sorted(printed) == sorted([*METHOD_KEYS.values(), "simcse"])
    assert printed["simcse"][2] == printed["simcse"][5] == ""
    column = next(c for c in _table(text, "method")[0] if c.startswith("our CPU run"))
    for row in _table(text, "method"):
        p = printed[METHOD_KEYS[row["method"]]]
        want = (f"STS-B test {p[1]}, {p[2]} vs SimCSE (p {p[3]}); SICK-R test {p[4]}, {p[5]} vs SimCSE; "
                f"STS-B dev {p[7]}")
        assert row[column] == want, (row[column], want)
