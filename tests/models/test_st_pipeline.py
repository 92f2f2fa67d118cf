"""Folders saved by sentence-transformers: simcse encodes them as ``SentenceTransformer(folder)`` does (Pooling
mode, Normalize, default prompt, recorded ``truncate_dim``), or refuses in one line naming the module it cannot
apply. Each expected value is sentence-transformers' own encoding of the same folder."""
import subprocess
import sys

import numpy as np
import pytest

SENTENCES = ["A man is playing a guitar.", "A dog runs in the park.", "Two women are talking.",
             "The sky is blue today.", "He reads a long book.", "query: where is the station?"]


def _save(tiny_bert_dir, folder, *extra, mode="mean", **kwargs):
    from sentence_transformers import SentenceTransformer, models

    st = SentenceTransformer(modules=[models.Transformer(str(tiny_bert_dir)), models.Pooling(32, pooling_mode=mode),
                                      *extra], device="cpu", **kwargs)
    st.save(str(folder))
    return st


def test_a_dense_module_is_refused_in_one_line_naming_it(tiny_bert_dir, tmp_path):
    from sentence_transformers import models

    from simcse import SimCSE, SimCSEModel

    folder = tmp_path / "dense"
    st = _save(tiny_bert_dir, folder, models.Dense(32, 16), models.Normalize())
    assert st.encode(SENTENCES).shape == (6, 16)  # what a silent read as (6, 32) would contradict
    for load in (lambda: SimCSE(str(folder), device="cpu"), lambda: SimCSEModel.from_pretrained(str(folder)),
                 lambda: SimCSEModel.from_pretrained(str(folder), pooler_type="avg")):
        with pytest.raises(ValueError, match=r"module 2 2_Dense \(sentence_transformers\..*Dense\)") as e:
            load()
        assert "\n" not in str(e.value)


@pytest.mark.parametrize("mode", ["max", "weightedmean", "mean_sqrt_len_tokens", ["cls", "mean"]])
def test_a_pooling_mode_simcse_cannot_encode_is_refused(tiny_bert_dir, tmp_path, mode):
    from simcse import SimCSE, SimCSEModel

    folder = tmp_path / "pool"
    _save(tiny_bert_dir, folder, mode=mode)
    names = mode if isinstance(mode, list) else [mode]
    for load in (lambda: SimCSE(str(folder), device="cpu"), lambda: SimCSEModel.from_pretrained(str(folder))):
        with pytest.raises(ValueError, match=r"1_Pooling/config\.json pools with " + r"\+".join(names)) as e:
            load()
        assert "\n" not in str(e.value)


def test_simcse_evaluate_refuses_a_dense_folder_and_evaluates_at_the_recorded_size(tiny_bert_dir, tmp_path):
    from conftest import write_senteval
    from sentence_transformers import models

    data = write_senteval(tmp_path / "downstream")
    _save(tiny_bert_dir, tmp_path / "dense", models.Dense(32, 16))
    _save(tiny_bert_dir, tmp_path / "cut", truncate_dim=8)

    def evaluate(folder):
        return subprocess.run([sys.executable, "-m", "simcse", "evaluate", "--model_name_or_path", str(folder),
                               "--tasks", "STSBenchmark", "--data_dir", str(data), "--quiet"],
                              capture_output=True, text=True, timeout=300)

    r = evaluate(tmp_path / "dense")
    assert r.returncode == 1 and "2_Dense" in r.stderr and "Traceback" not in r.stderr, r.stderr[-2000:]
    r = evaluate(tmp_path / "cut")
    assert r.returncode == 0 and "truncate_dim 8 (of 32)" in r.stdout, r.stderr[-2000:]


@pytest.mark.parametrize("case", ["normalize", "default_prompt", "truncate_dim"])
def test_the_pipeline_after_pooling_encodes_as_sentence_transformers(tiny_bert_dir, tmp_path, case):
    from sentence_transformers import models

    from simcse import SimCSE, SimCSEModel

    folder = tmp_path / case
    extra = [models.Normalize()] if case == "normalize" else []
    kwargs = {"normalize": {}, "default_prompt": {"prompts": {"query": "query: ", "doc": ""},
                                                  "default_prompt_name": "query"},
              "truncate_dim": {"truncate_dim": 8}}[case]
    st = _save(tiny_bert_dir, folder, *extra, **kwargs)
    theirs = st.encode(SENTENCES)
    plain = _save(tiny_bert_dir, tmp_path / "plain").encode(SENTENCES)  # the same encoder without the setting
    assert theirs.shape != plain.shape or not np.allclose(theirs, plain, atol=1e-4)  # the setting changes it
    ours = SimCSEModel.from_pretrained(str(folder)).encode(SENTENCES)
    np.testing.assert_allclose(ours, theirs, atol=1e-5)
    tool = SimCSE(str(folder), device="cpu")
    unit = tool.encode(SENTENCES, return_numpy=True)
    np.testing.assert_allclose(unit, theirs / np.linalg.norm(theirs, axis=1, keepdims=True), atol=1e-5)
    assert tool.hidden_size == theirs.shape[1]


def test_a_transformer_module_in_its_own_folder_is_read_from_there(tiny_bert_dir, tmp_path):
    """Older sentence-transformers saves keep the Transformer in ``0_Transformer/`` (``modules.json`` gives the
    path); ``SentenceTransformer(folder)`` loads it, and so does simcse, to the same vectors."""
    import json
    import shutil

    from sentence_transformers import SentenceTransformer, models

    from simcse import SimCSE, SimCSEModel

    folder = tmp_path / "old_layout"
    _save(tiny_bert_dir, folder, models.Normalize())
    modules = json.loads((folder / "modules.json").read_text())
    keep = {"modules.json", "config_sentence_transformers.json", "README.md"} | {m["path"] for m in modules[1:]}
    (folder / "0_Transformer").mkdir()
    for p in list(folder.iterdir()):
        if p.name not in keep and p.name != "0_Transformer":
            shutil.move(str(p), str(folder / "0_Transformer" / p.name))
    modules[0]["path"] = "0_Transformer"
    (folder / "modules.json").write_text(json.dumps(modules))
    theirs = SentenceTransformer(str(folder), device="cpu").encode(SENTENCES)
    for ours in (SimCSEModel.from_pretrained(str(folder)).encode(SENTENCES),
                 SimCSE(str(folder), device="cpu").encode(SENTENCES, return_numpy=True)):
        cos = (ours * theirs).sum(1) / np.linalg.norm(ours, axis=1) / np.linalg.norm(theirs, axis=1)
        assert cos.min() > 0.9999, cos
    modules[0]["path"] = "../elsewhere"
    (folder / "modules.json").write_text(json.dumps(modules))
    with pytest.raises(ValueError, match=r"the Transformer module's path '\.\./elsewhere' is not a folder inside"):
        SimCSEModel.from_pretrained(str(folder))
