"""Line i of a sentence file is line i for every reader: lines split only at "\\n" (as ``wc -l`` counts).

A lone "\\r" and the other characters ``str.splitlines()`` breaks at (vertical tab, form feed, file/group/
record separators, NEL, line and paragraph separators) stay inside their line in the training readers,
the tool, the command line, the evaluator and the analyses; "\\r\\n" line ends are stripped.
"""
from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from conftest import SENTENCES
from simcse import SimCSE, cli

BREAKS = "\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"
LINES = [SENTENCES[0], SENTENCES[1], f"a man{BREAKS.replace(chr(13), ' ' + chr(13))} is playing .".replace(
    "\x0b", " \x0b"), SENTENCES[3], SENTENCES[4]]


@pytest.fixture
def five_lines(tmp_path):
    f = tmp_path / "five.txt"
    f.write_bytes(("\n".join(LINES) + "\n").encode("utf-8"))
    return f


def test_wc_counts_five_and_so_do_we(five_lines):
    from simcse.files.inputs import iter_lines, split_lines

    assert all(ch in LINES[2] for ch in BREAKS)
    assert len(("\n".join(LINES)).splitlines()) > 5  # what str.splitlines() would make of it
    wc = subprocess.run(["wc", "-l", str(five_lines)], capture_output=True, text=True, check=True).stdout
    assert int(wc.split()[0]) == 5
    assert list(iter_lines(five_lines)) == LINES
    assert split_lines("a\rb\r\nc\n\nd") == ["a\rb", "c", "", "d"]


def test_crlf_is_stripped(tmp_path):
    from simcse.files.inputs import iter_lines, sentence_rows

    f = tmp_path / "crlf.txt"
    f.write_bytes(b"one\r\ntwo\rstill two\r\nthree")
    assert list(iter_lines(f)) == ["one", "two\rstill two", "three"]
    assert [s for _, s in sentence_rows(f)] == ["one", "two\rstill two", "three"]


def test_tool_build_index_row_i_is_line_i(five_lines, tiny_bert_dir):
    t = SimCSE(str(tiny_bert_dir), device="cpu", pooler="avg")
    t.build_index(str(five_lines), use_faiss=False)
    assert t.sentences == LINES
    t.add_to_index(five_lines)
    assert len(t.sentences) == 10


@pytest.mark.slow
def test_cli_encode_row_i_is_line_i(five_lines, tmp_path, tiny_bert_dir):
    out = tmp_path / "e.npy"
    assert cli.main(["encode", "--model", str(tiny_bert_dir), "--pooler", "avg", "--input", str(five_lines),
                     "--output", str(out)]) == 0
    emb = np.load(out)
    assert emb.shape[0] == 5
    t = SimCSE(str(tiny_bert_dir), device="cpu", pooler="avg")
    np.testing.assert_allclose(emb, t.encode(LINES, return_numpy=True), atol=1e-6)
    # the same through stdin
    proc = subprocess.run(
        [sys.executable, "-c", "import sys; from simcse.cli import main; sys.exit(main(sys.argv[1:]))", "encode",
         "--model", str(tiny_bert_dir), "--pooler", "avg", "--input", "-", "--output", str(tmp_path / "s.npy")],
        input=five_lines.read_bytes(), capture_output=True)
    assert proc.returncode == 0, proc.stderr.decode()
    np.testing.assert_allclose(np.load(tmp_path / "s.npy"), emb, atol=1e-6)


def test_cli_query_file_one_query_a_line(five_lines, tmp_path, tiny_bert_dir, capsys):
    idx = tmp_path / "idx"
    assert cli.main(["index", "--model", str(tiny_bert_dir), "--pooler", "avg", "--input", str(five_lines),
                     "--output", str(idx), "--no-faiss"]) == 0
    capsys.readouterr()
    assert cli.main(["search", "--index", str(idx), "--query-file", str(five_lines), "--json", "--top-k", "1"]) == 0
    rows = [json.loads(x) for x in capsys.readouterr().out.split("\n") if x]
    assert [r["query"] for r in rows] == LINES
    assert [r["results"][0][0] for r in rows] == LINES


def test_training_readers_row_i_is_line_i(five_lines):
    from simcse.training.data import load_next_sentence_dataset, load_sentence_dataset

    ds, cols = load_sentence_dataset(five_lines)
    assert cols == ["sent0"] and ds["sent0"] == LINES
    pairs, _ = load_next_sentence_dataset(five_lines, "next_sentence")
    assert pairs["sent0"] == [s.strip() for s in LINES[:4]] and pairs["sent1"] == [s.strip() for s in LINES[1:]]


def test_training_text_cache_follows_the_file(tmp_path):
    from simcse.training.data import load_sentence_dataset

    f = tmp_path / "t.txt"
    f.write_text("one line\nanother line\n")
    assert load_sentence_dataset(f)[0]["sent0"] == ["one line", "another line"]
    f.write_text("changed\n")
    assert load_sentence_dataset(f)[0]["sent0"] == ["changed"]


def test_evaluation_and_analysis_readers(five_lines, tmp_path):
    from simcse.training.data import read_sentences
    from simcse.evaluation.data import read_sts_subset

    assert read_sentences(five_lines) == [s.strip() for s in LINES]
    inp = tmp_path / "STS.input.x.txt"
    inp.write_text("".join(f"{s}\t{s} too\n" for s in LINES), encoding="utf-8")
    gs = tmp_path / "STS.gs.x.txt"
    gs.write_text("".join(f"{i}\n" for i in range(5)))
    pairs = read_sts_subset(inp, gs)  # old: "has 6 lines but ... has 5"
    assert len(pairs.scores) == 5 and list(pairs.scores) == [0, 1, 2, 3, 4]
    assert pairs.sent1[3] != pairs.sent1[2] and "man" in pairs.sent1[2] and "playing" in pairs.sent1[2]


def test_csv_cells_with_a_carriage_return(tmp_path):
    from simcse.files.inputs import sentence_rows

    ok = tmp_path / "q.csv"
    ok.write_bytes(b'id,text\r\n0,"one\rstill one"\r\n1,"two\nlines"\r\n2,three\r\n')
    assert list(sentence_rows(ok, "text")) == [(2, "one\rstill one"), (3, "two\nlines"), (5, "three")]
    bad = tmp_path / "b.csv"
    bad.write_bytes(b"id,text\n0,one\rstill one\n1,two\n")
    with pytest.raises(ValueError, match=r"b\.csv:2: not a readable CSV file: .*quote a cell"):
        list(sentence_rows(bad, "text"))


# ------------------------------------------------------------------------------------ lone surrogates
def test_lone_surrogate_is_refused_naming_the_item(tmp_path):
    """A str holding half of a surrogate pair (a JSON "\\ud83d" without its pair) is not text: the one input check
    names the item, in every reader of str input (here check_sentences and the JSONL reader)."""
    from simcse.files.inputs import check_sentences, sentence_rows

    assert check_sentences(["a dog \U0001F600 runs", "ok"]) == (["a dog \U0001F600 runs", "ok"], False)
    with pytest.raises(ValueError, match=r"^sentences\[1\] holds a lone UTF-16 surrogate U\+D83D at character 6, "
                                         r"which is not text; expected valid Unicode"):
        check_sentences(["fine", "a dog \ud83d runs"])
    with pytest.raises(ValueError, match=r"^queries holds a lone UTF-16 surrogate U\+DE00 at character 0"):
        check_sentences("\ude00 cut", "queries")
    f = tmp_path / "s.jsonl"
    f.write_text('{"text": "a dog"}\n{"text": "half \\ud83d emoji"}\n', encoding="utf-8")
    with pytest.raises(ValueError, match=r"s\.jsonl:2: the sentence holds a lone UTF-16 surrogate U\+D83D"):
        list(sentence_rows(f, "text"))


def test_tool_encode_names_the_item_with_a_lone_surrogate(tiny_bert_dir):
    tool = SimCSE(str(tiny_bert_dir), pooler="avg", device="cpu")
    with pytest.raises(ValueError, match=r"sentences\[2\] holds a lone UTF-16 surrogate U\+D83D at character 4"):
        tool.encode(["a dog", "a cat", "cut \ud83d"])
    with pytest.raises(ValueError, match=r"keys\[0\] holds a lone UTF-16 surrogate"):
        tool.similarity("a dog", ["\udfff"])
