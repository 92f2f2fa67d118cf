"""The GPU check's packing: ``--prepare`` (a data bundle cut from the data mirror to a byte budget, its inputs
checked first), ``--bundle`` (the pure-Python wheels an offline GPU image lacks) and ``--install`` (those wheels and
this checkout with ``pip --no-deps``, over the package's version floors, said out loud). Part of
:mod:`scripts.gpu_check`; every default path is under the checkout this file is in (:data:`REPO`).
"""
from __future__ import annotations

import csv
import gzip
import hashlib
import io
import json
import shutil
import subprocess
import sys
from pathlib import Path

from simcse.evaluation.engine import check_data
from simcse.files.storage import write_text_atomic
from simcse.research.reproduce import STS_TASKS

REPO = Path(__file__).resolve().parents[2]

DATA_BUDGET_BYTES = 40 * 2**20  # the whole data bundle, default of --data-mib

WIKI_LINES = 500_000  # default of --wiki-lines: cut to fit when the budget has less room

NLI_COLUMNS = ("sent0", "sent1", "hard_neg")  # part c's supervised run reads triplets

# the data bundle's files, as part c reads them
BUNDLE_WIKI, BUNDLE_NLI, BUNDLE_SENTEVAL = "wiki.txt.gz", "nli_for_simcse.csv", "senteval"

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

def version_floors(requirements) -> dict[str, str]:
    """The lower bounds of the runtime requirements in ``requirements`` (PEP 508 strings): ``name>=v``,
    ``name==v`` and ``name~=v`` give ``{name: v}``; requirements behind an ``extra`` marker, comments and blank
    lines are left out; a line that is not a requirement is skipped."""
    from packaging.requirements import InvalidRequirement, Requirement

    floors = {}
    for line in requirements:
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        try:
            req = Requirement(line)
        except InvalidRequirement:
            continue
        if req.marker is not None and "extra" in str(req.marker):
            continue
        for spec in req.specifier:
            if spec.operator in (">=", "==", "~="):
                floors[req.name] = spec.version
    return floors


def checkout_requirements(repo: Path = REPO) -> tuple[list[str], str]:
    """``(requirements, source)`` of the checkout at ``repo``: the installed ``simcse`` distribution's metadata
    (:func:`importlib.metadata.requires`) when that distribution is an editable install of ``repo``, else the
    lines of ``repo/requirements.txt`` (``([], "none")`` when neither is there). ``source`` names where they came from."""
    from importlib import metadata

    try:
        dist = metadata.distribution("simcse")
        url = json.loads(dist.read_text("direct_url.json") or "{}").get("url", "")
        if url.startswith("file://") and Path(url[len("file://"):]).resolve() == repo.resolve():
            return list(dist.requires or []), "the installed package's metadata"
    except (metadata.PackageNotFoundError, ValueError, OSError):
        pass
    try:
        return (repo / "requirements.txt").read_text(encoding="utf-8").splitlines(), "requirements.txt"
    except OSError:
        return [], "none"


def below_floors(installed: dict[str, str | None], floors: dict[str, str]) -> list[str]:
    """``"torch 2.11.0 < 2.13.0"`` for each installed package older than its floor (:func:`version_floors`)."""
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
def bundle_problems(data: Path) -> list[str]:
    """What the data bundle ``data`` (``<bundle>/data``) lacks for part c, one entry per missing input (empty when
    complete): the wiki text, the NLI triplets, and the SentEval files of the 7 STS tasks
    (:func:`simcse.evaluation.engine.check_data`, the evaluator's own rule)."""
    problems = [f"{name} ({what})" for name, what in ((BUNDLE_WIKI, "wiki sentences"), (BUNDLE_NLI, "NLI triplets"))
                if not (data / name).is_file()]
    try:
        check_data(data / BUNDLE_SENTEVAL, STS_TASKS)
    except FileNotFoundError as e:
        problems.append(str(e).split("; run ", 1)[0])
    return problems


def _mirror_problems(mirror: Path) -> list[str]:
    """What the data mirror lacks for ``--prepare``: every missing or unusable input, by name."""
    problems = []
    wiki, nli = mirror / "wiki1m_for_simcse.txt", mirror / "nli_for_simcse.csv"
    if not wiki.is_file():
        problems.append(f"{wiki.name} (the wiki sentences)")
    if not nli.is_file():
        problems.append(f"{nli.name} (the NLI triplets)")
    else:
        with open(nli, encoding="utf-8", newline="") as f:
            header = next(csv.reader(f), [])
        lacking = [c for c in NLI_COLUMNS if c not in header]
        if lacking:
            problems.append(f"{nli.name} has no column {', '.join(lacking)} (header {header}; expected {','.join(NLI_COLUMNS)})")
    try:
        check_data(mirror / "senteval" / "downstream", STS_TASKS)
    except FileNotFoundError as e:
        problems.append(str(e).split("; run ", 1)[0])
    return problems


def _tree_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def _write_nli(src: Path, dst: Path, rows: int | None, room: int) -> tuple[int, int]:
    """Copy the header and the first ``rows`` rows (all when None) of ``src`` to ``dst``, as many as fit in ``room``
    bytes (the file itself when it is copied whole, else rewritten row by row by :mod:`csv`); ``(rows written,
    rows in src)``.

    Raises:
        ValueError: an explicit ``rows`` that does not fit (the message names ``--nli-rows``).
    """
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")

    def encoded(row: list[str]) -> bytes:
        buf.seek(0)
        buf.truncate()
        writer.writerow(row)
        return buf.getvalue().encode("utf-8")

    with open(src, encoding="utf-8", newline="") as f:
        total = sum(1 for _ in csv.reader(f)) - 1
    if (rows is None or rows >= total) and src.stat().st_size <= room:
        shutil.copyfile(src, dst)  # whole: the same bytes
        return total, total
    written = total = 0
    full = False
    with open(src, encoding="utf-8", newline="") as f, open(dst, "wb") as out:
        reader = csv.reader(f)
        size = out.write(encoded(next(reader)))
        for row in reader:
            total += 1
            if full or (rows is not None and written >= rows):
                continue
            line = encoded(row)
            if size + len(line) > room:
                full = True
                continue
            size += out.write(line)
            written += 1
    if rows is not None and written < min(rows, total):
        raise ValueError(f"--nli-rows {rows}: only {written} NLI rows fit in the {room / 2**20:.1f} MiB the budget "
                         "leaves after the SentEval files; lower --nli-rows or raise --data-mib")
    return written, total


def _gzip_lines(src: Path, dst: Path, limit: int, stop_above: int | None = None) -> tuple[int, list[tuple[int, int]]]:
    """Write the first ``limit`` non-blank lines of ``src`` to ``dst``, gzip-compressed and flushed every 1000
    lines (so the same lines always give the same bytes); ``(lines written, [(lines, bytes so far)] at every
    flush)``. Stops early once the file passes ``stop_above`` bytes."""
    n, marks = 0, []
    with open(src, encoding="utf-8") as f, open(dst, "wb") as raw:
        with gzip.GzipFile(fileobj=raw, mode="wb", compresslevel=9, mtime=0) as gz:
            for line in f:
                if not line.strip():
                    continue
                if n >= limit:
                    break
                gz.write((line.rstrip("\n") + "\n").encode("utf-8"))
                n += 1
                if n % 1000 == 0:
                    gz.flush()
                    marks.append((n, raw.tell()))
                    if stop_above is not None and marks[-1][1] > stop_above:
                        break
    return n, marks


def _write_wiki(src: Path, dst: Path, lines: int | None, room: int) -> tuple[int, bool]:
    """The first non-blank lines of ``src`` gzip-compressed into ``dst``: ``lines`` of them (default
    :data:`WIKI_LINES`), fewer (a multiple of 1000) when ``room`` bytes hold fewer; ``(lines written, whether
    the budget cut them)``.

    Raises:
        ValueError: an explicit ``lines`` that does not fit (the message names ``--wiki-lines``), or not even
            1000 lines fit.
    """
    want = WIKI_LINES if lines is None else lines
    n, marks = _gzip_lines(src, dst, want, stop_above=room)
    if dst.stat().st_size <= room:
        return n, False
    fit = max((k for k, size in marks if size + 64 <= room), default=0)  # + the gzip trailer and last block
    if lines is not None or fit == 0:
        what = f"--wiki-lines {lines}" if lines is not None else "the wiki text"
        raise ValueError(f"{what}: only about {fit} wiki lines fit in the {room / 2**20:.2f} MiB the budget leaves "
                         "after the SentEval and NLI files; lower --wiki-lines or --nli-rows, or raise --data-mib")
    n, _ = _gzip_lines(src, dst, fit)
    return n, True


def prepare_data(bundle: Path, mirror: Path, wiki_lines: int | None = None, nli_rows: int | None = None,
                 budget_bytes: int = DATA_BUDGET_BYTES) -> dict:
    """Write the data bundle ``<bundle>/data/``: ``senteval/{STS,SICK}`` copied from ``mirror``, then
    ``nli_for_simcse.csv`` and ``wiki.txt.gz`` cut to fit ``budget_bytes`` together, and ``MANIFEST.json`` (what
    was cut, file sizes and sha256). Every input is checked before anything is written; the folder is built
    beside and renamed into place.

    The budget is filled in order. The SentEval files are needed whole. The NLI file comes next: all of it, or
    ``nli_rows`` rows, or, by default, as many rows as fit in half of what is left. The wiki text takes the
    rest: ``wiki_lines`` lines (default :data:`WIKI_LINES`, cut to what fits). A part that is cut is said
    (``manifest["cuts"]``); an explicit ``nli_rows`` or ``wiki_lines`` that does not fit is an error naming it.

    Raises:
        FileNotFoundError: inputs are missing or unusable (all of them are named: the wiki file, the NLI file or
            a triplet column of it, the STS12-16, STS-B or SICK files).
        ValueError: ``wiki_lines`` / ``nli_rows`` below 1; the SentEval files
            alone exceed the budget; an explicit ``nli_rows`` / ``wiki_lines`` does not fit (the message names it).
    """
    for name, value in (("wiki_lines", wiki_lines), ("nli_rows", nli_rows)):
        if value is not None and value < 1:
            raise ValueError(f"{name} must be >= 1, got {value}")
    problems = _mirror_problems(mirror)
    if problems:
        raise FileNotFoundError(f"data mirror {str(mirror)!r} cannot make the bundle: {'; '.join(problems)}")
    senteval = mirror / "senteval" / "downstream"
    fixed = _tree_bytes(senteval / "STS") + _tree_bytes(senteval / "SICK")
    if fixed > budget_bytes:
        raise ValueError(f"the SentEval STS and SICK files alone are {fixed / 2**20:.1f} MiB, over the "
                         f"{budget_bytes / 2**20:.0f} MiB budget (they cannot be cut): raise --data-mib")
    final, tmp = bundle / "data", bundle / "data.partial"
    shutil.rmtree(tmp, ignore_errors=True)
    (tmp / BUNDLE_SENTEVAL).mkdir(parents=True)
    try:
        for name in ("STS", "SICK"):
            shutil.copytree(senteval / name, tmp / BUNDLE_SENTEVAL / name)
        left = budget_bytes - fixed
        nli_room = left if nli_rows is not None else left // 2
        n_nli, nli_total = _write_nli(mirror / "nli_for_simcse.csv", tmp / BUNDLE_NLI, nli_rows, nli_room)
        wiki_room = left - (tmp / BUNDLE_NLI).stat().st_size
        n_wiki, wiki_cut = _write_wiki(mirror / "wiki1m_for_simcse.txt", tmp / BUNDLE_WIKI, wiki_lines, wiki_room)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    cuts = []
    if nli_rows is None and n_nli < nli_total:
        cuts.append(f"NLI cut to {n_nli} of {nli_total} rows to fit the budget (--nli-rows)")
    if wiki_cut:
        cuts.append(f"wiki cut to {n_wiki} of {WIKI_LINES} lines to fit the budget (--wiki-lines)")
    files = sorted(p for p in tmp.rglob("*") if p.is_file())
    total = sum(p.stat().st_size for p in files)
    if total > budget_bytes:  # the wiki margin covers the compressor's buffer; never ship over the budget
        shutil.rmtree(tmp)
        raise ValueError(f"the data bundle came to {total / 2**20:.1f} MiB, over the {budget_bytes / 2**20:.0f} MiB "
                         "budget: lower --wiki-lines")
    manifest = {"wiki_lines": n_wiki, "nli_rows": n_nli, "bytes": total, "budget_bytes": budget_bytes,
                "mirror": mirror.name, "cuts": cuts,
                "parts_bytes": {"senteval": fixed, "nli": (tmp / BUNDLE_NLI).stat().st_size,
                                "wiki": (tmp / BUNDLE_WIKI).stat().st_size},
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
    the environment's own torch/transformers whatever the package's floors say; report what is below a floor
    (the floors from :func:`checkout_requirements`: the package metadata of the editable install, else
    requirements.txt).

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
    requirements, report["floors_from"] = checkout_requirements()
    report["below_floors"] = below_floors(installed_versions(), version_floors(requirements))
    return report
