"""What a :class:`simcse.SimCSEModel` does after pooling: the ``cls`` MLP, a dense head, unit length, a default size.

sentence-transformers folders may follow their Pooling with ``Dense`` modules and a ``Normalize`` module, and record
a ``truncate_dim`` (:mod:`simcse.models.st_files` reads them). A model keeps them as

* ``dense_head``: :class:`simcse.models.dense.DenseLayer` s applied in :meth:`AfterPooling._after_pooling` (so in
  ``forward``, ``encode``, training and the ONNX graph), set by :meth:`AfterPooling.set_dense_head`;
* ``pipeline_normalize``: unit vectors (applied by ``encode`` and in the ONNX graph);
* ``truncate_dim``: the size ``encode`` returns by default.

A save records them in ``simcse_config.json`` (:func:`pipeline_config`; the dense head's weights in
:data:`simcse.models.dense.DENSE_WEIGHTS_NAME`) and a load applies them again (:func:`apply_recorded_pipeline`), so
a save + load gives the same vectors; :func:`simcse.models.st_files.write_sentence_transformers_files` writes them
back as sentence-transformers modules.
"""
from __future__ import annotations

from pathlib import Path

import torch
from torch import nn

from simcse.models.dense import DENSE_WEIGHTS_NAME, check_dense_chain, dense_state, layers_from_saved


class AfterPooling:
    """The sizes and the dense head of :class:`simcse.SimCSEModel` (a mixin: it relies on the model's ``encoder``,
    ``pooler``, ``mlp``, ``mlp_only_train``, ``dense_head`` and ``device``)."""

    @property
    def hidden_size(self) -> int:
        """The size D of the vectors ``forward`` and ``encode`` return: the last dense layer's ``out_features``
        when the model has a dense head, else :attr:`pooled_size`."""
        return self.dense_head[-1].out_features if len(self.dense_head) else self.pooled_size

    @property
    def pooled_size(self) -> int:
        """The size of the pooled vector (after the ``cls`` MLP, before any dense head): the encoder's hidden size
        H times the pooler's width (k for a concatenation of k poolers, ``"avg+max"``)."""
        return self.encoder.config.hidden_size * self.pooler.width

    def set_dense_head(self, layers) -> None:
        """Apply ``layers`` (:class:`simcse.models.dense.DenseLayer`, sentence-transformers' ``Dense``) in order
        after pooling (and the ``cls`` MLP), in ``forward``, ``encode`` and training; an empty list removes the
        head. The layers move to the model's device and the encoder's dtype; a save keeps them.

        Raises:
            ValueError: a layer whose ``in_features`` is not the size the one before gives (the first: the pooled
                size, :attr:`pooled_size`), one line.
        """
        layers = list(layers)
        check_dense_chain(layers, self.pooled_size, f"pooler {self.pooler_type!r}")
        dtype = next(self.encoder.parameters()).dtype
        self.dense_head = nn.ModuleList(layers).to(device=self.device, dtype=dtype)

    def _after_pooling(self, pooled: torch.Tensor) -> torch.Tensor:
        """The ``cls`` MLP (in training, or at inference without ``mlp_only_train``), then the dense head:
        (N, pooled_size) -> (N, hidden_size), the input's dtype."""
        if self.mlp is not None and (self.training or not self.mlp_only_train):
            pooled = self.mlp(pooled)
        for layer in self.dense_head:
            pooled = layer(pooled)
        return pooled


def pipeline_config(model) -> dict:
    """The keys of ``simcse_config.json`` for what ``model`` does after pooling, each only when it applies:
    ``dense`` (one :meth:`DenseLayer.config <simcse.models.dense.DenseLayer.config>` per layer), ``normalize``
    (true), ``truncate_dim``."""
    cfg = {}
    if len(getattr(model, "dense_head", ())):
        cfg["dense"] = [layer.config() for layer in model.dense_head]
    if getattr(model, "pipeline_normalize", False):
        cfg["normalize"] = True
    if getattr(model, "truncate_dim", None):
        cfg["truncate_dim"] = int(model.truncate_dim)
    return cfg


def write_dense_weights(model, folder: Path) -> None:
    """Write the dense head's weights (:data:`DENSE_WEIGHTS_NAME`) into ``folder`` when ``model`` has one."""
    if len(getattr(model, "dense_head", ())):
        from safetensors.torch import save_file

        save_file(dense_state(model.dense_head), str(Path(folder) / DENSE_WEIGHTS_NAME))


def apply_recorded_pipeline(model, cfg: dict, weights: Path | None, where: str) -> None:
    """Give ``model`` what ``simcse_config.json`` (``cfg``, parsed) records after pooling (:func:`pipeline_config`):
    the dense head with the weights of file ``weights`` (:data:`DENSE_WEIGHTS_NAME`, None when absent), unit
    length and ``truncate_dim``. ``where`` names the config in the errors.

    Raises:
        FileNotFoundError: ``dense`` recorded without its weight file. ValueError: a dense config simcse does not
            apply or weights that do not fit it (:func:`simcse.models.dense.layers_from_saved`), a chain of sizes
            that does not fit the pooler, a ``truncate_dim`` above the embedding size (one line each).
    """
    from simcse.models.truncation import check_truncate_dim

    if cfg.get("dense"):
        if weights is None or not Path(weights).is_file():
            raise FileNotFoundError(f"{where} records a dense head but {DENSE_WEIGHTS_NAME} is missing; save the model "
                                    "again")
        from safetensors.torch import load_file

        model.set_dense_head(layers_from_saved(cfg["dense"], load_file(str(weights)), where))
    model.pipeline_normalize = bool(cfg.get("normalize", False))
    model.truncate_dim = check_truncate_dim(cfg.get("truncate_dim"), model.hidden_size, f"{where}: truncate_dim")


def load_dense_weights(model, folder: Path) -> None:
    """Load the dense head's weights saved in ``folder`` (a training checkpoint) into ``model``, in place; nothing
    for a model without a dense head.

    Raises:
        FileNotFoundError: the model has a dense head and ``folder`` no :data:`DENSE_WEIGHTS_NAME`.
    """
    if not len(getattr(model, "dense_head", ())):
        return
    f = Path(folder) / DENSE_WEIGHTS_NAME
    if not f.is_file():
        raise FileNotFoundError(f"{f} is missing: the checkpoint has no weights for the dense head")
    from safetensors.torch import load_file

    state = load_file(str(f))
    for i, layer in enumerate(model.dense_head):
        layer.load_state_dict({k: state[f"{i}.{k}"].to(v.dtype) for k, v in layer.state_dict().items()})
