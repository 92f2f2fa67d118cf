"""The package's shape: wings by layer, every import pointing down, no import cycle (also none inside a function).

The order, from the ground up (README.md, "Layout"): files, models, interop, evaluation, retrieval, training,
serving, experiments, research, then ``simcse/cli.py`` and the package's face (``simcse/__init__.py``, ``__main__.py``, and
the reference's module paths ``tool.py``, ``trainers.py``). A
module may import its own wing and any wing below it. ``simcse/version.py`` is on the ground floor.
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "simcse"
ORDER = ["files", "models", "interop", "evaluation", "retrieval", "training", "serving", "experiments", "research", "cli", "face"]
GROUND_MODULES = {"simcse.version"}
# the reference code's public module paths, kept at the top as part of the package's face (aliases and errors
# naming the replacement, nothing else): simcse.tool, simcse.trainers
FACE_MODULES = {"__main__", "tool", "trainers"}


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def simcse_imports(path: Path, root: Path) -> set[str]:
    """Every ``simcse`` module ``path`` imports, at any depth (function bodies included), resolved to a module
    of the tree (``from simcse.x import name`` -> ``simcse.x.name`` when that is a module, else ``simcse.x``)."""
    me = module_name(path, root)
    package = me if path.name == "__init__.py" else me.rpartition(".")[0]
    modules = {module_name(p, root) for p in root.rglob("*.py")}
    out = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base_name = ".".join(base + ([node.module] if node.module else []))
            else:
                base_name = node.module or ""
            targets = [f"{base_name}.{a.name}" if f"{base_name}.{a.name}" in modules else base_name for a in node.names]
        else:
            continue
        out.update(t for t in targets if t == "simcse" or t.startswith("simcse."))
    out.discard(me)
    return out


def wing(module: str) -> str:
    """The wing of a module: the first name under ``simcse`` (``cli``; ``face`` for the package itself)."""
    if module in GROUND_MODULES:
        return "files"
    parts = module.split(".")
    if len(parts) == 1 or parts[1] in FACE_MODULES:
        return "face"
    return parts[1]


def graph(root: Path) -> dict[str, set[str]]:
    return {module_name(p, root): simcse_imports(p, root) for p in sorted(root.rglob("*.py"))}


def upward_imports(g: dict[str, set[str]]) -> list[str]:
    bad = []
    for mod, targets in g.items():
        for t in targets:
            if wing(mod) not in ORDER or wing(t) not in ORDER:
                bad.append(f"{mod} -> {t} (a wing outside {ORDER})")
            elif ORDER.index(wing(t)) > ORDER.index(wing(mod)):
                bad.append(f"{mod} ({wing(mod)}) -> {t} ({wing(t)})")
    return sorted(bad)


def cycles(g: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan), each sorted."""
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in g.get(v, ()):
            if w not in g:
                continue
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in g:
        if v not in index:
            visit(v)
    return out


def test_no_import_cycle_even_inside_functions():
    assert cycles(graph(PACKAGE)) == []


def test_every_import_points_down_the_wings():
    assert upward_imports(graph(PACKAGE)) == []


def test_every_module_sits_in_a_wing():
    stray = [m for m in graph(PACKAGE) if wing(m) not in ORDER]
    assert stray == [], f"modules outside the wings {ORDER}: {stray}"


def tooling_imports(root: Path) -> list[str]:
    """``module -> name`` for every import of the checkout's tooling (``scripts``, the tests) inside the package."""
    out = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else [])
            out += [f"{module_name(path, root)} -> {n}" for n in names if n.split(".")[0] in ("scripts", "tests", "conftest")]
    return out


def test_the_package_imports_none_of_the_tooling(tmp_path):
    # the benchmarks and the GPU check live in scripts/, outside the wheel: the package must not need them
    assert tooling_imports(PACKAGE) == []
    bad = _write(tmp_path, {"__init__.py": "", "research/__init__.py": "",
                            "research/x.py": "def f():\n    from scripts.benchmarks.common import REPO\n"})
    assert tooling_imports(bad) == ["simcse.research.x -> scripts.benchmarks.common"]


def _write(root: Path, files: dict[str, str]) -> Path:
    pkg = root / "simcse"
    for name, text in files.items():
        f = pkg / name
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text(text)
    return pkg


@pytest.mark.parametrize("files, kind", [
    # a cycle hidden in a function body (as cli <-> serve once was)
    ({"__init__.py": "", "cli.py": "from simcse.serving import serve\n", "serving/__init__.py": "",
      "serving/serve.py": "def f():\n    from simcse.cli import model_for_index\n"}, "cycle"),
    # a model module importing an export module (models -> interop is upward)
    ({"__init__.py": "", "models/__init__.py": "", "interop/__init__.py": "",
      "models/modeling.py": "def save():\n    from ..interop.export import write\n",
      "interop/export.py": "X = 1\n"}, "upward"),
    # the readers importing the training data module
    ({"__init__.py": "", "files/__init__.py": "", "training/__init__.py": "",
      "files/inputs.py": "from simcse.training.data import first_undecodable_line\n",
      "training/data.py": "def first_undecodable_line(p):\n    pass\n"}, "upward"),
])
def test_the_checks_catch_what_they_guard_against(tmp_path, files, kind):
    g = graph(_write(tmp_path, files))
    if kind == "cycle":
        assert cycles(g) == [["simcse.cli", "simcse.serving.serve"]]
    else:
        assert upward_imports(g), g


def test_no_class_over_about_250_lines():
    """Big classes are split into mixins / modules of one concern each (a docstring counts as lines)."""
    big = []
    for p in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(p.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef) and node.end_lineno - node.lineno + 1 > 280:
                big.append(f"{p.relative_to(PACKAGE.parent)}:{node.name} ({node.end_lineno - node.lineno + 1} lines)")
    assert big == []


def test_long_modules_say_why():
    """A module over ~500 lines gives the reason in its docstring (a line starting 'Why one module:')."""
    unexplained = []
    for p in PACKAGE.rglob("*.py"):
        text = p.read_text(encoding="utf-8")
        if len(text.splitlines()) > 520 and "Why one module:" not in (ast.get_docstring(ast.parse(text)) or ""):
            unexplained.append(str(p.relative_to(PACKAGE.parent)))
    assert unexplained == []
