"""The reference SimCSE code's public import paths: kept where the same thing exists here (``simcse.tool.SimCSE``),
else an ImportError that names the replacement (not a bare ModuleNotFoundError / "cannot import name")."""
import importlib
import subprocess
import sys

import pytest


def test_simcse_tool_is_the_tool():
    from simcse import SimCSE
    from simcse.tool import SimCSE as ReferencePath

    assert ReferencePath is SimCSE


@pytest.mark.parametrize("module, name, replacement", [
    ("simcse.models", "BertForCL", "SimCSEModel.from_pretrained"),
    ("simcse.models", "RobertaForCL", "simcse convert"),
    ("simcse.models", "Pooler", "get_pooler"),
    ("simcse.models", "Similarity", "cosine_logits"),
    ("simcse.trainers", "CLTrainer", "SimCSETrainer"),
])
def test_reference_names_say_what_replaces_them(module, name, replacement):
    with pytest.raises(ImportError, match=f"{module}.{name} is the reference SimCSE code's") as e:
        exec(f"from {module} import {name}", {})
    assert replacement in str(e.value) and not isinstance(e.value, ModuleNotFoundError)


def test_other_names_and_submodules_behave_as_before():
    with pytest.raises(ImportError, match="cannot import name 'NoSuchName'"):
        exec("from simcse.models import NoSuchName", {})
    assert importlib.import_module("simcse.models.modeling").SimCSEModel
    assert not hasattr(importlib.import_module("simcse.models"), "NoSuchName")


def test_reference_script_lines_run_in_a_fresh_interpreter():
    """The reference README's usage line, as its users type it."""
    code = "from simcse.tool import SimCSE; import simcse; assert SimCSE is simcse.SimCSE; print('ok')"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr
