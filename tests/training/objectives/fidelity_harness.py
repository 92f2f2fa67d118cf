"""The multi-step fidelity harness shared by the SimCSE family's tests: an objective trained the way the trainer
trains it, and an independent transcription of the official code trained beside it, both with dropout on.

The project side (:func:`project_steps`) follows the trainer's order at every optimizer step: ``setup`` once,
then ``prepare_batch`` (the objective's own draws), ``embed``, ``loss`` (+ ``chunk_loss``), backward, an SGD
step, ``on_step_end``. The reference side (:func:`reference_steps`) runs a :class:`Reference` -- the official
forward and update rules, its state built as the official code builds it -- through the same loop with its own
optimizer. Both reseed torch's global generator with :func:`dropout_seed` before each step's forward, so the
two sides draw the same dropout masks when they run the same modules in the same order (which is part of
what is checked). Run both in float64 (``model.double()``): differences are then rounding (~1e-9), not the
float32 drift that a temperature of 0.05 amplifies over steps. After every step the losses, the trained weights and the state the method carries
(momentum weights, queue, BatchNorm statistics, ...) are recorded; :func:`mismatch` measures how far two runs
are apart, :func:`assert_steps_match` asserts they agree, and a negative control asserts a changed
hyperparameter, start or train/eval mode is told apart (``mismatch(...) > tolerance``).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Callable, Iterable, Mapping, Protocol

import torch

from simcse.training.objectives.base import LossContext, total_loss


def dropout_seed(step: int) -> int:
    """The torch seed set before step ``step``'s forward on both sides (matched dropout masks)."""
    return 1000 + step


@dataclass
class Step:
    """What one optimizer step left behind: its loss, the trained weights and the method's state after it
    (tensors keyed by the project's names), and the (prepared) batch it trained on."""

    loss: float
    weights: dict[str, torch.Tensor]
    state: dict[str, torch.Tensor]
    batch: dict = field(default_factory=dict)


def _snapshot(named: Iterable[tuple[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone().double() for k, v in named}


def project_steps(model, objective, batches: list[Mapping[str, torch.Tensor]], *, lr: float = 0.1, seed: int = 0,
                  state: Callable[[object], Mapping[str, torch.Tensor]] | None = None, set_up: bool = True) -> list[Step]:
    """Train ``model`` (in training mode) with ``objective`` over ``batches``, one SGD(``lr``) step each, in the
    trainer's order (setup with ``args.seed = seed`` unless ``set_up`` is False -- the caller set it up, e.g. to
    read its random heads' start --, prepare_batch, embed, loss + chunk_loss, backward, step, on_step_end); the
    objective's trainable parameters are optimised with the model's. ``state(objective)`` names the tensors the
    method carries, recorded after each step."""
    model.train()
    if set_up:
        objective.setup(model, SimpleNamespace(seed=seed))
    objective.train()
    params = [p for p in (*model.parameters(), *objective.parameters()) if p.requires_grad]
    opt = torch.optim.SGD(params, lr=lr)
    steps = []
    for t, batch in enumerate(batches):
        context = LossContext(model=model, global_step=t, seed=seed, batch_size=int(batch["input_ids"].shape[0]),
                              full_batch=batch)
        prepared = dict(objective.prepare_batch(batch, context))
        context.full_batch = prepared
        opt.zero_grad(set_to_none=True)
        torch.manual_seed(dropout_seed(t))
        z = objective.embed(model, prepared, context)
        loss = total_loss(objective.loss(z, prepared, context))[0]
        extra = total_loss(objective.chunk_loss(z, prepared, context))[0]
        if extra is not None:
            loss = loss + extra
        loss.backward()
        opt.step()
        objective.on_step_end(model, context)
        steps.append(Step(float(loss.detach()), _snapshot(model.named_parameters()),
                          _snapshot(state(objective).items()) if state else {}, prepared))
    return steps


class Reference(Protocol):
    """A transcription of an official training step (its state built as the official code builds it)."""

    def parameters(self) -> Iterable[torch.nn.Parameter]:
        """The parameters its optimizer trains."""

    def step_loss(self, step: int, batch: Mapping[str, torch.Tensor]) -> torch.Tensor:
        """The official forward and loss of one batch (with its own updates made inside the forward)."""

    def after_step(self, step: int) -> None:
        """What the official code does after the optimizer step (often nothing)."""

    def weights(self) -> Mapping[str, torch.Tensor]:
        """The trained weights under the project's names."""

    def state(self) -> Mapping[str, torch.Tensor]:
        """The method's state, as the next batch will see it, under the project's state names."""


class ReferenceBase:
    """Defaults of a :class:`Reference`: nothing after the optimizer step, no state beyond the weights."""

    def after_step(self, step: int) -> None:
        """Nothing (the official code does its updates inside the forward or not at all)."""

    def state(self) -> dict:
        """No state besides the trained weights."""
        return {}


def reference_steps(ref: Reference, batches: list[Mapping[str, torch.Tensor]], *, lr: float = 0.1) -> list[Step]:
    """Train ``ref`` over ``batches`` (its own official-rule batches), one SGD(``lr``) step each, the torch seed
    set to :func:`dropout_seed` before each forward; the same records as :func:`project_steps`."""
    opt = torch.optim.SGD([p for p in ref.parameters() if p.requires_grad], lr=lr)
    steps = []
    for t, batch in enumerate(batches):
        opt.zero_grad(set_to_none=True)
        torch.manual_seed(dropout_seed(t))
        loss = ref.step_loss(t, batch)
        loss.backward()
        opt.step()
        ref.after_step(t)
        steps.append(Step(float(loss.detach()), _snapshot(ref.weights().items()), _snapshot(ref.state().items()),
                          dict(batch)))
    return steps


def mismatch(ours: list[Step], theirs: list[Step]) -> dict[str, float]:
    """The largest differences of two runs over all steps: ``loss`` (absolute), ``weights`` and ``state``
    (largest absolute element difference over the tensors both name; inf for tensors of different shapes). Fails when the runs differ in length or
    the reference lacks a weight or state tensor the project records."""
    assert len(ours) == len(theirs), (len(ours), len(theirs))
    out = {"loss": 0.0, "weights": 0.0, "state": 0.0}
    for a, b in zip(ours, theirs):
        out["loss"] = max(out["loss"], abs(a.loss - b.loss))
        for key in ("weights", "state"):
            mine, ref = getattr(a, key), getattr(b, key)
            missing = set(mine) - set(ref)
            assert not missing, f"the reference has no {key} {sorted(missing)[:5]}"
            for name, tensor in mine.items():
                if tensor.shape != ref[name].shape:  # e.g. a queue of another length: no match
                    out[key] = float("inf")
                elif tensor.numel():
                    out[key] = max(out[key], float((tensor - ref[name]).abs().max()))
    return out


# both sides in float64 (a float32 run drifts by ~1e-5 in 4 steps at temperature 0.05, chaos rather than a
# difference); the state allows float32 rounding (ESimCSE's queue is float32)
TOLERANCES = {"loss": 1e-7, "weights": 1e-7, "state": 1e-6}


def assert_steps_match(ours: list[Step], theirs: list[Step], tolerances: Mapping[str, float] | None = None) -> dict:
    """Both runs agree at every step within ``tolerances`` (default :data:`TOLERANCES`); returns the
    :func:`mismatch`. Also asserts the runs actually trained (the weights moved) and the losses are finite."""
    tol = {**TOLERANCES, **(tolerances or {})}
    found = mismatch(ours, theirs)
    assert all(found[k] <= tol[k] for k in found), (found, tol)
    assert all(torch.isfinite(torch.tensor(s.loss)) for s in ours)
    first, last = ours[0].weights, ours[-1].weights
    assert any(not torch.equal(first[k], last[k]) for k in first), "the weights never moved"
    return found


def assert_told_apart(ours: list[Step], theirs: list[Step], what: str = "loss", factor: float = 10.0) -> float:
    """A negative control: the runs differ in ``what`` (``loss``, ``weights`` or ``state``) by more than
    ``factor`` x its tolerance; returns the difference."""
    found = mismatch(ours, theirs)[what]
    assert found > factor * TOLERANCES[what], (what, found)
    return found


# ---------------------------------------------------------------- the family's official BertForCL, shared
class OfficialBertForCL:
    """The SimCSE family's official ``BertForCL`` encoding for ``--pooler_type cls --mlp_only_train`` in training:
    ``cl_forward``'s flattening of the (bs, num_sent, L) views into one ``BertModel`` forward, the [CLS] state,
    then ``MLPLayer`` (Linear + Tanh). Built as ``from_pretrained`` builds it: the ``BertModel`` from the
    checkpoint's ``encoder.*`` weights, the MLP from its ``mlp.dense.*`` (``checkpoint``: a project model's
    state dict before training, the same start on both sides); eager attention, ``dtype`` (float64).
    ``train_mode=False`` (a negative control) encodes without dropout."""

    def __init__(self, config, checkpoint: Mapping[str, torch.Tensor], dtype=torch.float64, train_mode: bool = True):
        import copy

        from torch import nn
        from transformers import BertModel

        config = copy.deepcopy(config)
        config._attn_implementation = "eager"
        self.bert = BertModel(config, add_pooling_layer=False).to(dtype)
        self.bert.load_state_dict({k[len("encoder."):]: v for k, v in checkpoint.items() if k.startswith("encoder.")})
        hidden = config.hidden_size
        self.mlp = nn.Sequential(nn.Linear(hidden, hidden), nn.Tanh()).to(dtype)
        self.mlp[0].load_state_dict({k[len("mlp.dense."):]: v for k, v in checkpoint.items() if k.startswith("mlp.dense.")})
        self.train_mode = train_mode

    def encode(self, batch: Mapping[str, torch.Tensor], view: int | None = None, train: bool | None = None) -> torch.Tensor:
        """(bs, num_sent, H) pooled views (``view``: that view only, (bs, H)), in the HF Trainer's train mode
        (``train=False``: the encoder in eval mode for this call, as an official dropout-free pass)."""
        self.bert.train(self.train_mode if train is None else train)
        ids = batch["input_ids"] if view is None else batch["input_ids"][:, view:view + 1]
        bs, num_sent, length = ids.shape
        sel = (lambda k: batch[k]) if view is None else (lambda k: batch[k][:, view:view + 1])
        out = self.bert(input_ids=ids.reshape(-1, length), attention_mask=sel("attention_mask").reshape(-1, length),
                        token_type_ids=sel("token_type_ids").reshape(-1, length))
        pooled = self.mlp(out.last_hidden_state[:, 0]).view(bs, num_sent, -1)
        return pooled if view is None else pooled[:, 0]

    def parameters(self) -> list:
        """The trained parameters (encoder, then MLP)."""
        return [*self.bert.parameters(), *self.mlp.parameters()]

    def weights(self) -> dict:
        """The trained weights under the project's names."""
        return {**{f"encoder.{k}": p for k, p in self.bert.named_parameters()},
                "mlp.dense.weight": self.mlp[0].weight, "mlp.dense.bias": self.mlp[0].bias}


class LossReference(ReferenceBase):
    """A stateless :class:`Reference`: an :class:`OfficialBertForCL` and an official loss of its pooled views,
    ``loss_fn(pooled (bs, num_sent, H), batch, cl) -> scalar`` (``cl`` for losses that encode again)."""

    def __init__(self, cl: OfficialBertForCL, loss_fn):
        self.cl, self.loss_fn = cl, loss_fn

    def parameters(self):
        return self.cl.parameters()

    def step_loss(self, step, batch):
        return self.loss_fn(self.cl.encode(batch), batch, self.cl)

    def weights(self):
        return self.cl.weights()


def start_model(folder):
    """A float64 training-mode SimCSE model of ``folder`` ([CLS] + a random MLP in training only, spread weights;
    ``conftest.spread_cls_model``) and its state dict before training (the checkpoint both sides start from)."""
    from conftest import spread_cls_model

    model = spread_cls_model(folder).double()
    return model, {k: v.detach().clone() for k, v in model.state_dict().items()}


def sentence_batches(tokenizer, n_batches: int, bs: int, views: int = 1, seed: int = 1) -> list[dict]:
    """``n_batches`` (bs, V, L) batches as ``ContrastiveCollator`` gives them: ``views == 1`` one random sentence
    per row, repeated (unsupervised, V = 2); else ``views`` distinct sentences per row (supervised columns)."""
    from conftest import random_sentences
    from simcse.training.data import ContrastiveCollator

    sents = random_sentences(n_batches * bs * views, seed=seed)
    collate = ContrastiveCollator(pad_token_id=tokenizer.pad_token_id)
    out = []
    for b in range(n_batches):
        rows = []
        for i in range(bs):
            first = (b * bs + i) * views
            enc = [tokenizer(s, truncation=True, max_length=32) for s in sents[first:first + views]]
            rows.append({k: [e[k] for e in enc] for k in enc[0]})
        out.append(collate(rows))
    return out
