"""A model is identified by what it computes (``model_fingerprint``), not by how its path is spelled: shard
resume, indexes built from shards and saved indexes all use that one identity."""
from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from conftest import SENTENCES, make_tiny_model, random_sentences
from simcse import cli
from simcse.models.modeling import SimCSEModel
from simcse.retrieval.shards import MANIFEST_NAME
from simcse.retrieval.tool import SimCSE


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """Two saved ``avg`` models of the same shape (same hidden size, same pooler) with different weights."""
    root = tmp_path_factory.mktemp("identity")
    a, b = root / "model_a", root / "model_b"
    SimCSEModel.from_pretrained(str(make_tiny_model(root / "hf_a", seed=0)), pooler_type="avg").save_pretrained(a)
    SimCSEModel.from_pretrained(str(make_tiny_model(root / "hf_b", seed=1)), pooler_type="avg").save_pretrained(b)
    return a, b


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    f = tmp_path_factory.mktemp("identity_corpus") / "corpus.txt"
    f.write_text("\n".join(SENTENCES + random_sentences(30, seed=5)) + "\n")
    return f


def _error_line(err: str) -> str:
    """The one ``error: ...`` line a failed command printed (after any progress bars), checked to be the last."""
    lines = [x for x in err.strip().splitlines() if x.startswith("error:")]
    assert len(lines) == 1 and err.strip().endswith(lines[0]) and "Traceback" not in err, err
    return lines[0]


def _encode(model, corpus, out, *extra):
    return cli.main(["encode", "--model", str(model), "--input", str(corpus), "--output", str(out),
                     "--shard-size", "10", "--device", "cpu", *extra])


def test_fingerprint_follows_content_not_path(models, tmp_path):
    from simcse.models.folder import model_fingerprint

    a, b = models
    copy = tmp_path / "copy_of_a"
    shutil.copytree(a, copy)
    fa = model_fingerprint(SimCSEModel.from_pretrained(str(a)))
    assert fa.startswith("sha256:") and len(fa) == 71
    assert model_fingerprint(SimCSEModel.from_pretrained(str(copy))) == fa
    assert model_fingerprint(SimCSEModel.from_pretrained(str(a) + "/")) == fa
    assert model_fingerprint(SimCSEModel.from_pretrained(str(b))) != fa
    assert model_fingerprint(SimCSEModel.from_pretrained(str(a), pooler_type="cls_before_pooler")) != fa


def test_index_from_shards_of_another_model_is_refused(models, corpus, tmp_path, capsys):
    a, b = models
    shards = tmp_path / "shards_a"
    assert _encode(a, corpus, shards) == 0
    tool_b = SimCSE(str(b), device="cpu")
    with pytest.raises(ValueError, match=r"shards in .*shards_a were encoded by another model: .*model_a .*"
                                         r"this tool runs .*model_b"):
        tool_b.build_index(str(shards), use_faiss=False)
    assert tool_b.index is None
    capsys.readouterr()
    assert cli.main(["index", "--model", str(b), "--input", str(shards), "--output", str(tmp_path / "idx"),
                     "--no-faiss", "--device", "cpu"]) == 2
    err = _error_line(capsys.readouterr().err)
    assert err.startswith("error: the shards in") and "another model" in err, err
    assert not (tmp_path / "idx").exists()
    # the model that encoded them (by another spelling, or a copy) builds the index, which finds every sentence
    copy = tmp_path / "copy_of_a"
    shutil.copytree(a, copy)
    tool_a = SimCSE(str(copy), device="cpu")
    tool_a.build_index(str(shards), use_faiss=False)
    hits = tool_a.search(SENTENCES, top_k=1, threshold=-1)
    assert [h[0][0] for h in hits] == SENTENCES


def test_shard_resume_identifies_the_model_by_content(models, corpus, tmp_path, monkeypatch, capsys):
    a, b = models
    work = tmp_path / "work"
    shutil.copytree(a, work / "model")
    monkeypatch.chdir(work)
    out = work / "emb"
    assert _encode("model", corpus, out) == 0  # relative spelling
    first = json.loads((out / MANIFEST_NAME).read_text())
    capsys.readouterr()
    assert _encode(str(work / "model"), corpus, out) == 0  # absolute spelling of the same folder: resumes
    assert "0 shards written, 5 already there" in capsys.readouterr().err
    # the folder retrained in place: the old vectors are not this model's; refused, nothing kept silently
    shutil.rmtree(work / "model")
    shutil.copytree(b, work / "model")
    assert _encode("./model", corpus, out) == 2
    err = _error_line(capsys.readouterr().err)
    assert "holds shards of another model" in err and "encode into a new folder" in err, err
    assert json.loads((out / MANIFEST_NAME).read_text()) == first


def _saved_index(model, folder) -> SimCSE:
    """A tool over ``model`` whose exact index of SENTENCES is saved in ``folder``."""
    tool = SimCSE(str(model), device="cpu")
    tool.build_index(SENTENCES, use_faiss=False)
    tool.save_index(folder)
    return tool


def test_saved_index_records_and_checks_the_fingerprint(models, tmp_path):
    a, b = models
    tool_a = _saved_index(a, tmp_path / "idx")
    copy = tmp_path / "elsewhere" / "a"
    shutil.copytree(a, copy)
    same = SimCSE(str(copy), device="cpu")  # the same model in another folder searches the index
    same.load_index(tmp_path / "idx")
    assert same.search(SENTENCES[2], top_k=1)[0][0] == SENTENCES[2]
    meta = json.loads((tmp_path / "idx" / "simcse_index.json").read_text())
    assert meta["model_fingerprint"] == tool_a.model_fingerprint == same.model_fingerprint
    with pytest.raises(ValueError, match=r"index .* was built with another model: .*this tool runs .*model_b"):
        SimCSE(str(b), device="cpu").load_index(tmp_path / "idx")
    # an in-memory model is identified by its weights too
    same_in_memory = SimCSE(SimCSEModel.from_pretrained(str(a)), device="cpu")
    same_in_memory.load_index(tmp_path / "idx")
    np.testing.assert_array_equal(same_in_memory.encode(SENTENCES[0]), tool_a.encode(SENTENCES[0]))


# ---------------------------------------------- what determines a vector: tokenizer settings, encoding settings
def _lower_casing(folder, on: bool) -> None:
    """Turn the saved tokenizer's lower-casing on or off (the vocabulary stays the same)."""
    cfg = folder / "tokenizer_config.json"
    data = json.loads(cfg.read_text())
    data["do_lower_case"] = on
    cfg.write_text(json.dumps(data))
    tok = folder / "tokenizer.json"
    if tok.is_file():
        spec = json.loads(tok.read_text())
        spec["normalizer"]["lowercase"] = on
        tok.write_text(json.dumps(spec))


def test_fingerprint_covers_the_tokenizer_settings(models, tmp_path):
    from simcse.models.folder import model_fingerprint

    a, _ = models
    cased = tmp_path / "cased"
    shutil.copytree(a, cased)
    _lower_casing(cased, False)
    m_a, m_cased = SimCSEModel.from_pretrained(str(a)), SimCSEModel.from_pretrained(str(cased))
    assert m_a.tokenizer.get_vocab() == m_cased.tokenizer.get_vocab()  # same vocabulary, other ids for "Word"
    word = next(w for w in sorted(m_a.tokenizer.get_vocab()) if w.isalpha() and w.islower() and len(w) > 2)
    assert m_a.tokenizer(word.title())["input_ids"] != m_cased.tokenizer(word.title())["input_ids"]
    assert model_fingerprint(m_cased) != model_fingerprint(m_a)
    assert model_fingerprint(m_cased, legacy=True) == model_fingerprint(m_a, legacy=True)  # what was recorded before


def test_shard_resume_after_a_tokenizer_change_is_refused(models, tmp_path, capsys):
    a, _ = models
    model = tmp_path / "model"
    shutil.copytree(a, model)
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(s.upper() for s in SENTENCES + random_sentences(30, seed=5)) + "\n")
    out = tmp_path / "emb"
    assert _encode(model, corpus, out) == 0
    (out / MANIFEST_NAME).unlink()  # as if interrupted before the last two shards
    for k in (3, 4):
        (out / f"shard-0000{k}.json").unlink()
    _lower_casing(model, False)
    capsys.readouterr()
    assert _encode(model, corpus, out) == 2
    err = _error_line(capsys.readouterr().err)
    assert "holds shards of another model" in err, err


def test_saved_index_applies_its_max_length_and_refuses_another(models, tmp_path, capsys):
    a, _ = models
    long = " ".join(["a man is playing a large guitar on the stage"] * 6)
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join([long, *SENTENCES]) + "\n")
    idx = tmp_path / "idx"
    assert cli.main(["index", "--model", str(a), "--input", str(corpus), "--output", str(idx), "--no-faiss",
                     "--device", "cpu", "--max-length", "8"]) == 0
    assert json.loads((idx / "simcse_index.json").read_text())["max_length"] == 8
    capsys.readouterr()
    assert cli.main(["search", "--index", str(idx), "--query", long, "--threshold", "0.99", "--top-k", "1",
                     "--json", "--device", "cpu"]) == 0
    hits = json.loads(capsys.readouterr().out.strip().splitlines()[0])["results"]
    assert hits and hits[0][0] == long and hits[0][1] >= 0.99
    assert cli.main(["search", "--index", str(idx), "--query", long, "--max-length", "64", "--device", "cpu"]) == 2
    err = _error_line(capsys.readouterr().err)
    assert "--max-length 64 differs from the max length the index was encoded with (8" in err, err
    tool = SimCSE(str(a), device="cpu")
    tool.load_index(idx)
    assert tool.max_length == 8 and tool.search(long, top_k=1, threshold=0.99)[0][0] == long
    with pytest.raises(ValueError, match="was encoded with max_length 8, this tool encodes with max_length 32"):
        SimCSE(str(a), device="cpu", max_length=32).load_index(idx)


def test_index_from_shards_records_the_shards_max_length(models, corpus, tmp_path):
    a, _ = models
    shards = tmp_path / "shards"
    assert _encode(a, corpus, shards, "--max-length", "6") == 0
    tool = SimCSE(str(a), device="cpu")
    tool.build_index(str(shards), use_faiss=False)
    assert tool.max_length == 6  # queries are cut as the shards' sentences were
    tool.save_index(tmp_path / "idx")
    assert json.loads((tmp_path / "idx" / "simcse_index.json").read_text())["max_length"] == 6
    with pytest.raises(ValueError, match="was encoded with max_length 6, this tool encodes with max_length 16"):
        SimCSE(str(a), device="cpu", max_length=16).build_index(str(shards), use_faiss=False)


def test_a_local_dataset_folder_is_one_dataset_however_spelled(models, tmp_path, monkeypatch, capsys):
    pytest.importorskip("datasets")
    a, _ = models
    work = tmp_path / "work"
    (work / "corpus").mkdir(parents=True)
    (work / "corpus" / "part.txt").write_text("\n".join(SENTENCES) + "\n")
    monkeypatch.chdir(work)
    out = work / "emb"

    def encode(name, *extra):
        return cli.main(["encode", "--model", str(a), "--dataset_name", name, "--output", str(out),
                         "--shard-size", "4", "--device", "cpu", *extra])

    assert encode("./corpus") == 0
    manifest = json.loads((out / MANIFEST_NAME).read_text())
    assert manifest["input"]["dataset"]["name"] == str(work / "corpus")
    capsys.readouterr()
    for spelling, extra in (("corpus", ()), (str(work / "corpus"), ()), ("./corpus", ("--streaming",))):
        assert encode(spelling, *extra) == 0, capsys.readouterr().err
        assert "already there" in capsys.readouterr().err
    monkeypatch.chdir(tmp_path)  # another working folder: the recorded name is still the folder
    assert cli.main(["index", "--model", str(a), "--input", str(out), "--output", str(tmp_path / "idx"),
                     "--no-faiss", "--device", "cpu"]) == 0, capsys.readouterr().err


def test_an_index_recorded_with_the_earlier_fingerprint_still_loads(models, tmp_path):
    from simcse.models.folder import model_fingerprint

    a, b = models
    tool = _saved_index(a, tmp_path / "idx")
    meta_file = tmp_path / "idx" / "simcse_index.json"
    meta = json.loads(meta_file.read_text())
    meta["model_fingerprint"] = model_fingerprint(tool.model, legacy=True)
    del meta["max_length"]  # written before the encoding settings were recorded
    meta_file.write_text(json.dumps(meta))
    again = SimCSE(str(a), device="cpu")
    again.load_index(tmp_path / "idx")
    assert again.max_length == 128 and again.search(SENTENCES[1], top_k=1)[0][0] == SENTENCES[1]
    with pytest.raises(ValueError, match="another model"):
        SimCSE(str(b), device="cpu").load_index(tmp_path / "idx")
