"""Saved folders in the ecosystem: sentence-transformers loads every save, the model card (Hub metadata),
loading a hub id from the Hub cache (offline), and Trainer.push_to_hub pushing the complete folder."""
import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from conftest import SENTENCES, load_script, perturbed_model, run_training
from simcse.models.card import write_model_card
from simcse.models.modeling import SimCSEModel

sentence_transformers = pytest.importorskip("sentence_transformers")
from huggingface_hub import ModelCard  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
REAL_DATA = Path(os.environ.get("SIMCSE_DATA_MIRROR", REPO.parent / "shared" / "data")) / "senteval" / "downstream"


_model = perturbed_model


def _cos(a, b):
    return (a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)


@pytest.fixture
def real_data():
    if not (REAL_DATA / "STS" / "STSBenchmark" / "sts-test.csv").is_file():
        pytest.skip(f"SentEval data not found at {REAL_DATA}")
    return REAL_DATA


@pytest.mark.parametrize("arch, pooler, mlp_only_train", [
    ("bert", "cls", False), ("bert", "cls", True), ("roberta", "cls", False), ("bert", "avg", False),
    ("roberta", "cls_before_pooler", False),
])
def test_every_save_is_a_sentence_transformers_folder(tmp_path, request, arch, pooler, mlp_only_train):
    model = _model(request.getfixturevalue(f"tiny_{arch}_dir"), pooler, mlp_only_train)
    model.save_pretrained(tmp_path / "m")  # no export step
    st = sentence_transformers.SentenceTransformer(str(tmp_path / "m"), device="cpu")
    theirs = st.encode(SENTENCES, batch_size=4, convert_to_numpy=True)
    assert _cos(theirs, model.encode(SENTENCES)).min() > 0.9999
    card = ModelCard.load(tmp_path / "m" / "README.md")
    assert card.data.library_name == "sentence-transformers" and f"pooler: `{pooler}`" in card.text


@pytest.mark.parametrize("pooler", ["avg_top2", "avg_first_last"])
def test_poolers_without_st_equivalent_fail_clearly(tmp_path, tiny_bert_dir, pooler):
    _model(tiny_bert_dir, pooler).save_pretrained(tmp_path / "m")
    with pytest.raises(ValueError, match=f"Invalid pooling mode: 'simcse pooler {pooler}"):
        sentence_transformers.SentenceTransformer(str(tmp_path / "m"), device="cpu")
    card = ModelCard.load(tmp_path / "m" / "README.md")
    assert card.data.library_name == "transformers"
    assert "sentence-transformers cannot load this folder" in card.text
    # simcse itself still loads it with its pooler
    assert SimCSEModel.from_pretrained(str(tmp_path / "m")).pooler_type == pooler


def test_card_names_a_hub_training_dataset_not_a_local_folder(tmp_path, tiny_bert_dir):
    model = _model(tiny_bert_dir, "cls")
    model.save_pretrained(tmp_path / "m")
    training = {"model_name_or_path": "bert-base-uncased", "dataset_name": "sentence-transformers/all-nli",
                "dataset_config_name": "triplet", "temp": 0.05}
    write_model_card(tmp_path / "m", training=training)
    card = ModelCard.load(tmp_path / "m" / "README.md")
    assert card.data.datasets == ["sentence-transformers/all-nli"]
    assert "| dataset_config_name | `triplet` |" in card.text
    assert "- training data: the Hub dataset [sentence-transformers/all-nli]" in card.text
    write_model_card(tmp_path / "m", training={**training, "dataset_name": str(tmp_path)})
    card = ModelCard.load(tmp_path / "m" / "README.md")
    assert card.data.datasets is None and f"- training data: the local dataset `{tmp_path.name}`" in card.text


def test_card_metadata_results_and_foreign_card(tmp_path, tiny_bert_dir):
    model = _model(tiny_bert_dir, "cls")
    model.save_pretrained(tmp_path / "m")
    training = {"model_name_or_path": "bert-base-uncased", "train_file": "data/nli_for_simcse.csv",
                "temp": 0.05, "pooler_type": "cls", "learning_rate": 5e-5}
    write_model_card(tmp_path / "m", training=training,
                     results={"STSBenchmark": {"dev": 0.8412, "test": 0.8123}})
    write_model_card(tmp_path / "m", results={"SICKRelatedness": {"test": 0.7901}})  # merged, not replaced
    card = ModelCard.load(tmp_path / "m" / "README.md")
    d = card.data
    assert (d.pipeline_tag, d.base_model, d.license) == ("sentence-similarity", "bert-base-uncased", "mit")
    assert d.datasets is None  # a local file is no Hub dataset, whatever its name
    assert "- training data: the local file `nli_for_simcse.csv`" in card.text
    assert "- base model: [bert-base-uncased](https://huggingface.co/bert-base-uncased)" in card.text
    got = {(r.dataset_name, r.dataset_split): r.metric_value for r in d.eval_results}
    assert got == {("STS Benchmark", "dev"): 84.12, ("STS Benchmark", "test"): 81.23, ("SICK-R", "test"): 79.01}
    assert "| temp | `0.05` |" in card.text and 'SimCSE("m")' in card.text
    # a local base model path is not Hub metadata; a recorded base_model (the embedded model's id) is
    write_model_card(tmp_path / "m", training={**training, "model_name_or_path": str(tiny_bert_dir)})
    assert ModelCard.load(tmp_path / "m" / "README.md").data.base_model is None
    write_model_card(tmp_path / "m", training={**training, "model_name_or_path": str(tiny_bert_dir),
                                               "base_model": "sentence-transformers/all-MiniLM-L6-v2"})
    card = ModelCard.load(tmp_path / "m" / "README.md")
    assert card.data.base_model == "sentence-transformers/all-MiniLM-L6-v2"
    assert str(tiny_bert_dir) not in card.text  # the install path of a model known by its Hub id is not shown
    assert "| base_model | `sentence-transformers/all-MiniLM-L6-v2` |" in card.text
    with pytest.raises(ValueError, match="results must map"):
        write_model_card(tmp_path / "m", results={"STS12": {"test": 0.5}})
    (tmp_path / "m" / "README.md").write_text("# my own notes\n")
    assert write_model_card(tmp_path / "m") is None
    model.save_pretrained(tmp_path / "m")
    assert (tmp_path / "m" / "README.md").read_text() == "# my own notes\n"


def test_adapter_folder_card_replaces_peft_blank_card_and_names_the_base(tmp_path):
    """A LoRA adapter folder holding peft's blank card (``# Model Card for Model ID``) gets simcse's card, whose
    ``base_model`` is the adapter's base (``adapter_config.json``) and which says sentence-transformers cannot load it;
    a card of the user's own stays."""
    from huggingface_hub import ModelCardData

    folder = tmp_path / "adapter"
    folder.mkdir()
    (folder / "simcse_config.json").write_text(json.dumps({"pooler_type": "last_token", "hidden_size": 8,
                                                           "mlp_only_train": False, "lora_adapter": True}))
    (folder / "adapter_config.json").write_text(json.dumps({"base_model_name_or_path": "org/base-llm"}))
    ModelCard.from_template(ModelCardData(library_name="peft", base_model="org/base-llm")).save(folder / "README.md")
    assert write_model_card(folder, training={"train_file": "wiki.txt", "lora_r": 4}) is not None
    card = ModelCard.load(folder / "README.md")
    assert "simcse" in card.data.tags and (card.data.base_model, card.data.library_name) == ("org/base-llm", "peft")
    assert "a LoRA adapter over the base model" in card.text and "it holds a LoRA adapter" in card.text
    assert "[More Information Needed]" not in card.text
    assert json.loads((folder / "simcse_training_args.json").read_text())["lora_r"] == 4
    (folder / "README.md").write_text("---\nlibrary_name: peft\n---\n\n# my adapter\n")
    assert write_model_card(folder) is None and "# my adapter" in (folder / "README.md").read_text()


def test_evaluate_update_card(tmp_path, tiny_bert_dir, real_data):
    _model(tiny_bert_dir, "avg").save_pretrained(tmp_path / "m")
    ev = load_script("evaluation")
    res = ev.main(["--model_name_or_path", str(tmp_path / "m"), "--tasks", "STSBenchmark", "--mode", "test",
                   "--data_dir", str(real_data), "--quiet", "--update_card"])
    rho = 100 * res["STSBenchmark"]["test"]["spearman"][0]
    got = {(r.dataset_name, r.dataset_split): r.metric_value
           for r in ModelCard.load(tmp_path / "m" / "README.md").data.eval_results}
    assert got == {("STS Benchmark", "test"): round(rho, 2)}
    with pytest.raises(SystemExit, match="--update_card records"):
        ev.main(["--model_name_or_path", str(tmp_path / "m"), "--tasks", "MR", "--data_dir", str(real_data),
                 "--update_card"])
    with pytest.raises(SystemExit, match="--update_card needs a model folder saved by simcse"):
        ev.main(["--model_name_or_path", str(tiny_bert_dir), "--tasks", "STSBenchmark", "--update_card"])


@pytest.mark.slow
def test_card_at_end_of_training(tmp_path, tiny_bert_dir, train_txt, real_data):
    out = tmp_path / "out"
    run_training([
        "--model_name_or_path", str(tiny_bert_dir), "--train_file", str(train_txt), "--output_dir", str(out),
        "--per_device_train_batch_size", "8", "--max_steps", "2", "--eval_strategy", "no", "--save_strategy", "no",
        "--report_to", "none", "--pooler_type", "cls", "--mlp_only_train", "true", "--senteval_dir", str(real_data),
        "--eval_before_training", "true", "--test_after_training", "true", "--use_cpu", "true",
        "--per_device_eval_batch_size", "256"])
    results = json.loads((out / "simcse_results.json").read_text())
    card = ModelCard.load(out / "README.md")
    got = {(r.dataset_name, r.dataset_split): r.metric_value for r in card.data.eval_results}
    assert got[("STS Benchmark", "dev")] == round(100 * results["after"]["final_stsb_spearman"], 2)
    assert got[("SICK-R", "test")] == round(100 * results["test"]["test_sickr_spearman"], 2)
    assert "| mlp_only_train | `True` |" in card.text and "| max_steps | `2` |" in card.text
    assert card.data.datasets is None and f"- training data: the local file `{train_txt.name}`" in card.text
    assert json.loads((out / "simcse_training_args.json").read_text())["pooler_type"] == "cls"


def _as_hub_cache(folder: Path, cache: Path, repo_id: str, files=None) -> None:
    """Lay ``folder`` out as the Hub cache holds a downloaded repo (refs/main -> snapshots/<commit>/...)."""
    commit = "0123456789abcdef0123456789abcdef01234567"
    repo = cache / f"models--{repo_id.replace('/', '--')}"
    snap = repo / "snapshots" / commit
    shutil.copytree(folder, snap, ignore=None if files is None else
                    (lambda d, names: [n for n in names if Path(d) == folder and n not in files]))
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(commit)


def test_hub_id_loads_pooler_and_mlp_from_the_repo(tmp_path, tiny_bert_dir):
    model = _model(tiny_bert_dir, "cls")
    model.save_pretrained(tmp_path / "m")
    _as_hub_cache(tmp_path / "m", tmp_path / "cache", "someone/tiny-simcse")
    loaded = SimCSEModel.from_pretrained("someone/tiny-simcse", cache_dir=str(tmp_path / "cache"))
    assert loaded.pooler_type == "cls"
    torch.testing.assert_close(loaded.mlp.dense.weight, model.mlp.dense.weight)
    np.testing.assert_allclose(loaded.encode(SENTENCES), model.encode(SENTENCES), atol=1e-5)
    # negative control: the same repo without the simcse files loads as a plain encoder (cls with a new MLP)
    keep = {f.name for f in (tmp_path / "m").iterdir()} - {"simcse_config.json", "simcse_mlp.safetensors"}
    _as_hub_cache(tmp_path / "m", tmp_path / "cache2", "someone/tiny-plain", files=keep)
    plain = SimCSEModel.from_pretrained("someone/tiny-plain", cache_dir=str(tmp_path / "cache2"), pooler_type="avg")
    assert not np.allclose(plain.encode(SENTENCES), model.encode(SENTENCES), atol=1e-3)


def test_trainer_push_to_hub_pushes_complete_folder(tmp_path, tiny_bert_dir, train_txt, monkeypatch):
    import transformers.trainer as hf_trainer

    pushed = {}

    class FakeApi:
        def upload_folder(self, repo_id, folder_path, ignore_patterns=(), **kw):
            import fnmatch

            files = [str(p.relative_to(folder_path)) for p in Path(folder_path).rglob("*") if p.is_file()]
            pushed[repo_id] = sorted(f for f in files if not any(fnmatch.fnmatch(f, pat) for pat in ignore_patterns))
            pushed["card"] = (Path(folder_path) / "README.md").read_text()

    monkeypatch.setattr(hf_trainer, "hf_api", lambda: FakeApi())
    monkeypatch.setattr(hf_trainer.Trainer, "init_hf_repo", lambda self, token=None, private=None: setattr(
        self, "hub_model_id", self.args.hub_model_id))
    out = tmp_path / "out"
    run_training([
        "--model_name_or_path", str(tiny_bert_dir), "--train_file", str(train_txt), "--output_dir", str(out),
        "--per_device_train_batch_size", "8", "--max_steps", "1", "--eval_strategy", "no", "--save_strategy", "no",
        "--report_to", "none", "--pooler_type", "cls", "--eval_before_training", "false",
        "--test_after_training", "false", "--use_cpu", "true", "--push_to_hub", "true",
        "--hub_model_id", "someone/tiny-simcse", "--hub_strategy", "end"])
    files = set(pushed["someone/tiny-simcse"])
    assert {"config.json", "model.safetensors", "simcse_config.json", "simcse_mlp.safetensors", "modules.json",
            "1_Pooling/config.json", "2_Dense/model.safetensors", "README.md", "simcse_training_args.json"} <= files
    assert "library_name: sentence-transformers" in pushed["card"] and 'SimCSE("someone/tiny-simcse")' in pushed["card"]


def test_a_new_training_run_into_an_old_folder_shows_only_its_own_results(tmp_path, tiny_bert_dir, train_txt):
    """A folder whose card holds another model's STS-B scores, trained into again (--overwrite_output_dir) without
    evaluations: the new card shows no scores (before, the old model's stayed in the table and the Hub metadata)."""
    from simcse.models.card import card_after_training

    out = tmp_path / "m"
    SimCSEModel.from_pretrained(str(tiny_bert_dir), pooler_type="avg").save_pretrained(out)
    write_model_card(out, results={"STSBenchmark": {"dev": 0.2394, "test": 0.1763}})
    assert "23.94" in (out / "README.md").read_text()
    run_training(["--model_name_or_path", str(tiny_bert_dir), "--train_file", str(train_txt), "--output_dir", str(out),
                  "--overwrite_output_dir", "true", "--pooler_type", "avg", "--max_steps", "1", "--use_cpu", "true",
                  "--per_device_train_batch_size", "8", "--eval_strategy", "no", "--save_strategy", "no",
                  "--eval_before_training", "false", "--test_after_training", "false", "--report_to", "none"])
    card = (out / "README.md").read_text()
    assert "23.94" not in card and "17.63" not in card and "## Results" not in card
    card_after_training(out, (), {"test": {"test_stsb_spearman": 0.5}})
    assert "| STS Benchmark | test | 50.00 |" in (out / "README.md").read_text()
