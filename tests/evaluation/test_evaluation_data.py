"""simcse.evaluation.data: the SentEval-layout readers (the evaluation itself: tests/evaluation/test_evaluation.py)."""
from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from conftest import ANY_TEXT, FAST, SENTENCES, STSB_ROWS, write_fake_stsb
from simcse.evaluation.data import load_stsb


# ------------------------------------------------------------------------------------- STS-B setting
def test_read_stsb(tmp_path):
    root = write_fake_stsb(tmp_path / "downstream")
    pairs = load_stsb(root, "dev")
    assert pairs.sent1[0] == SENTENCES[0] and pairs.scores.tolist() == [r[0] for r in STSB_ROWS]
    both = load_stsb(root, "all")
    assert len(both.scores) == 3 * len(STSB_ROWS) and both.sent2[len(STSB_ROWS):2 * len(STSB_ROWS)] == pairs.sent2
    with pytest.raises(ValueError, match="split"):
        load_stsb(root, "validation")
    with pytest.raises(FileNotFoundError, match="does not exist"):
        load_stsb(tmp_path / "nowhere", "dev")
    (root / "STS" / "STSBenchmark" / "sts-test.csv").unlink()
    with pytest.raises(FileNotFoundError, match="STS-B test file"):
        load_stsb(root, "all")


@FAST
@given(lines=st.lists(st.lists(st.one_of(ANY_TEXT, st.sampled_from(["2.5", "x", ""])), min_size=0, max_size=8)
                      .map("\t".join), min_size=1, max_size=8))
def test_stsb_reader_parses_or_names_the_line(lines):
    from simcse.evaluation.data import read_stsb

    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "sts-dev.csv"
        p.write_text("\n".join(lines) + "\n", encoding="utf-8")
        try:
            pairs = read_stsb(p)
        except ValueError as e:
            assert str(e).startswith(f"{p}:"), e  # file:line: what was expected
            return
        assert len(pairs) == len(p.read_text(encoding="utf-8").splitlines())
