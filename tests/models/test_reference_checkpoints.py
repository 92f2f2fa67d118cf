"""Checkpoints of the reference code: its trainer's folders (bert./roberta. prefixes, mlp.dense.*, lm_head.*)
and its 8 published model ids."""
import json
import logging
from pathlib import Path

import numpy as np
import pytest
import torch

from conftest import SENTENCES, make_tiny_model, run_training, write_senteval
from simcse import SimCSE, SimCSEModel
from simcse.cli import main as cli_main
from simcse.models.reference_checkpoints import PUBLISHED_POOLERS, published_pooler, read_reference_mlp


def write_reference_checkpoint(folder: Path, arch: str, safetensors: bool = False, mlm: bool = True) -> dict:
    """Save a tiny random encoder the way the reference's BertForCL/RobertaForCL trainer did: one weight file with
    '<arch>.'-prefixed encoder keys (no NSP pooler), mlp.dense.* and lm_head.*; config.json names *ForCL; no
    simcse_config.json. Returns the saved state dict."""
    from transformers import AutoModel

    plain = make_tiny_model(folder.parent / f"{folder.name}_plain", arch, seed=7)
    enc = AutoModel.from_pretrained(plain)
    state = {f"{arch}.{k}": v.clone() for k, v in enc.state_dict().items() if not k.startswith("pooler.")}
    h = enc.config.hidden_size
    g = torch.Generator().manual_seed(3)
    state["mlp.dense.weight"] = torch.randn(h, h, generator=g) * 0.2
    state["mlp.dense.bias"] = torch.randn(h, generator=g) * 0.2
    if mlm:
        state["lm_head.dense.weight"] = torch.randn(h, h, generator=g)
        state["lm_head.dense.bias"] = torch.randn(h, generator=g)
    folder.mkdir(parents=True)
    if safetensors:
        from safetensors.torch import save_file

        save_file({k: v.contiguous() for k, v in state.items()}, str(folder / "model.safetensors"))
    else:
        torch.save(state, folder / "pytorch_model.bin")
    cfg = json.loads((plain / "config.json").read_text())
    cfg["architectures"] = ["BertForCL" if arch == "bert" else "RobertaForCL"]
    (folder / "config.json").write_text(json.dumps(cfg))
    for f in plain.iterdir():
        if f.name not in ("config.json", "model.safetensors"):
            (folder / f.name).write_bytes(f.read_bytes())
    return state


def _reference_embeddings(state: dict, arch: str, plain_dir: Path, sentences, pooler: str) -> np.ndarray:
    """What the reference computes: CLS of the last layer, through mlp (Linear + Tanh) for 'cls'."""
    from transformers import AutoModel, AutoTokenizer

    enc = AutoModel.from_pretrained(plain_dir, add_pooling_layer=False)
    enc.load_state_dict({k[len(arch) + 1:]: v for k, v in state.items() if k.startswith(arch + ".")})
    enc.eval()
    tok = AutoTokenizer.from_pretrained(plain_dir)
    with torch.no_grad():
        b = tok(sentences, padding=True, return_tensors="pt")
        cls = enc(**b).last_hidden_state[:, 0]
        if pooler == "cls":
            cls = torch.tanh(cls @ state["mlp.dense.weight"].T + state["mlp.dense.bias"])
    return torch.nn.functional.normalize(cls, dim=-1).numpy()


@pytest.mark.parametrize("arch, safetensors", [("bert", False), ("roberta", False), ("bert", True)])
@pytest.mark.parametrize("pooler", ["cls", "cls_before_pooler"])
def test_reference_folder_encodes_like_the_reference(tmp_path, arch, safetensors, pooler):
    ref = tmp_path / "ref"
    state = write_reference_checkpoint(ref, arch, safetensors=safetensors)
    tool = SimCSE(str(ref), pooler=pooler, device="cpu")
    got = tool.encode(SENTENCES[:4], return_numpy=True)
    want = _reference_embeddings(state, arch, tmp_path / "ref_plain", SENTENCES[:4], pooler)
    np.testing.assert_allclose(got, want, atol=1e-5)


def test_reference_folder_without_pooler_is_refused_in_one_line(tmp_path, capsys):
    ref = tmp_path / "ref"
    write_reference_checkpoint(ref, "bert")
    with pytest.raises(ValueError, match="does not record its pooler"):
        SimCSEModel.from_pretrained(str(ref))
    (tmp_path / "s.txt").write_text("a dog .\n")
    capsys.readouterr()
    assert cli_main(["encode", "--model", str(ref), "--input", str(tmp_path / "s.txt"), "--output", str(tmp_path / "e.npy")]) == 2
    err = capsys.readouterr().err
    assert err.count("\nerror:") + err.startswith("error:") == 1 and "cls_before_pooler" in err.splitlines()[-1]
    assert not (tmp_path / "e.npy").exists()


def test_pickled_weights_are_read_with_weights_only(tmp_path):
    """A .bin holding a non-tensor object is refused, not executed."""
    ref = tmp_path / "ref"
    state = write_reference_checkpoint(ref, "bert")
    state["evil"] = print  # any global: torch.load(weights_only=True) refuses it
    torch.save(state, ref / "pytorch_model.bin")
    assert read_reference_mlp(ref) is None
    with pytest.raises(ValueError, match="refusing to load the pickle-based weights"):
        SimCSEModel.from_pretrained(str(ref), pooler_type="cls")


def test_convert_writes_a_simcse_folder_with_the_mlp(tmp_path):
    ref = tmp_path / "ref"
    state = write_reference_checkpoint(ref, "roberta")
    out = tmp_path / "converted"
    assert cli_main(["convert", "--model", str(ref), "--pooler", "cls", "--output", str(out)]) == 0
    cfg = json.loads((out / "simcse_config.json").read_text())
    assert cfg["pooler_type"] == "cls" and cfg["mlp_only_train"] is False
    m = SimCSEModel.from_pretrained(str(out))
    assert torch.equal(m.mlp.dense.weight, state["mlp.dense.weight"])
    direct = SimCSE(str(ref), pooler="cls", device="cpu").encode(SENTENCES[:3], return_numpy=True)
    np.testing.assert_allclose(SimCSE(str(out), device="cpu").encode(SENTENCES[:3], return_numpy=True), direct, atol=1e-6)
    assert cli_main(["convert", "--model", str(ref), "--pooler", "cls", "--output", str(out)]) == 2  # not empty


def test_convert_of_an_unsupervised_run_keeps_the_mlp_or_says_so(tmp_path, capsys):
    """--pooler cls_before_pooler --mlp_only_train (the help's advice for unsupervised runs) keeps the trained MLP:
    recorded as cls + mlp_only_train, which encodes as cls_before_pooler; a pooler without an MLP says it is dropped."""
    ref = tmp_path / "ref"
    state = write_reference_checkpoint(ref, "bert")
    out = tmp_path / "unsup"
    assert cli_main(["convert", "--model", str(ref), "--pooler", "cls_before_pooler", "--mlp_only_train",
                     "--output", str(out)]) == 0
    err = capsys.readouterr().err
    assert "note: pooler cls_before_pooler with mlp_only_train is recorded as pooler cls with mlp_only_train" in err
    m = SimCSEModel.from_pretrained(str(out))
    assert (m.pooler_type, m.mlp_only_train, m.inference_pooler) == ("cls", True, "cls_before_pooler")
    assert torch.equal(m.mlp.dense.weight, state["mlp.dense.weight"])  # kept for further training
    direct = SimCSE(str(ref), pooler="cls_before_pooler", device="cpu").encode(SENTENCES[:3], return_numpy=True)
    np.testing.assert_allclose(SimCSE(str(out), device="cpu").encode(SENTENCES[:3], return_numpy=True), direct, atol=1e-6)
    out2 = tmp_path / "no_mlp"
    assert cli_main(["convert", "--model", str(ref), "--pooler", "cls_before_pooler", "--output", str(out2)]) == 0
    assert "note: the checkpoint's MLP (mlp.dense.*) is not kept: pooler cls_before_pooler has none; pass --pooler " \
           "cls --mlp_only_train to keep it" in capsys.readouterr().err
    assert not (out2 / "simcse_mlp.safetensors").exists()


def test_evaluate_reads_a_reference_folder(tmp_path, capsys):
    from simcse.evaluation.cli import main as evaluate_main

    ref = tmp_path / "ref"
    write_reference_checkpoint(ref, "bert")
    res = evaluate_main(["--model_name_or_path", str(ref), "--pooler", "cls_before_pooler", "--mode", "dev",
                         "--data_dir", str(write_senteval(tmp_path / "ds")), "--quiet"])
    assert "STSBenchmark" in res and "pooler cls_before_pooler" in capsys.readouterr().out


def test_further_training_starts_from_the_reference_mlp(tmp_path, train_txt):
    ref = tmp_path / "ref"
    state = write_reference_checkpoint(ref, "bert")
    seen = {}
    trainer = run_training([
        "--model_name_or_path", str(ref), "--train_file", str(train_txt), "--output_dir", str(tmp_path / "o"),
        "--pooler_type", "cls", "--per_device_train_batch_size", "8", "--max_steps", "1", "--eval_strategy", "no",
        "--eval_before_training", "false", "--test_after_training", "false", "--report_to", "none",
        "--learning_rate", "1e-5"], on_build=lambda t: seen.update(w=t.model.mlp.dense.weight.detach().clone()))
    assert torch.equal(seen["w"], state["mlp.dense.weight"])  # not the random init of a fresh MLP
    assert trainer.state.global_step == 1


def test_published_ids_get_their_documented_pooler_and_nothing_else_does(tmp_path, caplog, monkeypatch):
    assert len(PUBLISHED_POOLERS) == 8
    assert published_pooler("princeton-nlp/unsup-simcse-bert-base-uncased") == "cls_before_pooler"
    assert published_pooler("princeton-nlp/sup-simcse-roberta-large") == "cls"
    assert published_pooler("princeton-nlp/unsup-simcse-bert-base") is None  # not an exact published id
    assert published_pooler("my-unsup-model") is None
    # the rule in from_pretrained: a hub id is resolved by transformers; point it at a local folder here
    plain = make_tiny_model(tmp_path / "plain", "bert")
    import transformers

    import simcse.models.folder as folder

    monkeypatch.setattr(folder, "_check_hub_name", lambda *a, **k: None)  # no hub here: the ids are not cached
    monkeypatch.setattr(folder, "_hub_file", lambda *a, **k: None)
    real = transformers.AutoModel.from_pretrained, transformers.AutoTokenizer.from_pretrained
    monkeypatch.setattr(transformers.AutoModel, "from_pretrained", lambda name, **kw: real[0](str(plain), **kw))
    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", lambda name, **kw: real[1](str(plain), **kw))
    with caplog.at_level(logging.WARNING, logger="simcse.models.folder"):
        m = SimCSEModel.from_pretrained("princeton-nlp/unsup-simcse-roberta-base")
    assert m.pooler_type == "cls_before_pooler"
    assert sum("documented pooler" in r.getMessage() for r in caplog.records) == 1
    assert SimCSEModel.from_pretrained("princeton-nlp/sup-simcse-bert-large-uncased").pooler_type == "cls"
    assert SimCSEModel.from_pretrained("someone/unsup-simcse-bert-base-uncased").pooler_type == "cls"  # today's rule
