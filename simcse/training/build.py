"""Everything ``simcse train`` sets up before training starts: the model (with ``--dropout``, the reference's
``--config_name`` / ``--tokenizer_name`` / hub options), the training data, the collator (and augmentation), the
checks that fail early (output room, repeated texts, a one-row last batch) and the :class:`SimCSETrainer`.
:func:`build` is the entry; :mod:`simcse.training.train` parses arguments and runs it.
"""
from __future__ import annotations

import logging
import os

from simcse.training.config import resolve_model_name

logger = logging.getLogger(__name__)

class SetupError(Exception):
    """A problem with the arguments or inputs found before training starts."""


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

def _load_model(model_args, dropout: float | None):
    """The :class:`~simcse.models.modeling.SimCSEModel` to train (``--dropout`` applied to its config before loading;
    the reference's --config_name, --tokenizer_name and hub options honoured). ``model_args.model_name_or_path``
    is a loadable name (:func:`derived_arguments`)."""
    from simcse.models.decoder import apply_append_eos
    from simcse.models.dropout import encoder_config_with_dropout
    from simcse.models.modeling import SimCSEModel

    hub = _hub_kwargs(model_args)
    hf_kwargs = dict(hub)
    if model_args.attn_implementation is not None:
        hf_kwargs["attn_implementation"] = model_args.attn_implementation
    config_source = model_args.config_name or model_args.model_name_or_path
    if dropout is not None:
        hf_kwargs["config"], names = encoder_config_with_dropout(
            config_source, dropout, trust_remote_code=model_args.trust_remote_code)
        logger.info("dropout p=%g set on config attributes %s", dropout, names)
    elif model_args.config_name or model_args.bidirectional is not None:
        from transformers import AutoConfig

        hf_kwargs["config"] = AutoConfig.from_pretrained(config_source, trust_remote_code=model_args.trust_remote_code, **hub)
    if model_args.bidirectional is not None:
        from simcse.models.decoder import set_bidirectional

        set_bidirectional(hf_kwargs["config"], model_args.bidirectional, repr(model_args.model_name_or_path))
        logger.info("decoder attention: %s", "bidirectional" if model_args.bidirectional else "causal")
    model = SimCSEModel.from_pretrained(
        model_args.model_name_or_path,
        pooler_type=model_args.pooler_type,
        mlp_only_train=model_args.mlp_only_train,
        new_mlp_init="random",
        trust_remote_code=model_args.trust_remote_code,
        append_eos=model_args.append_eos,
        **hf_kwargs,
    )
    _replace_tokenizer(model, model_args, hub)
    if apply_append_eos(model, model_args.append_eos, repr(model_args.model_name_or_path)):  # also a replaced one
        logger.info("every text ends with the EOS token (--append_eos %s)", model_args.append_eos)
    return model

def _load_dataset(data_args, seed: int, label_columns: tuple[str, ...] = ()):
    """``(dataset, columns)`` of the training file: its own views (with the objective's ``label_columns`` kept
    when present), or consecutive-sentence pairs (``--positives``)."""
    from simcse.training.data import load_next_sentence_dataset, load_sentence_dataset
    from simcse.training.sources import load_training_dataset

    if data_args.dataset_name:
        return load_training_dataset(data_args, seed, label_columns)
    if data_args.positives != "simcse":
        return load_next_sentence_dataset(data_args.train_file, data_args.positives, seed=seed,
                                          max_train_samples=data_args.max_train_samples)
    return load_sentence_dataset(data_args.train_file, data_args.max_train_samples, neutral=data_args.neutral_as_negative,
                                 label_columns=label_columns)

def _make_collator(model_args, data_args, training_args, tok, objective):
    """The (B, V, L) collator (with the objective's label columns and single-row view count), wrapped in the
    augmenting collator when ``--augmentation`` is not ``none``."""
    from simcse.training.data import ContrastiveCollator

    collator = ContrastiveCollator(
        pad_token_id=tok.pad_token_id or 0,
        max_seq_length=data_args.max_seq_length,
        pad_to_max_length=data_args.pad_to_max_length,
        mask_token_id=tok.mask_token_id,  # MLM masks are drawn by the trainer (SimCSETrainer._add_mlm_masks)
        vocab_size=len(tok),
        special_ids=tuple(tok.all_special_ids),
        seed=training_args.seed,
        label_columns=tuple(objective.label_columns),
        views_from_one=objective.single_view_copies,
    )
    augmentation = model_args.augmentation
    if augmentation == "none":
        return collator
    from simcse.training.augment import AugmentingCollator, MLMReplacer, get_augmentation, load_mlm_model, word_augmenter

    if get_augmentation(augmentation).level == "token":  # mlm: the checkpoint's own MLM head
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

def with_values(args, **changes):
    """A copy of the arguments dataclass ``args`` with ``changes``; ``args`` itself is not touched. The copy is
    shallow and ``__post_init__`` is not run again (its checks passed and its derived fields are set)."""
    import copy

    new = copy.copy(args)
    for name, value in changes.items():
        setattr(new, name, value)
    return new


def build(model_args, data_args, training_args, run_command: str | None = None):
    """Load the model and data and return a ready :class:`SimCSETrainer` (nothing written yet).

    The arguments are not changed: what setup derives (the embedded model's folder, the SentEval folder, the
    data loader's options that the data needs) goes into copies handed to the trainer's constructor, with
    ``run_command`` (the shell command written into each checkpoint for the resume line).

    The ablation flags (docs/ablations.md) are wired here: ``--dropout`` (and ``--augmentation_with_dropout
    false``, which means dropout 0) rewrites the encoder config before loading; ``--positives`` builds
    consecutive-sentence pairs; ``--neutral_as_negative`` adds the neutral view; ``--augmentation`` keeps the
    text and augments it in the collator; ``--two_encoders`` wraps the model in a ``DualEncoderModel``.
    """
    import torch

    from simcse.training.data import tokenize_dataset
    from simcse.training.training_args import SimCSETrainingArguments

    if not isinstance(training_args, SimCSETrainingArguments):
        raise SetupError(f"training_args must be a SimCSETrainingArguments (simcse.training), got "
                         f"{type(training_args).__name__}")
    training_args = with_values(training_args)  # the run's own copy: the trainer sets fields on it (DDP defaults)
    if training_args.dataloader_pin_memory and not torch.cuda.is_available():
        # pinned host memory only helps copies to an accelerator; without one torch warns at every DataLoader
        training_args = with_values(training_args, dataloader_pin_memory=False)
    augmentation = model_args.augmentation
    dropout = model_args.dropout
    if augmentation != "none" and not model_args.augmentation_with_dropout:
        dropout = 0.0
    needs_sts = data_args.eval_before_training or data_args.test_after_training or training_args.eval_strategy != "no"
    try:
        check_setup(model_args, data_args, training_args)
        model_args = with_values(model_args, model_name_or_path=resolve_model_name(model_args.model_name_or_path))
        if needs_sts:  # fail now, not after hours of training, when the STS data is missing
            from simcse.evaluation import resolve_senteval_dir

            data_args = with_values(data_args, senteval_dir=str(resolve_senteval_dir(data_args.senteval_dir)))
        if training_args.resume_from_checkpoint is True:  # HF's "the newest checkpoint": the same checks as a path
            from simcse.training.checkpoints import newest_checkpoint

            training_args = with_values(training_args,
                                        resume_from_checkpoint=newest_checkpoint(training_args.output_dir))
        if isinstance(training_args.resume_from_checkpoint, str) and os.path.isdir(training_args.resume_from_checkpoint):
            from simcse.training.checkpoints import check_resume_objective

            check_resume_objective(training_args.resume_from_checkpoint, model_args.loss, training_args.world_size,
                                   config=_objective_config(model_args))
        model = _load_model(model_args, dropout)
        objective = _objective(model_args, model.tokenizer)  # its label columns are read with the data
        if not data_args.include_prompt:
            _check_include_prompt(model_args, data_args, objective)
            model.include_prompt = False  # saved with the model (simcse_config.json, 1_Pooling/config.json)
        if data_args.streaming:
            ds, columns = _streaming_dataset(data_args, training_args, model.tokenizer, tuple(objective.label_columns))
        else:
            ds, columns = _load_dataset(data_args, training_args.seed, tuple(objective.label_columns))
    except (ValueError, FileNotFoundError, OSError) as e:
        raise SetupError(str(e)) from e
    limit = model.max_input_tokens
    if data_args.max_seq_length > limit:
        raise SetupError(f"--max_seq_length {data_args.max_seq_length} is more than the {limit} tokens the model "
                         f"{model_args.model_name_or_path!r} takes (its position table / tokenizer limit); "
                         f"use --max_seq_length {limit} or less")
    try:  # rows the objective lengthens (word repetition, a prompt template) must fit the positions too
        extra = objective.extra_tokens(model, data_args.max_seq_length)
    except ValueError as e:
        raise SetupError(str(e)) from e
    if extra and data_args.max_seq_length + extra > limit:
        raise SetupError(f"--loss {objective.name} lengthens each row by up to {extra} tokens, so --max_seq_length "
                         f"{data_args.max_seq_length} gives rows of {data_args.max_seq_length + extra}, more than the "
                         f"{limit} tokens the model {model_args.model_name_or_path!r} takes; use --max_seq_length "
                         f"{limit - extra} or less")
    if model_args.padding_free and model.set_unpadded(True):
        logger.info("padding-free encoder forward: on")
    if model_args.lora_r is not None:
        from simcse.models.lora import apply_lora, base_reference

        try:
            model.encoder = apply_lora(model.encoder, model_args.lora_r, model_args.lora_alpha, model_args.lora_dropout,
                                       model_args.lora_target_modules, base_model=base_reference(model_args.model_name_or_path))
        except ValueError as e:
            raise SetupError(str(e)) from e
        trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
        logger.info("LoRA r=%d: %d trainable parameters of %d", model_args.lora_r, trainable,
                    sum(p.numel() for p in model.parameters()))
    if model_args.reuse_embedding_grad and model.set_reused_embedding_grad(True):
        logger.info("word-embedding gradient kept between steps (simcse.models.embedding_grad): on")
    if model_args.cpu_dropout:
        logger.info("CPU dropout masks (simcse.models.dropout.keep_mask): on for %d dropout modules", model.set_cpu_dropout(True))
    if data_args.no_hard_negatives and "hard_neg" in columns:
        ds, columns = ds.remove_columns("hard_neg"), [c for c in columns if c != "hard_neg"]
        logger.info("--no_hard_negatives: training on (sent0, sent1) pairs only")
    if augmentation != "none" and columns != ["sent0"]:
        raise SetupError(f"--augmentation makes both views from one sentence: it needs a one-sentence-per-line .txt "
                         f"train_file and --positives simcse (got views {columns})")
    if model_args.do_mlm:
        try:
            model.attach_mlm_head(model_args.model_name_or_path, trust_remote_code=model_args.trust_remote_code)
        except (ValueError, OSError) as e:  # transformers' message lists every model class: its first line
            first = str(e).strip().splitlines()[0]
            raise SetupError(first if first.startswith("--do_mlm") else
                             f"--do_mlm needs a masked-LM head of {model_args.model_name_or_path!r}: {first}") from e
    source = data_args.train_file or data_args.dataset_name
    prompts = data_args.prompt_map()
    if prompts:
        if augmentation != "none":
            raise SetupError("--prompts with --augmentation: the augmenting collator tokenises the raw text; give one")
        unused = [c for c in prompts if c not in columns]
        if unused:
            raise SetupError(f"--prompts names column(s) {unused} that the training rows do not have (they have "
                             f"{columns}); give prompts for those columns only")
        for column, prompt in prompts.items():  # truncation keeps the prompt: it must leave room for the text
            n = len(model.tokenizer(prompt)["input_ids"])
            if n >= data_args.max_seq_length:
                raise SetupError(f"--prompts {column}: the prompt is {n} tokens (special tokens included), so "
                                 f"--max_seq_length {data_args.max_seq_length} cuts every sentence away; use "
                                 f"--max_seq_length {n + 8} or more, or a shorter prompt")
        model.set_prompts(prompts, "sent0" if "sent0" in prompts else None)  # saved with the model
        logger.info("prompts %s%s", prompts, " (the sent0 prompt is the saved model's default prompt)" if "sent0" in prompts else "")
    try:
        objective.check_columns(columns + [c for c in objective.label_columns if c in ds.column_names], source)
        objective.check_batch(training_args.per_device_train_batch_size, training_args.world_size, len(columns))
    except ValueError as e:
        raise SetupError(str(e)) from e
    if data_args.streaming:
        # the stream is already at the checkpoint's position: HF must not skip (re-read) the trained batches
        training_args = with_values(training_args, ignore_data_skip=bool(training_args.resume_from_checkpoint)
                                    or training_args.ignore_data_skip)
        return _trainer(model, model_args, data_args, training_args, ds, None, objective, run_command)
    train_rows = _repeated_text_check(ds, columns, data_args.batch_sampler)
    if augmentation == "none":
        with training_args.main_process_first(desc="tokenizing"):
            ds = tokenize_dataset(ds, columns, model.tokenizer, data_args.max_seq_length, data_args.preprocessing_num_workers,
                                  prompts=data_args.prompt_map(), count_prompts=not data_args.include_prompt)
    else:
        training_args = with_values(training_args, remove_unused_columns=False)  # the collator needs the text column
    logger.info("training on %d examples with %d view(s) each from %s", len(ds), len(columns), source)
    if len(ds) < 2 and len(columns) < 3:
        what = "train_file" if data_args.train_file else "dataset"
        raise SetupError(f"{what} {source!r} gives 1 usable example; InfoNCE needs at least 2 "
                         "(or a hard-negative column)")
    if _one_row_last_batch(len(ds), len(columns), training_args):
        training_args = with_values(training_args, dataloader_drop_last=True)
    if augmentation != "none":
        from simcse.training.data import KeyedDataset

        ds = KeyedDataset(ds)  # augmentation draws keyed by (seed, epoch, example): see simcse.training.data
    return _trainer(model, model_args, data_args, training_args, ds, train_rows, objective, run_command)


def check_setup(model_args, data_args, training_args) -> None:
    """Every check of a run's arguments that needs no model, data or file: ``--include_prompt``, ``--streaming``,
    the FSDP device, and the objective built from ``--loss``/``--loss_args`` with its declarations (the poolers
    it works with). :func:`build` runs it first; the experiment runner runs it per arm before any run starts.

    Raises:
        ValueError, SetupError: one line naming the option (``build`` turns a ValueError into a SetupError).
    """
    _check_include_prompt(model_args, data_args)
    if data_args.streaming:
        _check_streaming(model_args, training_args)
    _check_fsdp_device(training_args)
    import torch

    with torch.random.fork_rng(devices=[]):  # built without a tokenizer, random state untouched
        objective = _objective(model_args, None)
    objective.check_pooler(model_args.pooler_type)


def _objective(model_args, tok):
    """The run's objective (:func:`simcse.training.objectives.compose.simcse_objective`): ``--loss``/``--loss_args``,
    wrapped for ``--fixed_dropout`` and ``--do_mlm`` (with the tokenizer's MLM masker)."""
    from simcse.training.objectives.compose import simcse_objective

    try:
        return simcse_objective(
            temp=model_args.temp, hard_negative_alpha=model_args.hard_negative_alpha, loss=model_args.loss,
            hard_negative_given=getattr(model_args, "hard_negative_given", False),
            loss_args=model_args.loss_args, fixed_dropout=model_args.fixed_dropout,
            mlm_weight=model_args.mlm_weight if model_args.do_mlm else 0.0,
            mlm_masker=_mlm_masker(tok, model_args.mlm_probability) if model_args.do_mlm and tok is not None else None)
    except ValueError as e:
        raise SetupError(str(e)) from e


def _objective_config(model_args) -> dict:
    """The run's objective's recorded ``--loss_args`` (``recorded_loss_args()``), built without the model (random
    state untouched)."""
    import torch

    with torch.random.fork_rng(devices=[]):
        return _objective(model_args, None).recorded_loss_args()


def _trainer(model, model_args, data_args, training_args, ds, train_rows, objective, run_command=None):
    """The :class:`SimCSETrainer` over ``ds`` (output room checked, signal handling attached)."""
    from simcse.training.callbacks import SaveOnSignalCallback
    from simcse.models.dual_encoder import DualEncoderModel
    from simcse.training.trainer import SimCSETrainer

    collator = _make_collator(model_args, data_args, training_args, model.tokenizer, objective)
    if model_args.two_encoders:
        model = DualEncoderModel(model)
    signals = training_args.save_signals
    _check_output_room(model, training_args, checkpoints=training_args.save_strategy != "no" or bool(signals))
    try:  # the objective's setup and its refusals (gather, gradient caching) raise ValueError: one line each
        trainer = SimCSETrainer(
            model=model,
            args=training_args,
            train_dataset=ds,
            data_collator=collator,
            processing_class=model.tokenizer,
            objective=objective,
            eval_transfer=data_args.eval_transfer,
            dev_mlp=model_args.dev_mlp,
            mlm_weight=model_args.mlm_weight if model_args.do_mlm else 0.0,
            senteval_dir=data_args.senteval_dir,
            eval_max_length=data_args.eval_max_length,
            gradient_cache_chunk_size=model_args.gradient_cache_chunk_size,
            no_duplicates_rows=train_rows,
            run_command=run_command,
            final_eval_transfer=data_args.eval_transfer or training_args.do_eval,  # the reference's --do_eval
            stream_resume=str(training_args.resume_from_checkpoint) if data_args.streaming and training_args.resume_from_checkpoint else None,
            callbacks=[SaveOnSignalCallback(signals)] if signals else None,
            merge_lora=model_args.merge_lora,
        )
    except ValueError as e:
        raise SetupError(str(e)) from e
    if training_args.align_uniform_every:
        from simcse.training.callbacks import LOG_NAME, AlignUniformCallback

        AlignUniformCallback.attach(trainer, every_n_steps=training_args.align_uniform_every,
                                    data_dir=data_args.senteval_dir, at_start=False,
                                    log_file=os.path.join(training_args.output_dir, LOG_NAME))
    return trainer


def _check_fsdp_device(training_args) -> None:
    """``--fsdp`` needs CUDA: on the CPU, transformers and accelerate leave FSDP off and train with plain DDP
    (``Trainer.is_fsdp_enabled`` is False, every process holds the whole model), which is refused rather than run
    under a name it does not have."""
    import torch

    if training_args.fsdp and (training_args.use_cpu or not torch.cuda.is_available()):
        raise ValueError("--fsdp needs CUDA GPUs: on the CPU transformers trains with plain DDP instead (no sharding); "
                         "drop --fsdp to train data-parallel on CPU processes")


def _check_include_prompt(model_args, data_args, objective=None) -> None:
    """``--include_prompt false``: the pooler must be a mean (:func:`simcse.models.prompt_pooling.check_include_prompt`)
    and, once built, the objective must encode the collated rows as they are (the prompt's token count travels
    with them as ``prompt_length``): one that edits the token ids first (``prepare_batch``: MNTP, ESimCSE, DiffCSE,
    InfoCSE, ``--do_mlm``) or the two-encoder model is refused."""
    from simcse.models.prompt_pooling import check_include_prompt
    from simcse.training.objectives.base import Objective, ObjectiveWrapper

    if data_args.include_prompt:
        return
    check_include_prompt(False, model_args.pooler_type)
    if model_args.two_encoders:
        raise ValueError("--include_prompt false is not supported with --two_encoders; drop one of them")
    obj = objective
    while isinstance(obj, ObjectiveWrapper) and type(obj).prepare_batch is ObjectiveWrapper.prepare_batch:
        obj = obj.inner
    if obj is not None and type(obj).prepare_batch is not Objective.prepare_batch:
        raise ValueError(f"--include_prompt false is not supported with --loss {objective.name}"
                         f"{' (--do_mlm)' if model_args.do_mlm else ''}: it edits the token ids before encoding, "
                         "which may move the prompt's tokens; use --include_prompt true")


def _check_streaming(model_args, training_args) -> None:
    """What a stream cannot do, refused before anything is loaded."""
    if not training_args.max_steps or training_args.max_steps < 1:
        raise ValueError("--streaming true needs --max_steps N (a stream has no length to count epochs by)")
    if model_args.augmentation != "none":
        raise ValueError("--augmentation keys its draws by the example's row: not with --streaming true")


def _streaming_dataset(data_args, training_args, tok, label_columns: tuple[str, ...] = ()):
    """``(StreamingTrainSet, view names)``: this process's part of the stream, tokenised on the fly; put back at
    the checkpoint's position when resuming (:func:`simcse.training.sources.streaming_training_set`)."""
    from simcse.training.sources import streaming_training_set

    ds, columns = streaming_training_set(
        data_args, tok, seed=training_args.seed, rank=training_args.process_index,
        world=max(1, training_args.world_size),
        batch_size=training_args.train_batch_size, drop_last=training_args.dataloader_drop_last,
        resume_from=training_args.resume_from_checkpoint, label_columns=label_columns)
    if training_args.dataloader_num_workers:
        logger.info("--streaming: the stream is read in the main process (--dataloader_num_workers ignored)")
    logger.info("training on a stream of %s with %d view(s) each (%d examples per process per step)",
                data_args.dataset_name, len(columns), training_args.train_batch_size * training_args.gradient_accumulation_steps)
    return ds, columns

def _check_output_room(model, training_args, checkpoints: bool) -> None:
    """Refuse, before training, an ``output_dir`` that clearly cannot hold one checkpoint (or the final model).

    A checkpoint holds the weights (W bytes) and AdamW's two moment buffers (``optimizer.pt``, about 2W).
    """
    from simcse.files.storage import WriteError, check_room

    weights = sum(p.numel() * p.element_size() for p in model.parameters())
    what = "one checkpoint (weights + optimizer state)" if checkpoints else "the trained model"
    try:
        check_room(training_args.output_dir, 3 * weights if checkpoints else weights, what,
                   largest_file=2 * weights if checkpoints else weights)
    except WriteError as e:
        raise SetupError(f"--output_dir: {e}") from e

def _one_row_last_batch(n_rows: int, n_views: int, training_args) -> bool:
    """Whether to drop the last batch of each epoch: it would hold a single example without a hard negative
    (:func:`simcse.training.sources.unusable_last_batch`, the rule a stream's last batch follows too).

    InfoNCE needs a second sentence to contrast with; the reference's loss gives such a batch 0. Here it is
    dropped (HF's ``dataloader_drop_last``), so an epoch trains on ``n_rows - 1`` examples: said once in the log.
    A batch of one triplet (sentence, positive, hard negative) is a valid contrastive batch and is kept.
    """
    from simcse.training.sources import unusable_last_batch

    per_step = training_args.per_device_train_batch_size * max(1, training_args.world_size)
    if training_args.dataloader_drop_last or not unusable_last_batch(n_rows % per_step, n_views) or n_rows == 1:
        return False
    logger.warning("%d training examples with %d per batch (all processes) leave a last batch of 1 sentence, which "
                   "InfoNCE cannot contrast: it is dropped, each epoch trains on %d examples", n_rows, per_step,
                   n_rows - 1)
    return True

def _mlm_masker(tok, probability: float):
    """:func:`simcse.training.data.mask_tokens` with the tokenizer's mask id, vocabulary size and special ids bound."""
    import functools

    from simcse.training.data import mask_tokens

    return functools.partial(mask_tokens, mask_token_id=tok.mask_token_id, vocab_size=len(tok),
                             special_ids=list(tok.all_special_ids), mlm_probability=probability)

def _repeated_text_check(ds, columns: list[str], batch_sampler: str):
    """Rows of texts for the ``no_duplicates`` sampler, or None after warning once about repeated texts.

    With the default sampler, rows that share a text can meet in one batch and act as negatives of their own
    positive; the warning gives the count and the option that prevents it."""
    from simcse.training.samplers import count_repeated_rows

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
