"""DualEncoderModel: two independent encoders, one per view (paper Table 2, ablation "(f_theta1, f_theta2)")."""
from __future__ import annotations

import copy
import os
from pathlib import Path

import numpy as np
import torch
from torch import nn

from simcse.models.modeling import SimCSEModel

SECOND_ENCODER_DIR = "second_encoder"


class DualEncoderModel(nn.Module):
    """Two independent encoders, one per view (paper Table 2, column "(f_theta1, f_theta2)").

    ``first`` encodes view 0 (the queries), ``second`` -- a deep copy of ``first`` at construction, so both
    start from the same pre-trained weights and then train separately -- encodes views 1.. (positives and hard
    negatives). ``encode``, evaluation and saving use ``first``.

    ``forward(input_ids, attention_mask, ...)``: (B, V, L) tensors -> (B, V, H) embeddings (view 0 by
    ``first``, the rest by ``second``); (N, L) tensors -> (N, H) by ``first``. The trainer recognises the
    class by ``takes_views = True`` and hands it the unflattened (B, V, L) batch.

    Saved layout: ``first`` is saved exactly as a :class:`SimCSEModel` in the folder (so the folder loads and
    evaluates as one model) and ``second`` as another complete SimCSEModel folder in
    ``<folder>/second_encoder/``.
    """

    takes_views = True

    def __init__(self, first: SimCSEModel, second: SimCSEModel | None = None):
        super().__init__()
        self.first = first
        self.second = second if second is not None else copy.deepcopy(first)

    @property
    def tokenizer(self):
        return self.first.tokenizer

    @property
    def pooler_type(self) -> str:
        return self.first.pooler_type

    @property
    def hidden_size(self) -> int:
        return self.first.hidden_size

    @property
    def device(self) -> torch.device:
        return self.first.device

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, **encoder_kwargs) -> torch.Tensor:
        if input_ids.dim() == 2:
            return self.first(input_ids=input_ids, attention_mask=attention_mask, **encoder_kwargs)
        if input_ids.dim() != 3 or input_ids.shape[1] < 2:
            raise ValueError(f"DualEncoderModel needs (B, V >= 2, L) or (N, L) inputs, got {tuple(input_ids.shape)}")
        batch, views, length = input_ids.shape
        kw = {"input_ids": input_ids, "attention_mask": attention_mask, **encoder_kwargs}
        z0 = self.first(**{k: v[:, 0] for k, v in kw.items()})  # (B, H)
        rest = self.second(**{k: v[:, 1:].reshape(batch * (views - 1), length) for k, v in kw.items()})
        return torch.cat([z0.unsqueeze(1), rest.view(batch, views - 1, -1)], dim=1)  # (B, V, H)

    def encode(self, sentences, **kwargs) -> np.ndarray:
        """:meth:`SimCSEModel.encode` of the first encoder."""
        return self.first.encode(sentences, **kwargs)

    def activation_checkpointing_enable(self, activation_checkpointing_kwargs: dict | None = None,
                                        every_n_layers: int = 1, offload: bool = False) -> None:
        """:meth:`SimCSEModel.activation_checkpointing_enable` on both encoders."""
        for m in (self.first, self.second):
            m.activation_checkpointing_enable(activation_checkpointing_kwargs, every_n_layers=every_n_layers,
                                              offload=offload)

    def activation_checkpointing_disable(self) -> None:
        for m in (self.first, self.second):
            m.activation_checkpointing_disable()

    def gradient_checkpointing_enable(self, gradient_checkpointing_kwargs: dict | None = None, **kwargs) -> None:
        """The older name of :meth:`activation_checkpointing_enable`."""
        self.activation_checkpointing_enable(gradient_checkpointing_kwargs, **kwargs)

    def gradient_checkpointing_disable(self) -> None:
        self.activation_checkpointing_disable()

    def save_pretrained(self, save_directory: str | os.PathLike, state_dict: dict | None = None,
                        is_main_process: bool = True) -> None:
        """Save ``first`` into ``save_directory`` and ``second`` into ``save_directory/second_encoder``."""
        self.first.save_pretrained(save_directory, is_main_process=is_main_process)
        self.second.save_pretrained(Path(save_directory) / SECOND_ENCODER_DIR, is_main_process=is_main_process)

    def load_weights(self, path: str | os.PathLike) -> None:
        """Load both encoders from a folder written by :meth:`save_pretrained`."""
        second = Path(path) / SECOND_ENCODER_DIR
        if not second.is_dir():
            raise FileNotFoundError(f"{second} is missing: {path} was not saved by a DualEncoderModel")
        self.first.load_weights(path)
        self.second.load_weights(second)
