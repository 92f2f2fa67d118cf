"""SimCSETrainer.evaluate encodes as the reference's evaluation: no 128-token cut unless --eval_max_length asks."""
from __future__ import annotations

import numpy as np
import pytest

from conftest import write_senteval


@pytest.mark.parametrize("eval_max_length, expected", [(None, "model"), (128, 128), (16, 16)])
def test_evaluation_cut_is_the_model_limit_unless_asked(tmp_path, tiny_bert_dir, eval_max_length, expected):
    from transformers import TrainingArguments

    from simcse.models.modeling import SimCSEModel
    from simcse.training.trainer import SimCSETrainer

    data = write_senteval(tmp_path / "downstream")
    model = SimCSEModel.from_pretrained(str(tiny_bert_dir), pooler_type="avg")
    seen, real = [], model.encode

    def spy(sentences, **kw):
        seen.append(kw["max_length"])
        return real(sentences, **kw)

    model.encode = spy
    args = TrainingArguments(output_dir=str(tmp_path / "o"), use_cpu=True, report_to="none", per_device_eval_batch_size=16)
    trainer = SimCSETrainer(model=model, args=args, senteval_dir=str(data), eval_max_length=eval_max_length)
    metrics = trainer.evaluate()
    want = model.max_input_tokens if expected == "model" else expected
    assert seen and set(seen) == {want} and np.isfinite(metrics["eval_stsb_spearman"])
    assert expected != "model" or want != 128  # the default is the model's own limit, not the old fixed cut


def test_eval_max_length_argument_is_checked(tmp_path):
    from simcse.training.arguments import DataTrainingArguments

    f = tmp_path / "t.txt"
    f.write_text("a\nb\n")
    assert DataTrainingArguments(train_file=str(f)).eval_max_length is None
    with pytest.raises(ValueError, match="--eval_max_length"):
        DataTrainingArguments(train_file=str(f), eval_max_length=1)
