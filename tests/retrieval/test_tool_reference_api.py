"""The reference tool's ``SimCSE`` API works unchanged (princeton-nlp/SimCSE ``simcse/tool.py``, PyPI ``simcse`` 0.4).

Each method is called exactly as the reference's signature allows (positional and keyword) and as its
README and ``__main__`` example do, on a tiny model, and the results are checked against the keyword form.
The signatures below are copied from the reference (names, order, defaults), not from our code.
"""
from __future__ import annotations

import inspect

import numpy as np
import pytest
import torch

from conftest import SENTENCES
from simcse import SimCSE
from simcse.retrieval.index import faiss_available

# (name, default) in the reference's positional order; inspect.Parameter.empty: no default
REFERENCE_SIGNATURES = {
    "__init__": [("model_name_or_path", inspect.Parameter.empty), ("device", None), ("num_cells", 100),
                 ("num_cells_in_search", 10), ("pooler", None)],
    "encode": [("sentence", inspect.Parameter.empty), ("device", None), ("return_numpy", False),
               ("normalize_to_unit", True), ("keepdim", False), ("batch_size", 64), ("max_length", 128)],
    "similarity": [("queries", inspect.Parameter.empty), ("keys", inspect.Parameter.empty), ("device", None)],
    "build_index": [("sentences_or_file_path", inspect.Parameter.empty), ("use_faiss", None), ("faiss_fast", False),
                    ("device", None), ("batch_size", 64)],
    "add_to_index": [("sentences_or_file_path", inspect.Parameter.empty), ("device", None), ("batch_size", 64)],
    "search": [("queries", inspect.Parameter.empty), ("device", None), ("threshold", 0.6), ("top_k", 5)],
}

QUERIES = ["a man is playing music .", "a woman is playing the flute ."]
FAISS = [False, True] if faiss_available() else [False]


@pytest.fixture(scope="module")
def model(tiny_bert_dir):
    return SimCSE(str(tiny_bert_dir), "cpu", 100, 10, "avg")


@pytest.mark.parametrize("method", sorted(REFERENCE_SIGNATURES))
def test_reference_parameters_lead_in_order_and_the_rest_are_keyword_only(method):
    params = list(inspect.signature(getattr(SimCSE, method)).parameters.values())[1:]  # without self
    ref = REFERENCE_SIGNATURES[method]
    lead = params[: len(ref)]
    assert [p.name for p in lead] == [n for n, _ in ref]
    assert all(p.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD for p in lead)
    for p, (name, default) in zip(lead, ref):
        if name == "max_length":  # None means the tool's max_length, which defaults to the reference's 128
            from simcse.retrieval.tool import DEFAULT_MAX_LENGTH  # (None there: 128, or a loaded index's record)

            assert p.default is None and DEFAULT_MAX_LENGTH == default
        else:
            assert p.default == default, name
    extra = [p for p in params[len(ref):] if p.kind is not inspect.Parameter.VAR_KEYWORD]
    assert all(p.kind is inspect.Parameter.KEYWORD_ONLY for p in extra), [(p.name, p.kind) for p in extra]


def test_constructor_positional_equals_keyword(tiny_bert_dir, model):
    kw = SimCSE(str(tiny_bert_dir), device="cpu", num_cells=100, num_cells_in_search=10, pooler="avg")
    assert (model.pooler, model.num_cells, model.num_cells_in_search, model.max_length) == ("avg", 100, 10, 128)
    assert (kw.pooler, kw.num_cells, kw.num_cells_in_search) == ("avg", 100, 10)
    assert str(model.device) == "cpu" and model.tokenizer is model.model.tokenizer
    assert torch.equal(model.encode(SENTENCES), kw.encode(SENTENCES))


def test_readme_example(tiny_bert_dir):
    """The reference README's snippet, line for line (a local folder instead of the hub name)."""
    model = SimCSE(str(tiny_bert_dir))
    embeddings = model.encode("A woman is reading.")
    assert isinstance(embeddings, torch.Tensor) and embeddings.shape == (32,)
    sentences_a = ['A woman is reading.', 'A man is playing a guitar.']
    sentences_b = ['He plays guitar.', 'A woman is making a photo.']
    similarities = model.similarity(sentences_a, sentences_b)
    assert isinstance(similarities, np.ndarray) and similarities.shape == (2, 2)
    sentences = ['A woman is reading.', 'A man is playing a guitar.']
    model.build_index(sentences)
    results = model.search("He plays guitar.")
    assert isinstance(results, list) and all(isinstance(s, str) and isinstance(x, float) for s, x in results)
    assert model.pooler == "cls"  # the reference's default for a model whose name has no "unsup"


def test_encode_positional_equals_keyword(model):
    pos = model.encode(SENTENCES, "cpu", True, True, False, 64, 128)
    kw = model.encode(sentence=SENTENCES, device="cpu", return_numpy=True, normalize_to_unit=True, keepdim=False,
                      batch_size=64, max_length=128)
    assert isinstance(pos, np.ndarray) and pos.dtype == np.float32 and pos.shape == (len(SENTENCES), 32)
    np.testing.assert_array_equal(pos, kw)
    # defaults: a CPU float32 tensor with unit rows; one str -> (H,), keepdim -> (1, H)
    t = model.encode(SENTENCES)
    assert isinstance(t, torch.Tensor) and t.dtype == torch.float32 and t.device.type == "cpu"
    np.testing.assert_allclose(t.norm(dim=1).numpy(), 1.0, atol=1e-6)
    assert model.encode(SENTENCES[0]).shape == (32,)
    assert model.encode(SENTENCES[0], None, False, True, True).shape == (1, 32)
    raw = model.encode(SENTENCES[:2], None, True, False)
    assert not np.allclose(np.linalg.norm(raw, axis=1), 1.0)


def test_similarity_positional_equals_keyword(model):
    pos = model.similarity(QUERIES, SENTENCES, "cpu")
    kw = model.similarity(queries=QUERIES, keys=SENTENCES, device="cpu")
    np.testing.assert_array_equal(pos, kw)
    e = model.encode(SENTENCES, return_numpy=True)
    q = model.encode(QUERIES, return_numpy=True)
    np.testing.assert_allclose(pos, q @ e.T, atol=1e-5)
    # the reference's shapes: float for two str, (M,) for one query, (N, M) otherwise, also (N, 1)
    s = model.similarity(QUERIES[0], SENTENCES[0])
    assert isinstance(s, float) and s == pytest.approx(float(q[0] @ e[0]), abs=1e-5)
    assert model.similarity(QUERIES[0], SENTENCES).shape == (len(SENTENCES),)
    assert model.similarity(QUERIES, SENTENCES[0]).shape == (2, 1)
    # keys as a numpy array of embeddings (as the reference's search does internally)
    np.testing.assert_allclose(model.similarity(QUERIES, e, "cpu"), pos, atol=1e-6)


@pytest.mark.parametrize("use_faiss", FAISS)
def test_index_and_search_positional_equals_keyword(tiny_bert_dir, use_faiss):
    pos = SimCSE(str(tiny_bert_dir), "cpu", 100, 10, "avg")
    kw = SimCSE(str(tiny_bert_dir), device="cpu", pooler="avg")
    pos.build_index(SENTENCES[:6], use_faiss, False, "cpu", 64)
    pos.add_to_index(SENTENCES[6:], "cpu", 64)
    kw.build_index(sentences_or_file_path=SENTENCES, use_faiss=use_faiss, faiss_fast=False, device="cpu", batch_size=64)
    assert pos.is_faiss_index == kw.is_faiss_index == use_faiss
    r_pos = pos.search(QUERIES[0], "cpu", 0.0, 3)
    r_kw = kw.search(queries=QUERIES[0], device="cpu", threshold=0.0, top_k=3)
    assert [s for s, _ in r_pos] == [s for s, _ in r_kw] and len(r_pos) <= 3
    np.testing.assert_allclose([x for _, x in r_pos], [x for _, x in r_kw], atol=1e-6)
    sims = kw.similarity(QUERIES[0], SENTENCES)
    expected = sorted(((s, float(x)) for s, x in zip(SENTENCES, sims) if x >= 0.0), key=lambda t: -t[1])[:3]
    assert [s for s, _ in r_kw] == [s for s, _ in expected]
    # a list of queries: one list per query, each as the single-query call
    many = pos.search(QUERIES, "cpu", -1.0, 4)
    assert isinstance(many, list) and len(many) == 2
    for q, res in zip(QUERIES, many):
        assert [s for s, _ in res] == [s for s, _ in pos.search(q, "cpu", -1.0, 4)]
        assert all(isinstance(s, str) and isinstance(x, float) for s, x in res)


@pytest.mark.skipif(not faiss_available(), reason="faiss not installed")
def test_num_cells_set_the_fast_index(tiny_bert_dir):
    t = SimCSE(str(tiny_bert_dir), "cpu", 4, 2, "avg")
    t.build_index(SENTENCES, True, True)
    assert (t.index.nlist, t.index.nprobe) == (4, 2)
    small = SimCSE(str(tiny_bert_dir), "cpu", pooler="avg")  # reference defaults 100 / 10, capped by the corpus
    small.build_index(SENTENCES, True, True)
    assert (small.index.nlist, small.index.nprobe) == (len(SENTENCES), 10)
    # the project's names override
    t.build_index(SENTENCES, True, True, nlist=3, nprobe=3)
    assert (t.index.nlist, t.index.nprobe) == (3, 3)


def test_reference_main_example(tiny_bert_dir):
    """The reference tool's ``__main__`` block: similarity, brute-force search, faiss search."""
    example_sentences = SENTENCES[:10]
    example_queries = QUERIES
    from conftest import perturb

    simcse = SimCSE(str(tiny_bert_dir))
    perturb(simcse.model, seed=0)  # the tiny random model's [CLS] cosines all round to 1.0000: ties order by chance
    similarities = simcse.similarity(example_queries, example_sentences)
    assert similarities.shape == (2, 10)
    outputs = []
    for use_faiss in FAISS:
        simcse.build_index(example_sentences, use_faiss=use_faiss)
        results = simcse.search(example_queries)
        lines = []
        for i, result in enumerate(results):
            lines.append("Retrieval results for query: {}".format(example_queries[i]))
            for sentence, score in result:
                lines.append("    {}  (cosine similarity: {:.4f})".format(sentence, score))
        outputs.append(lines)
    assert all(o == outputs[0] for o in outputs)  # numpy and faiss print the same


def test_unknown_keyword_names_simcse_and_lists_the_accepted(tiny_bert_dir):
    with pytest.raises(TypeError, match=r"^SimCSE\(\) got unexpected keyword argument\(s\) 'num_cell'.*"
                                        r"num_cells, num_cells_in_search, pooler.*torch_dtype"):
        SimCSE(str(tiny_bert_dir), num_cell=4)
    t = SimCSE(str(tiny_bert_dir), num_cells=4, num_cells_in_search=2, pooler="avg")  # no BertModel TypeError
    assert (t.num_cells, t.num_cells_in_search, t.pooler) == (4, 2, "avg")
