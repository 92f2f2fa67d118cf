"""The STS-B / SICK training splits become sent0,sent1,score files (the data is read, never shipped)."""
from __future__ import annotations

import csv
import os
from pathlib import Path

import pytest

from simcse.training.scored_pairs import SCORED_PAIR_SETS, main, write_scored_pairs
from tests.conftest import write_senteval


def _read(path):
    with open(path, newline="", encoding="utf-8") as f:
        rows = list(csv.reader(f))
    return rows[0], [(a, b, float(s)) for a, b, s in rows[1:]]


@pytest.mark.parametrize("name,task", [("stsb_train", "STSBenchmark"), ("sick_train", "SICKRelatedness")])
def test_written_file_holds_every_pair_with_its_score(tmp_path, name, task):
    root = write_senteval(tmp_path / "downstream")
    out = write_scored_pairs(name, tmp_path / "out" / f"{name}.csv", data_dir=root)
    header, rows = _read(out)
    assert header == ["sent0", "sent1", "score"]
    truth = [(" ".join(a.split()), " ".join(b.split()), g) for a, b, g in _truth(root, task)]
    assert rows == truth and len(rows) > 5
    assert not list(out.parent.glob("*.part"))


def _truth(root: Path, task: str):
    if task == "STSBenchmark":
        lines = (root / "STS/STSBenchmark/sts-train.csv").read_text().splitlines()
        return [(c[5], c[6], float(c[4])) for c in (line.split("\t") for line in lines)]
    lines = (root / "SICK/SICK_train.txt").read_text().splitlines()[1:]
    return [(c[1], c[2], float(c[3])) for c in (line.split("\t") for line in lines)]


def test_unknown_name_and_missing_data_are_refused_before_writing(tmp_path):
    with pytest.raises(ValueError, match="unknown scored-pair set 'stsb'"):
        write_scored_pairs("stsb", tmp_path / "x.csv", data_dir=tmp_path)
    with pytest.raises((FileNotFoundError, ValueError)):
        write_scored_pairs("stsb_train", tmp_path / "x.csv", data_dir=tmp_path / "nothing")
    assert not (tmp_path / "x.csv").exists()


REAL = (Path(os.environ["SIMCSE_DATA_MIRROR"]) / "senteval" / "downstream" if os.environ.get("SIMCSE_DATA_MIRROR")
        else Path("data/downstream"))


@pytest.mark.skipif(not (REAL / "STS/STSBenchmark/sts-train.csv").exists(), reason="SentEval data not downloaded")
@pytest.mark.parametrize("name", ["stsb_train", "sick_train"])
def test_real_training_splits_have_their_published_sizes(tmp_path, name, capsys):
    assert main([name, str(tmp_path / "p.csv"), "--data_dir", str(REAL)]) == 0
    _, rows = _read(tmp_path / "p.csv")
    assert len(rows) == SCORED_PAIR_SETS[name][2] == {"stsb_train": 5749, "sick_train": 4500}[name]
    assert f"wrote {len(rows)} scored pairs" in capsys.readouterr().out
