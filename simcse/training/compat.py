"""Command lines written for the reference code (princeton-nlp/SimCSE, transformers 4.2.1) run here.

The reference's ``train.py`` parses HF ``TrainingArguments`` of transformers 4.2; transformers 5 renamed or
removed some of its fields. :func:`add_legacy_options` declares those options on the one parser of
``simcse train`` (:mod:`simcse.training.parser`) as aliases of today's spelling (or as accepted and dropped, where
they no longer mean anything), logging one deprecation line per option; :func:`legacy_config_options` does the
same for a config file's keys. :func:`check_output_dir` restores the reference's refusal to train into a
non-empty output folder unless ``--overwrite_output_dir`` is given.
"""
from __future__ import annotations

import argparse
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
def _say_renamed(old: str, new: str) -> None:
    logger.warning("--%s is the transformers 4 name of --%s; using --%s (deprecated spelling)", old, new, new)


def _say_removed(old: str) -> None:
    logger.warning("--%s was removed in transformers 5 and is ignored: %s", old, REMOVED[old][1])


def _say_optim(old: str) -> None:
    logger.warning("--%s is the transformers 4 form of --optim %s; using --optim %s", old, OPTIM_FLAGS[old],
                   OPTIM_FLAGS[old])


class _Legacy(argparse.Action):
    """An option of transformers 4.2 declared on the one parser: one deprecation line, then its effect
    (stored under the new option's name, dropped, or turned into ``--optim``)."""

    def __init__(self, option_strings, dest, legacy: str = "", kind: str = "renamed", **kwargs):
        super().__init__(option_strings, dest, **kwargs)
        self.legacy, self.kind = legacy, kind

    def __call__(self, parser, namespace, values, option_string=None):
        if self.kind == "renamed":
            _say_renamed(self.legacy, RENAMED[self.legacy])
            setattr(namespace, self.dest, values)
        elif self.kind == "removed":
            _say_removed(self.legacy)
        elif values:  # --adafactor [true]
            _say_optim(self.legacy)
            setattr(namespace, "optim", OPTIM_FLAGS[self.legacy])


def add_legacy_options(parser: argparse.ArgumentParser, string_to_bool) -> None:
    """Declare the transformers-4 options of :data:`RENAMED`, :data:`REMOVED` and :data:`OPTIM_FLAGS` on ``parser``
    (hidden from ``--help``): a renamed one parses exactly as its new option (same type, choices and number of
    values) and stores there; a removed one takes its value, if it has one, and is dropped; ``--adafactor``
    becomes ``--optim adafactor``. Each use logs one warning line naming the old and the new form.

    ``parser`` must already hold the new options; ``string_to_bool`` parses a boolean option's value.
    """
    targets = {a.dest: a for a in parser._actions}
    for old, new in RENAMED.items():
        t = targets[new]
        parser.add_argument(f"--{old}", dest=new, action=_Legacy, legacy=old, kind="renamed", nargs=t.nargs,
                            const=t.const, type=t.type, choices=t.choices, default=argparse.SUPPRESS,
                            help=argparse.SUPPRESS)
    for old, (takes_value, _) in REMOVED.items():
        bool_kwargs = {} if takes_value else {"nargs": "?", "const": True, "type": string_to_bool}
        parser.add_argument(f"--{old}", dest=f"_legacy_{old}", action=_Legacy, legacy=old, kind="removed",
                            default=argparse.SUPPRESS, help=argparse.SUPPRESS, **bool_kwargs)
    for old in OPTIM_FLAGS:
        parser.add_argument(f"--{old}", dest=f"_legacy_{old}", action=_Legacy, legacy=old, kind="optim", nargs="?",
                            const=True, type=string_to_bool, default=argparse.SUPPRESS, help=argparse.SUPPRESS)
    for old, new in RENAMED_IN_5.items():  # HF's own older spelling: parsed as is, stored under the new name
        action = next((a for a in parser._actions if f"--{old}" in a.option_strings), None)
        if action is not None and new in targets:
            action.dest = new


def legacy_config_options(options: dict) -> dict:
    """A config file's options with transformers-4 keys treated as on the command line (renamed, dropped, or
    ``adafactor: true`` -> ``optim: adafactor``), one warning line each; other keys unchanged, in order."""
    out = {}
    for key, value in options.items():
        if key in RENAMED:
            _say_renamed(key, RENAMED[key])
            out[RENAMED[key]] = value
        elif key in RENAMED_IN_5:
            out[RENAMED_IN_5[key]] = value
        elif key in REMOVED:
            _say_removed(key)
        elif key in OPTIM_FLAGS:
            if value is True or str(value).lower() in ("true", "1", "yes"):
                _say_optim(key)
                out["optim"] = OPTIM_FLAGS[key]
        else:
            out[key] = value
    return out


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
