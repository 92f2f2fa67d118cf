"""Training-order samplers: keep repeated texts out of one contrastive batch.

In-batch negatives assume that the other rows of a batch are about other sentences. When a text occurs in
several rows of a pair file (the same premise with several hypotheses, a repeated caption), rows that share a
text can land in one batch: each is then a negative of its own positive, and its loss cannot go below
log 2. :class:`NoDuplicatesSampler` orders the rows so that no global batch holds one text twice, without
dropping or repeating a row (sentence-transformers' ``no_duplicates`` batch sampler does the same job).
:func:`count_repeated_rows` gives the number the trainer warns about when the plain sampler is used.
"""
from __future__ import annotations

from collections import Counter, deque
from typing import Sequence

import torch
from torch.utils.data import Sampler


def count_repeated_rows(rows: Sequence[Sequence[str]]) -> tuple[int, int]:
    """(rows that share a text with another row, distinct texts that occur in more than one row).

    Args:
        rows: one tuple of texts per training row (e.g. ``(sent0, sent1, hard_neg)``).
    """
    counts = Counter(t for row in rows for t in set(row))
    repeated = {t for t, c in counts.items() if c > 1}
    return sum(1 for row in rows if repeated.intersection(row)), len(repeated)


class NoDuplicatesSampler(Sampler[int]):
    """A seeded random order of all rows in which no global batch holds a text twice, where possible.

    The rows are shuffled (``torch.randperm`` seeded by ``seed + epoch``) and dealt into consecutive batches of
    ``batch_size``; a row with a text already in the current batch waits in a queue and is placed first in
    a later batch; a row that still shares a batch with its text afterwards is swapped with a row of another
    batch where that removes the repeat from both. Every row appears exactly once per epoch and every batch
    but the last is full (the data loader cuts the order by position); repeats share a batch only when no
    such swap exists (a text in more rows than there are batches).

    Args:
        rows: one tuple of texts per dataset row, in dataset order.
        batch_size: the global contrastive batch (per-device batch x processes): the data loader cuts the
            order into consecutive chunks of this size (accelerate then gives each process its share).
        seed: base seed; :meth:`set_epoch` (called by the Trainer) makes each epoch's order new and
            reproducible, also on resume.

    Raises:
        ValueError: ``batch_size`` < 1.
    """

    def __init__(self, rows: Sequence[Sequence[str]], batch_size: int, seed: int = 0):
        if int(batch_size) < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size!r}")
        self.rows = [tuple(r) for r in rows]
        self.batch_size = int(batch_size)
        self.seed = int(seed)
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = int(epoch)

    def __len__(self) -> int:
        return len(self.rows)

    def __iter__(self):
        g = torch.Generator().manual_seed(self.seed + self.epoch)
        batches = self._deal(deque(torch.randperm(len(self.rows), generator=g).tolist()))
        self._repair(batches)
        return iter([i for b in batches for i in b])

    def _deal(self, order: deque) -> list[list[int]]:
        """Greedy pass: fill each batch from the waiting rows, then the shuffled order, skipping rows that
        repeat a text of the batch (they wait); only inseparable leftovers are placed together."""
        waiting: deque[int] = deque()
        batches = []
        while order or waiting:
            batch, texts = [], set()
            for queue in (waiting, order):  # each queue scanned at most once per batch
                for _ in range(len(queue)):
                    if len(batch) == self.batch_size:
                        break
                    i = queue.popleft()
                    if texts.isdisjoint(self.rows[i]):
                        batch.append(i)
                        texts.update(self.rows[i])
                    else:
                        waiting.append(i)
            while len(batch) < self.batch_size and waiting:  # keep batches full (the loader cuts by position)
                batch.append(waiting.popleft())
            batches.append(batch)
        return batches

    def _repair(self, batches: list[list[int]]) -> None:
        """Second pass: move each row that still repeats a text of its batch by swapping it with a row of
        another batch, when the swap leaves both batches without repeats."""
        counts = [Counter(t for i in b for t in self.rows[i]) for b in batches]

        def fits(k: int, row: int, leaving: int) -> bool:  # row can join batch k in place of `leaving`
            gone = Counter(self.rows[leaving])
            return all(counts[k][t] - gone[t] == 0 for t in set(self.rows[row]))

        for a, batch in enumerate(batches):
            for pos, i in enumerate(batch):
                if all(counts[a][t] == 1 for t in set(self.rows[i])):
                    continue
                for b in range(len(batches)):
                    j = next((j for j in batches[b] if b != a and fits(b, i, j) and fits(a, j, i)), None)
                    if j is not None:
                        batch[pos], batches[b][batches[b].index(j)] = j, i
                        counts[a].subtract(self.rows[i]); counts[a].update(self.rows[j])
                        counts[b].subtract(self.rows[j]); counts[b].update(self.rows[i])
                        break
