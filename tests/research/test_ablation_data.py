"""simcse.research.ablation: rows whose data the given files cannot provide stop the table up front, with one line."""
from __future__ import annotations

import pytest

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
    assert not list((out / "rows").glob("*.json"))  # stopped before the first row trained
    row = next(r for r in ablation.load_rows("2") if r["slug"] == "next_3_sentences")
    opts = ablation.parse(["--table", "2", "--train_file", str(tmp_path / "my_paragraphs.txt")])
    assert ablation.check_row_data(row, opts) is None  # running text under another name is accepted


def test_neutral_row_needs_a_neutral_column(tmp_path, tiny_bert_dir):
    triplets = tmp_path / "nli.csv"
    triplets.write_text("sent0,sent1,hard_neg\na,b,c\n")
    msg = _stop(["--table", "7", "--rows", "neutral", "--model_name_or_path", str(tiny_bert_dir),
                 "--sup_train_file", str(triplets), "--output_dir", str(tmp_path / "abl"), "--no_baseline"])
    assert "'neutral' column" in msg and "['sent0', 'sent1', 'hard_neg']" in msg and "SNLI+MNLI" in msg
    row = next(r for r in ablation.load_rows("7") if r["slug"] == "neutral")
    quads = tmp_path / "nli4.csv"
    quads.write_text("sent0,sent1,hard_neg,neutral\na,b,c,d\n")
    assert ablation.check_row_data(row, ablation.parse(["--table", "7", "--sup_train_file", str(quads)])) is None
    missing = ablation.check_row_data(row, ablation.parse(["--table", "7", "--sup_train_file", str(tmp_path / "no.csv")]))
    assert "cannot read" in missing


def test_cpu_scale_batch_is_the_global_batch_capped_and_paper_scale_keeps_it(tmp_path):
    sup = next(r for r in ablation.load_rows("7") if r["slug"] == "alpha1.0")
    unsup = next(r for r in ablation.load_rows("6") if r["slug"] == "unsup_mlp")
    cpu = ablation.parse(["--table", "7"])
    argv = ablation.row_argv(sup, cpu, tmp_path)
    assert argv[argv.index("--per_device_train_batch_size") + 1] == "128" and "--global_batch_size" not in argv
    argv = ablation.row_argv(unsup, cpu, tmp_path)
    assert argv[argv.index("--per_device_train_batch_size") + 1] == "64"
    gpu = ablation.parse(["--table", "7", "--paper_scale"])
    argv = ablation.row_argv(sup, gpu, tmp_path)
    assert argv[argv.index("--global_batch_size") + 1] == "512" and "--per_device_train_batch_size" not in argv
