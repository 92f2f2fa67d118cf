"""Get the SimCSE data: ``simcse download wiki|nli|senteval|all [--dest PATH]``.

* ``wiki``: ``wiki1m_for_simcse.txt`` (unsupervised training, 10^6 Wikipedia sentences), default ``data/``.
* ``nli``: ``nli_for_simcse.csv`` (supervised triplets sent0,sent1,hard_neg), default ``data/``.
* ``senteval``: SentEval's ``data/downstream`` folder (STS12-16, STS-B, SICK-R, 7 transfer tasks), default
  ``data/downstream``, the folder :func:`simcse.evaluation.resolve_senteval_dir` reads.

Defaults are relative to the working folder, where the packaged configs (``data/wiki1m_for_simcse.txt``...)
look. With ``$SIMCSE_DATA_MIRROR`` (or ``--mirror``) naming a folder that holds the same names
(``wiki1m_for_simcse.txt``, ``nli_for_simcse.csv``, ``senteval/downstream/``), nothing is downloaded: the
files are linked and the SentEval folder copied from there. Otherwise they come from the public location the
reference project's scripts use. Only the standard library is used, so ``python simcse/files/download.py ...``
also runs without the package's dependencies (``data/download_*.sh`` do that).
"""
from __future__ import annotations

import argparse
import os
import shutil
import sys
import tarfile
import tempfile
import urllib.request
from pathlib import Path

BASE_URL = "https://huggingface.co/datasets/princeton-nlp/datasets-for-simcse/resolve/main/"
FILES = {"wiki": "wiki1m_for_simcse.txt", "nli": "nli_for_simcse.csv"}
SENTEVAL_ARCHIVE = "senteval.tar"
# a few files of every task: the folder counts as complete when all are there
SENTEVAL_REQUIRED = (
    "STS/STS12-en-test/STS.input.MSRpar.txt", "STS/STS13-en-test/STS.input.FNWN.txt",
    "STS/STS14-en-test/STS.input.images.txt", "STS/STS15-en-test/STS.input.belief.txt",
    "STS/STS16-en-test/STS.input.headlines.txt", "STS/STSBenchmark/sts-test.csv",
    "SICK/SICK_test_annotated.txt", "MR/rt-polarity.pos", "CR/custrev.pos", "SUBJ/subj.objective", "MPQA/mpqa.pos",
    "SST/binary/sentiment-train", "TREC/train_5500.label", "MRPC/msr_paraphrase_train.txt",
)
NAMES = ("wiki", "nli", "senteval")


def _say(msg: str) -> None:
    print(f"[simcse] {msg}", file=sys.stderr)


def _mirror(mirror: str | os.PathLike | None) -> Path | None:
    """The mirror folder (argument, else ``$SIMCSE_DATA_MIRROR``), or None. ValueError when it is not a folder."""
    mirror = mirror if mirror is not None else os.environ.get("SIMCSE_DATA_MIRROR") or None
    if mirror is None:
        return None
    p = Path(mirror).expanduser()
    if not p.is_dir():
        raise ValueError(f"SIMCSE_DATA_MIRROR={str(mirror)!r} is not a folder")
    return p.resolve()


def _fetch_url(url: str, dest: Path) -> None:
    """Download ``url`` to ``dest`` through ``dest.part`` (a failed download leaves no partial ``dest``)."""
    part = dest.with_name(dest.name + ".part")
    _say(f"downloading {url}")
    try:
        with urllib.request.urlopen(url, timeout=60) as r, open(part, "wb") as f:
            shutil.copyfileobj(r, f, length=1 << 20)
    except OSError as e:
        part.unlink(missing_ok=True)
        raise OSError(f"cannot download {url}: {e}; set SIMCSE_DATA_MIRROR to a folder holding the data "
                      "when this machine has no internet") from e
    os.replace(part, dest)


def download_file(name: str, dest: str | os.PathLike | None = None, mirror: str | os.PathLike | None = None) -> Path:
    """Put ``wiki`` or ``nli`` at ``dest`` (default ``data/<file name>``); return its path.

    An existing non-empty ``dest`` is kept. From a mirror the file is a symbolic link to the mirror's copy.

    Raises:
        ValueError: unknown name, or a mirror that is not a folder.
        FileNotFoundError: the mirror lacks the file.
        OSError: the download failed.
    """
    if name not in FILES:
        raise ValueError(f"unknown data set {name!r}; expected one of {list(FILES)}")
    fname = FILES[name]
    dest = Path(dest) if dest is not None else Path("data") / fname
    if dest.is_file() and dest.stat().st_size > 0:
        _say(f"{dest} already present")
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    src = _mirror(mirror)
    if src is not None:
        if not (src / fname).is_file() or (src / fname).stat().st_size == 0:
            raise FileNotFoundError(f"SIMCSE_DATA_MIRROR={str(src)!r} has no {fname}")
        if dest.is_symlink():
            dest.unlink()  # a dangling link from an earlier mirror
        os.symlink(src / fname, dest)
        _say(f"linked {dest} -> {src / fname}")
    else:
        _fetch_url(BASE_URL + fname, dest)
    return dest


def _copy_writable(src: Path, dest: Path) -> None:
    """Copy the tree ``src`` into ``dest``: contents only, so a read-only mirror gives writable copies."""
    for folder, _, files in os.walk(src):
        target = dest / Path(folder).relative_to(src)
        target.mkdir(parents=True, exist_ok=True)
        for f in files:
            shutil.copyfile(Path(folder) / f, target / f)


def senteval_complete(folder: str | os.PathLike) -> bool:
    """True when ``folder`` holds SentEval's ``downstream`` layout (a sample file of every task)."""
    return all((Path(folder) / f).is_file() for f in SENTEVAL_REQUIRED)


def download_senteval(dest: str | os.PathLike | None = None, mirror: str | os.PathLike | None = None) -> Path:
    """Put SentEval's ``data/downstream`` folder at ``dest`` (default ``data/downstream``); return it.

    A complete ``dest`` is kept. From a mirror, ``<mirror>/senteval/downstream`` is copied (made writable);
    otherwise the reference's preprocessed archive is downloaded and unpacked.

    Raises:
        FileNotFoundError: the mirror's copy is incomplete, or the archive lacks STS/STSBenchmark.
        OSError: the download failed.
    """
    dest = Path(dest) if dest is not None else Path("data") / "downstream"
    if senteval_complete(dest):
        _say(f"SentEval data already present in {dest}")
        return dest
    src = _mirror(mirror)
    if src is not None:
        root = src / "senteval" / "downstream"
        if not senteval_complete(root):
            raise FileNotFoundError(f"SIMCSE_DATA_MIRROR is set but {root} is missing or incomplete")
        _copy_writable(root, dest)
        _say(f"copied SentEval data from {root} to {dest}")
    else:
        with tempfile.TemporaryDirectory() as tmp:
            archive = Path(tmp) / SENTEVAL_ARCHIVE
            _fetch_url(BASE_URL + SENTEVAL_ARCHIVE, archive)
            with tarfile.open(archive) as tar:
                tar.extractall(tmp, filter="data")
            stsb = next(Path(tmp).rglob("STSBenchmark"), None)  # the archive's top folder name has varied
            if stsb is None:
                raise FileNotFoundError(f"{BASE_URL + SENTEVAL_ARCHIVE} did not contain STS/STSBenchmark")
            _copy_writable(stsb.parent.parent, dest)
        _say(f"extracted SentEval data to {dest}")
    if not senteval_complete(dest):
        missing = [f for f in SENTEVAL_REQUIRED if not (dest / f).is_file()]
        raise FileNotFoundError(f"{dest} is still missing files, e.g. {missing[:3]}")
    return dest


def download(name: str, dest: str | os.PathLike | None = None, mirror: str | os.PathLike | None = None) -> Path:
    """``wiki``, ``nli`` (:func:`download_file`) or ``senteval`` (:func:`download_senteval`)."""
    if name == "senteval":
        return download_senteval(dest, mirror)
    return download_file(name, dest, mirror)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="simcse download", description=__doc__.split("\n\n")[0])
    p.add_argument("name", choices=[*NAMES, "all"], help="data set (all: the three)")
    p.add_argument("--dest", default=None, help="file (wiki, nli) or folder (senteval) to write; default under data/")
    p.add_argument("--mirror", default=None, help="local folder with the data (default: $SIMCSE_DATA_MIRROR)")
    return p


def main(argv: list[str] | None = None) -> int:
    """Run ``simcse download``; return the exit status (errors: one ``error: ...`` line, status 1)."""
    args = build_parser().parse_args(argv)
    if args.name == "all" and args.dest is not None:
        print("error: --dest names one file or folder; give a single data set with it", file=sys.stderr)
        return 2
    try:
        for name in NAMES if args.name == "all" else (args.name,):
            print(download(name, args.dest, args.mirror))
    except (OSError, ValueError, tarfile.TarError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
