"""``--bf16 auto``: bf16 autocast where the hardware multiplies bf16 natively, fp32 elsewhere.

On a CPU, bf16 autocast pays where the cores have bf16 matrix instructions -- Intel AMX (``amx_bf16``) or
AVX512-BF16 (``avx512_bf16``), read from the ``flags`` line of ``/proc/cpuinfo`` -- and is slower than fp32
where they would be emulated. On a CUDA device (unless ``--use_cpu true``) it is the device's own bf16 support.
:func:`resolve_precision` is the one rule for ``--bf16`` (true, false or ``auto``), ``--fp16`` and ``--precision``
(called by :class:`simcse.training.training_args.SimCSETrainingArguments`); ``auto`` prints one line saying which
and why; an explicit ``--bf16 true/false`` wins.
"""
from __future__ import annotations

from pathlib import Path

import torch

BF16_CPU_FLAGS = ("amx_bf16", "avx512_bf16")  # Linux names of the CPU features that multiply bf16 natively
CPUINFO = Path("/proc/cpuinfo")


def cpu_bf16_flags(cpuinfo: str | None = None) -> list[str] | None:
    """The :data:`BF16_CPU_FLAGS` present in ``cpuinfo`` (the text of ``/proc/cpuinfo``; read when None),
    in that order; None when there is no such file or it has no ``flags`` line (not Linux on x86)."""
    if cpuinfo is None:
        try:
            cpuinfo = CPUINFO.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return None
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "flags":
            present = set(value.split())
            return [f for f in BF16_CPU_FLAGS if f in present]
    return None


def bf16_auto_choice(use_cpu: bool, cpuinfo: str | None = None) -> tuple[bool, str]:
    """``(use bf16, reason)`` for ``--bf16 auto``.

    CUDA visible and not ``use_cpu``: the device's bf16 support (``torch.cuda.is_bf16_supported``). Otherwise
    the CPU: bf16 when :func:`cpu_bf16_flags` finds AMX or AVX512-BF16; where ``/proc/cpuinfo`` has no flags,
    when ``torch.backends.cpu.get_cpu_capability()`` names AMX or BF16; fp32 otherwise.
    """
    if torch.cuda.is_available() and not use_cpu:
        ok = torch.cuda.is_bf16_supported()
        return ok, f"CUDA device {'with' if ok else 'without'} bf16 support"
    flags = cpu_bf16_flags(cpuinfo)
    if flags is None:
        capability = str(torch.backends.cpu.get_cpu_capability())
        ok = "AMX" in capability.upper() or "BF16" in capability.upper()
        return ok, f"CPU capability {capability} (torch; no /proc/cpuinfo flags)"
    if flags:
        return True, f"CPU has {' and '.join(flags)}"
    return False, f"CPU has neither {' nor '.join(BF16_CPU_FLAGS)}"


PRECISIONS = ("auto", "bf16", "fp16", "fp32")
_TRUE, _FALSE = ("true", "1", "yes", "t", "y"), ("false", "0", "no", "f", "n")


def bf16_value(value) -> bool | str | None:
    """``--bf16``'s value as given: None (not given), True, False or ``"auto"``.

    Raises:
        ValueError: anything but a bool, ``auto`` or a true/false word.
    """
    if value is None or isinstance(value, bool):
        return value
    word = str(value).strip().lower()
    if word == "auto":
        return "auto"
    if word in _TRUE or word in _FALSE:
        return word in _TRUE
    raise ValueError(f"--bf16 must be true, false or auto, got {value!r}")


def resolve_precision(bf16, fp16, precision: str | None, use_cpu: bool, say=print) -> tuple[bool, bool, bool]:
    """``(bf16, fp16, use_cpu)`` of a run: the one rule for ``--bf16``, ``--fp16`` and ``--precision``.

    Only what the user left open (None) is decided; the device is the one the run will use (a CUDA GPU unless
    ``use_cpu`` or none is visible). In order:

    1. ``bf16`` or ``fp16`` set to true: that one (both: refused).
    2. ``precision`` ``bf16``/``fp16``/``fp32`` on a CUDA device: that precision (GPU configs' key; a type set
       to false explicitly stays off). On the CPU it does not apply.
    3. ``bf16 auto`` or ``precision auto``: :func:`bf16_auto_choice` for that device, printed in one line, e.g.
       ``[simcse] --bf16 auto: CPU has amx_bf16 and avx512_bf16 -> bf16 autocast``.
    4. Otherwise fp32.

    bf16 without a CUDA device also sets ``use_cpu`` (HF refuses bf16 there otherwise: bf16 autocast on the CPU).

    Raises:
        ValueError: an unknown ``precision`` or ``bf16`` value; both bf16 and fp16 true; fp16 without a CUDA
            device (the reference's ``--fp16`` is CUDA mixed precision); ``precision bf16`` on a GPU without bf16.
    """
    bf16 = bf16_value(bf16)
    if precision is not None and precision not in PRECISIONS:
        raise ValueError(f"--precision must be one of {', '.join(repr(p) for p in PRECISIONS)}, got {precision!r}")
    cuda = torch.cuda.is_available() and not use_cpu
    if bf16 is True and fp16 is True:
        raise ValueError("--bf16 and --fp16 both ask for a precision: give one")
    if bf16 is True or fp16 is True:
        use_bf16, use_fp16 = bf16 is True, fp16 is True
    elif precision in ("bf16", "fp16", "fp32") and cuda:
        if precision == "bf16" and bf16 is not False and not torch.cuda.is_bf16_supported():
            raise ValueError("--precision bf16: this GPU has no bf16 support; pass --precision fp16 (the reference's choice)")
        use_bf16, use_fp16 = precision == "bf16" and bf16 is not False, precision == "fp16" and fp16 is not False
    elif bf16 == "auto" or (precision == "auto" and bf16 is None):
        use_bf16, why = bf16_auto_choice(not cuda)
        use_fp16 = False
        say(f"[simcse] --bf16 auto: {why} -> {'bf16 autocast' if use_bf16 else 'fp32'}")
    else:
        use_bf16 = use_fp16 = False
    if use_fp16 and not cuda:
        raise ValueError("--fp16 needs a CUDA GPU and none is in use here: drop --fp16 to train in float32, or "
                         "use --bf16 (bfloat16 autocast, which CPUs support)")
    return use_bf16, use_fp16, bool(use_cpu or (use_bf16 and not torch.cuda.is_available()))
