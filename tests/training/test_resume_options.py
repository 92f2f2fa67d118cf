"""Resuming from a checkpoint ends where the uninterrupted run ends, bitwise, for every training option.

One run trains 8 steps and saves checkpoint-4; a second run resumes from that checkpoint into another folder.
The final weights (encoder, MLP, MLM head) and the losses of steps 5-8 must be identical: every trainable
parameter and every random stream a step uses (dropout, MLM masking, data order, augmentation draws) is saved
and restored."""
import csv

import pytest
import torch
from safetensors.torch import load_file

from conftest import logged_losses, make_mlm_model, random_sentences, run_training

OPTIONS = {
    "unsupervised": [],
    "mlm": ["--do_mlm", "true", "--mlm_probability", "0.3"],
    "hard_negatives": ["@triplets"],
    "gradient_cache": ["--gradient_cache_chunk_size", "4"],
    "bf16": ["--bf16", "true"],
    "augmentation": ["--augmentation", "delete_one_word"],
}


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    root = tmp_path_factory.mktemp("resume_options")
    make_mlm_model(root / "model")  # with an MLM head for --do_mlm
    sents = random_sentences(96, seed=5)
    (root / "train.txt").write_text("\n".join(sents[:40]) + "\n")
    with open(root / "triplets.csv", "w", newline="") as f:
        csv.writer(f).writerows([("sent0", "sent1", "hard_neg")] + [(sents[i], sents[40 + i], sents[80 + i % 16])
                                                                    for i in range(40)])
    return root


def _argv(files, out, extra):
    train = files / ("triplets.csv" if "@triplets" in extra else "train.txt")
    return ["--model_name_or_path", str(files / "model"), "--pooler_type", "cls", "--train_file", str(train),
            "--output_dir", str(out), "--per_device_train_batch_size", "8", "--learning_rate", "1e-3",
            "--max_steps", "8", "--save_strategy", "steps", "--save_steps", "4", "--eval_strategy", "no",
            "--logging_steps", "1", "--report_to", "none", "--use_cpu", "true", "--dataloader_pin_memory", "false",
            "--eval_before_training", "false", "--test_after_training", "false", "--seed", "0",
            *[a for a in extra if a != "@triplets"]]


def _state(folder):
    out = load_file(str(folder / "model.safetensors"))
    for name in ("simcse_mlp.safetensors", "simcse_mlm_head.safetensors"):
        if (folder / name).is_file():
            out.update({f"{name}:{k}": v for k, v in load_file(str(folder / name)).items()})
    return out


@pytest.mark.parametrize("option", sorted(OPTIONS))
@pytest.mark.slow
def test_resume_equals_uninterrupted_run(files, tmp_path, option):
    full = run_training(_argv(files, tmp_path / "full", OPTIONS[option]))
    resumed = run_training(_argv(files, tmp_path / "resumed", OPTIONS[option])
                           + ["--resume_from_checkpoint", str(tmp_path / "full" / "checkpoint-4")])
    assert logged_losses(resumed)[-4:] == logged_losses(full)[-4:]
    a, b = _state(tmp_path / "full"), _state(tmp_path / "resumed")
    assert a.keys() == b.keys()
    if option == "mlm":
        assert any(k.startswith("simcse_mlm_head") for k in a)  # the trained head is part of the checkpoint
    for k in a:
        assert torch.equal(a[k], b[k]), f"{option}: {k} differs by {(a[k].float() - b[k].float()).abs().max().item()}"
