"""Training entry point (``python scripts/train.py ...`` or ``simcse train ...``).

Arguments: :class:`~simcse.training.arguments.ModelArguments`, :class:`~simcse.training.arguments.DataTrainingArguments` and
HF ``TrainingArguments``. A config (a first argument ending in ``.json``, or ``--config NAME_OR_PATH`` with a
packaged name such as ``unsup_bert_base``; ``--list_configs`` lists them; read by :func:`simcse.training.config.load_config`,
which resolves its ``base`` chain) gives defaults that the other options override. The reference's
transformers-4 options are translated (:mod:`simcse.training.compat`).
"""
from __future__ import annotations

import json
import logging
import sys
from pathlib import Path

from simcse.training.compat import check_output_dir
from simcse.training.build import SetupError, build
from simcse.training.config import ConfigError, load_config
from simcse.training.precision import resolve_bf16_auto

logger = logging.getLogger("simcse.training.train")
# a config's training data, replaced as a whole when the command line gives --train_file or --dataset_name
DATA_SOURCE_KEYS = ("train_file", "dataset_name", "dataset_config_name", "dataset_data_files", "dataset_split")


def _split_config(argv: list[str]) -> tuple[str | None, list[str]]:
    """(the config named by a first argument ending in ``.json`` or by ``--config X``, the other arguments)."""
    config = None
    if argv and argv[0].endswith(".json") and not argv[0].startswith("-"):
        config, argv = argv[0], argv[1:]
    rest: list[str] = []
    i = 0
    while i < len(argv):
        if argv[i] == "--config" or argv[i].startswith("--config="):
            value = argv[i].partition("=")[2] if "=" in argv[i] else (argv[i + 1] if i + 1 < len(argv) else "")
            if not value or value.startswith("--"):
                raise SetupError("--config needs a packaged config name (e.g. unsup_bert_base) or a JSON file path")
            if config is not None:
                raise SetupError(f"two configs given ({config!r} and {value!r}); give one")
            config = value
            i += 1 if "=" in argv[i] else 2
            continue
        rest.append(argv[i])
        i += 1
    return config, rest


def parse_args(argv: list[str]):
    """Parse training arguments into (ModelArguments, DataTrainingArguments, TrainingArguments).

    ``argv`` may start with a config (a JSON file, or ``--config NAME_OR_PATH`` anywhere: a packaged config
    such as ``unsup_bert_base``); its keys become defaults that later options override. A config's training
    data (``train_file``, or ``dataset_name`` with its ``dataset_*`` keys) is left out as a whole when the command
    line names its own with ``--train_file`` or ``--dataset_name``. transformers-4
    options of the reference's scripts are then translated (:func:`simcse.training.compat.translate_legacy_args`).

    Raises:
        SetupError: one line naming the bad option or file.
    """
    from transformers import HfArgumentParser, TrainingArguments

    from simcse.files.errors import command_prog

    from simcse.training.arguments import DataTrainingArguments, ModelArguments, RunArguments
    from simcse.training.compat import check_fp16_device, check_max_steps, flag_given, translate_legacy_args
    from simcse.training.recipes import resolve_config

    parser = HfArgumentParser((ModelArguments, DataTrainingArguments, TrainingArguments, RunArguments),
                              prog=command_prog("train"))

    def one_line_error(message: str):  # argparse would print the ~130-line usage first
        raise SetupError(f"{message} (see --help)")

    parser.error = one_line_error
    config, argv = _split_config(argv)
    if config is not None:
        try:
            cfg = load_config(resolve_config(config))
        except (ConfigError, FileNotFoundError) as e:
            raise SetupError(str(e)) from e
        prefix = []
        own_source = any(_last_value(argv, f"--{k}") is not None for k in ("train_file", "dataset_name"))
        for key, value in cfg.items():
            if key.startswith("_"):
                continue  # comments
            if own_source and key in DATA_SOURCE_KEYS:
                continue  # the command line names the training data: the config's data source does not apply
            prefix += [f"--{key}", json.dumps(value) if isinstance(value, (list, dict)) else str(value)]
        argv = prefix + argv
    argv = translate_legacy_args(argv)
    argv = resolve_bf16_auto(argv, say=lambda line: print(line, flush=True))  # --bf16 auto -> true / false
    argv = argv + _precision_flags(argv)
    try:
        model_args, data_args, training_args, run_args = parser.parse_args_into_dataclasses(args=argv)
    except (ValueError, OSError) as e:
        raise SetupError(str(e)) from e
    # transformers sets do_eval whenever eval_strategy != "no"; the reference's --do_eval (transformers 4.2: None
    # unless given) asks for the final evaluation with the transfer tasks, so only an explicit one counts here.
    training_args.do_eval = flag_given(argv, "do_eval")
    try:
        check_fp16_device(training_args.fp16, training_args.use_cpu)
        check_max_steps(training_args.max_steps)
    except ValueError as e:
        raise SetupError(str(e)) from e
    training_args.save_on_signal = run_args.signals  # read by build(); not a TrainingArguments field
    _apply_global_batch(data_args, training_args, _gave_per_device(argv))
    out = Path(training_args.output_dir).expanduser() if training_args.output_dir else None
    blocker = next((q for q in ([out, *out.parents] if out else []) if q.exists()), None)
    if blocker is not None and not blocker.is_dir():
        raise SetupError(f"--output_dir {training_args.output_dir!r} cannot be used: {str(blocker)!r} is a file, not a folder")
    return model_args, data_args, training_args


def _last_value(argv: list[str], flag: str) -> str | None:
    """The value of the last ``flag value`` or ``flag=value`` in ``argv`` (None when absent)."""
    value = None
    for i, a in enumerate(argv):
        if a == flag and i + 1 < len(argv):
            value = argv[i + 1]
        elif a.startswith(flag + "="):
            value = a[len(flag) + 1:]
    return value


def _asks_bf16(argv: list[str]) -> bool:
    """Whether ``argv`` sets HF's ``--bf16`` to true (``--bf16``, ``--bf16 true``, ``--bf16=1``, ...)."""
    where = [i for i, a in enumerate(argv) if a == "--bf16" or a.startswith("--bf16=")]
    if not where:
        return False
    i = where[-1]  # the last one counts (a config's value comes first)
    value = argv[i].partition("=")[2] if "=" in argv[i] else (argv[i + 1] if i + 1 < len(argv) else None)
    return value is None or value.startswith("--") or value.lower() in ("true", "1", "yes")


def _precision_flags(argv: list[str]) -> list[str]:
    """``--bf16 true`` / ``--fp16 true`` for ``--precision`` on a CUDA machine; nothing on CPU, for fp32, or when
    ``--bf16``/``--fp16``/``--use_cpu`` is given (an explicit HF flag wins). An explicit ``--bf16 true`` on a
    machine without CUDA gets ``--use_cpu true`` (bf16 autocast on the CPU; HF refuses bf16 there otherwise).

    Raises:
        SetupError: ``--precision bf16`` on a GPU without bf16 support.
    """
    import torch

    if _asks_bf16(argv) and _last_value(argv, "--use_cpu") is None and not torch.cuda.is_available():
        return ["--use_cpu", "true"]
    precision = _last_value(argv, "--precision")
    if precision not in ("bf16", "fp16") or any(_last_value(argv, f) is not None for f in ("--bf16", "--fp16", "--use_cpu")):
        return []
    if not torch.cuda.is_available():
        logger.info("--precision %s applies to GPUs; training on CPU in fp32", precision)
        return []
    if precision == "bf16" and not torch.cuda.is_bf16_supported():
        raise SetupError("--precision bf16: this GPU has no bf16 support; pass --precision fp16 (the reference's choice)")
    return [f"--{precision}", "true"]


def _gave_per_device(argv: list[str]) -> bool:
    """Whether ``argv`` (config options included) sets ``--per_device_train_batch_size``."""
    return _last_value(argv, "--per_device_train_batch_size") is not None


def _apply_global_batch(data_args, training_args, explicit_per_device: bool) -> None:
    """Set the per-device batch from ``--global_batch_size`` and ``WORLD_SIZE`` (:mod:`simcse.training.batch_size`)."""
    if data_args.global_batch_size is None:
        return
    from simcse.training.batch_size import BatchSizeError, derive_per_device_batch, world_size_from_env

    try:
        world = world_size_from_env()
        per_device = derive_per_device_batch(
            data_args.global_batch_size, world,
            training_args.per_device_train_batch_size if explicit_per_device else None,
            data_args.allow_batch_size_mismatch)
    except BatchSizeError as e:
        raise SetupError(str(e)) from e
    training_args.per_device_train_batch_size = per_device
    logger.info("contrastive batch: %d per device x %d process(es) = %d (--global_batch_size %d)",
                per_device, world, per_device * world, data_args.global_batch_size)


def _corr(value) -> float:
    """A correlation stored SentEval-style as a float, an (r, p) pair, or a scipy result object."""
    if hasattr(value, "statistic"):
        return float(value.statistic)
    if isinstance(value, (tuple, list)):
        return float(value[0])
    return float(value)


def _print_metrics(title: str, metrics: dict) -> None:
    parts = [f"{k}={v:.4f}" for k, v in metrics.items() if isinstance(v, float) and ("spearman" in k or "avg_sts" in k)]
    parts += [f"{k}={v:.2f}" for k, v in metrics.items() if k.endswith("avg_transfer")]
    print(f"[simcse] {title}: " + " ".join(parts), flush=True)


EXIT_WRITE_ERROR = 74  # sysexits.h EX_IOERR: a checkpoint, the model or the results could not be written


def run_command(argv: list[str]) -> str:
    """The shell command of this run: its launcher (``simcse train``, ``torchrun ...`` or ``python PROG``) and
    ``argv`` without any ``--resume_from_checkpoint``."""
    import os
    import shlex

    args, skip = [], False
    for a in argv:
        if skip:
            skip = False
        elif a == "--resume_from_checkpoint":
            skip = True
        elif not a.startswith("--resume_from_checkpoint="):
            args.append(a)
    prog = sys.argv[0] if sys.argv and sys.argv[0] else "scripts/train.py"
    if os.path.basename(prog) == "simcse":
        launcher = ["simcse", "train"]
    elif int(os.environ.get("WORLD_SIZE", "1")) > 1:
        local = int(os.environ.get("LOCAL_WORLD_SIZE", os.environ["WORLD_SIZE"]))
        nodes = int(os.environ["WORLD_SIZE"]) // max(1, local)
        launcher = ["torchrun", *([f"--nnodes={nodes}"] if nodes > 1 else []), f"--nproc_per_node={local}", prog]
    else:
        launcher = ["python", prog]
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

    Exits: setup problems with a one-line ``error: ...`` (status 1); a signal of ``--save_on_signal`` with status
    75 after saving a checkpoint and printing the command that resumes it; a failed write (disk full, file size
    limit, read-only or failing storage) with one ``error: could not write ...`` line and status 74.
    """
    logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s", level=logging.INFO)
    argv = sys.argv[1:] if argv is None else argv
    if "--list_configs" in argv:
        from simcse.training.recipes import config_dir, list_configs

        print(f"packaged configs ({config_dir()}):\n  " + "\n  ".join(list_configs()))
        return {}
    try:
        model_args, data_args, training_args = parse_args(argv)
        try:
            check_output_dir(training_args.output_dir, data_args.overwrite_output_dir,
                             bool(training_args.resume_from_checkpoint))
        except ValueError as e:
            raise SetupError(str(e)) from e
        from transformers import set_seed

        set_seed(training_args.seed)
        trainer = build(model_args, data_args, training_args)
        trainer.run_command = run_command(argv)  # written into each checkpoint-N (the resume line reads it)
    except SetupError as e:
        sys.exit(f"error: {e}")
    from simcse.files.storage import WriteError

    try:
        return _run(trainer, argv, model_args, data_args, training_args)
    except WriteError as e:
        last = _last_checkpoint(training_args.output_dir)
        hint = f"; the last complete checkpoint is kept; resume with: {resume_command(argv, last)}" if last else ""
        print(f"error: {e}{hint}", file=sys.stderr, flush=True)
        sys.exit(EXIT_WRITE_ERROR)


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
        _print_metrics("before training (dev)", results["before"])
    out = trainer.train(resume_from_checkpoint=training_args.resume_from_checkpoint)
    if _stopped_by_signal(trainer, argv, training_args):
        sys.exit(EXIT_PREEMPTED)
    m = out.metrics
    examples_per_s = m.get("train_samples_per_second", 0.0)
    print(f"[simcse] trained {out.global_step} steps in {m.get('train_runtime', 0.0):.0f} s "
          f"({examples_per_s:.1f} training examples/s, {m.get('train_steps_per_second', 0.0):.3f} steps/s)", flush=True)
    results["train"] = {"steps": out.global_step, **{k: float(v) for k, v in m.items() if isinstance(v, (int, float))}}
    with writing("the trained model", training_args.output_dir):
        trainer.save_model(training_args.output_dir)
    if data_args.eval_before_training or training_args.eval_strategy != "no" or training_args.do_eval:
        # The final model (the best checkpoint when load_best_model_at_end) is scored under its own keys
        # (final_stsb_spearman, ...): logged at the last step, it must not read as a second eval_ value there.
        trainer.eval_transfer = data_args.eval_transfer or training_args.do_eval  # the reference's --do_eval
        results["after"] = trainer.evaluate(metric_key_prefix="final")
        _print_metrics("after training (dev)", results["after"])
    if data_args.test_after_training and training_args.should_save:
        from simcse.evaluation import evaluate

        model = trainer.model
        res = evaluate(lambda s: model.encode(s, batch_size=training_args.per_device_eval_batch_size),
                       ["STSBenchmark", "SICKRelatedness"], data_dir=data_args.senteval_dir, mode="test")
        results["test"] = {
            "test_stsb_spearman": _corr(res["STSBenchmark"]["test"]["spearman"]),
            "test_sickr_spearman": _corr(res["SICKRelatedness"]["test"]["spearman"]),
        }
        _print_metrics("after training (test)", results["test"])
    if training_args.should_save:
        from simcse.models.card import card_after_training
        from simcse.files.storage import write_text_atomic

        write_text_atomic(Path(training_args.output_dir) / "simcse_results.json", json.dumps(results, indent=2),
                          what="the results (simcse_results.json)")
        with writing("the model card", training_args.output_dir):
            card_after_training(training_args.output_dir, (model_args, data_args, training_args), results,
                                model_name=training_args.hub_model_id if training_args.push_to_hub else None)
    if training_args.push_to_hub:
        trainer.push_to_hub()  # the whole output folder: model, simcse and sentence-transformers files, card
    if training_args.should_save:
        _print_next_steps(training_args.output_dir)
    return results


def _print_next_steps(output_dir: str) -> None:
    """Say where the trained model is and the commands that use it (the pooler is read from the folder)."""
    out = Path(output_dir).resolve()
    print(f"[simcse] trained model: {out}\n"
          f"[simcse] evaluate it:   simcse evaluate --model_name_or_path {out} --task_set full\n"
          f"[simcse] use it:        python -c \"from simcse import SimCSE; m = SimCSE('{out}'); "
          f"print(m.similarity('A man is playing a guitar.', 'A person plays music.'))\"", flush=True)


if __name__ == "__main__":
    main()
