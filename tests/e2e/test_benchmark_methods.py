"""scripts/benchmarks/methods.py: its method table builds valid objectives, and a bad --methods is refused before
anything runs (the timed runs themselves are measurements: docs/methods.md)."""
from __future__ import annotations

import json

import pytest

from scripts.benchmarks import methods as bench


def test_every_method_row_builds_its_objective():
    from simcse.training.objectives import build_objective

    assert list(bench.METHODS)[0] == "simcse"
    for name, extra in bench.METHODS.items():
        if "--loss" in extra:
            loss = extra[extra.index("--loss") + 1]
            args = json.loads(extra[extra.index("--loss_args") + 1].replace("{model}", "a-model"))
            assert build_objective(loss, args).name == name


def test_unknown_method_is_refused():
    with pytest.raises(SystemExit, match="--methods 'nosuch': not a row of this benchmark"):
        bench.main(["--methods", "nosuch"])
