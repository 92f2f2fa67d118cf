"""LoRA through peft: only the adapters train; checkpoints and the saved folder hold the adapter (and a base
reference); a resumed run equals an uninterrupted one; --merge_lora saves full weights that
sentence-transformers loads; gradient checkpointing works with LoRA."""
from __future__ import annotations

import json

import pytest
import torch

from decoder_models import make_tiny_decoder

pytestmark = pytest.mark.slow


def _argv(folder, train_txt, out, *extra):
    return ["--model_name_or_path", str(folder), "--train_file", str(train_txt), "--output_dir", str(out),
            "--pooler_type", "last_token", "--bidirectional", "true", "--lora_r", "4", "--per_device_train_batch_size", "8",
            "--learning_rate", "5e-3", "--use_cpu", "true", "--eval_strategy", "no", "--eval_before_training", "false",
            "--test_after_training", "false", "--report_to", "none", "--dataloader_pin_memory", "false", "--seed", "0",
            "--save_on_signal", "none", *extra]


def _lora_state(trainer):
    return {k: v.detach().clone() for k, v in trainer.model.encoder.state_dict().items() if "lora_" in k}


def test_lora_trains_adapters_only_and_resumes_exactly(tmp_path, train_txt):
    from safetensors.torch import load_file

    from conftest import run_training
    from simcse import SimCSE

    folder = make_tiny_decoder(tmp_path / "llama", "llama")
    base = load_file(str(folder / "model.safetensors"))
    full = run_training(_argv(folder, train_txt, tmp_path / "full", "--max_steps", "4", "--save_strategy", "steps",
                              "--save_steps", "2"))
    trainable = [n for n, p in full.model.named_parameters() if p.requires_grad]
    assert trainable and all("lora_" in n for n in trainable)
    # the base weights did not move
    compared = 0
    for name, p in full.model.encoder.get_base_model().named_parameters():
        key = "model." + name.replace(".base_layer", "")
        if "lora_" not in name and key in base:
            assert torch.equal(p.detach(), base[key]), name
            compared += 1
    assert compared > 10
    ck = tmp_path / "full" / "checkpoint-2"
    assert (ck / "adapter_model.safetensors").is_file() and not (ck / "model.safetensors").exists()
    out = tmp_path / "full"
    assert (out / "adapter_config.json").is_file() and not (out / "model.safetensors").exists()
    assert json.loads((out / "simcse_config.json").read_text())["lora_adapter"] is True
    resumed = run_training(_argv(folder, train_txt, tmp_path / "resumed", "--max_steps", "4", "--save_strategy", "steps",
                                 "--save_steps", "2", "--resume_from_checkpoint", str(ck)))
    a, b = _lora_state(full), _lora_state(resumed)
    assert a and a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    # the saved folder encodes as the trained model
    sentences = ["a man plays music .", "the dog runs in the park ."]
    trained = full.model.eval()
    with torch.no_grad():
        want = trained.encode(sentences)
    got = SimCSE(str(out)).encode(sentences, normalize_to_unit=False)
    assert torch.allclose(torch.as_tensor(got), torch.as_tensor(want), atol=1e-5)
    # sentence-transformers cannot rebuild the bidirectional base from an adapter folder: refused, not causal
    from sentence_transformers import SentenceTransformer

    with pytest.raises(Exception, match="LoRA adapter folder"):
        SentenceTransformer(str(out), device="cpu")


def test_merge_lora_saves_full_weights_that_sentence_transformers_loads(tmp_path, train_txt):
    from sentence_transformers import SentenceTransformer

    from conftest import run_training
    from simcse import SimCSE

    folder = make_tiny_decoder(tmp_path / "llama", "llama")
    out = tmp_path / "merged"
    trainer = run_training(_argv(folder, train_txt, out, "--max_steps", "3", "--save_strategy", "no", "--merge_lora", "true",
                                 "--activation_checkpointing", "true"))
    assert (out / "model.safetensors").is_file() and not (out / "adapter_config.json").exists()
    assert json.loads((out / "config.json").read_text())["is_causal"] is False
    sentences = ["a man plays music .", "the dog runs in the park .", "a child"]
    with torch.no_grad():
        want = trainer.model.eval().encode(sentences)
    ours = SimCSE(str(out)).encode(sentences, normalize_to_unit=False)
    theirs = SentenceTransformer(str(out), device="cpu").encode(sentences)
    assert torch.allclose(torch.as_tensor(ours), torch.as_tensor(want), atol=1e-5)
    assert abs(torch.as_tensor(ours).numpy() - theirs).max() < 1e-5


def test_overwritten_folder_holds_only_the_new_models_files_and_simcses_card(tmp_path, train_txt):
    """An adapter folder gets simcse's card and training arguments (not peft's blank card); training over it with
    --merge_lora (and back) leaves only the new model's files, which SimCSE and sentence-transformers load, and
    keeps the user's own files (a card of the user's own included)."""
    from huggingface_hub import ModelCard
    from sentence_transformers import SentenceTransformer

    from conftest import run_training
    from simcse import SimCSE

    folder = make_tiny_decoder(tmp_path / "llama", "llama")
    out = tmp_path / "out"
    common = ("--max_steps", "2", "--save_strategy", "no", "--overwrite_output_dir", "true")
    run_training(_argv(folder, train_txt, out, *common))
    card = ModelCard.load(out / "README.md")
    assert "simcse" in card.data.tags and "[More Information Needed]" not in card.text
    assert "it holds a LoRA adapter" in card.text
    assert json.loads((out / "simcse_training_args.json").read_text())["lora_r"] == 4
    (out / "notes.txt").write_text("mine")
    sentences = ["a man plays music .", "the dog runs in the park ."]
    merged = run_training(_argv(folder, train_txt, out, *common, "--merge_lora", "true", "--seed", "7"))
    files = {p.name for p in out.iterdir()}
    assert {"model.safetensors", "config.json", "notes.txt"} <= files
    assert not files & {"adapter_config.json", "adapter_model.safetensors"}
    assert "simcse" in ModelCard.load(out / "README.md").data.tags
    with torch.no_grad():
        want = merged.model.eval().encode(sentences)
    ours = torch.as_tensor(SimCSE(str(out)).encode(sentences, normalize_to_unit=False))
    theirs = torch.as_tensor(SentenceTransformer(str(out), device="cpu").encode(sentences))
    assert torch.allclose(ours, torch.as_tensor(want), atol=1e-5) and torch.allclose(ours, theirs, atol=1e-5)
    (out / "README.md").write_text("# my own card\n")  # the user's card: kept (not replaced by peft's)
    adapter = run_training(_argv(folder, train_txt, out, *common, "--seed", "3"))
    assert (out / "README.md").read_text() == "# my own card\n"
    files = {p.name for p in out.iterdir()}
    assert {"adapter_config.json", "adapter_model.safetensors", "notes.txt"} <= files
    assert not files & {"model.safetensors", "config.json"} and (out / "notes.txt").read_text() == "mine"
    with torch.no_grad():
        want = adapter.model.eval().encode(sentences)
    got = SimCSE(str(out)).encode(sentences, normalize_to_unit=False)
    assert torch.allclose(torch.as_tensor(got), torch.as_tensor(want), atol=1e-5)


def test_lora_options_are_checked_before_loading(tmp_path, train_txt):
    from conftest import training_error

    argv = _argv(tmp_path / "missing", train_txt, tmp_path / "o", "--max_steps", "1")
    bad = list(argv)
    bad[bad.index("--lora_r") + 1] = "0"
    assert "--lora_r must be a positive integer" in training_error(bad)
    no_r = argv[: argv.index("--lora_r")] + argv[argv.index("--lora_r") + 2:] + ["--merge_lora", "true"]
    assert "give --lora_r" in training_error(no_r)


def test_fsdp_on_the_cpu_is_refused_not_run_as_ddp(tmp_path, train_txt):
    """On the CPU transformers turns --fsdp into plain DDP (is_fsdp_enabled False): refused with the reason."""
    from conftest import training_error

    folder = make_tiny_decoder(tmp_path / "llama", "llama")
    msg = training_error(_argv(folder, train_txt, tmp_path / "o", "--max_steps", "1", "--fsdp", "full_shard"))
    assert "--fsdp needs CUDA GPUs" in msg
