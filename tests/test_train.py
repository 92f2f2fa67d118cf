"""scripts/train.py setup (simcse.train): batches of one sentence, max_seq_length against the model's positions."""
from __future__ import annotations

from conftest import random_sentences, run_training, training_error


def _args(model_dir, train_file, out, *extra):
    return [
        "--model_name_or_path", str(model_dir), "--pooler_type", "avg", "--train_file", str(train_file),
        "--output_dir", str(out), "--per_device_train_batch_size", "4", "--learning_rate", "1e-4",
        "--eval_strategy", "no", "--save_strategy", "no", "--report_to", "none", "--logging_steps", "1",
        "--eval_before_training", "false", "--test_after_training", "false", "--seed", "0",
        "--use_cpu", "true", "--dataloader_pin_memory", "false", "--disable_tqdm", "true", *extra,
    ]


def test_last_batch_of_one_sentence_is_dropped(tmp_path, tiny_bert_dir, caplog):
    """9 sentences, batch 4, 2 epochs: each epoch has 2 full batches and a 1-sentence rest, which InfoNCE cannot
    contrast. Training finishes with 2 steps per epoch (4 in all) and says so once."""
    train = tmp_path / "nine.txt"
    train.write_text("\n".join(random_sentences(9)) + "\n")
    trainer = run_training(_args(tiny_bert_dir, train, tmp_path / "out", "--num_train_epochs", "2"))
    assert trainer.state.global_step == 4
    assert trainer.state.epoch == 2.0
    notes = [r.getMessage() for r in caplog.records if "last batch of 1 sentence" in r.getMessage()]
    assert len(notes) == 1 and "each epoch trains on 8 examples" in notes[0]


def test_one_triplet_batch_is_kept(tmp_path, tiny_bert_dir):
    """A 1-row batch with a hard negative has 2 candidates: it is a valid batch and is not dropped."""
    train = tmp_path / "five.tsv"
    s = random_sentences(15)
    train.write_text("sent0\tsent1\thard_neg\n" + "".join(f"{s[i]}\t{s[i + 5]}\t{s[i + 10]}\n" for i in range(5)))
    trainer = run_training(_args(tiny_bert_dir, train, tmp_path / "out", "--num_train_epochs", "1"))
    assert trainer.state.global_step == 2  # batches of 4 and 1


def test_max_seq_length_above_model_positions_is_refused(tmp_path, tiny_bert_dir):
    """The tiny BERT has 64 positions; a sentence of 80 words with --max_seq_length 100 would index past them."""
    train = tmp_path / "long.txt"
    train.write_text("\n".join(random_sentences(7)) + "\n" + " ".join(["dog"] * 80) + "\n")
    out = tmp_path / "out"
    msg = training_error(_args(tiny_bert_dir, train, out, "--max_seq_length", "100", "--max_steps", "2"))
    assert "--max_seq_length 100 is more than the 64 tokens" in msg and "use --max_seq_length 64 or less" in msg
    assert not out.exists()
    # at the limit it trains
    trainer = run_training(_args(tiny_bert_dir, train, out, "--max_seq_length", "64", "--max_steps", "2"))
    assert trainer.state.global_step == 2
