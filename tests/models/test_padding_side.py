"""A sentence's embedding never depends on its batch companions or on the tokenizer's padding side."""
import json

import numpy as np
import pytest

from conftest import make_tiny_model
from simcse.training.data import ContrastiveCollator
from simcse.models.modeling import SimCSEModel
from simcse.models.pooling import POOLERS

SHORT = "the cat sat"
LONG = "the cat sat on the mat while the dog ran far away from the house and the cat"


@pytest.fixture(scope="module")
def left_padded_dir(tmp_path_factory):
    folder = make_tiny_model(tmp_path_factory.mktemp("tiny_left"), "bert")
    cfg_file = folder / "tokenizer_config.json"
    cfg = json.loads(cfg_file.read_text())
    cfg["padding_side"] = "left"
    cfg_file.write_text(json.dumps(cfg))
    return folder


@pytest.mark.parametrize("pooler", sorted(POOLERS))
def test_every_pooler_ignores_batch_and_padding_side(left_padded_dir, tiny_bert_dir, pooler):
    from transformers import AutoTokenizer

    assert AutoTokenizer.from_pretrained(str(left_padded_dir)).padding_side == "left"
    prompt = {"templates": ["the {sentence} is {mask} ."]} if pooler.startswith("prompt_mask") else None
    left = SimCSEModel.from_pretrained(str(left_padded_dir), pooler_type=pooler, prompt=prompt).eval()
    right = SimCSEModel.from_pretrained(str(left_padded_dir), pooler_type=pooler, prompt=prompt).eval()
    right.tokenizer.padding_side = "right"
    if left.mlp is not None:  # the same MLP in both, so only padding could differ
        right.mlp.load_state_dict(left.mlp.state_dict())
    alone = left.encode([SHORT])
    in_batch = left.encode([SHORT, LONG], batch_size=2)[0]
    np.testing.assert_allclose(in_batch, alone[0], atol=1e-5)
    np.testing.assert_allclose(right.encode([SHORT, LONG], batch_size=2)[0], alone[0], atol=1e-5)


def test_tool_and_saved_folder_pad_right(left_padded_dir, tmp_path):
    from simcse import SimCSE

    tool = SimCSE(str(left_padded_dir), pooler="cls_before_pooler")
    a = np.asarray(tool.encode([SHORT]), dtype=np.float32)[0]  # a tensor or an array: both convert
    b = np.asarray(tool.encode([SHORT, LONG]), dtype=np.float32)[0]
    np.testing.assert_allclose(a / np.linalg.norm(a), b / np.linalg.norm(b), atol=1e-5)
    model = SimCSEModel.from_pretrained(str(left_padded_dir), pooler_type="avg")
    model.save_pretrained(tmp_path / "saved")
    assert json.loads((tmp_path / "saved" / "tokenizer_config.json").read_text())["padding_side"] == "right"


def test_training_collator_pads_right_whatever_the_tokenizer():
    collate = ContrastiveCollator(pad_token_id=0, max_seq_length=8)
    batch = collate([{"input_ids": [[2, 5, 3]], "attention_mask": [[1, 1, 1]]},
                     {"input_ids": [[2, 5, 6, 7, 3]], "attention_mask": [[1] * 5]}])
    assert batch["input_ids"][0, 0].tolist() == [2, 5, 3, 0, 0] and batch["attention_mask"][0, 0].tolist() == [1, 1, 1, 0, 0]
