"""simcse.training.precision: ``--bf16 auto`` is bf16 autocast where the CPU multiplies bf16 natively (AMX or
AVX512-BF16), fp32 elsewhere; an explicit ``--bf16`` wins. Detection is mocked: the tests run on any CPU."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

import simcse.training.precision as precision
from simcse.training import train as train_mod

REPO = Path(__file__).resolve().parents[2]
AMX = "processor\t: 0\nflags\t\t: fpu sse avx2 avx512f avx512_bf16 amx_bf16 amx_tile\n"
AVX2 = "processor\t: 0\nflags\t\t: fpu sse avx2 fma\n"


def test_cpu_flags_are_read_from_the_flags_line():
    assert precision.cpu_bf16_flags(AMX) == ["amx_bf16", "avx512_bf16"]
    assert precision.cpu_bf16_flags(AVX2) == []
    assert precision.cpu_bf16_flags("processor : 0\nmodel name : Apple M2\n") is None  # no flags line


def test_the_cpu_decides_without_cuda(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert precision.bf16_auto_choice(use_cpu=False, cpuinfo=AMX) == (True, "CPU has amx_bf16 and avx512_bf16")
    use, why = precision.bf16_auto_choice(use_cpu=False, cpuinfo=AVX2)
    assert not use and why == "CPU has neither amx_bf16 nor avx512_bf16"


def test_without_cpu_flags_torch_capability_decides(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(precision, "cpu_bf16_flags", lambda cpuinfo=None: None)
    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: "AVX512_BF16")
    assert precision.bf16_auto_choice(use_cpu=True)[0]
    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: "AVX2")
    assert not precision.bf16_auto_choice(use_cpu=True)[0]


def test_cuda_decides_unless_use_cpu(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda: False)
    assert precision.bf16_auto_choice(use_cpu=False, cpuinfo=AMX) == (False, "CUDA device without bf16 support")
    assert precision.bf16_auto_choice(use_cpu=True, cpuinfo=AMX)[0]


def _resolve(bf16=None, fp16=None, precision=None, use_cpu=False):
    said = []
    return precision_mod_resolve(bf16, fp16, precision, use_cpu, said), said


def precision_mod_resolve(bf16, fp16, prec, use_cpu, said):
    return precision.resolve_precision(bf16, fp16, prec, use_cpu, say=said.append)


@pytest.mark.parametrize("has_units", [True, False])
def test_auto_becomes_true_or_false_and_says_so_once(monkeypatch, has_units):
    monkeypatch.setattr(precision, "bf16_auto_choice", lambda use_cpu: (has_units, "mocked CPU"))
    (bf16, fp16, _), said = _resolve(bf16="auto")
    assert bf16 is has_units and fp16 is False
    assert said == [f"[simcse] --bf16 auto: mocked CPU -> {'bf16 autocast' if has_units else 'fp32'}"]


@pytest.mark.parametrize("explicit", [["--bf16", "false"], ["--bf16", "true"], ["--bf16"]])
def test_an_explicit_bf16_after_auto_wins_without_detection(monkeypatch, tmp_path, capsys, explicit):
    def detect(use_cpu):
        raise AssertionError("detection must not run when an explicit --bf16 follows")

    monkeypatch.setattr(precision, "bf16_auto_choice", detect)
    _, _, args = _parse_cpu_config(tmp_path, *explicit)  # the config says "bf16": "auto"
    assert args.bf16 is (explicit != ["--bf16", "false"])  # the config's auto is overridden, the flag decides
    assert "--bf16 auto" not in capsys.readouterr().out


def test_argv_without_auto_is_unchanged(monkeypatch):
    monkeypatch.setattr(precision, "bf16_auto_choice", lambda use_cpu: (_ for _ in ()).throw(AssertionError))
    (bf16, fp16, _), said = _resolve(bf16="true")
    assert bf16 is True and fp16 is False and not said


def _parse_cpu_config(tmp_path, *extra):
    train = tmp_path / "train.txt"
    train.write_text("a\nb\n")
    return train_mod.parse_args([str(REPO / "configs" / "unsup_cpu_minilm.json"), "--train_file", str(train),
                                 "--output_dir", str(tmp_path / "o"), *extra])


@pytest.mark.parametrize("cpuinfo,bf16", [(AMX, True), (AVX2, False)])
def test_cpu_default_trains_in_bf16_exactly_where_the_cpu_has_the_units(tmp_path, monkeypatch, capsys, cpuinfo, bf16):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    real = precision.cpu_bf16_flags
    monkeypatch.setattr(precision, "cpu_bf16_flags", lambda text=None: real(cpuinfo))  # this text, not this CPU's
    _, _, args = _parse_cpu_config(tmp_path, "--use_cpu", "true")  # as scripts/launch_train.sh passes it
    assert args.bf16 is bf16 and args.use_cpu
    assert f"-> {'bf16 autocast' if bf16 else 'fp32'}" in capsys.readouterr().out
    _, _, args = _parse_cpu_config(tmp_path, "--bf16", "false")  # explicit wins
    assert not args.bf16

