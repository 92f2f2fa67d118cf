"""simcse.training.batch_size and its use by scripts/train.py: the paper's global contrastive batch, whatever the number of
processes; every main-table config loads and derives its per-device batch."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from simcse.training import train as train_mod
from simcse.training.batch_size import BatchSizeError, derive_per_device_batch, world_size_from_env

REPO = Path(__file__).resolve().parents[2]
MAIN_TABLE = {  # config -> (global batch, learning rate): the reference README's hyperparameter table
    "unsup_bert_base": (64, 3e-5), "unsup_bert_large": (64, 1e-5),
    "unsup_roberta_base": (512, 1e-5), "unsup_roberta_large": (512, 3e-5),
    "sup_bert_base": (512, 5e-5), "sup_bert_large": (512, 1e-5),
    "sup_roberta_base": (512, 5e-5), "sup_roberta_large": (512, 1e-5),
}


@pytest.mark.parametrize("world, expect64, expect512", [(1, 64, 512), (2, 32, 256), (4, 16, 128), (8, 8, 64)])
def test_per_device_batch_for_1_2_4_8_processes(world, expect64, expect512):
    assert derive_per_device_batch(64, world) == expect64
    assert derive_per_device_batch(512, world) == expect512
    assert derive_per_device_batch(512, world, per_device=512 // world) == expect512  # an agreeing explicit batch


def test_mismatch_and_bad_values_are_refused():
    with pytest.raises(BatchSizeError, match=r"128 x 1 process\(es\) = 128 disagrees with --global_batch_size 512"):
        derive_per_device_batch(512, 1, per_device=128)
    assert derive_per_device_batch(512, 1, per_device=128, allow_mismatch=True) == 128
    with pytest.raises(BatchSizeError, match="cannot be split evenly over 3"):
        derive_per_device_batch(64, 3)
    for bad in (0, -8, True, 6.0):
        with pytest.raises(BatchSizeError, match="global_batch_size"):
            derive_per_device_batch(bad, 1)
    assert world_size_from_env({}) == 1 and world_size_from_env({"WORLD_SIZE": "4"}) == 4
    with pytest.raises(BatchSizeError, match="WORLD_SIZE"):
        world_size_from_env({"WORLD_SIZE": "two"})


def _parse(config: Path, tmp_path, *extra):
    train = tmp_path / ("nli.csv" if "sup_" in config.name and "unsup" not in config.name else "train.txt")
    train.write_text("sent0,sent1,hard_neg\na,b,c\n" if train.suffix == ".csv" else "a\nb\n")
    return train_mod.parse_args([str(config), "--train_file", str(train), "--output_dir", str(tmp_path / "o"), *extra])


@pytest.mark.parametrize("name", sorted(MAIN_TABLE))
def test_every_main_table_config_loads_and_derives_its_batch(name, tmp_path, monkeypatch):
    path = REPO / "configs" / f"{name}.json"
    raw = json.loads(path.read_text())
    assert raw["_source"] and raw["_precision"] and raw["precision"] == "bf16" and raw["_expected_avg_sts"] > 70
    assert "per_device_train_batch_size" not in raw  # derived, never fixed
    global_batch, lr = MAIN_TABLE[name]
    for world in (1, 2, 4, 8):
        monkeypatch.setenv("WORLD_SIZE", str(world))
        _, _, training_args = _parse(path, tmp_path)
        assert training_args.global_batch_size == global_batch and training_args.learning_rate == lr
        assert training_args.per_device_train_batch_size * world == global_batch
        assert not training_args.bf16 and not training_args.fp16  # no GPU here: precision applies on GPUs only


def test_explicit_per_device_batch_must_agree_unless_allowed(tmp_path, monkeypatch):
    cfg = REPO / "configs" / "sup_bert_base.json"
    monkeypatch.setenv("WORLD_SIZE", "4")
    _, _, args = _parse(cfg, tmp_path, "--per_device_train_batch_size", "128")  # the reference's 4 x 128
    assert args.per_device_train_batch_size == 128
    monkeypatch.setenv("WORLD_SIZE", "1")
    with pytest.raises(train_mod.SetupError, match="disagrees with --global_batch_size 512") as exc:
        _parse(cfg, tmp_path, "--per_device_train_batch_size", "128")
    assert "\n" not in str(exc.value)
    _, _, args = _parse(cfg, tmp_path, "--per_device_train_batch_size", "128", "--allow_batch_size_mismatch", "true")
    assert args.per_device_train_batch_size == 128


def test_cpu_configs_and_ablation_bases_state_their_precision():
    for name in ("unsup_cpu_minilm", "sup_cpu_minilm", "ablations/base_sup", "ablations/base_unsup"):
        cfg = json.loads((REPO / "configs" / f"{name}.json").read_text())
        assert cfg["precision"] in ("bf16", "fp32") and cfg["_precision"]
    assert json.loads((REPO / "configs/ablations/base_sup.json").read_text())["global_batch_size"] == 512


def test_precision_flag_is_refused_when_unknown(tmp_path):
    with pytest.raises(train_mod.SetupError, match="--precision must be"):
        _parse(REPO / "configs" / "unsup_bert_base.json", tmp_path, "--precision", "fp8")


@pytest.mark.parametrize("flag", [["--bf16", "true"], ["--bf16=1"], ["--bf16"]])
def test_explicit_bf16_trains_on_the_cpu_without_cuda(flag, tmp_path, monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    _, _, args = _parse(REPO / "configs" / "unsup_cpu_minilm.json", tmp_path, *flag)
    assert args.bf16 and args.use_cpu  # HF refuses bf16 without CUDA unless told to use the CPU
    _, _, args = _parse(REPO / "configs" / "unsup_cpu_minilm.json", tmp_path, "--bf16", "false")
    assert not args.bf16 and not args.use_cpu
