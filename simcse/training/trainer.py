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

from simcse.training.distributed import all_gather_with_grad, world_info
from simcse.training.gradcache import check_chunk_size, cuda_devices_of, grad_cache_step, split_chunks
from simcse.training.losses import check_temperature, info_nce, mlm_loss
from simcse.training.checkpoints import CheckpointHooks
from simcse.training.dev_eval import DevEvaluation, STSDevSet
from simcse.training.sources import StreamingHooks

_INPUT_KEYS = ("input_ids", "attention_mask", "token_type_ids")
logger = logging.getLogger(__name__)


class SimCSETrainer(StreamingHooks, DevEvaluation, CheckpointHooks):
    """HF Trainer for SimCSE (paper Section 3-4).

    Args (besides Trainer's):
        temp: InfoNCE temperature (> 0).
        hard_negative_alpha: alpha of Eq. 5 (multiplicative; see :func:`simcse.training.losses.info_nce`); the
            reference's ``hard_negative_weight`` w is ``log(alpha)``.
        eval_transfer: :meth:`evaluate` also scores the 7 transfer tasks (dev accuracy, the reference's
            ``--eval_transfer``).
        final_eval_transfer: the final evaluation (``metric_key_prefix="final"``) scores them too (the
            reference's ``--do_eval``).
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

    def __init__(self, *args, temp: float = 0.05, hard_negative_alpha: float = 1.0, mlm_weight: float = 0.1,
                 senteval_dir: str | None = None, eval_max_length: int | None = None,
                 gradient_cache_chunk_size: int | None = None, fixed_dropout: bool = False,
                 no_duplicates_rows=None, mlm_masker=None, eval_transfer: bool = False,
                 final_eval_transfer: bool = False, run_command: str | None = None, stream_resume: str | None = None,
                 **kwargs):
        if kwargs.get("eval_dataset") is None:
            kwargs["eval_dataset"] = STSDevSet(senteval_dir)
        self._default_ddp_find_unused(kwargs.get("model", args[0] if args else None),
                                      kwargs.get("args", args[1] if len(args) > 1 else None), mlm_weight)
        super().__init__(*args, **kwargs)
        self.temp = check_temperature(temp)
        self.hard_negative_alpha = hard_negative_alpha
        self.eval_transfer = bool(eval_transfer)
        self.final_eval_transfer = bool(final_eval_transfer)
        self.run_command = run_command
        self._stream_resume = stream_resume
        self.mlm_weight = mlm_weight
        self.senteval_dir = senteval_dir
        self.eval_max_length = eval_max_length
        self.gradient_cache_chunk_size = check_chunk_size(gradient_cache_chunk_size)
        self.fixed_dropout = bool(fixed_dropout)
        self.no_duplicates_rows = no_duplicates_rows
        self.mlm_masker = mlm_masker
        self._mlm_draw = (-1, 0)  # (global step, micro-batch) of the last MLM masking
        if self.gradient_cache_chunk_size:
            self._check_grad_cache_setup()

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

    # ------------------------------------------------------------------------------------------- loss
    @staticmethod
    def _flat_inputs(inputs) -> dict[str, torch.Tensor]:
        """(B, V, L) encoder inputs -> (B*V, L), keys of :data:`_INPUT_KEYS` present in ``inputs``."""
        batch, views = inputs["input_ids"].shape[:2]
        return {k: inputs[k].reshape(batch * views, -1) for k in _INPUT_KEYS if k in inputs}

    def _embed(self, model, inputs) -> torch.Tensor:
        """Encode all views of a (B, V, L) batch in one forward call -> (B, V, H) embeddings.

        Ablations (docs/ablations.md): a model with ``takes_views`` (:class:`simcse.models.dual_encoder.DualEncoderModel`)
        gets the (B, V, L) batch itself and routes the views to its encoders. With ``fixed_dropout`` only view 0
        is encoded (B rows, one dropout mask per sentence) and its (B, H) embedding is repeated for every view:
        identical to encoding the identical views with identical masks, forward and backward.
        """
        batch, views = inputs["input_ids"].shape[:2]
        if getattr(self.accelerator.unwrap_model(model), "takes_views", False):
            return model(**{k: inputs[k] for k in _INPUT_KEYS if k in inputs})
        if self.fixed_dropout:
            z = model(**{k: inputs[k][:, 0] for k in _INPUT_KEYS if k in inputs})  # (B, H)
            return z.unsqueeze(1).expand(batch, views, z.shape[-1])
        return model(**self._flat_inputs(inputs)).view(batch, views, -1)

    def contrastive_loss(self, z: torch.Tensor) -> torch.Tensor:
        """InfoNCE of this rank's (B, V, H) embeddings (V >= 2) -> float32 scalar (:func:`simcse.training.losses.info_nce`).

        Queries are view 0; keys are view 1 (positives); views 2.. are negative sets: view 2 the hard negatives
        (weighted by ``hard_negative_alpha``), views 3.. (the neutral hypotheses of ``--neutral_as_negative``,
        paper Table 7) more negatives of weight 1. Under torch.distributed the keys of all ranks are gathered
        with gradients and this rank's positives are at ``rank * B + arange(B)``; the loss is the mean over this
        rank's B queries (see the class docstring for why this gives the gradient of the global mean).
        """
        batch, views = z.shape[:2]
        keys = [z[:, v] for v in range(1, views)]  # positives, then negative sets: (B, H) each
        rank, world = world_info()
        labels = None
        if world > 1:
            keys = [all_gather_with_grad(k) for k in keys]  # (W*B, H) each
            labels = torch.arange(batch, device=z.device) + rank * batch
        return info_nce(z[:, 0], *keys, temp=self.temp, hard_negative_alpha=self.hard_negative_alpha, labels=labels)

    def _mlm_loss(self, model, inputs, n_masked: int | None = None) -> torch.Tensor:
        """Auxiliary MLM cross-entropy (float32 scalar) of a (b, V, L) batch with ``mlm_input_ids``/``mlm_labels``.

        ``n_masked=None``: mean over the masked tokens of ``inputs``. Otherwise the *sum* over them divided by
        ``n_masked`` (the masked-token count of the whole batch), so per-chunk values add up to the batch mean.
        A batch with nothing masked contributes 0 while keeping the head in the graph.
        """
        flat = self._flat_inputs(inputs)
        rows = flat["input_ids"].shape[0]
        mlm_kwargs = {"token_type_ids": flat["token_type_ids"]} if "token_type_ids" in flat else {}
        logits = self.accelerator.unwrap_model(model).mlm_logits(
            inputs["mlm_input_ids"].reshape(rows, -1), flat["attention_mask"], **mlm_kwargs
        )  # (rows, L, vocab)
        return mlm_loss(logits, inputs["mlm_labels"].reshape(rows, -1), n_masked=n_masked)

    def _add_mlm_masks(self, inputs: dict) -> dict:
        """Add ``mlm_input_ids``/``mlm_labels`` (B, V, L) to a batch when training with the MLM loss.

        The masks come from their own generator, seeded by (``--seed``, global step, process index,
        micro-batch index within the step), not from the global torch generator: the data loader collates
        ahead of the step, so masks drawn there would take random numbers from dropout's stream and differ
        after a resume. Drawn on the CPU, moved to the batch's device."""
        if self.mlm_masker is None or "mlm_input_ids" in inputs:
            return inputs
        step = self.state.global_step
        micro = self._mlm_draw[1] + 1 if self._mlm_draw[0] == step else 0
        self._mlm_draw = (step, micro)
        seed = np.random.SeedSequence([self.args.seed, step, self.args.process_index, micro]).generate_state(1)[0]
        ids = inputs["input_ids"]
        masked, labels = self.mlm_masker(ids.cpu(), inputs["attention_mask"].cpu(),
                                         generator=torch.Generator().manual_seed(int(seed)))
        return {**inputs, "mlm_input_ids": masked.to(ids.device), "mlm_labels": labels.to(ids.device)}

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        z = self._embed(model, inputs)  # (B, V, H)
        loss = self.contrastive_loss(z)
        if "mlm_input_ids" in inputs and self.mlm_weight > 0:
            loss = loss + self.mlm_weight * self._mlm_loss(model, inputs)
        return (loss, {"embeddings": z}) if return_outputs else loss

    # ------------------------------------------------------------------------------ gradient caching
    def training_step(self, model: nn.Module, inputs: dict[str, torch.Tensor], num_items_in_batch=None) -> torch.Tensor:
        """HF's training step, or the GradCache step when ``gradient_cache_chunk_size`` is set.

        With caching (Gao et al. 2021, arXiv 2101.06983; :func:`simcse.training.gradcache.grad_cache_step`) the (B, V, L)
        batch is split into chunks of ``gradient_cache_chunk_size`` examples. Pass 1 encodes every chunk without
        a graph (saving each chunk's RNG state); :meth:`contrastive_loss` -- including the cross-rank gather --
        runs once on all B*V embeddings and gives their gradient; pass 2 re-encodes each chunk with the same
        dropout masks and backpropagates that cached gradient through ``self.accelerator.backward`` (fp16 loss
        scaling, DDP), divided by the number of gradient-accumulation micro-batches as HF does. Under DDP every
        chunk's backward but the last runs under ``no_sync`` (nested inside the Trainer's own ``no_sync`` for
        non-final accumulation micro-batches, which it then does not override), so gradients are all-reduced
        once per micro-batch. With ``do_mlm`` the MLM loss (which decomposes over tokens) is added to each
        chunk's pass-2 graph, normalised by the batch's masked-token count. The parameter gradients equal
        those of :meth:`compute_loss` on the whole batch (tests/training/test_gradcache.py). Returns the detached loss
        divided by the accumulation steps, like HF's ``training_step``.
        """
        inputs = self._add_mlm_masks(inputs)
        chunk_size = self.gradient_cache_chunk_size
        if not chunk_size:
            return super().training_step(model, inputs, num_items_in_batch)
        model.train()
        if hasattr(self.optimizer, "train") and callable(self.optimizer.train):
            self.optimizer.train()
        inputs = self._prepare_inputs(inputs)
        keys = [k for k in (*_INPUT_KEYS, "mlm_input_ids", "mlm_labels") if k in inputs]
        chunks = split_chunks({k: inputs[k] for k in keys}, chunk_size)
        ga_steps = 1 if self.loss_is_scaled_for_ga else self.current_gradient_accumulation_steps
        do_mlm = "mlm_input_ids" in inputs and self.mlm_weight > 0
        n_masked = int((inputs["mlm_labels"] != -100).sum()) if do_mlm else 0

        def encode(chunk):
            with self.compute_loss_context_manager():
                return self._embed(model, chunk)  # (b, V, H)

        mlm_parts: list[torch.Tensor] = []

        def mlm_term(i, chunk):
            if not do_mlm:
                return None
            with self.compute_loss_context_manager():
                term = self.mlm_weight * self._mlm_loss(model, chunk, n_masked=n_masked)
            mlm_parts.append(term.detach())
            return term

        devices = list(model.device_ids) if isinstance(model, nn.DataParallel) and model.device_ids else cuda_devices_of(chunks)
        loss = grad_cache_step(
            chunks,
            encode,
            self.contrastive_loss,
            lambda surrogate: self.accelerator.backward(surrogate / ga_steps),
            no_sync=lambda: self.accelerator.no_sync(model),
            extra_loss=mlm_term,
            devices=devices,
        )
        if mlm_parts:  # report the same total as compute_loss
            loss = loss + torch.stack(mlm_parts).sum()
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


