"""simcse.training.train: the final model's evaluation is logged under its own keys, never as a second value at a step."""
from collections import defaultdict

import pytest

from conftest import run_training


@pytest.mark.slow
def test_final_evaluation_has_its_own_keys(tmp_path, tiny_bert_dir, train_txt, capsys):
    argv = ["--model_name_or_path", str(tiny_bert_dir), "--train_file", str(train_txt), "--output_dir", str(tmp_path / "o"),
            "--per_device_train_batch_size", "8", "--learning_rate", "1e-3", "--max_steps", "4", "--eval_strategy", "steps",
            "--eval_steps", "2", "--save_strategy", "steps", "--save_steps", "2", "--load_best_model_at_end", "true",
            "--metric_for_best_model", "stsb_spearman", "--report_to", "none", "--eval_before_training", "false",
            "--test_after_training", "false", "--use_cpu", "true", "--dataloader_pin_memory", "false", "--seed", "0"]
    trainer = run_training(argv)
    per_step = defaultdict(list)
    for h in trainer.state.log_history:
        if "eval_stsb_spearman" in h:
            per_step[h["step"]].append(h["eval_stsb_spearman"])
    assert sorted(per_step) == [2, 4] and all(len(v) == 1 for v in per_step.values()), dict(per_step)
    final = [h for h in trainer.state.log_history if "final_stsb_spearman" in h]
    assert len(final) == 1 and final[0]["final_stsb_spearman"] == max(v[0] for v in per_step.values())
    printed = capsys.readouterr().out  # the run ends by saying where the model is and what to do next
    assert f"[simcse] trained model: {(tmp_path / 'o').resolve()}" in printed
    assert f"simcse evaluate --model_name_or_path {(tmp_path / 'o').resolve()}" in printed
