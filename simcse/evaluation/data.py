"""Readers for SentEval's ``data/downstream`` layout, and the lookup of that folder.

Every reader returns sentences as SentEval's batchers see them: the line split on whitespace and joined
back with single spaces (``" ".join(text.split())``), so the same sentence in two tasks is one string and
is encoded once. Parsed files are cached per process (keyed on the resolved path and its mtime).

File formats (facts about the public data, see ``data/download_senteval.sh``):

* ``STS/STS1x-en-test/STS.input.<subset>.txt``: ``sentence1<TAB>sentence2`` per line, UTF-8;
  ``STS.gs.<subset>.txt``: one gold score per line; an empty line means "not scored" and the pair is
  skipped (STS15 and STS16 have such lines).
* ``STS/STSBenchmark/sts-{train,dev,test}.csv``: tab-separated, score in column 5, sentences in 6 and 7.
* ``SICK/SICK_{train,trial,test_annotated}.txt``: header line, then id, sentence A, sentence B,
  relatedness score (1-5), entailment label.
* ``MR``, ``CR``, ``SUBJ``, ``MPQA``: one sentence per line, read as latin-1 (as SentEval does).
* ``SST/binary/sentiment-{train,dev,test}``: ``sentence<TAB>label``.
* ``TREC/{train_5500,TREC_10}.label``: ``COARSE:fine sentence``, latin-1.
* ``MRPC/msr_paraphrase_{train,test}.txt``: header line, then label, id, id, sentence 1, sentence 2.
"""
from __future__ import annotations

import functools
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from simcse.files.inputs import lines_of, open_text

DOWNLOAD_HINT = "`simcse download senteval` (in a checkout: `bash data/download_senteval.sh`)"

STS_SUBSETS: dict[str, tuple[str, ...]] = {
    "STS12": ("MSRpar", "MSRvid", "SMTeuroparl", "surprise.OnWN", "surprise.SMTnews"),
    # STS13's SMT input is licensed separately and is absent, as in SentEval.
    "STS13": ("FNWN", "headlines", "OnWN"),
    "STS14": ("deft-forum", "deft-news", "headlines", "images", "OnWN", "tweet-news"),
    "STS15": ("answers-forums", "answers-students", "belief", "headlines", "images"),
    "STS16": ("answer-answer", "headlines", "plagiarism", "postediting", "question-question"),
}
SPLIT_PAIR_FILES: dict[str, tuple[str, dict[str, str]]] = {
    "STSBenchmark": ("STS/STSBenchmark", {"train": "sts-train.csv", "dev": "sts-dev.csv", "test": "sts-test.csv"}),
    "SICKRelatedness": ("SICK", {"train": "SICK_train.txt", "dev": "SICK_trial.txt", "test": "SICK_test_annotated.txt"}),
}
# binary tasks: folder, file read as label 1, file read as label 0 (SentEval's assignment; SUBJ: objective=1)
BINARY_FILES: dict[str, tuple[str, str, str]] = {
    "MR": ("MR", "rt-polarity.pos", "rt-polarity.neg"),
    "CR": ("CR", "custrev.pos", "custrev.neg"),
    "SUBJ": ("SUBJ", "subj.objective", "subj.subjective"),
    "MPQA": ("MPQA", "mpqa.pos", "mpqa.neg"),
}
SST2_FILES = ("SST/binary", {"train": "sentiment-train", "dev": "sentiment-dev", "test": "sentiment-test"})
TREC_FILES = ("TREC", {"train": "train_5500.label", "test": "TREC_10.label"})
TREC_CLASSES = ("ABBR", "DESC", "ENTY", "HUM", "LOC", "NUM")
MRPC_FILES = ("MRPC", {"train": "msr_paraphrase_train.txt", "test": "msr_paraphrase_test.txt"})


def resolve_senteval_dir(path: str | os.PathLike | None = None) -> Path:
    """The SentEval ``downstream`` folder to read.

    Order: ``path`` if given; else ``$SIMCSE_SENTEVAL_DIR``; else ``$SIMCSE_DATA_MIRROR/senteval/downstream``
    when ``SIMCSE_DATA_MIRROR`` is set; else ``data/downstream`` relative to the working directory (where
    ``simcse download senteval`` puts it).

    Raises:
        FileNotFoundError: the chosen folder does not exist (the message names it and the download script).
    """
    if path is not None:
        folder, how = Path(path), "given path"
    elif os.environ.get("SIMCSE_SENTEVAL_DIR"):
        folder, how = Path(os.environ["SIMCSE_SENTEVAL_DIR"]), "$SIMCSE_SENTEVAL_DIR"
    elif os.environ.get("SIMCSE_DATA_MIRROR"):
        folder, how = Path(os.environ["SIMCSE_DATA_MIRROR"]) / "senteval" / "downstream", "$SIMCSE_DATA_MIRROR/senteval/downstream"
    else:
        folder, how = Path("data/downstream"), "default data/downstream"
    if not folder.is_dir():
        raise FileNotFoundError(
            f"SentEval data folder {str(folder)!r} ({how}) does not exist; run {DOWNLOAD_HINT} "
            "in the working folder, or point SIMCSE_SENTEVAL_DIR / --data_dir at a SentEval data/downstream folder"
        )
    return folder


def missing_files(data_dir: Path, task: str, splits=None) -> tuple[Path, list[str]]:
    """The folder of ``task`` under ``data_dir`` and the file names missing there (empty when complete).
    ``splits``: for STS-B and SICK-R, only these splits' files are needed (None: every split's); a scoring on
    ``dev`` then never asks for the test file."""
    folder, names = _task_files(data_dir, task)
    if splits is not None and task in SPLIT_PAIR_FILES:
        names = [SPLIT_PAIR_FILES[task][1][s] for s in splits if s in SPLIT_PAIR_FILES[task][1]]
    return folder, [n for n in names if not (folder / n).is_file()]


def _task_files(data_dir: Path, task: str) -> tuple[Path, list[str]]:
    if task in STS_SUBSETS:
        names = [f"STS.{kind}.{s}.txt" for s in STS_SUBSETS[task] for kind in ("input", "gs")]
        return data_dir / "STS" / f"{task}-en-test", names
    if task in SPLIT_PAIR_FILES:
        sub, files = SPLIT_PAIR_FILES[task]
        return data_dir / sub, list(files.values())
    if task in BINARY_FILES:
        sub, pos, neg = BINARY_FILES[task]
        return data_dir / sub, [pos, neg]
    table = {"SST2": SST2_FILES, "TREC": TREC_FILES, "MRPC": MRPC_FILES}
    if task in table:
        sub, files = table[task]
        return data_dir / sub, list(files.values())
    raise ValueError(f"unknown task {task!r}")


# ------------------------------------------------------------------------------------------ records
@dataclass(frozen=True)
class ScoredPairs:
    """Sentence pairs with a gold similarity score (one STS subset or one STS-B / SICK split)."""

    sent1: tuple[str, ...]
    sent2: tuple[str, ...]
    scores: np.ndarray  # float64 (n,)

    def __len__(self) -> int:
        return len(self.scores)


@dataclass(frozen=True)
class Labelled:
    """Sentences with integer class labels, in SentEval's order (see :func:`senteval_order`)."""

    sentences: tuple[str, ...]
    labels: np.ndarray  # int64 (n,)

    def __len__(self) -> int:
        return len(self.labels)


@dataclass(frozen=True)
class LabelledPairs:
    """Sentence pairs with integer labels (MRPC), in SentEval's order."""

    sent1: tuple[str, ...]
    sent2: tuple[str, ...]
    labels: np.ndarray

    def __len__(self) -> int:
        return len(self.labels)


def normalize(text: str) -> str:
    """A sentence as SentEval hands it to the encoder: whitespace tokens joined by one space."""
    return " ".join(text.split())


def senteval_order(keys: list[tuple]) -> np.ndarray:
    """Indices that sort examples the way SentEval does before encoding (stable sort on ``keys``).

    SentEval sorts each task by (token count, label) (pairs: (len A, len B, label)) and then builds its
    stratified folds over that order, so the same order gives the same folds as SentEval.
    """
    return np.array(sorted(range(len(keys)), key=keys.__getitem__), dtype=np.int64)


def _cache_key(path: Path) -> tuple[str, int, int]:
    st = path.stat()
    return str(path.resolve()), st.st_mtime_ns, st.st_size


def _cached(fn):
    """Cache a reader whose arguments are all file paths, on each file's (resolved path, mtime, size)."""

    @functools.lru_cache(maxsize=256)
    def inner(*keys):
        return fn(*(Path(k[0]) for k in keys))

    @functools.wraps(fn)
    def wrapper(*paths):
        return inner(*(_cache_key(Path(p)) for p in paths))

    wrapper.cache_clear = inner.cache_clear  # type: ignore[attr-defined]
    return wrapper


def _not_decodable(path: Path, encoding: str, err: UnicodeDecodeError) -> ValueError:
    """A ValueError naming the file, line and byte that ``encoding`` cannot decode."""
    from simcse.files.inputs import first_undecodable_line

    bad = first_undecodable_line(path, encoding)
    if bad is None:
        return ValueError(f"{path}: not valid {encoding} ({err})")
    line, byte, char = bad
    return ValueError(f"{path}:{line}: byte {byte} ({char!r}) is not valid {encoding}; "
                      f"expected a {encoding} text file as SentEval distributes it")


def _read_lines(path: Path, encoding: str) -> list[str]:
    try:
        with open_text(path, encoding) as f:  # lines split only at "\n", as wc -l counts (simcse.files.inputs)
            return list(lines_of(f))
    except UnicodeDecodeError as e:
        raise _not_decodable(path, encoding, e) from None


def _rows(path: Path, encoding: str = "utf-8") -> list[list[str]]:
    try:
        with open_text(path, encoding) as f:
            return [line.strip().split("\t") for line in f]
    except UnicodeDecodeError as e:
        raise _not_decodable(path, encoding, e) from None


def _float(text: str, path: Path, line_no: int) -> float:
    try:
        return float(text)
    except ValueError:
        raise ValueError(f"{path}:{line_no}: expected a number, got {text!r}") from None


# ------------------------------------------------------------------------------------------ readers
@_cached
def read_sts_subset(inp: Path, gs: Path) -> ScoredPairs:
    """One STS12-16 subset (input and gold files); pairs whose gold line is empty are skipped."""
    lines, gold = _read_lines(inp, "utf-8"), _read_lines(gs, "utf-8")
    if len(lines) != len(gold):
        raise ValueError(f"{inp} has {len(lines)} lines but {gs} has {len(gold)}")
    s1, s2, scores = [], [], []
    for i, (line, g) in enumerate(zip(lines, gold), 1):
        if g == "":
            continue
        cols = line.split("\t")
        if len(cols) < 2:
            raise ValueError(f"{inp}:{i}: expected two tab-separated sentences")
        s1.append(normalize(cols[0]))
        s2.append(normalize(cols[1]))
        scores.append(_float(g, gs, i))
    return ScoredPairs(tuple(s1), tuple(s2), np.asarray(scores, dtype=np.float64))


@_cached
def read_stsb(path: Path) -> ScoredPairs:
    """One STS-B split (``sts-*.csv``)."""
    s1, s2, scores = [], [], []
    for i, cols in enumerate(_rows(path), 1):
        if len(cols) < 7:
            raise ValueError(f"{path}:{i}: expected >= 7 tab-separated columns, got {len(cols)}")
        s1.append(normalize(cols[5]))
        s2.append(normalize(cols[6]))
        scores.append(_float(cols[4], path, i))
    return ScoredPairs(tuple(s1), tuple(s2), np.asarray(scores, dtype=np.float64))


@_cached
def read_sick(path: Path) -> ScoredPairs:
    """One SICK split (relatedness score in column 4); the header line is skipped."""
    s1, s2, scores = [], [], []
    for i, cols in enumerate(_rows(path)[1:], 2):
        if len(cols) < 4:
            raise ValueError(f"{path}:{i}: expected >= 4 tab-separated columns, got {len(cols)}")
        s1.append(normalize(cols[1]))
        s2.append(normalize(cols[2]))
        scores.append(_float(cols[3], path, i))
    return ScoredPairs(tuple(s1), tuple(s2), np.asarray(scores, dtype=np.float64))


def read_split_pairs(data_dir: Path, task: str, split: str) -> ScoredPairs:
    sub, files = SPLIT_PAIR_FILES[task]
    reader = read_stsb if task == "STSBenchmark" else read_sick
    return reader(data_dir / sub / files[split])


@_cached
def read_binary(pos_path: Path, neg_path: Path) -> Labelled:
    """MR / CR / SUBJ / MPQA: latin-1 lines, label 1 for ``pos_path``; SentEval order."""
    pos = [normalize(x) for x in _read_lines(pos_path, "latin-1")]
    neg = [normalize(x) for x in _read_lines(neg_path, "latin-1")]
    sents, labels = pos + neg, [1] * len(pos) + [0] * len(neg)
    order = senteval_order([(len(s.split()), y) for s, y in zip(sents, labels)])
    return Labelled(tuple(sents[i] for i in order), np.asarray(labels, dtype=np.int64)[order])


@_cached
def read_sst2(path: Path) -> Labelled:
    sents, labels = [], []
    for i, cols in enumerate(_rows(path), 1):
        if len(cols) < 2:
            raise ValueError(f"{path}:{i}: expected 'sentence<TAB>label'")
        sents.append(normalize(cols[0]))
        labels.append(int(_float(cols[1], path, i)))
    order = senteval_order([(len(s.split()), y) for s, y in zip(sents, labels)])
    return Labelled(tuple(sents[i] for i in order), np.asarray(labels, dtype=np.int64)[order])


@_cached
def read_trec(path: Path) -> Labelled:
    sents, labels = [], []
    with open_text(path, "latin-1") as f:
        for i, line in enumerate(f, 1):
            target, _, rest = line.strip().partition(":")
            if target not in TREC_CLASSES or " " not in rest:
                raise ValueError(f"{path}:{i}: expected 'COARSE:fine question', got {line.strip()!r}")
            sents.append(normalize(rest.split(" ", 1)[1]))
            labels.append(TREC_CLASSES.index(target))
    order = senteval_order([(len(s.split()), y) for s, y in zip(sents, labels)])
    return Labelled(tuple(sents[i] for i in order), np.asarray(labels, dtype=np.int64)[order])


@_cached
def read_mrpc(path: Path) -> LabelledPairs:
    s1, s2, labels = [], [], []
    for i, cols in enumerate(_rows(path, "utf-8")[1:], 2):
        if len(cols) < 5:
            raise ValueError(f"{path}:{i}: expected 5 tab-separated columns, got {len(cols)}")
        s1.append(normalize(cols[3]))
        s2.append(normalize(cols[4]))
        labels.append(int(_float(cols[0], path, i)))
    order = senteval_order([(len(a.split()), len(b.split()), y) for a, b, y in zip(s1, s2, labels)])
    return LabelledPairs(tuple(s1[i] for i in order), tuple(s2[i] for i in order), np.asarray(labels, dtype=np.int64)[order])


# ------------------------------------------------------------------------------ STS-B by split (analyses)
STSB_SPLITS = ("train", "dev", "test")


def load_stsb(data_dir: str | os.PathLike | None = None, split: str = "dev") -> ScoredPairs:
    """STS-B ``split`` of a SentEval folder (``<data_dir>/STS/STSBenchmark/sts-{split}.csv``, each file read by
    :func:`read_stsb`; sentences normalised as SentEval's batchers see them). The analyses, the ablation
    runner and the alignment/uniformity callback read STS-B through this function.

    Args:
        data_dir: SentEval's ``data/downstream`` folder; default as
            :func:`resolve_senteval_dir` (``$SIMCSE_SENTEVAL_DIR``, then
            ``$SIMCSE_DATA_MIRROR/senteval/downstream``, then ``data/downstream``).
        split: ``"train"``, ``"dev"``, ``"test"`` or ``"all"`` (the three concatenated in that order).

    Returns:
        :class:`ScoredPairs`: ``sent1``, ``sent2`` (tuples of N str), ``scores``
        float64 (N,) on STS-B's 0-5 scale.

    Raises:
        ValueError: an unknown split, or a malformed line (file and line named by the reader).
        FileNotFoundError: the folder or the split's file is missing.
    """
    if split not in STSB_SPLITS + ("all",):
        raise ValueError(f"split must be one of {list(STSB_SPLITS) + ['all']}, got {split!r}")
    folder = resolve_senteval_dir(data_dir)
    parts = []
    for name in STSB_SPLITS if split == "all" else (split,):
        path = folder / "STS" / "STSBenchmark" / f"sts-{name}.csv"
        if not path.is_file():
            raise FileNotFoundError(f"STS-B {name} file {str(path)!r} is missing (SentEval layout under {str(folder)!r})")
        parts.append(read_split_pairs(folder, "STSBenchmark", name))
    if len(parts) == 1:
        return parts[0]
    return ScoredPairs(sum((p.sent1 for p in parts), ()), sum((p.sent2 for p in parts), ()),
                       np.concatenate([p.scores for p in parts]))
