"""Supervised SimCSE end to end: triplet/pair CSVs, their error messages, and the auxiliary MLM objective."""
from __future__ import annotations

import csv
import math
from pathlib import Path

import pytest
import torch

from conftest import logged_losses, make_tiny_model, random_sentences, run_training, training_error
from simcse.data import ContrastiveCollator, load_sentence_dataset, mask_tokens, tokenize_dataset

SHARED_PAIRS = Path(__file__).resolve().parents[2] / "shared" / "data" / "pairs"


def _write_csv(path: Path, header: list[str], rows: list[list[str]]) -> Path:
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(header)
        w.writerows(rows)
    return path


def _rows(n: int, columns: int, seed: int = 0) -> list[list[str]]:
    """``n`` rows of ``columns`` cells: a sentence, a paraphrase-like positive (the sentence without its first
    word, so there is something to learn in a few steps) and an unrelated hard negative."""
    sents = random_sentences(2 * n, seed=seed)
    rows = []
    for i in range(n):
        s0 = sents[i]
        row = [s0, " ".join(s0.split()[1:]), sents[n + i]]
        rows.append(row[:columns])
    return rows


def _argv(model_dir, train_file, out, *extra):
    return ["--model_name_or_path", str(model_dir), "--train_file", str(train_file), "--output_dir", str(out),
            "--per_device_train_batch_size", "8", "--learning_rate", "1e-3", "--max_steps", "15",
            "--eval_strategy", "no", "--save_strategy", "no", "--report_to", "none", "--logging_steps", "1",
            "--eval_before_training", "false", "--test_after_training", "false", "--seed", "0", "--use_cpu", "true",
            "--dataloader_pin_memory", "false", "--pooler_type", "avg", *extra]


def _train(argv):
    """Run train.main; return (trainer, list of the row shapes of every SimCSEModel.forward call)."""
    calls = []

    def hook(trainer):
        trainer.model.register_forward_hook(lambda m, args, kwargs, out: calls.append(tuple(kwargs["input_ids"].shape)),
                                            with_kwargs=True)

    return run_training(argv, hook), calls


_losses = logged_losses
_error = training_error


# ------------------------------------------------------------------------------------------ training
@pytest.mark.parametrize("columns", [3, 2], ids=["triplets", "pairs"])
def test_csv_trains_all_views_in_one_forward_pass(tmp_path, tiny_bert_dir, columns):
    header = ["sent0", "sent1", "hard_neg"][:columns] + ["source"]  # an extra column is ignored
    f = _write_csv(tmp_path / "train.csv", header, [r + ["x"] for r in _rows(48, columns)])
    trainer, calls = _train(_argv(tiny_bert_dir, f, tmp_path / "out", "--hard_negative_weight", "0.0"))
    losses = _losses(trainer)
    assert len(losses) == 15 and all(math.isfinite(x) for x in losses)
    # one encoder call per step, holding the B * V rows (queries, positives [, hard negatives]) together
    assert len(calls) == 15 and {c[0] for c in calls} == {8 * columns}, calls
    assert sum(losses[-5:]) / 5 < 0.8 * sum(losses[:5]) / 5, losses


@pytest.mark.parametrize("name", ["qqp_positive_pairs.csv", "caption_pairs.csv.gz"])
def test_shared_pair_files_load_with_two_views(name, tiny_bert_dir):
    path = SHARED_PAIRS / name
    if not path.is_file():
        pytest.skip(f"{path} not available")
    ds, columns = load_sentence_dataset(path, max_train_samples=32)
    assert columns == ["sent0", "sent1"] and len(ds) == 32 and ds.column_names == ["sent0", "sent1"]
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_bert_dir)
    ds = tokenize_dataset(ds, columns, tok, max_seq_length=32)
    batch = ContrastiveCollator(pad_token_id=tok.pad_token_id)([ds[i] for i in range(8)])
    assert batch["input_ids"].shape[:2] == (8, 2) and batch["input_ids"].shape[2] <= 32


# ---------------------------------------------------------------------------------------- bad input
def test_csv_missing_column_names_the_columns(tmp_path, tiny_bert_dir):
    f = _write_csv(tmp_path / "nli.csv", ["sent0", "hard_neg"], _rows(4, 2))
    msg = _error(_argv(tiny_bert_dir, f, tmp_path / "out"))
    assert "['sent0', 'hard_neg']" in msg and "sent0,sent1" in msg and "hard_neg" in msg
    assert not (tmp_path / "out").exists()


def test_empty_csv_stops(tmp_path, tiny_bert_dir):
    empty = tmp_path / "nli_for_simcse.csv"
    empty.write_text("")
    msg = _error(_argv(tiny_bert_dir, empty, tmp_path / "out"))
    assert "is empty" in msg and "data/download_nli.sh" in msg
    assert not (tmp_path / "out").exists()


def test_header_only_csv_names_the_file(tmp_path, tiny_bert_dir):
    header_only = _write_csv(tmp_path / "header.csv", ["sent0", "sent1", "hard_neg"], [])
    msg = _error(_argv(tiny_bert_dir, header_only, tmp_path / "out"))
    assert "header.csv" in msg


def test_rows_with_an_empty_cell_are_skipped_and_counted(tmp_path, caplog):
    rows = _rows(5, 3)
    rows[1][2] = ""  # no hard negative
    rows[3][0] = "   "  # blank premise
    f = _write_csv(tmp_path / "t.csv", ["sent0", "sent1", "hard_neg"], rows)
    with caplog.at_level("WARNING"):
        ds, columns = load_sentence_dataset(f)
    assert columns == ["sent0", "sent1", "hard_neg"] and len(ds) == 3
    assert ds["sent0"] == [rows[i][0] for i in (0, 2, 4)]
    assert "skipped 2 rows with an empty cell of 5" in caplog.text


# ---------------------------------------------------------------------------------------------- MLM
def test_mlm_masking_leaves_contrastive_ids_unchanged():
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(5, 60, (4, 3, 12), generator=g)
    ids[..., 0], ids[..., -1] = 2, 3
    mask = torch.ones_like(ids)
    before = ids.clone()
    masked, labels = mask_tokens(ids, mask, mask_token_id=4, vocab_size=60, special_ids=[0, 1, 2, 3, 4],
                                 mlm_probability=0.5, generator=g)
    assert torch.equal(ids, before)  # the input is not modified in place
    assert not torch.equal(masked, ids) and (labels != -100).any()
    assert torch.equal(labels[labels != -100], ids[labels != -100])

    feats = [{"input_ids": [[2, 7, 8, 9, 3], [2, 10, 11, 3]], "attention_mask": [[1] * 5, [1] * 4]} for _ in range(6)]
    plain = ContrastiveCollator(pad_token_id=0)(feats)
    col = ContrastiveCollator(pad_token_id=0, mlm_probability=0.5, mask_token_id=4, vocab_size=60, special_ids=(0, 1, 2, 3, 4))
    torch.manual_seed(0)
    with_mlm = col(feats)
    assert torch.equal(with_mlm["input_ids"], plain["input_ids"])  # contrastive ids: untouched
    assert with_mlm["mlm_input_ids"].shape == plain["input_ids"].shape
    assert not torch.equal(with_mlm["mlm_input_ids"], with_mlm["input_ids"])


def test_mlm_masking_statistics_80_10_10():
    g = torch.Generator().manual_seed(0)
    vocab = 1000
    ids = torch.randint(5, vocab, (400, 500), generator=g)
    attn = torch.ones_like(ids)
    ids[:, 0] = 2  # [CLS]: special, never selected
    attn[:, -50:] = 0  # padding: never selected
    masked, labels = mask_tokens(ids, attn, mask_token_id=4, vocab_size=vocab, special_ids=[0, 1, 2, 3, 4],
                                 mlm_probability=0.15, generator=g)
    sel = labels != -100
    assert not sel[:, 0].any() and not sel[:, -50:].any()
    n = sel.sum().item()
    assert abs(n / (400 * 449) - 0.15) < 0.005
    is_mask = (masked == 4) & sel
    kept = (masked == ids) & sel
    rand = sel & ~is_mask & ~kept
    # 80% [MASK]; 10% random (a random token equals the original or [MASK] with prob ~1/vocab); 10% unchanged
    assert abs(is_mask.sum().item() / n - 0.8) < 0.01
    assert abs(rand.sum().item() / n - 0.1) < 0.01
    assert abs(kept.sum().item() / n - 0.1) < 0.01
    assert torch.equal(masked[~sel], ids[~sel])


def test_do_mlm_without_mlm_head_is_a_clear_error(tmp_path, tiny_bert_dir, train_txt):
    # tiny_bert_dir holds a bare BertModel: no masked-LM head
    msg = _error(_argv(tiny_bert_dir, train_txt, tmp_path / "out", "--do_mlm", "true"))
    assert "masked-LM head" in msg and str(tiny_bert_dir) in msg
    assert not (tmp_path / "out").exists()


def test_do_mlm_trains_on_a_masked_lm_checkpoint(tmp_path):
    from transformers import BertConfig, BertForMaskedLM

    folder = make_tiny_model(tmp_path / "mlm_model", "bert")
    torch.manual_seed(0)
    BertForMaskedLM(BertConfig.from_pretrained(folder)).save_pretrained(folder)
    f = _write_csv(tmp_path / "train.csv", ["sent0", "sent1", "hard_neg"], _rows(48, 3, seed=3))
    trainer, calls = _train(_argv(folder, f, tmp_path / "out", "--do_mlm", "true", "--mlm_weight", "0.1",
                                  "--mlm_probability", "0.3"))
    head = trainer.model.mlm_head
    fresh = BertForMaskedLM.from_pretrained(folder).cls
    # the head was loaded from the checkpoint and trained
    assert not torch.equal(head.predictions.transform.dense.weight, fresh.predictions.transform.dense.weight)
    assert head.predictions.decoder.weight is trainer.model.encoder.get_input_embeddings().weight  # tied
    losses = _losses(trainer)
    assert len(losses) == 15 and all(math.isfinite(x) for x in losses)
    assert sum(losses[-5:]) / 5 < 0.8 * sum(losses[:5]) / 5, losses
    assert {c[0] for c in calls} == {24}  # the MLM pass uses mlm_logits, not a second contrastive forward
