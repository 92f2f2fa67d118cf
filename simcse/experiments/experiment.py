"""Run a spec's grid into an experiment folder, and the ``simcse experiment`` command.

    simcse experiment run SPEC --output_dir DIR [--executor local|slurm] [--parallel K] [--gpus_per_run G]
        [--arms a b] [--seeds 1 2] [--partition P --time MIN --cpus_per_run C --no_wait]   # slurm
        [--phase all|selection]                  # a spec with "selection": grids chosen on dev, then tested
    simcse experiment report DIR [--resamples N]
    simcse experiment list

``run`` checks the whole spec (options, seeds, baseline) and every run folder already there before it starts
anything, writes ``DIR/spec.json``, runs what is not done (finished runs are skipped, failed and stopped ones run
again, a stopped one from its checkpoint), then writes the report (:mod:`simcse.experiments.report`). A spec with
``selection`` runs in two such folders, its grids on dev then the chosen points on test (:func:`run_tuned`,
:mod:`simcse.experiments.selection`).
"""
from __future__ import annotations

import argparse
import contextlib
import io
import sys
from pathlib import Path

from simcse.experiments import runs as R
from simcse.experiments.executors import ExecutorError, run_local, run_slurm, slurm_executor
from simcse.experiments.report import SPEC_FILE, write_report
from simcse.experiments.spec import Spec, SpecError, check_data, list_specs, load_spec, write_json_atomic

EXIT_STOPPED = 75


def check_output_dir(output_dir: str | Path) -> Path:
    """``output_dir`` as a Path when it is, or can be created as, a writable folder; checked before any work.

    Raises:
        ExecutorError: one line naming ``--output_dir`` and what is in the way (a file at the path or above it, a
            folder that cannot be written).
    """
    import os

    out = Path(output_dir)
    probe = out
    while not probe.exists():
        if probe.parent == probe:
            break
        probe = probe.parent
    if probe.exists() and not probe.is_dir():
        where = "is a file" if probe == out else f"is under {str(probe)!r}, which is a file"
        raise ExecutorError(f"--output_dir {str(out)!r} {where}; expected a folder (or a path where one can be created)")
    if probe.exists() and not os.access(probe, os.W_OK | os.X_OK):
        raise ExecutorError(f"--output_dir {str(out)!r}: cannot write in {str(probe)!r}; expected a writable folder")
    return out


def plan(spec: Spec, output_dir: str | Path, arms: list[str] | None = None, seeds: list[int] | None = None) -> list:
    """The spec's runs (restricted to ``arms``/``seeds`` when given), each folder checked against the spec.

    Raises:
        SpecError: an unknown arm or seed in the restriction.
        RunConflict: a run folder of another spec (the first one, naming the field).
    """
    if arms:
        bad = [a for a in arms if a not in spec.arms]
        if bad:
            raise SpecError(f"--arms: {bad[0]!r} is not an arm of {spec.path}; expected some of {list(spec.arms)}")
    if seeds:
        bad = [s for s in seeds if s not in spec.seeds]
        if bad:
            raise SpecError(f"--seeds: {bad[0]} is not a seed of {spec.path}; expected some of {spec.seeds}")
    runs = [r for r in spec.runs() if (not arms or r.arm in arms) and (not seeds or r.seed in seeds)]
    for run in runs:
        R.check_folder(output_dir, run)
    return runs


def run_experiment(spec: str | Path | Spec, output_dir: str | Path, executor: str = "local", parallel: int = 1,
                   gpus_per_run: int = 0, arms: list[str] | None = None, seeds: list[int] | None = None,
                   slurm: dict | None = None, submitit_executor=None, wait: bool = True, report: bool = True,
                   stream=None, before_runs=None, phase: str = "all") -> dict:
    """Run a grid (see the module); returns ``{"results": {run key: record}, "report": ..., "stopped": bool}``.

    Args:
        spec: a spec file, a packaged spec name, or a loaded :class:`~simcse.experiments.spec.Spec`.
        output_dir: the experiment folder (created). executor: ``local`` or ``slurm``.
        parallel: local: runs at a time (threads split among them); slurm: the array's parallelism.
        gpus_per_run: GPUs of each run (local: its own ``CUDA_VISIBLE_DEVICES``; > 1 runs under torchrun).
        arms, seeds: run only these (the report still covers the whole spec).
        slurm: ``partition``, ``time_min``, ``cpus_per_run`` and further submitit parameters.
        submitit_executor: a submitit executor to submit to (tests: ``submitit.LocalExecutor``).
        wait: slurm: follow the jobs until they end (else return after submitting).
        before_runs: called with the runs to run once every check passed, before the first starts (a timed
            benchmark's idle-machine guard); not called when every run is done.
        phase: a spec with ``selection`` (:func:`run_tuned`): ``all`` (select, then test) or ``selection``
            (stop after the grids' dev runs).

    Raises:
        SpecError, RunConflict, ExecutorError: before any run starts, one line each (an ``output_dir`` that
            cannot be a folder, a spec option, a run's data, a folder of another spec).
    """
    if executor not in ("local", "slurm"):
        raise ExecutorError(f"--executor must be 'local' or 'slurm', got {executor!r}")
    for name, value, least in (("--parallel", parallel, 1), ("--gpus_per_run", gpus_per_run, 0)):
        if isinstance(value, bool) or not isinstance(value, int) or value < least:
            raise ExecutorError(f"{name} must be an integer of at least {least}, got {value!r}")
    if executor == "slurm" and submitit_executor is None:
        from simcse.experiments.executors import _submitit

        _submitit()  # no submitit: one line naming the extra, before any check of the spec
    out = check_output_dir(output_dir)
    slurm_ex = None
    if executor == "slurm":  # the cluster is asked before the spec's checks, and nothing is written without one
        try:
            slurm_ex = slurm_executor(out, gpus_per_run=gpus_per_run, parallel=parallel, executor=submitit_executor,
                                      **(slurm or {}))
        except ExecutorError:
            raise
        except Exception as e:  # submitit's own: no srun on this machine, a parameter Slurm refuses
            raise ExecutorError(f"--executor slurm: {e} (submitit could not set up the Slurm job array)") from None
    with contextlib.redirect_stdout(io.StringIO()):  # the option checks' own notices (precision) are not news here
        spec = spec if isinstance(spec, Spec) else load_spec(spec)
    if spec.selection is not None:  # grids selected on dev, then tested on fresh seeds: two ordinary phases
        if arms or seeds:
            raise SpecError(f"--arms/--seeds: {spec.path} has a 'selection', whose phases run every method's "
                            "grid; run it whole (a rerun continues it)")
        return run_tuned(spec, out, phase, executor=executor, parallel=parallel, gpus_per_run=gpus_per_run,
                         slurm=slurm, submitit_executor=submitit_executor, wait=wait, report=report, stream=stream,
                         before_runs=before_runs)
    if phase != "all":
        raise SpecError(f"--phase {phase}: {spec.path} has no 'selection' (a spec with one runs in phases)")
    with contextlib.redirect_stdout(io.StringIO()):
        runs = plan(spec, out, arms, seeds)
        check_data(spec, [r for r in runs if R.state(out, r) != "done"])
    todo = [r for r in runs if R.state(out, r) != "done"]
    if todo and before_runs is not None:
        before_runs(todo)
    out.mkdir(parents=True, exist_ok=True)
    write_json_atomic(out / SPEC_FILE, {"path": spec.path, "spec": spec.raw})
    print(f"[experiment] {spec.name}: {len(runs)} runs ({len(spec.arms)} arms x {len(spec.seeds)} seeds"
          f"{', restricted' if arms or seeds else ''}), {len(runs) - len(todo)} done before, {len(todo)} to run; "
          f"folder {out}", flush=True)
    stopped = False
    done_before = [r for r in runs if r not in todo]
    if not todo:
        results = {}
    elif executor == "local":
        results = run_local(out, todo, parallel, gpus_per_run, stream=stream, done_before=done_before)
        stopped = results.pop("__stopped__", False)
    else:
        results = run_slurm(out, todo, slurm_ex, gpus_per_run, wait=wait, stream=stream,
                            done_before=done_before,
                            **({"progress_every": 2.0} if submitit_executor is not None else {}))
        if not wait:
            return {"results": results, "report": None, "stopped": False}
    for key, rec in results.items():
        if isinstance(rec, dict) and rec.get("status") == "failed":
            print(f"[experiment] {key} failed: {rec.get('error', '')}", flush=True)
    if stopped:
        print("[experiment] stopped: the running runs saved a checkpoint; the same command continues the grid",
              flush=True)
    rep = None
    if report and not stopped:
        try:
            rep = write_report(out)
        except Exception as e:  # the runs' results are on disk: say so, and how to report them later
            print(f"[experiment] error: the report could not be written ({type(e).__name__}: "
                  f"{str(e).splitlines()[0] if str(e) else ''}); every run's result is kept in {out}/runs; "
                  f"'simcse experiment report {out}' writes it", file=sys.stderr, flush=True)
    if rep:
        print(rep["markdown"], flush=True)
        print(f"[experiment] wrote {', '.join(rep['files'])}", flush=True)
    return {"results": results, "report": rep, "stopped": stopped}


def run_tuned(spec: Spec, output_dir: Path, phase: str = "all", report: bool = True, wait: bool = True,
              **kwargs) -> dict:
    """Run a spec with ``selection`` (:mod:`simcse.experiments.selection`): its selection phase (every grid
    point on the selection seeds, dev only) in ``DIR/selection``, the choice, then (``phase`` ``all``) the
    chosen points on the test seeds in ``DIR/test``, each through :func:`run_experiment`; then the tuned report.

    Returns:
        ``{"results": {phase/run key: record}, "report", "stopped", "choice"}``.

    Raises:
        SpecError: before any run: a phase's options, data or folders, a grid over ``selection.budget_hours``,
            a bad ``phase``. SelectionError: a method without a complete point, a choice that differs from the
            one the test phase ran with (before any test run).
    """
    from simcse.experiments import selection as S

    if phase not in ("all", "selection"):
        raise SpecError(f"--phase must be 'all' or 'selection', got {phase!r}")
    out = Path(output_dir)
    with contextlib.redirect_stdout(io.StringIO()):
        sel_spec = S.selection_spec(spec)
        runs = plan(sel_spec, out / S.SELECTION_DIR)
        check_data(sel_spec, [r for r in runs if R.state(out / S.SELECTION_DIR, r) != "done"])
    S.check_budget(spec, out)
    S.check_grid(spec, out)
    out.mkdir(parents=True, exist_ok=True)
    write_json_atomic(out / SPEC_FILE, {"path": spec.path, "spec": spec.raw})
    print(f"[experiment] {spec.name}: select on {spec.selection['metric']} over seeds {spec.selection['seeds']}, "
          f"test over seeds {spec.selection['test_seeds']}: {S.planned_runs(spec)[1]}", flush=True)
    first = run_experiment(sel_spec, out / S.SELECTION_DIR, report=report, wait=wait, **kwargs)
    results = {f"{S.SELECTION_DIR}/{k}": v for k, v in first["results"].items()}
    done = {"results": results, "report": None, "stopped": first["stopped"], "choice": None}
    if first["stopped"] or not wait:
        return done
    if phase == "all":
        choice = S.choose(spec, out)
        S.check_choice(spec, out, choice)
        for method, c in choice.items():
            print(f"[experiment] {method}: chose {c['point']} (mean dev {c['mean']:.2f})"
                  + (f", tied with {c['tied']}: the first in the grid's order" if c["tied"] else ""), flush=True)
        with contextlib.redirect_stdout(io.StringIO()):
            t_spec = S.test_spec(spec, choice)
        S.record_choice(spec, out, choice)
        second = run_experiment(t_spec, out / S.TEST_DIR, report=report, wait=wait, **kwargs)
        results.update({f"{S.TEST_DIR}/{k}": v for k, v in second["results"].items()})
        done.update(stopped=second["stopped"], choice=choice)
        if second["stopped"] or not wait:
            return done
    if report:
        done["report"] = S.write_tuned_report(spec, out)
        print(done["report"]["markdown"], flush=True)
        print(f"[experiment] wrote {', '.join(done['report']['files'])}", flush=True)
    return done


def write_any_report(output_dir: str | Path, n_resamples: int | None = None) -> dict:
    """The report of an experiment folder: :func:`~simcse.experiments.report.write_report`, or for a spec with
    ``selection`` :func:`~simcse.experiments.selection.write_tuned_report`."""
    from simcse.experiments.report import check_resamples, load_experiment
    from simcse.experiments.selection import write_tuned_report

    check_resamples(n_resamples)
    spec = load_experiment(output_dir)
    if spec.selection is not None:
        return write_tuned_report(spec, output_dir, n_resamples)
    return write_report(output_dir, n_resamples)


def run_built_spec(raw: dict, output_dir: str | Path, origin: str, **kwargs) -> dict:
    """Run a spec that a script built (a JSON object, e.g. a packaged spec with the script's options over it):
    :func:`~simcse.experiments.spec.parse_spec`, :func:`~simcse.experiments.spec.check_options`, then
    :func:`run_experiment` with ``kwargs``. ``origin`` names the spec in messages.

    Raises:
        SystemExit: ``error: <one line>`` for a bad spec, run folder or executor, before any run starts.
    """
    from simcse.experiments.spec import check_options, parse_spec

    try:
        spec = parse_spec(raw, origin)
        check_options(spec)
        return run_experiment(spec, output_dir, **kwargs)
    except (SpecError, R.RunConflict, ExecutorError) as e:
        raise SystemExit(f"error: {e}") from None


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="simcse experiment", description="Arms x seeds: run a spec's grid of "
                                "'simcse train' runs, here or on Slurm, and report the evidence over seeds.")
    sub = p.add_subparsers(dest="action", metavar="{run,report,list}")
    r = sub.add_parser("run", help="run (or continue) a spec's grid into --output_dir")
    r.add_argument("spec", help="a spec file, or a packaged spec name ('simcse experiment list')")
    r.add_argument("--output_dir", required=True, help="the experiment folder (a rerun continues it)")
    r.add_argument("--executor", choices=["local", "slurm"], default="local",
                   help="local: runs on this machine; slurm: one job-array task per run (needs "
                        "'pip install simcse[slurm]')")
    r.add_argument("--parallel", type=int, default=1, help="local: runs at a time, the CPU threads split among "
                   "them; slurm: array tasks at a time (default 1)")
    r.add_argument("--gpus_per_run", type=int, default=0, help="GPUs per run (local: its own CUDA_VISIBLE_DEVICES; "
                   "more than 1: the run trains under torchrun; default 0)")
    r.add_argument("--arms", nargs="+", default=None, help="run only these arms (default: all)")
    r.add_argument("--seeds", nargs="+", type=int, default=None, help="run only these seeds (default: all)")
    r.add_argument("--no_report", action="store_true", help="do not write the report at the end")
    r.add_argument("--phase", choices=["all", "selection"], default="all", help="a spec with 'selection': all "
                   "(select on dev, then test the chosen points) or selection (stop after the grids' dev runs)")
    s = r.add_argument_group("slurm (--executor slurm)")
    s.add_argument("--partition", default=None, help="Slurm partition (default: the cluster's)")
    s.add_argument("--time", type=int, default=60, help="time limit per task in minutes (a task that reaches it "
                   "saves a checkpoint and is requeued; default 60)")
    s.add_argument("--cpus_per_run", type=int, default=None, help="CPUs per task (default: the cluster's)")
    s.add_argument("--no_wait", action="store_true", help="submit and return (run 'report' when the jobs ended)")
    rep = sub.add_parser("report", help="write report.md/json/png of an experiment folder")
    rep.add_argument("output_dir", help="the folder of 'simcse experiment run'")
    rep.add_argument("--resamples", type=int, default=None, help="bootstrap resamples (default: the spec's)")
    sub.add_parser("list", help="list the packaged specs")
    return p


def main(argv: list[str] | None = None) -> int:
    """The ``simcse experiment`` command; returns the exit status (2: bad input, one ``error:`` line; 75: stopped
    by a signal, the same command continues; 1: some run failed)."""
    args = build_parser().parse_args(sys.argv[1:] if argv is None else argv)
    try:
        if args.action == "list":
            print("\n".join(list_specs()))
            return 0
        if args.action == "report":
            rep = write_any_report(args.output_dir, args.resamples)
            print(rep["markdown"])
            print(f"[experiment] wrote {', '.join(rep['files'])}")
            return 0
        if args.action != "run":
            build_parser().print_help(sys.stderr)
            return 2
        slurm = {"partition": args.partition, "time_min": args.time, "cpus_per_run": args.cpus_per_run}
        out = run_experiment(args.spec, args.output_dir, args.executor, args.parallel, args.gpus_per_run,
                             args.arms, args.seeds, slurm=slurm, wait=not args.no_wait, report=not args.no_report,
                             phase=args.phase)
    except (SpecError, R.RunConflict, ExecutorError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if out["stopped"]:
        return EXIT_STOPPED
    failed = [k for k, v in out["results"].items() if isinstance(v, dict) and v.get("status") == "failed"]
    return 1 if failed else 0
