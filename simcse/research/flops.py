"""FLOP counts and the matrix-multiply ceiling behind model FLOPs utilisation (MFU) in the benchmarks.

MFU = useful FLOPs per step / seconds per step / the shape-matched ceiling of :func:`gemm_ceiling` (the encoder's own
linear-layer products at the batch's real token count, warmed up, best of several passes; docs/performance.md).
Useful FLOPs count the real (non-padding) tokens: :func:`model_flops`. The benchmarks measure the ceiling before
and after their timed runs and repeat what disagrees by more than :data:`TOLERANCE` (:func:`settle_ceilings`,
:func:`repeat_until_stable`).
"""
from __future__ import annotations

import time


def model_flops(shape: dict, tokens: int, sum_sq_lengths: int) -> float:
    """Forward + backward FLOPs of a BERT-style encoder on sequences of the given total / squared lengths.

    ``shape``: ``layers``, ``hidden``, ``linear_params`` (weights of the encoder layers' linear maps).
    ``6 * linear_params * tokens`` (2 FLOPs per multiply-add; backward = 2x forward) plus attention
    ``12 * layers * hidden * sum_i len_i^2`` (QK^T and AV, 2 * 2 * len^2 * hidden per layer forward, x3).
    Embedding look-ups, LayerNorm, softmax and the B x B loss are left out (they are not matrix products).
    """
    return 6.0 * shape["linear_params"] * tokens + 12.0 * shape["layers"] * shape["hidden"] * sum_sq_lengths


def encoder_shape(model_path: str) -> dict:
    """Layers, hidden size and linear-weight count of a BERT-style encoder, from its config only."""
    from transformers import AutoConfig

    c = AutoConfig.from_pretrained(model_path)
    h, inter, layers = c.hidden_size, c.intermediate_size, c.num_hidden_layers
    return {"layers": layers, "hidden": h, "intermediate": inter,
            "linear_params": layers * (4 * h * h + 2 * h * inter)}


SQUARE = {"cpu": 2048, "cuda": 8192}  # side of the large square product, per device type
TOLERANCE = 0.10  # ceilings or per-round ratios further apart than this are re-measured (max / min - 1)


def gemm_dims(shape: dict, tokens: int) -> list[tuple[int, int, int]]:
    """(m, k, n) of the matrix products in an encoder layer's linear maps for ``tokens`` (real) tokens.

    Forward (and the input-gradient products, which have the same shapes): tokens x hidden @ hidden x hidden
    (query/key/value/output), tokens x hidden @ hidden x intermediate, tokens x intermediate @ intermediate x
    hidden; weight gradients: hidden x tokens @ tokens x hidden, intermediate x tokens @ tokens x hidden,
    hidden x tokens @ tokens x intermediate. ``shape`` as from :func:`encoder_shape`.

    Raises:
        ValueError: ``tokens`` below 1.
    """
    if tokens < 1:
        raise ValueError(f"tokens must be at least 1 (the real tokens of a batch), got {tokens}")
    h, i, t = shape["hidden"], shape["intermediate"], int(tokens)
    return [(t, h, h), (t, h, i), (t, i, h), (h, t, h), (i, t, h), (h, t, i)]


def best_rates(dims: list[tuple[int, int, int]], time_product, reps: int = 8, passes: int = 2,
               warmup: int = 5) -> dict[tuple[int, int, int], float]:
    """Best FLOP/s of each (m, k, n) product: ``warmup`` untimed products per shape first, then ``passes``
    passes over all shapes of ``reps`` timed products each; the maximum per shape.

    ``time_product(m, k, n)`` runs one m x k @ k x n product and returns its seconds (:func:`gemm_ceiling`
    passes a ``torch.matmul`` timer; tests pass scripted timings). A product counts 2 * m * k * n FLOPs. The
    warm-up is what makes a rate a ceiling: the first products of a shape on a CPU run at a fraction of the
    later ones (kernel selection, caches, clock).

    Raises:
        ValueError: ``reps`` or ``passes`` below 1, or a timing that is not a positive number of seconds.
    """
    if reps < 1 or passes < 1:
        raise ValueError(f"reps and passes must be at least 1, got reps={reps} passes={passes}")
    for m, k, n in dims:
        for _ in range(warmup):
            time_product(m, k, n)
    best = {d: 0.0 for d in dims}
    for _ in range(passes):
        for m, k, n in dims:
            for _ in range(reps):
                seconds = time_product(m, k, n)
                if not seconds > 0:
                    raise ValueError(f"a {m}x{k} @ {k}x{n} product was timed at {seconds!r} s; expected > 0")
                best[(m, k, n)] = max(best[(m, k, n)], 2.0 * m * k * n / seconds)
    return best


def mix_rate(rates: dict[tuple[int, int, int], float]) -> float:
    """FLOP/s of running every product in ``rates`` once at its rate: total FLOPs / total seconds."""
    flops = {d: 2.0 * d[0] * d[1] * d[2] for d in rates}
    return sum(flops.values()) / sum(flops[d] / r for d, r in rates.items())


def _matmul_timer(dtype, device: str):
    import torch

    cuda = device.startswith("cuda")
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    cache: dict = {}

    def time_product(m: int, k: int, n: int) -> float:
        if (m, k, n) not in cache:
            cache[(m, k, n)] = (torch.randn(m, k, dtype=dtype, device=device), torch.randn(k, n, dtype=dtype, device=device))
        a, b = cache[(m, k, n)]
        sync()
        t = time.perf_counter()
        torch.matmul(a, b)
        sync()
        return time.perf_counter() - t

    return time_product


def gemm_ceiling(threads: int, shape: dict | None = None, tokens: int = 3072, reps: int = 8, passes: int = 2,
                 warmup: int = 5, device: str = "cpu", timer=None, square: int | None = None) -> dict:
    """Warmed dense matrix-multiply ceilings (FLOP/s) in fp32 and bf16 with ``threads`` torch threads.

    Returns ``{"fp32": {"model": r, "square": s}, "bf16": {...}}``: ``square`` is the best rate of a large
    square product (side ``square``, default :data:`SQUARE`: 2048 on CPU, 8192 on CUDA); ``model`` (only when ``shape``, see
    :func:`encoder_shape`, is given) is the rate of the encoder's own linear-layer products for ``tokens`` real
    tokens (:func:`gemm_dims`), each at its best rate, combined by :func:`mix_rate`: the shape-matched ceiling
    that MFU is reported against. Every rate is the maximum of :func:`best_rates` (warm-up first, then
    several passes), so MFU against it is not flattered. ``timer(dtype_name)`` may replace the
    ``torch.matmul`` timer (``dtype_name`` "fp32" or "bf16"; returns a ``time_product(m, k, n)``). On a
    CUDA ``device`` each product is bracketed by ``torch.cuda.synchronize``.
    """
    import torch

    torch.set_num_threads(threads)
    side = square or SQUARE["cuda" if device.startswith("cuda") else "cpu"]
    out = {}
    for name, dtype in (("fp32", torch.float32), ("bf16", torch.bfloat16)):
        time_product = timer(name) if timer is not None else _matmul_timer(dtype, device)
        out[name] = {"square": best_rates([(side, side, side)], time_product, reps, passes, warmup)[(side, side, side)]}
        if shape is not None:
            out[name]["model"] = mix_rate(best_rates(gemm_dims(shape, tokens), time_product, reps, passes, warmup))
    return out


def spread(values) -> float:
    """``max / min - 1`` of positive numbers (0.10 = the largest is 10% above the smallest); inf if one is <= 0."""
    values = list(values)
    if not values:
        raise ValueError("spread of no values")
    low = min(values)
    return float("inf") if low <= 0 else max(values) / low - 1.0


def ceiling_disagreements(first: dict, second: dict, tol: float = TOLERANCE) -> list[str]:
    """The ceilings (``"bf16 model"``, ...) of two :func:`gemm_ceiling` results further apart than ``tol``
    (:func:`spread`), each as ``"<precision> <kind> A vs B GFLOP/s (+x%)"``; empty when they agree."""
    out = []
    for prec in first:
        for kind in first[prec]:
            a, b = first[prec][kind], second.get(prec, {}).get(kind)
            if b is not None and spread([a, b]) > tol:
                out.append(f"{prec} {kind} {a / 1e9:.0f} vs {b / 1e9:.0f} GFLOP/s (+{100 * spread([a, b]):.0f}%)")
    return out


def max_ceiling(results: list[dict]) -> dict:
    """Per precision and kind, the highest rate among several :func:`gemm_ceiling` results."""
    out: dict = {}
    for r in results:
        for prec, kinds in r.items():
            for kind, rate in kinds.items():
                out.setdefault(prec, {})[kind] = max(rate, out.get(prec, {}).get(kind, 0.0))
    return out


def stable_window(values: list[float], size: int, tol: float = TOLERANCE) -> tuple[int, int] | None:
    """``(start, stop)`` of the latest ``size`` consecutive ``values`` whose :func:`spread` is at most ``tol``,
    or None. Used on per-round ratios: a round measured while the load on the machine changed gives a ratio
    out of line with its neighbours; the benchmarks repeat rounds until a window agrees (a bounded number)."""
    if size < 1:
        raise ValueError(f"size must be at least 1, got {size}")
    for stop in range(len(values), size - 1, -1):
        if spread(values[stop - size:stop]) <= tol:
            return stop - size, stop
    return None


def repeat_until_stable(measure, rounds: int, max_extra: int, tol: float = TOLERANCE, say=print) -> tuple[list, tuple[int, int], bool]:
    """Call ``measure(i)`` for rounds ``i = 0 .. rounds-1`` (each returns a ratio, e.g. theirs / ours s/step), then
    while the latest ``rounds`` ratios disagree by more than ``tol`` (:func:`stable_window`), say so and run one
    more round, at most ``max_extra`` times. Returns ``(ratios, (start, stop), stable)``: the rounds to report
    (the agreeing window, else all of them) and whether they agree. ``say`` prints the notes."""
    values = [measure(i) for i in range(rounds)]
    window = stable_window(values, rounds, tol)
    extra = 0
    while window is None and extra < max_extra:
        extra += 1
        say(f"per-round ratios {' '.join(f'{v:.2f}' for v in values[-rounds:])} disagree by "
            f"{100 * spread(values[-rounds:]):.0f}% (> {100 * tol:.0f}%): repeating a round ({extra} of {max_extra})")
        values.append(measure(len(values)))
        window = stable_window(values, rounds, tol)
    if window is None:
        say(f"per-round ratios {' '.join(f'{v:.2f}' for v in values)} still disagree by more than {100 * tol:.0f}% "
            f"after {max_extra} extra round(s): the load on the machine changed during the run; all rounds reported")
        return values, (0, len(values)), False
    return values, window, True


def settle_ceilings(before: dict, measure, max_extra: int, tol: float = TOLERANCE, say=print) -> tuple[dict, list[dict], bool]:
    """Measure the ceiling again after the timed runs (``measure()`` -> a :func:`gemm_ceiling` result); while the
    last two measurements disagree by more than ``tol`` (:func:`ceiling_disagreements`), say so and measure again,
    at most ``max_extra`` times. Returns ``(ceiling, measurements, agreed)``: the highest rates of all
    measurements (:func:`max_ceiling`), the measurements in order (``before`` first) and whether the last two agree."""
    results = [before, measure()]
    extra = 0
    while (bad := ceiling_disagreements(results[-2], results[-1], tol)) and extra < max_extra:
        extra += 1
        say(f"GEMM ceilings disagree by more than {100 * tol:.0f}%: {'; '.join(bad)}: measuring again "
            f"({extra} of {max_extra})")
        results.append(measure())
    agreed = not ceiling_disagreements(results[-2], results[-1], tol)
    if not agreed:
        say(f"GEMM ceilings still disagree after {max_extra} extra measurement(s): the load on the machine changed; "
            "MFU is against the highest")
    return max_ceiling(results), results, agreed
