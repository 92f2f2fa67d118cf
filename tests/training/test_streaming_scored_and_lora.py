"""``--streaming`` with a scored-pair dataset (CoSENT, AnglE: the ``score`` column read beside the views, as from a
file), and ``--loss esimcse`` from a LoRA adapter folder refused as with ``--lora_r``."""
from __future__ import annotations

import csv
import json
import math

import pytest

from conftest import objective_argv, random_sentences, run_training


def _scored_hub(root, score=lambda i: f"{i % 5}.0"):
    hub = root / "hub"
    (hub / "data").mkdir(parents=True)
    a, b = random_sentences(24, seed=5), random_sentences(24, seed=6)
    with open(hub / "data" / "pairs.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["sent0", "sent1", "score"])
        w.writerows([a[i], b[i], score(i)] for i in range(24))
    (hub / "README.md").write_text("---\nconfigs:\n- config_name: pairs\n  data_files:\n  - split: train\n"
                                   "    path: data/pairs.csv\n---\n")
    return hub


@pytest.mark.parametrize("loss", ["cosent", "angle"])
def test_streaming_trains_a_scored_pair_dataset_as_the_file_does(tmp_path, tiny_bert_dir, loss):
    hub = _scored_hub(tmp_path)
    common = ["--max_steps", "2", "--per_device_train_batch_size", "4", "--pooler_type", "avg",
              "--shuffle_buffer_size", "0"]
    streamed = objective_argv(tiny_bert_dir, hub, tmp_path / "stream", loss, {}, *common)
    i = streamed.index("--train_file")
    streamed[i:i + 2] = ["--dataset_name", str(hub), "--dataset_config_name", "pairs", "--streaming", "true"]
    first = {}

    def peek(trainer):  # the stream's first batch (file order: --shuffle_buffer_size 0) carries the scores
        first.update(next(iter(trainer.get_train_dataloader())))

    trainer = run_training(streamed, on_build=peek)
    losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    assert trainer.state.global_step == 2 and len(losses) == 2 and all(math.isfinite(x) for x in losses)
    assert first["score"].tolist() == [0.0, 1.0, 2.0, 3.0]


def test_a_non_numeric_score_in_a_stream_names_the_column_and_row(tmp_path, tiny_bert_dir):
    hub = _scored_hub(tmp_path, score=lambda i: "high" if i == 2 else "1.0")
    argv = objective_argv(tiny_bert_dir, hub, tmp_path / "o", "cosent", {}, "--max_steps", "2",
                          "--per_device_train_batch_size", "4", "--pooler_type", "avg")
    i = argv.index("--train_file")
    argv[i:i + 2] = ["--dataset_name", str(hub), "--dataset_config_name", "pairs", "--streaming", "true"]
    with pytest.raises(ValueError, match=r"column 'score' of row 3 is 'high'; expected a number"):
        run_training(argv)


def test_esimcse_from_a_lora_adapter_folder_is_refused_like_lora_r(tmp_path):
    from simcse.training.build import SetupError
    from simcse.training.parser import training_arguments

    adapter = tmp_path / "adapter"
    adapter.mkdir()
    (adapter / "adapter_config.json").write_text(json.dumps({"base_model_name_or_path": "base", "peft_type": "LORA"}))
    (adapter / "adapter_model.safetensors").write_bytes(b"")
    txt = tmp_path / "train.txt"
    txt.write_text("\n".join(random_sentences(8)) + "\n")
    with pytest.raises(SetupError, match=r"--loss esimcse does not train with LoRA \(--model_name_or_path .* is a "
                                         r"LoRA adapter folder"):
        training_arguments(model_name_or_path=str(adapter), train_file=str(txt), output_dir=str(tmp_path / "o"),
                           loss="esimcse")
    training_arguments(model_name_or_path=str(adapter), train_file=str(txt), output_dir=str(tmp_path / "o"),
                       loss="infonce")  # an objective that trains with LoRA: no refusal
