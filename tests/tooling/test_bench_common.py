"""scripts.benchmarks.common: the GEMM ceiling behind the benchmarks' MFU (warm-up, best of passes, shape-matched
mix), the agreement rules that repeat rounds and ceilings, and the worker helpers."""
from __future__ import annotations

import pytest

from scripts.benchmarks.common import (best_rates, ceiling_disagreements, gemm_ceiling, gemm_dims, max_ceiling, mix_rate,
                                       repeat_until_stable, settle_ceilings, spread, stable_window)


def test_gemm_ceiling_is_a_positive_rate_per_precision_and_kind():
    rates = gemm_ceiling(threads=1, shape={"hidden": 8, "intermediate": 16}, tokens=12, reps=1, passes=1, warmup=1)
    assert set(rates) == {"fp32", "bf16"}
    assert all(set(r) == {"model", "square"} and min(r.values()) > 0 for r in rates.values())


def test_gemm_dims_are_the_linear_layers_products_at_the_real_token_count():
    dims = gemm_dims({"hidden": 384, "intermediate": 1536}, tokens=3072)
    assert dims[:3] == [(3072, 384, 384), (3072, 384, 1536), (3072, 1536, 384)]  # forward
    assert sorted(dims[3:]) == sorted([(384, 3072, 384), (1536, 3072, 384), (384, 3072, 1536)])  # weight gradients
    with pytest.raises(ValueError, match="tokens"):
        gemm_dims({"hidden": 4, "intermediate": 8}, tokens=0)


class ScriptedTimer:
    """Stands in for a matmul timer: returns the next scripted seconds, records the shapes asked."""

    def __init__(self, seconds):
        self.seconds, self.calls = list(seconds), []

    def __call__(self, m, k, n):
        self.calls.append((m, k, n))
        return self.seconds.pop(0)


def test_best_rates_skip_the_warm_up_and_keep_the_fastest_repetition():
    d = (10, 10, 10)  # 2000 FLOPs a product
    # 2 warm-up products (instantaneous: they would win if they counted), then 2 passes x 3 repetitions
    timer = ScriptedTimer([1e-9, 1e-9, 4.0, 2.0, 4.0, 1.0, 8.0, 4.0])
    assert best_rates([d], timer, reps=3, passes=2, warmup=2) == {d: 2000.0}  # 2000 FLOPs / 1 s
    assert timer.calls == [d] * 8 and not timer.seconds


def test_best_rates_warm_every_shape_before_timing_any():
    a, b = (1, 1, 1), (2, 2, 2)
    timer = ScriptedTimer([9.0, 9.0, 1.0, 1.0])
    best_rates([a, b], timer, reps=1, passes=1, warmup=1)
    assert timer.calls == [a, b, a, b]


def test_best_rates_reject_a_timing_that_is_not_positive():
    with pytest.raises(ValueError, match="timed at 0.0"):
        best_rates([(2, 2, 2)], ScriptedTimer([0.0]), reps=1, passes=1, warmup=0)


def test_mix_rate_is_total_flops_over_total_time():
    # 2000 FLOPs at 1000/s (2 s) and 16000 FLOPs at 16000/s (1 s): 18000 FLOPs in 3 s
    assert mix_rate({(10, 10, 10): 1000.0, (20, 20, 20): 16000.0}) == pytest.approx(6000.0)


def test_gemm_ceiling_reports_the_shape_matched_and_square_rates_from_the_timer():
    shape = {"hidden": 4, "intermediate": 8}

    def timer(precision):
        speed = {"fp32": 1e9, "bf16": 4e9}[precision]  # FLOP/s, square products twice as fast as the model's
        return lambda m, k, n: 2.0 * m * k * n / (speed * (2 if m == k == n else 1))

    out = gemm_ceiling(threads=1, shape=shape, tokens=12, reps=2, passes=1, warmup=1, timer=timer)
    assert out["fp32"] == pytest.approx({"model": 1e9, "square": 2e9})
    assert out["bf16"] == pytest.approx({"model": 4e9, "square": 8e9})


def test_spread_and_stable_window():
    assert spread([1.0, 1.1]) == pytest.approx(0.1) and spread([2.0]) == 0.0 and spread([0.0, 1.0]) == float("inf")
    assert stable_window([1.39, 1.06], 2) is None                  # the unsteady pair of a shared machine
    assert stable_window([1.39, 1.06, 1.10], 2) == (1, 3)          # the latest agreeing pair
    assert stable_window([1.0, 1.05, 1.5, 1.6], 2) == (2, 4)
    assert stable_window([1.0, 1.5, 1.0, 1.5], 2) is None


def test_repeat_until_stable_adds_rounds_until_the_ratios_agree():
    ratios, notes = iter([1.39, 1.06, 1.30, 1.10, 1.12]), []
    values, window, stable = repeat_until_stable(lambda i: next(ratios), rounds=2, max_extra=5, say=notes.append)
    assert values == [1.39, 1.06, 1.30, 1.10, 1.12] and window == (3, 5) and stable
    assert len(notes) == 3 and "disagree by 31%" in notes[0] and "repeating a round (1 of 5)" in notes[0]


def test_repeat_until_stable_is_bounded_and_says_so():
    ratios, notes = iter([1.0, 1.5, 1.0, 1.5, 1.0, 1.5]), []
    values, window, stable = repeat_until_stable(lambda i: next(ratios), rounds=2, max_extra=2, say=notes.append)
    assert values == [1.0, 1.5, 1.0, 1.5] and window == (0, 4) and not stable
    assert "still disagree" in notes[-1] and len(notes) == 3


def test_repeat_until_stable_runs_no_extra_round_when_the_rounds_agree():
    notes = []
    values, window, stable = repeat_until_stable(lambda i: 1.5 + 0.01 * i, rounds=2, max_extra=3, say=notes.append)
    assert values == [1.5, 1.51] and window == (0, 2) and stable and not notes


def ceiling(fp32, bf16):
    return {"fp32": {"model": fp32, "square": fp32}, "bf16": {"model": bf16, "square": bf16}}


def test_ceiling_disagreements_name_the_precision_and_kind():
    assert ceiling_disagreements(ceiling(220e9, 2000e9), ceiling(230e9, 2100e9)) == []
    bad = ceiling_disagreements(ceiling(220e9, 1010e9), ceiling(225e9, 2532e9))  # the cold/warm pair of a run
    assert bad == ["bf16 model 1010 vs 2532 GFLOP/s (+151%)", "bf16 square 1010 vs 2532 GFLOP/s (+151%)"]
    assert max_ceiling([ceiling(1, 5), ceiling(2, 3)]) == ceiling(2, 5)


def test_settle_ceilings_measures_again_until_two_agree_and_keeps_the_highest():
    again, notes = iter([ceiling(225e9, 2532e9), ceiling(224e9, 2400e9)]), []
    best, results, agreed = settle_ceilings(ceiling(220e9, 1010e9), lambda: next(again), max_extra=3, say=notes.append)
    assert agreed and len(results) == 3 and best == ceiling(225e9, 2532e9)
    assert len(notes) == 1 and "bf16 model 1010 vs 2532" in notes[0] and "(1 of 3)" in notes[0]


def test_settle_ceilings_is_bounded():
    again, notes = iter([ceiling(1, 2), ceiling(1, 1), ceiling(1, 2)]), []
    best, results, agreed = settle_ceilings(ceiling(1, 1), lambda: next(again), max_extra=1, say=notes.append)
    assert not agreed and len(results) == 3 and "still disagree" in notes[-1]


TIMED = ["against_checkout", "dev_eval", "encode", "encode_memory", "evaluation", "family", "gradcache", "index",
         "methods", "profile_train_step", "scaling", "scored_pairs", "serve", "train", "train_options", "train_sources"]


@pytest.mark.parametrize("name", TIMED)
def test_every_timed_benchmark_refuses_a_busy_machine_before_it_measures(name, monkeypatch, capsys, tmp_path):
    """A load average of 3.0 on 2 CPUs: each timed benchmark prints the load line and stops with the one-line refusal
    (no worker started, no server, no training); --allow_busy is an option of each."""
    import importlib
    import os
    import subprocess

    monkeypatch.setattr(os, "getloadavg", lambda: (3.0, 3.0, 3.0))
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(subprocess, "run", lambda *a, **k: pytest.fail(f"{name} started a process on a busy machine"))
    monkeypatch.setattr(subprocess, "Popen", lambda *a, **k: pytest.fail(f"{name} started a process on a busy machine"))
    bench = importlib.import_module(f"scripts.benchmarks.{name}")
    (tmp_path / "train.txt").write_text("a sentence.\n")  # family checks its spec (data included) before the load
    argv = {"against_checkout": ["--checkout", str(tmp_path)], "serve": ["--url", "http://127.0.0.1:9"],
            "family": ["--train_file", str(tmp_path / "train.txt")]}.get(name, [])
    with pytest.raises(SystemExit) as e:
        bench.main([*argv, "--model", "x"] if name in ("methods", "scored_pairs", "encode") else argv)
    assert "the machine is busy (1-minute load average 3.00 on 2 CPUs)" in str(e.value), e.value
    assert "load 3.00 (1-minute average) on 2 CPUs" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        bench.main(["--help"])
    assert "--allow_busy" in capsys.readouterr().out


def test_parse_isa_names_the_kernels_of_each_precision():
    from scripts.benchmarks.common import parse_isa

    amx = "\n".join([
        "onednn_verbose,v1,info,cpu,isa:Intel AVX-512 with Intel AMX",
        "onednn_verbose,v1,primitive,exec,cpu,matmul,brg_matmul:avx512_core_amx,undef,src:bf16::blocked:ab::f0 "
        "wei:bf16::blocked:ab::f0 dst:bf16::blocked:ab::f0,,,256x256:256x256,0.1",
        "MKL_VERBOSE SGEMM(N,N,256,256,256,0x1,0x2,256,0x3,256,0x4,0x5,256) 7.53ms CNR:OFF Dyn:1 FastMM:1 TID:0  NThr:1",
    ])
    assert parse_isa(amx) == {"bf16": "oneDNN brg_matmul:avx512_core_amx", "fp32": "MKL SGEMM",
                              "cpu": "Intel AVX-512 with Intel AMX"}
    older = "onednn_verbose,exec,cpu,matmul,gemm:jit,undef,src_f32::blocked:ab:f0 src:f32::blocked:ab,,,2x2:2x2,0.1"
    assert parse_isa(older)["fp32"] == "oneDNN gemm:jit" and parse_isa(older)["bf16"] is None
    assert parse_isa("CUDA_DEVICE NVIDIA H100 80GB HBM3")["bf16"] == "cuBLAS (NVIDIA H100 80GB HBM3)"
    assert parse_isa("") == {"bf16": None, "fp32": None, "cpu": None}


def test_gemm_isa_on_this_cpu_names_a_bf16_kernel():
    import platform

    from scripts.benchmarks.common import format_ceiling, gemm_isa

    if platform.machine() not in ("x86_64", "AMD64"):
        pytest.skip("the x86 oneDNN kernels' names are checked on x86 only")
    isa = gemm_isa("cpu")
    assert isa["bf16"] and isa["bf16"].startswith("oneDNN ") and isa["fp32"]
    c = {"fp32": {"model": 1e11, "square": 2e11}, "bf16": {"model": 3e11, "square": 4e11}}
    assert format_ceiling(c, isa).endswith(f"[fp32 on {isa['fp32']}, bf16 on {isa['bf16']}]")


def test_mfu_goal_follows_the_kernel_the_ceiling_ran_on():
    """The issue's goals: bf16 45% on AMX tiles, 60% on AVX512-BF16 (and when the kernel is unknown); fp32 60%."""
    from scripts.benchmarks.train import mfu_goal

    amx = {"bf16": "oneDNN brg_matmul:avx512_core_amx", "fp32": "MKL SGEMM"}
    avx = {"bf16": "oneDNN brg_matmul:avx512_core_bf16", "fp32": "MKL SGEMM"}
    assert mfu_goal("bf16", amx) == (0.45, "AMX: oneDNN brg_matmul:avx512_core_amx")
    assert mfu_goal("bf16", avx) == (0.60, "oneDNN brg_matmul:avx512_core_bf16")
    assert mfu_goal("fp32", amx) == (0.60, "MKL SGEMM")
    assert mfu_goal("bf16", {}) == (0.60, "kernel not named")
