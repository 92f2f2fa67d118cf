"""The training-speed switches of :class:`simcse.models.modeling.SimCSEModel` (a mixin): the padding-free
forward, CPU dropout masks and the reused word-embedding gradient. None changes what is computed beyond float
rounding and the dropout random stream (docs/performance.md).
"""
from __future__ import annotations

import logging

import torch
from torch import nn

from simcse.models.decoder import is_bidirectional, is_decoder_config
from simcse.models.dropout import CPUDropout
from simcse.models.unpadded import UNPADDED_ATTENTION, encode_unpadded, register_unpadded_attention

logger = logging.getLogger("simcse.models.modeling")  # the switches' messages keep the model's logger name


class SpeedSwitches:
    """Mixin of :class:`SimCSEModel`: needs ``self.encoder``, ``self.pooler``, ``self.unpadded`` and the model's
    forward (the padding-free check compares it with the encoder's padded forward)."""

    # ------------------------------------------------------------------------------ padding-free forward
    def _encode_unpadded(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, **encoder_kwargs):
        """:func:`simcse.models.unpadded.encode_unpadded` of this model's encoder -> ((N, L, H), hidden states or None)."""
        return encode_unpadded(self.encoder, input_ids, attention_mask, self.pooler.needs_hidden_states, **encoder_kwargs)

    def set_unpadded(self, enabled: bool = True) -> bool:
        """Turn the padding-free ("unpadded") encoder forward on or off; returns whether it is on.

        On, :meth:`forward` drops the padding tokens of the batch before the encoder, so embeddings, linear
        layers, LayerNorm and dropout cost the real tokens only (the share of real tokens and the timings are in
        docs/performance.md); attention runs per sentence. Outputs equal the padded forward up to float
        rounding (dropout draws its masks over the real tokens only: same distribution, different stream).
        Turning it on checks that on a small batch, in eval mode; an encoder that does not route attention
        through transformers' attention-function registry (or numbers positions differently) fails the check,
        and then a warning is logged and the padded forward is kept (returns False); a causal decoder keeps it too.
        """
        config = self.encoder.config
        if not enabled:
            if self.unpadded:
                config._attn_implementation = self._padded_attn_implementation
            self.unpadded = False
            return False
        if self.unpadded:
            return True
        if is_decoder_config(config) and not is_bidirectional(config):  # the per-sentence attention is bidirectional
            logger.info("padding-free forward: not used with causal attention (the padded forward runs)")
            return False
        register_unpadded_attention()
        self._padded_attn_implementation = config._attn_implementation
        config._attn_implementation = UNPADDED_ATTENTION
        self.unpadded = True
        problem = self._check_unpadded()
        if problem is not None:
            self.set_unpadded(False)
            logger.warning("padding-free forward is off for this %s encoder: %s", type(self.encoder).__name__, problem)
        return self.unpadded

    def set_cpu_dropout(self, enabled: bool = True) -> int:
        """Swap every ``nn.Dropout`` module of this model to :class:`CPUDropout` (``enabled``) or back.

        Training-mode dropout on CPU then draws its masks from half a 32-bit random output per element (:func:`keep_mask`);
        the attention-probability dropout of the padding-free forward follows the same switch. Same dropout
        law (p rounded to 1/65536), different random stream; eval mode and non-CPU devices are unaffected.
        Returns the number of modules switched.
        """
        src, dst = (nn.Dropout, CPUDropout) if enabled else (CPUDropout, nn.Dropout)
        switched = 0
        for m in self.modules():
            if type(m) is src:
                m.__class__ = dst
                switched += 1
        return switched

    def set_reused_embedding_grad(self, enabled: bool = True) -> bool:
        """Swap the encoder's word embeddings to :class:`simcse.models.embedding_grad.ReusedGradEmbedding`
        (``enabled``) or back to ``nn.Embedding``; returns whether the swapped class is on.

        The training backward then builds the word embeddings' gradient in one tensor kept between steps,
        writing and re-zeroing only the batch's token rows, instead of zero-filling a fresh (vocab, H) tensor
        every step: the same gradient, less memory traffic. Not swapped (False) when the input embeddings are not
        a plain ``nn.Embedding`` (:func:`simcse.models.embedding_grad.swappable`).
        """
        from simcse.models.embedding_grad import ReusedGradEmbedding, swappable

        get = getattr(self.encoder, "get_input_embeddings", None)
        emb = get() if get is not None else None
        if isinstance(emb, ReusedGradEmbedding):
            if not enabled:
                emb.__class__ = nn.Embedding
                emb.__dict__.pop("_reused_grad", None)
            return enabled
        if not enabled or emb is None or not swappable(emb):
            return False
        emb.__class__ = ReusedGradEmbedding
        return True

    def _check_unpadded(self) -> str | None:
        """None when the unpadded forward equals the padded one on a small random batch, else why not."""
        config = self.encoder.config
        vocab = int(getattr(config, "vocab_size", 100) or 100)
        pad = getattr(config, "pad_token_id", None)
        pad = 0 if pad is None else int(pad)
        gen = torch.Generator().manual_seed(0)
        lengths = [7, 4, 2]
        ids = torch.randint(min(vocab, 1000), (len(lengths), max(lengths)), generator=gen)
        ids[ids == pad] = (pad + 1) % vocab
        mask = (torch.arange(max(lengths))[None, :] < torch.tensor(lengths)[:, None]).long()
        ids = ids.masked_fill(mask == 0, pad).to(self.device)
        mask = mask.to(self.device)
        was_training = self.training
        self.eval()
        try:
            with torch.no_grad():
                got, _ = self._encode_unpadded(ids, mask)
                self.unpadded = False
                ref = self.encoder(input_ids=ids, attention_mask=mask, return_dict=True).last_hidden_state
        except Exception as e:  # an architecture whose forward does not take packed inputs
            return f"{type(e).__name__}: {e}"
        finally:
            self.unpadded = True
            self.train(was_training)
        keep = mask.bool()
        err = (got[keep].float() - ref[keep].float()).abs().max().item()
        tol = 1e-3 * (1.0 + ref[keep].float().abs().max().item())
        return None if err <= tol else f"its outputs differ from the padded forward by {err:.3g} (> {tol:.3g})"
