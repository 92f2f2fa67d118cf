"""The objective interface: what a training objective declares, owns and computes.

An objective is an ``nn.Module`` (as a sentence-transformers loss is). The trainer encodes every view of a
batch in one pass and hands the (B, V, H) embeddings to :meth:`Objective.loss`; everything else an objective
needs it declares as class attributes (checked once, at setup, before anything expensive) or owns as
submodules and buffers (a momentum encoder, a queue, a discriminator), which the trainer trains (parameters
with ``requires_grad``), moves to the device, saves in every checkpoint (``objective_state.pt``: its state dict,
``get_extra_state()`` included, one file per process) and restores on resume, but never writes into the inference folder.

Views are numbered from 0: view 0 the queries (anchors), view 1 the positives, views 2.. negatives.
A one-sentence row (``sent0`` only) is repeated :attr:`Objective.single_view_copies` times by the collator, so
the copies differ only by dropout (unsupervised SimCSE). Rows with more text columns become one view per
column, in the order ``sent0, sent1, hard_neg, neutral`` (the reference's CSV layout). Numeric columns named
in :attr:`Objective.label_columns` (e.g. ``score``) reach the batch as float32 tensors (B,).

Losses: :meth:`Objective.loss` returns a scalar tensor or a dict ``{name: scalar}``; a dict's parts are summed
into the training loss and each is logged under ``loss_<name>`` (as sentence-transformers logs loss
components). It must be a function of the embeddings it is given (plus the objective's own state and any
*detached* extra computation): under gradient caching it runs once on the whole batch's embeddings, turned
into a leaf, and its gradient is pushed back chunk by chunk. A term that needs the encoder's graph beyond the
embeddings (the MLM head on token states, a discriminator on token states) goes in :meth:`Objective.chunk_loss`,
which the trainer adds per encoder call (the whole batch without gradient caching, each chunk with it); the
chunk's own embeddings (with their graph) and inputs are passed, so such terms compose with GradCache.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, ClassVar, Mapping

import torch
from torch import nn

__all__ = ["Objective", "ObjectiveWrapper", "NEGATIVE_COLUMNS", "REQUIREMENTS", "LossContext", "INPUT_KEYS", "total_loss", "encode_without_dropout", "BatchSeeds",
           "view_inputs"]

# text columns that only add negatives: an objective that does not declare one refuses it (check_columns)
NEGATIVE_COLUMNS = ("hard_neg", "neutral")
# what a wrapper's ``requires`` names -> why an inner objective declaring it False cannot be wrapped
REQUIREMENTS = {
    "dropout_views": "it makes its own positive view (word repetition, a second template), which encoding one view "
                     "for every view would discard",
    "prefix_embeddings": "its loss needs the full embedding width (a queue of full embeddings, a head of the hidden "
                         "size, a second encoder pass), not a prefix of it",
    "uses_embeddings": "its loss does not use the sentence embeddings (a token-level objective), which this wrapper "
                       "acts on or adds a second token-level loss to",
    "repeatable_loss": "its loss records per-step state and may run only once a step, while this wrapper calls it "
                       "several times",
}

# the encoder inputs of a (B, V, L) batch; prompt_length (B, V): the views' prompt token counts (include_prompt false)
INPUT_KEYS = ("input_ids", "attention_mask", "token_type_ids", "prompt_length")


def view_inputs(batch: Mapping[str, torch.Tensor], view: int) -> dict[str, torch.Tensor]:
    """The encoder inputs (:data:`INPUT_KEYS` present) of one view of a (B, V, L) batch -> (B, L) tensors."""
    return {k: batch[k][:, view] for k in INPUT_KEYS if k in batch}


def total_loss(out) -> tuple[torch.Tensor | None, dict[str, torch.Tensor]]:
    """``(sum, parts)`` of what :meth:`Objective.loss` / :meth:`Objective.chunk_loss` returned: a scalar gives
    ``(scalar, {})``, a dict ``{name: scalar}`` its sum and itself, None gives ``(None, {})``.

    Raises:
        ValueError: an empty dict or a part that is not a scalar tensor (names the part).
    """
    if out is None:
        return None, {}
    if isinstance(out, torch.Tensor):
        return out, {}
    if not isinstance(out, Mapping) or not out:
        raise ValueError(f"an objective's loss must be a scalar tensor or a non-empty dict of them, got {out!r}")
    for name, part in out.items():
        if not isinstance(part, torch.Tensor) or part.dim() != 0:
            raise ValueError(f"loss part {name!r} must be a scalar tensor, got {type(part).__name__}")
    return sum(out.values()), dict(out)


def encode_without_dropout(model: nn.Module, inputs: Mapping[str, torch.Tensor],
                           weights: Mapping[str, torch.Tensor] | None = None) -> torch.Tensor:
    """The training-time embeddings of ``inputs`` (``input_ids``/``attention_mask`` (N, L) int64, ...) -> (N, H),
    with dropout off: the model's forward with every module in eval mode, then its MLP head when that is used
    in training only (``mlp_only_train``), so the result is the training embedding minus the dropout noise
    (SimCSE++'s off-dropout negatives; ESimCSE's momentum pass). ``weights`` (``{parameter name: tensor}``, e.g.
    ``encoder.*`` of a momentum copy) replace the model's own for this call (``torch.func.functional_call``).
    Gradients follow torch's grad mode; every module's train/eval mode is restored afterwards."""
    modes = [(m, m.training) for m in model.modules()]
    model.eval()
    try:
        if weights:
            from torch.func import functional_call

            z = functional_call(model, dict(weights), args=(), kwargs=dict(inputs), strict=False)
        else:
            z = model(**inputs)
        if getattr(model, "mlp", None) is not None and getattr(model, "mlp_only_train", False):
            z = model.mlp(z)
    finally:
        for m, mode in modes:
            m.training = mode
    return z


class BatchSeeds:
    """Seeds for an objective's per-micro-batch random draws (MLM masks, word repetition, replaced tokens):
    ``seeds(context, *salt)`` is ``context.draw_seed(micro, *salt)``, with ``micro`` counting the calls made at the
    same optimizer step. So the draws depend on (seed, step, rank, micro-batch, salt) only: the same with or
    without gradient caching (one call per micro-batch, in ``prepare_batch``) and after a resume (which starts
    at a step boundary); never the global generator. Nothing to save in checkpoints."""

    def __init__(self):
        self._last = (-1, 0)  # (global step, micro-batch) of the last draw

    def __call__(self, context: "LossContext", *salt: int) -> int:
        step = int(context.global_step)
        micro = self._last[1] + 1 if self._last[0] == step else 0
        self._last = (step, micro)
        return context.draw_seed(micro, *salt)


@dataclass
class LossContext:
    """What the trainer tells an objective at a loss call or a step hook.

    Attributes:
        model: the unwrapped model being trained (a :class:`simcse.models.modeling.SimCSEModel`, or the
            two-encoder wrapper); call it as ``model(input_ids=(N, L), attention_mask=(N, L)) -> (N, H)``.
        rank, world: this process's rank and the number of processes (1 without torch.distributed).
        global_step: optimizer steps done so far (HF's ``state.global_step``).
        seed: the run's ``--seed``; objectives that draw random numbers seed them from (seed, step, rank).
        gather: ``(b, ...) -> (world * b, ...)``: all ranks' rows concatenated in rank order, with gradients
            flowing back to this rank's rows (:func:`simcse.training.distributed.all_gather_with_grad`);
            identity in one process.
        gather_nograd: the same without gradients (for queues and teacher scores).
        batch_size: examples in this process's whole (micro-)batch, also when a chunk is processed.
        full_batch: the whole (micro-)batch's inputs (B, V, L) and label columns, also when a chunk is processed.
        log: ``log(name, value)`` records a float for the next HF log line (averaged over the logging window).
    """

    model: nn.Module
    rank: int = 0
    world: int = 1
    global_step: int = 0
    seed: int = 42
    gather: Callable[[torch.Tensor], torch.Tensor] = lambda t: t
    gather_nograd: Callable[[torch.Tensor], torch.Tensor] = lambda t: t
    batch_size: int = 0
    full_batch: Mapping[str, torch.Tensor] = field(default_factory=dict)
    log: Callable[[str, float], None] = lambda name, value: None

    def draw_seed(self, *salt: int) -> int:
        """A seed (int in [0, 2**32)) for this step's random draws, from (``seed``, ``global_step``, ``rank``,
        ``*salt``) through numpy's ``SeedSequence`` (the rule the trainer uses for the MLM masks): the same after a
        resume, different on every rank and step; ``salt`` tells draws of one step apart (a micro-batch index)."""
        import numpy as np

        return int(np.random.SeedSequence([int(self.seed), int(self.global_step), int(self.rank),
                                           *(int(x) for x in salt)]).generate_state(1)[0])

    def shared_seed(self, *salt: int) -> int:
        """A seed for a draw every rank must make alike (which Matryoshka dimensions or which layers a step
        trains: the ranks' losses and graphs must agree): from (``seed``, ``global_step``, ``*salt``), without the
        rank; the same after a resume. Not the same stream as :meth:`draw_seed` for any rank."""
        import numpy as np

        return int(np.random.SeedSequence([int(self.seed), int(self.global_step), 0x5348, *(int(x) for x in salt)])
                   .generate_state(1)[0])


class Objective(nn.Module):
    """Base class of a training objective (subclass it, then register it with
    :func:`simcse.training.objectives.register_objective`).

    Class attributes (declarations, read at setup):
        name: the registry name (``--loss NAME``).
        input_columns: text columns a training row must have (a missing one is refused at setup, naming it).
        optional_columns: further text columns used when present (e.g. ``hard_neg``).
        label_columns: numeric columns carried into the batch as float32 (B,) tensors.
        min_batch: the smallest per-device batch (examples) the loss is defined for.
        single_view_copies: views made from a one-sentence row (2: two dropout views).
        supports_gather: whether the loss is correct with in-batch negatives gathered over processes
            (``context.gather``); False is refused at setup when more than one process trains.
        supports_grad_cache: whether :meth:`loss` is a function of the embeddings only (see the module);
            False is refused at setup with ``--gradient_cache_chunk_size``.
        needs_text: the collator keeps the rows' text (for objectives that build their own views).
        dropout_views: the views of a one-sentence row differ by dropout only; False for an objective that makes
            its own positive view (ESimCSE's word repetition, PromptBERT's second template), which a wrapper
            encoding one view for all (``--fixed_dropout``) would discard: that wrapper refuses it.
        prefix_embeddings: :meth:`loss` is defined on a prefix (the first d coordinates) of the embeddings;
            False when it needs the full width (a queue of full embeddings, a head of the hidden size, a second
            encoder pass): ``--loss matryoshka`` refuses it.
        repeatable_loss: :meth:`loss` may run several times per step on the same batch (see "Wrappers" below);
            False for a loss that records per-step state in ``loss`` (ESimCSE queues its momentum embeddings):
            the wrappers that call ``loss`` more than once refuse it.
        uses_embeddings: the loss uses the sentence embeddings; False for a token-level objective (MNTP), which the
            wrappers acting on sentence embeddings (Matryoshka, ``--fixed_dropout``) or adding a second token loss
            (``--do_mlm``) refuse.
        supports_lora: the objective trains with LoRA adapters (``--lora_r``); False is refused at setup (ESimCSE's
            momentum encoder is a copy of the whole backbone, frozen base included, in every checkpoint).
        shared_buffers: with several processes, the objective's buffers are per process by default (each keeps its
            own, as its checkpoint state is saved per process); True makes them shared: DDP copies rank 0's to
            every process at each forward (:func:`simcse.training.trainer.keep_objective_buffers_per_process`).
        pooler_types: the ``--pooler_type`` values the objective works with (None: any); another is refused
            before the model is loaded (:meth:`check_pooler`), also by the experiment runner's spec check.

    Wrappers (:class:`ObjectiveWrapper`: ``--loss matryoshka``/``adaptive_layer``/``2d_matryoshka``,
    ``--fixed_dropout``, ``--do_mlm``) call the inner objective's :meth:`prepare_batch`, :meth:`embed`,
    :meth:`chunk_loss`, :meth:`setup` and :meth:`on_step_end` once each, as the trainer does, but may call
    :meth:`loss` several times a step on the same batch: once per dimension with truncated, re-normalised
    embeddings (Matryoshka), once per layer (AdaptiveLayer). So :meth:`loss` must be a pure function of its
    arguments and the objective's state, recording nothing per call; per-step work belongs in
    :meth:`prepare_batch` / :meth:`on_step_end`. An objective that cannot honour this declares
    ``repeatable_loss = False`` (or ``prefix_embeddings = False``) and the wrapper refuses it at setup, in one
    line (:attr:`ObjectiveWrapper.requires`).

    Text columns: a negative column (``hard_neg``, ``neutral``) is encoded at every step, so one the objective
    does not declare in :attr:`input_columns` or :attr:`optional_columns` is refused at setup
    (:meth:`check_columns`) rather than encoded and never used.

    Constructor keyword arguments are the objective's hyperparameters (``--loss_args '{json}'``); a subclass
    validates them in ``__init__`` and raises ``ValueError`` naming the bad key. :meth:`get_config_dict`
    returns them (recorded in the run's card and ``simcse_training_args.json``); by default, every argument the
    constructor was called with, defaults filled in. ``citation`` (a BibTeX string, as sentence-transformers'
    losses carry) is printed in the model card of a run trained with it.
    """

    citation: ClassVar[str | None] = None

    def __init_subclass__(cls, **kwargs):
        """Record the arguments of each construction (:meth:`get_config_dict`'s default): the outermost
        ``__init__`` of a subclass chain binds them, defaults applied, before it runs."""
        super().__init_subclass__(**kwargs)
        init = cls.__dict__.get("__init__")
        if init is None or getattr(init, "_records_arguments", False):
            return
        import functools
        import inspect

        signature = inspect.signature(init)

        @functools.wraps(init)
        def recording_init(self, *args, **kw):
            if "_init_arguments" not in self.__dict__:
                try:
                    bound = signature.bind(self, *args, **kw)
                    bound.apply_defaults()
                    recorded = {k: v for k, v in list(bound.arguments.items())[1:]
                                if signature.parameters[k].kind not in (inspect.Parameter.VAR_POSITIONAL,)}
                    extra = recorded.pop(next((k for k, p in signature.parameters.items()
                                               if p.kind is inspect.Parameter.VAR_KEYWORD), None), {}) or {}
                    recorded.update(extra)
                except TypeError:
                    recorded = {}
                object.__setattr__(self, "_init_arguments", recorded)
            init(self, *args, **kw)

        recording_init._records_arguments = True
        cls.__init__ = recording_init

    name: ClassVar[str] = ""
    input_columns: ClassVar[tuple[str, ...]] = ("sent0",)
    optional_columns: ClassVar[tuple[str, ...]] = ()
    label_columns: ClassVar[tuple[str, ...]] = ()
    min_batch: ClassVar[int] = 2
    single_view_copies: ClassVar[int] = 2
    supports_gather: ClassVar[bool] = True
    supports_grad_cache: ClassVar[bool] = True
    needs_text: ClassVar[bool] = False
    dropout_views: ClassVar[bool] = True
    prefix_embeddings: ClassVar[bool] = True
    repeatable_loss: ClassVar[bool] = True
    supports_lora: ClassVar[bool] = True
    uses_embeddings: ClassVar[bool] = True
    shared_buffers: ClassVar[bool] = False
    pooler_types: ClassVar[tuple[str, ...] | None] = None

    def check_pooler(self, pooler_type) -> None:
        """Refuse a pooler the objective does not declare in :attr:`pooler_types`.

        Raises:
            ValueError: ``--loss NAME needs --pooler_type A (or B), got 'x'``.
        """
        allowed = self.pooler_types
        if allowed is not None and pooler_type not in allowed:
            others = f" (or {', '.join(allowed[1:])})" if len(allowed) > 1 else ""
            raise ValueError(f"--loss {self.name} needs --pooler_type {allowed[0]}{others}, got {pooler_type!r}")

    # ------------------------------------------------------------------ lifecycle
    def prepare_batch(self, batch: Mapping[str, torch.Tensor], context: LossContext) -> Mapping[str, torch.Tensor]:
        """Called once per (micro-)batch before encoding; returns the batch to encode, with anything the
        objective adds (MLM masks, edited token ids). Random draws here must be seeded from
        (``context.seed``, ``context.global_step``, ``context.rank``), never from the global generator, so a
        resumed run draws what an uninterrupted one does. Default: the batch unchanged."""
        return batch

    def embed(self, model: nn.Module, batch: Mapping[str, torch.Tensor], context: LossContext) -> torch.Tensor:
        """Encode all views of a (B, V, L) batch -> (B, V, H) embeddings, in one encoder call of B*V rows.

        ``model`` is the model to call (it may be wrapped for distributed training); a model with
        ``takes_views`` (the two-encoder ablation) gets the (B, V, L) batch itself and routes the views."""
        b, v = batch["input_ids"].shape[:2]
        inputs = {k: batch[k] for k in INPUT_KEYS if k in batch}
        if getattr(context.model, "takes_views", False):
            return model(**inputs)
        return model(**{k: t.reshape(b * v, -1) for k, t in inputs.items()}).view(b, v, -1)

    def setup(self, model: nn.Module, args: Any) -> None:
        """Called once by the trainer before training with the unwrapped model and the training arguments:
        build modules that depend on the model (a momentum copy of the encoder, a head of its hidden size).
        Submodules created here are trained, checkpointed and restored like those made in ``__init__``."""

    def loss(self, embeddings: torch.Tensor, batch: Mapping[str, torch.Tensor], context: LossContext):
        """The objective on this process's (B, V, H) embeddings -> a float32 scalar or ``{name: scalar}``.

        ``batch`` holds ``input_ids``/``attention_mask`` (B, V, L) int64 and the label columns (B,) float32.
        """
        raise NotImplementedError

    def chunk_loss(self, embeddings: torch.Tensor, batch: Mapping[str, torch.Tensor], context: LossContext):
        """Terms that need the encoder's graph beyond the embeddings, for one encoder call: ``embeddings``
        (b, V, H) with their graph and ``batch`` the chunk's inputs (b = B without gradient caching).

        Per-chunk values must add up to the whole batch's value (normalise by ``context.batch_size`` or a
        count over ``context.full_batch``, not by the chunk). Returns None (nothing), a scalar or a dict."""
        return None

    def on_step_end(self, model: nn.Module, context: LossContext) -> None:
        """Called after every optimizer step (a momentum update, a queue push)."""

    def dev_encoding(self, model: nn.Module):
        """A context manager the dev evaluation inside training (checkpoint selection) encodes under, for an
        objective whose official run selects checkpoints with another encoding than the saved model's (MixCSE's
        MLP, PromptBERT's template denoising). ``model`` is the unwrapped model; the context must restore it on
        exit. Default: no change (the saved model's own encoding)."""
        import contextlib

        return contextlib.nullcontext()

    def get_config_dict(self) -> dict:
        """The hyperparameters this objective was built with (JSON-able): by default the constructor's arguments as
        called, defaults filled in (a function or class is given as ``"module:qualname"``, any other value JSON
        cannot hold by its ``repr``). Override it to record something else."""
        return self.constructor_arguments()

    def constructor_arguments(self) -> dict:
        """The arguments the outermost constructor was called with (``inspect.signature(...).bind``), defaults
        applied, as JSON values (:func:`_jsonable`): what rebuilds this objective as ``--loss_args``."""
        return {k: _jsonable(v) for k, v in self.__dict__.get("_init_arguments", {}).items()}

    def recorded_loss_args(self) -> dict:
        """The ``--loss_args`` recorded for this objective (model card, ``simcse_training_args.json``, each
        checkpoint's ``simcse_objective.json`` that a resume is compared with): :meth:`get_config_dict` when the
        objective's own class defines it (or a wrapper's), else the constructor's bound arguments
        (:meth:`constructor_arguments`). So a subclass that adds an argument without its own
        ``get_config_dict`` is recorded with its argument, not with its parent's config alone."""
        owner = next(c for c in type(self).__mro__ if "get_config_dict" in c.__dict__)
        if owner is type(self) or owner is Objective or isinstance(self, ObjectiveWrapper):
            return self.get_config_dict()
        return self.constructor_arguments()

    def parameter_groups(self) -> list[dict]:
        """Optimizer settings of the objective's own parameters, one dict per group: ``{"params": [names as in
        named_parameters()], "lr": rate}`` or ``"lr_scale": multiple of --learning_rate``, and ``"weight_decay"``
        (default: ``--weight_decay``). Each group is an optimizer group of its own, scheduled like the encoder's
        (warm-up and decay scale every group alike). Gradient clipping (``--max_grad_norm``) stays global, as HF's.

        Default: the one-element parameters (a learned temperature or scale) at the run's rate without weight decay
        (decaying a log-temperature towards 0 is not a regulariser); every other parameter stays in HF's groups.
        Override it, e.g. ``return [{"params": ["log_scale"], "lr": 1e-2, "weight_decay": 0.0}]``."""
        scalars = [n for n, p in self.named_parameters() if p.numel() == 1 and p.requires_grad]
        return [{"params": scalars, "weight_decay": 0.0}] if scalars else []

    def describe(self) -> dict:
        """What a model card and ``simcse_training_args.json`` record of the objective: ``{"loss": name, "class":
        "module:qualname", "loss_args": recorded_loss_args(), "learned": {name: value}, "citation": str or None}``;
        ``learned`` holds the objective's own trained scalars (one-element parameters, e.g. a learned temperature)
        at the time of the call, so the final folder keeps them when the checkpoints are removed."""
        cls = type(self)
        learned = {n: float(p.detach().float().reshape(())) for n, p in self.named_parameters() if p.numel() == 1}
        return {"loss": self.name or cls.__name__, "class": f"{cls.__module__}:{cls.__qualname__}",
                "loss_args": self.recorded_loss_args(), "learned": learned, "citation": self.citation}

    def extra_tokens(self, model: nn.Module, max_seq_length: int) -> int:
        """Declaration: the most tokens the objective adds to a row of ``max_seq_length`` tokens after the
        collator's cut (a word-repeated view, a prompt template wrapped around the sentence); setup refuses a
        ``--max_seq_length`` whose lengthened rows would exceed the model's positions. Default 0."""
        return 0

    # ------------------------------------------------------------------ declarations checked at setup
    def check_columns(self, columns: list[str], source: str) -> None:
        """Refuse training data without the required columns.

        Raises:
            ValueError: a column of :attr:`input_columns` or :attr:`label_columns` is missing (names it, the
                objective and the columns the data has), or a negative column is there that the objective does
                not declare (it would be encoded and never used).
        """
        missing = [c for c in (*self.input_columns, *self.label_columns) if c not in columns]
        if missing:
            raise ValueError(f"--loss {self.name} needs the column(s) {missing} in the training data {source!r}; "
                             f"it has {columns}")
        unused = [c for c in NEGATIVE_COLUMNS if c in columns and c not in (*self.input_columns, *self.optional_columns)]
        if unused:
            raise ValueError(f"--loss {self.name} does not use the column(s) {unused} of the training data {source!r} "
                             f"(it uses {[*self.input_columns, *self.optional_columns] or ['sent0']}); drop them "
                             "(--no_hard_negatives drops hard_neg) or train on pairs")

    def check_batch(self, per_device: int, world: int, n_views: int) -> None:
        """Refuse a per-device batch below :attr:`min_batch` (one home for "batch >= N").

        Raises:
            ValueError: naming ``per_device_train_batch_size`` and the minimum.
        """
        if per_device * max(1, world) < self.min_batch:
            raise ValueError(f"--loss {self.name} needs at least {self.min_batch} examples per batch (in-batch "
                             f"negatives); got per_device_train_batch_size {per_device} x {world} process(es): "
                             f"use per_device_train_batch_size >= {self.min_batch}")


def _jsonable(value):
    """``value`` when JSON holds it as it is (numbers, strings, booleans, None, lists and dicts of them); a function
    or class (sentence-transformers' ``similarity_fct=cos_sim``) as ``"module:qualname"``, the same in every
    process, so two records of one run compare equal; anything else as its ``repr``."""
    import json

    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if callable(value) and hasattr(value, "__qualname__") and hasattr(value, "__module__"):
        return f"{value.__module__}:{value.__qualname__}"
    if callable(value) and hasattr(getattr(value, "func", None), "__qualname__"):  # functools.partial
        return {"partial": _jsonable(value.func), "args": _jsonable(list(value.args)),
                "keywords": _jsonable(dict(value.keywords))}
    try:
        json.dumps(value, allow_nan=False)
        return value
    except (TypeError, ValueError):
        return repr(value)


class ObjectiveWrapper(Objective):
    """An objective that wraps another (``inner``) and changes one part of it (as sentence-transformers'
    ``MatryoshkaLoss`` wraps a loss): every method and declaration delegates to ``inner`` unless overridden.
    ``inner`` is a submodule, so its state is trained, checkpointed and restored with the wrapper's.

    ``requires`` names the declarations (keys of :data:`REQUIREMENTS`) the inner objective must have true; one
    it declares false is refused when the wrapper is built (at setup, before anything is loaded), in one line
    naming ``option`` (how the user asked for the wrapper)."""

    requires: ClassVar[tuple[str, ...]] = ()
    option: ClassVar[str] = ""

    def __init__(self, inner: Objective):
        super().__init__()
        if not isinstance(inner, Objective):
            raise TypeError(f"{type(self).__name__} wraps an Objective, got {type(inner).__name__}")
        for attr in self.requires:
            if not getattr(inner, attr, True):
                raise ValueError(f"{self.option or '--loss ' + type(self).name} cannot wrap --loss {inner.name}: "
                                 f"{REQUIREMENTS[attr]}")
        self.inner = inner
        for attr in ("input_columns", "optional_columns", "label_columns", "min_batch", "single_view_copies",
                     "supports_gather", "supports_grad_cache", "needs_text", "dropout_views", "prefix_embeddings",
                     "repeatable_loss", "supports_lora", "uses_embeddings", "shared_buffers", "pooler_types"):
            if attr not in type(self).__dict__:  # a wrapper's own declaration wins
                setattr(self, attr, getattr(inner, attr))
        if "name" not in type(self).__dict__:
            self.name = inner.name

    def prepare_batch(self, batch, context):
        return self.inner.prepare_batch(batch, context)

    def embed(self, model, batch, context):
        return self.inner.embed(model, batch, context)

    def setup(self, model, args):
        self.inner.setup(model, args)

    def loss(self, embeddings, batch, context):
        return self.inner.loss(embeddings, batch, context)

    def chunk_loss(self, embeddings, batch, context):
        return self.inner.chunk_loss(embeddings, batch, context)

    def on_step_end(self, model, context):
        self.inner.on_step_end(model, context)

    def dev_encoding(self, model):
        return self.inner.dev_encoding(model)

    def get_config_dict(self):
        return {"loss": self.inner.name, "loss_args": self.inner.recorded_loss_args()}

    def parameter_groups(self) -> list[dict]:
        """The wrapped objective's groups (its names under ``inner.``), so a wrapped objective keeps its own
        learning rates; then the wrapper's own one-element parameters without weight decay."""
        groups = []
        for g in self.inner.parameter_groups() or []:
            names = [g["params"]] if isinstance(g.get("params"), str) else list(g.get("params", []))
            groups.append({**g, "params": [f"inner.{n}" for n in names]})
        own = [n for n, p in self.named_parameters() if not n.startswith("inner.") and p.numel() == 1 and p.requires_grad]
        return groups + ([{"params": own, "weight_decay": 0.0}] if own else [])

    def describe(self) -> dict:
        """The wrapped objective's record (its class and citation: what the user wrote), with this wrapper's
        name, arguments and learned scalars, and ``wrappers``: how the user asked for each wrapper, outermost
        first (``--loss matryoshka``, ``--fixed_dropout``, ``--do_mlm``)."""
        inner = self.inner.describe()
        own = super().describe()
        citations = [c for c in (type(self).citation, inner["citation"]) if c]
        return {**own, "class": inner["class"], "citation": "\n\n".join(citations) or None,
                "wrappers": [self.option or f"--loss {type(self).name}", *inner.get("wrappers", [])]}

    def check_batch(self, per_device, world, n_views):
        self.inner.check_batch(per_device, world, n_views)

    def extra_tokens(self, model, max_seq_length):
        return self.inner.extra_tokens(model, max_seq_length)
