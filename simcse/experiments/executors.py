"""Where a grid's runs execute: one after another on this machine (``local``) or as a Slurm job array (``slurm``,
through submitit). Both call :func:`simcse.experiments.runs.execute` once per run; neither schedules anything of
its own beyond handing runs to an existing engine (a thread pool of ``parallel`` workers; submitit).

``local``: ``parallel`` runs at a time, each with ``OMP_NUM_THREADS`` = the CPUs / ``parallel`` (torch's thread
count follows it) and, with ``gpus_per_run`` G, its own ``CUDA_VISIBLE_DEVICES`` (G devices of those visible,
one slot per run). SIGTERM, SIGINT or SIGHUP to the runner asks every running run to save a checkpoint and stop
(torchrun forwards the request to each worker), starts no further run, and the same command later continues from
there; a runner killed outright (SIGKILL) takes its runs down too, each asked to save first.

``slurm``: one array task per pending run (``slurm_array_parallelism`` = ``parallel``), with the partition, the
time limit, G GPUs and the CPUs per task; a run on several GPUs runs under ``torch.distributed.run`` inside its
task. A task that Slurm preempts or times out gets submitit's warning signal: :class:`RunTask` asks the training
process to save a checkpoint and returns itself to submitit, which requeues the task; the requeued task resumes
from that checkpoint.
"""
from __future__ import annotations

import os
import signal
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from simcse.experiments import runs as R
from simcse.experiments.spec import Run

SLURM_EXTRA = "pip install simcse[slurm]"
# the signals that stop the local runner (its runs save a checkpoint and end): kill, Ctrl-C, a closed terminal
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


class ExecutorError(ValueError):
    """An executor that cannot start (an option out of range, submitit missing): one line."""


def _fmt_s(seconds: float | None) -> str:
    if seconds is None:
        return "?"
    seconds = int(seconds)
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m" if seconds >= 3600 else f"{seconds // 60}m{seconds % 60:02d}s"


class Progress:
    """The one progress line of a grid: runs done / running / failed of the whole grid (``done_before``: the
    runs that were done when this invocation began), the running runs' steps, and an ETA from the durations of
    the finished runs (those done before by their recorded ``seconds``), printed when it changes; on a terminal,
    redrawn in place. A run counts once: running while it runs (a failed run being run again is not failed),
    then as its new result says."""

    def __init__(self, output_dir, plan: list[Run], parallel: int, stream=None, done_before: list[Run] = ()):
        self.output_dir, self.plan, self.parallel = output_dir, plan, max(1, parallel)
        self.stream = stream or sys.stdout
        self.done_before = len(done_before)
        self.durations: list[float] = [s for s in ((R.current_result(output_dir, r) or {}).get("seconds")
                                                   for r in done_before) if isinstance(s, (int, float)) and s > 0]
        self.running: dict[str, tuple[Run, float]] = {}
        self.ended: set[str] = set()  # runs of the plan that ended in this invocation
        self.last = ""
        self.lock = threading.Lock()

    def line(self) -> str:
        ended = [R.state(self.output_dir, r) for r in self.plan if r.key in self.ended]
        done, failed = self.done_before + ended.count("done"), ended.count("failed")
        steps = []
        for key, (run, _) in sorted(self.running.items()):
            s = R.current_step(self.output_dir, run)
            steps.append(f"{key} step {s[0]}/{s[1]}" if s else f"{key} starting")
        left = len(self.plan) - len(ended) - len(self.running)
        eta = None
        if self.durations:
            mean = sum(self.durations) / len(self.durations)
            eta = mean * (left + len(self.running)) / self.parallel
        return (f"[experiment] {done}/{len(self.plan) + self.done_before} done, {len(self.running)} running, "
                f"{failed} failed" + (f" | {'; '.join(steps)}" if steps else "") + f" | ETA {_fmt_s(eta)}")

    def show(self, force: bool = False) -> None:
        with self.lock:
            text = self.line()
            if text == self.last and not force:
                return
            self.last = text
            try:
                tty = getattr(self.stream, "isatty", lambda: False)()
                self.stream.write(("\r\x1b[K" + text) if tty else text + "\n")
                self.stream.flush()
            except (OSError, ValueError):  # the terminal closed (SIGHUP): the runs go on being stopped, unprinted
                pass

    def started(self, run: Run) -> None:
        with self.lock:
            self.running[run.key] = (run, time.time())

    def finished(self, run: Run) -> None:
        """``run`` ended (its duration counts toward the ETA when :meth:`started` saw it start)."""
        with self.lock:
            if run.key in self.ended:
                return
            self.ended.add(run.key)
            if run.key in self.running:
                self.durations.append(time.time() - self.running.pop(run.key)[1])


def _visible_gpus() -> list[str]:
    seen = os.environ.get("CUDA_VISIBLE_DEVICES")
    if seen is not None:
        return [d for d in seen.split(",") if d.strip()]
    import torch

    return [str(i) for i in range(torch.cuda.device_count())]


def local_slots(parallel: int, gpus_per_run: int, cpus: int | None = None) -> list[dict]:
    """The environment of each of ``parallel`` local slots: ``OMP_NUM_THREADS``/``MKL_NUM_THREADS`` (the CPUs
    split evenly, at least 1, and never more than the user's own ``OMP_NUM_THREADS``/``MKL_NUM_THREADS``) and, with ``gpus_per_run`` > 0, ``CUDA_VISIBLE_DEVICES`` (slot i: devices
    ``i*G .. i*G+G-1`` of those visible).

    Raises:
        ExecutorError: ``parallel`` < 1, ``gpus_per_run`` < 0, or fewer GPUs than ``parallel x gpus_per_run``.
    """
    if parallel < 1:
        raise ExecutorError(f"--parallel must be at least 1, got {parallel}")
    if gpus_per_run < 0:
        raise ExecutorError(f"--gpus_per_run must be 0 or more, got {gpus_per_run}")
    if cpus is None:
        cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    threads = max(1, cpus // parallel)
    slots = []
    for _ in range(parallel):
        slot = {}
        for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):  # never more threads than the user allowed
            cap = os.environ.get(name, "").strip()
            slot[name] = str(min(threads, int(cap)) if cap.isdigit() and int(cap) > 0 else threads)
        slots.append(slot)
    if gpus_per_run:
        gpus = _visible_gpus()
        if len(gpus) < parallel * gpus_per_run:
            raise ExecutorError(f"--parallel {parallel} x --gpus_per_run {gpus_per_run} needs "
                                f"{parallel * gpus_per_run} GPUs; {len(gpus)} visible")
        for i, slot in enumerate(slots):
            slot["CUDA_VISIBLE_DEVICES"] = ",".join(gpus[i * gpus_per_run:(i + 1) * gpus_per_run])
    return slots


def run_local(output_dir, plan: list[Run], parallel: int = 1, gpus_per_run: int = 0, progress_every: float = 5.0,
              stream=None, done_before: list[Run] = ()) -> dict:
    """Execute the ``plan``'s runs here, ``parallel`` at a time; returns ``{run key: result record}``.
    ``done_before``: the grid's runs already done (counted in the progress line and its ETA).

    A SIGTERM/SIGINT/SIGHUP while it runs: the running runs save a checkpoint and stop (status ``stopped``), the rest
    do not start; the function returns what there is and ``__stopped__`` is True in the result.

    Raises:
        ExecutorError: as :func:`local_slots`.
    """
    import queue

    slots: queue.Queue = queue.Queue()
    for env in local_slots(parallel, gpus_per_run):
        slots.put(env)
    progress = Progress(output_dir, plan, parallel, stream, done_before)
    stop = threading.Event()
    R.STOPPING.clear()
    results: dict = {}

    def one(run: Run) -> None:
        if stop.is_set():
            return
        env = slots.get()
        try:
            progress.started(run)
            results[run.key] = R.execute(output_dir, run, env, gpus_per_run)
        finally:
            progress.finished(run)
            slots.put(env)

    def on_signal(signum, frame):
        stop.set()
        R.signal_current()  # every running run saves a checkpoint and stops

    main_thread = threading.current_thread() is threading.main_thread()
    previous = {s: signal.signal(s, on_signal) for s in STOP_SIGNALS} if main_thread else {}
    try:
        with ThreadPoolExecutor(max_workers=parallel) as pool:
            futures = [pool.submit(one, run) for run in plan]
            while not all(f.done() for f in futures):
                progress.show()
                time.sleep(min(progress_every, 1.0) if not progress.durations else progress_every)
            for f in futures:
                f.result()
    finally:
        for s, h in previous.items():
            signal.signal(s, h)
    progress.show(force=True)
    if getattr(progress.stream, "isatty", lambda: False)():
        progress.stream.write("\n")
    results["__stopped__"] = stop.is_set()
    return results


# ------------------------------------------------------------------------------------------ slurm
def _submitit():
    try:
        import submitit
    except ImportError:
        raise ExecutorError(f"--executor slurm needs submitit: {SLURM_EXTRA}") from None
    return submitit


class RunTask:
    """The callable submitit pickles for one array task: ``RunTask(output_dir, run, gpus)()`` executes the run;
    on submitit's preemption/timeout signal, :meth:`checkpoint` asks the training process to save a checkpoint
    (:data:`simcse.experiments.runs.STOP_SIGNAL`, forwarded by torchrun to every worker), waits for it, and returns a new submission of itself, which resumes from that checkpoint."""

    def __init__(self, output_dir: str, run: Run, gpus: int = 0, env: dict | None = None):
        self.output_dir, self.run, self.gpus, self.env = str(output_dir), run, gpus, dict(env or {})

    def __call__(self) -> dict:
        d = R.run_dir(self.output_dir, self.run)
        d.mkdir(parents=True, exist_ok=True)
        (d / "task.pid").write_text(str(os.getpid()))
        R.STOPPING.clear()
        return R.execute(self.output_dir, self.run, self.env, self.gpus)

    def checkpoint(self, *args, **kwargs):
        from submitit.helpers import DelayedSubmission

        R.stop_current()
        return DelayedSubmission(RunTask(self.output_dir, self.run, self.gpus, self.env))


def slurm_executor(output_dir, partition: str | None = None, time_min: int = 60, gpus_per_run: int = 0,
                   cpus_per_run: int | None = None, parallel: int = 1, executor=None, **extra):
    """A submitit executor for the grid's array (``executor``: one given, e.g. ``submitit.LocalExecutor`` in
    tests; else ``submitit.AutoExecutor(cluster="slurm")`` with its logs under ``<output_dir>/slurm``).

    Raises:
        ExecutorError: submitit is not installed (naming the extra), or an option out of range.
    """
    submitit = _submitit()
    if time_min < 1:
        raise ExecutorError(f"--time must be at least 1 minute, got {time_min}")
    if executor is None:
        executor = submitit.AutoExecutor(folder=str(Path(output_dir) / "slurm" / "%j"), cluster="slurm")
        params = {"timeout_min": time_min, "slurm_array_parallelism": parallel, "tasks_per_node": 1, "nodes": 1}
        if partition:
            params["slurm_partition"] = partition
        if gpus_per_run:
            params["gpus_per_node"] = gpus_per_run
        if cpus_per_run:
            params["cpus_per_task"] = cpus_per_run
        params.update(extra)
        executor.update_parameters(**params)
    return executor


def run_slurm(output_dir, plan: list[Run], executor, gpus_per_run: int = 0, wait: bool = True,
              progress_every: float = 30.0, stream=None, done_before: list[Run] = ()) -> dict:
    """Submit the ``plan``'s runs as one job array (one task each) and, with ``wait``, follow them until they end
    (``done_before``: as :func:`run_local`).

    Returns:
        ``{run key: result record}`` of the ended tasks (``wait``), else ``{run key: job id}``.
    """
    env = {}
    if os.environ.get("OMP_NUM_THREADS"):
        env["OMP_NUM_THREADS"] = os.environ["OMP_NUM_THREADS"]
    tasks = [RunTask(str(output_dir), run, gpus_per_run, env) for run in plan]
    with executor.batch():
        jobs = [executor.submit(t) for t in tasks]
    print(f"[experiment] submitted {len(jobs)} runs as job array {jobs[0].job_id.split('_')[0] if jobs else '-'} "
          f"(logs: {getattr(executor, 'folder', '')})", flush=True)
    if not wait:
        return {run.key: job.job_id for run, job in zip(plan, jobs)}
    progress = Progress(output_dir, plan, len(plan), stream, done_before)
    while not all(j.done() for j in jobs):
        for run, job in zip(plan, jobs):
            if job.done():
                progress.finished(run)
        progress.show()
        time.sleep(progress_every)
    for run in plan:
        progress.finished(run)
    progress.show(force=True)
    out = {}
    for run, job in zip(plan, jobs):
        try:
            out[run.key] = job.result()
        except Exception as e:  # the task itself failed (not the run): say so in the run's record
            out[run.key] = {"status": "failed", "arm": run.arm, "seed": run.seed, "error": str(e).splitlines()[-1]}
    return out
