"""scripts/evaluation.py --truncate_dim: STS of the embeddings' prefix, one table row per size, the trained
sizes read from the folder; bad values get one error naming the option before any encoding."""
from __future__ import annotations

import json

import numpy as np
import pytest
from scipy.stats import spearmanr

from tests.conftest import load_script, write_senteval


@pytest.fixture(scope="module")
def senteval_dir(tmp_path_factory):
    return write_senteval(tmp_path_factory.mktemp("senteval") / "downstream")


@pytest.fixture(scope="module")
def trained_folder(tiny_bert_dir, tmp_path_factory):
    from simcse.models.modeling import SimCSEModel

    m = SimCSEModel.from_pretrained(str(tiny_bert_dir), pooler_type="avg")
    m.matryoshka_dims = [32, 16, 8]
    folder = tmp_path_factory.mktemp("m") / "m"
    m.save_pretrained(folder)
    return folder


def _main():
    return load_script("evaluation", "simcse_evaluation_script").main


def _stsb_test_spearman(folder, senteval_dir, dim):
    from simcse.evaluation.data import read_stsb
    from simcse.models.modeling import SimCSEModel

    pairs = read_stsb(senteval_dir / "STS/STSBenchmark/sts-test.csv")
    m = SimCSEModel.from_pretrained(str(folder)).eval()
    a = m.encode(list(pairs.sent1), max_length=512)[:, :dim]
    b = m.encode(list(pairs.sent2), max_length=512)[:, :dim]
    cos = (a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)
    return 100 * spearmanr(cos, pairs.scores).statistic


def test_trained_sizes_give_one_sts_row_each(trained_folder, senteval_dir, tmp_path, capsys):
    out = tmp_path / "o.json"
    _main()(["--model_name_or_path", str(trained_folder), "--data_dir", str(senteval_dir), "--tasks", "STSBenchmark",
             "SICKRelatedness", "--truncate_dim", "trained", "--output_json", str(out), "--quiet"])
    printed = capsys.readouterr().out
    assert "STS (Spearman x 100) at each embedding size" in printed
    rows = [line for line in printed.splitlines() if line.startswith("|")]
    assert [r.split("|")[1].strip() for r in rows] == ["dim", "32", "16", "8"]
    saved = json.loads(out.read_text())
    assert saved["truncate_dim"] == [32, 16, 8]
    for dim in (32, 8):
        got = saved["tables_by_dim"][str(dim)]["sts"]["STSBenchmark"]
        assert got == pytest.approx(_stsb_test_spearman(trained_folder, senteval_dir, dim), abs=0.006)
    assert saved["tables_by_dim"]["8"] != saved["tables_by_dim"]["32"]


def test_one_size_prints_the_usual_tables(trained_folder, senteval_dir, capsys):
    res = _main()(["--model_name_or_path", str(trained_folder), "--data_dir", str(senteval_dir), "--tasks",
                   "STSBenchmark", "--truncate_dim", "16", "--quiet"])
    printed = capsys.readouterr().out
    assert "truncate_dim 16 (of 32)" in printed
    assert 100 * res["STSBenchmark"]["test"]["spearman"][0] == pytest.approx(
        _stsb_test_spearman(trained_folder, senteval_dir, 16), abs=1e-3)


@pytest.mark.parametrize("value,needle", [("0", "--truncate_dim must be a positive integer (1..32), got 0"),
                                          ("64", "--truncate_dim 64 is larger than the embedding size 32"),
                                          ("x", "--truncate_dim must be a positive integer, a comma list"),
                                          ("trained", "records no matryoshka_dims")])
def test_bad_values_exit_with_one_line(tiny_bert_dir, senteval_dir, value, needle):
    with pytest.raises(SystemExit) as e:
        _main()(["--model_name_or_path", str(tiny_bert_dir), "--pooler", "avg", "--data_dir", str(senteval_dir),
                 "--tasks", "STSBenchmark", "--truncate_dim", value, "--quiet"])
    assert str(e.value.code).startswith("error: ") and needle in str(e.value.code)
