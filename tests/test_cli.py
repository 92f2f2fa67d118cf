"""The ``simcse`` command: encode / index / search / export in-process; train and evaluate delegation."""
import json
import subprocess
import sys

import numpy as np
import pytest

from conftest import SENTENCES
from simcse import cli
from simcse.retrieval.tool import SimCSE


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    f = tmp_path_factory.mktemp("cli") / "corpus.txt"
    f.write_text("\n".join(SENTENCES) + "\n")
    return f


@pytest.fixture(scope="module")
def tool(tiny_bert_dir):
    return SimCSE(str(tiny_bert_dir), pooler="avg", device="cpu")


def test_encode_writes_npy_in_line_order(tmp_path, tiny_bert_dir, corpus, tool, capsys):
    out = tmp_path / "emb.npy"
    rc = cli.main(["encode", "--model", str(tiny_bert_dir), "--pooler", "avg", "--input", str(corpus),
                   "--output", str(out), "--chunk-size", "5", "--batch-size", "3"])
    assert rc == 0
    emb = np.load(out)
    assert emb.shape == (len(SENTENCES), 32) and emb.dtype == np.float32
    np.testing.assert_allclose(emb, tool.encode(SENTENCES, return_numpy=True), rtol=1e-5, atol=1e-6)
    assert "wrote" in capsys.readouterr().err


def test_encode_blank_lines(tmp_path, tiny_bert_dir, capsys):
    f = tmp_path / "in.txt"
    f.write_text("a dog .\n\n  \na cat .\n")
    args = ["encode", "--model", str(tiny_bert_dir), "--pooler", "avg", "--input", str(f), "--output",
            str(tmp_path / "e.npy")]
    assert cli.main(args) == 2
    assert f"error: {f}:2 is blank" in capsys.readouterr().err
    assert cli.main(args + ["--skip-blank"]) == 0
    assert np.load(tmp_path / "e.npy").shape == (2, 32)


def test_index_then_search(tmp_path, tiny_bert_dir, corpus, capsys):
    idx = tmp_path / "idx"
    assert cli.main(["index", "--model", str(tiny_bert_dir), "--pooler", "avg", "--input", str(corpus),
                     "--output", str(idx), "--no-faiss"]) == 0
    capsys.readouterr()
    # no --model: the index names the model it was built with
    assert cli.main(["search", "--index", str(idx), "--pooler", "avg", "--query", SENTENCES[4], "--query",
                     SENTENCES[7], "--top-k", "2", "--threshold", "-1", "--json"]) == 0
    lines = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert [x["query"] for x in lines] == [SENTENCES[4], SENTENCES[7]]
    assert [x["results"][0][0] for x in lines] == [SENTENCES[4], SENTENCES[7]]
    assert all(len(x["results"]) == 2 for x in lines)
    assert cli.main(["search", "--index", str(idx), "--model", str(tiny_bert_dir), "--pooler", "avg",
                     "--query", "a dog .", "--threshold", "1.5"]) == 0
    assert "nothing with cosine >= 1.5" in capsys.readouterr().out


def test_search_errors(tmp_path, tiny_bert_dir, capsys):
    assert cli.main(["search", "--index", str(tmp_path), "--query", "x"]) == 2
    assert "pass --model" in capsys.readouterr().err
    assert cli.main(["search", "--index", str(tmp_path), "--model", str(tiny_bert_dir), "--query", "x"]) == 2
    assert "index_config.json is missing" in capsys.readouterr().err
    assert cli.main(["search", "--index", str(tmp_path)]) == 2
    assert "at least one --query" in capsys.readouterr().err


def test_bad_model_and_inputs(tmp_path, tiny_bert_dir, corpus, capsys):
    assert cli.main(["encode", "--model", str(tiny_bert_dir), "--pooler", "mean", "--input", str(corpus),
                     "--output", str(tmp_path / "e.npy")]) == 2
    assert "unknown pooler_type 'mean'" in capsys.readouterr().err
    assert cli.main(["encode", "--model", str(tmp_path), "--input", str(corpus), "--output", "e.npy"]) == 2
    assert "no weights" in capsys.readouterr().err
    assert cli.main(["index", "--model", str(tiny_bert_dir), "--input", str(tmp_path / "none.txt"),
                     "--output", str(tmp_path / "i")]) == 2
    assert "is not a file" in capsys.readouterr().err
    assert cli.main(["encode", "--model", str(tiny_bert_dir), "--input", str(corpus), "--output", "e.npy",
                     "--batch-size", "0"]) == 2
    assert "--batch-size must be a positive integer" in capsys.readouterr().err
    assert cli.main([]) == 2


@pytest.mark.parametrize("fmt", ["sentence-transformers", "huggingface"])
def test_export(tmp_path, tiny_bert_dir, fmt):
    out = tmp_path / "exp"
    assert cli.main(["export", "--model", str(tiny_bert_dir), "--pooler", "cls", "--output", str(out),
                     "--format", fmt]) == 0
    assert (out / "config.json").is_file()
    assert (out / "modules.json").is_file() == (fmt == "sentence-transformers")


def test_train_gets_the_rest_of_argv(monkeypatch):
    import simcse.training.train

    seen = []
    monkeypatch.setattr(simcse.training.train, "main", lambda argv: seen.append(argv) or {"loss": 1.0})
    assert cli.main(["train", "--model_name_or_path", "m", "--help"]) == 0
    assert seen == [["--model_name_or_path", "m", "--help"]]


def test_evaluate_runs_the_packaged_evaluation_command(capsys):
    with pytest.raises(SystemExit) as e:
        cli.main(["evaluate", "--help"])
    assert e.value.code == 0
    assert "--model_name_or_path" in capsys.readouterr().out


def test_module_entry_point_runs():
    r = subprocess.run([sys.executable, "-m", "simcse.cli", "--help"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0
    for name in ("encode", "index", "search", "export", "train", "evaluate"):
        assert name in r.stdout


def test_non_utf8_input_names_file_line_and_byte(tmp_path, tiny_bert_dir, capsys):
    f = tmp_path / "latin.txt"
    f.write_bytes("a dog .\na caf\u00e9 .\n".encode("latin-1"))  # line 2, byte 6 is 0xe9
    args = ["encode", "--model", str(tiny_bert_dir), "--pooler", "avg", "--input", str(f), "--output",
            str(tmp_path / "e.npy")]
    assert cli.main(args) == 2
    err = capsys.readouterr().err
    assert f"{f}:2: byte 6 (b'\\xe9') is not UTF-8; expected a UTF-8 text file" in err
    assert not (tmp_path / "e.npy").exists()
    tool = SimCSE(str(tiny_bert_dir), pooler="avg", device="cpu")
    with pytest.raises(ValueError, match=r"latin.txt:2: byte 6 .* is not UTF-8; expected a UTF-8 text file"):
        tool.build_index(str(f))


# ------------------------------------------------------------------------------------ simcse index: options
def _error_line(err: str) -> str:
    """The one ``error: ...`` line a failed command printed (after any progress bars), checked to be the last."""
    lines = [x for x in err.strip().splitlines() if x.startswith("error:")]
    assert len(lines) == 1 and err.strip().endswith(lines[0]) and "Traceback" not in err, err
    return lines[0]


def test_index_output_is_checked_before_any_encoding(tmp_path, tiny_bert_dir, corpus, capsys, monkeypatch):
    def no_encoding(*args, **kwargs):
        raise AssertionError("the corpus was encoded before --output was checked")

    monkeypatch.setattr(SimCSE, "encode", no_encoding)
    busy = tmp_path / "notes"
    busy.mkdir()
    (busy / "todo.txt").write_text("keep me\n")
    a_file = tmp_path / "a_file"
    a_file.write_text("x\n")
    for out, expected in ((busy, "exists and is not a saved index"), (a_file / "idx", "lies under"),
                          (a_file, "is an existing file")):
        assert cli.main(["index", "--model", str(tiny_bert_dir), "--pooler", "avg", "--input", str(corpus),
                         "--output", str(out), "--no-faiss"]) == 2
        err = _error_line(capsys.readouterr().err)
        assert err.startswith("error: --output: ") and expected in err, err
    assert sorted(p.name for p in busy.iterdir()) == ["todo.txt"] and a_file.read_text() == "x\n"


@pytest.mark.parametrize("kind", ["ivf", "ivfpq"])
def test_index_of_an_input_without_sentences_is_one_error_and_writes_nothing(tmp_path, tiny_bert_dir, kind, capsys):
    pytest.importorskip("faiss")
    empty = tmp_path / "blank.txt"
    empty.write_text("\n  \n\n")
    out = tmp_path / "idx"
    assert cli.main(["index", "--model", str(tiny_bert_dir), "--pooler", "avg", "--input", str(empty),
                     "--output", str(out), "--kind", kind]) == 2
    err = _error_line(capsys.readouterr().err)
    assert "learns its clusters from the vectors it indexes, and none were given" in err, err
    assert not out.exists() and sorted(p.name for p in tmp_path.iterdir()) == ["blank.txt"]
    tool = SimCSE(str(tiny_bert_dir), pooler="avg", device="cpu")
    tool.build_index(SENTENCES, use_faiss=False)
    with pytest.raises(ValueError, match="none were given"):
        tool.build_index(str(empty), kind=kind)
    assert tool.index.ntotal == len(SENTENCES) and tool.search(SENTENCES[0], top_k=1)[0][0] == SENTENCES[0]


def test_fast_is_kind_ivf_and_conflicts_are_named_by_the_options_given(tmp_path, tiny_bert_dir, capsys):
    pytest.importorskip("faiss")
    from conftest import random_sentences

    big = tmp_path / "big.txt"
    big.write_text("\n".join(random_sentences(200, seed=2)) + "\n")
    configs = []
    for flag in (["--fast"], ["--kind", "ivf"]):
        out = tmp_path / flag[-1].lstrip("-")
        assert cli.main(["index", "--model", str(tiny_bert_dir), "--pooler", "avg", "--input", str(big),
                         "--output", str(out), *flag]) == 0
        configs.append(json.loads((out / "index_config.json").read_text()))
    assert configs[0] == configs[1] and configs[0]["kind"] == "faiss_ivf"
    help_text = cli.build_parser()._subparsers._group_actions[0].choices["index"].format_help()
    assert "the same as --kind ivf" in " ".join(help_text.split())
    for argv, expected in ((["--fast", "--kind", "hnsw"], "--fast is --kind ivf; it conflicts with --kind hnsw: give one of them"),
                           (["--fast", "--hnsw-m", "8"], "--hnsw-m does not apply to --fast (--kind ivf)"),
                           (["--kind", "hnsw", "--nlist", "4"], "--nlist does not apply to --kind hnsw"),
                           (["--nprobe", "4"], "--nprobe does not apply to the default --kind exact")):
        assert cli.main(["index", "--model", str(tiny_bert_dir), "--pooler", "avg", "--input", str(big),
                         "--output", str(tmp_path / "x"), *argv]) == 2
        assert _error_line(capsys.readouterr().err) == f"error: {expected}"
    tool = SimCSE(str(tiny_bert_dir), pooler="avg", device="cpu")
    with pytest.raises(ValueError, match=r"faiss_fast=True asks for an IVF index, but kind='hnsw'"):
        tool.build_index(SENTENCES, faiss_fast=True, kind="hnsw")

# ------------------------------------------------------------------------------ sentences from a dataset
@pytest.fixture(scope="module")
def dataset_folders(tmp_path_factory):
    """The corpus as a local folder in the Hub's layout (README configs) and as a save_to_disk folder."""
    datasets = pytest.importorskip("datasets")
    root = tmp_path_factory.mktemp("cli_datasets")
    (root / "hub" / "data").mkdir(parents=True)
    (root / "hub" / "data" / "corpus.txt").write_text("\n".join(SENTENCES) + "\n")
    (root / "hub" / "data" / "other.txt").write_text("a dog .\n")
    (root / "hub" / "README.md").write_text("---\nconfigs:\n- config_name: corpus\n  data_files: data/corpus.txt\n"
                                            "- config_name: other\n  data_files: data/other.txt\n---\n")
    datasets.Dataset.from_dict({"sentence": SENTENCES, "n": list(range(len(SENTENCES)))}).save_to_disk(root / "disk")
    return root


@pytest.mark.parametrize("source", [
    ["--dataset_name", "@hub", "--dataset_config_name", "corpus"],
    ["--dataset_name", "@hub", "--dataset_config_name", "corpus", "--streaming"],
    ["--dataset_name", "@disk", "--sentence_column", "sentence"],
])
def test_encode_from_a_dataset_equals_the_text_file(tmp_path, tiny_bert_dir, dataset_folders, tool, source):
    source = [str(dataset_folders / a[1:]) if a.startswith("@") else a for a in source]
    out = tmp_path / "emb.npy"
    assert cli.main(["encode", "--model", str(tiny_bert_dir), "--pooler", "avg", *source, "--output", str(out),
                     "--chunk-size", "5"]) == 0
    np.testing.assert_allclose(np.load(out), tool.encode(SENTENCES, return_numpy=True), rtol=1e-5, atol=1e-6)


def test_encode_shards_and_index_from_a_streamed_dataset(tmp_path, tiny_bert_dir, dataset_folders, capsys):
    from simcse.retrieval.shards import ShardSet

    source = ["--dataset_name", str(dataset_folders / "hub"), "--dataset_config_name", "corpus", "--streaming"]
    shards = tmp_path / "shards"
    assert cli.main(["encode", "--model", str(tiny_bert_dir), "--pooler", "avg", *source, "--output", str(shards),
                     "--shard-size", "5"]) == 0
    s = ShardSet(shards)
    assert s.num_rows == len(SENTENCES) and list(s.iter_sentences()) == SENTENCES
    idx = tmp_path / "idx"
    assert cli.main(["index", "--model", str(tiny_bert_dir), "--pooler", "avg", *source, "--output", str(idx),
                     "--no-faiss"]) == 0
    capsys.readouterr()
    assert cli.main(["search", "--index", str(idx), "--query", SENTENCES[3], "--top-k", "1", "--threshold", "-1",
                     "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["results"][0][0] == SENTENCES[3]


@pytest.mark.parametrize("extra, expected", [
    (["--input", "@corpus", "--dataset_name", "@hub"], "both name the sentences: give one"),
    ([], "give --input (a sentence file) or --dataset_name"),
    (["--dataset_name", "@disk"], "has no column 'text' (--sentence_column); its columns: ['sentence', 'n']"),
    (["--dataset_name", "@disk", "--column", "sentence"], "for --dataset_name use --sentence_column"),
    (["--input", "@corpus", "--streaming"], "apply to --dataset_name"),
])
def test_dataset_source_errors(tmp_path, tiny_bert_dir, dataset_folders, corpus, capsys, extra, expected):
    paths = {"corpus": str(corpus), "hub": str(dataset_folders / "hub"), "disk": str(dataset_folders / "disk")}
    extra = [paths[a[1:]] if a.startswith("@") else a for a in extra]
    for cmd in ("encode", "index"):
        out = tmp_path / cmd / ("e.npy" if cmd == "encode" else "idx")
        assert cli.main([cmd, "--model", str(tiny_bert_dir), "--pooler", "avg", *extra, "--output", str(out)]) == 2
        err = capsys.readouterr().err
        assert expected in err and err.count("\n") == 1, err
        assert not out.exists()


def test_search_on_a_missing_index_folder_says_so(tmp_path, capsys):
    assert cli.main(["search", "--index", str(tmp_path / "nosuch"), "--query", "a man"]) == 2
    err = capsys.readouterr().err
    assert "is not a folder: expected a folder written by 'simcse index'" in err and "--model" not in err


def test_index_of_an_empty_input_is_refused_and_writes_nothing(tiny_bert_dir, tmp_path, capsys):
    (tmp_path / "empty.txt").write_text("\n  \n")
    out = tmp_path / "idx"
    assert cli.main(["index", "--model", str(tiny_bert_dir), "--pooler", "avg", "--input", str(tmp_path / "empty.txt"),
                     "--output", str(out), "--device", "cpu"]) == 2
    err = capsys.readouterr().err
    assert "holds no sentence" in err and "nothing written" in err and err.count("\n") == 1
    assert not out.exists()


def test_search_on_a_folder_that_holds_no_index(tmp_path, tiny_bert_dir, capsys):
    (tmp_path / "idx").mkdir()
    assert cli.main(["search", "--index", str(tmp_path / "idx"), "--query", "a man"]) == 2
    assert "simcse_index.json is missing: pass --model" in capsys.readouterr().err
    assert cli.main(["search", "--index", str(tmp_path / "idx"), "--model", str(tiny_bert_dir), "--query", "a man"]) == 2
    assert "is not a saved index: index_config.json is missing" in capsys.readouterr().err


SUBCOMMANDS = ("encode", "index", "search", "serve", "export", "convert")


def _subparsers():
    import argparse

    parser = cli.build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return {name: sub.choices[name] for name in SUBCOMMANDS}


@pytest.mark.parametrize("name", SUBCOMMANDS)
def test_every_help_shows_every_default(name, capsys):
    """`simcse NAME --help`: every option has a help text, and one whose default is a value (not None) shows it
    there, so a hidden default (search's threshold) cannot be missed."""
    with pytest.raises(SystemExit):
        cli.main([name, "--help"])
    text = " ".join(capsys.readouterr().out.split())  # argparse wraps lines
    for action in _subparsers()[name]._actions:
        if not action.option_strings or action.dest == "help":
            continue
        assert action.help, f"simcse {name} {action.option_strings[0]} has no help text"
        if action.default is not None and action.default is not False and action.default != []:
            help_text = " ".join(action.help.split())
            said = "default" in help_text.lower()  # stated in words (e.g. "default: faiss when installed")
            shown = said or f"{help_text} (default: {action.default})" in text
            assert shown, f"simcse {name} {action.option_strings[0]}: default {action.default!r} not in its help"


@pytest.mark.parametrize("name", SUBCOMMANDS)
def test_only_commands_that_read_an_index_speak_of_one_in_the_model_options(name):
    """encode and index take no --index: their model options' help must not send the reader to one."""
    parser = _subparsers()[name]
    takes_index = any("--index" in a.option_strings for a in parser._actions)
    for action in parser._actions:
        if action.dest in ("model", "pooler", "max_length", "truncate_dim"):
            assert ("index" in action.help) == takes_index, (name, action.dest, action.help)


def test_search_help_states_the_threshold_and_why():
    help_text = next(a.help for a in _subparsers()["search"]._actions if a.dest == "threshold")
    assert "default 0.6" in help_text and "reference" in help_text and "fewer than --top_k" in help_text


@pytest.mark.parametrize("name", SUBCOMMANDS)
def test_every_long_option_takes_underscores_and_dashes_underscore_first(name):
    for action in _subparsers()[name]._actions:
        longs = [o for o in action.option_strings if o.startswith("--") and o != "--help"]
        for o in longs:
            for alt in ("--" + o[2:].replace("-", "_"), "--" + o[2:].replace("_", "-")):
                assert alt in action.option_strings, (name, o, alt)
        two_words = [o for o in longs if "_" in o[2:] or "-" in o[2:]]
        if two_words:
            assert "_" in two_words[0], (name, longs)  # the reference's / HF's underscore spelling is listed first
    model = next(a for a in _subparsers()[name]._actions if a.dest == "model")
    assert model.option_strings[:2] == ["--model_name_or_path", "--model"]


def test_underscore_and_dash_spellings_give_the_same_search(tmp_path, tiny_bert_dir, corpus, capsys):
    idx = tmp_path / "idx"
    assert cli.main(["index", "--model_name_or_path", str(tiny_bert_dir), "--pooler", "avg", "--input", str(corpus),
                     "--output", str(idx), "--no_faiss", "--batch_size", "4"]) == 0
    capsys.readouterr()
    outs = []
    for flags in (["--top_k", "2", "--batch_size", "3"], ["--top-k", "2", "--batch-size", "3"]):
        assert cli.main(["search", "--index", str(idx), "--query", SENTENCES[2], "--threshold", "-1", "--json",
                         *flags]) == 0
        outs.append(capsys.readouterr().out)
    assert outs[0] == outs[1] and len(json.loads(outs[0])["results"]) == 2
    assert cli.main(["search", "--index", str(idx), "--query", "x", "--top_k", "0"]) == 2
    assert "--top_k must be a positive integer, got 0" in capsys.readouterr().err  # the spelling given


def test_evaluate_takes_the_same_spellings():
    from simcse.evaluation.cli import parse_args

    a = parse_args(["--model", "m", "--batch-size", "8", "--max-seq-length", "32", "--task-set", "sts"])
    b = parse_args(["--model_name_or_path", "m", "--batch_size", "8", "--max_seq_length", "32", "--task_set", "sts"])
    assert vars(a) == vars(b) and (a.model_name_or_path, a.batch_size, a.task_set) == ("m", 8, "sts")


@pytest.mark.parametrize("name", sorted({*cli.COMMANDS, *cli.PASS_THROUGH}))
def test_every_sub_command_usage_and_errors_name_simcse_and_the_command(name, capsys, monkeypatch):
    """As under ``python -m simcse`` (argv[0] ``__main__.py``): usage and argparse errors say ``simcse <name>``."""
    monkeypatch.setattr(sys, "argv", ["/x/simcse/__main__.py", name, "--help"])
    try:
        status = cli.main([name, "--help"])
    except SystemExit as e:
        status = e.code
    assert status == 0
    assert capsys.readouterr().out.startswith(f"usage: simcse {name} ")
    if name == "train":  # its parser's errors are its own one-line "error: ..." (no usage)
        return
    try:
        cli.main([name, "--no-such-option"])
    except SystemExit:
        pass
    err = capsys.readouterr().err
    assert f"usage: simcse {name} " in err and f"simcse {name}: error:" in err, err
