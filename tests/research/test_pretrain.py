"""simcse.research.pretrain: tiny MLM pretraining from scratch (tokenizer, determinism, resume, HF folder, errors)."""
from __future__ import annotations

import json
import shutil

import pytest
import torch
from conftest import random_sentences

from simcse.research.pretrain import PretrainArguments, build_model, pretrain, read_lines, train_tokenizer

TINY = dict(vocab_size=120, hidden_size=32, num_hidden_layers=2, num_attention_heads=2, max_seq_length=16,
            batch_size=8, learning_rate=1e-3, warmup_ratio=0.0, logging_steps=2, bf16=False, seed=3)


@pytest.fixture
def corpus(tmp_path):
    p = tmp_path / "corpus.txt"
    p.write_text("\n".join(random_sentences(200, seed=1)) + "\n\n", encoding="utf-8")
    return p


def _args(corpus, out, **kw):
    return PretrainArguments(train_file=str(corpus), output_dir=str(out), **{**TINY, "max_steps": 8, "save_steps": 4, **kw})


def _weights(folder):
    from safetensors.torch import load_file

    return load_file(str(folder / "model.safetensors"))


def test_tokenizer_is_wordpiece_trained_on_the_text(corpus, tmp_path):
    tok = train_tokenizer(read_lines(corpus), 120, tmp_path / "tok", 16)
    ids = tok("a man is playing the guitar .")["input_ids"]
    assert ids[0] == tok.cls_token_id and ids[-1] == tok.sep_token_id
    assert tok.unk_token_id not in ids  # every word of the corpus' vocabulary is covered
    assert tok.convert_ids_to_tokens([0, 1, 2, 3, 4]) == ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    assert 50 < len(tok) <= 120


@pytest.mark.slow
def test_pretrain_learns_is_deterministic_and_loads_as_encoder(corpus, tmp_path):
    from transformers import AutoModel

    from simcse.models.modeling import SimCSEModel

    a = pretrain(_args(corpus, tmp_path / "a", max_steps=30, save_steps=100))
    # same vocabulary (the tokenizers trainer may break count ties differently from run to run)
    b = pretrain(_args(corpus, tmp_path / "b", max_steps=30, save_steps=100, tokenizer_name_or_path=str(a)))
    wa, wb = _weights(a), _weights(b)
    assert wa.keys() == wb.keys() and all(torch.equal(wa[k], wb[k]) for k in wa)
    from transformers import AutoTokenizer

    assert AutoTokenizer.from_pretrained(a).get_vocab() == AutoTokenizer.from_pretrained(b).get_vocab()
    rows = (a / "loss_curve.csv").read_text().splitlines()
    assert rows[0] == "step,mlm_loss" and len(rows) > 5
    assert (a / "loss_curve.png").read_bytes()[:4] == b"\x89PNG"
    first, last = float(rows[1].split(",")[1]), float(rows[-1].split(",")[1])
    assert last < first - 0.1, (first, last)  # MLM loss falls below ln(120) = 4.79 (uniform guess)
    enc = AutoModel.from_pretrained(a)
    assert enc.config.num_hidden_layers == 2 and enc.config.hidden_size == 32
    emb = SimCSEModel.from_pretrained(str(a), pooler_type="avg").encode(["a man is playing the guitar ."])
    assert emb.shape == (1, 32)


@pytest.mark.parametrize("length", [16, 32, 100])
def test_position_table_is_the_training_length(corpus, tmp_path, length):
    # every position row is trained: none left random for a longer input to read (it was max(64, length))
    model = build_model(_args(corpus, tmp_path / "out", max_seq_length=length), vocab_size=120, pad_token_id=0)
    assert model.config.max_position_embeddings == length
    assert model.bert.embeddings.position_embeddings.weight.shape[0] == length


@pytest.mark.slow
def test_resume_after_a_crash_continues_from_the_last_checkpoint(corpus, tmp_path):
    out = tmp_path / "crashed"
    pretrain(_args(corpus, out))
    before = (out / "loss_curve.csv").read_text().splitlines()
    # simulate a crash after the step-4 checkpoint: only checkpoint-4 and the tokenizer remain
    shutil.rmtree(out / "checkpoint-8")
    (out / "model.safetensors").unlink()
    pretrain(_args(corpus, out))
    result = json.loads((out / "train_result.json").read_text())
    assert result["resumed_from"].endswith("checkpoint-4") and result["global_step"] == 8
    after = (out / "loss_curve.csv").read_text().splitlines()
    steps = [int(r.split(",")[0]) for r in after[1:]]
    assert steps == [1, 2, 4, 6, 8]
    assert after[:4] == before[:4]  # the history up to the checkpoint is carried over, not retrained
    assert (out / "model.safetensors").is_file()


def test_time_budget_stops_early_and_saves(corpus, tmp_path):
    out = pretrain(_args(corpus, tmp_path / "t", max_steps=10_000, save_steps=10_000, max_minutes=1e-4))
    assert (out / "model.safetensors").is_file()
    steps = [int(r.split(",")[0]) for r in (out / "loss_curve.csv").read_text().splitlines()[1:]]
    assert max(steps) < 100


@pytest.mark.parametrize("kw, match", [
    (dict(num_attention_heads=3), "num_attention_heads"),
    (dict(vocab_size=5), "vocab_size"),
    (dict(max_seq_length=2), "max_seq_length"),
    (dict(mlm_probability=0.0), "mlm_probability"),
    (dict(max_steps=0), "max_steps"),
    (dict(dataloader_num_workers=-1), "dataloader_num_workers"),
])
def test_bad_arguments_name_the_argument(corpus, tmp_path, kw, match):
    with pytest.raises(ValueError, match=match):
        _args(corpus, tmp_path / "x", **kw)


def test_missing_or_empty_train_file(tmp_path):
    with pytest.raises(FileNotFoundError, match="train_file"):
        _args(tmp_path / "nope.txt", tmp_path / "x")
    empty = tmp_path / "empty.txt"
    empty.write_text("\n  \n")
    with pytest.raises(ValueError, match="no non-empty lines"):
        pretrain(_args(empty, tmp_path / "x"))


def test_plot_loss_curve_rejects_bad_input(tmp_path):
    from simcse.evaluation.plots import plot_loss_curve

    with pytest.raises(ValueError, match="losses has 1 values"):
        plot_loss_curve([1, 2], [3.0], tmp_path / "x.png")
    with pytest.raises(ValueError, match="NaN"):
        plot_loss_curve([1, 2], [3.0, float("nan")], tmp_path / "x.png")
