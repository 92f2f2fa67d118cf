"""The benchmarks' faults, checked on the experiment runner that replaces them: an output folder that cannot be
written is refused in one ``error:`` line before any run starts (not a traceback after the work), and a folder
trained with other settings is refused rather than reused (``test_spec.py::
test_spec_changed_under_existing_folder_names_the_field``)."""
from __future__ import annotations

import pytest
from experiment_world import tiny_world, write_spec  # noqa: F401  (fixture)

from simcse.experiments import main


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


def test_missing_parent_folders_are_fine_and_nothing_is_created_by_the_check(tmp_path):
    from simcse.experiments.experiment import check_output_dir

    out = tmp_path / "a" / "b" / "exp"
    assert check_output_dir(out) == out
    assert not (tmp_path / "a").exists()


def _one_error_line(capsys) -> str:
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    return lines[0]


def test_a_folder_trained_with_other_settings_is_refused_not_reused(tmp_path, tiny_world, capsys, monkeypatch):
    from simcse.experiments import load_spec
    from simcse.experiments import runs as R

    out = tmp_path / "out"
    for run in load_spec(write_spec(tmp_path, tiny_world)).runs():
        R.prepare(out, run)  # the folders of a grid run with learning rate 1e-3 for arm b
    monkeypatch.setattr(R, "execute", lambda *a, **k: pytest.fail("a run started"))
    changed = write_spec(tmp_path, tiny_world, arms={"a": {}, "b": {"learning_rate": 2e-3}})
    assert main(["run", str(changed), "--output_dir", str(out), "--no_report"]) == 2
    line = _one_error_line(capsys)
    assert "runs/b/seed1 holds a run of another spec (options.learning_rate: 0.001 -> 0.002)" in line


def test_next_sentence_arm_on_the_shuffled_sample_is_refused_before_any_run(tmp_path, tiny_world, capsys, monkeypatch):
    from simcse.experiments import runs as R

    wiki = tmp_path / "wiki1m_for_simcse.txt"
    wiki.write_text("one.\ntwo.\nthree.\n")
    monkeypatch.setattr(R, "execute", lambda *a, **k: pytest.fail("a run started"))
    spec = write_spec(tmp_path, tiny_world, arms={"a": {}, "ns": {"objective": "next_sentence", "train_file": str(wiki)}})
    out = tmp_path / "out"
    assert main(["run", str(spec), "--output_dir", str(out), "--no_report"]) == 2
    line = _one_error_line(capsys)
    assert "arm 'ns': next_sentence needs consecutive sentences" in line and "reading order" in line
    assert not out.exists()


@pytest.mark.parametrize("content, says", [("[1, 2]", "must hold a JSON object, got list"),
                                           ("garbage", "not readable JSON"), (None, "no spec.json")])
def test_report_on_a_folder_that_is_not_an_experiment_says_why(tmp_path, capsys, content, says):
    folder = tmp_path / "exp"
    folder.mkdir()
    if content is not None:
        (folder / "spec.json").write_text(content)
    assert main(["report", str(folder)]) == 2
    line = _one_error_line(capsys)
    assert says in line and str(folder) in line


@pytest.mark.parametrize("kind, says", [("missing", "no such folder"), ("file", "is a file")])
def test_report_on_a_path_that_is_no_folder_says_which(tmp_path, capsys, kind, says):
    path = tmp_path / "x"
    if kind == "file":
        path.write_text("x\n")
    assert main(["report", str(path)]) == 2
    assert says in _one_error_line(capsys)


@pytest.mark.parametrize("option", [["--parallel", "0"], ["--gpus_per_run", "-1"]])
def test_executor_numbers_are_checked_before_the_spec_and_write_nothing(tmp_path, tiny_world, capsys, option):
    spec = write_spec(tmp_path, tiny_world)
    out = tmp_path / "exp"
    assert main(["run", str(spec), "--output_dir", str(out), *option]) == 2
    line = _one_error_line(capsys)
    assert option[0] in line and "at least" in line
    assert not out.exists()


def test_slurm_without_a_cluster_names_the_executor_and_writes_nothing(tmp_path, tiny_world, capsys):
    import shutil

    pytest.importorskip("submitit")
    if shutil.which("srun") or shutil.which("sbatch"):
        pytest.skip("a Slurm client is installed here")
    spec = write_spec(tmp_path, tiny_world)
    out = tmp_path / "exp"
    assert main(["run", str(spec), "--output_dir", str(out), "--executor", "slurm"]) == 2
    line = _one_error_line(capsys)
    assert line.startswith("error: --executor slurm: ")
    assert not out.exists()


def test_a_bad_spec_prints_its_error_only(tmp_path, tiny_world, capsys):
    """The arms' option checks build the training arguments, whose notices (the precision line) are not printed
    before the error."""
    spec = write_spec(tmp_path, tiny_world, arms={"a": {"bf16": "auto"}, "b": {"learnin_rate": 1e-3}})
    assert main(["run", str(spec), "--output_dir", str(tmp_path / "exp")]) == 2
    captured = capsys.readouterr()
    assert "[simcse]" not in captured.out and "learnin_rate" in captured.err
