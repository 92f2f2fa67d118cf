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
    tokenize_views,
)

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


def _to_views(ds, views: list[tuple[str, str]]):
    """``ds`` with only the view columns, renamed to the view names (two steps, so swapped names are safe)."""
    ds = ds.select_columns([c for c, _ in views])
    ds = ds.rename_columns({c: f"__view{i}" for i, (c, _) in enumerate(views)})
    return ds.rename_columns({f"__view{i}": v for i, (_, v) in enumerate(views)})


def _open(data_args, streaming: bool):
    return load_dataset_source(data_args.dataset_name, data_args.dataset_config_name, data_args.dataset_split,
                               data_args.dataset_data_files, streaming=streaming)


def load_training_dataset(data_args, seed: int = 42):
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
    ds = _to_views(ds, views)
    columns = [v for _, v in views]
    ds = drop_incomplete_rows(ds, columns, label, "rows with an empty or missing view")
    if data_args.max_train_samples is not None:
        ds = ds.select(range(min(data_args.max_train_samples, len(ds))))
    logger.info("%s: %d rows, views %s from columns %s", label, len(ds), columns, [c for c, _ in views])
    return ds, columns


class StreamingTrainSet(torch.utils.data.IterableDataset):
    """A tokenised ``datasets.IterableDataset`` (this process's part of the stream) that remembers where it was.

    After every ``record_every`` examples it keeps the stream's ``state_dict()`` (the last ``keep`` of them),
    so a checkpoint can store the position after exactly the examples the finished optimizer steps consumed,
    although the data loader has read ahead. ``start`` is the number of examples read before (a resumed run).
    """

    def __init__(self, stream, record_every: int, start: int = 0, keep: int = 256):
        super().__init__()
        self.stream, self.record_every, self.count = stream, max(1, int(record_every)), int(start)
        self._states: deque = deque(maxlen=keep)

    def set_epoch(self, epoch: int) -> None:
        """Forwarded to the stream (a new shuffle of shards and buffer for a stream read again)."""
        self.stream.set_epoch(epoch)

    def __iter__(self):
        self._states.append((self.count, self.stream.state_dict()))
        for row in self.stream:  # the stream's state already counts the row it yields
            self.count += 1
            if self.count % self.record_every == 0:
                self._states.append((self.count, self.stream.state_dict()))
            yield row

    def state_at(self, examples: int) -> dict:
        """The stream's state after ``examples`` examples (counted from the run's start, resumes included).

        Raises:
            KeyError: that position was not recorded (not a multiple of ``record_every``, or too far back).
        """
        for count, state in reversed(self._states):
            if count == examples:
                return state
        raise KeyError(f"no stream position recorded after {examples} examples "
                       f"(recorded: {[c for c, _ in self._states][-5:]})")


def streaming_training_set(data_args, tokenizer, seed: int, rank: int, world: int, batch_per_step: int,
                           resume_from: str | None = None):
    """``(StreamingTrainSet, view names)`` of ``--dataset_name`` read as a stream (``--streaming true``).

    Order of operations: the first ``--max_train_samples`` rows of the source (when set); rows missing a view
    dropped; ``IterableDataset.shuffle(seed, buffer_size=--shuffle_buffer_size)`` (shards, then a buffer; off
    for a buffer size of 0); ``datasets.distributed.split_dataset_by_node`` for process ``rank`` of ``world``
    (whole shards when their number divides ``world``, else every ``world``-th example); the views tokenised on
    the fly (:func:`simcse.training.data.tokenize_views`, cut at ``--max_seq_length``). With ``resume_from`` (a checkpoint folder) the stream is put
    back at the position saved there for this rank (``load_state_dict``), not read again from its start.

    Args:
        batch_per_step: examples this process consumes per optimizer step (per-device batch x accumulation
            steps): where positions are recorded.

    Raises:
        ValueError: see :func:`view_columns`; a checkpoint without this rank's stream position.
    """
    from datasets.distributed import split_dataset_by_node

    stream = _open(data_args, streaming=True)
    views = view_columns(column_names(stream), data_args)
    columns = [v for _, v in views]
    if data_args.max_train_samples is not None:
        stream = stream.take(data_args.max_train_samples)
    stream = _to_views(stream, views).filter(complete_rows, batched=True, fn_kwargs={"columns": columns})
    if data_args.shuffle_buffer_size:
        stream = stream.shuffle(seed=seed, buffer_size=data_args.shuffle_buffer_size)
    if world > 1:
        stream = split_dataset_by_node(stream, rank=rank, world_size=world)
    stream = stream.map(tokenize_views, batched=True, remove_columns=columns, fn_kwargs={
        "columns": columns, "tokenizer": tokenizer, "max_seq_length": data_args.max_seq_length})
    start = 0
    if resume_from:
        saved = os.path.join(resume_from, STREAM_STATE_NAME.format(rank=rank))
        if not os.path.isfile(saved):
            raise ValueError(f"--resume_from_checkpoint {resume_from!r} has no stream position for process {rank} "
                             f"({os.path.basename(saved)}): it was not written by a --streaming run")
        with open(saved, encoding="utf-8") as f:
            record = json.load(f)
        stream.load_state_dict(record["state"])
        start = int(record["examples"])
        logger.info("stream resumed after %d examples of process %d", start, rank)
    return StreamingTrainSet(stream, batch_per_step, start=start), columns


class _StreamLoader(torch.utils.data.DataLoader):
    """A plain DataLoader whose ``set_epoch`` (called by HF's loop before each epoch) reaches the stream."""

    def set_epoch(self, epoch: int) -> None:
        self.dataset.set_epoch(epoch)


class StreamingHooks(Trainer):
    """HF Trainer hooks for a :class:`StreamingTrainSet`: its own data loader (no re-sharding by accelerate: the
    stream is already this process's part), its position saved in every checkpoint, and the random state
    restored at the first step of a resumed run (HF skips that when the data is not skipped again)."""

    _stream_resume: str | None = None  # the checkpoint a streaming run resumes from, until its first step

    def get_train_dataloader(self):
        ds = self.train_dataset
        if not isinstance(ds, StreamingTrainSet):
            return super().get_train_dataloader()
        pin = self.args.dataloader_pin_memory and torch.cuda.is_available()  # pinning needs an accelerator
        return _StreamLoader(ds, batch_size=self._train_batch_size, collate_fn=self.data_collator, num_workers=0,
                             pin_memory=pin)

    def _save_rng_state(self, output_dir):
        super()._save_rng_state(output_dir)
        ds = self.train_dataset
        if isinstance(ds, StreamingTrainSet):
            examples = self.state.global_step * self._train_batch_size * self.args.gradient_accumulation_steps
            record = {"examples": examples, "state": ds.state_at(examples)}
            write_text_atomic(os.path.join(output_dir, STREAM_STATE_NAME.format(rank=self.args.process_index)),
                              json.dumps(record), what="the stream position")

    def get_batch_samples(self, epoch_iterator, num_batches, device):
        out = super().get_batch_samples(epoch_iterator, num_batches, device)
        if self._stream_resume is not None:  # as HF does after skipping batches: the RNG of the checkpoint
            self._load_rng_state(self._stream_resume)
            self._stream_resume = None
        return out
