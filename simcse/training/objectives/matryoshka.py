"""Nested embeddings: Matryoshka (Kusupati et al., NeurIPS 2022), AdaptiveLayer and 2D Matryoshka (Li et al.
2024, "2D Matryoshka Sentence Embeddings", 2DMSE) as wrappers over any registered objective.

Names and semantics are sentence-transformers' (``MatryoshkaLoss``, ``AdaptiveLayerLoss``,
``Matryoshka2dLoss``), so a ``--loss_args`` written for them reads the same here:

* ``matryoshka``: ``sum_k matryoshka_weights[k] * inner(normalize(emb[..., :matryoshka_dims[k]]))``, every
  dimension each step, or ``n_dims_per_step`` of them drawn at random.
* ``adaptive_layer``: ``last_layer_weight * inner(last layer)`` plus, for ``n_layers_per_step`` earlier layers
  (drawn from the embedding output and layers 1..n-1), ``prior_layers_weight * layer_weight(l) / n *
  inner(layer l)`` and ``kl_div_weight * kl_temperature * KL(softmax(last / T) || softmax(layer l / T))``
  (batch mean; the last layer detached as the teacher).
* ``2d_matryoshka``: ``adaptive_layer`` over ``matryoshka`` (defaults one layer and one dimension a step).

The earlier layers' embeddings come from one extra encoder pass with ``output_hidden_states``
(:meth:`simcse.models.modeling.SimCSEModel.layer_embeddings`, called from :meth:`AdaptiveLayer.chunk_loss`
on ``context.model``); sentence-transformers reads them from the same pass. So their dropout differs from
the last layer's, and ``--gradient_cache_chunk_size`` is refused for the layer objectives (their in-batch
losses need the whole batch).

Example: ``--loss matryoshka --loss_args '{"loss": "infonce", "loss_args": {"temp": 0.05},
"matryoshka_dims": [384, 256, 128, 64, 32]}'``. The dimensions are recorded in the saved folder
(``simcse_config.json`` ``matryoshka_dims``) by :meth:`Matryoshka.setup`.
"""
from __future__ import annotations

import logging
import math

import torch
import torch.nn.functional as F

from simcse.models.truncation import truncate_embeddings
from simcse.training.objectives import build_objective, register_objective
from simcse.training.objectives.base import INPUT_KEYS, LossContext, Objective, ObjectiveWrapper, total_loss

__all__ = ["Matryoshka", "AdaptiveLayer", "Matryoshka2d"]

logger = logging.getLogger(__name__)
_WRAPPERS = ("matryoshka", "adaptive_layer", "2d_matryoshka")


def _scalar(value) -> torch.Tensor:
    """An objective's result as one scalar (:func:`~simcse.training.objectives.base.total_loss`'s sum)."""
    return total_loss(value)[0]


def _draw(n: int, k: int, context: LossContext | None, salt: int) -> list[int]:
    """``k`` of ``range(n)`` (sorted), drawn from (seed, step, salt) and the same on every rank
    (:meth:`LossContext.shared_seed`: the processes train the same dimensions and layers); all of them when
    k <= 0 or k >= n."""
    if k <= 0 or k >= n:
        return list(range(n))
    g = torch.Generator().manual_seed(0 if context is None else context.shared_seed(salt))
    return sorted(torch.randperm(n, generator=g)[:k].tolist())


def _inner(name: str, loss, loss_args) -> Objective:
    """The wrapped objective: ``loss`` itself (an Objective) or the registered objective ``loss`` built with
    ``loss_args``.

    Raises:
        ValueError: ``loss`` is not a name, names a wrapper, or is unknown (as :func:`build_objective`).
    """
    if isinstance(loss, Objective):
        return loss
    if not isinstance(loss, str) or not loss:
        raise ValueError(f"--loss_args loss for --loss {name} must name an objective, got {loss!r}")
    if loss in _WRAPPERS:
        raise ValueError(f"--loss_args loss for --loss {name} cannot be another wrapper ({loss!r}); "
                         "use 2d_matryoshka for layers x dimensions")
    return build_objective(loss, loss_args)


@register_objective
class Matryoshka(ObjectiveWrapper):
    """The Matryoshka wrapper (see the module).

    Args:
        loss: the inner objective's registered name (or an :class:`Objective`).
        loss_args: its ``--loss_args`` (a dict or JSON string).
        matryoshka_dims: the prefix sizes (positive ints, each <= the hidden size; sorted high to low).
        matryoshka_weights: one weight per dimension (default all 1).
        n_dims_per_step: how many dimensions a step trains (-1: all).

    Raises:
        ValueError: no dimensions, a dimension < 1 or listed twice, weights of another length, a wrapper as the
            inner loss, an inner objective that cannot run on prefixes or more than once a step
            (:attr:`~simcse.training.objectives.base.Objective.prefix_embeddings`, ``repeatable_loss``), or (at
            setup) a dimension above the model's hidden size (each message names the key).
    """

    name = "matryoshka"
    requires = ("uses_embeddings", "prefix_embeddings", "repeatable_loss")  # loss runs once per dimension, on a prefix

    def __init__(self, loss: str = "infonce", loss_args=None, matryoshka_dims=None, matryoshka_weights=None,
                 n_dims_per_step: int = -1):
        ObjectiveWrapper.__init__(self, _inner(self.name, loss, loss_args))
        dims = list(matryoshka_dims or [])
        if not dims or any(isinstance(d, bool) or not isinstance(d, int) or d < 1 for d in dims):
            raise ValueError(f"--loss_args matryoshka_dims for --loss {self.name} must be a non-empty list of "
                             f"positive integers, got {matryoshka_dims!r}")
        twice = sorted({d for d in dims if dims.count(d) > 1})
        if twice:
            raise ValueError(f"--loss_args matryoshka_dims for --loss {self.name} lists {twice} more than once (each "
                             f"dimension is one loss term): give each dimension once, with its weight in "
                             f"matryoshka_weights")
        weights = [1.0] * len(dims) if matryoshka_weights is None else list(matryoshka_weights)
        if len(weights) != len(dims):
            raise ValueError(f"--loss_args matryoshka_weights for --loss {self.name} needs one weight per "
                             f"dimension ({len(dims)}), got {len(weights)}")
        if not isinstance(n_dims_per_step, int) or n_dims_per_step == 0:
            raise ValueError(f"--loss_args n_dims_per_step for --loss {self.name} must be -1 or a positive "
                             f"integer, got {n_dims_per_step!r}")
        pairs = sorted(zip(dims, (float(w) for w in weights)), key=lambda p: -p[0])
        self.matryoshka_dims = [d for d, _ in pairs]
        self.matryoshka_weights = [w for _, w in pairs]
        self.n_dims_per_step = n_dims_per_step

    def setup(self, model, args) -> None:
        """Check the dimensions against the model's hidden size and record them on the model (saved into
        ``simcse_config.json``), then set up the inner objective."""
        hidden = int(model.hidden_size)
        big = [d for d in self.matryoshka_dims if d > hidden]
        if big:
            raise ValueError(f"--loss_args matryoshka_dims {big} for --loss {self.name} exceed the model's "
                             f"hidden size {hidden}")
        if hidden not in self.matryoshka_dims:
            logger.warning("matryoshka_dims %s leave out the model's full size %d: the full embedding is not trained",
                           self.matryoshka_dims, hidden)
        model.matryoshka_dims = list(self.matryoshka_dims)
        super().setup(model, args)

    def loss(self, embeddings: torch.Tensor, batch, context: LossContext | None = None) -> dict[str, torch.Tensor]:
        """embeddings (B, V, H) -> ``{"dim<d>": weight * inner loss at d}`` for this step's dimensions."""
        out = {}
        for k in _draw(len(self.matryoshka_dims), self.n_dims_per_step, context, salt=1):
            d, w = self.matryoshka_dims[k], self.matryoshka_weights[k]
            if d > embeddings.shape[-1]:
                raise ValueError(f"--loss_args matryoshka_dims {d} exceeds the embedding size {embeddings.shape[-1]}")
            small = truncate_embeddings(embeddings, d, normalize=True)
            out[f"dim{d}"] = w * _scalar(self.inner.loss(small, batch, context))
        return out

    def get_config_dict(self) -> dict:
        return {"loss": self.inner.name, "loss_args": self.inner.recorded_loss_args(),
                "matryoshka_dims": self.matryoshka_dims, "matryoshka_weights": self.matryoshka_weights,
                "n_dims_per_step": self.n_dims_per_step}


_LAYER_WEIGHTING = {"uniform": lambda i: 1.0, "log": lambda i: 1.0 / (1.0 + math.log(1 + i)),
                    "linear": lambda i: 1.0 / (1 + i)}


@register_objective
class AdaptiveLayer(ObjectiveWrapper):
    """The AdaptiveLayer wrapper (see the module; sentence-transformers' ``AdaptiveLayerLoss`` arguments).

    Args:
        loss, loss_args: the inner objective, as for :class:`Matryoshka`.
        n_layers_per_step: earlier layers trained a step (-1 or >= the count: all).
        last_layer_weight, prior_layers_weight, kl_div_weight: the weights (>= 0).
        kl_temperature: T of the KL term (0 turns it off).
        layer_weighting: "uniform", "log" (1 / (1 + ln(1 + l))) or "linear" (1 / (1 + l)).

    Raises:
        ValueError: a negative weight or temperature, ``n_layers_per_step`` 0, an unknown ``layer_weighting``.
    """

    name = "adaptive_layer"
    requires = ("uses_embeddings", "repeatable_loss")  # loss runs once for the last layer and once per earlier layer

    def __init__(self, loss: str = "infonce", loss_args=None, n_layers_per_step: int = 1,
                 last_layer_weight: float = 1.0, prior_layers_weight: float = 1.0, kl_div_weight: float = 1.0,
                 kl_temperature: float = 0.3, layer_weighting: str = "uniform"):
        ObjectiveWrapper.__init__(self, _inner(self.name, loss, loss_args))
        self._layer_options(n_layers_per_step, last_layer_weight, prior_layers_weight, kl_div_weight,
                            kl_temperature, layer_weighting)

    def _layer_options(self, n_layers_per_step, last_layer_weight, prior_layers_weight, kl_div_weight,
                       kl_temperature, layer_weighting) -> None:
        for key, value in (("last_layer_weight", last_layer_weight), ("prior_layers_weight", prior_layers_weight),
                           ("kl_div_weight", kl_div_weight), ("kl_temperature", kl_temperature)):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
                raise ValueError(f"--loss_args {key} for --loss {self.name} must be a non-negative number, got {value!r}")
        if not isinstance(n_layers_per_step, int) or n_layers_per_step == 0:
            raise ValueError(f"--loss_args n_layers_per_step for --loss {self.name} must be -1 or a positive "
                             f"integer, got {n_layers_per_step!r}")
        if layer_weighting not in _LAYER_WEIGHTING:
            raise ValueError(f"--loss_args layer_weighting for --loss {self.name} must be one of "
                             f"{sorted(_LAYER_WEIGHTING)}, got {layer_weighting!r}")
        self.n_layers_per_step = n_layers_per_step
        self.last_layer_weight = float(last_layer_weight)
        self.prior_layers_weight = float(prior_layers_weight)
        self.kl_div_weight = float(kl_div_weight)
        self.kl_temperature = float(kl_temperature)
        self.layer_weighting = layer_weighting
        self.supports_grad_cache = False  # the earlier layers' in-batch losses need the whole batch

    def setup(self, model, args) -> None:
        if not hasattr(model, "layer_embeddings"):
            raise ValueError(f"--loss {self.name} needs a model with per-layer embeddings (a SimCSEModel), "
                             f"got {type(model).__name__}")
        super().setup(model, args)

    def loss(self, embeddings: torch.Tensor, batch, context: LossContext | None = None) -> dict[str, torch.Tensor]:
        """The last layer's term: ``{"last_layer": last_layer_weight * inner(embeddings)}``."""
        return {"last_layer": self.last_layer_weight * _scalar(self.inner.loss(embeddings, batch, context))}

    def chunk_loss(self, embeddings: torch.Tensor, batch, context: LossContext) -> dict[str, torch.Tensor]:
        """The earlier layers' terms (see the module): one extra pass of ``context.model`` over ``batch``'s
        (B, V, L) inputs; ``embeddings`` (B, V, H), the last layer's, are the KL teacher (detached)."""
        model = context.model
        n_layers = model.num_hidden_layers  # hidden states 0..n_layers; the earlier ones are 0..n_layers-1
        layers = _draw(n_layers, self.n_layers_per_step, context, salt=2)
        b, v = embeddings.shape[:2]
        inputs = {k: batch[k].reshape(b * v, -1) for k in INPUT_KEYS if k in batch}
        per_layer = model.layer_embeddings(layers=layers, **inputs).reshape(b, v, len(layers), -1)
        inner_total, inner_parts = total_loss(self.inner.chunk_loss(embeddings, batch, context))  # e.g. MLM
        out = inner_parts or ({"inner": inner_total} if inner_total is not None else {})
        out["prior_layers"] = embeddings.new_zeros((), dtype=torch.float32)
        if self.kl_temperature > 0:
            out["kl"] = embeddings.new_zeros((), dtype=torch.float32)
            teacher = F.softmax(embeddings.float().reshape(b * v, -1) / self.kl_temperature, dim=-1).detach()
        for j, layer in enumerate(layers):
            emb = per_layer[:, :, j]
            w = _LAYER_WEIGHTING[self.layer_weighting](layer) / len(layers) * self.prior_layers_weight
            out["prior_layers"] = out["prior_layers"] + w * _scalar(self.inner.loss(emb, batch, context))
            if self.kl_temperature > 0:
                student = F.log_softmax(emb.float().reshape(b * v, -1) / self.kl_temperature, dim=-1)
                kl = F.kl_div(student, teacher, reduction="batchmean")
                out["kl"] = out["kl"] + kl * self.kl_temperature * self.kl_div_weight
        return out

    def get_config_dict(self) -> dict:
        return {"loss": self.inner.name, "loss_args": self.inner.recorded_loss_args(),
                "n_layers_per_step": self.n_layers_per_step, "last_layer_weight": self.last_layer_weight,
                "prior_layers_weight": self.prior_layers_weight, "kl_div_weight": self.kl_div_weight,
                "kl_temperature": self.kl_temperature, "layer_weighting": self.layer_weighting}


@register_objective
class Matryoshka2d(AdaptiveLayer):
    """2D Matryoshka (2DMSE): :class:`AdaptiveLayer` over :class:`Matryoshka` (sentence-transformers'
    ``Matryoshka2dLoss``: its arguments and defaults, one layer and one dimension a step)."""

    name = "2d_matryoshka"

    def __init__(self, loss: str = "infonce", loss_args=None, matryoshka_dims=None, matryoshka_weights=None,
                 n_layers_per_step: int = 1, n_dims_per_step: int = 1, last_layer_weight: float = 1.0,
                 prior_layers_weight: float = 1.0, kl_div_weight: float = 1.0, kl_temperature: float = 0.3,
                 layer_weighting: str = "uniform"):
        ObjectiveWrapper.__init__(self, Matryoshka(loss, loss_args, matryoshka_dims, matryoshka_weights,
                                                   n_dims_per_step))
        self._layer_options(n_layers_per_step, last_layer_weight, prior_layers_weight, kl_div_weight,
                            kl_temperature, layer_weighting)

    def get_config_dict(self) -> dict:
        inner = self.inner.recorded_loss_args()
        return {**super().get_config_dict(), **inner}
