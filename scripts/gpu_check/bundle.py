"""The GPU check's packing: ``--prepare`` (a data bundle cut from the data mirror), ``--bundle`` (the pure-Python
wheels an offline GPU image lacks) and ``--install`` (those wheels and this checkout with ``pip --no-deps``, over
setup.py's version floors, said out loud). Part of :mod:`simcse.research.gpu_check`.
"""
from __future__ import annotations

import gzip
import hashlib
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

from simcse.files.storage import write_text_atomic

REPO = Path(__file__).resolve().parents[2]

DATA_BUDGET_BYTES = 40 * 2**20

WIKI_LINES = 500_000

# pure-Python wheels the target environment lacks (it has torch, transformers, sentence-transformers,
# accelerate, pyarrow, pandas, xxhash, fsspec, ...; not datasets and its two pure-Python helpers)
BUNDLE_WHEELS = ("datasets==5.2.0", "dill==0.4.1", "multiprocess==0.70.19")

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
