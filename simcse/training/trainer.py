"""SimCSETrainer: HF Trainer with the contrastive loss and STS evaluation, overriding hooks only.

Overridden: ``compute_loss`` (one encoder pass over all views, InfoNCE), ``training_step`` (only when gradient
caching is on: the two-pass GradCache computation of :mod:`simcse.training.gradcache`; otherwise HF's own step),
``evaluate`` (STS-B / SICK-R dev Spearman instead of a prediction loop, :mod:`simcse.training.dev_eval`), and
the model-persistence hooks ``_save``, ``_save_checkpoint``, ``_load_from_checkpoint`` and ``_load_best_model``
(:mod:`simcse.training.checkpoints`: the model is a composed ``nn.Module`` with its own safetensors format, as
sentence-transformers' trainer does for its models; checkpoints appear complete or not at all); ``_get_train_sampler`` keys each example by epoch for runs with random draws in
the collator; ``train`` wraps HF's to restore signal handlers when it raises; a ``--streaming`` dataset gets its own data loader,
its position in every checkpoint and an exact resume (:class:`simcse.training.sources.StreamingHooks`). The training loop itself is
HF's, untouched.

**Multiple processes (DDP) and loss scaling.** Under torch.distributed the keys (views 1..V-1) are gathered
from all W ranks with gradients (:func:`simcse.training.distributed.all_gather_with_grad`), so each query sees
W*B - 1 in-batch negatives (plus the W*B hard negatives). Rank r's loss ``L_r`` is the mean over its *own* B
queries (against all W*B keys); the gather's backward all-reduces (SUM) the key gradients, so rank r's
embeddings receive ``d(sum_r' L_r')/dz_r``; DDP then *averages* the parameter gradients over ranks. The
result is ``(1/W) d(sum_r L_r)/dtheta = d L/dtheta`` with ``L = (1/W) sum_r L_r`` the mean of the per-query
loss over the global batch of W*B queries -- exactly the gradient of one process holding the whole global
batch (tested in ``tests/training/test_distributed.py``). The logged loss (HF averages ``L_r`` over ranks) is that
same global mean. No extra factor W is needed, so the learning rate of a 1-GPU run with the same global
batch carries over. The MLM term is a per-rank mean, averaged by DDP: the mean over ranks of per-rank MLM
means (equal to the global token mean when ranks mask equally many tokens).
"""
from __future__ import annotations

import logging

import numpy as np
import torch
from torch import nn

from simcse.training.gradcache import check_chunk_size, cuda_devices_of, grad_cache_step, split_chunks
from simcse.training.objective_hooks import ObjectiveHooks, ObjectiveStepHook
from simcse.training.checkpoints import CheckpointHooks
from simcse.training.dev_eval import DevEvaluation, STSDevSet
from simcse.training.sources import StreamingHooks

logger = logging.getLogger(__name__)


def keep_objective_buffers_per_process(model, objective) -> None:
    """Exclude the objective's buffers from DDP's buffer broadcast, unless it declares ``shared_buffers``.

    DDP (``broadcast_buffers``, on by default) copies rank 0's buffers to every process at each forward; for an
    objective's buffers (a running count, a BatchNorm head's statistics) that would overwrite each process's own
    state, which its checkpoint saves per process. So they are per process: every process keeps what it computed
    (``_ddp_params_and_buffers_to_ignore`` names them; the encoder's buffers and every parameter are synchronised
    as before). An objective whose buffers must be equal on every process declares ``shared_buffers = True`` and
    gets DDP's broadcast: rank 0's values at every forward."""
    if getattr(objective, "shared_buffers", False):
        return
    from torch.nn.parallel import DistributedDataParallel

    names = [f"objective.{n}" for n, _ in objective.named_buffers()]
    if names:
        earlier = list(getattr(model, "_ddp_params_and_buffers_to_ignore", []))
        DistributedDataParallel._set_params_and_buffers_to_ignore_for_model(model, earlier + names)


class SimCSETrainer(ObjectiveHooks, StreamingHooks, DevEvaluation, CheckpointHooks):
    """HF Trainer for SimCSE (paper Section 3-4).

    Args (besides Trainer's):
        temp: InfoNCE temperature (> 0).
        hard_negative_alpha: alpha of Eq. 5 (multiplicative; see :func:`simcse.training.losses.info_nce`); the
            reference's ``hard_negative_weight`` w is ``log(alpha)``.
        eval_transfer: :meth:`evaluate` also scores the 7 transfer tasks (dev accuracy, the reference's
            ``--eval_transfer``).
        final_eval_transfer: the final evaluation (``metric_key_prefix="final"``) scores them too (the
            reference's ``--do_eval``).
        dev_mlp: the evaluations during training (checkpoint selection) apply the ``cls`` MLP of an
            ``mlp_only_train`` model (``--dev_mlp``, the official MixCSE run's selection); the saved model and the
            final evaluation encode without it.
        run_command: the shell command of the run, written into each checkpoint (the resume line).
        stream_resume: a ``--streaming`` run resuming from this checkpoint (its random state is restored at the
            first step; :class:`simcse.training.sources.StreamingHooks`).
        mlm_weight: lambda of the auxiliary MLM loss (Appendix D) when the batch carries ``mlm_input_ids``.
        senteval_dir: SentEval ``downstream`` folder for dev evaluation (default: see
            :func:`simcse.evaluation.resolve_senteval_dir`).
        eval_max_length: token cut of the evaluation sentences; None (default): only the model's own limit
            (:attr:`~simcse.models.modeling.SimCSEModel.max_input_tokens`), as the reference's evaluation, which does
            not truncate.
        gradient_cache_chunk_size: None or 0: off. Otherwise the number of *examples* (each with its V views)
            the encoder runs on at once; the loss is still over the whole per-device batch (GradCache, see
            :meth:`training_step` and :mod:`simcse.training.gradcache`).
        fixed_dropout: paper Table 3 "fixed 0.1": encode only view 0 of each (identical-view) example and use
            that embedding for every view, so both views carry the same dropout mask (see :meth:`_embed`).
        no_duplicates_rows: None (HF's random order) or one tuple of texts per training row: the order then
            keeps repeated texts out of one global batch (:class:`simcse.training.samplers.NoDuplicatesSampler`).
        mlm_masker: None, or ``mask(input_ids, attention_mask, generator=g) -> (mlm_input_ids, mlm_labels)``
            (:func:`simcse.training.data.mask_tokens` with the tokenizer's facts bound): the MLM masks of each
            micro-batch are drawn from a generator seeded by (seed, global step, process, micro-batch), so a
            resumed run masks exactly as an uninterrupted one (see :meth:`_add_mlm_masks`).

    Batches are (B, V, L) from :class:`simcse.training.data.ContrastiveCollator`; V = 2 (two dropout views of the same
    sentence, or a positive pair) or 3 (with a hard negative), 4 with ``--neutral_as_negative``. Views are
    numbered from 0 here and throughout: view 0 the queries, view 1 the positives, views 2.. negatives. All B*V
    rows go through the encoder in one pass.

    Multiple processes and loss scaling: see the module docstring.

    DDP's ``find_unused_parameters`` defaults to False here (see :meth:`_default_ddp_find_unused`), which the
    MLM loss under DDP needs.

    Gradient accumulation: the loss is divided by the number of micro-batches (``loss_is_scaled_for_ga =
    False``: ``compute_loss`` ignores ``num_items_in_batch``), as HF does; negatives are never shared across
    micro-batches (each micro-batch is its own contrastive batch), unlike gradient caching.
    """

    # compute_loss returns a plain mean that ignores num_items_in_batch: HF must divide it by the number of
    # gradient-accumulation micro-batches (HF would skip that for a model whose forward takes **kwargs when a
    # batch carried "labels").
    loss_is_scaled_for_ga = False

    def __init__(self, *args, objective=None, temp: float = 0.05, hard_negative_alpha: float = 1.0,
                 mlm_weight: float = 0.1, senteval_dir: str | None = None, eval_max_length: int | None = None,
                 gradient_cache_chunk_size: int | None = None, fixed_dropout: bool = False,
                 no_duplicates_rows=None, mlm_masker=None, eval_transfer: bool = False, merge_lora: bool = False,
                 final_eval_transfer: bool = False, run_command: str | None = None, stream_resume: str | None = None,
                 dev_mlp: bool = False, **kwargs):
        if objective is None:  # the keyword arguments of the reference's trainer: InfoNCE with its ablations
            from simcse.training.objectives.compose import simcse_objective

            objective = simcse_objective(temp=temp, hard_negative_alpha=hard_negative_alpha,
                                         hard_negative_given=hard_negative_alpha != 1.0,  # InfoNCE's own default
                                         fixed_dropout=fixed_dropout, mlm_weight=mlm_weight, mlm_masker=mlm_masker)
        from simcse.training.objectives import Objective

        if not isinstance(objective, Objective):
            raise TypeError(f"objective must be a simcse.training.objectives.Objective, got {type(objective).__name__}")
        if kwargs.get("eval_dataset") is None:
            kwargs["eval_dataset"] = STSDevSet(senteval_dir)
        model = kwargs.get("model", args[0] if args else None)
        if model is not None:
            objective.setup(model, kwargs.get("args", args[1] if len(args) > 1 else None))
            model.add_module("objective", objective)  # trained, moved and wrapped (DDP) with the model
            keep_objective_buffers_per_process(model, objective)
        self._default_ddp_find_unused(model, kwargs.get("args", args[1] if len(args) > 1 else None), mlm_weight)
        super().__init__(*args, **kwargs)
        self.objective = objective
        self.eval_transfer = bool(eval_transfer)
        self.final_eval_transfer = bool(final_eval_transfer)
        self.dev_mlp = bool(dev_mlp)
        self.run_command = run_command
        self._stream_resume = stream_resume
        self.senteval_dir = senteval_dir
        self.eval_max_length = eval_max_length
        self.gradient_cache_chunk_size = check_chunk_size(gradient_cache_chunk_size)
        self.no_duplicates_rows = no_duplicates_rows
        self.merge_lora = bool(merge_lora)
        self._loss_parts: dict[str, list[float]] = {}
        self._check_objective_setup()
        if self.gradient_cache_chunk_size:
            self._check_grad_cache_setup()
        self.add_callback(ObjectiveStepHook(self))

    @staticmethod
    def _default_ddp_find_unused(model, args, mlm_weight: float) -> None:
        """Choose DDP's ``find_unused_parameters`` when the user left ``ddp_find_unused_parameters`` unset.

        HF defaults it to True for a model that is not a ``PreTrainedModel``. That breaks the MLM loss under DDP:
        the MLM head runs outside DDP's forward (``mlm_logits`` on the unwrapped model), so DDP's graph search
        from the forward output marks the head "unused" and its gradient hook then fires once more ("marked a
        variable ready twice"). Every parameter of a SimCSEModel gets a gradient at every step (the detached
        HF pooler is not a submodule), so False is right -- except when an MLM head is attached but unused
        (``mlm_weight == 0``), where True is kept.
        """
        if args is None or getattr(args, "ddp_find_unused_parameters", True) is not None:
            return
        has_head = getattr(model, "mlm_head", None) is not None
        args.ddp_find_unused_parameters = bool(has_head and not mlm_weight > 0)

    def _check_grad_cache_setup(self) -> None:
        """Reject settings that gradient caching cannot honour (several backward calls per step)."""
        from transformers.training_args import OptimizerNames

        if self.is_deepspeed_enabled:
            raise ValueError("gradient_cache_chunk_size is not supported with DeepSpeed (it runs one backward per chunk)")
        if self.args.optim in (OptimizerNames.LOMO, OptimizerNames.ADALOMO):
            raise ValueError("gradient_cache_chunk_size is not supported with LOMO optimizers (they update inside backward)")
        if getattr(self.accelerator, "parallelism_config", None) is not None and getattr(self.accelerator.parallelism_config, "cp_enabled", False):
            raise ValueError("gradient_cache_chunk_size is not supported with context parallelism")

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        inputs = self._prepare_objective_batch(model, inputs)
        z = self._embed(model, inputs)  # (B, V, H)
        loss = self.contrastive_loss(z, inputs, model)
        extra = self._chunk_terms(model, z, inputs, inputs)
        if extra is not None:
            loss = loss + extra
        return (loss, {"embeddings": z}) if return_outputs else loss

    # ------------------------------------------------------------------------------ gradient caching
    def training_step(self, model: nn.Module, inputs: dict[str, torch.Tensor], num_items_in_batch=None) -> torch.Tensor:
        """HF's training step, or the GradCache step when ``gradient_cache_chunk_size`` is set.

        With caching (Gao et al. 2021, arXiv 2101.06983; :func:`simcse.training.gradcache.grad_cache_step`) the (B, V, L)
        batch is split into chunks of ``gradient_cache_chunk_size`` examples. Pass 1 encodes every chunk without
        a graph (saving each chunk's RNG state); the objective's :meth:`loss` -- including the cross-rank gather --
        runs once on all B*V embeddings and gives their gradient; pass 2 re-encodes each chunk with the same
        dropout masks and backpropagates that cached gradient through ``self.accelerator.backward`` (fp16 loss
        scaling, DDP), divided by the number of gradient-accumulation micro-batches as HF does. Under DDP every
        chunk's backward but the last runs under ``no_sync`` (nested inside the Trainer's own ``no_sync`` for
        non-final accumulation micro-batches, which it then does not override), so gradients are all-reduced
        once per micro-batch. The objective's :meth:`chunk_loss` (e.g. the MLM term, which decomposes over
        tokens) is added to each chunk's pass-2 graph with the chunk's embeddings. The parameter gradients equal
        those of :meth:`compute_loss` on the whole batch (tests/training/test_gradcache.py). Returns the detached
        loss divided by the accumulation steps, like HF's ``training_step``.
        """
        chunk_size = self.gradient_cache_chunk_size
        if not chunk_size:
            return super().training_step(model, inputs, num_items_in_batch)
        model.train()
        if hasattr(self.optimizer, "train") and callable(self.optimizer.train):
            self.optimizer.train()
        inputs = self._prepare_objective_batch(model, self._prepare_inputs(inputs))
        chunks = split_chunks({k: v for k, v in inputs.items() if isinstance(v, torch.Tensor)}, chunk_size)
        ga_steps = 1 if self.loss_is_scaled_for_ga else self.current_gradient_accumulation_steps

        def encode(chunk):
            with self.compute_loss_context_manager():
                return self._embed(model, chunk)  # (b, V, H)

        extra_parts: list[torch.Tensor] = []

        def chunk_term(i, chunk, rep):
            with self.compute_loss_context_manager():
                term = self._chunk_terms(model, rep, chunk, inputs)
            if term is not None:
                extra_parts.append(term.detach())
            return term

        devices = list(model.device_ids) if isinstance(model, nn.DataParallel) and model.device_ids else cuda_devices_of(chunks)
        loss = grad_cache_step(
            chunks,
            encode,
            lambda z: self.contrastive_loss(z, inputs, model),
            lambda surrogate: self.accelerator.backward(surrogate / ga_steps),
            no_sync=lambda: self.accelerator.no_sync(model),
            extra_loss=chunk_term,
            devices=devices,
            loss_params=dict(self.objective.named_parameters()),
        )
        if extra_parts:  # report the same total as compute_loss
            loss = loss + torch.stack(extra_parts).sum()
        del inputs
        return loss / ga_steps

    def train(self, *args, **kwargs):
        """HF's ``train``; signal handlers of a :class:`simcse.training.callbacks.SaveOnSignalCallback` are restored even
        when training raises (HF calls ``on_train_end`` only when it returns)."""
        try:
            return super().train(*args, **kwargs)
        finally:
            for cb in self.callback_handler.callbacks:
                if callable(getattr(cb, "restore_handlers", None)):
                    cb.restore_handlers()

    # ------------------------------------------------------------------------------------------- data
    def _get_train_sampler(self, train_dataset=None):
        """HF's sampler; for a :class:`simcse.training.data.KeyedDataset` (augmentation runs) an
        :class:`simcse.training.data.EpochKeyedSampler` seeded with ``data_seed`` (or ``seed``), whose keys carry the epoch
        into the DataLoader workers, so the collator's random draws are new each epoch and the same whatever the
        workers and after a resume; with ``no_duplicates_rows`` (one tuple of texts per row) a
        :class:`~simcse.training.samplers.NoDuplicatesSampler` over the global batch (per-device batch x processes)."""
        from simcse.training.data import EpochKeyedSampler, KeyedDataset

        dataset = train_dataset if train_dataset is not None else self.train_dataset
        if isinstance(dataset, KeyedDataset):
            seed = self.args.data_seed if self.args.data_seed is not None else self.args.seed
            return EpochKeyedSampler(len(dataset), seed)
        if self.no_duplicates_rows is None:
            return super()._get_train_sampler(train_dataset)
        from simcse.training.samplers import NoDuplicatesSampler

        global_batch = self.args.per_device_train_batch_size * max(1, self.args.world_size)
        return NoDuplicatesSampler(self.no_duplicates_rows, global_batch, seed=self.args.seed)



