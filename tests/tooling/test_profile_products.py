"""scripts.benchmarks.profile_train_step --products: the linear layers' matrix products found in a real profile
(forward, input gradient, weight gradient; nothing else), and the table that sets them beside the same products
alone."""
from __future__ import annotations

import torch
from torch.profiler import ProfilerActivity, profile

from scripts.benchmarks.profile_train_step import print_products, product_dims, product_rates


def test_products_of_two_linear_layers_are_found_by_role_and_shape():
    torch.manual_seed(0)
    first, second = torch.nn.Linear(8, 16), torch.nn.Linear(16, 8, bias=False)
    x = torch.randn(5, 8, requires_grad=True)
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        y = second(torch.relu(first(x)))
        sim = torch.matmul(y, y.t())  # a similarity product: not a linear layer's
        sim.sum().backward()
    rows = product_rates(prof.events())
    assert set(rows) == {("forward", 8, 16), ("forward", 16, 8), ("input gradient", 8, 16), ("input gradient", 16, 8),
                         ("weight gradient", 8, 16), ("weight gradient", 16, 8)}
    for (role, fan_in, fan_out), row in rows.items():
        assert row["calls"] == 1 and row["tokens"] == 5 and row["us"] > 0
        assert row["flop"] == 2 * 5 * 8 * 16  # every product of either layer: 2 * tokens * 8 * 16


def test_product_dims_follow_each_role():
    assert product_dims("forward", 384, 1536, 3000) == (3000, 384, 1536)
    assert product_dims("input gradient", 384, 1536, 3000) == (3000, 1536, 384)
    assert product_dims("weight gradient", 384, 1536, 3000) == (384, 3000, 1536)


def test_the_table_sets_each_product_beside_its_rate_alone(capsys):
    # 2 steps; forward: 4 GFLOP in 20 ms -> 200 GFLOP/s; alone at 400 GFLOP/s it takes 10 ms: 5 ms/step lost
    rows = {("forward", 384, 1536): {"calls": 12, "us": 20_000.0, "flop": 4e9, "tokens": 12 * 3000},
            ("weight gradient", 384, 1536): {"calls": 12, "us": 10_000.0, "flop": 4e9, "tokens": 12 * 3000}}
    alone = {(3000, 384, 1536): 400e9, (384, 3000, 1536): 400e9}
    print_products(rows, 2, alone)
    out = capsys.readouterr().out
    assert "| forward | 384 -> 1536 | 6 | 10.0 | 200 | 400 | 5.0 |" in out
    assert "| weight gradient | 384 -> 1536 | 6 | 5.0 | 400 | 400 | 0.0 |" in out
    assert "products: 15 ms/step at 267 GFLOP/s in the step; at each product's rate alone they would take 10 ms " \
           "(5 ms/step less)" in out
