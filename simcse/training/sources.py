"""Training data from the ``datasets`` ecosystem (``--dataset_name``): column mapping, and streaming corpora.

The dataset is opened by :func:`simcse.files.dataset_source.load_dataset_source` (a Hub id, a local folder in
the Hub's layout, a ``save_to_disk`` folder). Its columns become the views every training example is made of
(:mod:`simcse.training.data`): ``sent0`` alone (unsupervised: dropout makes the two views), ``sent0, sent1``
(pairs) or ``sent0, sent1, hard_neg`` (triplets), plus ``neutral`` with ``--neutral_as_negative``.
:func:`view_columns` chooses them from the options ``--sentence_column`` (default ``text``), ``--sent0_column``,
``--sent1_column`` (``sent0``, ``sent1``) and ``--hard_neg_column`` (``hard_neg``), the defaults being the
column names of the ``--train_file`` formats:

* a ``--sentence_column`` other than ``text`` asks for unsupervised training on that column;
* otherwise a dataset with both pair columns (or pair options other than the defaults) trains on pairs, with
  the hard-negative column when the dataset has it (a ``--hard_neg_column`` other than ``hard_neg`` must exist);
* otherwise the ``text`` column is read as sentences.

A column that is not there stops the run before training with one line listing the dataset's columns.

:func:`load_training_dataset` gives a ``datasets.Dataset`` that then goes exactly the way of a ``--train_file``
(tokenised once and cached, ``--max_train_samples``, samplers, augmentation, MLM, gradient caching, resume).
:func:`streaming_training_set` gives a :class:`StreamingTrainSet` for ``--streaming true``: read lazily,
shuffled with a seeded buffer, split between processes, tokenised on the fly, and resumable from the position
saved in each checkpoint (:class:`StreamingHooks`).
"""
from __future__ import annotations

import json
import logging
import os
from collections import deque

import torch
from transformers import Trainer

from simcse.files.dataset_source import (
    column_names,
    load_dataset_source,
    require_columns,
)
from simcse.files.storage import write_text_atomic
from simcse.training.data import (
    NEUTRAL_COLUMN,
    OBJECTIVE_WINDOWS,
    complete_rows,
    consecutive_pairs,
    drop_incomplete_rows,
    column_prompts,
    tokenize_views,
)
from simcse.training.scored_pairs import numeric_label_columns

logger = logging.getLogger(__name__)

DEFAULT_COLUMNS = {"sentence_column": "text", "sent0_column": "sent0", "sent1_column": "sent1",
                   "hard_neg_column": "hard_neg"}
STREAM_STATE_NAME = "stream_state_{rank}.json"  # in a checkpoint: this process's position in the stream


def view_columns(have: list[str], data_args) -> list[tuple[str, str]]:
    """``[(dataset column, view name), ...]`` for a dataset with columns ``have`` (rules: module docstring).

    Raises:
        ValueError: a needed column is missing (one line with the dataset's columns), or
            ``--neutral_as_negative`` without a ``neutral`` column or hard negatives.
    """
    name = data_args.dataset_name
    given = {k: getattr(data_args, k) for k in DEFAULT_COLUMNS}
    changed = {k for k, v in given.items() if v != DEFAULT_COLUMNS[k]}
    s0, s1, hn = given["sent0_column"], given["sent1_column"], given["hard_neg_column"]
    pairs = "sentence_column" not in changed and (
        {"sent0_column", "sent1_column", "hard_neg_column"} & changed or (s0 in have and s1 in have))
    if not pairs:
        require_columns(have, {"--sentence_column": given["sentence_column"]}, name)
        if data_args.neutral_as_negative:
            raise ValueError(f"--neutral_as_negative needs sent0, sent1, hard_neg and {NEUTRAL_COLUMN!r} columns; "
                             f"dataset {name!r} is read as single sentences (columns {have})")
        return [(given["sentence_column"], "sent0")]
    require_columns(have, {"--sent0_column": s0, "--sent1_column": s1,
                           **({"--hard_neg_column": hn} if "hard_neg_column" in changed else {})}, name)
    views = [(s0, "sent0"), (s1, "sent1")]
    if hn in have and not data_args.no_hard_negatives:
        views.append((hn, "hard_neg"))
    if data_args.neutral_as_negative:
        require_columns(have, {"--hard_neg_column": hn, "--neutral_as_negative": NEUTRAL_COLUMN}, name)
        views.append((NEUTRAL_COLUMN, NEUTRAL_COLUMN))
    return views


def _label_sources(have: list[str], label_columns: tuple[str, ...], data_args) -> list[tuple[str, str]]:
    """``[(dataset column, label name), ...]`` for the objective's ``label_columns``: ``score`` is read from
    ``--score_column`` (default ``score``), any other label from the column of its own name; a label the
    dataset lacks is left out (the objective's column check names it)."""
    out = []
    for name in label_columns:
        col = getattr(data_args, "score_column", "score") if name == "score" else name
        if col in have:
            out.append((col, name))
    return out


def _to_views(ds, views: list[tuple[str, str]]):
    """``ds`` with only the view columns, renamed to the view names (two steps, so swapped names are safe)."""
    ds = ds.select_columns([c for c, _ in views])
    ds = ds.rename_columns({c: f"__view{i}" for i, (c, _) in enumerate(views)})
    return ds.rename_columns({f"__view{i}": v for i, (_, v) in enumerate(views)})


def _open(data_args, streaming: bool):
    return load_dataset_source(data_args.dataset_name, data_args.dataset_config_name, data_args.dataset_split,
                               data_args.dataset_data_files, streaming=streaming)


def load_training_dataset(data_args, seed: int = 42, label_columns: tuple[str, ...] = ()):
    """``(datasets.Dataset, view names)`` of ``--dataset_name`` for training, as
    :func:`simcse.training.data.load_sentence_dataset` gives for a ``--train_file``: rows with a blank or missing
    view dropped (counted in the log), the first ``--max_train_samples`` rows kept. With ``--positives
    next_sentence`` / ``next_3_sentences`` the sentence column gives consecutive pairs (rows in dataset order,
    an empty row ending a block; :func:`simcse.training.data.consecutive_pairs`).

    Raises:
        ValueError: see :func:`simcse.files.dataset_source.load_dataset_source` and :func:`view_columns`; no
            usable row.
    """
    import random

    import datasets

    ds = _open(data_args, streaming=False)
    views = view_columns(column_names(ds), data_args)
    label = f"dataset {data_args.dataset_name!r}"
    if data_args.positives != "simcse":
        if len(views) != 1:
            raise ValueError(f"--positives {data_args.positives} derives pairs from consecutive sentences: {label} "
                             f"must be read as single sentences (--sentence_column), not as views {[c for c, _ in views]}")
        texts = ds[views[0][0]]
        anchors, positives = consecutive_pairs((t if isinstance(t, str) else "" for t in texts),
                                               OBJECTIVE_WINDOWS[data_args.positives], random.Random(seed),
                                               data_args.max_train_samples)
        if not anchors:
            raise ValueError(f"{label} has no two consecutive non-blank sentences: no {data_args.positives} pair")
        return datasets.Dataset.from_dict({"sent0": anchors, "sent1": positives}), ["sent0", "sent1"]
    labels = _label_sources(column_names(ds), label_columns, data_args)
    ds = _to_views(ds, views + labels)
    ds = numeric_label_columns(ds, [v for _, v in labels], label)
    columns = [v for _, v in views]
    ds = drop_incomplete_rows(ds, columns, label, "rows with an empty or missing view", labels={v: c for c, v in views})
    if data_args.max_train_samples is not None:
        ds = ds.select(range(min(data_args.max_train_samples, len(ds))))
    logger.info("%s: %d rows, views %s from columns %s", label, len(ds), columns, [c for c, _ in views])
    return ds, columns


def unusable_last_batch(rows: int, n_views: int) -> bool:
    """True for a last batch InfoNCE cannot train on: one sentence (``rows`` counted over all processes) and no
    hard-negative view. A ``--train_file`` drops it (:func:`simcse.training.build._one_row_last_batch`),
    and so does a stream that ends with it (:class:`StreamingTrainSet`): one rule for both."""
    return rows == 1 and n_views < 3


def _fewest_rows(rows: int, world: int) -> int:
    """The fewest of every process's ``rows`` (an all-reduce MIN; ``rows`` itself in one process)."""
    import torch.distributed as dist

    if world < 2 or not (dist.is_available() and dist.is_initialized()):
        return rows
    device = torch.device("cuda", torch.cuda.current_device()) if dist.get_backend() == "nccl" else torch.device("cpu")
    t = torch.tensor([rows], dtype=torch.long, device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MIN)
    return int(t.item())


class StreamingTrainSet(torch.utils.data.IterableDataset):
    """A tokenised ``datasets.IterableDataset`` (this process's part of the stream), read in batches of
    ``batch_size`` rows (lists of features, for a DataLoader with ``batch_size=None``), that records where it is.

    Its epochs are its own: each pass over the stream is the next epoch (``stream.set_epoch``: a new shuffle),
    whoever iterates it. The end of the stream is the end of a file: a last batch shorter than ``batch_size`` is
    trained on, except a batch :func:`unusable_last_batch` refuses and, with ``drop_last``, any short one. With
    ``world`` processes the ranks stay in step: each batch holds the fewest rows any rank read (an all-reduce),
    so a longer part gives up its rows past the shortest part's end, and the epoch ends for all ranks at once.

    After every batch it keeps ``(examples, epoch, state)`` (the last ``keep``): ``examples`` counts the rows
    handed out for training (resumes included, from ``start``), ``state`` is the stream's ``state_dict()`` after
    that batch, or None when the epoch ended with it. :meth:`position` is what a checkpoint stores.
    """

    def __init__(self, stream, batch_size: int, n_views: int = 1, drop_last: bool = False, world: int = 1,
                 start: int = 0, epoch: int = 0, start_state: dict | None = None, keep: int = 256,
                 column_names: list[str] | None = None):
        super().__init__()
        self.column_names = list(column_names or [])  # the views and labels each row holds (as a Dataset's)
        self.stream, self.batch_size, self.n_views = stream, max(1, int(batch_size)), n_views
        self.drop_last, self.world = bool(drop_last), max(1, int(world))
        self.count, self.epoch, self._resumed = int(start), int(epoch), start_state is not None
        self._states: deque = deque(maxlen=keep)
        self._states.append((self.count, self.epoch, start_state))

    def set_epoch(self, epoch: int) -> None:
        """Ignored: the set counts its own passes (an epoch given by the caller restarts at 0 on a resume)."""

    def _one_epoch(self):
        """Batches of one pass over the stream; True at the end when it yielded none."""
        import itertools

        self.stream.set_epoch(self.epoch)
        rows, empty = iter(self.stream), True
        while True:
            batch = list(itertools.islice(rows, self.batch_size))
            n = _fewest_rows(len(batch), self.world)
            ended = n < self.batch_size
            if n and not (ended and (self.drop_last or unusable_last_batch(n * self.world, self.n_views))):
                self.count += n
                self._states.append((self.count, self.epoch + 1 if ended else self.epoch,
                                     None if ended else self.stream.state_dict()))
                empty = False
                yield batch[:n]  # rows past the shortest part's end are not trained on in this pass
            if ended:
                self.epoch += 1
                return empty

    def __iter__(self):
        empty = yield from self._one_epoch()
        if empty and self._resumed:  # resumed at the end of a pass: the next pass, as the run would have read
            yield from self._one_epoch()
        self._resumed = False

    def position(self) -> dict:
        """``{"examples", "epoch", "state"}`` after the last batch handed out (what a checkpoint stores)."""
        examples, epoch, state = self._states[-1]
        return {"examples": examples, "epoch": epoch, "state": state}

    def state_at(self, examples: int) -> dict:
        """:meth:`position` after ``examples`` rows handed out (counted from the run's start, resumes included).

        Raises:
            KeyError: no batch ended there (or it is more than ``keep`` batches back).
        """
        for count, epoch, state in reversed(self._states):
            if count == examples:
                return {"examples": count, "epoch": epoch, "state": state}
        raise KeyError(f"no stream position recorded after {examples} examples "
                       f"(recorded: {[c for c, _, _ in self._states][-5:]})")


def streaming_training_set(data_args, tokenizer, seed: int, rank: int, world: int, batch_size: int,
                           drop_last: bool = False, resume_from: str | None = None,
                           label_columns: tuple[str, ...] = ()):
    """``(StreamingTrainSet, view names)`` of ``--dataset_name`` read as a stream (``--streaming true``).

    Order of operations: the first ``--max_train_samples`` rows of the source (when set); rows missing a view
    dropped; ``IterableDataset.shuffle(seed, buffer_size=--shuffle_buffer_size)`` (shards, then a buffer; off
    for a buffer size of 0); ``datasets.distributed.split_dataset_by_node`` for process ``rank`` of ``world``
    (whole shards when their number divides ``world``, else every ``world``-th example); the views tokenised on
    the fly (:func:`simcse.training.data.tokenize_views`, cut at ``--max_seq_length``). With ``resume_from`` (a checkpoint folder) the stream is put
    back at the position saved there for this rank (``load_state_dict``), not read again from its start.

    Args:
        batch_size: rows per batch of this process (the per-device batch): batches are made by the set, which
            records its position after each (:class:`StreamingTrainSet`, also for the end of the stream and
            the ranks' agreement); ``drop_last``: ``--dataloader_drop_last``.
        label_columns: the objective's label columns (CoSENT's and AnglE's ``score``): kept beside the views and
            read as numbers, as :func:`load_training_dataset` keeps them (a cell that is not a finite number fails
            when the stream reaches it, naming the column and the row).

    Raises:
        ValueError: see :func:`view_columns`; a checkpoint without this rank's stream position.
    """
    from datasets.distributed import split_dataset_by_node

    stream = _open(data_args, streaming=True)
    views = view_columns(column_names(stream), data_args)
    labels = _label_sources(column_names(stream), label_columns, data_args)
    columns = [v for _, v in views]
    if data_args.max_train_samples is not None:
        stream = stream.take(data_args.max_train_samples)
    stream = numeric_label_columns(_to_views(stream, views + labels), [v for _, v in labels],
                                   f"dataset {data_args.dataset_name!r}")
    stream = stream.filter(complete_rows, batched=True, with_indices=True, fn_kwargs={
        "columns": columns, "source": f"dataset {data_args.dataset_name!r}", "labels": {v: c for c, v in views}})
    if data_args.shuffle_buffer_size:
        stream = stream.shuffle(seed=seed, buffer_size=data_args.shuffle_buffer_size)
    if world > 1:
        stream = split_dataset_by_node(stream, rank=rank, world_size=world)
    stream = stream.map(tokenize_views, batched=True, remove_columns=columns, fn_kwargs={
        "columns": columns, "tokenizer": tokenizer, "max_seq_length": data_args.max_seq_length,
        "prompts": column_prompts(getattr(data_args, "prompts", None)),
        "count_prompts": not getattr(data_args, "include_prompt", True)})
    start, epoch, state = 0, 0, None
    if resume_from:
        saved = os.path.join(resume_from, STREAM_STATE_NAME.format(rank=rank))
        if not os.path.isfile(saved):
            raise ValueError(f"--resume_from_checkpoint {resume_from!r} has no stream position for process {rank} "
                             f"({os.path.basename(saved)}): it was not written by a --streaming run")
        with open(saved, encoding="utf-8") as f:
            record = json.load(f)
        start, state = int(record["examples"]), record["state"]
        epoch = int(record.get("epoch", state["epoch"] if state else 0))
        if state is not None:  # None: the checkpoint's pass had ended; the next starts from the top
            stream.load_state_dict(state)
        logger.info("stream resumed after %d examples of process %d (pass %d)", start, rank, epoch + 1)
    return StreamingTrainSet(stream, batch_size, n_views=len(columns), drop_last=drop_last, world=world,
                             start=start, epoch=epoch, start_state=state if resume_from else None,
                             column_names=columns + [v for _, v in labels]), columns


class StreamingHooks(Trainer):
    """HF Trainer hooks for a :class:`StreamingTrainSet`: its own data loader (no re-sharding by accelerate: the
    stream is already this process's part; batches made by the set), its position saved in every checkpoint (as
    counted after the batches the finished steps took), and the random state restored at the first step of a
    resumed run (HF skips that when the data is not skipped again)."""

    _stream_resume: str | None = None  # the checkpoint a streaming run resumes from, until its first step
    _stream_position: dict | None = None  # the set's position after the batches of the last step

    def get_train_dataloader(self):
        ds = self.train_dataset
        if not isinstance(ds, StreamingTrainSet):
            return super().get_train_dataloader()
        pin = self.args.dataloader_pin_memory and torch.cuda.is_available()  # pinning needs an accelerator
        # its own generator: each pass's iter() would otherwise draw from the global RNG (a worker seed), so a
        # run resumed at the end of a pass would see other dropout masks than the uninterrupted run
        return torch.utils.data.DataLoader(ds, batch_size=None, collate_fn=self.data_collator, num_workers=0,
                                           pin_memory=pin, generator=torch.Generator().manual_seed(self.args.seed))

    def _save_rng_state(self, output_dir):
        super()._save_rng_state(output_dir)
        ds = self.train_dataset
        if isinstance(ds, StreamingTrainSet):
            record = self._stream_position or ds.position()
            write_text_atomic(os.path.join(output_dir, STREAM_STATE_NAME.format(rank=self.args.process_index)),
                              json.dumps(record), what="the stream position")

    def get_batch_samples(self, epoch_iterator, num_batches, device):
        out = super().get_batch_samples(epoch_iterator, num_batches, device)
        if isinstance(self.train_dataset, StreamingTrainSet) and out[0]:
            self._stream_position = self.train_dataset.position()  # before any read-ahead of a later step
        if self._stream_resume is not None:  # as HF does after skipping batches: the RNG of the checkpoint
            self._load_rng_state(self._stream_resume)
            self._stream_resume = None
        return out
