"""Training data: readers for the unsupervised text file and the supervised CSV, tokenisation, collator.

Every example is stored as ``V`` tokenised *views* (``input_ids``: list of V token lists):
V = 1 for one-sentence-per-line text (the collator repeats it, so dropout makes the two views),
V = 2 for ``sent0,sent1`` pair CSVs, V = 3 for ``sent0,sent1,hard_neg`` triplet CSVs.
The collator pads every view of the batch to the longest one and returns (B, V, L) tensors.

Why one module: the readers, the blank/incomplete-row rule, tokenisation into views and the collator are one
pipeline whose row layout (``V`` views per example) each step relies on; split, that layout would be defined twice.
"""
from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path

import torch

from simcse.files.inputs import cell_text, first_undecodable_line, iter_lines, open_bytes, open_text
from simcse.files.checks import check_int

logger = logging.getLogger(__name__)

DOWNLOAD_HINT = {
    "wiki1m_for_simcse.txt": "`simcse download wiki` (in a checkout: `bash data/download_wiki.sh`)",
    "nli_for_simcse.csv": "`simcse download nli` (in a checkout: `bash data/download_nli.sh`)",
}
PAIR_COLUMNS = ("sent0", "sent1")
TRIPLET_COLUMNS = ("sent0", "sent1", "hard_neg")
NEUTRAL_COLUMN = "neutral"
DRAW_KEY = "draw_key"  # set by KeyedDataset: the example's position epoch * n + row, seeds its random draws


def _hint(path: Path) -> str:
    script = DOWNLOAD_HINT.get(path.name)
    return f" (get it with {script})" if script else ""


def default_data_file(name: str) -> Path:
    """Where a data file the download scripts fetch (``wiki1m_for_simcse.txt``, ``nli_for_simcse.csv``) is looked for.

    ``$SIMCSE_DATA_MIRROR/<name>`` when that variable is set and the file exists there, else ``data/<name>``
    relative to the working directory (where ``bash data/download_*.sh`` puts it). The path is returned even
    when the file is missing, so the reader's error names it and its download script.
    """
    mirror = os.environ.get("SIMCSE_DATA_MIRROR")
    if mirror and (Path(mirror) / name).is_file():
        return Path(mirror) / name
    return Path("data") / name


def read_sentences(path: str | os.PathLike, max_sentences: int | None = None) -> list[str]:
    """Non-blank lines of a UTF-8 text file (one sentence per line), stripped, at most ``max_sentences``.

    Raises:
        FileNotFoundError: no such file.
        ValueError: the file has no non-blank line, or ``max_sentences`` < 1.
    """
    if max_sentences is not None and max_sentences < 1:
        raise ValueError(f"max_sentences must be >= 1, got {max_sentences}")
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"sentence file {str(p)!r} does not exist")

    out: list[str] = []
    with open_text(p) as f:  # lines split only at "\n" (simcse.files.inputs)
        for line in f:
            s = line.strip()
            if s:
                out.append(s)
                if max_sentences is not None and len(out) >= max_sentences:
                    break
    if not out:
        raise ValueError(f"sentence file {str(p)!r} has no non-blank line")
    return out


def check_train_file(path: str | os.PathLike) -> Path:
    """Return ``path`` as a Path after checking it is a non-empty readable .txt/.csv(.gz) file.

    Raises:
        FileNotFoundError: missing file (the message names the download script for the official files).
        ValueError: an empty file or an unsupported extension.
    """
    p = Path(path)
    if p.exists() and not p.is_file():
        raise ValueError(f"train_file {str(p)!r} is not a regular file (a directory?); expected a .txt or .csv file")
    if not p.is_file():
        raise FileNotFoundError(f"train_file {str(p)!r} does not exist{_hint(p)}")
    if not os.access(p, os.R_OK):
        raise PermissionError(f"train_file {str(p)!r} cannot be read (permission denied)")
    if p.stat().st_size == 0:
        raise ValueError(f"train_file {str(p)!r} is empty{_hint(p)}")
    if not (p.suffix == ".txt" or p.name.endswith((".csv", ".csv.gz", ".tsv"))):
        raise ValueError(f"train_file {str(p)!r}: expected a .txt (one sentence per line) or .csv file")
    return p


def _first_non_utf8_line(p: Path) -> str | None:
    """``"line N, byte M (b'\\xff')"`` for the first line of ``p`` that is not valid UTF-8, else None."""
    bad = first_undecodable_line(p)
    return None if bad is None else f"line {bad[0]}, byte {bad[1]} ({bad[2]!r})"


def _string_features(p: Path, sep: str):
    """``datasets.Features`` reading every column of the CSV ``p`` as text, or None when its header is unusual.

    Without it pandas infers column types, and a column whose cells all look like numbers or booleans
    ("1", "2.5", "True") would become numeric and every row would be dropped as incomplete.
    """
    import csv

    import datasets

    quoting = csv.QUOTE_NONE if sep == "\t" else csv.QUOTE_MINIMAL
    try:
        with open_bytes(p) as f:
            header = next(csv.reader([f.readline().decode("utf-8-sig")], delimiter=sep, quoting=quoting), [])
    except (UnicodeDecodeError, csv.Error, OSError):
        return None
    if not header or len(set(header)) != len(header) or not all(h.strip() for h in header):
        return None  # pandas renames such columns itself; let it infer types there
    return datasets.Features({h: datasets.Value("string") for h in header})


def _text_lines(path: str, stamp: str, nonblank_limit: int | None = None):
    kept = 0
    for line in iter_lines(path):
        if kept == nonblank_limit:  # None: no limit
            return
        kept += bool(line.strip())
        yield {"text": line}


def _text_dataset(p: Path, nonblank_limit: int | None = None):
    """A ``datasets.Dataset`` with a ``text`` column: line i of ``p`` in row i, lines split only at ``"\\n"``
    (:func:`simcse.files.inputs.iter_lines`; HF's "text" builder splits at every ``str.splitlines()`` break, so a
    lone ``"\\r"`` made two training sentences of one line). Cached like any dataset; the cache key holds
    the file's size and modification time. ``nonblank_limit`` (``--max_train_samples``): read only up to that
    many non-blank lines (the same rows as a full read, without reading all of a 1M-line file)."""
    import datasets

    st = p.stat()
    return datasets.Dataset.from_generator(
        _text_lines, features=datasets.Features({"text": datasets.Value("string")}),
        gen_kwargs={"path": str(p.resolve()), "stamp": f"{st.st_size}:{st.st_mtime_ns}",
                    "nonblank_limit": nonblank_limit})


def _count_nonblank_lines(p: Path) -> int:
    with open_bytes(p) as f:
        return sum(1 for raw in f if raw.strip())


def load_sentence_dataset(path: str | os.PathLike, max_train_samples: int | None = None, neutral: bool = False,
                          label_columns: tuple[str, ...] = ()):
    """Load a training file as a ``datasets.Dataset`` with a column per view.

    * ``.txt``: one sentence per line -> column ``sent0``; blank lines are skipped and counted in the log.
    * ``.csv``: header with ``sent0,sent1`` (pairs) and optionally ``hard_neg`` (triplets); other columns are
      ignored; rows with an empty cell in a used column are skipped and counted in the log. Standard CSV
      quoting (RFC 4180: a field in double quotes may hold commas, newlines and ``""`` for a quote).
    * ``.tsv``: the same header, tab-separated, read *without* quoting: every field is exactly the text
      between two tabs (quotes are ordinary characters). A field cannot hold a tab or a newline; a row with
      more fields than the header is an error naming its line.
    * ``neutral=True`` (paper Table 7, "contradiction + neutral"): the CSV must also have ``hard_neg`` and
      ``neutral`` columns; the neutral hypothesis becomes a fourth view, used as one more negative.
    * ``label_columns`` (the objective's, e.g. ``score`` of ``sent0,sent1,score``): kept when the CSV has
      them, as float64 numbers (:func:`numeric_label_columns`); they are not views.

    Returns (dataset, view_columns).

    Raises:
        FileNotFoundError / ValueError: see :func:`check_train_file`; a CSV without ``sent0``/``sent1``;
        a file with no usable row; ``neutral=True`` with a .txt file or a CSV without ``hard_neg``/``neutral``.
    """
    import csv

    import datasets

    p = check_train_file(path)
    sep = None
    try:
        if p.suffix == ".txt":
            ds = _text_dataset(p, max_train_samples)  # read only the lines the run uses
        else:
            sep, quoting = ("\t", csv.QUOTE_NONE) if p.name.endswith(".tsv") else (",", csv.QUOTE_MINIMAL)
            ds = datasets.load_dataset("csv", data_files=str(p), split="train", sep=sep, keep_default_na=False,
                                       quoting=quoting, features=_string_features(p, sep))
    except (ValueError, UnicodeDecodeError, datasets.exceptions.DatasetGenerationError) as e:
        bad = _first_non_utf8_line(p)
        if bad is not None:
            raise ValueError(f"train_file {str(p)!r} is not UTF-8 text at {bad}; expected UTF-8 "
                             "(re-encode it, e.g. with iconv -t utf-8)") from e
        if p.suffix != ".txt" and _count_nonblank_lines(p) <= 1:
            raise ValueError(f"train_file {str(p)!r} has a header but no data rows") from e
        cause = e.__cause__ or e
        tsv = " (in a .tsv file every tab separates two fields: a field cannot hold a tab)" if sep == "\t" else ""
        raise ValueError(f"train_file {str(p)!r} could not be read as {'UTF-8 text' if p.suffix == '.txt' else 'a CSV with a header'}: "
                         f"{type(cause).__name__}: {str(cause).splitlines()[0] if str(cause) else ''}{tsv}") from e
    if len(ds) == 0:
        raise ValueError(f"train_file {str(p)!r} has a header but no data rows")
    if p.suffix == ".txt":
        if neutral:
            raise ValueError(f"--neutral_as_negative needs a CSV with a {NEUTRAL_COLUMN!r} column; train_file {str(p)!r} is plain text")
        ds = ds.rename_column("text", "sent0")
        columns = ["sent0"]
    else:
        present = set(ds.column_names)
        if not set(PAIR_COLUMNS) <= present:
            raise ValueError(
                f"train_file {str(p)!r} has columns {ds.column_names}; expected a header with "
                f"'sent0,sent1' (pairs) or 'sent0,sent1,hard_neg' (triplets)"
            )
        columns = list(TRIPLET_COLUMNS) if "hard_neg" in present else list(PAIR_COLUMNS)
        if neutral:
            if not {"hard_neg", NEUTRAL_COLUMN} <= present:
                raise ValueError(
                    f"--neutral_as_negative needs a CSV with 'sent0,sent1,hard_neg,{NEUTRAL_COLUMN}' columns; "
                    f"train_file {str(p)!r} has {ds.column_names}"
                )
            columns.append(NEUTRAL_COLUMN)
        labels = [c for c in label_columns if c in present and c not in columns]
        ds = ds.remove_columns([c for c in ds.column_names if c not in columns and c not in labels])
        from simcse.training.scored_pairs import numeric_label_columns

        ds = numeric_label_columns(ds, labels, f"train_file {str(p)!r}", header_lines=1)
    ds = drop_incomplete_rows(ds, columns, f"train_file {str(p)!r}",
                              "blank lines" if p.suffix == ".txt" else "rows with an empty cell")
    if max_train_samples is not None:
        ds = ds.select(range(min(max_train_samples, len(ds))))
    return ds, columns


def complete_rows(batch: dict, indices: list[int], columns: list[str], source: str = "the training data",
                  labels: dict | None = None) -> list[bool]:
    """For a batch of rows (``{column: list}``, their 0-based ``indices``): whether each row holds a non-blank
    text in every view column. Cells follow the one rule of every source
    (:func:`simcse.files.inputs.cell_text`): a missing value is blank (the row is dropped), a number is an error.
    ``labels`` maps a view to the column name the user knows (the dataset's, before renaming).

    Raises:
        ValueError: ``"<source>, row 3: column 'id' holds int 7, not text"`` (rows numbered from 1).
    """
    labels = labels or {}

    def text(c, i):
        return cell_text(batch[c][i], lambda: f"{source}, row {indices[i] + 1}: column {labels.get(c, c)!r}")

    return [all(text(c, i).strip() for c in columns) for i in range(len(batch[columns[0]]))]


def drop_incomplete_rows(ds, columns: list[str], source: str, what: str = "rows with an empty cell",
                         labels: dict | None = None):
    """``ds`` (a ``datasets.Dataset``) without the rows that miss a view (:func:`complete_rows`); the number
    skipped is logged once.

    Raises:
        ValueError: no row is left (the message names ``source``); a cell that is not text (:func:`complete_rows`).
    """
    n_before = len(ds)
    ds = ds.filter(complete_rows, batched=True, with_indices=True,
                   fn_kwargs={"columns": list(columns), "source": source, "labels": labels})
    skipped = n_before - len(ds)
    if skipped:
        logger.warning("%s: skipped %d %s of %d", source, skipped, what, n_before)
    if len(ds) == 0:
        raise ValueError(f"{source} has no usable sentence (all {n_before} rows were blank or incomplete)")
    return ds


OBJECTIVE_WINDOWS = {"next_sentence": 1, "next_3_sentences": 3}


def consecutive_pairs(lines, window: int, rng=None, max_pairs: int | None = None) -> tuple[list[str], list[str]]:
    """(anchors, positives) from consecutive lines of a text corpus (paper Table 2, "next sentence(s)").

    Lines are sentences in reading order; a blank (whitespace-only) line ends a block (a document or a
    paragraph) and no pair crosses it. For every line i of a block that has a later line in the block, the
    positive is line i+1 when ``window == 1``, else a line drawn uniformly from the next
    ``min(window, lines left in the block)`` lines (one draw per anchor, from ``rng``). The last line of each
    block has no positive and is not an anchor. Leading/trailing whitespace is stripped.

    Args:
        lines: an iterable of str (read lazily: with ``max_pairs`` only as many lines as needed are consumed).
        window: 1 (next sentence) or more (a random one of the next ``window`` sentences).
        rng: a ``random.Random`` (required when ``window > 1``).
        max_pairs: stop after this many pairs.

    Raises:
        ValueError: ``window < 1``, or ``window > 1`` without ``rng``.
    """
    check_int(window, "window")
    if window > 1 and rng is None:
        raise ValueError("window > 1 draws the positive at random: pass rng (a random.Random)")
    anchors: list[str] = []
    positives: list[str] = []
    block: list[str] = []

    def flush(final: bool) -> bool:
        # emit pairs for anchors of ``block`` whose whole window is known (all of them when the block ended)
        while block and (len(block) > window or (final and len(block) > 1)):
            if max_pairs is not None and len(anchors) >= max_pairs:
                return True
            k = min(window, len(block) - 1)
            j = 1 if k == 1 else 1 + rng.randrange(k)
            anchors.append(block[0])
            positives.append(block[j])
            block.pop(0)
        if final:
            block.clear()
        return max_pairs is not None and len(anchors) >= max_pairs

    for line in lines:
        text = line.strip()
        if not text:
            if flush(final=True):
                return anchors, positives
            continue
        block.append(text)
        if flush(final=False):
            return anchors, positives
    flush(final=True)
    return anchors, positives


def load_next_sentence_dataset(path: str | os.PathLike, objective: str, seed: int = 42,
                               max_train_samples: int | None = None):
    """A pair dataset (``sent0`` = line i, ``sent1`` = its next sentence) from a one-sentence-per-line file.

    ``objective`` is ``"next_sentence"`` (line i+1) or ``"next_3_sentences"`` (a random one of the next 3
    lines, drawn once per anchor with ``random.Random(seed)``); see :func:`consecutive_pairs` for blocks.
    The pairs then train like supervised pairs: in-batch negatives, dropout on. The file's lines must be in
    reading order -- a shuffled corpus (such as the wiki1m stand-in) gives unrelated "next" sentences.

    Returns (dataset, ["sent0", "sent1"]).

    Raises:
        ValueError: an unknown objective, a file that is not ``.txt``, or one with no consecutive pair;
        FileNotFoundError: see :func:`check_train_file`.
    """
    import random

    import datasets

    if objective not in OBJECTIVE_WINDOWS:
        raise ValueError(f"objective must be one of {sorted(OBJECTIVE_WINDOWS)}, got {objective!r}")
    p = check_train_file(path)
    if p.suffix != ".txt":
        raise ValueError(f"--positives {objective} derives pairs from consecutive lines: train_file {str(p)!r} "
                         "must be a .txt file with one sentence per line")

    with open_text(p) as f:  # lines split only at "\n" (simcse.files.inputs)
        anchors, positives = consecutive_pairs(f, OBJECTIVE_WINDOWS[objective], random.Random(seed), max_train_samples)
    if not anchors:
        raise ValueError(f"train_file {str(p)!r} has no two consecutive non-blank lines: no {objective} pair")
    logger.info("%s: %d %s pairs", p, len(anchors), objective)
    return datasets.Dataset.from_dict({"sent0": anchors, "sent1": positives}), list(PAIR_COLUMNS)


def tokenize_dataset(ds, columns: list[str], tokenizer, max_seq_length: int, num_proc: int | None = None,
                     prompts: dict | None = None, count_prompts: bool = False):
    """Tokenise every view once (``datasets.map``, cached), truncating to ``max_seq_length`` tokens.

    Adds ``input_ids`` / ``attention_mask`` (and ``token_type_ids`` when the tokenizer makes them) as
    lists of V token lists (and ``prompt_length``, see :func:`tokenize_views`), and drops the text columns.
    """

    return ds.map(tokenize_views, batched=True, remove_columns=columns, num_proc=num_proc, desc="tokenizing",
                  fn_kwargs={"columns": list(columns), "tokenizer": tokenizer, "max_seq_length": max_seq_length,
                             "prompts": prompts, "count_prompts": count_prompts})


def column_prompts(value) -> dict:
    """``--prompts`` (a JSON object string, a dict or None) as a dict of view column -> prefix text."""
    import json

    if not value:
        return {}
    return dict(value) if isinstance(value, dict) else json.loads(value)


def tokenize_views(batch: dict, columns: list[str], tokenizer, max_seq_length: int, prompts: dict | None = None,
                   count_prompts: bool = False) -> dict:
    """One batch of rows (``{column: list of str}``) -> ``{input_ids: [[view 0 ids, view 1 ids, ...], ...], ...}``
    (each view cut at ``max_seq_length`` tokens): the map function of :func:`tokenize_dataset`, and of a
    stream tokenised on the fly. With ``count_prompts`` also ``prompt_length``: per row the V token counts of the
    views' prompts (:func:`simcse.models.prompt_pooling.prompt_token_count`; 0 without one)."""
    from simcse.models.prompt_pooling import prompt_token_count

    n = len(batch[columns[0]])
    prompts = prompts or {}
    enc = [tokenizer([prompts.get(c, "") + t for t in batch[c]] if prompts.get(c) else batch[c], truncation=True,
                     max_length=max_seq_length) for c in columns]
    out = {key: [[e[key][i] for e in enc] for i in range(n)] for key in enc[0].keys()}
    if count_prompts:
        counts = [prompt_token_count(tokenizer, prompts.get(c, ""), max_seq_length) for c in columns]
        out["prompt_length"] = [list(counts) for _ in range(n)]
    return out


def mask_tokens(
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    *,
    mask_token_id: int,
    vocab_size: int,
    special_ids: list[int],
    mlm_probability: float = 0.15,
    generator: torch.Generator | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """BERT-style masking for the auxiliary MLM loss (paper Appendix D, BERT's 80/10/10 rule).

    Returns a *new* (masked_ids, labels) pair of int64 tensors shaped like ``input_ids`` (any shape);
    ``input_ids`` itself is never modified (the reference once masked the contrastive ids in place).
    Of the non-special, non-padding tokens, ``mlm_probability`` are selected; of those 80% become
    ``mask_token_id``, 10% a random token, 10% stay. ``labels`` is -100 where nothing was selected.
    """
    labels = input_ids.clone()
    masked = input_ids.clone()
    candidates = attention_mask.bool() & ~torch.isin(input_ids, torch.as_tensor(special_ids, dtype=input_ids.dtype))
    prob = torch.full(input_ids.shape, mlm_probability)
    selected = torch.bernoulli(prob, generator=generator).bool() & candidates
    labels[~selected] = -100
    replace = torch.bernoulli(torch.full(input_ids.shape, 0.8), generator=generator).bool() & selected
    masked[replace] = mask_token_id
    randomize = torch.bernoulli(torch.full(input_ids.shape, 0.5), generator=generator).bool() & selected & ~replace
    masked[randomize] = torch.randint(vocab_size, input_ids.shape, generator=generator)[randomize]
    return masked, labels


@dataclass
class ContrastiveCollator:
    """Pad a list of examples into (B, V, L) tensors; single-view examples are repeated to ``views_from_one``
    views (2: two dropout views; the objective's ``single_view_copies``).

    ``label_columns`` (the objective's, e.g. ``score``) are numeric fields of each example, returned as float32
    (B,) tensors under their names; an example without one, or with a value that is not a number, is refused
    naming the column.

    ``pad_to_max_length`` pads to ``max_seq_length`` (reference option) instead of the batch's longest
    sequence. Keys: ``input_ids``, ``attention_mask`` and ``token_type_ids`` when present (int64), and
    ``prompt_length`` (B, V) int64 when the examples carry it (:func:`tokenize_views`).
    With ``mlm_probability`` set (and the tokenizer facts below), it also returns ``mlm_input_ids`` and
    ``mlm_labels`` (B, V, L): a masked *copy* of ``input_ids`` for the auxiliary MLM loss (:func:`mask_tokens`),
    drawn from :func:`keyed_generator` (``seed`` and the examples' ``draw_key``) when every example has one, so
    the masks do not depend on the process that collates or on the global random state (exact resumes).
    """

    pad_token_id: int
    max_seq_length: int = 32
    pad_to_max_length: bool = False
    mlm_probability: float | None = None
    mask_token_id: int | None = None
    vocab_size: int | None = None
    special_ids: tuple[int, ...] = ()
    seed: int = 0
    label_columns: tuple[str, ...] = ()
    views_from_one: int = 2

    def __call__(self, features: list[dict]) -> dict[str, torch.Tensor]:
        if not features:
            raise ValueError("cannot collate an empty batch")
        keys = [k for k in ("input_ids", "attention_mask", "token_type_ids") if k in features[0]]
        views = len(features[0]["input_ids"])
        repeat = self.views_from_one if views == 1 else 1
        longest = max(len(ids) for f in features for ids in f["input_ids"])
        length = self.max_seq_length if self.pad_to_max_length else longest
        batch = {}
        for key in keys:
            pad = self.pad_token_id if key == "input_ids" else 0
            t = torch.full((len(features), views, length), pad, dtype=torch.long)
            for i, f in enumerate(features):
                for v, ids in enumerate(f[key]):
                    t[i, v, : len(ids)] = torch.as_tensor(ids, dtype=torch.long)
            batch[key] = t.repeat_interleave(repeat, dim=1) if repeat > 1 else t  # (B, V', L)
        if "prompt_length" in features[0]:  # the views' prompt token counts (include_prompt false)
            counts = torch.tensor([f["prompt_length"] for f in features], dtype=torch.long)  # (B, V)
            batch["prompt_length"] = counts.repeat_interleave(repeat, dim=1) if repeat > 1 else counts
        for col in self.label_columns:
            batch[col] = torch.tensor([_label_value(f, col) for f in features], dtype=torch.float32)  # (B,)
        if self.mlm_probability:
            keys = [f.get(DRAW_KEY) for f in features]
            generator = keyed_generator(self.seed, keys) if all(k is not None for k in keys) else None
            batch["mlm_input_ids"], batch["mlm_labels"] = mask_tokens(
                batch["input_ids"], batch["attention_mask"], mask_token_id=self.mask_token_id,
                vocab_size=self.vocab_size, special_ids=list(self.special_ids), mlm_probability=self.mlm_probability,
                generator=generator,
            )
        return batch


def _label_value(example: dict, column: str) -> float:
    value = example.get(column)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"training example has {column!r} = {value!r}; the loss needs a number there "
                         f"(example keys: {sorted(example)})")
    return float(value)


class EpochKeyedSampler(torch.utils.data.Sampler):
    """Shuffled order of ``n`` examples, fresh each epoch, yielding keys ``epoch * n + row``.

    The order of epoch ``e`` is ``torch.randperm(n)`` from a generator seeded with ``seed + e`` (as accelerate's
    seedable sampler), so it depends on the seed and the epoch only. HF Trainer calls :meth:`set_epoch` before
    each epoch, also when it resumes. Pair with :class:`KeyedDataset`, which maps a key back to its row.
    """

    def __init__(self, n: int, seed: int = 0):
        self.n, self.seed, self.epoch = int(n), int(seed), 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = int(epoch)

    def __len__(self) -> int:
        return self.n

    def __iter__(self):
        g = torch.Generator().manual_seed(self.seed + self.epoch)
        base = self.epoch * self.n
        return iter((base + torch.randperm(self.n, generator=g)).tolist())


class KeyedDataset(torch.utils.data.Dataset):
    """A map-style dataset of ``n`` rows indexed by keys ``epoch * n + row``: row ``key % n`` with its key.

    ``dataset[key]`` is ``{**rows[key % n], "draw_key": key}``, so a collator can seed its random draws from
    the example and the epoch, wherever (in which DataLoader worker) it runs.
    """

    def __init__(self, rows):
        self.rows = rows

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, key: int) -> dict:
        return {**self.rows[int(key) % len(self.rows)], DRAW_KEY: int(key)}


def keyed_generator(seed: int, keys) -> torch.Generator:
    """A CPU ``torch.Generator`` seeded from ``seed`` and a batch's draw keys (SHA-256 of both)."""
    import hashlib

    digest = hashlib.sha256(f"{seed}:{','.join(map(str, keys))}".encode()).digest()
    return torch.Generator().manual_seed(int.from_bytes(digest[:8], "little") & (2**63 - 1))
