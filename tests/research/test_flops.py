"""simcse.research.flops: the FLOP count behind MFU and the encoder shape it reads from a config."""
from __future__ import annotations

from simcse.research.flops import encoder_shape, model_flops


def test_flop_count_of_linear_layers_and_attention():
    shape = {"layers": 6, "hidden": 384, "linear_params": 6 * (4 * 384 * 384 + 2 * 384 * 1536)}
    # 6 FLOPs per linear weight per token, 12 * layers * hidden per squared length
    assert model_flops(shape, tokens=10, sum_sq_lengths=0) == 6 * shape["linear_params"] * 10
    assert model_flops(shape, tokens=0, sum_sq_lengths=4) == 12 * 6 * 384 * 4


def test_encoder_shape_counts_the_linear_weights_of_every_layer(tiny_bert_dir):
    shape = encoder_shape(str(tiny_bert_dir))  # conftest: hidden 32, intermediate 64, 2 layers
    assert (shape["layers"], shape["hidden"], shape["intermediate"]) == (2, 32, 64)
    assert shape["linear_params"] == 2 * (4 * 32 * 32 + 2 * 32 * 64)
