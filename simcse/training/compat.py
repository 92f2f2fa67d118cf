"""Command lines written for the reference code (princeton-nlp/SimCSE, transformers 4.2.1) run here.

The reference's ``train.py`` parses HF ``TrainingArguments`` of transformers 4.2; transformers 5 renamed or
removed some of its fields. :func:`translate_legacy_args` rewrites such options in an argument list into
today's spelling (or drops those that no longer mean anything), logging one deprecation line per option.
:func:`check_output_dir` restores the reference's refusal to train into a non-empty output folder unless
``--overwrite_output_dir`` is given; :func:`check_fp16_device` turns ``--fp16`` on a machine without CUDA
into a one-line error, :func:`check_max_steps` a ``--max_steps`` that would train nothing.
"""
from __future__ import annotations

import logging
from pathlib import Path

logger = logging.getLogger("simcse.training.compat")

# transformers 4.2 TrainingArguments field -> today's option (same meaning, value passed on unchanged)
RENAMED = {
    "evaluation_strategy": "eval_strategy",
    "no_cuda": "use_cpu",
    "per_gpu_train_batch_size": "per_device_train_batch_size",
    "per_gpu_eval_batch_size": "per_device_eval_batch_size",
}
# HF's older names that transformers 5 still takes with a FutureWarning: passed on under today's name, said once
# in the log (the reference's and many HF users' --gradient_checkpointing keeps working, without the warning)
RENAMED_IN_5 = {
    "gradient_checkpointing": "activation_checkpointing",
    "gradient_checkpointing_kwargs": "activation_checkpointing_kwargs",
}
# transformers 4.2 fields that are gone: (takes a value?, what to do instead). Dropped with one line.
REMOVED = {
    "logging_dir": (True, "transformers 5 has no --logging_dir; set the TENSORBOARD_LOGGING_DIR environment variable"),
    "fp16_opt_level": (True, "apex AMP is gone; --fp16/--bf16 use torch.amp"),
    "fp16_backend": (True, "apex AMP is gone; --fp16/--bf16 use torch.amp"),
    "tpu_num_cores": (True, "set by the TPU launcher"),
    "tpu_metrics_debug": (False, "use --debug tpu_metrics_debug"),
    "past_index": (True, "not used by SimCSE models"),
    "sharded_ddp": (False, "use --fsdp"),
}
# fairscale-era boolean that became an --optim choice
OPTIM_FLAGS = {"adafactor": "adafactor"}
_BOOL_WORDS = {"true", "false", "yes", "no", "1", "0", "t", "f", "y", "n"}


def _split(token: str) -> tuple[str, str | None]:
    """``'--name=value'`` -> ``('name', 'value')``; ``'--name'`` -> ``('name', None)``."""
    name, eq, value = token[2:].partition("=")
    return name, (value if eq else None)


def _takes_next(argv: list[str], i: int, is_bool: bool) -> bool:
    """Whether ``argv[i + 1]`` is the value of the option at ``i`` (a bool option's value is optional)."""
    if i + 1 >= len(argv) or argv[i + 1].startswith("--"):
        return False
    return not is_bool or argv[i + 1].lower() in _BOOL_WORDS


def _is_true(value: str | None) -> bool:
    return value is None or value.lower() in ("true", "yes", "1", "t", "y")


def translate_legacy_args(argv: list[str]) -> list[str]:
    """Return ``argv`` with transformers-4 ``TrainingArguments`` options rewritten for transformers 5.

    ``--evaluation_strategy``, ``--no_cuda``, ``--per_gpu_{train,eval}_batch_size`` are renamed
    (``--eval_strategy``, ``--use_cpu``, ``--per_device_*``), and ``--gradient_checkpointing[_kwargs]`` (which
    transformers 5 takes with a FutureWarning) becomes ``--activation_checkpointing[_kwargs]``; ``--adafactor`` becomes ``--optim adafactor``;
    the removed apex/TPU/fairscale/logging-dir options are dropped with their value. Each logs one warning
    line naming the old and the new form. Both ``--name value`` and ``--name=value`` are understood; other
    arguments are returned unchanged and in order.
    """
    out: list[str] = []
    i = 0
    while i < len(argv):
        token = argv[i]
        if not token.startswith("--"):
            out.append(token)
            i += 1
            continue
        name, value = _split(token)
        if name in RENAMED:
            new = RENAMED[name]
            logger.warning("--%s is the transformers 4 name of --%s; using --%s (deprecated spelling)", name, new, new)
            out.append(f"--{new}" if value is None else f"--{new}={value}")
        elif name in RENAMED_IN_5:
            new = RENAMED_IN_5[name]
            logger.info("--%s is HF's older name of --%s; using --%s", name, new, new)
            out.append(f"--{new}" if value is None else f"--{new}={value}")
        elif name in REMOVED:
            is_bool = not REMOVED[name][0]
            if value is None and _takes_next(argv, i, is_bool):
                value = argv[i + 1]
                i += 1
            logger.warning("--%s was removed in transformers 5 and is ignored: %s", name, REMOVED[name][1])
        elif name in OPTIM_FLAGS:
            if value is None and _takes_next(argv, i, True):
                value = argv[i + 1]
                i += 1
            if _is_true(value):
                logger.warning("--%s is the transformers 4 form of --optim %s; using --optim %s", name,
                               OPTIM_FLAGS[name], OPTIM_FLAGS[name])
                out += ["--optim", OPTIM_FLAGS[name]]
        else:
            out.append(token)
        i += 1
    return out


def flag_given(argv: list[str], name: str) -> bool:
    """Whether ``argv`` sets the boolean option ``--name`` to true (``--name``, ``--name true``, ``--name=yes``...);
    the last occurrence wins, as in argparse."""
    given = False
    for i, token in enumerate(argv):
        opt, value = _split(token) if token.startswith("--") else (None, None)
        if opt != name:
            continue
        if value is None and i + 1 < len(argv) and argv[i + 1].lower() in _BOOL_WORDS:
            value = argv[i + 1]
        given = _is_true(value)
    return given


def check_output_dir(output_dir: str | None, overwrite: bool, resuming: bool) -> None:
    """Refuse, as the reference ``train.py`` did, to train into an existing non-empty folder.

    Allowed when ``overwrite`` (``--overwrite_output_dir``) or ``resuming`` (``--resume_from_checkpoint``).

    Raises:
        ValueError: the folder exists, is not empty, and neither flag is set (message names the folder
            and both ways out).
    """
    if not output_dir or overwrite or resuming:
        return
    out = Path(output_dir).expanduser()
    if out.is_dir() and any(out.iterdir()):
        raise ValueError(f"--output_dir {output_dir!r} already exists and is not empty; pass --overwrite_output_dir "
                         "to train into it anyway, or choose another --output_dir")


def check_max_steps(max_steps: int) -> None:
    """``--max_steps``: a positive number of optimizer steps, or -1 (HF's default: train ``--num_train_epochs``).

    HF's Trainer treats 0 as "not set" and still runs an optimizer step (weights move); a run asked to train 0
    steps is refused instead, in one line, before anything is loaded.

    Raises:
        ValueError: 0 or a value below -1.
    """
    if max_steps == 0 or max_steps < -1:
        raise ValueError(f"--max_steps {max_steps} trains nothing: give a positive number of optimizer steps, or -1 "
                         "(the default) to train --num_train_epochs")


def check_fp16_device(fp16: bool, use_cpu: bool) -> None:
    """``--fp16`` needs a CUDA GPU (the reference's ``--fp16`` is CUDA mixed precision).

    Raises:
        ValueError: ``fp16`` on a machine without CUDA or with ``--use_cpu``, in one line saying what to use.
    """
    if not fp16:
        return
    import torch

    if use_cpu or not torch.cuda.is_available():
        raise ValueError("--fp16 needs a CUDA GPU and none is in use here: drop --fp16 to train in float32, or "
                         "use --bf16 (bfloat16 autocast, which CPUs support)")
