"""Folders saved by sentence-transformers: simcse encodes them as ``SentenceTransformer(folder)`` does (every
Pooling mode and concatenations of them, Dense modules, Normalize, default prompt, recorded ``truncate_dim``), or
refuses in one line naming the module or setting it cannot apply. Each expected value is sentence-transformers' own
encoding of the same folder."""
import subprocess
import sys

import numpy as np
import pytest

from conftest import save_st_model, st_dense_model

SENTENCES = ["A man is playing a guitar.", "A dog runs in the park.", "Two women are talking.",
             "The sky is blue today.", "He reads a long book.", "query: where is the station?"]


_save = save_st_model


def _cos_min(a, b):
    return float(((a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)).min())


def _assert_same(ours, theirs):
    assert ours.shape == theirs.shape
    assert _cos_min(ours, theirs) > 0.9999
    np.testing.assert_allclose(ours, theirs, atol=1e-5)


def _legacy_pooling(folder, *keys):
    """Rewrite a folder's Pooling config in the boolean format of releases before 6 (``pooling_mode_*_tokens``)."""
    import json

    (folder / "1_Pooling" / "config.json").write_text(json.dumps({"word_embedding_dimension": 32, **{k: True for k in keys}}))


@pytest.mark.parametrize("case, mode, pooler", [
    ("max", "max", "max"),
    ("weightedmean", "weightedmean", "weighted_avg"),
    ("mean_sqrt_len_tokens", "mean_sqrt_len_tokens", "avg_sqrt_len"),
    ("cls+mean", ["cls", "mean"], "cls_before_pooler+avg"),
    ("legacy max+mean", "max", "max+avg"),  # boolean keys: concatenated in sentence-transformers' fixed order
    ("weightedmean without the prompt", "weightedmean", "weighted_avg"),
])
def test_every_pooling_mode_encodes_as_sentence_transformers(tiny_bert_dir, tmp_path, case, mode, pooler):
    """Each Pooling mode of sentence-transformers (and a concatenation) gives its own vectors in simcse, on a batch
    with padding (sentences of different lengths)."""
    from sentence_transformers import SentenceTransformer, models

    from simcse import SimCSE, SimCSEModel
    from simcse.models.pooling import recorded_pooler

    folder = tmp_path / "pool"
    no_prompt = case.endswith("without the prompt")
    kwargs = {"prompts": {"query": "query: "}, "default_prompt_name": "query"} if no_prompt else {}
    st = SentenceTransformer(modules=[models.Transformer(str(tiny_bert_dir)),
                                      models.Pooling(32, pooling_mode=mode, include_prompt=not no_prompt)],
                             device="cpu", **kwargs)
    st.save(str(folder))
    if case.startswith("legacy"):
        _legacy_pooling(folder, "pooling_mode_mean_tokens", "pooling_mode_max_tokens")
    theirs = SentenceTransformer(str(folder), device="cpu").encode(SENTENCES)
    mean = _save(tiny_bert_dir, tmp_path / "mean").encode(SENTENCES)
    assert theirs.shape != mean.shape or not np.allclose(theirs, mean, atol=1e-3)  # the mode changes the vectors
    assert recorded_pooler(folder)[0] == pooler
    model = SimCSEModel.from_pretrained(str(folder))
    assert model.pooler_type == pooler and model.hidden_size == theirs.shape[1] == 32 * len(pooler.split("+"))
    _assert_same(model.encode(SENTENCES), theirs)
    tool = SimCSE(str(folder), device="cpu")
    _assert_same(tool.encode(SENTENCES, return_numpy=True, normalize_to_unit=False), theirs)


@pytest.mark.parametrize("layers", ["one", "two"])
def test_dense_modules_encode_as_sentence_transformers_and_save_alike(tiny_bert_dir, tmp_path, layers):
    """Dense modules after Pooling (one 32->16 Tanh; or a concatenated pooling 64->16 Tanh, 16->8 Identity without a
    bias, then Normalize) are applied as sentence-transformers applies them, by SimCSE(folder), and a save of the
    model loads back (in simcse and in sentence-transformers) to the same vectors."""
    from sentence_transformers import SentenceTransformer, models
    from torch import nn

    from simcse import SimCSE, SimCSEModel

    folder = tmp_path / "dense"
    if layers == "one":
        st = _save(tiny_bert_dir, folder, models.Dense(32, 16, activation_function=nn.Tanh()))
    else:
        st = st_dense_model(tiny_bert_dir, folder)
    size = 16 if layers == "one" else 8
    theirs = SentenceTransformer(str(folder), device="cpu").encode(SENTENCES)
    assert theirs.shape == (len(SENTENCES), size) and st.encode(SENTENCES).shape == theirs.shape
    model = SimCSEModel.from_pretrained(str(folder))
    assert model.hidden_size == size and len(model.dense_head) == (1 if layers == "one" else 2)
    _assert_same(model.encode(SENTENCES), theirs)
    tool = SimCSE(str(folder), device="cpu")
    assert tool.hidden_size == size
    _assert_same(tool.encode(SENTENCES, return_numpy=True, normalize_to_unit=False), theirs)

    model.save_pretrained(tmp_path / "saved")
    _assert_same(SimCSEModel.from_pretrained(str(tmp_path / "saved")).encode(SENTENCES), theirs)
    _assert_same(SentenceTransformer(str(tmp_path / "saved"), device="cpu").encode(SENTENCES), theirs)


def test_a_minilm_folder_with_a_dense_module_and_normalize_encodes_as_sentence_transformers(minilm_dir, tmp_path):
    """A published encoder's shape (LaBSE, distiluse): mean pooling, Dense 384->256 Tanh, Normalize."""
    from sentence_transformers import SentenceTransformer, models

    from simcse import SimCSE

    st = SentenceTransformer(modules=[models.Transformer(minilm_dir), models.Pooling(384, pooling_mode="mean"),
                                      models.Dense(384, 256), models.Normalize()], device="cpu")
    st.save(str(tmp_path / "m"))
    theirs = SentenceTransformer(str(tmp_path / "m"), device="cpu").encode(SENTENCES)
    _assert_same(SimCSE(str(tmp_path / "m"), device="cpu").encode(SENTENCES, return_numpy=True), theirs)


def _refusal_folder(tiny_bert_dir, folder, case):
    """A sentence-transformers folder holding one thing simcse does not apply (see the test below)."""
    import json

    from sentence_transformers import models
    from torch import nn

    if case == "a module simcse does not apply":
        _save(tiny_bert_dir, folder, models.LayerNorm(32))
        return r"module 2 2_LayerNorm \(sentence_transformers\..*LayerNorm\) is not applied by simcse"
    _save(tiny_bert_dir, folder, models.Dense(32, 16, activation_function=nn.Tanh()), models.Normalize())
    dense_cfg = folder / "2_Dense" / "config.json"
    cfg = json.loads(dense_cfg.read_text())
    if case == "an activation function simcse does not apply":
        cfg["activation_function"] = "torch.nn.modules.activation.Softmax"
        dense_cfg.write_text(json.dumps(cfg))
        return (r"2_Dense/config\.json: activation_function 'torch\.nn\.modules\.activation\.Softmax' is not applied "
                r"by simcse, which reads torch\.nn\.Tanh, torch\.nn\.Identity")
    if case == "a residual Dense":
        cfg["use_residual"] = True
        dense_cfg.write_text(json.dumps(cfg))
        return r"2_Dense/config\.json: use_residual true .* is not applied by simcse"
    if case == "a Dense after Normalize":
        modules = json.loads((folder / "modules.json").read_text())
        modules[2], modules[3] = modules[3], modules[2]
        (folder / "modules.json").write_text(json.dumps(modules))
        return r"module 2 3_Normalize \(sentence_transformers\..*Normalize\) is not applied by simcse, which encodes with"
    if case == "a pooling mode sentence-transformers 6.2 does not have":
        (folder / "1_Pooling" / "config.json").write_text(json.dumps({"embedding_dimension": 32, "pooling_mode": "median"}))
        return r"1_Pooling/config\.json pools with median, which simcse cannot encode alike"
    raise AssertionError(case)


@pytest.mark.parametrize("case", ["a module simcse does not apply", "an activation function simcse does not apply",
                                  "a residual Dense", "a Dense after Normalize",
                                  "a pooling mode sentence-transformers 6.2 does not have"])
def test_what_simcse_does_not_apply_is_refused_in_one_line(tiny_bert_dir, tmp_path, case):
    from simcse import SimCSE, SimCSEModel

    folder = tmp_path / "refused"
    pattern = _refusal_folder(tiny_bert_dir, folder, case)
    for load in (lambda: SimCSE(str(folder), device="cpu"), lambda: SimCSEModel.from_pretrained(str(folder))):
        with pytest.raises(ValueError, match=pattern) as e:
            load()
        assert "\n" not in str(e.value)


def test_a_pooler_asked_for_that_does_not_fit_the_dense_module_is_refused(tiny_bert_dir, tmp_path):
    from sentence_transformers import models

    from simcse import SimCSEModel

    _save(tiny_bert_dir, tmp_path / "dense", models.Dense(64, 16), mode=["cls", "mean"])
    assert SimCSEModel.from_pretrained(str(tmp_path / "dense"), pooler_type="avg+max").hidden_size == 16  # 64 wide
    with pytest.raises(ValueError, match=r"Dense layer 0 takes 64 features but pooler 'avg' gives 32") as e:
        SimCSEModel.from_pretrained(str(tmp_path / "dense"), pooler_type="avg")
    assert "\n" not in str(e.value)


def test_simcse_evaluate_refuses_what_it_cannot_apply_and_evaluates_a_dense_folder_at_the_recorded_size(
        tiny_bert_dir, tmp_path):
    from conftest import write_senteval
    from sentence_transformers import models

    data = write_senteval(tmp_path / "downstream")
    _save(tiny_bert_dir, tmp_path / "layernorm", models.LayerNorm(32))
    _save(tiny_bert_dir, tmp_path / "cut", models.Dense(32, 16), truncate_dim=8)

    def evaluate(folder):
        return subprocess.run([sys.executable, "-m", "simcse", "evaluate", "--model_name_or_path", str(folder),
                               "--tasks", "STSBenchmark", "--data_dir", str(data), "--quiet"],
                              capture_output=True, text=True, timeout=300)

    r = evaluate(tmp_path / "layernorm")
    assert r.returncode == 1 and "2_LayerNorm" in r.stderr and "Traceback" not in r.stderr, r.stderr[-2000:]
    r = evaluate(tmp_path / "cut")
    assert r.returncode == 0 and "truncate_dim 8 (of 16)" in r.stdout, r.stderr[-2000:]  # 16: the Dense module's size


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
    SimCSEModel.from_pretrained(str(folder)).save_pretrained(tmp_path / "saved")  # a save keeps the setting
    np.testing.assert_allclose(SimCSEModel.from_pretrained(str(tmp_path / "saved")).encode(SENTENCES), theirs, atol=1e-5)
    from sentence_transformers import SentenceTransformer

    np.testing.assert_allclose(SentenceTransformer(str(tmp_path / "saved"), device="cpu").encode(SENTENCES), theirs,
                               atol=1e-5)


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
