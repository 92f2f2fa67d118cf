"""``--bf16 auto``: bf16 autocast where the hardware multiplies bf16 natively, fp32 elsewhere.

On a CPU, bf16 autocast pays where the cores have bf16 matrix instructions -- Intel AMX (``amx_bf16``) or
AVX512-BF16 (``avx512_bf16``), read from the ``flags`` line of ``/proc/cpuinfo`` -- and is slower than fp32
where they would be emulated. On a CUDA device (unless ``--use_cpu true``) it is the device's own bf16 support.
:func:`resolve_bf16_auto` turns ``auto`` into ``true`` or ``false`` before the arguments are parsed and prints
one line saying which and why; an explicit ``--bf16 true/false`` later on the command line wins.
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


def _values(argv: list[str], flag: str) -> list[tuple[int, str]]:
    """(index of the value, value) of every ``flag value`` / ``flag=value`` in ``argv``."""
    out = []
    for i, a in enumerate(argv):
        if a == flag and i + 1 < len(argv) and not argv[i + 1].startswith("--"):
            out.append((i + 1, argv[i + 1]))
        elif a.startswith(flag + "="):
            out.append((i, a[len(flag) + 1:]))
    return out


def resolve_bf16_auto(argv: list[str], say=print) -> list[str]:
    """``argv`` with every ``--bf16 auto`` replaced by ``true`` or ``false`` (:func:`bf16_auto_choice`).

    Only the last ``--bf16`` counts (a config's ``auto`` followed by an explicit ``--bf16 false`` trains in fp32,
    and nothing is detected or printed); an ``auto`` that is last prints one line, e.g.
    ``[simcse] --bf16 auto: CPU has amx_bf16 and avx512_bf16 -> bf16 autocast``. ``--use_cpu`` (last value
    true/1/yes) makes the CPU decide even where CUDA is visible.
    """
    values = _values(argv, "--bf16")
    if not any(v.lower() == "auto" for _, v in values):
        return list(argv)
    last_is_auto = values[-1][1].lower() == "auto" and not any(
        a == "--bf16" and (i + 1 >= len(argv) or argv[i + 1].startswith("--")) for i, a in enumerate(argv)
        if i > values[-1][0])
    use = False
    if last_is_auto:
        use_cpu = [v for _, v in _values(argv, "--use_cpu")]
        use, why = bf16_auto_choice(bool(use_cpu) and use_cpu[-1].lower() in ("true", "1", "yes"))
        say(f"[simcse] --bf16 auto: {why} -> {'bf16 autocast' if use else 'fp32'}")
    out = list(argv)
    for i, v in values:
        if v.lower() == "auto":
            out[i] = ("--bf16=" if out[i].startswith("--bf16=") else "") + ("true" if use else "false")
    return out
