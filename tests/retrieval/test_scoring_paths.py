"""One scoring rule for every consumer: scores in [-1, 1], an exact duplicate scores 1.0, with a rounding tolerance
that follows the dtype the indexed vectors were stored in (float16 shards, IVF-PQ re-ranking copies)."""
from __future__ import annotations

import numpy as np
import pytest

from conftest import random_sentences
from simcse import cli
from simcse.retrieval.tool import SimCSE

SENTENCES = random_sentences(300, seed=11)


@pytest.fixture(scope="module")
def tool(tiny_bert_dir):
    return SimCSE(str(tiny_bert_dir), pooler="avg", device="cpu")


@pytest.fixture(scope="module")
def float16_shards(tiny_bert_dir, tmp_path_factory):
    root = tmp_path_factory.mktemp("f16")
    corpus = root / "corpus.txt"
    corpus.write_text("\n".join(SENTENCES) + "\n")
    out = root / "emb"
    assert cli.main(["encode", "--model", str(tiny_bert_dir), "--pooler", "avg", "--input", str(corpus), "--output",
                     str(out), "--dtype", "float16", "--shard-size", "100", "--device", "cpu"]) == 0
    return out


def _self_hits(tool, sentences):
    """For each sentence, its hits at threshold 1.0 (top 1): the exact duplicate must be there with score 1.0."""
    return tool.search(sentences, threshold=1.0, top_k=1)


def test_float16_shards_find_every_exact_duplicate_at_threshold_one(tool, float16_shards, tmp_path):
    tool.build_index(str(float16_shards), use_faiss=False)
    hits = _self_hits(tool, SENTENCES)
    missed = [s for s, h in zip(SENTENCES, hits) if h != [(s, 1.0)]]
    assert not missed, f"{len(missed)} of {len(SENTENCES)} exact duplicates missed at threshold 1.0"
    everything = tool.search(SENTENCES[:20], threshold=-1, top_k=300)
    assert max(s for res in everything for _, s in res) <= 1.0
    assert tool.index.vector_dtype == "float16"
    # the rule travels with the saved index
    tool.save_index(tmp_path / "idx")
    tool.load_index(tmp_path / "idx")
    assert tool.index.vector_dtype == "float16" and _self_hits(tool, SENTENCES[:50]) == [[(s, 1.0)] for s in SENTENCES[:50]]


def test_cli_search_of_a_float16_index_finds_exact_duplicates(tiny_bert_dir, float16_shards, tmp_path, capsys):
    import json

    idx = tmp_path / "idx"
    assert cli.main(["index", "--model", str(tiny_bert_dir), "--pooler", "avg", "--input", str(float16_shards),
                     "--output", str(idx), "--no-faiss", "--device", "cpu"]) == 0
    capsys.readouterr()
    queries = [x for s in SENTENCES[:40] for x in ("--query", s)]
    assert cli.main(["search", "--index", str(idx), *queries, "--threshold", "1.0", "--top-k", "1", "--json",
                     "--device", "cpu"]) == 0
    rows = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert [r["results"] for r in rows] == [[[s, 1.0]] for s in SENTENCES[:40]]


def test_ivfpq_reranked_from_float16_copies_finds_exact_duplicates(tool):
    pytest.importorskip("faiss")
    tool.build_index(SENTENCES, kind="ivfpq", m=4)
    hits = _self_hits(tool, SENTENCES)
    missed = [s for s, h in zip(SENTENCES, hits) if h != [(s, 1.0)]]
    assert len(missed) <= 3, f"{len(missed)} of {len(SENTENCES)} exact duplicates missed at threshold 1.0"
    assert tool.index.vector_dtype == "float16"  # its re-ranking reads float16 copies


def test_float32_index_every_duplicate_scores_one_and_nothing_exceeds_one(tool):
    tool.build_index(SENTENCES, use_faiss=False)
    assert _self_hits(tool, SENTENCES) == [[(s, 1.0)] for s in SENTENCES]  # (held before; kept)


def test_the_rounding_rule_is_stated_once_per_dtype():
    from simcse.retrieval.scoring import COSINE_ROUNDING, clip_cosine, cosine_rounding

    assert cosine_rounding("float32") == COSINE_ROUNDING["float32"] == 1e-5
    assert cosine_rounding(np.float16) == COSINE_ROUNDING["float16"] == 2.0 ** -10
    # the float16 bound: a unit vector rounded to float16 keeps q . fl16(q) within 2**-11 of 1
    rng = np.random.default_rng(0)
    q = rng.standard_normal((2000, 384)).astype(np.float32)
    q[:, :3] *= 30  # a few large components: the worst case of the bound
    q /= np.linalg.norm(q, axis=1, keepdims=True)
    self_scores = (q * q.astype(np.float16).astype(np.float32)).sum(axis=1)
    assert np.abs(self_scores - 1).max() <= 2.0 ** -11 + 1e-6
    assert (clip_cosine(self_scores, "float16") == 1.0).all()
    assert not (clip_cosine(self_scores, "float32") == 1.0).all()
    assert clip_cosine(0.9985, "float16") == pytest.approx(0.9985)  # beyond the tolerance: left as it is
    with pytest.raises(ValueError, match="no cosine rounding rule for vectors stored as int8"):
        cosine_rounding("int8")
