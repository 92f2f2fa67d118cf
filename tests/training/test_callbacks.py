"""simcse.training.callbacks: alignment/uniformity measured during a tiny training run."""
from __future__ import annotations

import pytest
import torch

from conftest import STSB_ROWS, loop_alignment, loop_uniformity, write_fake_stsb




# ----------------------------------------------------------------------------------------- callback
def _tiny_trainer(model_dir, out_dir, train_txt, max_steps):
    from transformers import TrainingArguments

    from simcse.training.data import ContrastiveCollator, load_sentence_dataset, tokenize_dataset
    from simcse.models.modeling import SimCSEModel
    from simcse.training.trainer import SimCSETrainer

    torch.manual_seed(0)
    model = SimCSEModel.from_pretrained(str(model_dir), pooler_type="cls", mlp_only_train=True, new_mlp_init="random")
    ds, cols = load_sentence_dataset(train_txt)
    ds = tokenize_dataset(ds, cols, model.tokenizer, 16)
    args = TrainingArguments(output_dir=str(out_dir), max_steps=max_steps, per_device_train_batch_size=8,
                             learning_rate=1e-3, logging_steps=1000, save_strategy="no", report_to=[],
                             use_cpu=True, disable_tqdm=True, seed=0)
    return SimCSETrainer(model=model, args=args, train_dataset=ds, data_collator=ContrastiveCollator(pad_token_id=0),
                         processing_class=model.tokenizer)


def test_align_uniform_callback_on_tiny_run(tiny_bert_dir, train_txt, tmp_path):
    from simcse.training.callbacks import LOG_NAME, AlignUniformCallback, read_align_uniform_log

    data_dir = write_fake_stsb(tmp_path / "downstream")
    out_dir = tmp_path / "run"
    out_dir.mkdir()
    (out_dir / LOG_NAME).write_text('{"step": 99, "align": 0, "uniform": 0}\n')  # stale: a fresh run drops it
    trainer = _tiny_trainer(tiny_bert_dir, out_dir, train_txt, max_steps=4)
    model = trainer.model
    modes = []
    original = model.encode

    def spy(*a, **k):
        modes.append(model.training)
        return original(*a, **k)

    model.encode = spy
    cb = AlignUniformCallback.attach(trainer, every_n_steps=2, data_dir=data_dir, batch_size=4)
    trainer.train()
    assert modes and not any(modes)  # always measured with dropout off
    assert model.training  # and put back in train mode

    records = read_align_uniform_log(out_dir / LOG_NAME)
    assert [r["step"] for r in records] == [0, 2, 4]
    assert all(r["n_pos"] == 3 and r["n_sentences"] == 16 and r["split"] == "dev" for r in records)
    logged = [h for h in trainer.state.log_history if "align" in h]
    assert [h["step"] for h in logged] == [0, 2, 4]
    assert [h["align"] for h in logged] == [r["align"] for r in records]
    assert records[0]["uniform"] != records[-1]["uniform"]  # training moved the embeddings

    # The last record is the final model's: recompute it by hand from eval-mode embeddings.
    model.encode = original
    model.eval()
    distinct = list(dict.fromkeys(s for _, s1, s2 in STSB_ROWS for s in (s1, s2)))
    emb = dict(zip(distinct, model.encode(distinct)))
    pos = [(s1, s2) for g, s1, s2 in STSB_ROWS if g > 4]
    assert records[-1]["align"] == pytest.approx(
        loop_alignment([emb[a] for a, _ in pos], [emb[b] for _, b in pos], 2), rel=1e-9)
    assert records[-1]["uniform"] == pytest.approx(loop_uniformity([emb[s] for s in distinct], 2), rel=1e-9)

    model.train()
    again = [cb.measure(model), cb.measure(model)]
    assert again[0] == again[1] and model.training

    with pytest.raises(ValueError, match="every_n_steps"):
        AlignUniformCallback(every_n_steps=0)
    with pytest.raises(ValueError, match="needs a model with .encode"):
        cb.measure(torch.nn.Linear(2, 2))
