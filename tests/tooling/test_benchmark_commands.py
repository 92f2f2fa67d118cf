"""Every benchmark and GPU-check command the docs print runs as printed (its ``--help``), and no page still names a
path from before the tooling moved to ``scripts/benchmarks/`` and ``scripts/gpu_check/``."""
from __future__ import annotations

import contextlib
import io
import re
import runpy
import sys
import warnings
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PAGES = sorted([REPO / "README.md", REPO / "tests" / "README.md", *(REPO / "docs").glob("*.md"),
                *(REPO / "scripts" / "benchmarks").glob("*.py"), *(REPO / "scripts" / "gpu_check").glob("*.py"),
                REPO / "scripts" / "gpu_check.sh"])
COMMAND = re.compile(r"python -m (scripts\.(?:benchmarks\.[a-z_]+|gpu_check))\b")


def documented_modules() -> dict[str, list[str]]:
    """Module -> the pages that print ``python -m <module>``."""
    found: dict[str, list[str]] = {}
    for page in PAGES:
        for module in COMMAND.findall(page.read_text(encoding="utf-8")):
            found.setdefault(module, []).append(str(page.relative_to(REPO)))
    return found


MODULES = documented_modules()


def test_the_docs_print_the_benchmark_commands():
    # the pages that measured numbers cite their commands; the list cannot silently go empty
    assert {"scripts.benchmarks.train", "scripts.benchmarks.gpu", "scripts.benchmarks.encode", "scripts.benchmarks.index",
            "scripts.gpu_check"} <= set(MODULES), sorted(MODULES)
    assert any(p.startswith("docs/") for p in MODULES["scripts.benchmarks.train"])


@pytest.mark.parametrize("module", sorted(MODULES))
def test_documented_command_shows_its_help(module, monkeypatch):
    """``python -m MODULE --help`` from the checkout's root, run in this process (the imports are shared, so the
    whole list takes seconds): argparse's usage, exit status 0."""
    monkeypatch.chdir(REPO)
    monkeypatch.setattr(sys, "argv", [module, "--help"])
    out = io.StringIO()
    with warnings.catch_warnings(), contextlib.redirect_stdout(out), pytest.raises(SystemExit) as e:
        warnings.simplefilter("ignore", RuntimeWarning)  # runpy: the module may already be imported by another test
        runpy.run_module(module, run_name="__main__", alter_sys=True)
    assert e.value.code in (0, None), (module, MODULES[module])
    assert out.getvalue().startswith("usage: "), out.getvalue()[:300]


OLD_PATHS = re.compile(r"scripts/(benchmark_[a-z_]+|bench_common|serve_common|profile_train_step|measure_cosine_rounding|"
                       r"eval_onnx_quality|screenshot_serve)\.py|scripts/serve_first_minute\.sh|"
                       r"simcse[./]research[./]gpu_(check|parts|bundle)|simcse\.research\.flops\.(gemm_ceiling|"
                       r"repeat_until_stable|settle_ceilings)")


def test_no_page_names_a_path_from_before_the_move():
    # the docs only: the benchmark against another checkout still finds an older checkout's scripts/benchmark_train.py
    pages = [p for p in PAGES if p.suffix == ".md"]
    stale = [f"{p.relative_to(REPO)}: {m.group(0)}" for p in pages for m in OLD_PATHS.finditer(p.read_text(encoding="utf-8"))]
    assert not stale, stale


def test_methods_figure_script_parses_and_the_docs_print_its_commands():
    """scripts/methods_figure.sh (not run here: it trains for an hour) is valid bash, names configs that exist, and
    docs/methods.md prints each of its training and plotting commands."""
    import subprocess

    script = REPO / "scripts" / "methods_figure.sh"
    subprocess.run(["bash", "-n", str(script)], check=True)
    text = script.read_text(encoding="utf-8").replace("\\\n", " ")
    commands = [" ".join(line.replace('"${NO_EVAL[@]}"', "$NO_EVAL").replace('"$PYTHON"', "python").split())
                for line in text.splitlines() if line.startswith(("CONFIG=", '"$PYTHON"'))]
    assert len(commands) == 9
    for config in re.findall(r"CONFIG=(\S+)", text):
        assert (REPO / config).is_file(), config
    page = " ".join((REPO / "docs" / "methods.md").read_text(encoding="utf-8").replace("\\\n", " ").split())
    missing = [c for c in commands if c not in page]
    assert not missing, missing
