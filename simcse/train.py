"""Training entry point (``python scripts/train.py ...`` or ``simcse train ...``).

Arguments: :class:`~simcse.arguments.ModelArguments`, :class:`~simcse.arguments.DataTrainingArguments` and
HF ``TrainingArguments``. A config (a first argument ending in ``.json``, or ``--config NAME_OR_PATH`` with a
packaged name such as ``unsup_bert_base``; ``--list_configs`` lists them; read by :func:`simcse.config.load_config`,
which resolves its ``base`` chain) gives defaults that the other options override. The reference's
transformers-4 options are translated (:mod:`simcse.compat`).
"""
from __future__ import annotations

import json
import logging
import sys
from pathlib import Path

from .compat import check_output_dir
from .config import ConfigError, load_config, resolve_model_name

logger = logging.getLogger("simcse.train")


class SetupError(Exception):
    """A problem with the arguments or inputs found before training starts."""


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
    such as ``unsup_bert_base``); its keys become defaults that later options override. transformers-4
    options of the reference's scripts are then translated (:func:`simcse.compat.translate_legacy_args`).

    Raises:
        SetupError: one line naming the bad option or file.
    """
    from transformers import HfArgumentParser, TrainingArguments

    from .arguments import DataTrainingArguments, ModelArguments, RunArguments
    from .compat import check_fp16_device, flag_given, translate_legacy_args
    from .recipes import resolve_config

    parser = HfArgumentParser((ModelArguments, DataTrainingArguments, TrainingArguments, RunArguments))

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
        for key, value in cfg.items():
            if key.startswith("_"):
                continue  # comments
            prefix += [f"--{key}", json.dumps(value) if isinstance(value, (list, dict)) else str(value)]
        argv = prefix + argv
    argv = translate_legacy_args(argv)
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
    except ValueError as e:
        raise SetupError(str(e)) from e
    training_args.save_on_signal = run_args.signals  # read by build(); not a TrainingArguments field
    _apply_global_batch(data_args, training_args, _gave_per_device(argv))
    out = Path(training_args.output_dir).expanduser() if training_args.output_dir else None
    blocker = next((q for q in ([out, *out.parents] if out else []) if q.exists()), None)
    if blocker is not None and not blocker.is_dir():
        raise SetupError(f"--output_dir {training_args.output_dir!r} cannot be used: {str(blocker)!r} is a file, not a folder")
    return model_args, data_args, training_args


def _hub_kwargs(model_args) -> dict:
    """The reference's hub options (--cache_dir, --model_revision, --use_auth_token) as from_pretrained kwargs."""
    hub = {}
    if model_args.cache_dir:
        hub["cache_dir"] = model_args.cache_dir
    if model_args.model_revision not in (None, "main"):
        hub["revision"] = model_args.model_revision
    if model_args.use_auth_token:
        hub["token"] = True
    return hub


def _replace_tokenizer(model, model_args, hub: dict) -> None:
    """--tokenizer_name / --use_fast_tokenizer false: load that tokenizer and, as the reference did, resize the
    encoder's token embeddings to its length."""
    if not model_args.tokenizer_name and model_args.use_fast_tokenizer:
        return
    from transformers import AutoTokenizer

    name = model_args.tokenizer_name or model_args.model_name_or_path
    model.tokenizer = AutoTokenizer.from_pretrained(name, use_fast=model_args.use_fast_tokenizer,
                                                    trust_remote_code=model_args.trust_remote_code, **hub)
    if len(model.tokenizer) != model.encoder.get_input_embeddings().num_embeddings:
        model.encoder.resize_token_embeddings(len(model.tokenizer))
        logger.info("token embeddings resized to the tokenizer's %d tokens", len(model.tokenizer))


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
    if "--bf16" not in argv and _last_value(argv, "--bf16") is None:
        return False
    value = _last_value(argv, "--bf16")
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
    """Set the per-device batch from ``--global_batch_size`` and ``WORLD_SIZE`` (:mod:`simcse.batch_size`)."""
    if data_args.global_batch_size is None:
        return
    from .batch_size import BatchSizeError, derive_per_device_batch, world_size_from_env

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


def _load_model(model_args, dropout: float | None):
    """The :class:`~simcse.modeling.SimCSEModel` to train (``--dropout`` applied to its config before loading;
    the reference's --config_name, --tokenizer_name and hub options honoured)."""
    from .dropout import encoder_config_with_dropout
    from .modeling import SimCSEModel

    model_args.model_name_or_path = resolve_model_name(model_args.model_name_or_path)
    hub = _hub_kwargs(model_args)
    hf_kwargs = dict(hub)
    if model_args.attn_implementation is not None:
        hf_kwargs["attn_implementation"] = model_args.attn_implementation
    config_source = model_args.config_name or model_args.model_name_or_path
    if dropout is not None:
        hf_kwargs["config"], names = encoder_config_with_dropout(
            config_source, dropout, trust_remote_code=model_args.trust_remote_code)
        logger.info("dropout p=%g set on config attributes %s", dropout, names)
    elif model_args.config_name:
        from transformers import AutoConfig

        hf_kwargs["config"] = AutoConfig.from_pretrained(config_source, trust_remote_code=model_args.trust_remote_code, **hub)
    model = SimCSEModel.from_pretrained(
        model_args.model_name_or_path,
        pooler_type=model_args.pooler_type,
        mlp_only_train=model_args.mlp_only_train,
        new_mlp_init="random",
        trust_remote_code=model_args.trust_remote_code,
        **hf_kwargs,
    )
    _replace_tokenizer(model, model_args, hub)
    return model


def _load_dataset(data_args, seed: int):
    """``(dataset, columns)`` of the training file: its own views, or consecutive-sentence pairs (``--objective``)."""
    from .data import load_next_sentence_dataset, load_sentence_dataset

    if data_args.objective != "simcse":
        return load_next_sentence_dataset(data_args.train_file, data_args.objective, seed=seed,
                                          max_train_samples=data_args.max_train_samples)
    return load_sentence_dataset(data_args.train_file, data_args.max_train_samples, neutral=data_args.neutral_as_negative)


def _make_collator(model_args, data_args, training_args, tok):
    """The (B, V, L) collator, wrapped in the augmenting collator when ``--augmentation`` is not ``none``."""
    from .data import ContrastiveCollator

    collator = ContrastiveCollator(
        pad_token_id=tok.pad_token_id or 0,
        max_seq_length=data_args.max_seq_length,
        pad_to_max_length=data_args.pad_to_max_length,
        mask_token_id=tok.mask_token_id,  # MLM masks are drawn by the trainer (SimCSETrainer._add_mlm_masks)
        vocab_size=len(tok),
        special_ids=tuple(tok.all_special_ids),
        seed=training_args.seed,
    )
    augmentation = model_args.augmentation
    if augmentation == "none":
        return collator
    from .augment import AugmentingCollator, MLMReplacer, load_mlm_model, word_augmenter

    if augmentation == "mlm":
        try:
            mlm = load_mlm_model(model_args.model_name_or_path, trust_remote_code=model_args.trust_remote_code)
        except (ValueError, OSError) as e:
            raise SetupError(str(e)) from e
        replacer = MLMReplacer(mlm, tok.mask_token_id, tok.all_special_ids, model_args.augmentation_ratio)
        collator = AugmentingCollator(tok, collator, data_args.max_seq_length, token_augment=replacer, seed=training_args.seed)
    else:
        collator = AugmentingCollator(tok, collator, data_args.max_seq_length,
                                      word_augment=word_augmenter(augmentation, model_args.augmentation_ratio),
                                      seed=training_args.seed)
    logger.info("augmentation %s (ratio %g) on the positive view, dropout %s", augmentation,
                model_args.augmentation_ratio, "on" if model_args.augmentation_with_dropout else "off")
    return collator


def build(model_args, data_args, training_args):
    """Load the model and data and return a ready :class:`SimCSETrainer` (nothing written yet).

    The ablation flags (docs/ablations.md) are wired here: ``--dropout`` (and ``--augmentation_with_dropout
    false``, which means dropout 0) rewrites the encoder config before loading; ``--objective`` builds
    consecutive-sentence pairs; ``--neutral_as_negative`` adds the neutral view; ``--augmentation`` keeps the
    text and augments it in the collator; ``--two_encoders`` wraps the model in a ``DualEncoderModel``.
    """
    from .callbacks import DEFAULT_SAVE_SIGNALS, SaveOnSignalCallback
    from .data import tokenize_dataset
    from .dual_encoder import DualEncoderModel
    from .trainer import SimCSETrainer

    augmentation = model_args.augmentation
    dropout = model_args.dropout
    if augmentation != "none" and not model_args.augmentation_with_dropout:
        dropout = 0.0
    needs_sts = data_args.eval_before_training or data_args.test_after_training or training_args.eval_strategy != "no"
    try:
        if needs_sts:  # fail now, not after hours of training, when the STS data is missing
            from .evaluation import resolve_senteval_dir

            data_args.senteval_dir = str(resolve_senteval_dir(data_args.senteval_dir))
        model = _load_model(model_args, dropout)
        ds, columns = _load_dataset(data_args, training_args.seed)
    except (ValueError, FileNotFoundError, OSError) as e:
        raise SetupError(str(e)) from e
    limit = model.max_input_tokens
    if data_args.max_seq_length > limit:
        raise SetupError(f"--max_seq_length {data_args.max_seq_length} is more than the {limit} tokens the model "
                         f"{model_args.model_name_or_path!r} takes (its position table / tokenizer limit); "
                         f"use --max_seq_length {limit} or less")
    if model_args.padding_free and model.set_unpadded(True):
        logger.info("padding-free encoder forward: on")
    if model_args.cpu_dropout:
        logger.info("CPU dropout masks (simcse.dropout.keep_mask): on for %d dropout modules", model.set_cpu_dropout(True))
    if data_args.no_hard_negatives and "hard_neg" in columns:
        ds, columns = ds.remove_columns("hard_neg"), [c for c in columns if c != "hard_neg"]
        logger.info("--no_hard_negatives: training on (sent0, sent1) pairs only")
    if (model_args.fixed_dropout or augmentation != "none") and columns != ["sent0"]:
        flag = "--fixed_dropout" if model_args.fixed_dropout else "--augmentation"
        raise SetupError(f"{flag} makes both views from one sentence: it needs a one-sentence-per-line .txt "
                         f"train_file and --objective simcse (got views {columns})")
    if model_args.do_mlm:
        try:
            model.attach_mlm_head(model_args.model_name_or_path, trust_remote_code=model_args.trust_remote_code)
        except (ValueError, OSError) as e:
            raise SetupError(str(e)) from e
    if training_args.per_device_train_batch_size < 2 and training_args.world_size < 2 and len(columns) < 3:
        raise SetupError("per_device_train_batch_size must be >= 2: InfoNCE needs in-batch negatives")
    train_rows = _repeated_text_check(ds, columns, data_args.batch_sampler)
    if augmentation == "none":
        with training_args.main_process_first(desc="tokenizing"):
            ds = tokenize_dataset(ds, columns, model.tokenizer, data_args.max_seq_length, data_args.preprocessing_num_workers)
    else:
        training_args.remove_unused_columns = False  # the collator needs the text column
    logger.info("training on %d examples with %d view(s) each from %s", len(ds), len(columns), data_args.train_file)
    if len(ds) < 2 and len(columns) < 3:
        raise SetupError(f"train_file {data_args.train_file!r} gives 1 usable example; InfoNCE needs at least 2 "
                         "(or a hard-negative column)")
    _drop_one_row_last_batch(len(ds), len(columns), training_args)
    collator = _make_collator(model_args, data_args, training_args, model.tokenizer)
    if augmentation != "none":
        from .data import KeyedDataset

        ds = KeyedDataset(ds)  # augmentation draws keyed by (seed, epoch, example): see simcse.data
        training_args.remove_unused_columns = False  # the collator reads the draw keys
    if model_args.two_encoders:
        model = DualEncoderModel(model)
    signals = getattr(training_args, "save_on_signal", DEFAULT_SAVE_SIGNALS)
    _check_output_room(model, training_args, checkpoints=training_args.save_strategy != "no" or bool(signals))
    trainer = SimCSETrainer(
        model=model,
        args=training_args,
        train_dataset=ds,
        data_collator=collator,
        processing_class=model.tokenizer,
        temp=model_args.temp,
        hard_negative_alpha=model_args.hard_negative_alpha,
        eval_transfer=data_args.eval_transfer,
        mlm_weight=model_args.mlm_weight,
        senteval_dir=data_args.senteval_dir,
        eval_max_length=data_args.eval_max_length,
        gradient_cache_chunk_size=model_args.gradient_cache_chunk_size,
        fixed_dropout=model_args.fixed_dropout,
        no_duplicates_rows=train_rows,
        mlm_masker=_mlm_masker(model.tokenizer, model_args.mlm_probability) if model_args.do_mlm else None,
    )
    if signals:
        trainer.add_callback(SaveOnSignalCallback(signals))
    return trainer


def _check_output_room(model, training_args, checkpoints: bool) -> None:
    """Refuse, before training, an ``output_dir`` that clearly cannot hold one checkpoint (or the final model).

    A checkpoint holds the weights (W bytes) and AdamW's two moment buffers (``optimizer.pt``, about 2W).
    """
    from .storage import WriteError, check_room

    weights = sum(p.numel() * p.element_size() for p in model.parameters())
    what = "one checkpoint (weights + optimizer state)" if checkpoints else "the trained model"
    try:
        check_room(training_args.output_dir, 3 * weights if checkpoints else weights, what,
                   largest_file=2 * weights if checkpoints else weights)
    except WriteError as e:
        raise SetupError(f"--output_dir: {e}") from e


def _drop_one_row_last_batch(n_rows: int, n_views: int, training_args) -> None:
    """Drop the last batch of each epoch when it would hold a single example without a hard negative.

    InfoNCE needs a second sentence to contrast with; the reference's loss gives such a batch 0. Here it is
    dropped (HF's ``dataloader_drop_last``), so an epoch trains on ``n_rows - 1`` examples: said once in the log.
    A batch of one triplet (sentence, positive, hard negative) is a valid contrastive batch and is kept.
    """
    per_step = training_args.per_device_train_batch_size * max(1, training_args.world_size)
    if n_views >= 3 or training_args.dataloader_drop_last or n_rows % per_step != 1 or n_rows == 1:
        return
    training_args.dataloader_drop_last = True
    logger.warning("%d training examples with %d per batch (all processes) leave a last batch of 1 sentence, which "
                   "InfoNCE cannot contrast: it is dropped, each epoch trains on %d examples", n_rows, per_step,
                   n_rows - 1)


def _mlm_masker(tok, probability: float):
    """:func:`simcse.data.mask_tokens` with the tokenizer's mask id, vocabulary size and special ids bound."""
    import functools

    from .data import mask_tokens

    return functools.partial(mask_tokens, mask_token_id=tok.mask_token_id, vocab_size=len(tok),
                             special_ids=list(tok.all_special_ids), mlm_probability=probability)


def _repeated_text_check(ds, columns: list[str], batch_sampler: str):
    """Rows of texts for the ``no_duplicates`` sampler, or None after warning once about repeated texts.

    With the default sampler, rows that share a text can meet in one batch and act as negatives of their own
    positive; the warning gives the count and the option that prevents it."""
    from .samplers import count_repeated_rows

    rows = list(zip(*(ds[c] for c in columns)))
    if batch_sampler == "no_duplicates":
        logger.info("--batch_sampler no_duplicates: no global batch holds one text twice")
        return rows
    n_rows, n_texts = count_repeated_rows(rows)
    if n_rows:
        logger.warning("%d of %d training rows share a text with another row (%d repeated texts): in one batch they "
                       "act as negatives of their own positive; --batch_sampler no_duplicates keeps them apart",
                       n_rows, len(rows), n_texts)
    return None


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


def resume_command(argv: list[str], checkpoint: str) -> str:
    """The shell command that resumes this run from ``checkpoint``: the same launcher and arguments, with
    ``--resume_from_checkpoint checkpoint`` (replacing one given before)."""
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
    return shlex.join([*launcher, *args, "--resume_from_checkpoint", checkpoint])


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
        from .recipes import config_dir, list_configs

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
    except SetupError as e:
        sys.exit(f"error: {e}")
    from .storage import WriteError

    try:
        return _run(trainer, argv, model_args, data_args, training_args)
    except WriteError as e:
        last = _last_checkpoint(training_args.output_dir)
        hint = f"; the last complete checkpoint is kept; resume with: {resume_command(argv, last)}" if last else ""
        print(f"error: {e}{hint}", file=sys.stderr, flush=True)
        sys.exit(EXIT_WRITE_ERROR)


def _stopped_by_signal(trainer, argv, training_args) -> bool:
    """After ``train()``: when a signal stopped it, print the resume line and return True."""
    from .callbacks import SaveOnSignalCallback

    cb = next((c for c in trainer.callback_handler.callbacks if isinstance(c, SaveOnSignalCallback)), None)
    if cb is None or cb.stop_step is None:
        return False
    if training_args.should_save:
        ck = cb.checkpoint or _last_checkpoint(training_args.output_dir)
        print(f"[simcse] stopped by {cb.signal_name} after step {cb.stop_step}; checkpoint saved: {ck}; "
              f"resume with: {resume_command(argv, ck)}", flush=True)
    return True


def _run(trainer, argv, model_args, data_args, training_args) -> dict:
    from .callbacks import EXIT_PREEMPTED
    from .storage import writing

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
        from .evaluation import evaluate

        model = trainer.model
        res = evaluate(lambda s: model.encode(s, batch_size=training_args.per_device_eval_batch_size),
                       ["STSBenchmark", "SICKRelatedness"], data_dir=data_args.senteval_dir, mode="test")
        results["test"] = {
            "test_stsb_spearman": _corr(res["STSBenchmark"]["test"]["spearman"]),
            "test_sickr_spearman": _corr(res["SICKRelatedness"]["test"]["spearman"]),
        }
        _print_metrics("after training (test)", results["test"])
    if training_args.should_save:
        from .model_card import card_after_training
        from .storage import write_text_atomic

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
