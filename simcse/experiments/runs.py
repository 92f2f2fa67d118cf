"""One run of a grid: its folder, its state, and the processes that train and score it.

A run's folder, ``<output_dir>/runs/<arm>/seed<seed>/``, holds:

* ``run.json``: the run's identity (kind, resolved options, evaluation) and digest, written before it starts;
* ``config.json``: for a ``simcse`` run, the exact config ``simcse train --config`` reads;
* ``run.log``: the training and scoring processes' output, appended on each attempt;
* ``model/``: the trained model (``simcse train --output_dir``), checkpoints while it trains;
* ``scores.npz`` / ``scores.json``: every scored pair's cosine and the Spearmans (:mod:`simcse.experiments.score`);
* ``result.json``: written last, whole or not at all: ``status`` ``done``, ``failed`` (with the log's last line),
  or ``stopped`` (a signal saved a checkpoint; the next attempt resumes from it).

:func:`execute` is the one function every executor calls, in the runner's process (local) or in a Slurm task
(submitit). It skips a run that is done, resumes one whose ``model/`` holds a checkpoint, and starts again one
that failed before any checkpoint. A lock on ``.lock`` (inherited by the training process) keeps two executors
off one run.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from simcse.experiments.spec import SAVE_SIGNALS, Run, first_difference, write_json_atomic

EXIT_PREEMPTED = 75  # simcse train's status after saving a checkpoint on a signal
# the trainer's progress bar ("  5%|▌     | 2/40 [00:00<..."), not a labelled one ("Filter: 100%|...| 64/64 [")
STEP = re.compile(r"(?:^|[\r\n])\s*\d+%\|[^|\r\n]*\| (\d+)/(\d+) \[")
# the child processes of the runs being executed in this process, by thread (a signal to the runner or a Slurm
# task's checkpoint() asks them to save a checkpoint)
CURRENT: dict = {}


class RunConflict(ValueError):
    """A run folder that holds another spec's run (its ``run.json`` differs), or a run another process holds."""


def run_dir(output_dir: str | Path, run: Run) -> Path:
    return Path(output_dir) / "runs" / run.arm / f"seed{run.seed}"


def read_json(path: Path) -> dict | None:
    """The JSON object in ``path``, or None when it is absent or unreadable (a partial file is never there)."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def check_folder(output_dir: str | Path, run: Run) -> None:
    """Refuse a run folder whose ``run.json`` records another run: one trained otherwise (kind, options). A
    change of the evaluation is no conflict: the run is rescored or only reported again (:func:`state`).

    Raises:
        RunConflict: one line naming the folder and the first differing field.
    """
    d = run_dir(output_dir, run)
    old = read_json(d / "run.json")
    if old is None:
        return
    trained = {k: v for k, v in (old.get("identity") or {}).items() if k in run.identity()}
    if old.get("digest") != run.digest and trained != run.identity():
        diff = first_difference(trained, run.identity()) or "digest"
        raise RunConflict(f"{d} holds a run of another spec ({diff}); give a new --output_dir, or remove that "
                          "folder to train it again")


def current_result(output_dir: str | Path, run: Run) -> dict | None:
    """The run's ``result.json`` when it is a result of this run as the spec now scores it, else None: trained
    as ``run`` (its digest), scored on ``run``'s scoring fields (its score digest; a record without one is taken
    as scored so), and, when ``done``, with its ``scores.npz`` still there (without it the run is scored again). A
    record of an earlier version, whose digest covered the whole evaluation (:attr:`Run.former_digest`), is this
    run's when that digest matches: its results are kept, neither retrained nor rescored."""
    d = run_dir(output_dir, run)
    res = read_json(d / "result.json")
    if res is not None and "score_digest" not in res and res.get("digest") == run.former_digest:
        res = {**res, "digest": run.digest, "score_digest": run.score_digest}
    if res is None or res.get("digest") != run.digest or res.get("score_digest", run.score_digest) != run.score_digest:
        return None
    if res.get("status") == "done" and not (d / "scores.npz").is_file():
        return None
    return res


def state(output_dir: str | Path, run: Run) -> str:
    """``done``, ``failed``, ``stopped`` or ``pending`` (no current result: :func:`current_result`) for ``run``."""
    res = current_result(output_dir, run)
    return "pending" if res is None else res.get("status", "pending")


def current_step(output_dir: str | Path, run: Run) -> tuple[int, int] | None:
    """``(step, total)`` of a training run from its log's last progress bar, or None before the first step."""
    log = run_dir(output_dir, run) / "run.log"
    try:
        with open(log, "rb") as f:
            f.seek(max(0, f.seek(0, os.SEEK_END) - 4096))
            tail = f.read().decode("utf-8", "replace")
    except OSError:
        return None
    found = STEP.findall(tail)
    return (int(found[-1][0]), int(found[-1][1])) if found else None


def last_line(path: Path) -> str:
    """The last non-blank line of a log (progress-bar carriage returns split lines), or ``""``."""
    try:
        with open(path, "rb") as f:
            f.seek(max(0, f.seek(0, os.SEEK_END) - 8192))
            tail = f.read().decode("utf-8", "replace")
    except OSError:
        return ""
    lines = [line.strip() for line in re.split(r"[\r\n]", tail) if line.strip()]
    return lines[-1] if lines else ""


def _last_checkpoint(model_dir: Path) -> str | None:
    done = [p for p in model_dir.glob("checkpoint-*") if (p / "trainer_state.json").is_file()]
    return str(max(done, key=lambda p: int(p.name.split("-")[-1]))) if done else None


def train_command(run: Run, d: Path, gpus: int = 0) -> list[str]:
    """The training command of ``run`` in folder ``d``: ``python -m simcse train --config d/config.json ...``
    (under ``torch.distributed.run`` when ``gpus`` > 1), resuming from the last checkpoint in ``d/model``."""
    model = d / "model"
    if run.kind == "sentence_transformers":
        cmd = ["-m", "simcse.experiments.st_train", "--options", str(d / "config.json"), "--output_dir", str(model)]
        return [sys.executable, *cmd]
    cmd = ["-m", "simcse", "train", "--config", str(d / "config.json"), "--output_dir", str(model),
           "--save_on_signal", SAVE_SIGNALS]
    ck = _last_checkpoint(model)
    if ck:
        cmd += ["--resume_from_checkpoint", ck]
    if gpus > 1:
        return [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={gpus}",
                f"--shutdown_timeout={STOP_TIMEOUT}", *cmd]
    return [sys.executable, *cmd]


def score_command(run: Run, d: Path) -> list[str]:
    """The scoring command of ``run`` (:mod:`simcse.experiments.score`)."""
    ev, opts = run.evaluation, run.options
    model = str(d / "model") if run.kind != "untrained" else opts["model_name_or_path"]
    cmd = [sys.executable, "-m", "simcse.experiments.score", "--model", model, "--tasks", *ev["tasks"],
           "--split", ev["split"], "--output", str(d / "scores.npz"), "--batch_size", str(ev["batch_size"])]
    if run.kind == "untrained":
        cmd += ["--pooler", str(opts.get("pooler_type", "cls"))]
        cmd += ["--mlp_only_train"] if opts.get("mlp_only_train") else []
        cmd += ["--seed", str(run.seed)]
    for key in ("senteval_dir",):
        if opts.get(key):
            cmd += ["--data_dir", str(opts[key])]
    cmd += ["--max_length", str(ev["max_length"])] if ev.get("max_length") else []
    cmd += ["--alignment"] if ev.get("alignment") else []
    return cmd


# the signal that asks a child to save a checkpoint and end: ``simcse train --save_on_signal`` saves on it, torchrun
# forwards it to every worker (waiting STOP_TIMEOUT s before it kills one), and a scoring process just ends (it starts
# again from the saved model)
STOP_SIGNAL = signal.SIGTERM
STOP_TIMEOUT = 300
# set once a stop was asked (a signal to the runner, a Slurm task's checkpoint()): no further child starts
STOPPING = threading.Event()


def _ends_with_parent():
    """A ``preexec_fn`` that makes the child get :data:`STOP_SIGNAL` when the thread that started it ends (Linux
    ``PR_SET_PDEATHSIG``; a runner killed by SIGKILL takes its runs down, each saving a checkpoint first), or None
    where the platform has no such call. Resolved before the fork; the child only calls it."""
    if not sys.platform.startswith("linux"):
        return None
    import ctypes

    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    parent, pr_set_pdeathsig = os.getpid(), 1

    def preexec() -> None:
        prctl(pr_set_pdeathsig, int(STOP_SIGNAL), 0, 0, 0)
        if os.getppid() != parent:  # the parent ended before the call: end now, as the signal would have asked
            os._exit(EXIT_PREEMPTED)

    return preexec


def _child(cmd: list[str], log: Path, env: dict, lock_fd: int) -> tuple[int, float, bool]:
    """Run ``cmd`` with its output appended to ``log``; ``(exit status, peak RSS MiB, stopped)``, ``stopped``
    True when a stop was asked while it ran (or before it could start: then it does not start). While it runs it
    is in :data:`CURRENT` (a signal to this process's executor can reach it); it ends with this thread."""
    me = threading.get_ident()
    if STOPPING.is_set():
        return EXIT_PREEMPTED, 0.0, True
    with open(log, "ab") as out:
        out.write(f"\n[experiment] $ {' '.join(cmd)}\n".encode())
        out.flush()
        # a session of its own: a Ctrl-C at the runner's terminal reaches the runner, which asks for a checkpoint
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env, pass_fds=(lock_fd,),
                                start_new_session=True, preexec_fn=_ends_with_parent())
        CURRENT[me] = proc
        if STOPPING.is_set():  # the stop came while it was starting
            proc.send_signal(STOP_SIGNAL)
        try:
            _, status, usage = os.wait4(proc.pid, 0)
            proc.returncode = os.waitstatus_to_exitcode(status)
        except ChildProcessError:  # reaped by stop_current (a signal handler in this thread)
            usage = None
        finally:
            CURRENT.pop(me, None)
    return proc.returncode, (usage.ru_maxrss / 1024.0 if usage else 0.0), STOPPING.is_set()


def signal_current() -> None:
    """Ask every running child of this process to save a checkpoint and end (:data:`STOP_SIGNAL`; ``simcse train
    --save_on_signal``, forwarded by torchrun to its workers), and start no further child; returns at once."""
    STOPPING.set()
    for proc in list(CURRENT.values()):
        if proc.poll() is None:
            proc.send_signal(STOP_SIGNAL)


def stop_current(timeout: float = STOP_TIMEOUT + 60) -> None:
    """:func:`signal_current`, then wait up to ``timeout`` s for each child to end (killed after that)."""
    procs = list(CURRENT.values())
    signal_current()
    for proc in procs:
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _lock(d: Path) -> int:
    import fcntl

    fd = os.open(d / ".lock", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        raise RunConflict(f"{d} is being run by another process (a runner or a Slurm task still at it); wait for "
                          "it to end, or end it") from None
    return fd


def prepare(output_dir: str | Path, run: Run) -> Path:
    """Create the run's folder with ``run.json`` and ``config.json`` (after :func:`check_folder`)."""
    d = run_dir(output_dir, run)
    d.mkdir(parents=True, exist_ok=True)
    check_folder(output_dir, run)
    write_json_atomic(d / "run.json", {"arm": run.arm, "seed": run.seed, "digest": run.digest,
                                       "identity": run.identity(), "score_digest": run.score_digest,
                                       "scoring": run.scoring(), "meta": run.meta})
    if run.kind != "untrained":
        write_json_atomic(d / "config.json", run.options)
    return d


def _train_metrics(model_dir: Path) -> dict:
    res = read_json(model_dir / "simcse_results.json") or {}
    train = res.get("train", {})
    return {k: train[k] for k in ("steps", "train_runtime", "train_samples_per_second") if k in train}


def _curve(model_dir: Path) -> list[dict]:
    """The alignment/uniformity measurements during training (``--align_uniform_every``), by step; [] without."""
    from simcse.training.callbacks import LOG_NAME, read_align_uniform_log

    if not (model_dir / LOG_NAME).is_file():
        return []
    return [{k: r[k] for k in ("step", "align", "uniform")} for r in read_align_uniform_log(model_dir / LOG_NAME)]


def execute(output_dir: str | Path, run: Run, env: dict | None = None, gpus: int = 0) -> dict:
    """Train and score one run in its folder; returns the ``result.json`` record (also written).

    Args:
        output_dir: the experiment folder. run: the run. env: extra environment of its processes (threads,
            ``CUDA_VISIBLE_DEVICES``). gpus: GPUs of the run (> 1: under ``torch.distributed.run``).

    Returns:
        ``{"status": "done" | "failed" | "stopped", "digest", "arm", "seed", "seconds", ...}``; a done run adds
        ``spearman`` (task -> x100), ``train`` (steps, runtime, samples/s), ``peak_rss_mib``, ``align``/
        ``uniform`` when measured, ``curve`` (step, align, uniform during training, ``--align_uniform_every``); a failed run ``error`` (the log's last line) and ``returncode``.

    Raises:
        RunConflict: the folder holds another spec's run, or another process runs it.
    """
    d = prepare(output_dir, run)
    lock_fd = _lock(d)
    try:
        if state(output_dir, run) == "done":
            return current_result(output_dir, run)
        full_env = {**os.environ, "TOKENIZERS_PARALLELISM": "false", **(env or {})}
        log, model = d / "run.log", d / "model"
        t0 = time.time()
        record = {"arm": run.arm, "seed": run.seed, "digest": run.digest, "score_digest": run.score_digest}
        rss = 0.0
        if run.kind != "untrained" and not (model / "simcse_results.json").is_file():
            if model.exists() and not _last_checkpoint(model):
                shutil.rmtree(model)  # an attempt that stopped before its first checkpoint: start again
            code, rss, stopped = _child(train_command(run, d, gpus), log, full_env, lock_fd)
            if code != 0 or stopped:
                # asked to stop: whatever the status (torchrun's own after forwarding the signal), the run stopped
                status = "stopped" if code == EXIT_PREEMPTED or stopped else "failed"
                record.update(status=status, returncode=code, error=last_line(log), seconds=round(time.time() - t0, 1))
                write_json_atomic(d / "result.json", record)
                return record
        code, score_rss, stopped = _child(score_command(run, d), log, full_env, lock_fd)
        if stopped and code != 0:  # scoring ended by the stop: scored again (from the saved model) on the next run
            record.update(status="stopped", returncode=code, seconds=round(time.time() - t0, 1))
            write_json_atomic(d / "result.json", record)
            return record
        if code != 0 or not (d / "scores.json").is_file():
            record.update(status="failed", returncode=code, error=last_line(log), seconds=round(time.time() - t0, 1))
            write_json_atomic(d / "result.json", record)
            return record
        summary = read_json(d / "scores.json") or {}
        record.update(status="done", seconds=round(time.time() - t0, 1), spearman=summary.get("spearman", {}),
                      train=_train_metrics(model), peak_rss_mib=round(max(rss, score_rss), 1),
                      train_peak_rss_mib=round(rss, 1) or None,
                      **{k: summary[k] for k in ("align", "uniform") if k in summary})
        if _curve(model):
            record["curve"] = _curve(model)
        write_json_atomic(d / "result.json", record)
        return record
    finally:
        os.close(lock_fd)
