"""The inference loop of :class:`simcse.SimCSEModel`: tokenise once, sort by token length, cut batches, pad each
batch only to its own longest row, run the model, put the rows back in input order.

:class:`Encoding` is the mixin that gives :class:`simcse.SimCSEModel` its ``encode`` (it relies on the model's
``tokenizer``, ``forward``, ``max_input_tokens`` and ``device``).
"""
from __future__ import annotations

import logging

import numpy as np
import torch

from simcse.files.checks import check_int

logger = logging.getLogger(__name__)


def _drop_precision_wrapper(model: torch.nn.Module):
    """Set aside accelerate's mixed-precision forward wrapper on ``model``, if any; return it (else None).

    ``Accelerator.prepare`` (HF Trainer's, with ``--bf16``/``--fp16``) replaces the instance's ``forward`` by
    an autocast-wrapped one and keeps the class's in ``_original_forward``; every later call of the model, an
    evaluation included, would then run under bf16/fp16 autocast whatever the caller asked. The reference
    SimCSE trainer scores its dev checkpoints in full precision (autocast only around the training step), and
    a saved model encodes in full precision. The caller puts the returned wrapper back (``model.forward = w``).
    """
    if "_original_forward" not in model.__dict__ or "forward" not in model.__dict__:
        return None
    return model.__dict__.pop("forward")


class Encoding:
    """``encode`` of :class:`simcse.SimCSEModel` (see the module)."""

    prompts: dict = {}  # name -> text prefixed to a sentence before tokenisation (sentence-transformers' prompts)
    default_prompt_name: str | None = None  # the prompt encode applies when none is asked for
    # What a sentence-transformers folder's pipeline does after pooling (simcse.models.st_files.apply_st_pipeline):
    pipeline_normalize: bool = False  # its Normalize module: unit vectors, before any truncation
    truncate_dim: int | None = None  # its recorded truncate_dim: the size encode returns by default

    def set_prompts(self, prompts: dict, default_prompt_name: str | None = None) -> None:
        """Set the model's named prompts (sentence-transformers' ``prompts``: name -> prefix text) and the one
        :meth:`encode` applies by default (None: no prompt unless asked). Saved with the model.

        Raises:
            ValueError: a prompt that is not a string, or a default name that is not one of the prompts."""
        if not isinstance(prompts, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in prompts.items()):
            raise ValueError(f"prompts must map names to prefix strings, got {prompts!r}")
        if default_prompt_name is not None and default_prompt_name not in prompts:
            raise ValueError(f"default_prompt_name {default_prompt_name!r} is not one of the prompts {sorted(prompts)}")
        self.prompts, self.default_prompt_name = dict(prompts), default_prompt_name

    def prompt_text(self, prompt: str | None = None, prompt_name: str | None = None) -> str:
        """The prefix :meth:`encode` puts before each sentence: ``prompt`` itself, else the named prompt, else
        the default prompt, else none ("").

        Raises:
            ValueError: both given, or an unknown ``prompt_name`` (the message lists the model's prompts)."""
        if prompt is not None and prompt_name is not None:
            raise ValueError("give prompt (the text) or prompt_name (one of the model's prompts), not both")
        if prompt is not None:
            if not isinstance(prompt, str):
                raise TypeError(f"prompt must be a str, got {type(prompt).__name__}")
            return prompt
        name = prompt_name if prompt_name is not None else self.default_prompt_name
        if name is None:
            return ""
        if name not in self.prompts:
            raise ValueError(f"unknown prompt_name {name!r}; this model has {sorted(self.prompts) or 'no prompts'}")
        return self.prompts[name]

    def prompt_length(self, prefix: str, max_length: int) -> int:
        """Tokens of ``prefix`` at the start of each row (:func:`simcse.models.prompt_pooling.prompt_token_count`
        with this model's tokenizer; 0 for none)."""
        from simcse.models.prompt_pooling import prompt_token_count

        return prompt_token_count(self.tokenizer, prefix, max_length)

    # ------------------------------------------------------------------------------------------ encode
    @torch.inference_mode()
    def encode(
        self,
        sentences: list[str],
        batch_size: int = 64,
        max_length: int = 128,
        device: str | torch.device | None = None,
        show_progress: bool = False,
        normalize: bool = False,
        dtype: torch.dtype | None = None,
        prompt: str | None = None,
        prompt_name: str | None = None,
        truncate_dim: int | None = None,
    ) -> np.ndarray:
        """Embed ``sentences`` in eval mode (no dropout); returns float32 (N, D) in input order, D the
        ``truncate_dim`` (default: the model's own :attr:`truncate_dim`, else the hidden size H).

        All sentences are tokenised up front (:meth:`_tokenize_flat`), then batches of ``batch_size`` are cut
        from the list sorted by *token* length (:meth:`_padded_batch`), so a batch carries almost no padding.
        ``max_length`` truncates (tokens, special tokens included; capped at :attr:`max_input_tokens`, the
        encoder's position table); when any sentence is cut, one log warning (logger ``simcse.models.inference``) gives how many. ``dtype``
        (e.g. ``torch.bfloat16``) runs the encoder under autocast for speed; without it the encoder runs in the
        model's own precision, also on a model an HF Trainer / accelerate has prepared for mixed precision (whose
        autocast forward wrapper is set aside while encoding, :func:`_drop_precision_wrapper`): the dev and test
        evaluations inside training score the model as it encodes once saved. ``prompt`` (a text) or
        ``prompt_name`` (one of :attr:`prompts`) is prefixed to every sentence; without either, the model's
        default prompt (:attr:`default_prompt_name`, e.g. the query instruction it was trained with) is; a model
        with ``include_prompt`` False leaves the prompt's tokens out of its mean
        (:mod:`simcse.models.prompt_pooling`).

        A model loaded from a sentence-transformers folder encodes as its pipeline does: the pooled vector made unit
        length when it has a ``Normalize`` module (:attr:`pipeline_normalize`), then cut to ``truncate_dim``, then
        made unit length when ``normalize`` is True (the order of ``SentenceTransformer.encode``).

        Raises:
            TypeError: ``sentences`` is not a list/tuple of str (the message gives the bad position).
            ValueError: the model has no tokenizer; ``batch_size``/``max_length`` is not a positive int; a
                ``truncate_dim`` below 1 or above H.
        """
        from simcse.models.truncation import check_truncate_dim, truncate_embeddings

        self._check_encode_args(sentences, batch_size, max_length)
        dim = check_truncate_dim(self.truncate_dim if truncate_dim is None else truncate_dim, self.hidden_size,
                                 "truncate_dim") or self.hidden_size
        prefix = self.prompt_text(prompt, prompt_name)
        if prefix:
            sentences = [prefix + s for s in sentences]
        max_length = min(max_length, self.max_input_tokens)  # longer would index past the position table
        n = len(sentences)
        if n == 0:
            return np.zeros((0, dim), dtype=np.float32)
        if device is not None:
            self.to(device)
        flat, lengths, offsets = self._tokenize_flat(sentences, max_length)
        extra = {} if getattr(self, "include_prompt", True) else {"prompt_length": self.prompt_length(prefix, max_length)}

        # Batches over the token-length order (longest first, so an out-of-memory shows up at once).
        order = np.argsort(-lengths, kind="stable")
        out = np.empty((n, dim), dtype=np.float32)
        starts = range(0, n, batch_size)
        if show_progress:
            from tqdm.auto import tqdm

            starts = tqdm(starts, desc="encoding", unit="batch")
        dev = self.device
        was_training = self.training
        self.eval()
        wrapper = _drop_precision_wrapper(self)
        try:
            for start in starts:
                idx = order[start : start + batch_size]
                batch = {k: torch.from_numpy(v).to(dev) for k, v in self._padded_batch(flat, lengths, offsets, idx).items()}
                with torch.autocast(device_type=dev.type, dtype=dtype, enabled=dtype is not None):
                    emb = self(**batch, **extra).float()  # (B, H)
                if self.pipeline_normalize:
                    emb = torch.nn.functional.normalize(emb, dim=-1)
                emb = truncate_embeddings(emb, dim, normalize=normalize)  # (B, D)
                out[idx] = emb.cpu().numpy()
        finally:
            if wrapper is not None:
                self.forward = wrapper
            self.train(was_training)
        return out

    def _check_encode_args(self, sentences, batch_size, max_length) -> None:
        """The argument checks of :meth:`encode` (errors: see there)."""
        if isinstance(sentences, str) or not isinstance(sentences, (list, tuple)):
            raise TypeError(f"sentences must be a list of str, got {type(sentences).__name__}")
        for i, s in enumerate(sentences):
            if not isinstance(s, str):
                raise TypeError(f"sentences[{i}] must be str, got {type(s).__name__}")
        for name, v in (("batch_size", batch_size), ("max_length", max_length)):
            check_int(v, name)
        if self.tokenizer is None:
            raise ValueError("this SimCSEModel has no tokenizer; pass one to the constructor or load with from_pretrained")

    def _tokenize_flat(self, sentences, max_length: int) -> tuple[dict[str, np.ndarray], np.ndarray, np.ndarray]:
        """Tokenise all ``sentences`` once, unpadded (one fast-tokenizer call per 8,192 sentences).

        Returns ``(flat, lengths, offsets)``: per input key (``input_ids``, ``token_type_ids``...) one flat int32
        array of all rows' ids, row i at ``offsets[i]:offsets[i+1]``; ``lengths`` (N,) int64 token counts;
        ``offsets`` (N+1,) int64. Logs one warning (``simcse.models.inference``) when ``max_length`` cut any sentence.
        """
        import itertools

        tok = self.tokenizer
        n = len(sentences)
        keys = [k for k in getattr(tok, "model_input_names", ["input_ids", "attention_mask"]) if k != "attention_mask"]
        parts: dict[str, list[np.ndarray]] = {}
        lengths = np.empty(n, dtype=np.int64)
        chunk = 8192
        for start in range(0, n, chunk):
            enc = tok(list(sentences[start : start + chunk]), truncation=True, max_length=max_length, padding=False,
                      return_attention_mask=False)
            ids = enc["input_ids"]
            lengths[start : start + len(ids)] = [len(x) for x in ids]
            for k in keys:
                if k in enc:
                    parts.setdefault(k, []).append(np.fromiter(itertools.chain.from_iterable(enc[k]), dtype=np.int32))
        flat = {k: np.concatenate(v) for k, v in parts.items()}
        offsets = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])

        # A row at exactly max_length may have been cut: re-tokenise those few with one more token to tell.
        full = np.flatnonzero(lengths >= max_length)
        if len(full):
            longer = tok([sentences[i] for i in full], truncation=True, max_length=max_length + 1,
                         return_attention_mask=False)["input_ids"]
            n_cut = sum(len(x) > max_length for x in longer)
            if n_cut:  # a log line, not warnings.warn: that would print a line of this package's source too
                logger.warning("%d of %d sentences are longer than max_length=%d tokens and were truncated",
                               n_cut, n, max_length)
        return flat, lengths, offsets

    def _padded_batch(self, flat: dict[str, np.ndarray], lengths: np.ndarray, offsets: np.ndarray,
                      idx: np.ndarray) -> dict[str, np.ndarray]:
        """Rows ``idx`` (B,) of :meth:`_tokenize_flat`'s arrays padded to their longest: (B, W) int64 arrays.

        Rows are always padded on the right, whatever the tokenizer's ``padding_side``: the ``cls`` poolers read
        position 0 and the encoder numbers positions from the first token, so a sentence's embedding never
        depends on the other sentences of its batch. Pad values follow the tokenizer (``pad_token_id``,
        ``pad_token_type_id``); the result holds every flat key plus ``attention_mask``.
        """
        tok = self.tokenizer
        pad_values = {"input_ids": tok.pad_token_id if tok.pad_token_id is not None else 0,
                      "token_type_ids": getattr(tok, "pad_token_type_id", 0) or 0}
        lens = lengths[idx]  # (B,)
        width = int(lens.max())
        cols = np.arange(width)
        mask = cols[None, :] < lens[:, None]  # (B, W) bool, real tokens first
        pos = offsets[idx][:, None] + cols[None, :]
        batch = {}
        for k, arr in flat.items():
            vals = np.full(mask.shape, pad_values.get(k, 0), dtype=np.int64)
            vals[mask] = arr[pos[mask]]
            batch[k] = vals
        batch["attention_mask"] = mask.astype(np.int64)
        return batch
