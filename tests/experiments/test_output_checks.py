"""The benchmarks' faults, checked on the experiment runner that replaces them: an output folder that cannot be
written is refused in one ``error:`` line before any run starts (not a traceback after the work), and a folder
trained with other settings is refused rather than reused (``test_spec.py::
test_spec_changed_under_existing_folder_names_the_field``)."""
from __future__ import annotations

import pytest
from experiment_world import tiny_world, write_spec  # noqa: F401  (fixture)

from simcse.experiments import main


# The runner today raises FileExistsError / NotADirectoryError from out.mkdir (before any run, but as a
# traceback): strict, so this fails as soon as the runner checks its --output_dir, and the mark comes off then.
@pytest.mark.xfail(strict=True, reason="simcse.experiments.run_experiment does not yet check --output_dir in one line")
@pytest.mark.parametrize("where", ["a file", "under a file"])
def test_an_output_dir_that_cannot_be_a_folder_is_one_line_before_any_run(tmp_path, tiny_world, capsys, where):
    spec = write_spec(tmp_path, tiny_world)
    blocker = tmp_path / "taken"
    blocker.write_text("not a folder\n")
    out = blocker if where == "a file" else blocker / "out"
    code = main(["run", str(spec), "--output_dir", str(out), "--no_report"])
    err = capsys.readouterr().err
    assert code == 2, err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and "output_dir" in lines[0], err
    assert blocker.read_text() == "not a folder\n"
