"""One prepared GPU check: correctness on CUDA, training speed against sentence-transformers, and the paper's
central claim (unsupervised SimCSE improves a raw pretrained encoder) on an encoder pretrained on the spot.

    bash scripts/gpu_check.sh --prepare    # here, with the data: wiki subset + STS/NLI files -> gpu_bundle/data
    bash scripts/gpu_check.sh --bundle     # here, with PyPI: the pure-Python wheels the target lacks -> gpu_bundle/wheels
    bash scripts/gpu_check.sh              # on the GPU machine: install (--no-deps), then parts a, b, c
    TINY=1 bash scripts/gpu_check.sh       # CPU smoke run of every part on a tiny model (= --device cpu --tiny)

The run needs no network: everything it reads is in the checkout and ``gpu_bundle/``. Parts, in order:

* ``a`` correctness: the padding-free forward and backward equal the padded one for every pooler (fp32 and
  bf16 autocast, relative-norm tolerances), the GradCache step's gradients equal the plain step's, one bf16
  step and one fp16 step with ``torch.amp.GradScaler`` stay finite, and InfoNCE (loss and gradients) on the
  device equals CPU.
* ``b`` speed: ``scripts/benchmark_gpu.py`` (random BERT-base shape, unsupervised SimCSE, bf16, batch 64 and
  512): our trainer padding-free and padded, and sentence-transformers' trainer, each in its own process on
  the same device; sentences/s, peak memory and MFU against the bf16 GEMM rate measured in the same run.
* ``c`` central claim: MLM-pretrain a BERT-Mini-shaped encoder (4 layers, hidden 256) from scratch on the
  bundled wiki text for the time left (:mod:`simcse.research.pretrain`, bf16, ``max_position_embeddings`` = the
  training length, 32), score its raw read-outs (``avg``, ``avg_first_last``, ``cls_before_pooler``), train
  unsupervised SimCSE (wiki sentences, ``cls`` + ``mlp_only_train``, temp 0.05) and supervised SimCSE (NLI
  triplets, hard negatives) from it with :mod:`simcse.training.train`, and print the 7-task STS table (Spearman x 100).

A hard budget (``--budget-s``, default 540 s = 9 min) bounds the parts together; each part also has its own
cap (``--caps``) and runs in its own process group, killed at its cap, so a part cut short still reports what
it finished (every part rewrites its JSON after each step). ``<out>/gpu_check.json`` and ``<out>/gpu_check.md``
are rewritten after every part; the last printed line is machine-readable and starts with ``gpu_check``.

Why one module: it is one program, run as ``python -m simcse.research.gpu_check`` on a machine that gets only a
copy of the checkout; its parts re-enter it in child processes (``--part a|b|c``) and share its constants, caps and
report format, so the whole check reads top to bottom in one file (sections: helpers, prepare/bundle/install,
parts a-c, report, orchestration).
"""
from __future__ import annotations

import argparse
import csv
import gzip
import hashlib
import json
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import torch

from simcse.training.gradcache import grad_cache_step, split_chunks
from simcse.training.losses import info_nce
from simcse.models.modeling import SimCSEModel
from simcse.models.pooling import POOLERS
from simcse.research.pretrain import PretrainArguments, pretrain, time_budget_callback
from simcse.research.reproduce import STS_TASKS, sts_scores
from simcse.files.storage import write_text_atomic
from simcse.training.train import build, parse_args

REPO = Path(__file__).resolve().parents[2]
PARTS = ("a", "b", "c")
BUDGET_S = 540.0
CAPS = {"a": 45.0, "b": 170.0, "c": 300.0}  # + about 25 s of start-up and reporting = the 9-minute budget
TINY_BUDGET_S = 115.0
TINY_CAPS = {"a": 15.0, "b": 62.0, "c": 33.0}
MIN_PART_S = 5.0  # a part with less time than this left is skipped, not started
DATA_BUDGET_BYTES = 40 * 2**20
WIKI_LINES = 500_000
# pure-Python wheels the target environment lacks (it has torch, transformers, sentence-transformers,
# accelerate, pyarrow, pandas, xxhash, fsspec, ...; not datasets and its two pure-Python helpers)
BUNDLE_WHEELS = ("datasets==5.2.0", "dill==0.4.1", "multiprocess==0.70.19")
# 7-task STS averages (Spearman x 100) of SimCSE on Google's fully pretrained small BERTs, as published in
# ConGen (Limkonchotiwat et al., Findings of EMNLP 2022), its repository's result tables
PUBLISHED = {"unsup BERT-Tiny (2 layers, 128)": 64.47, "unsup BERT-Mini (4 layers, 256)": 65.94,
             "unsup BERT-Small (4 layers, 512)": 69.13, "sup BERT-Mini (4 layers, 256)": 76.52}
RAW_POOLERS = ("avg", "avg_first_last", "cls_before_pooler")
WORDS = ("the a man woman child dog cat plays runs sits on in with and of guitar music park street red blue "
         "small big old young house tree water ball food table eats reads writes sings near under over").split()

# part c settings: GPU (BERT-Mini shape, large MLM batch) and tiny (CPU smoke run)
C_SETTINGS = {
    "gpu": dict(hidden_size=256, num_hidden_layers=4, num_attention_heads=4, vocab_size=16384, tokenizer_lines=200_000,
                wiki_lines=0, mlm_batch=1024, mlm_lr=1e-3, probe_steps=40, max_seq_length=32,
                unsup_batch=64, unsup_lr=5e-5, unsup_steps=1000, unsup_s=50.0,
                sup_batch=128, sup_lr=5e-5, sup_epochs=3, sup_rows=0, sup_s=35.0, eval_reserve_s=45.0,
                encode_batch=512, sts_lines=0, pretrain_max_s=0.0, pretrain_setup_s=15.0, mlm_workers=8),
    "tiny": dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, vocab_size=1000, tokenizer_lines=5000,
                 wiki_lines=5000, mlm_batch=32, mlm_lr=1e-3, probe_steps=6, max_seq_length=32,
                 unsup_batch=16, unsup_lr=1e-4, unsup_steps=6, unsup_s=8.0,
                 sup_batch=16, sup_lr=1e-4, sup_epochs=1, sup_rows=64, sup_s=8.0, eval_reserve_s=12.0,
                 encode_batch=128, sts_lines=40, pretrain_max_s=6.0, pretrain_setup_s=2.0, mlm_workers=0),
}


# ------------------------------------------------------------------------------------------ small helpers
def _write_json(path: Path, data: dict) -> None:
    """Rewrite ``path`` with ``data`` (:func:`simcse.files.storage.write_text_atomic`: never half-written)."""
    write_text_atomic(path, json.dumps(data, indent=2, default=str) + "\n")


def _read_json(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def parse_caps(text: str, defaults: dict[str, float]) -> dict[str, float]:
    """``"a=45,b=170"`` -> the caps in seconds (parts not named keep ``defaults``).

    Raises:
        ValueError: an unknown part, a missing ``=``, or a value that is not a positive number.
    """
    caps = dict(defaults)
    for item in filter(None, (x.strip() for x in text.split(","))):
        part, eq, value = item.partition("=")
        if part not in PARTS or not eq:
            raise ValueError(f"--caps: expected PART=SECONDS with PART in {','.join(PARTS)}, got {item!r}")
        try:
            caps[part] = float(value)
        except ValueError:
            raise ValueError(f"--caps: {part}={value!r} is not a number of seconds") from None
        if not caps[part] > 0:
            raise ValueError(f"--caps: {part} must be > 0 seconds, got {value}")
    return caps


def version_floors(setup_py: Path = REPO / "setup.py") -> dict[str, str]:
    """The ``name>=version`` lower bounds of ``install_requires`` in ``setup_py`` (``{}`` if it is absent)."""
    try:
        text = setup_py.read_text(encoding="utf-8")
    except OSError:
        return {}
    block = text.split("install_requires", 1)[-1].split("]", 1)[0]
    return dict(re.findall(r'"([A-Za-z0-9_.\-]+)>=([0-9][0-9A-Za-z.]*)', block))


def below_floors(installed: dict[str, str | None], floors: dict[str, str]) -> list[str]:
    """``"torch 2.11.0 < 2.13.0"`` for each installed package older than its setup.py floor."""
    from packaging.version import InvalidVersion, Version

    out = []
    for name, floor in floors.items():
        have = installed.get(name)
        if not have:
            continue
        try:
            if Version(have.split("+")[0]) < Version(floor):
                out.append(f"{name} {have} < {floor}")
        except InvalidVersion:
            continue
    return out


def installed_versions(names=("torch", "transformers", "sentence-transformers", "accelerate", "datasets",
                              "tokenizers", "huggingface_hub", "numpy", "scipy", "scikit-learn", "safetensors",
                              "pyarrow", "onnxruntime", "dill", "multiprocess")) -> dict[str, str | None]:
    """Installed distribution versions (None when absent), from the package metadata (nothing imported)."""
    from importlib import metadata

    out = {}
    for name in names:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


# ------------------------------------------------------------------------------------------ --prepare / --bundle
def prepare_data(bundle: Path, mirror: Path, wiki_lines: int = WIKI_LINES) -> dict:
    """Write the data bundle: ``<bundle>/data/`` with ``wiki.txt.gz`` (the first ``wiki_lines`` non-blank lines
    of ``wiki1m_for_simcse.txt``), ``nli_for_simcse.csv`` and ``senteval/{STS,SICK}`` copied from ``mirror``,
    and ``MANIFEST.json`` (file sizes and sha256). The folder is built beside and renamed into place.

    Raises:
        FileNotFoundError: ``mirror`` lacks one of the source files (the message names it).
        ValueError: ``wiki_lines < 1``, or the bundle would exceed 40 MiB (lower ``wiki_lines``).
    """
    if wiki_lines < 1:
        raise ValueError(f"wiki_lines must be >= 1, got {wiki_lines}")
    sources = {"wiki": mirror / "wiki1m_for_simcse.txt", "nli": mirror / "nli_for_simcse.csv",
               "STS": mirror / "senteval" / "downstream" / "STS", "SICK": mirror / "senteval" / "downstream" / "SICK"}
    for what, path in sources.items():
        if not path.exists():
            raise FileNotFoundError(f"data mirror {str(mirror)!r} has no {path.relative_to(mirror)} ({what}); "
                                    "set SIMCSE_DATA_MIRROR to the folder holding the project's data")
    final = bundle / "data"
    tmp = bundle / "data.partial"
    shutil.rmtree(tmp, ignore_errors=True)
    (tmp / "senteval").mkdir(parents=True)
    n = 0
    with open(sources["wiki"], encoding="utf-8") as src, gzip.open(tmp / "wiki.txt.gz", "wt", encoding="utf-8",
                                                                 compresslevel=9) as dst:
        for line in src:
            if line.strip():
                dst.write(line.rstrip("\n") + "\n")
                n += 1
                if n >= wiki_lines:
                    break
    shutil.copyfile(sources["nli"], tmp / "nli_for_simcse.csv")
    for name in ("STS", "SICK"):
        shutil.copytree(sources[name], tmp / "senteval" / name)
    files = sorted(p for p in tmp.rglob("*") if p.is_file())
    total = sum(p.stat().st_size for p in files)
    if total > DATA_BUDGET_BYTES:
        shutil.rmtree(tmp)
        raise ValueError(f"the data bundle would be {total / 2**20:.1f} MiB, over the {DATA_BUDGET_BYTES / 2**20:.0f} MiB "
                         f"budget: lower --wiki-lines (now {wiki_lines})")
    manifest = {"wiki_lines": n, "bytes": total, "mirror": mirror.name,
                "files": {str(p.relative_to(tmp)): {"bytes": p.stat().st_size, "sha256": _sha256(p)} for p in files}}
    _write_json(tmp / "MANIFEST.json", manifest)
    shutil.rmtree(final, ignore_errors=True)
    tmp.replace(final)
    return manifest


def download_wheels(bundle: Path, python_version: str = "3.12", specs=BUNDLE_WHEELS) -> list[dict]:
    """``pip download`` the pure-Python wheels in ``specs`` (no dependencies, binary only, for CPython
    ``python_version`` on manylinux x86-64) into ``<bundle>/wheels`` and list them in ``<bundle>/wheels.txt``.

    Raises:
        RuntimeError: pip failed (its last output lines are in the message), or a wheel is not pure Python.
    """
    folder = bundle / "wheels"
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--python-version",
           python_version, "--implementation", "cp", "--platform", "manylinux2014_x86_64", "--platform", "any",
           "-d", str(folder), *specs]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"pip download failed (exit {proc.returncode}): {proc.stderr.strip()[-600:]}")
    rows = []
    for whl in sorted(folder.glob("*.whl")):
        tag = whl.stem.split("-")[-1]
        if tag not in ("any",):
            raise RuntimeError(f"{whl.name} is not a pure-Python wheel (platform tag {tag!r})")
        rows.append({"file": whl.name, "bytes": whl.stat().st_size, "sha256": _sha256(whl)})
    listing = "".join(f"{r['file']}  {r['bytes']}  sha256:{r['sha256']}\n" for r in rows)
    write_text_atomic(bundle / "wheels.txt",
                      f"# pip install --no-deps --no-index {folder.name}/*.whl (Python {python_version})\n" + listing)
    return rows


def install(bundle: Path) -> dict:
    """Install the bundled wheels and this checkout with ``pip install --no-deps --no-index`` (no network), over
    the environment's own torch/transformers whatever setup.py's floors say; report what is below a floor.

    Wheels that cannot go into the environment (a read-only one) go to ``<bundle>/site`` instead
    (``pip install --target``), which scripts/gpu_check.sh then puts on ``PYTHONPATH``. An editable install of
    the checkout that fails (for example without setuptools) is reported and the run goes on with the
    checkout on ``PYTHONPATH`` (scripts/gpu_check.sh sets it)."""
    report = {"wheels": [], "editable": None, "below_floors": []}
    wheels = sorted((bundle / "wheels").glob("*.whl"))
    pip = [sys.executable, "-m", "pip", "install", "--no-deps", "--no-index", "--no-build-isolation", "-q"]
    site = bundle / "site"
    shutil.rmtree(site, ignore_errors=True)
    if wheels:
        report["wheels"] = [w.name for w in wheels]
        proc = subprocess.run(pip + [str(w) for w in wheels], capture_output=True, text=True)
        if proc.returncode != 0:
            first_error = proc.stderr.strip()[-300:]
            proc = subprocess.run(pip + ["--target", str(site)] + [str(w) for w in wheels], capture_output=True, text=True)
            report["wheels_target"] = str(site)
            if proc.returncode != 0:
                shutil.rmtree(site, ignore_errors=True)
                report["wheels_error"] = first_error + " | --target: " + proc.stderr.strip()[-300:]
    proc = subprocess.run(pip + ["-e", str(REPO)], capture_output=True, text=True)
    report["editable"] = proc.returncode == 0
    if proc.returncode != 0:
        report["editable_error"] = proc.stderr.strip()[-600:]
    report["below_floors"] = below_floors(installed_versions(), version_floors())
    return report


# ------------------------------------------------------------------------------------------ shared model bits
def _random_encoder(folder: Path, layers: int, hidden: int, heads: int, seed: int = 0) -> Path:
    """Save a random ``BertModel`` (vocabulary :data:`WORDS`, 64 positions) and its WordPiece tokenizer.

    Weights are drawn with std 0.2 (BERT: 0.02) so that sentences get clearly different embeddings and the
    contrastive loss and its gradients are far from the degenerate all-equal case."""
    from transformers import BertConfig, BertModel, BertTokenizerFast

    folder.mkdir(parents=True, exist_ok=True)
    vocab = folder / "vocab.txt"
    vocab.write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *WORDS, "."]) + "\n", encoding="utf-8")
    BertTokenizerFast(vocab_file=str(vocab), do_lower_case=True).save_pretrained(folder)
    torch.manual_seed(seed)
    BertModel(BertConfig(vocab_size=len(WORDS) + 6, hidden_size=hidden, num_hidden_layers=layers,
                         num_attention_heads=heads, intermediate_size=4 * hidden,
                         max_position_embeddings=64, initializer_range=0.2)).save_pretrained(folder)
    return folder


def _sentences(n: int, seed: int = 0) -> list[str]:
    """``n`` sentences of 3 to 28 words from :data:`WORDS` (lengths vary, so a padded batch has padding)."""
    import random

    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 28))) + " ." for _ in range(n)]


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    """Relative error ``|a - b| / |b|`` (Frobenius norms, float64)."""
    a, b = a.double(), b.double()
    return float((a - b).norm() / b.norm().clamp_min(1e-30))


def _worst_grad(got: dict, want: dict, noise: float = 1e-4) -> float:
    """The largest :func:`_rel` over the gradient tensors of ``want``, leaving out the attention key biases:
    softmax ignores a shift shared by every key, so their true gradient is 0 and both sides hold rounding
    noise (checked instead to be below ``noise`` times the largest gradient norm; ``inf`` when not)."""
    scale = max(float(g.norm()) for g in want.values())
    worst = 0.0
    for k, g in want.items():
        if k.endswith("attention.self.key.bias"):
            if max(float(g.norm()), float(got[k].norm())) > noise * scale:
                return float("inf")
        elif float(g.norm()) > 0:
            worst = max(worst, _rel(got[k], g))
    return worst


# ------------------------------------------------------------------------------------------ part a
def part_a(out: Path, device: str, tiny: bool) -> dict:
    """Correctness checks on ``device``; writes ``<out>/part_a.json`` after every check and returns its content."""
    dev = torch.device(device)
    if dev.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = False  # fp32 comparisons in true fp32
        torch.backends.cudnn.allow_tf32 = False
    layers, hidden, heads, n = (2, 64, 4, 16) if tiny else (4, 256, 4, 64)
    folder = _random_encoder(out / "a_model", layers, hidden, heads)
    result = {"status": "running", "device": device, "shape": f"{layers} layers, hidden {hidden}", "checks": []}
    path = out / "part_a.json"

    def record(name: str, value: float, tol: float, also: bool = True):
        """One check: passes when ``value <= tol`` (finite) and ``also`` holds."""
        ok = bool(also and math.isfinite(value) and value <= tol)
        result["checks"].append({"name": name, "value": value, "tol": tol, "ok": ok})
        _write_json(path, result)

    texts = _sentences(n)
    for pooler in POOLERS:
        padded = SimCSEModel.from_pretrained(str(folder), pooler_type=pooler).to(dev).eval()
        free = SimCSEModel.from_pretrained(str(folder), pooler_type=pooler).to(dev).eval()
        free.load_state_dict(padded.state_dict())
        on = free.set_unpadded(True)
        batch = {k: v.to(dev) for k, v in padded.tokenizer(texts, return_tensors="pt", padding=True).items()}
        for precision, (tol_out, tol_grad) in (("fp32", (1e-4, 1e-3)), ("bf16", (5e-2, 1e-1))):
            outs, grads = [], []
            for model in (padded, free):
                model.zero_grad(set_to_none=True)
                with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=precision == "bf16"):
                    z = model(**batch)
                info_nce(z[: n // 2], z[n // 2:], temp=0.05).backward()
                outs.append(z.detach().float())
                grads.append({k: p.grad.detach().float() for k, p in model.named_parameters() if p.grad is not None})
            record(f"padding-free = padded, {pooler}, {precision}, embeddings", _rel(outs[1], outs[0]), tol_out, also=on)
            worst = _worst_grad(grads[1], grads[0], noise=tol_grad / 10)
            record(f"padding-free = padded, {pooler}, {precision}, gradients (worst tensor)", worst, tol_grad,
                   also=on and grads[0].keys() == grads[1].keys())

    # GradCache (4 chunks) against the plain step, fp32, dropout off
    model = SimCSEModel.from_pretrained(str(folder), pooler_type="cls").to(dev).eval()
    model.set_unpadded(True)
    batch = {k: v.to(dev) for k, v in model.tokenizer(texts, return_tensors="pt", padding=True).items()}

    def loss_fn(z):
        return info_nce(z[: n // 2], z[n // 2:], temp=0.05)

    loss_fn(model(**batch)).backward()
    plain = {k: p.grad.detach().clone() for k, p in model.named_parameters() if p.grad is not None}
    model.zero_grad(set_to_none=True)
    grad_cache_step(split_chunks(batch, n // 4), lambda c: model(**c), loss_fn, lambda s: s.backward())
    cached = {k: p.grad.detach().clone() for k, p in model.named_parameters() if p.grad is not None}
    record("GradCache step = plain step, gradients (worst tensor)", _worst_grad(cached, plain), 1e-4,
           also=cached.keys() == plain.keys())

    # one bf16 step and one fp16 step with GradScaler, dropout on: finite loss, gradients and weights
    for precision in ("bf16", "fp16"):
        model = SimCSEModel.from_pretrained(str(folder), pooler_type="cls", mlp_only_train=True).to(dev).train()
        model.set_unpadded(True)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
        scaler = torch.amp.GradScaler(dev.type, enabled=precision == "fp16")
        with torch.autocast(dev.type, dtype=torch.bfloat16 if precision == "bf16" else torch.float16):
            z = model(**{k: torch.cat([v, v]) for k, v in batch.items()})
        loss = info_nce(z[:n], z[n:], temp=0.05)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        finite = bool(torch.isfinite(loss)) and all(bool(torch.isfinite(p).all()) for p in model.parameters())
        record(f"{precision} training step finite (loss {loss.item():.4f})", 0.0 if finite else float("inf"), 0.0, also=finite)

    # InfoNCE on the device against CPU (loss and input gradients, with hard negatives)
    g = torch.Generator().manual_seed(0)
    zs = [torch.randn(n, hidden, generator=g, dtype=torch.float32) for _ in range(3)]
    got = []
    for where in ("cpu", dev):
        leaves = [z.clone().to(where).requires_grad_(True) for z in zs]
        loss = info_nce(*leaves, temp=0.05, hard_negative_alpha=1.0)
        loss.backward()
        got.append((loss.detach().cpu(), [z.grad.cpu() for z in leaves]))
    record("InfoNCE on device = CPU, loss", abs(float(got[1][0] - got[0][0])), 1e-5)
    record("InfoNCE on device = CPU, gradients (worst input)", max(_rel(a, b) for a, b in zip(got[1][1], got[0][1])), 1e-5)
    result["status"] = "ok" if all(c["ok"] for c in result["checks"]) else "fail"
    _write_json(path, result)
    return result


# ------------------------------------------------------------------------------------------ part b
def part_b(out: Path, device: str, tiny: bool, deadline: float) -> dict:
    """Run scripts/benchmark_gpu.py; its rows land in ``<out>/part_b_bench.json`` as they finish."""
    script = REPO / "scripts" / "benchmark_gpu.py"
    if not script.is_file():
        raise FileNotFoundError(f"{script} not found: part b runs from a checkout of the project")
    bench = out / "part_b_bench.json"
    if tiny:
        argv = ["--device", device, "--shape", "tiny", "--batch-sizes", "4", "--warmup", "1", "--steps", "1", "--threads", "1"]
    else:
        argv = ["--device", device, "--shape", "base", "--batch-sizes", "64,512", "--warmup", "3", "--steps", "10",
                "--threads", "4"]
    cmd = [sys.executable, str(script), *argv, "--json", str(bench)]
    result = {"status": "running", "command": " ".join(["python", "scripts/benchmark_gpu.py", *argv]), "bench_json": str(bench)}
    _write_json(out / "part_b.json", result)
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=max(1.0, deadline - time.time()))
    lines = proc.stdout.strip().splitlines()
    result.update(status="ok" if proc.returncode == 0 else f"error (exit {proc.returncode})",
                  stdout_tail=lines[-12:], stderr_tail=proc.stderr.strip().splitlines()[-8:] if proc.returncode else [],
                  last_line=next((x for x in reversed(lines) if x.startswith("gpu_train")), None))
    _write_json(out / "part_b.json", result)
    return result


# ------------------------------------------------------------------------------------------ part c
def _cut_senteval(src: Path, dst: Path, lines: int) -> Path:
    """Copy SentEval's STS/SICK layout keeping the first ``lines`` lines of every data file (aligned across
    a subset's input and gold files; headers count as a line) -- the tiny run's small test sets."""
    for path in src.rglob("*"):
        if not path.is_file():
            continue
        target = dst / path.relative_to(src)
        target.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "rb") as f:
            head = [f.readline() for _ in range(lines + 1)]
        target.write_bytes(b"".join(head))
    return dst


def _train(argv: list[str], seconds: float):
    """:func:`simcse.training.train.build` + train for at most ``seconds`` -> (the unwrapped model in eval mode, info)."""
    from transformers import set_seed

    model_args, data_args, training_args = parse_args(argv)
    set_seed(training_args.seed)
    trainer = build(model_args, data_args, training_args)
    trainer.add_callback(time_budget_callback(seconds / 60.0))
    t0 = time.time()
    res = trainer.train()
    losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    info = {"steps": res.global_step, "s": round(time.time() - t0, 1), "examples": len(trainer.train_dataset),
            "loss_first": losses[0] if losses else None, "loss_last": losses[-1] if losses else None}
    return trainer.accelerator.unwrap_model(trainer.model).eval(), info


def _step_clock(record: list):
    """A ``TrainerCallback`` appending ``time.perf_counter()`` at every step end (CUDA synchronised)."""
    from transformers import TrainerCallback

    class StepClock(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            if torch.cuda.is_available():
                torch.cuda.synchronize()
            record.append(time.perf_counter())

    return StepClock()


def part_c(out: Path, device: str, tiny: bool, deadline: float, bundle: Path) -> dict:
    """Pretrain, score the raw read-outs, train unsupervised and supervised SimCSE, score them; rows are
    written to ``<out>/part_c.json`` as they finish."""
    cfg = C_SETTINGS["tiny" if tiny else "gpu"]
    data = bundle / "data"
    for need in ("wiki.txt.gz", "nli_for_simcse.csv", "senteval/STS", "senteval/SICK"):
        if not (data / need).exists():
            raise FileNotFoundError(f"data bundle {str(data)!r} has no {need}: run scripts/gpu_check.sh --prepare first")
    work = out / "c"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    path = out / "part_c.json"
    result = {"status": "running", "device": device, "settings": cfg, "stages": {}, "rows": {}}
    save = lambda: _write_json(path, result)  # noqa: E731

    t0 = time.time()
    wiki = work / "wiki.txt"
    n_lines = 0
    with gzip.open(data / "wiki.txt.gz", "rt", encoding="utf-8") as src, open(wiki, "w", encoding="utf-8") as dst:
        for line in src:
            dst.write(line)
            n_lines += 1
            if cfg["wiki_lines"] and n_lines >= cfg["wiki_lines"]:
                break
    nli = data / "nli_for_simcse.csv"
    if cfg["sup_rows"]:
        nli = work / "nli.csv"
        with open(data / "nli_for_simcse.csv", encoding="utf-8", newline="") as f:
            rows = list(csv.reader(f))[: cfg["sup_rows"] + 1]
        with open(nli, "w", encoding="utf-8", newline="") as f:
            csv.writer(f).writerows(rows)
    senteval = data / "senteval"
    if cfg["sts_lines"]:
        senteval = _cut_senteval(senteval, work / "senteval", cfg["sts_lines"])
    result["stages"]["data"] = {"wiki_lines": n_lines, "s": round(time.time() - t0, 1)}
    save()

    bf16 = device.startswith("cuda")
    common_pt = dict(train_file=str(wiki), hidden_size=cfg["hidden_size"], num_hidden_layers=cfg["num_hidden_layers"],
                     num_attention_heads=cfg["num_attention_heads"], vocab_size=cfg["vocab_size"],
                     tokenizer_lines=cfg["tokenizer_lines"], max_seq_length=cfg["max_seq_length"],
                     batch_size=cfg["mlm_batch"], learning_rate=cfg["mlm_lr"], bf16=bf16, seed=42,
                     dataloader_num_workers=cfg["mlm_workers"])
    # a short probe run trains the WordPiece vocabulary and measures steps/s, so that the real run's linear
    # schedule (warm-up, decay to 0) fits the time left
    t0 = time.time()
    clock: list[float] = []
    probe = pretrain(PretrainArguments(output_dir=str(work / "probe"), max_steps=cfg["probe_steps"],
                                       max_lines=max(cfg["tokenizer_lines"], cfg["mlm_batch"] * cfg["probe_steps"]),
                                       save_steps=cfg["probe_steps"], logging_steps=cfg["probe_steps"], **common_pt),
                     callbacks=[_step_clock(clock)])
    probe_res = _read_json(probe / "train_result.json") or {}
    skip = len(clock) // 3  # steady state: leave out the first steps (CUDA start-up, allocator warm-up)
    steps_per_s = (len(clock) - 1 - skip) / max(1e-3, clock[-1] - clock[skip])
    result["stages"]["tokenizer_and_probe"] = {"s": round(time.time() - t0, 1), "probe_steps_per_s": round(steps_per_s, 2),
                                               "vocab_size": probe_res.get("vocab_size")}
    save()

    reserve = cfg["unsup_s"] + cfg["sup_s"] + cfg["eval_reserve_s"]
    pretrain_s = max(2.0, deadline - time.time() - reserve - cfg["pretrain_setup_s"])
    if cfg["pretrain_max_s"]:
        pretrain_s = min(pretrain_s, cfg["pretrain_max_s"])
    max_steps = max(cfg["probe_steps"], int(0.95 * steps_per_s * pretrain_s))
    t0 = time.time()
    raw = pretrain(PretrainArguments(output_dir=str(work / "raw"), tokenizer_name_or_path=str(probe),
                                     max_steps=max_steps, save_steps=max_steps, max_minutes=pretrain_s / 60.0,
                                     logging_steps=max(10, max_steps // 20), **common_pt))
    pre = _read_json(raw / "train_result.json") or {}
    curve = list(csv.reader(open(raw / "loss_curve.csv", encoding="utf-8")))[1:]
    from transformers import BertTokenizerFast

    tok = BertTokenizerFast.from_pretrained(raw)
    sample = [line for _, line in zip(range(2000), open(wiki, encoding="utf-8"))]
    mean_len = sum(len(x) for x in tok(sample, truncation=True, max_length=cfg["max_seq_length"])["input_ids"]) / len(sample)
    steps = int(pre.get("global_step", 0))
    result["stages"]["pretrain"] = {
        "s": round(time.time() - t0, 1), "planned_steps": max_steps, "steps": steps, "batch": cfg["mlm_batch"],
        "tokens_seen": int(steps * cfg["mlm_batch"] * mean_len), "mean_tokens_per_line": round(mean_len, 1),
        "mlm_loss_first": float(curve[0][1]) if curve else None, "mlm_loss_last": float(curve[-1][1]) if curve else None,
        "max_position_embeddings": json.loads((raw / "config.json").read_text())["max_position_embeddings"],
        "n_parameters": pre.get("n_parameters")}
    save()

    def score(label: str, model) -> None:
        t = time.time()
        model = model.to(device).eval()
        scores = sts_scores(lambda s: model.encode(s, batch_size=cfg["encode_batch"], max_length=cfg["max_seq_length"]),
                            STS_TASKS, str(senteval))
        result["rows"][label] = {**scores, "s": round(time.time() - t, 1)}
        save()

    for pooler in RAW_POOLERS:
        score(f"raw, {pooler}", SimCSEModel.from_pretrained(str(raw), pooler_type=pooler))

    common = ["--model_name_or_path", str(raw), "--max_seq_length", str(cfg["max_seq_length"]), "--temp", "0.05",
              "--seed", "42", "--report_to", "none", "--save_strategy", "no", "--eval_strategy", "no",
              "--eval_before_training", "false", "--test_after_training", "false", "--logging_first_step", "true",
              "--disable_tqdm", "true", "--senteval_dir", str(senteval), "--dataloader_num_workers", "0"]
    common += ["--bf16", "true"] if bf16 else ["--bf16", "false", "--use_cpu", "true"]
    unsup_file = work / "unsup.txt"  # only the sentences the run reads: the whole file would be read into Arrow
    with open(wiki, encoding="utf-8") as src, open(unsup_file, "w", encoding="utf-8") as dst:
        for _, line in zip(range(cfg["unsup_steps"] * cfg["unsup_batch"]), src):
            dst.write(line)
    unsup_argv = common + ["--train_file", str(unsup_file), "--output_dir", str(work / "unsup"), "--pooler_type", "cls",
                           "--mlp_only_train", "true", "--per_device_train_batch_size", str(cfg["unsup_batch"]),
                           "--learning_rate", str(cfg["unsup_lr"]), "--max_steps", str(cfg["unsup_steps"]),
                           "--logging_steps", str(max(1, min(50, cfg["unsup_steps"] // 10)))]
    model, info = _train(unsup_argv, cfg["unsup_s"])
    result["stages"]["unsup"] = {**info, "batch": cfg["unsup_batch"], "lr": cfg["unsup_lr"]}
    score("unsup SimCSE", model)
    del model
    sup_argv = common + ["--train_file", str(nli), "--output_dir", str(work / "sup"), "--pooler_type", "cls",
                         "--mlp_only_train", "false", "--per_device_train_batch_size", str(cfg["sup_batch"]),
                         "--learning_rate", str(cfg["sup_lr"]), "--num_train_epochs", str(cfg["sup_epochs"]),
                         "--logging_steps", "1" if tiny else "25"]
    model, info = _train(sup_argv, cfg["sup_s"])
    result["stages"]["sup"] = {**info, "batch": cfg["sup_batch"], "lr": cfg["sup_lr"]}
    score("sup SimCSE", model)
    raw_best = max(result["rows"][f"raw, {p}"]["Avg."] for p in RAW_POOLERS)
    result["claim"] = {"raw_best_avg": raw_best, "unsup_avg": result["rows"]["unsup SimCSE"]["Avg."],
                       "unsup_beats_raw": result["rows"]["unsup SimCSE"]["Avg."] > raw_best}
    result["status"] = "ok"
    save()
    return result


# ------------------------------------------------------------------------------------------ report
def _fmt(x, spec: str = ".2f") -> str:
    return "-" if x is None else format(x, spec)


def summary_markdown(report: dict) -> str:
    """The markdown summary of a (possibly partial) ``gpu_check.json`` report."""
    pre = report.get("preflight", {})
    lines = [f"# GPU check: {pre.get('device_name', '?')}", "",
             f"Command: `{report.get('command', '')}` · budget {report.get('budget_s')} s · wall {report.get('wall_s')} s"
             + (" · tiny smoke run" if report.get("tiny") else ""), "",
             "Versions: " + ", ".join(f"{k} {v}" for k, v in pre.get("versions", {}).items() if v), ""]
    if pre.get("datasets_importable") not in (None, True):
        lines += [f"`datasets` is not importable ({pre['datasets_importable']}): parts b and c cannot train.", ""]
    inst = report.get("install") or {}
    if inst.get("below_floors"):
        lines += ["Installed with `pip install --no-deps` over setup.py's version floors: "
                  + "; ".join(inst["below_floors"]) + ".", ""]
    parts = report.get("parts", {})
    a = parts.get("a", {})
    lines += [f"## a. Correctness on {a.get('device', '?')}: {a.get('status', 'not run')}", "",
              "| check | value | tolerance | ok |", "| --- | --- | --- | --- |"]
    lines += [f"| {c['name']} | {c['value']:.2e} | {c['tol']:.0e} | {'yes' if c['ok'] else 'NO'} |" for c in a.get("checks", [])]
    b = parts.get("b", {})
    lines += ["", f"## b. Training speed: {b.get('status', 'not run')}", "", f"`{b.get('command', '')}`", ""]
    bench = b.get("bench") or {}
    if bench:
        lines += [f"bf16 GEMM rate measured: {bench.get('ceiling', 0) / 1e12:.1f} TFLOP/s", "",
                  "| batch | side | sentences/s | s/step | peak GPU MiB | MFU |", "| --- | --- | --- | --- | --- | --- |"]
        for batch, by_variant in bench.get("variants", {}).items():
            for variant, r in by_variant.items():
                lines.append(f"| {batch} | {variant} | {r['sent_s']:.1f} | {r['s_step']:.4f} | "
                             f"{_fmt(r.get('peak_gpu_mib'), '.0f')} | {100 * r['mfu']:.1f}% |")
    c = parts.get("c", {})
    lines += ["", f"## c. Unsupervised SimCSE from an encoder pretrained here: {c.get('status', 'not run')}", ""]
    pt = c.get("stages", {}).get("pretrain")
    if pt:
        lines += [f"MLM pretraining: {pt['steps']} steps of batch {pt['batch']} in {pt['s']} s, about "
                  f"{pt['tokens_seen'] / 1e6:.1f}M tokens, loss {_fmt(pt['mlm_loss_first'])} -> {_fmt(pt['mlm_loss_last'])}, "
                  f"{pt['n_parameters']} parameters, position table {pt['max_position_embeddings']}.", ""]
    for stage in ("unsup", "sup"):
        s = c.get("stages", {}).get(stage)
        if s:
            lines.append(f"{stage} SimCSE: {s['steps']} steps of batch {s['batch']}, lr {s['lr']}, {s['s']} s, "
                         f"loss {_fmt(s['loss_first'], '.4f')} -> {_fmt(s['loss_last'], '.4f')}.")
    rows = c.get("rows", {})
    if rows:
        lines += ["", "| model | " + " | ".join(STS_TASKS) + " | Avg. | STS-B dev |",
                  "| --- " * (len(STS_TASKS) + 3) + "|"]
        for label, r in rows.items():
            lines.append(f"| {label} | " + " | ".join(_fmt(r.get(t)) for t in STS_TASKS)
                         + f" | {_fmt(r.get('Avg.'))} | {_fmt(r.get('STSBenchmark_dev'))} |")
        for label, avg in PUBLISHED.items():
            lines.append(f"| published: {label}, fully pretrained | " + " | ".join("" for _ in STS_TASKS) + f" | {avg} | |")
    if c.get("claim"):
        cl = c["claim"]
        lines += ["", f"Unsupervised SimCSE {'beats' if cl['unsup_beats_raw'] else 'does not beat'} the best raw "
                  f"read-out: {cl['unsup_avg']:.2f} against {cl['raw_best_avg']:.2f} (7-task STS average)."]
    return "\n".join(lines) + "\n"


def _token(status: str) -> str:
    """A status as one whitespace-free token (``"timeout, partial"`` -> ``timeout,partial``)."""
    return re.sub(r"\s+", "_", status.replace(", ", ","))


def last_line(report: dict) -> str:
    """The machine-readable last line: ``gpu_check device=... a=... b=... c=... <numbers>`` (space-separated
    ``key=value`` fields; a status never holds a space)."""
    parts = report.get("parts", {})
    name = str(report.get("preflight", {}).get("device_name", "?")).replace(" ", "_")
    fields = [f"device={name}", f"wall_s={report.get('wall_s')}"]
    a = parts.get("a", {})
    checks = a.get("checks", [])
    fields.append(f"a={_token(a.get('status', 'not_run'))}({sum(c['ok'] for c in checks)}/{len(checks)})")
    b = parts.get("b", {})
    fields.append(f"b={_token(b.get('status', 'not_run'))}")
    for batch, by_variant in (b.get("bench") or {}).get("variants", {}).items():
        if "ours" in by_variant:
            fields.append(f"batch{batch}_sent_s={by_variant['ours']['sent_s']:.1f}")
            fields.append(f"batch{batch}_mfu={by_variant['ours']['mfu']:.3f}")
        if "ours" in by_variant and "st" in by_variant:
            fields.append(f"batch{batch}_speedup_vs_st={by_variant['st']['s_step'] / by_variant['ours']['s_step']:.2f}")
        if "ours" in by_variant and "padded" in by_variant:
            fields.append(f"batch{batch}_speedup_vs_padded={by_variant['padded']['s_step'] / by_variant['ours']['s_step']:.2f}")
    c = parts.get("c", {})
    fields.append(f"c={_token(c.get('status', 'not_run'))}")
    pt = c.get("stages", {}).get("pretrain")
    if pt:
        fields.append(f"pretrain_tokens={pt['tokens_seen']}")
    for label, key in (("raw, avg", "raw_avg"), ("raw, avg_first_last", "raw_first_last"),
                       ("raw, cls_before_pooler", "raw_cls"), ("unsup SimCSE", "unsup"), ("sup SimCSE", "sup")):
        if label in c.get("rows", {}):
            fields.append(f"{key}_avg={c['rows'][label]['Avg.']:.2f}")
    if c.get("claim"):
        fields.append(f"unsup_beats_raw={'yes' if c['claim']['unsup_beats_raw'] else 'no'}")
    return "gpu_check " + " ".join(fields)


# ------------------------------------------------------------------------------------------ orchestration
def _preflight(device: str) -> dict:
    info = {"versions": installed_versions(), "device": device, "python": sys.version.split()[0]}
    if device.startswith("cuda"):
        if not torch.cuda.is_available():
            raise RuntimeError(f"--device {device}: torch {torch.__version__} sees no CUDA device "
                               "(for a CPU smoke run use --device cpu --tiny, or TINY=1)")
        info["device_name"] = torch.cuda.get_device_name(device)
        info["bf16_supported"] = torch.cuda.is_bf16_supported()
    else:
        info["device_name"] = "cpu"
    try:
        import datasets  # noqa: F401  (parts b and c train through simcse.training.train, which reads data with it)

        info["datasets_importable"] = True
    except ImportError as e:
        info["datasets_importable"] = f"no: {e}"
    return info


def _run_part(part: str, args, out: Path, seconds: float) -> tuple[str, float]:
    """Run one part in its own process group for at most ``seconds``; returns (status, wall seconds)."""
    cmd = [sys.executable, "-m", "simcse.research.gpu_check", "--worker", part, "--device", args.device,
           "--out", str(out), "--bundle-dir", str(args.bundle_dir), "--deadline", str(time.time() + seconds)]
    if args.tiny:
        cmd.append("--tiny")
    t0 = time.time()
    with open(out / f"part_{part}.log", "w", encoding="utf-8") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            rc = proc.wait(timeout=seconds)
            status = "finished" if rc == 0 else f"error (exit {rc})"
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            status = "timeout"
    return status, round(time.time() - t0, 1)


def _collect(part: str, out: Path, status: str, wall: float) -> dict:
    data = _read_json(out / f"part_{part}.json") or {}
    if part == "b":
        data["bench"] = _read_json(out / "part_b_bench.json")
    if status != "finished":
        data["status"] = f"{status}, partial" if data else status
        try:
            tail = (out / f"part_{part}.log").read_text(encoding="utf-8", errors="replace").strip().splitlines()
            data["log_tail"] = tail[-15:]
        except OSError:
            pass
    data["wall_s"] = wall
    return data


def run_check(args) -> dict:
    """Preflight, then parts ``args.parts`` within the budget; writes gpu_check.json/.md after every part."""
    start = time.time()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for stale in [*out.glob("part_*.json"), *out.glob("part_*.log")]:  # an earlier run's parts must not be read
        stale.unlink()
    budget = args.budget_s
    report = {"command": args.command_line, "budget_s": budget, "tiny": args.tiny, "caps": args.caps, "parts": {},
              "install": _read_json(Path(args.bundle_dir) / "install.json")}
    report["preflight"] = _preflight(args.device)
    print(f"gpu check on {report['preflight']['device_name']} ({args.device}), budget {budget:.0f} s, parts "
          f"{','.join(args.parts)}", flush=True)

    def flush():
        report["wall_s"] = round(time.time() - start, 1)
        _write_json(out / "gpu_check.json", report)
        write_text_atomic(out / "gpu_check.md", summary_markdown(report))

    for part in args.parts:
        left = budget - (time.time() - start) - 3.0  # 3 s to write the reports
        seconds = min(args.caps[part], left)
        if seconds < MIN_PART_S:
            report["parts"][part] = {"status": f"skipped (budget: {max(0.0, left):.0f} s left)"}
            flush()
            continue
        status, wall = _run_part(part, args, out, seconds)
        report["parts"][part] = _collect(part, out, status, wall)
        print(f"part {part}: {report['parts'][part].get('status')} in {wall} s (cap {seconds:.0f} s)", flush=True)
        flush()
    flush()
    print(summary_markdown(report))
    print(f"wrote {out / 'gpu_check.json'} and {out / 'gpu_check.md'}")
    print(last_line(report), flush=True)
    return report


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m simcse.research.gpu_check", description=__doc__.split("\n\n")[0])
    p.add_argument("--prepare", action="store_true", help="build the data bundle from $SIMCSE_DATA_MIRROR and exit")
    p.add_argument("--bundle", action="store_true", help="download the bundled wheels (pip) and exit")
    p.add_argument("--install", action="store_true", help="pip install --no-deps the bundled wheels and this checkout, and exit")
    p.add_argument("--bundle-dir", type=Path, default=REPO / "gpu_bundle")
    p.add_argument("--wiki-lines", type=int, default=WIKI_LINES, help="--prepare: wiki sentences in the bundle")
    p.add_argument("--python-version", default="3.12", help="--bundle: the target's Python (wheel tags)")
    p.add_argument("--device", default="cuda")
    p.add_argument("--tiny", action="store_true", help="tiny models and data: a CPU smoke run of every part")
    p.add_argument("--parts", default=",".join(PARTS))
    p.add_argument("--budget-s", type=float, default=None, help=f"total seconds (default {BUDGET_S:.0f}; tiny {TINY_BUDGET_S:.0f})")
    p.add_argument("--caps", default="", help="per-part caps in seconds, e.g. a=45,b=170,c=300")
    p.add_argument("--out", type=Path, default=REPO / "gpu_check_out")
    p.add_argument("--worker", choices=PARTS, help=argparse.SUPPRESS)
    p.add_argument("--deadline", type=float, default=None, help=argparse.SUPPRESS)
    return p


def main(argv: list[str] | None = None) -> int:
    """Command line (see the module docstring); returns the exit status: 0, or 2 for a bad argument or a
    device that is not there (argparse's usage errors exit with 2 too)."""
    p = _parser()
    args = p.parse_args(argv)
    args.bundle_dir = args.bundle_dir.resolve()
    if args.worker:
        if args.tiny:
            torch.set_num_threads(1)  # tiny models gain nothing from more threads; other jobs keep theirs
        out, deadline = args.out.resolve(), args.deadline or time.time() + 3600
        if args.worker == "a":
            part_a(out, args.device, args.tiny)
        elif args.worker == "b":
            part_b(out, args.device, args.tiny, deadline)
        else:
            part_c(out, args.device, args.tiny, deadline, args.bundle_dir)
        return 0
    if args.prepare:
        mirror = os.environ.get("SIMCSE_DATA_MIRROR")
        if not mirror:
            p.error("--prepare reads the data mirror: set SIMCSE_DATA_MIRROR to its folder")
        try:
            m = prepare_data(args.bundle_dir, Path(mirror), args.wiki_lines)
        except (FileNotFoundError, ValueError) as e:
            p.error(str(e))
        print(f"prepared {args.bundle_dir / 'data'}: {len(m['files'])} files, {m['bytes'] / 2**20:.1f} MiB, "
              f"{m['wiki_lines']} wiki lines")
        return 0
    if args.bundle:
        try:
            rows = download_wheels(args.bundle_dir, args.python_version)
        except RuntimeError as e:
            p.error(str(e))
        print((args.bundle_dir / "wheels.txt").read_text(encoding="utf-8"), end="")
        print(f"downloaded {len(rows)} wheels, {sum(r['bytes'] for r in rows) / 2**20:.2f} MiB")
        return 0
    if args.install:
        rep = install(args.bundle_dir)
        _write_json(args.bundle_dir / "install.json", rep)
        where = f" into {rep['wheels_target']}" if rep.get("wheels_target") and not rep.get("wheels_error") else ""
        print(f"installed with pip --no-deps{where}: {', '.join(rep['wheels']) or 'no bundled wheels'}; this checkout "
              f"{'editable' if rep['editable'] else 'NOT installed (used from PYTHONPATH): ' + rep.get('editable_error', '')[-200:]}")
        for line in rep["below_floors"]:
            print(f"below setup.py's floor, installed over it knowingly: {line}")
        if rep.get("wheels_error"):  # part a needs none of them: go on, the report says what is missing
            print(f"error installing the bundled wheels (parts b and c train through datasets): {rep['wheels_error']}",
                  file=sys.stderr)
        return 0
    args.parts = [x.strip() for x in args.parts.split(",") if x.strip()]
    if not args.parts or any(x not in PARTS for x in args.parts):
        p.error(f"--parts: expected a comma-separated subset of {','.join(PARTS)}")
    if args.tiny and args.device.startswith("cuda") and not torch.cuda.is_available():
        args.device = "cpu"
    args.budget_s = args.budget_s or (TINY_BUDGET_S if args.tiny else BUDGET_S)
    if args.budget_s <= 0:
        p.error(f"--budget-s must be > 0, got {args.budget_s}")
    try:
        args.caps = parse_caps(args.caps, TINY_CAPS if args.tiny else CAPS)
    except ValueError as e:
        p.error(str(e))
    args.command_line = " ".join(["python -m simcse.research.gpu_check", *(argv if argv is not None else sys.argv[1:])])
    try:
        run_check(args)
    except RuntimeError as e:
        print(f"error: {e}", file=sys.stderr)
        reason = "no_cuda_device" if "no CUDA device" in str(e) else "setup"
        print(f"gpu_check device=none status=error reason={reason}")
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
