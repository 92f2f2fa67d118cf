"""The trainer's side of the objective API (:mod:`simcse.training.objectives`): the per-step
:class:`~simcse.training.objectives.base.LossContext`, the calls into the objective (embed, loss, chunk terms,
batch preparation), the logging of named loss parts, the setup checks of the objective's declarations, and the
step hook. :class:`ObjectiveHooks` is a mixin of :class:`simcse.training.trainer.SimCSETrainer` (it relies on HF
``Trainer``'s ``args``, ``state``, ``accelerator`` and on ``self.objective``)."""
from __future__ import annotations

import torch
from transformers import Trainer, TrainerCallback

from simcse.training.distributed import all_gather_nograd, all_gather_with_grad, world_info
from simcse.training.objectives.base import LossContext, total_loss


class ObjectiveHooks(Trainer):
    """Calls into the trainer's objective; see the module."""

    # ------------------------------------------------------------------------------------------- loss
    def loss_context(self, model=None, batch=None) -> LossContext:
        """The :class:`~simcse.training.objectives.base.LossContext` of this step (process, step, gather)."""
        rank, world = world_info()
        unwrapped = self.accelerator.unwrap_model(model if model is not None else self.model)
        return LossContext(
            model=unwrapped, rank=rank, world=world, global_step=self.state.global_step, seed=self.args.seed,
            gather=all_gather_with_grad if world > 1 else (lambda t: t),
            gather_nograd=all_gather_nograd if world > 1 else (lambda t: t),
            batch_size=0 if batch is None else int(batch["input_ids"].shape[0]),
            full_batch=batch if batch is not None else {}, log=self._record_value)

    def _record_part(self, name: str, value: float) -> None:
        """A named loss part (logged as ``loss_<name>``)."""
        self._loss_parts.setdefault(f"loss_{name}", []).append(float(value))

    def _record_value(self, name: str, value: float) -> None:
        """A value an objective logs with ``context.log`` (a temperature, a queue size): logged under its own name."""
        self._loss_parts.setdefault(name, []).append(float(value))

    def _embed(self, model, inputs) -> torch.Tensor:
        """All views of a (B, V, L) batch -> (B, V, H) embeddings (the objective's :meth:`embed`: one encoder
        call of B*V rows by default; the fixed-dropout and two-encoder ablations route views their own way)."""
        return self.objective.embed(model, inputs, self.loss_context(model, inputs))

    def contrastive_loss(self, z: torch.Tensor, inputs=None, model=None) -> torch.Tensor:
        """The objective's embedding loss on this rank's (B, V, H) embeddings -> float32 scalar; named parts are
        summed and recorded for logging (``loss_<name>``)."""
        inputs = inputs if inputs is not None else {"input_ids": torch.empty(z.shape[:2] + (0,), dtype=torch.long)}
        total, parts = total_loss(self.objective.loss(z, inputs, self.loss_context(model, inputs)))
        for name, part in parts.items():
            self._record_part(name, part.detach().item())
        return total

    def _chunk_terms(self, model, z, chunk, full) -> torch.Tensor | None:
        """The objective's :meth:`chunk_loss` for one encoder call (summed; parts recorded)."""
        ctx = self.loss_context(model, full)
        total, parts = total_loss(self.objective.chunk_loss(z, chunk, ctx))
        for name, part in parts.items():
            self._record_part(name, part.detach().item())
        return total

    def _prepare_objective_batch(self, model, inputs: dict) -> dict:
        return dict(self.objective.prepare_batch(inputs, self.loss_context(model, inputs)))

    def log(self, logs: dict, *args, **kwargs) -> None:
        """HF's log, plus the mean of each named loss part since the last log line (``loss_<name>``; this
        process's values)."""
        if "loss" in logs and self._loss_parts:
            logs = {**logs, **{k: round(sum(v) / len(v), 4) for k, v in self._loss_parts.items()}}
            self._loss_parts = {}
        return super().log(logs, *args, **kwargs)

    def _check_objective_setup(self) -> None:
        """Refuse what the objective declares it cannot do, before training starts."""
        world = max(1, self.args.world_size)
        if world > 1 and not self.objective.supports_gather:
            raise ValueError(f"--loss {self.objective.name} does not support training on {world} processes "
                             "(its loss is not defined over gathered in-batch negatives); train on one process")
        if self.gradient_cache_chunk_size and not self.objective.supports_grad_cache:
            raise ValueError(f"--gradient_cache_chunk_size is not supported by --loss {self.objective.name} (its loss "
                             "needs more than the embeddings); unset it")

    def create_optimizer(self, model=None):
        """HF's optimizer, with the objective's own parameters in the groups it declares
        (:meth:`~simcse.training.objectives.base.Objective.parameter_groups`): each declared group becomes an
        optimizer group of its own learning rate (``lr``, or ``lr_scale`` x ``--learning_rate``) and weight decay;
        the scheduler scales every group's rate alike."""
        optimizer = super().create_optimizer(model)
        groups = resolve_parameter_groups(self.objective, self.args.learning_rate, self.args.weight_decay)
        if not groups:
            return optimizer
        moved = {id(p) for g in groups for p in g["params"]}
        template = {k: v for k, v in optimizer.param_groups[0].items() if k not in ("params", "lr", "weight_decay", "initial_lr")}
        for group in optimizer.param_groups:
            group["params"] = [p for p in group["params"] if id(p) not in moved]
        for g in groups:
            optimizer.add_param_group({**template, **g})
        return optimizer

    def _set_signature_columns_if_needed(self) -> None:
        """HF keeps only the model's forward arguments as dataset columns: keep the objective's label columns
        (e.g. ``score``) too, which the collator carries to the loss."""
        super()._set_signature_columns_if_needed()
        extra = [c for c in self.objective.label_columns if c not in self._signature_columns]
        self._signature_columns = [*self._signature_columns, *extra]



class ObjectiveStepHook(TrainerCallback):
    """Calls the objective's :meth:`on_step_end` after every optimizer step (a momentum update, a queue push)."""

    def __init__(self, trainer):
        self.trainer = trainer

    def on_step_end(self, args, state, control, model=None, **kwargs):
        t = self.trainer
        t.objective.on_step_end(t.accelerator.unwrap_model(t.model), t.loss_context())


def resolve_parameter_groups(objective, learning_rate: float, weight_decay: float) -> list[dict]:
    """The objective's declared parameter groups as optimizer groups ``{"params": [tensors], "lr", "weight_decay",
    "name"}``, checked: known keys, parameters of this objective that train, no parameter in two groups, a
    finite positive rate.

    Raises:
        ValueError: naming the objective and the bad declaration.
    """
    import math

    declared = objective.parameter_groups() or []
    params = dict(objective.named_parameters())
    where = f"--loss {objective.name}: parameter_groups()"
    out, seen = [], set()
    for i, g in enumerate(declared):
        unknown = sorted(set(g) - {"params", "lr", "lr_scale", "weight_decay"})
        if unknown or "params" not in g:
            raise ValueError(f"{where} group {i}: expected the keys params, lr or lr_scale, weight_decay; got {sorted(g)}")
        if "lr" in g and "lr_scale" in g:
            raise ValueError(f"{where} group {i}: give lr or lr_scale, not both")
        names = [g["params"]] if isinstance(g["params"], str) else list(g["params"])
        missing = [n for n in names if n not in params]
        if missing:
            raise ValueError(f"{where} group {i}: no parameter(s) {missing}; the objective has {sorted(params)}")
        twice = [n for n in names if n in seen]
        if twice:
            raise ValueError(f"{where}: parameter(s) {twice} in two groups")
        seen.update(names)
        try:
            lr = float(g["lr"]) if "lr" in g else float(g.get("lr_scale", 1.0)) * learning_rate
            wd = float(g.get("weight_decay", weight_decay))
        except (TypeError, ValueError):
            raise ValueError(f"{where} group {i}: lr / lr_scale / weight_decay must be numbers, got "
                             f"{ {k: g[k] for k in ('lr', 'lr_scale', 'weight_decay') if k in g} }") from None
        if not (math.isfinite(lr) and lr > 0) or not (math.isfinite(wd) and wd >= 0):
            raise ValueError(f"{where} group {i}: lr must be a finite number > 0 and weight_decay >= 0, got lr {lr}, "
                             f"weight_decay {wd}")
        trained = [params[n] for n in names if params[n].requires_grad]
        if trained:
            out.append({"params": trained, "lr": lr, "weight_decay": wd})
    return out
