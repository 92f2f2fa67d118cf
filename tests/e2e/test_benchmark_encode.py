"""scripts/benchmarks/encode.py: arguments and the per-quality-level speed-up (no timed runs here)."""
import numpy as np
import pytest

from scripts.benchmarks import encode


@pytest.fixture(scope="module")
def bench():
    return encode


def test_speedup_is_fastest_over_fastest_per_level(bench, capsys):
    args = bench.parse_args(["-n", "100", "--rounds", "2"])
    e = np.random.default_rng(0).standard_normal((100, 8)).astype(np.float32)
    noisy = e + 0.01 * np.random.default_rng(1).standard_normal(e.shape).astype(np.float32)
    times = {("ours", "torch"): [4.0, 4.0], ("ours", "onnx"): [2.0, 2.0], ("ours", "onnx-int8"): [1.0, 1.0],
             ("st", "torch"): [6.0, 6.0], ("st", "onnx"): [3.0, 3.0], ("st", "onnx-int8"): [2.5, 1.5]}
    embs = {k: (noisy if k[1] == "onnx-int8" else e) for k in times}
    speedups, ok = bench.report(args, times, embs, cpus=times)
    assert ok
    assert "speed-up 1.50 (CPU-time ratio 1.50)" in capsys.readouterr().out
    assert speedups == {"fp32": pytest.approx(6.0 / 4.0), "reduced": pytest.approx(4.0 / 2.0)}
    # a "fp32" path whose embeddings differ fails the check
    embs[("ours", "onnx")] = noisy
    assert not bench.report(args, times, embs)[1]
    assert "check failed: ('ours', 'onnx')" in capsys.readouterr().out


@pytest.mark.parametrize("argv, message", [
    (["--ours", "torch,fp8"], "--ours: unknown path 'fp8'"),
    (["--theirs", "onnx"], "--theirs: unknown path 'onnx'"),
    (["--threads", "0"], "--threads must be a positive integer"),
])
def test_bad_arguments(bench, capsys, argv, message):
    with pytest.raises(SystemExit):
        bench.parse_args(argv)
    assert message in capsys.readouterr().err
