"""``simcse download wiki|nli|senteval`` with a local mirror (no network in tests)."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

from simcse.files.download import SENTEVAL_REQUIRED, download, main, senteval_complete


@pytest.fixture
def mirror(tmp_path):
    m = tmp_path / "mirror"
    m.mkdir()
    (m / "wiki1m_for_simcse.txt").write_text("a sentence .\nanother one .\n")
    (m / "nli_for_simcse.csv").write_text("sent0,sent1,hard_neg\na,b,c\n")
    for f in SENTEVAL_REQUIRED:
        p = m / "senteval" / "downstream" / f
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text("x\n")
        p.chmod(0o444)  # the shared mirror is read-only
    return m


def test_files_are_linked_from_the_mirror_under_data(tmp_path, mirror, monkeypatch):
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    monkeypatch.setenv("SIMCSE_DATA_MIRROR", str(mirror))
    assert main(["wiki"]) == 0 and main(["nli"]) == 0
    assert (work / "data" / "wiki1m_for_simcse.txt").resolve() == mirror / "wiki1m_for_simcse.txt"
    assert (work / "data" / "nli_for_simcse.csv").read_text().startswith("sent0,sent1,hard_neg")
    assert main(["wiki"]) == 0  # present: kept


def test_senteval_is_copied_writable(tmp_path, mirror):
    dest = download("senteval", tmp_path / "ds", mirror=mirror)
    assert senteval_complete(dest)
    f = dest / SENTEVAL_REQUIRED[0]
    f.write_text("writable\n")  # a copy, not the read-only mirror file
    assert (mirror / "senteval" / "downstream" / SENTEVAL_REQUIRED[0]).read_text() == "x\n"


def test_mirror_problems_are_one_line_errors(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("SIMCSE_DATA_MIRROR", str(tmp_path / "nowhere"))
    assert main(["wiki", "--dest", str(tmp_path / "w.txt")]) == 1
    assert "is not a folder" in capsys.readouterr().err
    empty = tmp_path / "empty"
    empty.mkdir()
    assert main(["senteval", "--dest", str(tmp_path / "ds"), "--mirror", str(empty)]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "missing or incomplete" in err
    assert not (tmp_path / "w.txt").exists()


def test_data_scripts_wrap_the_module_without_the_package_dependencies(tmp_path, mirror):
    """data/download_wiki.sh runs simcse/files/download.py as a plain script (stdlib only)."""
    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "SIMCSE_DATA_MIRROR": str(mirror), "PYTHON": sys.executable}
    r = subprocess.run([sys.executable, "-S", str(root / "simcse" / "files" / "download.py"), "nli", "--dest",
                        str(tmp_path / "n.csv")], capture_output=True, text=True, env=env, timeout=60)
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "n.csv").resolve() == mirror / "nli_for_simcse.csv"


@pytest.mark.slow
def test_python_dash_m_simcse_runs_download_help():
    r = subprocess.run([sys.executable, "-m", "simcse", "download", "--help"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and "wiki" in r.stdout and "senteval" in r.stdout
