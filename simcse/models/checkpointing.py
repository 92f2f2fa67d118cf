"""Activation checkpointing of a :class:`simcse.models.modeling.SimCSEModel`'s encoder, under the names HF
Trainer calls (``--activation_checkpointing true``, and the older ``gradient_checkpointing``)."""
from __future__ import annotations


class ActivationCheckpointing:
    """Mixin of :class:`simcse.models.modeling.SimCSEModel` (it uses ``self.encoder``)."""

    def activation_checkpointing_enable(self, activation_checkpointing_kwargs: dict | None = None,
                                        every_n_layers: int = 1, offload: bool = False) -> None:
        """Recompute the encoder layers' activations in the backward pass (``--gradient_checkpointing true``).

        Called by HF Trainer with the keywords of transformers' ``PreTrainedModel.activation_checkpointing_enable``
        (``every_n_layers``: checkpoint every n-th layer; ``offload``: keep the saved layer inputs in host
        memory; ``activation_checkpointing_kwargs``: passed to ``torch.utils.checkpoint.checkpoint``) and
        handed to the encoder. torch's checkpoint restores the random state before recomputing a layer, so the
        dropout masks (also :mod:`simcse.models.dropout`'s, which draw from the default generator) are replayed
        exactly: the gradients equal those without checkpointing.
        """
        enable = getattr(self.encoder, "activation_checkpointing_enable", None)
        if enable is not None:
            enable(activation_checkpointing_kwargs=activation_checkpointing_kwargs, every_n_layers=every_n_layers,
                   offload=offload)
        else:  # an encoder class of an older transformers
            self.encoder.gradient_checkpointing_enable(gradient_checkpointing_kwargs=activation_checkpointing_kwargs)

    def activation_checkpointing_disable(self) -> None:
        """Undo :meth:`activation_checkpointing_enable`."""
        disable = getattr(self.encoder, "activation_checkpointing_disable", None)
        (disable or self.encoder.gradient_checkpointing_disable)()

    def gradient_checkpointing_enable(self, gradient_checkpointing_kwargs: dict | None = None, **kwargs) -> None:
        """The older name of :meth:`activation_checkpointing_enable` (same keywords)."""
        self.activation_checkpointing_enable(gradient_checkpointing_kwargs, **kwargs)

    def gradient_checkpointing_disable(self) -> None:
        """The older name of :meth:`activation_checkpointing_disable`."""
        self.activation_checkpointing_disable()
