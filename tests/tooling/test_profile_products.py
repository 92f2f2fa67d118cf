"""scripts.benchmarks.profile_train_step --products: the linear layers' matrix products found in a real profile
(forward, input gradient, weight gradient; nothing else), and the table that sets them beside the same products
alone."""
from __future__ import annotations

from collections import Counter

import pytest
import torch
from torch.profiler import ProfilerActivity, profile

from scripts.benchmarks.profile_train_step import main, print_products, product_rates


def _profiled(layers, tokens: int, extra=None):
    torch.manual_seed(0)
    x = torch.randn(tokens, layers[0].in_features, requires_grad=True)
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        y = x
        for layer in layers:
            y = torch.relu(layer(y))
        loss = y.sum() if extra is None else extra(y)
        loss.backward()
    return product_rates(prof.events())


def _by_role(products, tokens: int) -> dict:
    """{(role, layer): dims} of products that each appear once; a weight gradient's dims, which torch computes in
    either layout ((in, T) @ (T, out) or (out, T) @ (T, in)), as "over tokens" when they are one of the two."""
    assert max(Counter((p["role"], p["layer"]) for p in products).values()) == 1
    out = {}
    for p in products:
        fan_in, fan_out = p["layer"]
        weight = p["role"] == "weight gradient" and p["dims"] in ((fan_in, tokens, fan_out), (fan_out, tokens, fan_in))
        out[(p["role"], p["layer"])] = "over tokens" if weight else p["dims"]
    return out


def test_products_of_two_linear_layers_are_found_by_role_and_shape():
    first, second = torch.nn.Linear(8, 16), torch.nn.Linear(16, 8, bias=False)
    products = _profiled([first, second], 5, extra=lambda y: torch.matmul(y, y.t()).sum())  # a similarity product too
    assert _by_role(products, 5) == {("forward", (8, 16)): (5, 8, 16), ("forward", (16, 8)): (5, 16, 8),
                                     ("input gradient", (8, 16)): (5, 16, 8), ("input gradient", (16, 8)): (5, 8, 16),
                                     ("weight gradient", (8, 16)): "over tokens", ("weight gradient", (16, 8)): "over tokens"}
    assert all(p["us"] > 0 for p in products)


def test_a_token_count_equal_to_a_layer_width_keeps_every_product_in_its_role():
    # 8 tokens through 8 -> 8 and 8 -> 16: the shapes alone would fit either gradient; the node's order decides
    products = _profiled([torch.nn.Linear(8, 8), torch.nn.Linear(8, 16)], 8)
    assert _by_role(products, 8) == {("forward", (8, 8)): (8, 8, 8), ("forward", (8, 16)): (8, 8, 16),
                                     ("input gradient", (8, 8)): (8, 8, 8), ("input gradient", (8, 16)): (8, 16, 8),
                                     ("weight gradient", (8, 8)): "over tokens", ("weight gradient", (8, 16)): "over tokens"}


def test_the_table_sets_each_product_beside_its_own_rate_alone(capsys):
    # 2 steps. forward 384 -> 1536: a 3000-token product (2 * 3000 * 384 * 1536 = 3.539 GFLOP) in 20 ms and a
    # 128-token one (0.151 GFLOP) in 2 ms; alone at 400 and 100 GFLOP/s they take 8.847 + 1.510 ms
    big, small = 2.0 * 3000 * 384 * 1536, 2.0 * 128 * 384 * 1536
    products = [{"role": "forward", "layer": (384, 1536), "dims": (3000, 384, 1536), "us": 20_000.0},
                {"role": "forward", "layer": (384, 1536), "dims": (128, 384, 1536), "us": 2_000.0},
                {"role": "weight gradient", "layer": (384, 1536), "dims": (384, 3000, 1536), "us": 4_000.0}]
    alone = {(3000, 384, 1536): 400e9, (128, 384, 1536): 100e9, (384, 3000, 1536): 800e9}
    print_products(products, 2, alone)
    out = capsys.readouterr().out
    alone_ms = (big / 400e9 + small / 100e9) * 1000 / 2
    assert (f"| forward | 384 -> 1536 | 1 | 11.0 | {(big + small) / 22e-3 / 1e9:.0f} | "
            f"{(big + small) / (alone_ms * 2e-3) / 1e9:.0f} | {11.0 - alone_ms:.1f} |") in out
    assert "| weight gradient | 384 -> 1536 | 0.5 | 2.0 | 885 | 800 | -0.2 |" in out
    assert "products: 13 ms/step at" in out and f"would take {alone_ms + big / 800e9 * 500:.0f} ms (" in out


def test_the_summary_says_more_when_the_step_is_faster_than_alone(capsys):
    products = [{"role": "forward", "layer": (4, 4), "dims": (10, 4, 4), "us": 1.0}]
    print_products(products, 1, {(10, 4, 4): 1e6})  # alone: 320 FLOP at 1 MFLOP/s = 0.32 ms, in the step 0.001 ms
    assert "(0 ms/step more)" in capsys.readouterr().out


@pytest.mark.parametrize("value", ["fp16", ",", "bf16,fp16"])
def test_precisions_are_checked_before_anything_runs(value, capsys):
    with pytest.raises(SystemExit) as e:
        main(["--precisions", value, "--allow_busy"])
    assert e.value.code == 2 and "--precisions: expected a comma-separated list of fp32 and bf16" in capsys.readouterr().err
