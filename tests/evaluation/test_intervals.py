"""Tests of simcse.evaluation.intervals (bootstrap intervals, paired comparisons) and their surfaces: evaluate(...,
bootstrap=N), the printed table's interval row, ``simcse evaluate --bootstrap / --compare_to``."""
from __future__ import annotations

import json

import numpy as np
import pytest
from scipy.stats import bootstrap, spearmanr

from conftest import fake_encode, load_script, write_senteval
from simcse.evaluation import compare_sts, evaluate, format_tables
from simcse.evaluation.intervals import bootstrap_parts, paired_bootstrap


def _normal_pairs(n, rho, seed):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(n)
    y = rho * x + np.sqrt(1 - rho**2) * rng.standard_normal(n)
    return x, y


@pytest.fixture(scope="module")
def senteval_dir(tmp_path_factory):
    return write_senteval(tmp_path_factory.mktemp("senteval") / "downstream")


def test_interval_of_a_known_correlation_has_the_width_theory_gives():
    """Bivariate normal, rho 0.8, n 2000: Spearman's sampling sd in Fisher z is sqrt((1 + r^2/2) / (n - 3))
    (Bonett and Wright 2000); the bootstrap interval must cover the population Spearman and have about that width."""
    n, rho = 2000, 0.8
    sims, gold = _normal_pairs(n, rho, 0)
    ci = bootstrap_parts({"p": (sims, gold)}, n_resamples=2000)["p"]
    true_rs = 6 / np.pi * np.arcsin(rho / 2)
    assert ci.low < true_rs < ci.high
    r = spearmanr(sims, gold)[0]
    z, se = np.arctanh(r), np.sqrt((1 + r**2 / 2) / (n - 3))
    lo, hi = np.tanh(z - 1.96 * se), np.tanh(z + 1.96 * se)
    assert (ci.high - ci.low) == pytest.approx(hi - lo, rel=0.15)
    assert ci.low == pytest.approx(lo, abs=0.01) and ci.high == pytest.approx(hi, abs=0.01)


def test_interval_agrees_with_scipy_bootstrap():
    sims, gold = _normal_pairs(600, 0.6, 1)
    ours = bootstrap_parts({"p": (sims, gold)}, n_resamples=4000, seed=3)["p"]
    theirs = bootstrap((sims, gold), lambda a, b: spearmanr(a, b)[0], paired=True, vectorized=False,
                       n_resamples=4000, method="percentile", rng=np.random.default_rng(5)).confidence_interval
    assert ours.low == pytest.approx(theirs.low, abs=0.01) and ours.high == pytest.approx(theirs.high, abs=0.01)


def test_resamples_are_drawn_within_each_part_and_the_aggregates_from_the_same_draw():
    """An independent transcription: per part, indices drawn from its own generator (SeedSequence(seed).spawn, one
    per part, in order; drawn in chunks that do not change them); the pooled
    Spearman of the concatenated draws, the mean and the size-weighted mean of the per-part Spearmans."""
    parts = {"a": _normal_pairs(50, 0.7, 2), "b": _normal_pairs(80, 0.3, 3)}
    got = bootstrap_parts(parts, n_resamples=200, seed=9)
    gens = [np.random.default_rng(s) for s in np.random.SeedSequence(9).spawn(len(parts))]
    idx = {k: g.integers(0, len(v[0]), size=(200, len(v[0]))) for g, (k, v) in zip(gens, parts.items())}
    per = {k: np.array([spearmanr(parts[k][0][i], parts[k][1][i])[0] for i in idx[k]]) for k in parts}
    pooled = np.array([spearmanr(np.concatenate([parts[k][0][idx[k][r]] for k in parts]),
                                 np.concatenate([parts[k][1][idx[k][r]] for k in parts]))[0] for r in range(200)])
    wmean = (50 * per["a"] + 80 * per["b"]) / 130
    for k in parts:
        assert got[k] == pytest.approx(tuple(np.quantile(per[k], [0.025, 0.975])), abs=1e-12)
    assert got["all"]["all"] == pytest.approx(tuple(np.quantile(pooled, [0.025, 0.975])), abs=1e-12)
    assert got["all"]["mean"] == pytest.approx(tuple(np.quantile((per["a"] + per["b"]) / 2, [0.025, 0.975])), abs=1e-12)
    assert got["all"]["wmean"] == pytest.approx(tuple(np.quantile(wmean, [0.025, 0.975])), abs=1e-12)
    assert bootstrap_parts(parts, n_resamples=200, seed=9) == got
    assert bootstrap_parts(parts, n_resamples=200, seed=10) != got


def test_paired_bootstrap_against_a_transcription_and_its_edge_cases():
    gold = np.random.default_rng(4).standard_normal(300)
    a = gold + 0.8 * np.random.default_rng(5).standard_normal(300)
    b = gold + 1.2 * np.random.default_rng(6).standard_normal(300)
    got = paired_bootstrap({"p": (a, gold)}, {"p": (b, gold)}, n_resamples=500, seed=7)["p"]
    idx = np.random.default_rng(np.random.SeedSequence(7).spawn(1)[0]).integers(0, 300, size=(500, 300))
    d = np.array([spearmanr(a[i], gold[i])[0] - spearmanr(b[i], gold[i])[0] for i in idx])
    assert got.diff == pytest.approx(spearmanr(a, gold)[0] - spearmanr(b, gold)[0], abs=1e-12)
    assert (got.low, got.high) == pytest.approx(tuple(np.quantile(d, [0.025, 0.975])), abs=1e-12)
    assert got.p_value == pytest.approx(max(2 * min(np.mean(d <= 0), np.mean(d >= 0)), 1 / 500))
    assert got.low > 0 and got.p_value < 0.01  # a is clearly the better one
    same = paired_bootstrap({"p": (a, gold)}, {"p": (a, gold)}, n_resamples=100)["p"]
    assert (same.diff, same.low, same.high, same.p_value) == (0.0, 0.0, 0.0, 1.0)


@pytest.mark.parametrize("bad,needle", [
    (({"p": (np.arange(5.0), np.arange(5.0))}, {"q": (np.arange(5.0), np.arange(5.0))}), "other parts"),
    (({"p": (np.arange(5.0), np.arange(5.0))}, {"p": (np.arange(5.0), np.arange(5.0)[::-1])}), "not the same pairs"),
])
def test_paired_bootstrap_refuses_other_pairs(bad, needle):
    with pytest.raises(ValueError, match=needle):
        paired_bootstrap(*bad)


@pytest.mark.parametrize("kwargs,needle", [({"n_resamples": 1}, "at least 2"), ({"confidence": 1.0}, "confidence")])
def test_bad_settings_are_refused(kwargs, needle):
    with pytest.raises(ValueError, match=needle):
        bootstrap_parts({"p": (np.arange(5.0), np.arange(5.0))}, **kwargs)


def test_evaluate_adds_intervals_and_the_table_prints_them_only_when_asked(senteval_dir):
    tasks = ["STS12", "STSBenchmark", "MR"]
    plain = evaluate(fake_encode, tasks, senteval_dir, mode="fasttest", kfold=2, n_jobs=1, classifier="sklearn")
    boot = evaluate(fake_encode, tasks, senteval_dir, mode="fasttest", kfold=2, n_jobs=1, classifier="sklearn", bootstrap=300)
    assert "spearman_ci" not in plain["STS12"]["all"] and "spearman_ci" not in plain["STSBenchmark"]["test"]
    lo, hi = boot["STS12"]["all"]["spearman_ci"]["all"]
    assert lo <= boot["STS12"]["all"]["spearman"]["all"] <= hi
    lo, hi = boot["STSBenchmark"]["test"]["spearman_ci"]
    assert lo <= boot["STSBenchmark"]["test"]["spearman"][0] <= hi
    assert boot["MR"] == plain["MR"]
    plain_text, boot_text = format_tables(plain, "fasttest"), format_tables(boot, "fasttest")
    sts_plain, sts_boot = plain_text.split("------ fasttest : Transfer")[0], boot_text.split("------ fasttest : Transfer")[0]
    assert sts_boot.count("\n") == sts_plain.count("\n") + 1
    assert f"[{100 * lo:.2f}, {100 * hi:.2f}]" in sts_boot
    assert plain_text.split("------ fasttest : Transfer")[1] == boot_text.split("------ fasttest : Transfer")[1]
    with pytest.raises(ValueError, match="bootstrap"):
        evaluate(fake_encode, tasks, senteval_dir, bootstrap=1)


def test_compare_sts_of_an_encoder_with_itself_and_with_a_worse_one(senteval_dir):
    rng = np.random.default_rng(0)

    def noisy(sentences):
        return fake_encode(sentences) + 3 * rng.standard_normal((len(sentences), 24))

    same = compare_sts(fake_encode, fake_encode, ["STS12"], senteval_dir, n_resamples=200)["STS12"]["all"]["all"]
    assert (same.diff, same.p_value) == (0.0, 1.0)
    other = compare_sts(fake_encode, noisy, ["STS12", "STSBenchmark"], senteval_dir, n_resamples=200)
    assert other["STSBenchmark"]["test"].diff != 0.0
    with pytest.raises(ValueError, match="only STS tasks"):
        compare_sts(fake_encode, noisy, ["MR"], senteval_dir)


def test_the_command_prints_intervals_and_the_paired_comparison(senteval_dir, tiny_bert_dir, tiny_roberta_dir, tmp_path,
                                                               capsys):
    main = load_script("evaluation", "simcse_evaluation_script").main
    out = tmp_path / "out.json"
    main(["--model_name_or_path", str(tiny_bert_dir), "--pooler", "avg", "--data_dir", str(senteval_dir), "--tasks",
          "STS12", "STSBenchmark", "--bootstrap", "200", "--compare_to", str(tiny_roberta_dir), "--output_json", str(out),
          "--quiet"])
    printed = capsys.readouterr().out
    saved = json.loads(out.read_text())
    assert saved["bootstrap"]["resamples"] == 200 and set(saved["bootstrap"]["intervals"]) == {"STS12", "STSBenchmark"}
    rows = saved["comparison"]["tasks"]
    assert set(rows) == {"STS12", "STSBenchmark"}
    assert rows["STS12"]["a"] == saved["tables"]["sts"]["STS12"]
    assert rows["STS12"]["diff"] == pytest.approx(rows["STS12"]["a"] - rows["STS12"]["b"], abs=0.011)
    assert "paired comparison with" in printed and f"{rows['STS12']['diff']:+.2f}" in printed
    for argv, needle in ((["--bootstrap", "1"], "--bootstrap"), (["--tasks", "MR", "--compare_to", str(tiny_bert_dir)], "STS task")):
        with pytest.raises(SystemExit) as e:
            main(["--model_name_or_path", str(tiny_bert_dir), "--data_dir", str(senteval_dir), "--quiet"] + argv)
        assert isinstance(e.value.code, str) and needle in e.value.code and "\n" not in e.value.code


def test_compare_to_fails_before_evaluating_and_encodes_this_model_once(senteval_dir, tiny_bert_dir, tiny_roberta_dir,
                                                                         tmp_path, capsys, monkeypatch):
    from simcse.models.modeling import SimCSEModel

    main = load_script("evaluation", "simcse_evaluation_script").main
    base = ["--model_name_or_path", str(tiny_bert_dir), "--pooler", "avg", "--data_dir", str(senteval_dir), "--quiet",
            "--tasks", "STS12", "STSBenchmark"]
    (tmp_path / "empty").mkdir()
    for folder, needle in ((tmp_path / "missing", "--compare_to: cannot load model"), (tmp_path / "empty", "--compare_to: model folder")):
        with pytest.raises(SystemExit) as e:
            main(base + ["--compare_to", str(folder)])
        assert needle in str(e.value.code) and "STS (Spearman" not in capsys.readouterr().out
    encoded: dict[int, int] = {}
    real = SimCSEModel.encode

    def counting(self, sentences, *a, **k):
        encoded[id(self)] = encoded.get(id(self), 0) + len(sentences)
        return real(self, sentences, *a, **k)

    monkeypatch.setattr(SimCSEModel, "encode", counting)
    main(base + ["--compare_to", str(tiny_roberta_dir)])
    counts = sorted(encoded.values())
    assert len(counts) == 2 and counts[0] == counts[1]  # each model encoded each distinct sentence once
