"""Training entry points: ``python scripts/train.py ...`` / ``simcse train ...`` (:func:`main`) and, from Python,
:func:`build_trainer`.

Arguments: :class:`~simcse.training.arguments.ModelArguments`, :class:`~simcse.training.arguments.DataTrainingArguments` and
:class:`~simcse.training.training_args.SimCSETrainingArguments`, parsed once by :mod:`simcse.training.parser` (a
config's options as defaults, the reference's transformers-4 options as aliases).
"""
from __future__ import annotations

import json
import logging
import sys
from pathlib import Path

from simcse.training.compat import check_output_dir
from simcse.training.build import SetupError, build
from simcse.training.parser import DATA_SOURCE_KEYS, parse_args, parse_command_line, arguments_from, without_resume

logger = logging.getLogger("simcse.training.train")
__all__ = ["DATA_SOURCE_KEYS", "SetupError", "build", "build_trainer", "main", "parse_args", "resume_command",
           "run_command", "run_training"]


def build_trainer(model_args, data_args, training_args, run_command: str | None = None):
    """The Python entry: a ready :class:`~simcse.training.trainer.SimCSETrainer` from the three argument
    dataclasses (:class:`~simcse.training.arguments.ModelArguments`,
    :class:`~simcse.training.arguments.DataTrainingArguments`,
    :class:`~simcse.training.training_args.SimCSETrainingArguments`), as ``simcse train`` builds it: the output
    folder checked (the reference's refusal of a non-empty one), the seed set, the model and data loaded. Call
    ``.train()`` on it. Nothing of the arguments is changed.

    ``run_command``: the shell command of the run, written into each checkpoint (the resume line); None: none.

    Raises:
        SetupError: a bad option or input, in one line, before training starts.
    """
    from transformers import set_seed

    try:
        check_output_dir(training_args.output_dir,
                         bool(data_args.overwrite_output_dir or getattr(training_args, "overwrite_output_dir", False)),
                         bool(training_args.resume_from_checkpoint))
    except ValueError as e:
        raise SetupError(str(e)) from e
    set_seed(training_args.seed)
    return build(model_args, data_args, training_args, run_command)


def run_training(model_args, data_args, training_args, run_command: str | None = None, argv: list[str] | None = None
                 ) -> dict:
    """The whole of ``simcse train`` from Python: :func:`build_trainer`, then what the command runs around
    ``train()``: the STS-B/SICK-R dev evaluation before training (``eval_before_training``), training, the final
    save, the evaluation after training, the test evaluation (``test_after_training``), ``simcse_results.json``,
    the model card and the printed ``[simcse]`` lines. The arguments are the three dataclasses
    (:class:`~simcse.training.arguments.ModelArguments`, :class:`~simcse.training.arguments.DataTrainingArguments`,
    :class:`~simcse.training.training_args.SimCSETrainingArguments`); nothing of them is changed.

    ``run_command``: the shell command recorded in checkpoints (None: none); ``argv``: the command line a resume
    line is printed with (None: none).

    Returns:
        ``{"before": dev metrics, "train": {...}, "after": dev metrics, "test": test metrics}`` (the sections that
        ran), as ``simcse_results.json``.

    Raises:
        SetupError: a bad option or input, in one line, before training starts.
        GradCacheError: a loss that gradient caching cannot train (at the first step).
        WriteError: a checkpoint, the model or the results could not be written.
    """
    trainer = build_trainer(model_args, data_args, training_args, run_command)
    return _run(trainer, list(argv or []), model_args, data_args, training_args)


def _corr(value) -> float:
    """A correlation stored SentEval-style as a float, an (r, p) pair, or a scipy result object."""
    if hasattr(value, "statistic"):
        return float(value.statistic)
    if isinstance(value, (tuple, list)):
        return float(value[0])
    return float(value)


def _add_dev_intervals(metrics: dict, prefix: str, trainer, data_args, training_args) -> None:
    """With ``--bootstrap N``: the 95% bootstrap intervals of the dev Spearmans just logged, as
    ``<prefix>stsb_spearman_ci`` / ``<prefix>sickr_spearman_ci`` ([low, high]) in ``metrics`` (one more encoding of
    the dev sets with the model as it is). A task whose similarities are all equal (a collapsed model) gets no
    interval and one warning line: the finished run's results, model and card are kept, never lost to it."""
    if not data_args.bootstrap:
        return
    from simcse.evaluation import evaluate
    from simcse.evaluation.sts import ConstantScoresError

    model = trainer.accelerator.unwrap_model(trainer.model)
    cap = getattr(getattr(model, "first", model), "max_input_tokens", 512)  # the trainer's own evaluation cut
    for task, key in (("STSBenchmark", "stsb"), ("SICKRelatedness", "sickr")):
        try:
            res = evaluate(lambda s: model.encode(s, batch_size=training_args.per_device_eval_batch_size,
                                                  max_length=trainer.eval_max_length or cap),
                           [task], data_dir=trainer.senteval_dir, mode="dev", bootstrap=data_args.bootstrap)
        except ConstantScoresError as e:  # a collapsed model: its Spearman has no interval; the run's results stay
            first = str(e).splitlines()[0]
            print(f"[simcse] warning: --bootstrap {data_args.bootstrap}: no interval for {prefix}{key}_spearman ({first}); "
                  "the results are kept without it", file=sys.stderr, flush=True)
            continue
        metrics[f"{prefix}{key}_spearman_ci"] = list(res[task]["dev"]["spearman_ci"])


def _print_metrics(title: str, metrics: dict) -> None:
    def shown(k, v):
        ci = metrics.get(f"{k}_ci")
        return f"{k}={v:.4f}" + (f" [{ci[0]:.4f}, {ci[1]:.4f}]" if ci else "")

    parts = [shown(k, v) for k, v in metrics.items() if isinstance(v, float) and ("spearman" in k or "avg_sts" in k)]
    parts += [f"{k}={v:.2f}" for k, v in metrics.items() if k.endswith("avg_transfer")]
    print(f"[simcse] {title}: " + " ".join(parts), flush=True)


EXIT_WRITE_ERROR = 74  # sysexits.h EX_IOERR: a checkpoint, the model or the results could not be written


def run_command(argv: list[str]) -> str:
    """The shell command of this run: its launcher (``simcse train``, ``torchrun ...`` or ``python PROG``) and
    ``argv`` without any ``--resume_from_checkpoint``."""
    import os
    import shlex

    from simcse.files.errors import command_prog

    args = without_resume(argv)
    prog = sys.argv[0] if sys.argv and sys.argv[0] else "scripts/train.py"
    # run by the ``simcse`` command's code (python -m simcse train, torchrun -m simcse train): the module and
    # the sub-command, not __main__.py's path
    target = ["-m", "simcse", "train"] if command_prog("train") and os.path.basename(prog) != "simcse" else [prog]
    if os.path.basename(prog) == "simcse":
        launcher = ["simcse", "train"]
    elif int(os.environ.get("WORLD_SIZE", "1")) > 1:
        local = int(os.environ.get("LOCAL_WORLD_SIZE", os.environ["WORLD_SIZE"]))
        nodes = int(os.environ["WORLD_SIZE"]) // max(1, local)
        launcher = ["torchrun", *([f"--nnodes={nodes}"] if nodes > 1 else []), f"--nproc_per_node={local}", *target]
    else:
        launcher = ["python", *target]
    return shlex.join([*launcher, *args])


def resume_command(argv: list[str], checkpoint: str) -> str:
    """The shell command that resumes this run from ``checkpoint``: the same launcher and arguments, with
    ``--resume_from_checkpoint checkpoint`` (replacing one given before)."""
    import shlex

    return f"{run_command(argv)} --resume_from_checkpoint {shlex.quote(checkpoint)}"


def _last_checkpoint(output_dir: str) -> str | None:
    from transformers.trainer_utils import get_last_checkpoint

    try:
        return get_last_checkpoint(output_dir)
    except OSError:
        return None


def main(argv: list[str] | None = None) -> dict:
    """Run training; returns the final metrics.

    Exits: setup problems, and a loss that gradient caching cannot train (at the first step), with a one-line
    ``error: ...`` (status 1); a signal of ``--save_on_signal`` with status
    75 after saving a checkpoint and printing the command that resumes it; a failed write (disk full, file size
    limit, read-only or failing storage) with one ``error: could not write ...`` line and status 74.
    """
    logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s", level=logging.INFO)
    argv = sys.argv[1:] if argv is None else argv
    try:
        line = parse_command_line(argv)
        if line.list_configs:
            from simcse.training.recipes import config_dir, list_configs

            print(f"packaged configs ({config_dir()}):\n  " + "\n  ".join(list_configs()))
            return {}
        model_args, data_args, training_args = arguments_from(line.options, line.config)
        trainer = build_trainer(model_args, data_args, training_args, run_command(argv))
    except SetupError as e:
        sys.exit(f"error: {e}")
    from simcse.files.storage import WriteError
    from simcse.training.gradcache import GradCacheError

    try:
        return _run(trainer, argv, model_args, data_args, training_args)
    except GradCacheError as e:
        sys.exit(f"error: {e}")
    except WriteError as e:
        last = _last_checkpoint(training_args.output_dir)
        hint = f"; the last complete checkpoint is kept; resume with: {resume_command(argv, last)}" if last else ""
        print(f"error: {e}{hint}", file=sys.stderr, flush=True)
        sys.exit(EXIT_WRITE_ERROR)


def program(argv: list[str] | None = None) -> dict:
    """:func:`main` as a whole process (``scripts/train.py``, ``simcse train``): after a finished run or a stop by
    signal (status 75), every process of a torchrun run waits for the others and the process group is destroyed
    (:func:`_close_process_group`) before the process ends. A failing process leaves at once, as before (its peers
    may be inside a collective: a barrier would hold them until its timeout). Called as a library function,
    :func:`main` leaves the group open, so that a process may train again in it."""
    from simcse.training.callbacks import EXIT_PREEMPTED

    try:
        results = main(argv)
    except SystemExit as e:
        if e.code == EXIT_PREEMPTED:
            _close_process_group()
        raise
    _close_process_group()
    return results


def _close_process_group() -> None:
    """Under torchrun: wait for every process at a barrier, then destroy the process group.

    Without it a process that ends first closes its gloo connections while the others still hold theirs (the
    main process is still evaluating and writing), and gloo may abort one of them at exit, so that torchrun
    reports a finished run as failed. A barrier that fails (its timeout, ``--ddp_timeout``, passed) leaves the
    group as it was: the process ends as it did without this.
    """
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        return
    try:
        dist.barrier()
    except Exception as e:  # noqa: BLE001 -- ending anyway; say why the group was left open
        print(f"[simcse] process group left open at exit: the barrier failed ({type(e).__name__}: {e})",
              file=sys.stderr, flush=True)
        return
    dist.destroy_process_group()


def _stopped_by_signal(trainer, argv, training_args) -> bool:
    """After ``train()``: when a signal stopped it, print the resume line and return True."""
    from simcse.training.callbacks import SaveOnSignalCallback

    cb = next((c for c in trainer.callback_handler.callbacks if isinstance(c, SaveOnSignalCallback)), None)
    if cb is None or cb.stop_step is None:
        return False
    if training_args.should_save:
        ck = cb.checkpoint or _last_checkpoint(training_args.output_dir)
        print(f"[simcse] stopped by {cb.signal_name} after step {cb.stop_step}; checkpoint saved: {ck}; "
              f"resume with: {resume_command(argv, ck)}", flush=True)
    return True


def _run(trainer, argv, model_args, data_args, training_args) -> dict:
    from simcse.training.callbacks import EXIT_PREEMPTED
    from simcse.files.storage import writing

    results = {}
    if data_args.eval_before_training:
        results["before"] = trainer.evaluate()
        _add_dev_intervals(results["before"], "eval_", trainer, data_args, training_args)
        _print_metrics(f"before training (dev; the starting model with pooler {model_args.pooler_type})", results["before"])
    start = _checkpoint_step(training_args.resume_from_checkpoint)
    import time

    started = time.time()
    out = trainer.train(resume_from_checkpoint=training_args.resume_from_checkpoint)
    if _stopped_by_signal(trainer, argv, training_args):
        sys.exit(EXIT_PREEMPTED)
    m = out.metrics
    examples_per_s = m.get("train_samples_per_second", 0.0)
    resumed = f" (steps {start + 1}-{out.global_step}, resumed from step {start})" if start else ""
    print(f"[simcse] trained {out.global_step - start} steps{resumed} in {m.get('train_runtime', 0.0):.0f} s "
          f"({examples_per_s:.1f} training examples/s, {m.get('train_steps_per_second', 0.0):.3f} steps/s)", flush=True)
    results["train"] = {"steps": out.global_step, **{k: float(v) for k, v in m.items() if isinstance(v, (int, float))}}
    with writing("the trained model", training_args.output_dir):
        trainer.save_model(training_args.output_dir)
    if data_args.eval_before_training or training_args.eval_strategy != "no" or training_args.do_eval:
        # The final model (the best checkpoint when load_best_model_at_end) is scored under its own keys
        # (final_stsb_spearman, ...): logged at the last step, it must not read as a second eval_ value there;
        # with the transfer tasks when --do_eval or --eval_transfer (the trainer's final_eval_transfer).
        results["after"] = trainer.evaluate(metric_key_prefix="final")
        _add_dev_intervals(results["after"], "final_", trainer, data_args, training_args)
        _print_metrics("after training (dev)", results["after"])
        _print_gain(results)
    if data_args.test_after_training and training_args.should_save:
        from simcse.evaluation import evaluate

        model = trainer.model
        res = evaluate(lambda s: model.encode(s, batch_size=training_args.per_device_eval_batch_size),
                       ["STSBenchmark", "SICKRelatedness"], data_dir=trainer.senteval_dir, mode="test",
                       bootstrap=data_args.bootstrap)
        results["test"] = {
            "test_stsb_spearman": _corr(res["STSBenchmark"]["test"]["spearman"]),
            "test_sickr_spearman": _corr(res["SICKRelatedness"]["test"]["spearman"]),
        }
        if data_args.bootstrap:
            results["test"]["test_stsb_spearman_ci"] = list(res["STSBenchmark"]["test"]["spearman_ci"])
            results["test"]["test_sickr_spearman_ci"] = list(res["SICKRelatedness"]["test"]["spearman_ci"])
        _print_metrics("after training (test)", results["test"])
    if training_args.should_save:
        from simcse.models.card import card_after_training
        from simcse.files.storage import write_text_atomic

        write_text_atomic(Path(training_args.output_dir) / "simcse_results.json", json.dumps(results, indent=2),
                          what="the results (simcse_results.json)")
        from simcse.training.checkpoints import remove_checkpoints
        from simcse.training.config import hub_model_id

        with writing("the model card", training_args.output_dir):
            card_after_training(training_args.output_dir, (model_args, data_args, training_args), results,
                                model_name=training_args.hub_model_id if training_args.push_to_hub else None,
                                base_model=hub_model_id(model_args.model_name_or_path),
                                objective=trainer.objective.describe())
        if not data_args.keep_checkpoints:  # the final model is saved: the folder keeps the model only
            remove_checkpoints(training_args.output_dir)
    if training_args.push_to_hub:
        trainer.push_to_hub()  # the whole output folder: model, simcse and sentence-transformers files, card
    if training_args.should_save:
        _print_next_steps(training_args.output_dir, data_args.keep_checkpoints, since=started - 1)
    return results


def _checkpoint_step(checkpoint) -> int:
    """The optimizer steps a checkpoint folder had done (its ``trainer_state.json``); 0 without one."""
    if not checkpoint or not isinstance(checkpoint, (str, Path)):
        return 0
    try:
        return int(json.loads((Path(checkpoint) / "trainer_state.json").read_text()).get("global_step", 0))
    except (OSError, ValueError):
        return 0


def _print_gain(results: dict) -> None:
    """One line: STS-B dev Spearman x 100 before training, after it, and the change."""
    before = (results.get("before") or {}).get("eval_stsb_spearman")
    after = (results.get("after") or {}).get("final_stsb_spearman")
    if before is not None and after is not None:
        print(f"[simcse] STS-B dev: {100 * before:.2f} before training -> {100 * after:.2f} after "
              f"({100 * (after - before):+.2f})", flush=True)


def _print_next_steps(output_dir: str, keep_checkpoints: bool = True, since: float | None = None) -> None:
    """Say where the trained model and the checkpoints are and the commands that use the model (the pooler is
    read from the folder). ``since``: the run's start (a time stamp); checkpoint folders older than it (an earlier
    run's, in a folder trained into again) are named apart."""
    out = Path(output_dir).resolve()
    folders = sorted(p for p in out.glob("checkpoint-*") if p.is_dir())
    kept = [str(p) for p in folders if since is None or p.stat().st_mtime >= since]
    older = [str(p) for p in folders if str(p) not in kept]
    if kept or older:
        where = ("kept in " + ", ".join(kept) if kept else "none written by this run") + (
            f"; from before this run: {', '.join(older)}" if older else "") + (
            " (--keep_checkpoints false removes them after the final save)" if kept else "")
    else:
        where = "removed after the final save (--keep_checkpoints false)" if not keep_checkpoints else "none saved"
    print(f"[simcse] trained model: {out}\n"
          f"[simcse] checkpoints:   {where}\n"
          f"[simcse] evaluate it:   simcse evaluate --model_name_or_path {out} --task_set sts --mode test"
          f"   (the paper's STS table; --task_set full adds the 7 transfer tasks, many minutes on a CPU)\n"
          f"[simcse] use it:        python -c \"from simcse import SimCSE; m = SimCSE('{out}'); "
          f"print(m.similarity('A man plays a guitar.', 'Someone plays music.'))\"", flush=True)


if __name__ == "__main__":
    main()
