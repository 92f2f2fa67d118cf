"""ESimCSE (Wu et al., COLING 2022, arXiv 2109.04380): word-repetition positives and a queue of momentum-encoder
embeddings as extra negatives.

Paper Eq. 3 (query ``h_i`` = the sentence, ``h_i^+`` = its word-repeated copy, ``h_m`` = the M queued
momentum embeddings, ``sim`` cosine, ``tau`` the temperature)::

    l_i = -log  e^{sim(h_i, h_i^+)/tau} / ( sum_j e^{sim(h_i, h_j^+)/tau} + sum_m e^{sim(h_i, h_m^+)/tau} )

and the momentum encoder (Eq. 2) ``theta_e <- lambda theta_e + (1 - lambda) theta``.

Transcribed from the official code (caskcsg/sentemb, ``ESimCSE/esimcse/models.py`` ``cl_forward`` and
``ESimCSE/esimcse/trainers.py`` ``compute_loss``), whose facts this module follows:

* the queue holds the momentum encoder's embeddings of view 0 (the *unrepeated* sentences) of past batches,
  computed in eval mode (no dropout) through the *online* MLP head (the momentum copy is of the backbone
  only), at most ``neg_size`` rows, first in first out; the first batch has none;
* the momentum encoder starts from *random* weights (``BertForCL.__init__`` copies the freshly built ``bert``
  before the checkpoint is loaded, ``cl_init``'s ``init_weights`` draws every weight again, and the checkpoint
  has no ``momentum_model.*``): ``momentum_init="official"``, drawn here with the model's own ``_init_weights``
  from the run's seed; ``"copy"`` starts from the pretrained backbone (MoCo's start);
* the momentum update uses the encoder's weights *before* the optimizer step of the batch whose embeddings it
  then computes (so the first batch already sees ``lambda * start + (1 - lambda) * theta_0``: made at setup
  here). Updating after each optimizer step (:meth:`on_step_end`) with the new weights gives the same
  sequence of momentum weights: the weights the next batch's forward and queue entries see;
* the queue is per process (the official code gathers the in-batch keys over processes, never the queue).

Differences (docs/methods.md): the official code empties the queue at every epoch start (the recipe is
one epoch) and, with gradient accumulation, updates the momentum copy and the queue at every micro-batch;
here both happen once per optimizer step (identical for the recipe's accumulation 1).
"""
from __future__ import annotations

import copy
import math
import random
from typing import Mapping

import torch
import torch.nn.functional as F
from torch import nn

from simcse.training.losses import cosine_logits
from simcse.training.objectives import register_objective
from simcse.training.objectives.base import BatchSeeds, LossContext, Objective, encode_without_dropout, view_inputs
from simcse.training.word_repetition import repeat_tokens, repeat_view

__all__ = ["ESimCSE"]


def random_momentum_encoder(encoder: nn.Module, seed: int) -> nn.Module:
    """A copy of ``encoder`` (a transformers ``PreTrainedModel``) with every weight drawn anew by the encoder's own
    ``_init_weights`` (BERT: Linear and Embedding weights N(0, initializer_range), biases 0, LayerNorm 1 and 0),
    on the CPU from the global CPU generator seeded with ``seed`` inside ``torch.random.fork_rng`` (the caller's random
    state is untouched), then moved to the encoder's device:
    the official ESimCSE momentum encoder's start, a randomly initialised ``BertModel(config)``.

    Raises:
        ValueError: an encoder without ``_init_weights`` (names ``momentum_init``).
    """
    init = getattr(encoder, "_init_weights", None)
    if not callable(init):
        raise ValueError(f"esimcse momentum_init 'official' needs a transformers encoder with _init_weights; "
                         f"{type(encoder).__name__} has none: use momentum_init 'copy'")
    device = next(encoder.parameters()).device
    fresh = copy.deepcopy(encoder).cpu()  # drawn on the CPU: the same weights whatever the device
    for t in (*fresh.parameters(), *fresh.buffers()):
        if getattr(t, "_is_hf_initialized", False):
            t._is_hf_initialized = False  # transformers' init functions skip tensors marked as loaded
    with torch.random.fork_rng(devices=[]), torch.no_grad():
        torch.random.default_generator.manual_seed(seed)
        fresh.apply(fresh._init_weights)
    fresh.to(device)
    return fresh


@register_objective
class ESimCSE(Objective):
    """ESimCSE's loss: InfoNCE of view 0 against the in-batch view-1 keys and a momentum-embedding queue.

    Args:
        temp: temperature tau > 0 (official ``--temp`` 0.05).
        momentum: lambda in [0, 1) of the momentum update (official ``--momentum`` 0.995).
        neg_size: the queue's length M >= 1 (official ``--neg_size``: 160 for BERT-base).
        dup_rate: the word-repetition rate of the positive view in [0, 1) (official ``--dup_rate``: 0.32 for
            BERT-base; :mod:`simcse.training.word_repetition`).
        momentum_init: how the momentum encoder starts. ``"official"`` (default, the official code's start): the
            backbone's architecture with freshly drawn random weights (the model's own ``_init_weights``, drawn
            from a generator seeded by the run's ``--seed``, so every process and a rerun draw the same weights),
            not the pretrained ones; ``"copy"``: a copy of the pretrained backbone (MoCo's start).

    State (checkpointed, never in the inference folder): ``momentum_encoder`` (a frozen encoder of the
    backbone's architecture, started as ``momentum_init`` says) and :attr:`queue` (n <= neg_size rows, float32, the newest last; extra state).

    Raises:
        ValueError: a hyperparameter out of range or an unknown ``momentum_init`` (naming it); at setup, a model
            without one ``encoder`` backbone (``--two_encoders``).
    """

    name = "esimcse"
    supports_grad_cache = True
    dropout_views = False  # view 1 is its own word-repeated copy (--fixed_dropout would drop it)
    prefix_embeddings = repeatable_loss = False  # the queue holds full-width embeddings, pushed from loss()
    supports_lora = False  # the momentum copy would hold the whole frozen base, in every adapter-only checkpoint

    MOMENTUM_INITS = ("official", "copy")

    def __init__(self, temp: float = 0.05, momentum: float = 0.995, neg_size: int = 160, dup_rate: float = 0.32,
                 momentum_init: str = "official"):
        super().__init__()
        if not (isinstance(temp, (int, float)) and math.isfinite(temp) and temp > 0):
            raise ValueError(f"esimcse temp must be a finite number > 0, got {temp!r}")
        if not (isinstance(momentum, (int, float)) and 0 <= momentum < 1):
            raise ValueError(f"esimcse momentum must be in [0, 1), got {momentum!r}")
        if isinstance(neg_size, bool) or not isinstance(neg_size, int) or neg_size < 1:
            raise ValueError(f"esimcse neg_size must be an integer >= 1, got {neg_size!r}")
        if momentum_init not in self.MOMENTUM_INITS:
            raise ValueError(f"esimcse momentum_init must be one of {list(self.MOMENTUM_INITS)}, got {momentum_init!r}")
        repeat_tokens([], dup_rate, random.Random(0))  # validates dup_rate
        self.momentum_init = momentum_init
        self._seeds = BatchSeeds()
        self.temp, self.momentum, self.neg_size, self.dup_rate = float(temp), float(momentum), neg_size, float(dup_rate)
        self.momentum_encoder: nn.Module | None = None
        self._queue = torch.zeros(0, 0)  # (n, H) once set up
        self._pending: list[torch.Tensor] = []  # this step's momentum embeddings, queued at on_step_end

    def get_config_dict(self) -> dict:
        return {"temp": self.temp, "momentum": self.momentum, "neg_size": self.neg_size, "dup_rate": self.dup_rate,
                "momentum_init": self.momentum_init}

    def extra_tokens(self, model, max_seq_length: int) -> int:
        """Word repetition lengthens a row of L tokens by at most ``min(10, int(dup_rate * L)) - 1``."""
        return max(0, min(10, int(self.dup_rate * max_seq_length)) - 1)

    def prepare_batch(self, batch: Mapping[str, torch.Tensor], context: LossContext) -> dict:
        """The positive view (view 1) word-repeated (:func:`simcse.training.word_repetition.repeat_view`), drawn
        from a generator seeded by (seed, step, rank, micro-batch), so a resumed run repeats as an uninterrupted
        one; the batch may grow by up to 9 tokens."""
        pad = getattr(getattr(context.model, "tokenizer", None), "pad_token_id", None)
        if pad is None:
            pad = getattr(getattr(getattr(context.model, "encoder", None), "config", None), "pad_token_id", None)
        return repeat_view(batch, 1, self.dup_rate, random.Random(self._seeds(context)), pad_token_id=pad or 0)

    # ------------------------------------------------------------------ lifecycle
    def setup(self, model: nn.Module, args=None) -> None:
        """Build the momentum encoder (frozen, eval mode) from the backbone ``model.encoder`` as ``momentum_init``
        says (:func:`random_momentum_encoder` for ``"official"``, seeded by ``args.seed``, 42 without ``args``) and
        allocate the empty queue. On resume the checkpoint's momentum weights then replace these."""
        encoder = getattr(model, "encoder", None)
        if not isinstance(encoder, nn.Module) or getattr(model, "takes_views", False):
            raise ValueError("--loss esimcse needs a model with one encoder backbone (its momentum copy); "
                             "it cannot be combined with --two_encoders")
        if self.momentum_init not in self.MOMENTUM_INITS:  # set after construction
            raise ValueError(f"esimcse momentum_init must be one of {list(self.MOMENTUM_INITS)}, "
                             f"got {self.momentum_init!r}")
        if self.momentum_init == "official":
            seed = getattr(args, "seed", None)
            momentum = random_momentum_encoder(encoder, 42 if seed is None else int(seed))
        else:
            momentum = copy.deepcopy(encoder)
        self.momentum_encoder = momentum.requires_grad_(False).eval()
        if self.momentum_init == "official":
            # the official update runs inside each forward, before the batch's momentum pass: the first batch
            # already sees lambda * start + (1 - lambda) * theta_0 (a no-op for a copy of theta_0)
            self._momentum_update(encoder)
        self._queue = torch.zeros(0, int(model.hidden_size))

    @property
    def queue(self) -> torch.Tensor:
        """The queued momentum embeddings (n, H) float32, n <= neg_size, oldest first."""
        return self._queue

    def get_extra_state(self) -> dict:
        """The queue, for checkpoints (extra state, not a buffer: it is per process, and DDP would overwrite
        every process's buffers with the first process's at each forward)."""
        return {"queue": self._queue.detach().cpu()}

    def set_extra_state(self, state: dict) -> None:
        self._queue = state["queue"]

    def _check_setup(self) -> None:
        if self.momentum_encoder is None:
            raise RuntimeError("ESimCSE.setup(model, args) must run before its loss (it builds the momentum encoder)")

    @torch.no_grad()
    def momentum_embeddings(self, model: nn.Module, batch: Mapping[str, torch.Tensor]) -> torch.Tensor:
        """The momentum encoder's (B, H) float32 embeddings of view 0: the model's forward with the backbone's
        weights swapped for the momentum copy's, in eval mode (no dropout), through the model's own MLP head
        (the official momentum branch always applies ``cls.mlp``): :func:`encode_without_dropout`."""
        self._check_setup()
        inputs = view_inputs(batch, 0)
        weights = {f"encoder.{k}": v for k, v in self.momentum_encoder.named_parameters()}
        return encode_without_dropout(model, inputs, weights).float()

    def loss(self, embeddings: torch.Tensor, batch: Mapping[str, torch.Tensor], context: LossContext) -> torch.Tensor:
        """Cross-entropy over [cos(z1_i, z2_j) for the (gathered) keys j, cos(z1_i, q_m) for the queue] / temp.

        ``embeddings`` (B, 2, H): view 0 the sentences (queries), view 1 their word-repeated copies (keys).
        During training (grad enabled, model in train mode) the momentum embeddings of this batch's view 0 are
        computed now and enter the queue at :meth:`on_step_end`. Returns a float32 scalar."""
        self._check_setup()
        batch_size = embeddings.shape[0]
        z1, z2 = embeddings[:, 0], embeddings[:, 1]
        keys = context.gather(z2)  # (W*B, H)
        labels = torch.arange(batch_size, device=z1.device) + context.rank * batch_size
        logits = [cosine_logits(z1, keys, self.temp)]
        if self._queue.shape[0]:
            self._queue = self._queue.to(z1.device)
            logits.append(cosine_logits(z1, self._queue, self.temp))  # (B, n): past batches' momentum embeddings
        if torch.is_grad_enabled() and context.model.training:
            self._pending.append(self.momentum_embeddings(context.model, batch))
        return F.cross_entropy(torch.cat(logits, dim=1), labels)

    @torch.no_grad()
    def on_step_end(self, model: nn.Module, context: LossContext | None = None) -> None:
        """Push this step's momentum embeddings into the queue (keeping the newest ``neg_size``), then move the
        momentum weights toward the model's: ``m <- momentum * m + (1 - momentum) * theta``."""
        self._check_setup()
        if self._pending:
            device = self._pending[0].device
            self._queue = torch.cat([self._queue.to(device), *self._pending])[-self.neg_size:]  # official FIFO
            self._pending.clear()
        self._momentum_update(model.encoder)

    @torch.no_grad()
    def _momentum_update(self, encoder: nn.Module) -> None:
        """``m <- momentum * m + (1 - momentum) * theta`` with ``encoder``'s weights ``theta``."""
        mine = [p for p in self.momentum_encoder.parameters()]
        theirs = [p.detach() for p in encoder.parameters()]
        if len(mine) != len(theirs):
            raise RuntimeError("the momentum encoder no longer matches the model's encoder")
        torch._foreach_mul_(mine, self.momentum)
        torch._foreach_add_(mine, theirs, alpha=1.0 - self.momentum)
