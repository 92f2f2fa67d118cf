"""Linear layers after pooling: sentence-transformers' ``Dense`` module, read, applied and written alike.

A sentence-transformers folder may follow its ``Pooling`` with one or more ``Dense`` modules
(``sentence_transformers.models.Dense``, ``base/modules/dense.py`` in 6.x): ``activation(linear(x))`` on the pooled
vector, often changing its size (LaBSE, distiluse, sentence-T5). Each is a folder ``k_Dense/`` with a
``config.json`` (``in_features``, ``out_features``, ``bias``, ``activation_function``: the activation class's
full name, e.g. ``torch.nn.modules.activation.Tanh``) and its weights (``model.safetensors``, or
``pytorch_model.bin`` in older saves; keys ``linear.weight`` (out, in) and ``linear.bias`` (out,)).

:class:`DenseLayer` is that module; :func:`check_dense_config` reads its config (refusing in one line what simcse
does not apply), :func:`read_dense_weights` its weights. :class:`simcse.SimCSEModel` holds such layers as its
``dense_head`` (:meth:`simcse.SimCSEModel.set_dense_head`), saves them in ``simcse_config.json`` (``dense``) and
:data:`DENSE_WEIGHTS_NAME`, and writes them back as sentence-transformers modules (:mod:`simcse.models.st_files`).
"""
from __future__ import annotations

import json
from pathlib import Path

import torch
from torch import nn

#: the weights of a model's dense head in a saved folder: keys ``{i}.linear.weight`` / ``{i}.linear.bias``
DENSE_WEIGHTS_NAME = "simcse_dense.safetensors"

#: the activation functions a Dense module may name (by class name, under ``torch.nn``): element-wise, no arguments
ACTIVATIONS = {"Tanh": nn.Tanh, "Identity": nn.Identity, "ReLU": nn.ReLU, "GELU": nn.GELU, "Sigmoid": nn.Sigmoid,
               "SiLU": nn.SiLU}
#: the full name sentence-transformers writes for each (``sentence_transformers.util.fullname``)
_FULL_NAMES = {"Identity": "torch.nn.modules.linear.Identity",
               **{k: f"torch.nn.modules.activation.{k}" for k in ACTIVATIONS if k != "Identity"}}
_ST_DEFAULT_INPUT = "sentence_embedding"


def activation_name(name) -> str | None:
    """The class name (``"Tanh"``) of an activation a Dense config names (``"torch.nn.modules.activation.Tanh"``,
    ``"torch.nn.Tanh"``), or None when it is not one of :data:`ACTIVATIONS`."""
    if not isinstance(name, str) or not name.startswith("torch.nn."):
        return None
    short = name.rsplit(".", 1)[-1]
    return short if short in ACTIVATIONS else None


class DenseLayer(nn.Module):
    """``activation(linear(x))``: sentence-transformers' ``models.Dense`` (without its residual option).

    Args:
        in_features, out_features: the sizes (positive ints).
        bias: whether ``linear`` has a bias.
        activation: a class name of :data:`ACTIVATIONS` (``"Tanh"``, ``"Identity"``...).

    Input (N, in_features) float, output (N, out_features) of the same dtype. Its state dict holds
    ``linear.weight`` (out, in) and ``linear.bias`` (out,): sentence-transformers' keys.

    Raises:
        ValueError: an activation that is not one of :data:`ACTIVATIONS`.
    """

    def __init__(self, in_features: int, out_features: int, bias: bool = True, activation: str = "Tanh"):
        super().__init__()
        if activation not in ACTIVATIONS:
            raise ValueError(f"unknown Dense activation {activation!r}; expected one of {sorted(ACTIVATIONS)}")
        self.linear = nn.Linear(int(in_features), int(out_features), bias=bool(bias))
        self.activation = activation
        self.activation_function = ACTIVATIONS[activation]()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.activation_function(self.linear(x))

    @property
    def in_features(self) -> int:
        return self.linear.in_features

    @property
    def out_features(self) -> int:
        return self.linear.out_features

    def config(self) -> dict:
        """The ``config.json`` sentence-transformers' ``Dense`` reads (and ``simcse_config.json``'s ``dense`` rows)."""
        return {"in_features": self.in_features, "out_features": self.out_features,
                "bias": self.linear.bias is not None, "activation_function": _FULL_NAMES[self.activation]}

    @classmethod
    def from_config(cls, cfg: dict) -> "DenseLayer":
        """A layer (random weights) of a config checked by :func:`check_dense_config`."""
        return cls(cfg["in_features"], cfg["out_features"], cfg["bias"], activation_name(cfg["activation_function"]))


def check_dense_config(cfg, where: str) -> dict:
    """A Dense module's ``config.json`` (parsed), checked and completed with sentence-transformers' defaults
    (``bias`` true, ``activation_function`` Tanh): ``{"in_features", "out_features", "bias",
    "activation_function"}``.

    Args:
        cfg: the parsed config.
        where: the file (or module) named in the errors.

    Raises:
        ValueError: one line naming ``where``: not an object; sizes that are not positive ints; an activation
            function other than :data:`ACTIVATIONS`; ``use_residual`` true; a ``module_input_name`` /
            ``module_output_name`` other than ``sentence_embedding`` (a Dense over token embeddings).
    """
    if not isinstance(cfg, dict):
        raise ValueError(f"{where} is not a JSON object; expected the Dense config sentence-transformers writes")
    sizes = {k: cfg.get(k) for k in ("in_features", "out_features")}
    bad = [k for k, v in sizes.items() if isinstance(v, bool) or not isinstance(v, int) or v < 1]
    if bad:
        raise ValueError(f"{where}: {bad[0]} must be a positive integer, got {sizes[bad[0]]!r}")
    act = cfg.get("activation_function", _FULL_NAMES["Tanh"])
    if activation_name(act) is None:
        raise ValueError(f"{where}: activation_function {act!r} is not applied by simcse, which reads "
                         f"{', '.join(f'torch.nn.{k}' for k in ACTIVATIONS)}; load this model with "
                         "sentence_transformers.SentenceTransformer")
    if cfg.get("use_residual"):
        raise ValueError(f"{where}: use_residual true (a residual connection around the Dense layer) is not applied "
                         "by simcse; load this model with sentence_transformers.SentenceTransformer")
    for key in ("module_input_name", "module_output_name"):
        if cfg.get(key, _ST_DEFAULT_INPUT) != _ST_DEFAULT_INPUT:
            raise ValueError(f"{where}: {key} {cfg[key]!r} (a Dense layer not on the sentence embedding) is not "
                             "applied by simcse; load this model with sentence_transformers.SentenceTransformer")
    bias = cfg.get("bias", True)
    if not isinstance(bias, bool):
        raise ValueError(f"{where}: bias must be true or false, got {bias!r}")
    return {**sizes, "bias": bias, "activation_function": act}


def read_dense_weights(folder: str | Path) -> dict[str, torch.Tensor]:
    """The ``linear.weight`` / ``linear.bias`` tensors of a sentence-transformers Dense module folder, from its
    ``model.safetensors``, else its ``pytorch_model.bin`` (read with ``torch.load(weights_only=True)``), as
    sentence-transformers' ``Module.load_torch_weights`` reads them.

    Raises:
        FileNotFoundError: neither file is there (one line naming the folder).
    """
    folder = Path(folder)
    if (folder / "model.safetensors").is_file():
        from safetensors.torch import load_file

        return load_file(str(folder / "model.safetensors"))
    if (folder / "pytorch_model.bin").is_file():
        return torch.load(str(folder / "pytorch_model.bin"), map_location="cpu", weights_only=True)
    raise FileNotFoundError(f"the Dense module {str(folder)!r} has no weights: expected model.safetensors or "
                            "pytorch_model.bin")


def load_dense_layer(cfg: dict, state: dict[str, torch.Tensor], where: str) -> DenseLayer:
    """A :class:`DenseLayer` of config ``cfg`` (:func:`check_dense_config`) holding ``state``'s weights.

    Raises:
        ValueError: ``state`` lacks a weight or has one of another shape (one line naming ``where``).
    """
    layer = DenseLayer.from_config(cfg)
    want = {k: tuple(v.shape) for k, v in layer.state_dict().items()}
    have = {k: tuple(state[k].shape) for k in want if k in state}
    if have != want:
        raise ValueError(f"{where}: the weights {have} do not match the config's {want}")
    layer.load_state_dict({k: state[k] for k in want})
    return layer


def check_dense_chain(layers, width: int, what: str) -> None:
    """ValueError (one line) unless each layer of ``layers`` takes the size the one before gives, the first
    ``width`` (the pooled size that ``what`` names)."""
    for i, layer in enumerate(layers):
        if layer.in_features != width:
            raise ValueError(f"Dense layer {i} takes {layer.in_features} features but {what} gives {width}"
                             f"{'' if i == 0 else ' (the layer before it)'}; expected in_features {width}")
        width = layer.out_features


def dense_state(layers) -> dict[str, torch.Tensor]:
    """The tensors of :data:`DENSE_WEIGHTS_NAME`: ``{i}.linear.weight`` / ``{i}.linear.bias`` of each layer, on
    the CPU, contiguous, in their own dtype."""
    return {f"{i}.{k}": v.detach().contiguous().cpu() for i, layer in enumerate(layers)
            for k, v in layer.state_dict().items()}


def layers_from_saved(configs, state: dict[str, torch.Tensor], where: str) -> list[DenseLayer]:
    """The layers recorded by ``simcse_config.json``'s ``dense`` (``configs``) with the weights of
    :data:`DENSE_WEIGHTS_NAME` (``state``); ``where`` names the folder in the errors.

    Raises:
        ValueError: a config simcse does not apply, or missing / mis-shaped weights (one line).
    """
    layers = []
    for i, cfg in enumerate(configs):
        cfg = check_dense_config(cfg, f"{where}: dense[{i}]")
        prefix = f"{i}."
        layers.append(load_dense_layer(cfg, {k[len(prefix):]: v for k, v in state.items() if k.startswith(prefix)},
                                       f"{where}: dense[{i}]"))
    return layers


def write_dense_module(layer: DenseLayer, folder: Path) -> None:
    """Write ``layer`` as a sentence-transformers Dense module folder (``config.json``, ``model.safetensors`` in
    float32), which ``SentenceTransformer`` loads."""
    from safetensors.torch import save_file

    folder.mkdir(exist_ok=True)
    (folder / "config.json").write_text(json.dumps(layer.config(), indent=2) + "\n")
    save_file({k: v.detach().float().contiguous().cpu() for k, v in layer.state_dict().items()},
              str(folder / "model.safetensors"))
