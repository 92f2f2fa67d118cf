"""The local executor's slots: each run's threads are the CPUs split among the parallel runs, never more than the
user allowed with OMP_NUM_THREADS / MKL_NUM_THREADS (as the Slurm path keeps the user's value)."""
from __future__ import annotations

import pytest

from simcse.experiments.executors import local_slots


@pytest.mark.parametrize("cap, parallel, cpus, expected", [
    ("1", 1, 2, "1"),    # the user's cap wins over all CPUs
    ("3", 1, 8, "3"),
    ("16", 2, 8, "4"),   # a cap above the share: the share
    (None, 2, 8, "4"),   # no cap: the CPUs split
])
def test_a_users_thread_cap_is_never_lifted(monkeypatch, cap, parallel, cpus, expected):
    for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        if cap is None:
            monkeypatch.delenv(name, raising=False)
        else:
            monkeypatch.setenv(name, cap)
    slots = local_slots(parallel, 0, cpus=cpus)
    assert [(s["OMP_NUM_THREADS"], s["MKL_NUM_THREADS"]) for s in slots] == [(expected, expected)] * parallel
