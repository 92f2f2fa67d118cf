import json

import pytest

from conftest import logged_losses, run_training, training_error
from simcse.train import main


def _args(model_dir, train_file, out, *extra):
    return [
        "--model_name_or_path", str(model_dir), "--train_file", str(train_file), "--output_dir", str(out),
        "--per_device_train_batch_size", "8", "--learning_rate", "1e-3", "--max_steps", "30",
        "--eval_strategy", "no", "--save_strategy", "no", "--report_to", "none", "--logging_steps", "1",
        "--eval_before_training", "false", "--test_after_training", "false", "--seed", "0",
        "--use_cpu", "true", "--dataloader_pin_memory", "false", *extra,
    ]


@pytest.mark.parametrize("arch", ["bert", "roberta"])
def test_short_training_lowers_loss(tmp_path, request, arch, train_txt):
    folder = request.getfixturevalue(f"tiny_{arch}_dir")
    out = tmp_path / "out"
    logs = logged_losses(run_training(_args(folder, train_txt, out, "--pooler_type", "avg")))
    assert len(logs) == 30
    first, last = sum(logs[:5]) / 5, sum(logs[-5:]) / 5
    assert last < 0.7 * first, (first, last)
    assert json.loads((out / "simcse_config.json").read_text())["pooler_type"] == "avg"


def test_cls_mlp_only_train_is_saved(tmp_path, tiny_bert_dir, train_txt):
    out = tmp_path / "out"
    main(_args(tiny_bert_dir, train_txt, out, "--pooler_type", "cls", "--mlp_only_train", "true", "--max_steps", "2"))
    cfg = json.loads((out / "simcse_config.json").read_text())
    assert cfg == {"format_version": 1, "pooler_type": "cls", "mlp_only_train": True, "hidden_size": 32}
    assert (out / "simcse_mlp.safetensors").is_file()


_run_error = training_error


@pytest.mark.parametrize("extra, expected", [
    (["--pooler_type", "max"], "unknown pooler_type 'max'"),
    (["--temp", "0"], "--temp must be"),
    (["--temp", "-0.05"], "--temp must be"),
    (["--max_seq_length", "1"], "--max_seq_length must be"),
    (["--per_device_train_batch_size", "1"], "per_device_train_batch_size must be >= 2"),
    (["--cpu_dropout", "maybe"], "argument --cpu_dropout"),
])
def test_bad_arguments_give_one_line_error(tmp_path, tiny_bert_dir, train_txt, extra, expected):
    out = tmp_path / "out"
    msg = _run_error(_args(tiny_bert_dir, train_txt, out) + extra)
    assert expected in msg
    assert not out.exists()  # nothing written


def test_missing_and_empty_train_file(tmp_path, tiny_bert_dir):
    out = tmp_path / "out"
    msg = _run_error(_args(tiny_bert_dir, tmp_path / "wiki1m_for_simcse.txt", out))
    assert "does not exist" in msg and "data/download_wiki.sh" in msg
    empty = tmp_path / "empty.txt"
    empty.write_text("")
    assert "is empty" in _run_error(_args(tiny_bert_dir, empty, out))
    blank = tmp_path / "blank.txt"
    blank.write_text("\n  \n\n")
    assert "no usable sentence" in _run_error(_args(tiny_bert_dir, blank, out))
    assert not out.exists()


def test_blank_lines_are_skipped_and_counted(tmp_path, caplog):
    from simcse.data import load_sentence_dataset

    p = tmp_path / "t.txt"
    p.write_text("one sentence .\n\n   \nanother one .\n")
    with caplog.at_level("WARNING"):
        ds, cols = load_sentence_dataset(p)
    assert ds["sent0"] == ["one sentence .", "another one ."] and cols == ["sent0"]
    assert "skipped 2 blank lines of 4" in caplog.text


def test_collator_pads_and_duplicates():
    from simcse.data import ContrastiveCollator

    feats = [{"input_ids": [[2, 7, 3]], "attention_mask": [[1, 1, 1]]}, {"input_ids": [[2, 3]], "attention_mask": [[1, 1]]}]
    b = ContrastiveCollator(pad_token_id=0)(feats)
    assert b["input_ids"].shape == (2, 2, 3)
    assert b["input_ids"][1].tolist() == [[2, 3, 0], [2, 3, 0]]
    assert b["attention_mask"][1].tolist() == [[1, 1, 0], [1, 1, 0]]
    b = ContrastiveCollator(pad_token_id=0, max_seq_length=5, pad_to_max_length=True)(feats)
    assert b["input_ids"].shape == (2, 2, 5)


def test_missing_senteval_data_stops_before_training(tmp_path, tiny_bert_dir, train_txt):
    out = tmp_path / "out"
    argv = _args(tiny_bert_dir, train_txt, out) + ["--eval_before_training", "true", "--senteval_dir", str(tmp_path / "nope")]
    msg = _run_error(argv)
    assert "nope" in msg and "download_senteval.sh" in msg
    assert not out.exists()


def test_bad_config_file_and_output_dir_give_one_line_error(tmp_path, tiny_bert_dir, train_txt):
    assert "cannot read config file" in _run_error([str(tmp_path / "nope.json")])
    bad = tmp_path / "bad.json"
    bad.write_text('{"temp": 0.05,')
    assert "is not valid JSON" in _run_error([str(bad)])
    listed = tmp_path / "list.json"
    listed.write_text("[1, 2]")
    assert "must hold a JSON object" in _run_error([str(listed)])
    a_file = tmp_path / "taken"
    a_file.write_text("x")
    for out in (a_file, a_file / "sub"):
        msg = _run_error(_args(tiny_bert_dir, train_txt, out))
        assert f"{str(a_file)!r} is a file, not a folder" in msg
    assert a_file.read_text() == "x"
