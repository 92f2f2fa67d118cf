"""Field-report faults of the encode/search tool and command line, each with the right value as the test.

Cosines in [-1, 1] with exact duplicates at 1.0; the pooler an index or model folder records; sentence
files read as what they are; one clear line for a missing CUDA device and for ``save_index`` onto a file;
numpy arrays and pandas Series of str as sentences.
"""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from conftest import SENTENCES, make_tiny_model, random_sentences
from simcse import SimCSE, cli
from simcse.evaluation.sts import cosine_similarity
from simcse.retrieval.index import faiss_available

KINDS = [(False, False)] + ([(True, False), (True, True)] if faiss_available() else [])


@pytest.fixture(scope="module")
def tool(tiny_bert_dir):
    return SimCSE(str(tiny_bert_dir), device="cpu", pooler="avg")


# ----------------------------------------------------------------------------------------- cosines in [-1, 1]
@pytest.mark.parametrize("use_faiss, fast", KINDS, ids=["numpy", "faiss_flat", "faiss_ivf"][: len(KINDS)])
def test_exact_duplicate_scores_one_and_nothing_exceeds_one(tool, use_faiss, fast):
    corpus = random_sentences(300, seed=3)
    tool.build_index(corpus, use_faiss=use_faiss, faiss_fast=fast)
    raw, _ = tool.index.search(tool.encode(corpus, return_numpy=True), 1)
    assert (raw[:, 0] != 1.0).any()  # the float32 inner products themselves miss 1 (both ways)
    results = tool.search(corpus, threshold=1.0, top_k=3)
    for s, res in zip(corpus, results):
        assert res and res[0] == (s, 1.0), (s, res[:1])
    every = tool.search(corpus, threshold=-1.0, top_k=10)
    assert all(-1.0 <= x <= 1.0 for res in every for _, x in res)


def test_similarity_in_range_with_unit_diagonal(tool):
    corpus = random_sentences(200, seed=4)
    sims = tool.similarity(corpus, corpus)
    assert sims.dtype == np.float32 and sims.max() <= 1.0 and sims.min() >= -1.0
    np.testing.assert_array_equal(np.diag(sims), 1.0)
    rng = np.random.default_rng(0)
    v = rng.standard_normal((300, 32)).astype(np.float32)
    sims = tool.similarity(v, np.concatenate([v, -v]))
    assert sims.max() <= 1.0 and sims.min() >= -1.0
    np.testing.assert_array_equal(np.diag(sims[:, :300]), 1.0)
    np.testing.assert_array_equal(np.diag(sims[:, 300:]), -1.0)
    assert tool.similarity(v[0], v[0] * 7.0) == 1.0


def test_evaluation_cosine_in_range():
    rng = np.random.default_rng(1)
    a = rng.standard_normal((2000, 384)) * rng.uniform(0.1, 1e3, (2000, 1))
    c = cosine_similarity(a, a * 3.0)
    assert c.max() <= 1.0 and c.min() >= -1.0
    assert cosine_similarity(a, -a).min() >= -1.0


def _avg_index(tmp_path, model_dir):
    """``simcse index`` of SENTENCES with the avg pooler (numpy backend); returns the index folder."""
    corpus = tmp_path / "c.txt"
    corpus.write_text("\n".join(SENTENCES) + "\n")
    idx = tmp_path / "idx"
    assert cli.main(["index", "--model", str(model_dir), "--pooler", "avg", "--input", str(corpus), "--output",
                     str(idx), "--no-faiss"]) == 0
    return idx


def test_cli_search_scores_at_most_one(tmp_path, tiny_bert_dir, capsys):
    idx = _avg_index(tmp_path, tiny_bert_dir)
    args = ["search", "--index", str(idx), "--json", "--threshold", "1.0", "--top-k", "1"]
    for s in SENTENCES:
        args += ["--query", s]
    capsys.readouterr()
    assert cli.main(args) == 0
    rows = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert [r["results"] for r in rows] == [[[s, 1.0]] for s in SENTENCES]


# ------------------------------------------------------------------------------- the recorded pooler rules
def test_cli_search_uses_the_index_pooler(tmp_path, tiny_bert_dir, capsys):
    idx = _avg_index(tmp_path, tiny_bert_dir)
    capsys.readouterr()
    assert cli.main(["search", "--index", str(idx), "--query", SENTENCES[3], "--json", "--top-k", "1"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["results"] == [[SENTENCES[3], 1.0]]  # queries encoded with avg, as the index
    assert cli.main(["search", "--index", str(idx), "--pooler", "cls", "--query", SENTENCES[3]]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --pooler cls differs from the pooler the index records ('avg', in ") and err.count("\n") == 1
    other = make_tiny_model(tmp_path / "other_model", seed=1)  # another model (weights), same shape
    assert cli.main(["search", "--index", str(idx), "--model", str(other), "--query", SENTENCES[3]]) == 2
    assert "was built with another model" in capsys.readouterr().err


def test_load_index_with_another_pooler_is_an_error(tmp_path, tiny_bert_dir, tool):
    tool.build_index(SENTENCES, use_faiss=False)
    tool.save_index(tmp_path / "idx")
    cls_tool = SimCSE(str(tiny_bert_dir), device="cpu", pooler="cls")
    with pytest.raises(ValueError, match=r"pooler='cls' differs from the pooler index .* records \('avg'"):
        cls_tool.load_index(tmp_path / "idx")
    assert cls_tool.index is None


def test_sentence_transformers_folder_pooler_is_read(minilm_dir):
    t = SimCSE(minilm_dir, device="cpu")
    assert t.pooler == "avg"  # 1_Pooling/config.json: mean tokens
    with pytest.raises(ValueError, match=r"pooler='cls' differs from the pooler .* records \('avg'"):
        SimCSE(minilm_dir, device="cpu", pooler="cls")


def test_saved_folder_pooler_conflict_is_an_error(tmp_path, tiny_bert_dir):
    from simcse import SimCSEModel

    SimCSEModel.from_pretrained(str(tiny_bert_dir), pooler_type="avg").save_pretrained(tmp_path / "m")
    assert SimCSE(str(tmp_path / "m"), device="cpu").pooler == "avg"
    with pytest.raises(ValueError, match=r"pooler='cls_before_pooler' differs from the pooler"):
        SimCSE(str(tmp_path / "m"), device="cpu", pooler="cls_before_pooler")


def test_cls_before_pooler_is_accepted_for_a_cls_model_trained_with_mlp_only_train(tmp_path, tiny_bert_dir):
    """Such a folder records cls but encodes with cls_before_pooler, so asking for that is no conflict."""
    from simcse import SimCSEModel

    SimCSEModel.from_pretrained(str(tiny_bert_dir), pooler_type="cls", mlp_only_train=True).save_pretrained(tmp_path / "m")
    recorded = SimCSE(str(tmp_path / "m"), device="cpu")
    asked = SimCSE(str(tmp_path / "m"), device="cpu", pooler="cls_before_pooler")
    assert asked.model.inference_pooler == recorded.model.inference_pooler == "cls_before_pooler"
    np.testing.assert_array_equal(asked.encode(SENTENCES[:3], return_numpy=True),
                                  recorded.encode(SENTENCES[:3], return_numpy=True))
    with pytest.raises(ValueError, match=r"pooler='avg' differs from the pooler .* records \('cls'"):
        SimCSE(str(tmp_path / "m"), device="cpu", pooler="avg")


# ------------------------------------------------------------------------------------- table / JSON inputs
def test_csv_tsv_jsonl_inputs_read_as_what_they_are(tmp_path, tool, tiny_bert_dir):
    sents = SENTENCES[:4]
    csv_f = tmp_path / "c.csv"
    csv_f.write_text("id,text\n" + "".join(f'{i},"{s}"\n' for i, s in enumerate(sents)))
    tsv_f = tmp_path / "c.tsv"
    tsv_f.write_text("text\tlabel\n" + "".join(f"{s}\t{i}\n" for i, s in enumerate(sents)))
    jsonl_f = tmp_path / "c.jsonl"
    jsonl_f.write_text("".join(json.dumps({"text": s, "id": i}) + "\n" for i, s in enumerate(sents)))
    strings_f = tmp_path / "s.jsonl"
    strings_f.write_text("".join(json.dumps(s) + "\n" for s in sents))
    for f in (csv_f, tsv_f, jsonl_f):
        tool.build_index(str(f), use_faiss=False, column="text")
        assert tool.sentences == sents, f
    tool.build_index(strings_f, use_faiss=False)
    assert tool.sentences == sents
    with pytest.raises(ValueError, match=r"c\.csv is a CSV file with columns \['id', 'text'\]: name the sentence column"):
        tool.build_index(str(csv_f))
    with pytest.raises(ValueError, match=r"no column 'sentence'; its CSV header has \['id', 'text'\]"):
        tool.add_to_index(csv_f, column="sentence")
    with pytest.raises(ValueError, match=r"c\.jsonl:1: an object with fields \['id', 'text'\]"):
        tool.build_index(jsonl_f)
    assert tool.sentences == sents  # a failed build keeps the previous index
    out = tmp_path / "e.npy"
    assert cli.main(["encode", "--model", str(tiny_bert_dir), "--pooler", "avg", "--input", str(csv_f), "--column",
                     "text", "--output", str(out)]) == 0
    np.testing.assert_allclose(np.load(out), tool.encode(sents, return_numpy=True), atol=1e-6)
    assert cli.main(["index", "--model", str(tiny_bert_dir), "--pooler", "avg", "--input", str(jsonl_f), "--column",
                     "text", "--output", str(tmp_path / "idx"), "--no-faiss"]) == 0
    from simcse.retrieval.store import SentenceStore

    assert list(SentenceStore(tmp_path / "idx")) == sents  # the saved sentences, read back from the on-disk store


def test_cli_csv_without_column_is_one_clear_line(tmp_path, tiny_bert_dir, capsys):
    f = tmp_path / "c.csv"
    f.write_text("id,text\n0,a dog runs .\n")
    assert cli.main(["encode", "--model", str(tiny_bert_dir), "--pooler", "avg", "--input", str(f), "--output",
                     str(tmp_path / "e.npy")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "name the sentence column" in err and err.count("\n") == 1
    assert not (tmp_path / "e.npy").exists()


# ---------------------------------------------------------------------------------------- one clear line
@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_cuda_without_cuda_is_one_clear_line(tiny_bert_dir, tool, capsys):
    with pytest.raises(ValueError, match=r"^device='cuda' but CUDA is not available on this machine"):
        SimCSE(str(tiny_bert_dir), device="cuda")
    with pytest.raises(ValueError, match=r"^device='cuda:1' but CUDA is not available"):
        tool.encode("a dog .", device="cuda:1")
    assert tool.device.type == "cpu"
    assert cli.main(["encode", "--model", str(tiny_bert_dir), "--device", "cuda", "--input", "x", "--output",
                     "x.npy"]) == 2  # the input check comes first
    with pytest.raises(ValueError, match=r"^device='gpu' is not a torch device name"):
        SimCSE(str(tiny_bert_dir), device="gpu")


def test_save_index_onto_a_file_is_a_clear_error(tmp_path, tool):
    tool.build_index(SENTENCES, use_faiss=False)
    f = tmp_path / "taken"
    f.write_text("keep me")
    with pytest.raises(FileExistsError, match=r"cannot save the index into .*taken': it is an existing file, not a folder"):
        tool.save_index(f)
    with pytest.raises(FileExistsError, match=r"lies under .*taken', which is an existing file"):
        tool.save_index(f / "sub")
    assert f.read_text() == "keep me"


def test_encode_takes_numpy_and_pandas_sequences_of_str(tool):
    pd = pytest.importorskip("pandas")
    ref = tool.encode(SENTENCES, return_numpy=True)
    np.testing.assert_array_equal(tool.encode(np.array(SENTENCES), return_numpy=True), ref)
    np.testing.assert_array_equal(tool.encode(np.array(SENTENCES, dtype=object), return_numpy=True), ref)
    series = pd.Series(SENTENCES, index=range(100, 100 + len(SENTENCES)))
    np.testing.assert_array_equal(tool.encode(series, return_numpy=True), ref)
    np.testing.assert_allclose(tool.similarity(np.array(SENTENCES[:2]), series), ref[:2] @ ref.T, atol=1e-5)
    tool.build_index(series, use_faiss=False)
    assert tool.sentences == SENTENCES and all(type(s) is str for s in tool.sentences)
    assert len(tool.search(np.array(SENTENCES[:3]))) == 3
    with pytest.raises(TypeError, match=r"sentences\[1\] must be a str, got (NoneType|float)"):  # pandas: None or NaN
        tool.encode(pd.Series(["a dog .", None]))
    with pytest.raises(TypeError, match=r"a 2-d numpy array"):
        tool.encode(np.array([SENTENCES[:2]]))


def test_loader_reads_the_sentence_transformers_pooler(minilm_dir):
    """Evaluation, export and analyses load through SimCSEModel.from_pretrained: no guessed cls there either."""
    from simcse import SimCSEModel

    assert SimCSEModel.from_pretrained(minilm_dir).pooler_type == "avg"
    assert SimCSEModel.from_pretrained(minilm_dir, pooler_type="cls_before_pooler").pooler_type == "cls_before_pooler"


def test_load_index_of_another_model_folder_is_an_error(tmp_path, tiny_bert_dir, tool):
    tool.build_index(SENTENCES, use_faiss=False)
    tool.save_index(tmp_path / "idx")
    other = make_tiny_model(tmp_path / "other", seed=1)  # other weights; a copy of the same folder is the same model
    t = SimCSE(str(other), device="cpu", pooler="avg")
    with pytest.raises(ValueError, match=r"was built with another model: .*tiny_bert.*; this tool runs .*other"):
        t.load_index(tmp_path / "idx")
    same = SimCSE(str(tiny_bert_dir) + "/", device="cpu", pooler="avg")
    same.load_index(tmp_path / "idx")
    assert same.sentences == SENTENCES
