"""The runner's process tree under signals, on the tiny world: a run under torchrun (two gloo processes on the CPU)
saves a checkpoint in every worker and ends when the runner gets SIGTERM or when submitit's preemption signal
reaches its task; SIGHUP and SIGKILL to the runner leave nothing training; SIGTERM during scoring records the run
``stopped`` and the rerun scores it. Every case: nothing of the run is left running, and the rerun finishes it."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from experiment_world import tiny_world, write_spec  # noqa: F401  (fixture)

from simcse.experiments import load_spec, run_experiment
from simcse.experiments import runs as R

pytestmark = pytest.mark.slow


def processes_of(folder: Path) -> list[int]:
    """The pids of the live processes whose command line names ``folder`` (a run's trainers, scorers, torchrun)."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            cmd = (proc / "cmdline").read_bytes().decode("utf-8", "replace")
            stat = (proc / "stat").read_text()
        except OSError:
            continue
        if str(folder) in cmd and stat.rsplit(")", 1)[1].split()[0] != "Z":
            found.append(int(proc.name))
    return found


def wait_until(what, check, timeout: float = 240, runner=None):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if check():
            return
        time.sleep(0.2)
    if runner is not None:
        runner.kill()
        pytest.fail(f"never {what}: " + runner.communicate()[0][-2000:])
    pytest.fail(f"never {what}; still running: {check}")


def start_runner(path: Path, out: Path, *extra: str, env: dict | None = None) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "simcse", "experiment", "run", str(path), "--output_dir", str(out), *extra]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env={**os.environ, **(env or {})})


def at_step(out: Path, run, step: int = 2):
    return lambda: (R.current_step(out, run) or (0, 0))[0] >= step


def _unlocked(out: Path) -> bool:
    """No process holds a run folder's lock any more (every holder has ended)."""
    import fcntl

    for lock in out.glob("runs/*/*/.lock"):
        with open(lock, "a") as f:
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                return False
            fcntl.flock(f, fcntl.LOCK_UN)
    return True


def nothing_left(out: Path, timeout: float = 120) -> None:
    deadline = time.time() + timeout
    while (processes_of(out) or not _unlocked(out)) and time.time() < deadline:
        time.sleep(0.5)
    assert not processes_of(out), "processes of the run are still alive"
    assert _unlocked(out), "a run folder is still locked by a process that has not ended"


def assert_resumes(path: Path, out: Path, steps: int, **kwargs) -> None:
    res = run_experiment(path, out, **kwargs)
    assert [r["status"] for r in res["results"].values()] == ["done"], res["results"]
    log = (out / "runs/a/seed1/run.log").read_text()
    assert "--resume_from_checkpoint" in log and "resumed from step" in log
    assert json.loads((out / "runs/a/seed1/result.json").read_text())["train"]["steps"] == steps


def _spec(tmp_path, world, steps=40):
    return write_spec(tmp_path, world, seeds=[1], arms={"a": {"max_steps": steps}},
                      evaluation={"tasks": ["STSBenchmark"], "bootstrap": 20})


TWO_GPUS = {"CUDA_VISIBLE_DEVICES": "0,1"}  # two slots of a torchrun run; the CPU build trains on gloo


@pytest.mark.parametrize("sig, gpus", [(signal.SIGTERM, 2), (signal.SIGHUP, 0)], ids=["sigterm-torchrun", "sighup"])
def test_signal_stops_the_run_and_the_rerun_resumes(tmp_path, tiny_world, monkeypatch, sig, gpus):
    """SIGTERM to the runner of a torchrun run (two workers) and SIGHUP to the runner of a one-process run: exit
    status 75, the run recorded ``stopped`` with a checkpoint (under torchrun, every worker's RNG state in it),
    nothing of it left running, and the rerun resumes it."""
    path, out = _spec(tmp_path, tiny_world), tmp_path / "out"
    run = load_spec(path).runs()[0]
    runner = start_runner(path, out, "--gpus_per_run", str(gpus), env=TWO_GPUS)
    wait_until("reached step 2", at_step(out, run), runner=runner)
    runner.send_signal(sig)
    output = runner.communicate(timeout=300)[0]
    assert runner.returncode == 75, output[-3000:]
    assert json.loads((out / "runs/a/seed1/result.json").read_text())["status"] == "stopped"
    nothing_left(out, timeout=10)
    ck = R._last_checkpoint(out / "runs/a/seed1/model")
    assert ck and {f"rng_state_{rank}.pth" for rank in range(gpus)} <= {p.name for p in Path(ck).iterdir()}
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    assert_resumes(path, out, 40, gpus_per_run=gpus)


def test_submitit_preemption_stops_every_torchrun_worker(tmp_path, tiny_world, monkeypatch):
    submitit = pytest.importorskip("submitit")
    import threading

    path, out = _spec(tmp_path, tiny_world), tmp_path / "out"
    run = load_spec(path).runs()[0]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    ex = submitit.LocalExecutor(folder=str(tmp_path / "submitit"))
    ex.update_parameters(timeout_min=30)
    seen = {}

    def preempt():  # Slurm's warning before a preemption: submitit's signal (USR2) to the task
        wait_until("reached step 2", lambda: at_step(out, run)() and (R.run_dir(out, run) / "task.pid").is_file())
        seen["trainers"] = processes_of(out / "runs/a/seed1/model")
        os.kill(int((R.run_dir(out, run) / "task.pid").read_text()), signal.SIGUSR2)

    t = threading.Thread(target=preempt, daemon=True)
    t.start()
    res = run_experiment(path, out, executor="slurm", submitit_executor=ex, gpus_per_run=2)
    t.join()
    assert len(seen["trainers"]) == 3  # torchrun and its two workers
    assert not [p for p in seen["trainers"] if Path(f"/proc/{p}").exists()]  # none trains on beside the requeue
    assert res["results"]["a/seed1"]["status"] == "done", res["results"]
    log = (out / "runs/a/seed1/run.log").read_text()
    commands = [ln for ln in log.splitlines() if ln.startswith("[experiment] $ ")]
    assert [("torch.distributed.run" in c, "--resume_from_checkpoint" in c) for c in commands] == [
        (True, False), (True, True), (False, False)]  # train, train resumed, score
    assert "resumed from step" in log
    assert json.loads((out / "runs/a/seed1/result.json").read_text())["train"]["steps"] == 40


@pytest.mark.parametrize("gpus", [0, 2])
def test_sigkill_of_the_runner_takes_its_run_down_with_a_checkpoint(tmp_path, tiny_world, monkeypatch, gpus):
    path, out = _spec(tmp_path, tiny_world), tmp_path / "out"
    run = load_spec(path).runs()[0]
    runner = start_runner(path, out, "--gpus_per_run", str(gpus), env=TWO_GPUS)
    wait_until("reached step 2", at_step(out, run), runner=runner)
    runner.kill()
    runner.communicate(timeout=30)
    nothing_left(out, timeout=120)  # the trainer saw its parent end: it saved a checkpoint and ended
    model = out / "runs/a/seed1/model"
    assert R._last_checkpoint(model) and not (model / "simcse_results.json").exists()  # stopped, not finished
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    assert_resumes(path, out, 40, gpus_per_run=gpus)


def test_sigterm_while_scoring_records_stopped_and_the_rerun_scores(tmp_path, tiny_world):
    path, out = _spec(tmp_path, tiny_world, steps=3), tmp_path / "out"
    runner = start_runner(path, out)
    log = out / "runs/a/seed1/run.log"
    wait_until("started scoring", lambda: log.is_file() and "simcse.experiments.score" in log.read_text(),
               runner=runner)
    time.sleep(0.5)
    runner.send_signal(signal.SIGTERM)
    output = runner.communicate(timeout=120)[0]
    assert runner.returncode == 75, output[-3000:]
    assert json.loads((out / "runs/a/seed1/result.json").read_text())["status"] == "stopped"
    assert "a/seed1 failed" not in output
    res = run_experiment(path, out)
    assert res["results"]["a/seed1"]["status"] == "done"
    text = log.read_text()
    assert text.count("-m simcse train") == 1 and text.count("simcse.experiments.score") == 2
