"""Tests of simcse.analysis, simcse.plots, simcse.callbacks and scripts/plot_figures.py.

Every metric is compared with a direct Python/numpy loop on small random data.
"""
from __future__ import annotations

import itertools
import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch

from simcse import analysis as A
from simcse.data import read_sentences
from simcse.evaluation.data import load_stsb
from simcse.whitening import Whitening, fit_whitening_on_file
from simcse import plots as P

from conftest import SENTENCES, load_script

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


# ------------------------------------------------------------------------------------------ helpers
def _unit(v):
    norm = math.sqrt(sum(float(c) ** 2 for c in v))
    return [float(c) / norm for c in v]


def _loop_alignment(x, y, alpha):
    total = 0.0
    for a, b in zip(x, y):
        ua, ub = _unit(a), _unit(b)
        total += math.sqrt(sum((p - q) ** 2 for p, q in zip(ua, ub))) ** alpha
    return total / len(x)


def _loop_uniformity(x, t):
    units = [_unit(r) for r in x]
    vals = []
    for i, j in itertools.combinations(range(len(units)), 2):
        sq = sum((p - q) ** 2 for p, q in zip(units[i], units[j]))
        vals.append(math.exp(-t * sq))
    return math.log(sum(vals) / len(vals))


def _loop_cos(a, b):
    ua, ub = _unit(a), _unit(b)
    return sum(p * q for p, q in zip(ua, ub))


def _is_png(path):
    path = Path(path)
    return path.is_file() and path.read_bytes()[:8] == PNG_MAGIC


STSB_ROWS = [  # (gold, sentence 1, sentence 2)
    (5.0, SENTENCES[0], "a man plays the guitar ."),
    (4.6, SENTENCES[1], "a woman plays the flute ."),
    (4.0, SENTENCES[2], "a dog runs in the park ."),  # exactly 4: not a positive (the paper: "higher than 4")
    (4.2, SENTENCES[3], "a young child is riding a horse ."),
    (0.4, SENTENCES[4], SENTENCES[9]),
    (1.0, SENTENCES[5], SENTENCES[10]),
    (2.5, SENTENCES[6], SENTENCES[7]),
    (3.2, SENTENCES[0], SENTENCES[7]),  # both sentences again: each counted once in uniformity
    (0.0, SENTENCES[8], SENTENCES[11]),
]


def write_fake_stsb(root: Path, rows=STSB_ROWS) -> Path:
    """SentEval layout under ``root``: STS/STSBenchmark/sts-{train,dev,test}.csv; returns ``root``."""
    folder = root / "STS" / "STSBenchmark"
    folder.mkdir(parents=True, exist_ok=True)
    for split in ("train", "dev", "test"):
        lines = [f"main-captions\tMSRvid\t2012test\t{i:04d}\t{g:.3f}\t{s1}\t{s2}" for i, (g, s1, s2) in enumerate(rows)]
        (folder / f"sts-{split}.csv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return root


def _fake_encoder(dim=5, seed=0):
    rng = np.random.default_rng(seed)
    table = {}

    def encode(sentences):
        for s in sentences:
            if s not in table:
                table[s] = rng.normal(size=dim)
        return np.stack([table[s] for s in sentences])

    return encode, table


# ---------------------------------------------------------------------------------- alignment/uniformity
@pytest.mark.parametrize("alpha", [2, 1, 0.5])
def test_alignment_matches_loop(alpha):
    rng = np.random.default_rng(1)
    x, y = rng.normal(size=(9, 4)) * 3, rng.normal(size=(9, 4))
    assert A.alignment(x, y, alpha=alpha) == pytest.approx(_loop_alignment(x, y, alpha), rel=1e-12)


def test_alignment_accepts_torch_and_is_zero_for_parallel_pairs():
    rng = np.random.default_rng(2)
    x = rng.normal(size=(5, 3))
    assert A.alignment(torch.tensor(x), torch.tensor(2.5 * x)) == pytest.approx(0.0, abs=1e-12)
    assert A.alignment(x, -x) == pytest.approx(4.0)  # antipodal unit vectors: squared distance 4
    got = A.alignment(torch.tensor(x, dtype=torch.bfloat16), torch.tensor(-x, dtype=torch.bfloat16))
    assert got == pytest.approx(4.0, rel=1e-6)


@pytest.mark.parametrize("t", [2.0, 0.5])
@pytest.mark.parametrize("chunk_size", [1, 3, 2048])
def test_uniformity_matches_loop(t, chunk_size):
    rng = np.random.default_rng(3)
    x = rng.normal(size=(11, 4)) + 0.5
    assert A.uniformity(x, t=t, chunk_size=chunk_size) == pytest.approx(_loop_uniformity(x, t), rel=1e-10)


def test_uniformity_extremes():
    x = np.tile([[1.0, 2.0, 3.0]], (6, 1))
    assert A.uniformity(x) == pytest.approx(0.0, abs=1e-12)  # all identical
    assert A.uniformity(np.array([[1.0, 0.0], [-3.0, 0.0]]), t=2) == pytest.approx(-8.0)  # -t * 4


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda: A.alignment(np.ones((3, 2)), np.ones((4, 2))), "same"),
        (lambda: A.alignment(np.ones(3), np.ones(3)), "2-D"),
        (lambda: A.alignment(np.array([[1.0, 0.0], [0.0, 0.0]]), np.ones((2, 2))), "row 1 is a zero vector"),
        (lambda: A.alignment(np.array([[np.nan, 1.0]]), np.ones((1, 2))), "NaN"),
        (lambda: A.alignment(np.ones((2, 2)), np.ones((2, 2)), alpha=0), "alpha"),
        (lambda: A.uniformity(np.ones((1, 3))), "at least 2"),
        (lambda: A.uniformity(np.ones((3, 3)), t=-1), "t must"),
        (lambda: A.uniformity(np.ones((3, 3)), chunk_size=0), "chunk_size"),
        (lambda: A.uniformity(np.zeros((3, 0))), "no columns"),
    ],
)
def test_metric_errors(call, match):
    with pytest.raises(ValueError, match=match):
        call()


# --------------------------------------------------------------------------------------- spectrum
def _loop_singular_values(x):
    n, d = len(x), len(x[0])
    gram = np.zeros((d, d))
    for i in range(d):
        for j in range(d):
            gram[i, j] = sum(x[r][i] * x[r][j] for r in range(n))
    eig = np.sort(np.clip(np.linalg.eigvalsh(gram), 0, None))[::-1]
    return np.sqrt(eig[: min(n, d)])


@pytest.mark.parametrize("shape", [(8, 4), (3, 5)])
def test_singular_spectrum_matches_loop(shape):
    rng = np.random.default_rng(4)
    x = rng.normal(size=shape) + 2.0
    ref = _loop_singular_values(x.tolist())
    np.testing.assert_allclose(A.singular_spectrum(x, normalize=None), ref, rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(A.singular_spectrum(x), ref / ref[0], rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(A.singular_spectrum(x, normalize="sum"), ref / ref.sum(), rtol=1e-9, atol=1e-9)
    means = [sum(col) / len(col) for col in zip(*x.tolist())]
    centred = [[v - m for v, m in zip(row, means)] for row in x.tolist()]
    ref_c = _loop_singular_values(centred)
    np.testing.assert_allclose(A.singular_spectrum(x, center=True), ref_c / ref_c[0], rtol=1e-8, atol=1e-8)
    units = [_unit(r) for r in x.tolist()]
    ref_u = _loop_singular_values(units)
    np.testing.assert_allclose(A.singular_spectrum(x, l2_normalize_rows=True), ref_u / ref_u[0], rtol=1e-9, atol=1e-9)


def test_singular_spectrum_errors():
    with pytest.raises(ValueError, match="normalize"):
        A.singular_spectrum(np.ones((3, 3)), normalize="min")
    with pytest.raises(ValueError, match="zero singular"):
        A.singular_spectrum(np.ones((3, 3)), center=True)


# ------------------------------------------------------------------------------------ cosine bins
def test_cosine_by_gold_bins_matches_loop():
    rng = np.random.default_rng(5)
    n = 40
    e1, e2 = rng.normal(size=(n, 6)), rng.normal(size=(n, 6))
    gold = rng.uniform(0, 5, size=n)
    gold[:5] = [0.0, 1.0, 4.0, 5.0, 3.999]  # edges: each goes to the bin it opens; 5 closes the last bin
    groups = A.cosine_by_gold_bins(e1, e2, gold)
    assert [(g.low, g.high) for g in groups] == [(0, 1), (1, 2), (2, 3), (3, 4), (4, 5)]
    expected = {k: [] for k in range(5)}
    for i in range(n):
        g = gold[i]
        k = 4 if g >= 4 else 3 if g >= 3 else 2 if g >= 2 else 1 if g >= 1 else 0
        expected[k].append(_loop_cos(e1[i], e2[i]))
    for k, grp in enumerate(groups):
        np.testing.assert_allclose(grp.cosines, expected[k], rtol=1e-12)
    assert sum(g.cosines.size for g in groups) == n
    assert groups[4].label == "4-5"


def test_cosine_by_gold_bins_custom_edges_and_errors():
    e = np.eye(3)
    groups = A.cosine_by_gold_bins(e, e, [0.2, 0.5, 0.9], bins=[0, 0.5, 1])
    assert [g.cosines.size for g in groups] == [1, 2]
    with pytest.raises(ValueError, match="outside the bins"):
        A.cosine_by_gold_bins(e, e, [0.2, 5.5, 1.0])
    with pytest.raises(ValueError, match="strictly increasing"):
        A.cosine_by_gold_bins(e, e, [1, 2, 3], bins=[0, 3, 2])
    with pytest.raises(ValueError, match="length N=3"):
        A.cosine_by_gold_bins(e, e, [1, 2])


# ------------------------------------------------------------------------------------- STS-B setting
def test_read_stsb(tmp_path):
    root = write_fake_stsb(tmp_path / "downstream")
    pairs = load_stsb(root, "dev")
    assert pairs.sent1[0] == SENTENCES[0] and pairs.scores.tolist() == [r[0] for r in STSB_ROWS]
    both = load_stsb(root, "all")
    assert len(both.scores) == 3 * len(STSB_ROWS) and both.sent2[len(STSB_ROWS):2 * len(STSB_ROWS)] == pairs.sent2
    with pytest.raises(ValueError, match="split"):
        load_stsb(root, "validation")
    with pytest.raises(FileNotFoundError, match="does not exist"):
        load_stsb(tmp_path / "nowhere", "dev")
    (root / "STS" / "STSBenchmark" / "sts-test.csv").unlink()
    with pytest.raises(FileNotFoundError, match="STS-B test file"):
        load_stsb(root, "all")


def test_stsb_alignment_uniformity_matches_loop(tmp_path):
    root = write_fake_stsb(tmp_path / "downstream")
    encode, table = _fake_encoder()
    got = A.stsb_alignment_uniformity(encode, root, split="dev")
    positives = [(s1, s2) for g, s1, s2 in STSB_ROWS if g > 4]
    assert got["n_pos"] == len(positives) == 3
    distinct = list(dict.fromkeys(s for _, s1, s2 in STSB_ROWS for s in (s1, s2)))
    assert got["n_sentences"] == len(distinct) == 2 * len(STSB_ROWS) - 2
    ref_align = _loop_alignment([table[a] for a, _ in positives], [table[b] for _, b in positives], 2)
    ref_uniform = _loop_uniformity([table[s] for s in distinct], 2)
    assert got["align"] == pytest.approx(ref_align, rel=1e-12)
    assert got["uniform"] == pytest.approx(ref_uniform, rel=1e-12)
    with pytest.raises(ValueError, match="no pair with gold score > 5"):
        A.stsb_alignment_uniformity(encode, root, threshold=5)
    with pytest.raises(ValueError, match="encode must return"):
        A.stsb_alignment_uniformity(lambda s: np.ones((len(s) - 1, 3)), root)


# ---------------------------------------------------------------------------------------- whitening
def _corpus(n=300, d=6, seed=6):
    rng = np.random.default_rng(seed)
    mix = rng.normal(size=(d, d)) * np.array([5, 3, 2, 1, 0.5, 0.1])[:d]
    return rng.normal(size=(n, d)) @ mix + 7.0


def _loop_cov(x):
    n, d = len(x), len(x[0])
    mean = [sum(r[j] for r in x) / n for j in range(d)]
    cov = np.zeros((d, d))
    for r in x:
        for i in range(d):
            for j in range(d):
                cov[i, j] += (r[i] - mean[i]) * (r[j] - mean[j]) / n
    return np.array(mean), cov


def test_whitening_gives_identity_covariance():
    x = _corpus()
    w = Whitening.fit(x)
    z = w.transform(x).astype(np.float64)
    mean, cov = _loop_cov(z.tolist())
    np.testing.assert_allclose(mean, 0, atol=1e-5)
    np.testing.assert_allclose(cov, np.eye(x.shape[1]), atol=1e-5)
    assert z.dtype == np.float64 and w.transform(x).dtype == np.float32
    ref_mean, _ = _loop_cov(x.tolist())
    np.testing.assert_allclose(w.mu, ref_mean, rtol=1e-12)
    assert w.transform(torch.tensor(x[0])).shape == (6,)


def test_whitening_keeps_top_k_directions():
    x = _corpus()
    _, cov = _loop_cov(x.tolist())
    eigval = np.sort(np.linalg.eigvalsh(cov))[::-1]
    k = 3
    w = Whitening.fit(x, dim=k)
    assert w.W.shape == (6, k) and w.dim == k
    for j in range(k):  # column j is the j-th eigenvector of the covariance, scaled by 1/sqrt(eigenvalue)
        col = w.W[:, j]
        np.testing.assert_allclose(cov @ col, eigval[j] * col, rtol=1e-7, atol=1e-9)
        assert col @ col == pytest.approx(1.0 / eigval[j], rel=1e-8)
    z = w.transform(x)
    assert z.shape == (300, k)
    full = Whitening.fit(x)
    np.testing.assert_allclose(np.abs(z), np.abs(full.transform(x)[:, :k]), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(np.abs(full.truncated(k).W), np.abs(w.W), rtol=1e-8)
    with pytest.raises(ValueError, match="dim must be an integer in \\[1, 3\\]"):
        w.truncated(4)


def test_whitening_drops_degenerate_directions(caplog):
    x = _corpus(d=5)
    x = np.hstack([x, x[:, :1] - 2 * x[:, 1:2]])  # column 6 is a linear function of columns 1-2: zero variance left
    with caplog.at_level("WARNING", logger="simcse.analysis"):
        w = Whitening.fit(x)
    assert w.dim == 5 and "keeps 5 of 6 dimensions" in caplog.text
    _, cov = _loop_cov(w.transform(x).astype(np.float64).tolist())
    np.testing.assert_allclose(cov, np.eye(5), atol=1e-5)
    with pytest.raises(ValueError, match="only 5 non-degenerate"):
        Whitening.fit(x, dim=6)


def test_whitening_save_load_round_trip(tmp_path):
    x = _corpus()
    w = Whitening.fit(x, dim=4)
    path = w.save(tmp_path / "sub" / "white")
    assert path.name == "white.npz"
    back = Whitening.load(path)
    np.testing.assert_array_equal(back.mu, w.mu)
    np.testing.assert_array_equal(back.W, w.W)
    np.testing.assert_array_equal(back.singular_values, w.singular_values)
    np.testing.assert_array_equal(back.transform(x[:5]), w.transform(x[:5]))
    with pytest.raises(FileNotFoundError):
        Whitening.load(tmp_path / "missing.npz")
    np.savez(tmp_path / "bad.npz", mu=np.zeros(3))
    with pytest.raises(ValueError, match="missing \\['W'\\]"):
        Whitening.load(tmp_path / "bad.npz")


def test_whitening_errors():
    rng = np.random.default_rng(7)
    small = rng.normal(size=(3, 6))  # 3 sentences: rank of the covariance is 2
    with pytest.raises(ValueError, match="only 2 non-degenerate directions"):
        Whitening.fit(small, dim=3)
    assert Whitening.fit(small, dim=2).dim == 2
    with pytest.raises(ValueError, match="all identical"):
        Whitening.fit(np.ones((4, 3)))
    with pytest.raises(ValueError, match="dim must be an integer in \\[1, 6\\]"):
        Whitening.fit(small, dim=7)
    w = Whitening.fit(_corpus(), dim=2)
    with pytest.raises(ValueError, match="fitted on 6"):
        w.transform(np.ones((2, 5)))


def test_fit_whitening_on_file(tmp_path):
    x = _corpus(n=20, d=3)
    lines = [f"sentence {i}" for i in range(20)]
    f = tmp_path / "corpus.txt"
    f.write_text("\n".join(lines[:10]) + "\n\n   \n" + "\n".join(lines[10:]) + "\n")
    lookup = dict(zip(lines, x))
    w = fit_whitening_on_file(lambda s: np.stack([lookup[t] for t in s]), f, dim=2)
    np.testing.assert_allclose(w.mu, x.mean(axis=0), rtol=1e-12)
    w10 = fit_whitening_on_file(lambda s: np.stack([lookup[t] for t in s]), f, max_sentences=10)
    np.testing.assert_allclose(w10.mu, x[:10].mean(axis=0), rtol=1e-12)
    (tmp_path / "empty.txt").write_text("\n \n")
    with pytest.raises(ValueError, match="no non-blank line"):
        read_sentences(tmp_path / "empty.txt")


# -------------------------------------------------------------------------------------------- plots
def test_plots_write_png(tmp_path):
    rng = np.random.default_rng(8)
    out = P.plot_align_uniform(["a", "b", "c"], [0.2, 0.3, 0.25], [-2.1, -1.5, -2.5], tmp_path / "f3.png", sts=[70, 60, 75])
    assert _is_png(out)
    assert _is_png(P.plot_align_uniform(["a"], [0.2], [-2.0], tmp_path / "f3b.png"))
    log = [{"step": s, "align": 0.2 + 0.01 * s, "uniform": -1.5 - 0.1 * s} for s in (20, 0, 10)]
    assert _is_png(P.plot_training_curve({"p=0.1": log, "p=0": log[:1]}, tmp_path / "f2.png"))
    assert _is_png(P.plot_training_curve(log, tmp_path / "f2b.png"))
    spectra = {"m1": A.singular_spectrum(rng.normal(size=(10, 4))), "m2": A.singular_spectrum(rng.normal(size=(10, 6)))}
    assert _is_png(P.plot_singular_spectra(spectra, tmp_path / "f1.png", log_scale=True))
    groups = A.cosine_by_gold_bins(rng.normal(size=(30, 4)), rng.normal(size=(30, 4)), rng.uniform(0, 5, 30))
    one = A.cosine_by_gold_bins(np.eye(2), np.eye(2), [4.5, 0.5])  # 1 pair per non-empty bin, 3 empty bins
    assert _is_png(P.plot_cosine_bins({"m1": groups, "m2": one}, tmp_path / "nested" / "g1.png"))


def test_plot_errors(tmp_path):
    with pytest.raises(ValueError, match=".png"):
        P.plot_align_uniform(["a"], [0.2], [-2.0], tmp_path / "f.pdf")
    with pytest.raises(ValueError, match="uniform has 1 values; expected 2"):
        P.plot_align_uniform(["a", "b"], [0.2, 0.3], [-2.0], tmp_path / "f.png")
    with pytest.raises(ValueError, match="lacks \\['uniform'\\]"):
        P.plot_training_curve({"r": [{"step": 0, "align": 0.1}]}, tmp_path / "f.png")
    with pytest.raises(ValueError, match="has no records"):
        P.plot_training_curve({"r": []}, tmp_path / "f.png")
    with pytest.raises(ValueError, match="<= 0"):
        P.plot_singular_spectra({"m": [1.0, 0.0]}, tmp_path / "f.png", log_scale=True)
    assert not list(tmp_path.glob("*.png"))


def test_plots_module_imports_no_matplotlib():
    import subprocess
    import sys

    code = "import sys, simcse.plots, simcse.analysis; print('matplotlib' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


# ----------------------------------------------------------------------------------------- callback
def _tiny_trainer(model_dir, out_dir, train_txt, max_steps):
    from transformers import TrainingArguments

    from simcse.data import ContrastiveCollator, load_sentence_dataset, tokenize_dataset
    from simcse.modeling import SimCSEModel
    from simcse.trainer import SimCSETrainer

    torch.manual_seed(0)
    model = SimCSEModel.from_pretrained(str(model_dir), pooler_type="cls", mlp_only_train=True, new_mlp_init="random")
    ds, cols = load_sentence_dataset(train_txt)
    ds = tokenize_dataset(ds, cols, model.tokenizer, 16)
    args = TrainingArguments(output_dir=str(out_dir), max_steps=max_steps, per_device_train_batch_size=8,
                             learning_rate=1e-3, logging_steps=1000, save_strategy="no", report_to=[],
                             use_cpu=True, disable_tqdm=True, seed=0)
    return SimCSETrainer(model=model, args=args, train_dataset=ds, data_collator=ContrastiveCollator(pad_token_id=0),
                         processing_class=model.tokenizer)


def test_align_uniform_callback_on_tiny_run(tiny_bert_dir, train_txt, tmp_path):
    from simcse.callbacks import LOG_NAME, AlignUniformCallback, read_align_uniform_log

    data_dir = write_fake_stsb(tmp_path / "downstream")
    out_dir = tmp_path / "run"
    out_dir.mkdir()
    (out_dir / LOG_NAME).write_text('{"step": 99, "align": 0, "uniform": 0}\n')  # stale: a fresh run drops it
    trainer = _tiny_trainer(tiny_bert_dir, out_dir, train_txt, max_steps=4)
    model = trainer.model
    modes = []
    original = model.encode

    def spy(*a, **k):
        modes.append(model.training)
        return original(*a, **k)

    model.encode = spy
    cb = AlignUniformCallback.attach(trainer, every_n_steps=2, data_dir=data_dir, batch_size=4)
    trainer.train()
    assert modes and not any(modes)  # always measured with dropout off
    assert model.training  # and put back in train mode

    records = read_align_uniform_log(out_dir / LOG_NAME)
    assert [r["step"] for r in records] == [0, 2, 4]
    assert all(r["n_pos"] == 3 and r["n_sentences"] == 16 and r["split"] == "dev" for r in records)
    logged = [h for h in trainer.state.log_history if "align" in h]
    assert [h["step"] for h in logged] == [0, 2, 4]
    assert [h["align"] for h in logged] == [r["align"] for r in records]
    assert records[0]["uniform"] != records[-1]["uniform"]  # training moved the embeddings

    # The last record is the final model's: recompute it by hand from eval-mode embeddings.
    model.encode = original
    model.eval()
    distinct = list(dict.fromkeys(s for _, s1, s2 in STSB_ROWS for s in (s1, s2)))
    emb = dict(zip(distinct, model.encode(distinct)))
    pos = [(s1, s2) for g, s1, s2 in STSB_ROWS if g > 4]
    assert records[-1]["align"] == pytest.approx(
        _loop_alignment([emb[a] for a, _ in pos], [emb[b] for _, b in pos], 2), rel=1e-9)
    assert records[-1]["uniform"] == pytest.approx(_loop_uniformity([emb[s] for s in distinct], 2), rel=1e-9)

    model.train()
    again = [cb.measure(model), cb.measure(model)]
    assert again[0] == again[1] and model.training

    with pytest.raises(ValueError, match="every_n_steps"):
        AlignUniformCallback(every_n_steps=0)
    with pytest.raises(ValueError, match="needs a model with .encode"):
        cb.measure(torch.nn.Linear(2, 2))


# ------------------------------------------------------------------------------------------- script
def _script():
    return load_script("plot_figures")


def test_plot_figures_script(tiny_bert_dir, tmp_path, capsys):
    script = _script()
    data_dir = write_fake_stsb(tmp_path / "downstream")
    log = tmp_path / "run" / "align_uniform.jsonl"
    log.parent.mkdir()
    log.write_text("\n".join(json.dumps({"step": s, "align": 0.1 * s, "uniform": -s}) for s in (0, 1, 2)) + "\n")
    res = script.main(["--figure", "training_curve", "--log", str(log), "--out", str(tmp_path / "f2.png")])
    assert _is_png(tmp_path / "f2.png") and res["runs"]["run"]["step"] == 2

    common = ["--models", str(tiny_bert_dir), str(tiny_bert_dir), "--poolers", "avg", "cls_before_pooler",
              "--data_dir", str(data_dir), "--batch_size", "4"]
    res = script.main(["--figure", "spectrum", "--out", str(tmp_path / "f1.png"), "--json", str(tmp_path / "f1.json")] + common)
    assert _is_png(tmp_path / "f1.png") and len(res["models"]) == 2
    assert json.loads((tmp_path / "f1.json").read_text())["models"][0]["first_10"][0] == 1.0
    res = script.main(["--figure", "cosine_bins", "--out", str(tmp_path / "g1.png")] + common)
    assert _is_png(tmp_path / "g1.png") and [b["n"] for b in res["models"][0]["bins"]] == [2, 1, 1, 1, 4]
    res = script.main(["--figure", "align_uniform", "--out", str(tmp_path / "f3c.png"), "--color_by_stsb"] + common)
    assert res["models"][0]["n_pos"] == 3 and res["models"][1]["model"] == f"{Path(tiny_bert_dir).name} (cls_before_pooler)"
    from scipy.stats import spearmanr

    from simcse import SimCSEModel

    model = SimCSEModel.from_pretrained(str(tiny_bert_dir), pooler_type="avg")
    e1, e2 = model.encode([r[1] for r in STSB_ROWS]), model.encode([r[2] for r in STSB_ROWS])
    cos = [_loop_cos(a, b) for a, b in zip(e1, e2)]
    ref = 100 * spearmanr(cos, [r[0] for r in STSB_ROWS])[0]
    assert res["models"][0]["sts"] == res["models"][0]["stsb_dev_spearman"] == pytest.approx(ref, rel=1e-5)
    assert _is_png(tmp_path / "f3c.png")
    capsys.readouterr()
    with pytest.raises(SystemExit):
        script.main(["--figure", "spectrum", "--out", str(tmp_path / "x.png")])  # no --models
    with pytest.raises(SystemExit):
        script.main(["--figure", "align_uniform", "--out", str(tmp_path / "x.png"), "--sts_avg", "1", "--color_by_stsb"] + common)
    assert "not both" in capsys.readouterr().err
