"""The Slurm path through submitit's own LocalExecutor (the same submission, pickling and requeue code, no Slurm):
a grid runs as a job array, and a task that gets the preemption/timeout signal saves a checkpoint, is requeued and
resumes from it, not from step 0. Without submitit, --executor slurm is one line naming the extra."""
from __future__ import annotations

import json
import os
import signal
import sys
import time

import pytest
from experiment_world import tiny_world, write_spec  # noqa: F401  (fixture)

from simcse.experiments import load_spec, run_experiment
from simcse.experiments import runs as R
from simcse.experiments.executors import ExecutorError


def test_slurm_without_submitit_names_the_extra(tmp_path, tiny_world, monkeypatch):
    monkeypatch.setitem(sys.modules, "submitit", None)
    with pytest.raises(ExecutorError, match=r"^--executor slurm needs submitit: pip install simcse\[slurm\]$"):
        run_experiment(write_spec(tmp_path, tiny_world), tmp_path / "out", executor="slurm")


@pytest.mark.slow
def test_preempted_task_resumes_from_its_checkpoint(tmp_path, tiny_world):
    submitit = pytest.importorskip("submitit")
    import threading

    path = write_spec(tmp_path, tiny_world, seeds=[1], arms={"a": {"max_steps": 40}},
                      evaluation={"tasks": ["STSBenchmark"], "bootstrap": 20})
    out = tmp_path / "out"
    run = load_spec(path).runs()[0]
    ex = submitit.LocalExecutor(folder=str(tmp_path / "submitit"))
    ex.update_parameters(timeout_min=30)

    def preempt():  # what Slurm does before preempting: submitit's signal (USR2) to the task
        deadline = time.time() + 240
        while time.time() < deadline:
            step = R.current_step(out, run)
            pid_file = R.run_dir(out, run) / "task.pid"
            if step and step[0] >= 2 and pid_file.is_file():
                os.kill(int(pid_file.read_text()), signal.SIGUSR2)
                return
            time.sleep(0.2)

    t = threading.Thread(target=preempt, daemon=True)
    t.start()
    res = run_experiment(path, out, executor="slurm", submitit_executor=ex)
    t.join()
    assert res["results"]["a/seed1"]["status"] == "done"
    log = (out / "runs/a/seed1/run.log").read_text()
    assert "--resume_from_checkpoint" in log and "resumed from step" in log
    assert json.loads((out / "runs/a/seed1/result.json").read_text())["train"]["steps"] == 40
