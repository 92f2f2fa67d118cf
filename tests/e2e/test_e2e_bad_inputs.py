"""End to end: the bad-input table, one row per bad input, with where it enters and what must happen.

Each row names the layer (``reader``: the training data readers of :mod:`simcse.training.data`; ``evaluator``:
:mod:`simcse.evaluation`; ``tool``: :class:`simcse.retrieval.tool.SimCSE` / :class:`simcse.SimCSEModel`; ``cli``: the
``simcse`` command of :mod:`simcse.cli`, whose ``train`` and ``evaluate`` run ``scripts/train.py`` and
``scripts/evaluation.py``), the input, and the outcome: an exception type plus message fragments that must
all appear -- the fragments check that the message names the input, the position where it applies (line,
item, row, fold...) and what was expected -- or ``None`` for a documented non-error behaviour, which the row
checks itself. Command-line errors must be a single ``error: ...`` line (exit status 2, or ``sys.exit``).
docs/reliability.md summarises the table.
"""
from __future__ import annotations

import contextlib
import io
import shutil
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pytest
import torch

from conftest import fake_encode, logs_warning, make_tiny_model, random_sentences, write_senteval


class Exit(Exception):
    """A command ended with an error: its exit status and the text it printed (or passed to sys.exit)."""

    def __init__(self, status, text: str):
        super().__init__(text)
        self.status = status


@dataclass
class Ctx:
    root: Path
    model: Path  # a saved SimCSE model (pooler avg)
    tiny: Path  # the plain HF tiny BERT folder
    tool: Any
    tmp: Path
    monkeypatch: Any

    def file(self, name: str, content: str | bytes) -> Path:
        p = self.tmp / name
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(content.encode() if isinstance(content, str) else content)
        return p

    def senteval(self) -> Path:
        return write_senteval(self.tmp / "downstream")

    def cli(self, *argv: str):
        """Run ``simcse argv...`` in this process; raise :class:`Exit` unless it succeeds."""
        from simcse import cli

        err = io.StringIO()
        try:
            with contextlib.redirect_stderr(err):
                status = cli.main([str(a) for a in argv])
        except SystemExit as e:  # train / evaluate end with sys.exit("error: ...")
            raise Exit(e.code, str(e.code)) from None
        if status:
            raise Exit(status, err.getvalue())
        return err.getvalue()

    def train(self, *extra: str, train_file: Path | None = None, model: Path | None = None):
        out = self.tmp / "out"
        self.cli("train", "--model_name_or_path", model or self.tiny, "--pooler_type", "avg", "--train_file",
                 train_file or self.file("train.txt", "\n".join(random_sentences(16)) + "\n"), "--output_dir", out,
                 "--max_steps", "1", "--per_device_train_batch_size", "4", "--eval_strategy", "no",
                 "--save_strategy", "no", "--report_to", "none", "--eval_before_training", "false",
                 "--test_after_training", "false", "--use_cpu", "true", *extra)
        return out


@pytest.fixture(scope="module")
def shared(tmp_path_factory):
    from simcse.models.modeling import SimCSEModel
    from simcse.retrieval.tool import SimCSE

    root = tmp_path_factory.mktemp("bad_inputs")
    tiny = make_tiny_model(root / "tiny", "bert")
    model = root / "simcse_avg"
    SimCSEModel.from_pretrained(str(tiny), pooler_type="avg").save_pretrained(model)
    return root, model, tiny, SimCSE(str(model), device="cpu")


@pytest.fixture
def ctx(shared, tmp_path, monkeypatch):
    torch.set_num_threads(1)
    root, model, tiny, tool = shared
    return Ctx(root, model, tiny, tool, tmp_path, monkeypatch)


def no_weights_folder(ctx: Ctx) -> Path:
    folder = ctx.tmp / "no_weights"
    folder.mkdir()
    for f in ctx.model.iterdir():
        if f.is_file() and "safetensors" not in f.name:
            shutil.copy(f, folder / f.name)
    return folder


def big_vocab_folder(ctx: Ctx) -> Path:
    """The model's weights (56-row embedding matrix) with a 205-token vocabulary."""
    folder = ctx.tmp / "big_vocab"
    shutil.copytree(ctx.model, folder)
    for f in folder.glob("tokenizer*.json"):
        f.unlink()
    (folder / "vocab.txt").write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
                                                + [f"w{i}" for i in range(200)]) + "\n")
    return folder


def load(path, **kw):
    from simcse.training.data import load_sentence_dataset

    return load_sentence_dataset(path, **kw)


def read(ctx: Ctx, name: str, content: str | bytes, **kw):
    return load(ctx.file(name, content), **kw)


# ------------------------------------------------------------------------------------ row functions
def long_line_is_truncated(ctx: Ctx):
    from simcse.training.data import load_sentence_dataset, tokenize_dataset

    ds, cols = load_sentence_dataset(ctx.file("long.txt", "a man plays . " * 7143 + "\nthe dog runs .\n"))
    assert len(ds["sent0"][0]) >= 100_000
    tok = ctx.tool.model.tokenizer
    lengths = [len(ids[0]) for ids in tokenize_dataset(ds, cols, tok, max_seq_length=32)["input_ids"]]
    assert lengths[0] == 32 and lengths[1] < 32


def extra_csv_column_is_ignored(ctx: Ctx):
    ds, cols = read(ctx, "extra.csv", "sent0,sent1,label,id\na dog,a cat,1,7\nthe man,a woman,0,8\n")
    assert cols == ["sent0", "sent1"] and ds.column_names == ["sent0", "sent1"] and len(ds) == 2


def numeric_cells_stay_text(ctx: Ctx):
    ds, cols = read(ctx, "numbers.csv", "sent0,sent1,hard_neg\n1,True,2.50\n2,False,NA\n")
    assert [ds[c][:] for c in cols] == [["1", "2"], ["True", "False"], ["2.50", "NA"]]


def empty_cells_skip_the_row(ctx: Ctx):
    ds, cols = read(ctx, "cells.csv", "sent0,sent1,hard_neg\na,b,c\n,b,c\na,,c\nd,e,\nf,g,h\n")
    assert cols == ["sent0", "sent1", "hard_neg"] and ds["sent0"] == ["a", "f"]


def unreadable(ctx: Ctx):
    p = ctx.file("locked.txt", "a sentence\n")
    real = __import__("os").access
    ctx.monkeypatch.setattr("os.access", lambda path, mode, **kw: False if Path(path) == p else real(path, mode))
    from simcse.training.data import load_sentence_dataset

    load_sentence_dataset(p)


def sts_with(ctx: Ctx, split: str, text: str):
    from simcse.evaluation import evaluate

    root = ctx.senteval()
    (root / "STS" / "STSBenchmark" / f"sts-{split}.csv").write_bytes(text.encode("utf-8", "surrogateescape"))
    return evaluate(fake_encode, ["STSBenchmark"], root)


def evaluate_with(ctx: Ctx, encode: Callable, task: str = "STSBenchmark", mode: str = "test"):
    from simcse.evaluation import evaluate

    return evaluate(encode, [task], ctx.senteval(), mode=mode, n_jobs=1)


def set_row(value, row: int = -1, col: int = 0):
    def encode(sentences):
        out = fake_encode(sentences)
        out[row, col:] = value if col else out[row, col:] * 0 + value
        return out

    return encode


def one_positive_line(ctx: Ctx):
    from simcse.evaluation import evaluate

    root = ctx.senteval()
    (root / "MR" / "rt-polarity.pos").write_text("a good film .\n")
    return evaluate(fake_encode, ["MR"], root, mode="fasttest", n_jobs=1)


def single_label_train(ctx: Ctx):
    from simcse.evaluation import evaluate

    root = ctx.senteval()
    (root / "TREC" / "train_5500.label").write_text("".join(f"NUM:date what year is it {i}\n" for i in range(30)))
    return evaluate(fake_encode, ["TREC"], root, mode="fasttest", n_jobs=1)


def missing_split_file(ctx: Ctx):
    from simcse.evaluation import evaluate

    root = ctx.senteval()
    (root / "STS" / "STSBenchmark" / "sts-test.csv").unlink()
    return evaluate(fake_encode, ["STSBenchmark", "SICKRelatedness"], root)


def missing_dev_file(ctx: Ctx):
    from simcse.evaluation import evaluate_sts_dev

    root = ctx.senteval()
    (root / "SICK" / "SICK_trial.txt").unlink()
    return evaluate_sts_dev(fake_encode, root)


def hundred_k_chars_encode(ctx: Ctx):
    with logs_warning("1 of 2 sentences are longer than max_length"):
        emb = ctx.tool.encode(["word " * 20_000, "a dog ."])
    assert emb.shape == (2, 32) and torch.isfinite(emb).all()


def max_length_over_position_table(ctx: Ctx):
    with logs_warning("truncated"):
        emb = ctx.tool.model.encode(["a man " * 100], max_length=512)  # 64 positions in the tiny model
    assert emb.shape == (1, 32) and np.isfinite(emb).all()


def zero_vector_similarity(ctx: Ctx):
    assert ctx.tool.similarity(np.zeros(32), np.ones(32)) == 0.0


def huge_vector_similarity(ctx: Ctx):
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no overflow warning either
        assert ctx.tool.similarity(np.full(32, 3e38, dtype=np.float32), np.ones(32)) == pytest.approx(1.0)


def cli_encode_long_line(ctx: Ctx):
    out = ctx.tmp / "e.npy"
    with logs_warning("1 of 2 sentences are longer than max_length"):
        ctx.cli("encode", "--model", ctx.model, "--input", ctx.file("in.txt", "x " * 50_000 + "\na dog .\n"),
                "--output", out)
    assert np.load(out).shape == (2, 32)


def cli_train(ctx: Ctx, *extra, **kw):
    return ctx.train(*extra, **kw)


def other_model(ctx: Ctx) -> Path:
    """A model of the same shape and pooler as ``ctx.model`` with other weights."""
    from conftest import make_tiny_model
    from simcse.models.modeling import SimCSEModel

    folder = ctx.tmp / "other_model"
    SimCSEModel.from_pretrained(str(make_tiny_model(ctx.tmp / "other_hf", seed=1)), pooler_type="avg").save_pretrained(folder)
    return folder


def shards_of(ctx: Ctx, model: Path, *extra: str) -> Path:
    out = ctx.tmp / "shards"
    ctx.cli("encode", "--model", model, "--input", ctx.file("corpus.txt", "a dog runs .\na cat sleeps .\n"),
            "--output", out, *extra)
    return out


def index_shards_of_another_model(ctx: Ctx):
    ctx.tool.build_index(str(shards_of(ctx, other_model(ctx))), use_faiss=False)


def resume_after_the_model_changed(ctx: Ctx):
    model = ctx.tmp / "model"
    shutil.copytree(ctx.model, model)
    shards_of(ctx, model)
    shutil.rmtree(model)
    shutil.copytree(other_model(ctx), model)  # retrained in place
    shards_of(ctx, model)


def index_into_a_busy_folder(ctx: Ctx):
    ctx.file("notes/todo.txt", "keep me\n")
    ctx.cli("index", "--model", ctx.model, "--input", ctx.file("corpus.txt", "a dog .\n"), "--output", ctx.tmp / "notes")


# ---------------------------------------------------------------------------------------------- table
@dataclass
class Case:
    id: str
    where: str
    input: str
    run: Callable[[Ctx], Any]
    raises: type | None
    match: tuple[str, ...] = ()


BAD_UTF8_TXT = b"a good line\nok \xff\xfe bad\n"
CASES = [
    # ---- training data readers (simcse.training.data.load_sentence_dataset)
    Case("reader-missing", "reader", "train_file does not exist (official name)",
         lambda c: load(c.tmp / "wiki1m_for_simcse.txt"),
         FileNotFoundError, ("wiki1m_for_simcse.txt", "does not exist", "bash data/download_wiki.sh")),
    Case("reader-empty", "reader", "0-byte .txt", lambda c: read(c, "empty.txt", b""),
         ValueError, ("empty.txt", "is empty")),
    Case("reader-directory", "reader", "a folder given as train_file",
         lambda c: load(c.tmp),
         ValueError, ("is not a regular file", "expected a .txt or .csv file")),
    Case("reader-unreadable", "reader", "file without read permission", unreadable,
         PermissionError, ("locked.txt", "cannot be read", "permission denied")),
    Case("reader-extension", "reader", ".json file", lambda c: read(c, "data.json", "{}"),
         ValueError, ("data.json", "expected a .txt (one sentence per line) or .csv file")),
    Case("reader-utf8-txt", "reader", "non-UTF-8 byte 0xff in a .txt", lambda c: read(c, "latin.txt", BAD_UTF8_TXT),
         ValueError, ("latin.txt", "is not UTF-8 text at line 2, byte 4", r"b'\xff'", "expected UTF-8")),
    Case("reader-utf8-csv", "reader", "non-UTF-8 byte in a .csv",
         lambda c: read(c, "latin.csv", b"sent0,sent1\na,b\nc,caf\xe9\n"),
         ValueError, ("latin.csv", "line 3, byte 6", "expected UTF-8")),
    Case("reader-blank-only", "reader", ".txt of blank lines only", lambda c: read(c, "blank.txt", "\n  \n\t\n\n"),
         ValueError, ("blank.txt", "no usable sentence", "all 4 rows were blank")),
    Case("reader-csv-missing-column", "reader", "CSV without sent1", lambda c: read(c, "one.csv", "sent0\na\nb\n"),
         ValueError, ("one.csv", "has columns ['sent0']", "expected a header with 'sent0,sent1'")),
    Case("reader-csv-misnamed-column", "reader", "CSV header sentence0,sentence1",
         lambda c: read(c, "named.csv", "sentence0,sentence1\na,b\n"),
         ValueError, ("named.csv", "['sentence0', 'sentence1']", "expected a header with 'sent0,sent1'")),
    Case("reader-csv-extra-column", "reader", "CSV with extra label,id columns", extra_csv_column_is_ignored, None),
    Case("reader-csv-ragged-row", "reader", "CSV row with one field too many",
         lambda c: read(c, "ragged.csv", "sent0,sent1\na,b\nc,d,e\n"),
         ValueError, ("ragged.csv", "line 3", "Expected 2 fields")),
    Case("reader-csv-header-only", "reader", "CSV with a header and no rows",
         lambda c: read(c, "header.csv", "sent0,sent1\n"), ValueError, ("header.csv", "header but no data rows")),
    Case("reader-csv-numeric-cells", "reader", "CSV cells that look like numbers/booleans/NA", numeric_cells_stay_text,
         None),
    Case("reader-csv-empty-cells", "reader", "CSV rows with an empty cell", empty_cells_skip_the_row, None),
    Case("reader-csv-all-cells-empty", "reader", "CSV whose every row has an empty cell",
         lambda c: read(c, "holes.csv", "sent0,sent1\na,\n,b\n"),
         ValueError, ("holes.csv", "no usable sentence", "blank or incomplete")),
    Case("reader-100k-line", "reader", "a line of 100,000 characters", long_line_is_truncated, None),
    # ---- evaluator (simcse.evaluation)
    Case("eval-no-folder", "evaluator", "SentEval folder that does not exist",
         lambda c: __import__("simcse.evaluation").evaluation.evaluate(fake_encode, ["STS12"], c.tmp / "nowhere"),
         FileNotFoundError, ("nowhere", "does not exist", "bash data/download_senteval.sh")),
    Case("eval-missing-file", "evaluator", "SentEval folder without sts-test.csv", missing_split_file,
         FileNotFoundError, ("STSBenchmark (missing sts-test.csv in", "download_senteval.sh")),
    Case("eval-missing-dev-file", "evaluator", "training-time dev eval without SICK_trial.txt", missing_dev_file,
         FileNotFoundError, ("SICK_trial.txt", "STS dev data missing")),
    Case("eval-short-row", "evaluator", "STS-B row with 5 columns",
         lambda c: sts_with(c, "test", "a\tb\tc\td\t2.5\n"),
         ValueError, ("sts-test.csv:1", "expected >= 7 tab-separated columns, got 5")),
    Case("eval-bad-score", "evaluator", "STS-B score 'high'",
         lambda c: sts_with(c, "test", "g\tf\ty\t1\t2.5\ta\tb\ng\tf\ty\t2\thigh\ta\tb\n"),
         ValueError, ("sts-test.csv:2", "expected a number, got 'high'")),
    Case("eval-bad-utf8", "evaluator", "STS-B file with a non-UTF-8 byte",
         lambda c: sts_with(c, "test", "g\tf\ty\t1\t2.5\ta\tb\ng\tf\ty\t2\t1.0\tcaf\udce9\tb\n"),
         ValueError, ("sts-test.csv:2", "byte 16", "is not valid utf-8")),
    Case("eval-nan", "evaluator", "an embedding with NaN", lambda c: evaluate_with(c, set_row(np.nan)),
         ValueError, ("NaN or inf", "STSBenchmark/test", "row")),
    Case("eval-inf", "evaluator", "an embedding with inf", lambda c: evaluate_with(c, set_row(np.inf, 0, 3)),
         ValueError, ("NaN or inf", "STSBenchmark/test", "row")),
    Case("eval-zero-vector", "evaluator", "a zero embedding (cosine undefined)",
         lambda c: evaluate_with(c, set_row(0.0, 0)), ValueError, ("zero embedding", "pair", "cosine similarity is undefined")),
    Case("eval-nan-transfer", "evaluator", "NaN embedding in a transfer task",
         lambda c: evaluate_with(c, set_row(np.nan), "CR", "fasttest"), ValueError, ("for CR", "NaN or inf", "row")),
    Case("eval-wrong-shape", "evaluator", "encode returns one row too many",
         lambda c: evaluate_with(c, lambda s: np.ones((len(s) + 1, 4))), ValueError, ("shape", "expected (")),
    Case("eval-single-class-fold", "evaluator", "MR with 1 positive: a fold trains on one class", one_positive_line,
         ValueError, ("MR (all)", "fold 1 of 5", "holds only label 0", "label 1: 1")),
    Case("eval-single-label", "evaluator", "TREC train file with one label only", single_label_train,
         ValueError, ("TREC (train)", "at least 2 labels", "label 5: 30")),
    Case("eval-unknown-task", "evaluator", "task STS17",
         lambda c: __import__("simcse.evaluation").evaluation.evaluate(fake_encode, ["STS17"], c.tmp),
         ValueError, ("'STS17'", "valid tasks: STS12")),
    # ---- tool (simcse.retrieval.tool.SimCSE, simcse.SimCSEModel)
    Case("tool-missing-folder", "tool", "model path that does not exist",
         lambda c: __import__("simcse.retrieval.tool").retrieval.tool.SimCSE(str(c.tmp / "nowhere")),
         FileNotFoundError, ("nowhere", "is not a folder with a saved model")),
    Case("tool-no-weights", "tool", "model folder without weights",
         lambda c: __import__("simcse.retrieval.tool").retrieval.tool.SimCSE(str(no_weights_folder(c))),
         FileNotFoundError, ("no_weights", "has no weights", "model.safetensors")),
    Case("tool-unknown-pooler", "tool", "pooler 'median'",
         lambda c: __import__("simcse.retrieval.tool").retrieval.tool.SimCSE(str(c.model), pooler="median"),
         ValueError, ("unknown pooler_type 'median'", "expected one of ['avg'")),
    Case("tool-tokenizer-mismatch", "tool", "vocabulary of 205 tokens, embedding matrix of 56 rows",
         lambda c: __import__("simcse.retrieval.tool").retrieval.tool.SimCSE(str(big_vocab_folder(c))),
         ValueError, ("205 tokens", "56 rows", "token ids 56..204", "expected the tokenizer saved with this model")),
    Case("tool-none-item", "tool", "encode(['a', None])", lambda c: c.tool.encode(["a", None]),
         TypeError, ("sentences[1] must be a str", "NoneType")),
    Case("tool-empty-item", "tool", "encode(['a', 'b', '  '])", lambda c: c.tool.encode(["a", "b", "  "]),
         ValueError, ("sentences[2] is empty or only whitespace",)),
    Case("tool-not-a-list", "tool", "encode(42)", lambda c: c.tool.encode(42),
         TypeError, ("sentences must be a str or a list of str", "int")),
    Case("tool-batch-size-0", "tool", "encode(..., batch_size=0)", lambda c: c.tool.encode("a", batch_size=0),
         ValueError, ("batch_size must be a positive int, got 0",)),
    Case("tool-100k-chars", "tool", "a sentence of 100,000 characters", hundred_k_chars_encode, None),
    Case("tool-max-length-512", "tool", "max_length 512 > the model's 64 positions", max_length_over_position_table, None),
    Case("tool-nan-query", "tool", "similarity of a NaN vector",
         lambda c: c.tool.similarity(np.full(32, np.nan), np.ones(32)), ValueError, ("queries[0] has a NaN or inf",)),
    Case("tool-inf-key", "tool", "similarity with inf in keys row 1",
         lambda c: c.tool.similarity(np.ones(32), np.stack([np.ones(32), np.full(32, np.inf)])),
         ValueError, ("keys[1] has a NaN or inf",)),
    Case("tool-zero-vector", "tool", "similarity of a zero vector", zero_vector_similarity, None),
    Case("tool-huge-norm", "tool", "similarity of a vector of norm 1.7e39 (float32 overflow)", huge_vector_similarity, None),
    Case("tool-wrong-dim", "tool", "similarity of a (16,) vector",
         lambda c: c.tool.similarity(np.ones(16), np.ones(32)), ValueError, ("queries must have shape (32,) or (n, 32)", "(16,)")),
    Case("tool-search-no-index", "tool", "search before build_index", lambda c: c.tool.search("a dog"),
         RuntimeError, ("the index is empty", "build_index(")),
    Case("tool-index-missing-file", "tool", "build_index from a missing file",
         lambda c: c.tool.build_index(str(c.tmp / "corpus.txt")), FileNotFoundError, ("corpus.txt", "is not a file")),
    Case("tool-index-bad-utf8", "tool", "build_index from a non-UTF-8 file",
         lambda c: c.tool.build_index(str(c.file("corpus.txt", BAD_UTF8_TXT))),
         ValueError, ("corpus.txt:2", "byte 4", "is not UTF-8")),
    Case("tool-shards-of-another-model", "tool", "build_index from shards another model encoded",
         index_shards_of_another_model, ValueError, ("shards in", "were encoded by another model", "this tool runs")),
    Case("tool-lone-surrogate", "tool", "encode(['a', 'b \\ud83d']) (an emoji cut in half)",
         lambda c: c.tool.encode(["a", "b \ud83d"]),
         ValueError, ("sentences[1] holds a lone UTF-16 surrogate U+D83D at character 2", "expected valid Unicode")),
    # ---- command line (simcse encode/search/train/evaluate)
    Case("cli-missing-input", "cli", "simcse encode --input missing.txt",
         lambda c: c.cli("encode", "--model", c.model, "--input", c.tmp / "missing.txt", "--output", c.tmp / "e.npy"),
         Exit, ("error: --input", "missing.txt", "is not a file")),
    Case("cli-bad-utf8", "cli", "simcse encode of a non-UTF-8 file",
         lambda c: c.cli("encode", "--model", c.model, "--input", c.file("in.txt", BAD_UTF8_TXT), "--output", c.tmp / "e.npy"),
         Exit, ("in.txt:2", "byte 4", "is not UTF-8")),
    Case("cli-blank-line", "cli", "simcse encode of a file with a blank line 2",
         lambda c: c.cli("encode", "--model", c.model, "--input", c.file("in.txt", "a\n\nb\n"), "--output", c.tmp / "e.npy"),
         Exit, ("in.txt:2 is blank", "--skip-blank")),
    Case("cli-long-line", "cli", "simcse encode of a 100,000-character line", cli_encode_long_line, None),
    Case("cli-output-suffix", "cli", "simcse encode --output e.txt",
         lambda c: c.cli("encode", "--model", c.model, "--input", c.file("in.txt", "a\n"), "--output", c.tmp / "e.txt"),
         Exit, ("--output", "e.txt", "must end in .npy")),
    Case("cli-batch-size-0", "cli", "simcse encode --batch-size 0",
         lambda c: c.cli("encode", "--model", c.model, "--input", c.file("in.txt", "a\n"), "--output", c.tmp / "e.npy",
                         "--batch-size", "0"), Exit, ("--batch-size must be a positive integer, got 0",)),
    Case("cli-hub-offline", "cli", "simcse encode --model org/name with HF_HUB_OFFLINE=1",
         lambda c: c.cli("encode", "--model", "some-org/not-cached", "--pooler", "avg", "--input", c.file("in.txt", "a\n"),
                         "--output", c.tmp / "e.npy"), Exit, ("'some-org/not-cached' is not a local folder", "HF_HUB_OFFLINE is set")),
    Case("cli-search-no-index", "cli", "simcse search --index <empty folder>",
         lambda c: c.cli("search", "--index", c.tmp, "--model", c.model, "--query", "a dog"),
         Exit, ("index_config.json is missing",)),
    Case("cli-encode-resume-other-model", "cli", "simcse encode resumed after the model folder was retrained in place",
         resume_after_the_model_changed, Exit, ("holds shards of another model", "encode into a new folder")),
    Case("cli-index-busy-output", "cli", "simcse index --output <a folder of other files>", index_into_a_busy_folder,
         Exit, ("error: --output:", "exists and is not a saved index")),
    Case("cli-index-ivf-no-sentence", "cli", "simcse index --kind ivf of an input with no sentence",
         lambda c: c.cli("index", "--model", c.model, "--input", c.file("blank.txt", "\n \n"), "--output",
                         c.tmp / "idx", "--kind", "ivf"), Exit, ("none were given", "the input holds no sentence")),
    Case("cli-index-fast-hnsw", "cli", "simcse index --fast --kind hnsw",
         lambda c: c.cli("index", "--model", c.model, "--input", c.file("corpus.txt", "a dog .\n"), "--output",
                         c.tmp / "idx", "--fast", "--kind", "hnsw"), Exit, ("--fast is --kind ivf; it conflicts with --kind hnsw",)),
    Case("cli-export-pooler-conflict", "cli", "simcse export --pooler cls of a model that records avg",
         lambda c: c.cli("export", "--model", c.model, "--pooler", "cls", "--output", c.model, "--format", "onnx"),
         Exit, ("--pooler cls differs from the pooler", "records ('avg'", "--override-pooler")),
    Case("train-max-steps-0", "cli", "simcse train --max_steps 0", lambda c: cli_train(c, "--max_steps", "0"),
         Exit, ("--max_steps 0 trains nothing",)),
    Case("train-temp-0", "cli", "simcse train --temp 0", lambda c: cli_train(c, "--temp", "0"),
         Exit, ("error: --temp must be a finite number > 0, got 0.0",)),
    Case("train-temp-negative", "cli", "simcse train --temp -0.05", lambda c: cli_train(c, "--temp", "-0.05"),
         Exit, ("--temp must be a finite number > 0, got -0.05",)),
    Case("train-batch-1", "cli", "simcse train --per_device_train_batch_size 1",
         lambda c: cli_train(c, "--per_device_train_batch_size", "1"),
         Exit, ("per_device_train_batch_size must be >= 2", "in-batch negatives")),
    Case("train-unknown-pooler", "cli", "simcse train --pooler_type median", lambda c: cli_train(c, "--pooler_type", "median"),
         Exit, ("unknown pooler_type 'median'", "expected one of")),
    Case("train-no-weights", "cli", "simcse train with a model folder without weights",
         lambda c: cli_train(c, model=no_weights_folder(c)), Exit, ("no_weights", "has no weights")),
    Case("train-tokenizer-mismatch", "cli", "simcse train with a 205-token vocabulary, 56-row embeddings",
         lambda c: cli_train(c, model=big_vocab_folder(c)), Exit, ("205 tokens", "56 rows")),
    Case("train-bad-utf8", "cli", "simcse train on a non-UTF-8 .txt",
         lambda c: cli_train(c, train_file=c.file("latin.txt", BAD_UTF8_TXT)),
         Exit, ("latin.txt", "line 2, byte 4", "expected UTF-8")),
    Case("train-missing-file", "cli", "simcse train on a missing file",
         lambda c: cli_train(c, train_file=c.tmp / "nli_for_simcse.csv"),
         Exit, ("nli_for_simcse.csv", "does not exist", "bash data/download_nli.sh")),
    Case("evaluate-missing-file", "cli", "simcse evaluate with a SentEval folder missing sts-test.csv",
         lambda c: (c.senteval() / "STS" / "STSBenchmark" / "sts-test.csv").unlink() or c.cli(
             "evaluate", "--model_name_or_path", c.model, "--data_dir", c.tmp / "downstream", "--quiet"),
         Exit, ("error: SentEval data incomplete", "STSBenchmark (missing sts-test.csv")),
    Case("evaluate-no-weights", "cli", "simcse evaluate with a model folder without weights",
         lambda c: c.cli("evaluate", "--model_name_or_path", no_weights_folder(c), "--data_dir", c.senteval(), "--quiet"),
         Exit, ("error: cannot load model", "has no weights")),
]


def test_table_is_large_and_covers_every_layer():
    assert len(CASES) >= 30 and len({c.id for c in CASES}) == len(CASES)
    assert {c.where for c in CASES} == {"reader", "evaluator", "tool", "cli"}


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_input(case: Case, ctx: Ctx):
    if case.raises is None:
        case.run(ctx)  # the row checks the documented behaviour itself
        return
    with pytest.raises(case.raises) as info:
        case.run(ctx)
    msg = str(info.value)
    if case.where == "cli":  # one "error: ..." line, the last one printed (progress bars may come before it)
        msg = msg.strip().splitlines()[-1]
        assert msg.startswith("error: "), msg
    for fragment in case.match:
        assert fragment in msg, f"{fragment!r} not in {msg!r}"
