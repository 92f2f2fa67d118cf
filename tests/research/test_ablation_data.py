"""scripts/run_ablation.py (simcse.research.ablation over the experiment runner): rows whose data the given files
cannot provide stop the table up front, with one line; the CPU-scale batch of the supervised rows."""
from __future__ import annotations

import pytest

from simcse.experiments.spec import data_problem, parse_spec
from simcse.research import ablation


def _stop(argv) -> str:
    with pytest.raises(SystemExit) as exc:
        ablation.main(argv)
    msg = str(exc.value.code)
    assert msg.startswith("error: ") and "\n" not in msg, msg
    return msg


def test_next_sentence_rows_refuse_the_shuffled_wiki1m_sample(tmp_path, tiny_bert_dir):
    wiki = tmp_path / "wiki1m_for_simcse.txt"
    wiki.write_text("one.\ntwo.\nthree.\n")
    out = tmp_path / "abl"
    msg = _stop(["--table", "2", "--rows", "simcse", "next_sentence", "--model_name_or_path", str(tiny_bert_dir),
                 "--train_file", str(wiki), "--output_dir", str(out), "--no_baseline"])
    assert "'next_sentence'" in msg and "consecutive sentences" in msg and "reading order" in msg
    assert not out.exists()  # stopped before the first row trained
    running = {"objective": "next_3_sentences", "train_file": str(tmp_path / "my_paragraphs.txt")}
    assert data_problem(running) is None  # running text under another name is accepted


def test_neutral_row_needs_a_neutral_column(tmp_path, tiny_bert_dir):
    triplets = tmp_path / "nli.csv"
    triplets.write_text("sent0,sent1,hard_neg\na,b,c\n")
    msg = _stop(["--table", "7", "--rows", "neutral", "--model_name_or_path", str(tiny_bert_dir),
                 "--sup_train_file", str(triplets), "--output_dir", str(tmp_path / "abl"), "--no_baseline"])
    assert "'neutral' column" in msg and "['sent0', 'sent1', 'hard_neg']" in msg and "SNLI+MNLI" in msg
    quads = tmp_path / "nli4.csv"
    quads.write_text("sent0,sent1,hard_neg,neutral\na,b,c,d\n")
    assert data_problem({"neutral_as_negative": True, "train_file": str(quads)}) is None
    assert "cannot read" in data_problem({"neutral_as_negative": True, "train_file": str(tmp_path / "no.csv")})


def _options(raw: dict, arm: str) -> dict:
    return next(r.options for r in parse_spec(raw, "t").runs() if r.arm == arm)


def test_cpu_scale_batch_is_the_global_batch_capped_and_paper_scale_keeps_it():
    sup = _options(ablation.table_spec("7"), "alpha1.0")
    assert sup["per_device_train_batch_size"] == 128 and "global_batch_size" not in sup
    assert sup["max_train_samples"] == 30 * 128 and sup["train_file"].endswith(".csv")
    unsup = _options(ablation.table_spec("6"), "unsup_mlp")
    assert unsup["per_device_train_batch_size"] == 64 and unsup["max_train_samples"] == 30 * 64
    assert _options(ablation.table_spec("7", max_steps=10), "alpha1.0")["max_train_samples"] == 10 * 128
    given = _options(ablation.table_spec("7", max_steps=10, per_device_train_batch_size=16), "alpha1.0")
    assert given["per_device_train_batch_size"] == 16 and given["max_train_samples"] == 160
    gpu = _options(ablation.table_spec("7", paper_scale=True), "alpha1.0")
    assert gpu["global_batch_size"] == 512 and "per_device_train_batch_size" not in gpu
    assert "max_steps" not in gpu and gpu["model_name_or_path"] == "bert-base-uncased"
