"""The one parser of ``simcse train`` and ``scripts/train.py``, and the Python entry that shares its rules.

A command line is parsed once, by one ``HfArgumentParser`` over :class:`~simcse.training.arguments.ModelArguments`,
:class:`~simcse.training.arguments.DataTrainingArguments` and
:class:`~simcse.training.training_args.SimCSETrainingArguments`, plus ``--config`` / a first ``*.json`` argument,
``--list_configs``, ``--help`` (SimCSE's options and the most used HF ones) and ``--help-all``. Its actions have no
defaults (``argparse.SUPPRESS``), so the parse yields exactly the options the user gave; the dataclasses' own
defaults fill the rest. In between, a config file (:func:`simcse.training.config.load_config`, ``base`` chains
resolved) supplies defaults that the command line overrides, key by key; when the command line names its own
training data (``--train_file`` or ``--dataset_name``), the config's data-source keys (:data:`DATA_SOURCE_KEYS`)
are left out as a whole. The reference's transformers-4 options are declared on the same parser as aliases
(:func:`simcse.training.compat.add_legacy_options`), one deprecation line each.

:func:`training_arguments` is the same merge for Python callers: a config name or path and keyword options (field
names), no argv.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
from dataclasses import dataclass

from simcse.training.build import SetupError

# a config's training data, replaced as a whole when the command line gives --train_file or --dataset_name
DATA_SOURCE_KEYS = ("train_file", "dataset_name", "dataset_config_name", "dataset_data_files", "dataset_split")
OWN_SOURCE_KEYS = ("train_file", "dataset_name")
# Hugging Face TrainingArguments options listed by --help (all of them: --help-all)
COMMON_HF_OPTIONS = (
    "output_dir", "num_train_epochs", "max_steps", "learning_rate", "per_device_eval_batch_size",
    "gradient_accumulation_steps", "warmup_steps", "weight_decay", "eval_strategy", "eval_steps", "save_strategy",
    "save_steps", "save_total_limit", "load_best_model_at_end", "metric_for_best_model", "logging_steps", "seed",
    "use_cpu", "report_to", "do_eval", "resume_from_checkpoint", "push_to_hub", "hub_model_id",
)
_RESUME = ("--resume_from_checkpoint", "--resume-from-checkpoint")


def _types():
    from simcse.training.arguments import DataTrainingArguments, ModelArguments
    from simcse.training.training_args import SimCSETrainingArguments

    return ModelArguments, DataTrainingArguments, SimCSETrainingArguments


def _prog() -> str:
    """``simcse train`` (also while :func:`simcse.cli.main` runs it, :func:`simcse.files.errors.command_prog`), or
    ``train.py`` when run as ``python scripts/train.py``."""
    from simcse.files.errors import command_prog

    if command_prog("train"):
        return command_prog("train")
    return "train.py" if os.path.basename(sys.argv[0] if sys.argv else "") == "train.py" else "simcse train"


class _Help(argparse.Action):
    """``--help`` (SimCSE's options, the config mechanism, the most used HF options) or ``--help-all``."""

    def __init__(self, option_strings, dest, full: bool = False, **kwargs):
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kwargs)
        self.full = full

    def __call__(self, parser, namespace, values, option_string=None):
        build_parser(full_help=self.full).print_help()
        parser.exit()


def build_parser(full_help: bool = False):
    """The parser of ``simcse train``: no action has a default (an option absent from argv is absent from the
    namespace); each option's help ends with the default its dataclass gives it.

    ``full_help``: list every HF ``TrainingArguments`` option in the help, not only :data:`COMMON_HF_OPTIONS`.
    """
    from transformers import HfArgumentParser, TrainingArguments
    from transformers.hf_argparser import string_to_bool

    from simcse.training.compat import add_legacy_options

    model_cls, data_cls, run_cls = _types()
    parser = HfArgumentParser(
        (model_cls, data_cls, run_cls), prog=_prog(), add_help=False, allow_abbrev=False,
        usage="%(prog)s [CONFIG.json | --config NAME] [--option value ...]   (--list_configs, --help-all)",
        description="Train a SimCSE model. A config file gives defaults; options given here override them.",
        epilog="Configs: --list_configs lists the packaged ones (e.g. --config unsup_bert_base); any JSON file of "
               "option: value works too, with a 'base' key to inherit another. All Hugging Face TrainingArguments "
               "options: --help-all. Guide: docs/training.md.")

    def one_line_error(message: str):  # argparse would print the long usage first
        raise SetupError(f"{message} (see --help)")

    parser.error = one_line_error
    hf_names = {f.name for f in dataclasses.fields(TrainingArguments)}
    own_names = {f.name for f in dataclasses.fields(run_cls)} - hf_names | {"bf16", "fp16", "per_device_train_batch_size"}
    groups = {g.title: g for g in parser._action_groups}
    hf_group = parser.add_argument_group(
        "Hugging Face TrainingArguments" + ("" if full_help else " (the most used; all of them: --help-all)"))
    for action in list(groups[run_cls._argument_group_name]._group_actions):
        if action.dest in hf_names and action.dest not in own_names:
            groups[run_cls._argument_group_name]._group_actions.remove(action)
            hf_group._group_actions.append(action)
            if not full_help and action.dest not in COMMON_HF_OPTIONS:
                action.help = argparse.SUPPRESS
    for action in parser._actions:
        if action.type is string_to_bool:  # one rule for booleans everywhere
            action.type = cli_bool
        if isinstance(action, argparse._StoreFalseAction) and action.help is not argparse.SUPPRESS:
            # HF adds --no_X for a boolean X that defaults to true, with X's whole help: one line says what it is
            action.help = f"--{action.dest} false."
        elif action.help is not argparse.SUPPRESS:
            shown = "unset" if action.default is None else action.default
            action.help = f"{action.help or ''} (default: {str(shown).replace('%', '%%')})"
        action.default = argparse.SUPPRESS
        action.required = False
    own = parser._action_groups[1]  # "options": printed before the dataclass groups
    own.add_argument("-h", "--help", action=_Help, help="Show SimCSE's options and the most used HF ones, then exit.")
    own.add_argument("--help-all", action=_Help, full=True, help="Show every option, HF's included, then exit.")
    own.add_argument("--config", action="append", nargs="?", default=argparse.SUPPRESS,
                     help="A packaged config name (e.g. unsup_bert_base, ablations/table1_crop10) or a JSON file of "
                          "option: value; its options are defaults that the command line overrides.")
    own.add_argument("config_file", nargs="?", default=argparse.SUPPRESS, metavar="CONFIG.json",
                     help="The same as --config, given first.")
    own.add_argument("--list_configs", action="store_true", default=argparse.SUPPRESS,
                     help="List the packaged configs and exit.")
    add_legacy_options(parser, cli_bool)
    return parser


@dataclass
class CommandLine:
    """What one parse of a command line gave: the options given (field name -> typed value), the config named
    (or None), and whether ``--list_configs`` was asked."""

    options: dict
    config: str | None = None
    list_configs: bool = False


def parse_command_line(argv: list[str]) -> CommandLine:
    """Parse ``argv`` once with :func:`build_parser`.

    Raises:
        SetupError: an unknown option, a bad value, ``--config`` without a name, or two configs (one line).
    """
    ns = vars(build_parser().parse_args(argv))
    configs = [*ns.pop("config", []), *([ns.pop("config_file")] if "config_file" in ns else [])]
    if any(c is None for c in configs):
        raise SetupError("--config needs a packaged config name (e.g. unsup_bert_base) or a JSON file path")
    if len(configs) > 1:
        raise SetupError(f"two configs given ({configs[0]!r} and {configs[1]!r}); give one")
    listing = bool(ns.pop("list_configs", False))
    options = {k: v for k, v in ns.items() if not k.startswith("_legacy_")}
    return CommandLine(options, configs[0] if configs else None, listing)


def parse_args(argv: list[str]):
    """``(ModelArguments, DataTrainingArguments, SimCSETrainingArguments)`` of a ``simcse train`` command line.

    ``argv`` may name a config (``--config NAME_OR_PATH`` anywhere, or a first argument ``*.json``); see the module.

    Raises:
        SetupError: one line naming the bad option or file.
    """
    line = parse_command_line(argv)
    return arguments_from(line.options, line.config)


def training_arguments(config: str | None = None, **options):
    """The Python entry: ``(ModelArguments, DataTrainingArguments, SimCSETrainingArguments)`` from a config (a
    packaged name such as ``"unsup_cpu_minilm"`` or a JSON path; None: none) and keyword options that override
    it, with the command line's rules (config as defaults, a given ``train_file``/``dataset_name`` replacing the
    config's data source, transformers-4 names accepted with a deprecation line). Values are Python values
    (``bf16="auto"``, ``max_steps=3``), not strings.

    Raises:
        SetupError: an unknown option, a bad value or config file (one line).
    """
    from simcse.training.compat import legacy_config_options

    return arguments_from(legacy_config_options(options), config)


def arguments_from(options: dict, config: str | None = None):
    """Build the three argument dataclasses from ``options`` over ``config``'s options over their defaults."""
    values = {}
    if config is not None:
        values = _config_options(config, own_source=any(k in options for k in OWN_SOURCE_KEYS))
    values.update(options)
    return make_arguments(values)


def _config_options(config: str, own_source: bool) -> dict:
    """The options of config ``config`` typed as the parser types them (a string through the option's type,
    as argparse does for a string default); comments and, with ``own_source``, the data source left out."""
    from simcse.training.compat import legacy_config_options
    from simcse.training.config import ConfigError, load_config
    from simcse.training.recipes import resolve_config

    try:
        path = resolve_config(config)
        cfg = load_config(path)
    except (ConfigError, FileNotFoundError) as e:
        raise SetupError(str(e)) from e
    cfg = legacy_config_options({k: v for k, v in cfg.items() if not k.startswith("_")})
    actions = {a.dest: a for a in reversed(build_parser()._actions)}  # the main option wins over its no_ form
    out = {}
    for key, value in cfg.items():
        if own_source and key in DATA_SOURCE_KEYS:
            continue  # the command line names the training data: the config's data source does not apply
        action = actions.get(key)
        if action is None or key.startswith("_legacy_"):
            raise SetupError(f"config file {str(path)!r}: unknown option {key!r} (see --help)")
        try:
            out[key] = _typed(action, value)
        except (TypeError, ValueError, argparse.ArgumentTypeError) as e:
            raise SetupError(f"config file {str(path)!r}: {key}: {e}") from e
    return out


def _typed(action, value):
    many = action.nargs in ("+", "*")
    if isinstance(value, (list, dict)) and not many:
        value = json.dumps(value)  # a JSON-valued option (e.g. a dict of arguments) is a string on the command line
    if many:
        items = value if isinstance(value, list) else [value]
        return [action.type(v) if isinstance(v, str) and action.type else v for v in items]
    return action.type(value) if isinstance(value, str) and action.type else value


def make_arguments(values: dict):
    """The three dataclasses from ``values`` (field name -> value); each checks itself in ``__post_init__``.

    Raises:
        SetupError: an unknown name, a missing required option, or the first bad value, in one line.
    """
    types = _types()
    unknown = sorted(set(values) - {f.name for cls in types for f in dataclasses.fields(cls) if f.init})
    if unknown:
        raise SetupError(f"unknown option(s) {', '.join(unknown)} (see simcse train --help)")
    out = []
    for cls in types:
        names = {f.name for f in dataclasses.fields(cls) if f.init}
        missing = [f.name for f in dataclasses.fields(cls) if f.init and f.name not in values
                   and f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING]
        if missing:
            raise SetupError(f"the following arguments are required: {', '.join('--' + m for m in missing)} (see --help)")
        try:
            given = {k: _boolean(cls, k, v) for k, v in values.items() if k in names}
            out.append(cls(**given))
        except (ValueError, OSError) as e:
            raise SetupError(" ".join(str(e).split())) from e
    return tuple(out)


def _boolean(cls, name: str, value):
    """``value`` of option ``name`` read by the one boolean rule (:func:`simcse.files.checks.as_bool`) when the option
    is a boolean; any other option's value unchanged.

    Raises:
        ValueError: a boolean option given something else than true/false, 1/0, yes/no.
    """
    from simcse.files.checks import as_bool, bool_field_kind

    kind = bool_field_kind(cls, name)
    return value if kind is None else as_bool(value, f"--{name}", allow_none=kind == "bool | None")


def cli_bool(text: str) -> bool:
    """The command line's boolean type: :func:`simcse.files.checks.as_bool` (true/false, 1/0, yes/no)."""
    from simcse.files.checks import as_bool

    try:
        return as_bool(text, "a boolean option")
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def without_resume(argv: list[str]) -> list[str]:
    """``argv`` without its ``--resume_from_checkpoint`` option and value, every other argument kept in order
    (as given: the parser of this one option passes the rest through)."""
    only = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    only.add_argument(*_RESUME)
    return only.parse_known_args(argv)[1]
