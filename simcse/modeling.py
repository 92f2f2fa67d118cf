"""SimCSEModel: any HF ``AutoModel`` encoder composed with a pooler (and the ``cls`` MLP head).

A saved SimCSE model is a plain HF encoder folder plus two small files::

    config.json, model.safetensors, tokenizer files   # the encoder: AutoModel.from_pretrained(dir) works
    simcse_config.json                                 # pooler_type, mlp_only_train, hidden_size, format version
    simcse_mlp.safetensors                             # the MLP head (only for pooler_type "cls")

so loading never guesses the pooler from the model's name (the reference's tool did).
"""
from __future__ import annotations

import json
import logging
import math
import os
import shutil
import tempfile
from pathlib import Path

import numpy as np
import torch
from torch import nn

from .pooling import MLPHead, get_pooler

logger = logging.getLogger(__name__)

SIMCSE_CONFIG_NAME = "simcse_config.json"
MLP_WEIGHTS_NAME = "simcse_mlp.safetensors"
FORMAT_VERSION = 1
_WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin", "pytorch_model.bin.index.json")


def _check_model_dir(path: str) -> bool:
    """True when ``path`` is a local folder (checked for weights); False for a hub name.

    Raises:
        FileNotFoundError: ``path`` looks like a local path but does not exist, or has no weight file.
    """
    p = Path(path)
    if p.is_dir():
        if not any((p / f).is_file() for f in _WEIGHT_FILES):
            raise FileNotFoundError(
                f"model folder {path!r} has no weights: expected one of {list(_WEIGHT_FILES)}"
            )
        return True
    if p.exists() or path.startswith((".", "/", "~")) or os.sep + os.sep in path or path.count("/") > 1:
        raise FileNotFoundError(f"model path {path!r} is not a folder with a saved model")
    return False  # a hub name such as "bert-base-uncased"; transformers resolves it (needs the hub)


_HUB_KWARGS = ("cache_dir", "revision", "token", "local_files_only", "force_download")


def _hub_file(repo_id: str, filename: str, hf_kwargs: dict) -> Path | None:
    """``filename`` of Hub model ``repo_id`` (downloaded, or from the Hub cache when offline), or None when the
    repository (or, offline, its cached snapshot) has no such file. ``hf_kwargs``: the hub options of
    :meth:`SimCSEModel.from_pretrained` (``cache_dir``, ``revision``, ``token``...)."""
    from huggingface_hub import hf_hub_download
    from huggingface_hub.errors import EntryNotFoundError

    try:
        return Path(hf_hub_download(repo_id, filename, **{k: v for k, v in hf_kwargs.items() if k in _HUB_KWARGS}))
    except EntryNotFoundError:  # remote: no such file; offline: not in the cached snapshot
        return None


def _load_encoder(path: str, trust_remote_code: bool = False, **kwargs):
    """Load ``AutoModel`` from ``path``; return (encoder, its detached pooler module or None).

    The encoder's own pooler (BERT's NSP pooler: Linear + Tanh) is detached: SimCSE never runs it inside the
    encoder, and an unused module would break DDP's gradient bookkeeping. It is returned so that a plain HF
    checkpoint evaluated with ``cls`` can use its weights (as the reference evaluation's ``pooler_output``)
    and so that saving can put it back, holding the MLP (as the reference's ``simcse_to_huggingface``).
    """
    from transformers import AutoModel

    if kwargs.get("weights_only", True) is not True:
        raise ValueError("weights_only=False is refused: simcse loads pickle-based weight files (pytorch_model.bin) "
                         "only with torch.load(weights_only=True); convert the checkpoint to safetensors instead")
    import pickle

    try:
        encoder = AutoModel.from_pretrained(path, trust_remote_code=trust_remote_code, **kwargs)
    except pickle.UnpicklingError as e:  # torch.load(weights_only=True) met an object that is not a tensor
        detail = next((line for line in str(e).splitlines() if "GLOBAL" in line), "").strip()
        raise ValueError(
            f"refusing to load the pickle-based weights of {path!r}: they hold objects other than tensors, which "
            f"only an unsafe torch.load(weights_only=False) would run{f' ({detail})' if detail else ''}; "
            "expected model.safetensors (convert trusted weights with safetensors)"
        ) from None
    hf_pooler = getattr(encoder, "pooler", None)
    if not isinstance(hf_pooler, nn.Module):
        return encoder, None
    encoder.pooler = None
    return encoder, hf_pooler


def _check_tokenizer_fits(tokenizer, encoder) -> None:
    """ValueError when ``tokenizer`` makes token ids the encoder's embedding matrix has no row for.

    Without this check a mismatched tokenizer fails deep inside torch ("index out of range in self").
    """
    emb = encoder.get_input_embeddings() if hasattr(encoder, "get_input_embeddings") else None
    rows = getattr(emb, "num_embeddings", None)
    if tokenizer is None or not isinstance(rows, int):
        return
    n = len(tokenizer)
    if n > rows:
        raise ValueError(
            f"tokenizer ({type(tokenizer).__name__}, {n} tokens) does not match the encoder: its embedding matrix "
            f"has {rows} rows, so token ids {rows}..{n - 1} would be out of range; expected the tokenizer saved "
            "with this model (or resize the embeddings with encoder.resize_token_embeddings(len(tokenizer)))"
        )


def _pooler_dense(hf_pooler) -> nn.Linear | None:
    dense = getattr(hf_pooler, "dense", None)
    return dense if isinstance(dense, nn.Linear) else None


# ----------------------------------------------------------------------------- padding-free encoder forward
UNPADDED_ATTENTION = "simcse_unpadded_sdpa"
_LAYOUT_KWARG = "simcse_unpadded_layout"


def _unpadded_sdpa(module, query, key, value, attention_mask, dropout: float = 0.0, scaling: float | None = None,
                   **kwargs):
    """Attention function registered with transformers as :data:`UNPADDED_ATTENTION`.

    Called by the encoder's attention layers with packed ``query``/``key``/``value`` of shape (1, heads, T, d),
    where T is the number of real (non-padding) tokens of the batch, and the layout of :func:`_attention_buckets`
    in the keyword :data:`_LAYOUT_KWARG`. The sentences are attended bucket by bucket: the rows of a bucket
    (sentences of similar length) are gathered into (R, heads, W, d) with W the bucket's longest sentence,
    attended with a key-padding mask and attention dropout ``dropout`` (:func:`_attention_core`), and their real
    tokens put back in packed order: returns ``((1, T, heads, d), None)``. Attention thus costs about
    sum_b R_b * W_b^2 instead of N * L^2, and every other layer of the encoder runs on T tokens instead of N*L.
    Without the layout keyword (a padded call, e.g. the MLM head's) it is transformers' own SDPA attention.
    """
    layout = kwargs.pop(_LAYOUT_KWARG, None)
    if layout is None:
        from transformers.integrations.sdpa_attention import sdpa_attention_forward

        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, **kwargs)
    buckets, restore = layout
    heads = query.shape[1]
    if key.shape[1] != heads:  # grouped-query attention: one key/value head per group
        key = key.repeat_interleave(heads // key.shape[1], dim=1)
        value = value.repeat_interleave(heads // value.shape[1], dim=1)
    q, k, v = (x[0].transpose(0, 1) for x in (query, key, value))  # (T, h, d) each
    fast_dropout = any(isinstance(m, CPUDropout) for m in module.children())  # set_cpu_dropout is on
    outs = []
    for gather, rows, width, key_mask, real in buckets:
        def pad(x):  # (T, h, d) -> (R, h, W, d); padding slots hold some real token, masked out as keys
            return x.index_select(0, gather).view(rows, width, *x.shape[1:]).transpose(1, 2)

        out = _attention_core(pad(q), pad(k), pad(v), key_mask, dropout, scaling, fast_dropout)  # (R, h, W, d)
        outs.append(out.transpose(1, 2).reshape(rows * width, heads, -1).index_select(0, real))  # (T_b, h, d)
    out = torch.cat(outs).index_select(0, restore)  # (T, h, d) in packed order
    return out.unsqueeze(0), None


def _attention_buckets(keep: torch.Tensor, max_buckets: int = 4) -> tuple[list[tuple], torch.Tensor]:
    """Group the rows of a (N, L) bool keep-mask into at most ``max_buckets`` buckets of similar length.

    Rows are sorted by their number of real tokens (descending) and cut into equal-sized groups; each group is
    padded to its own longest row only. Real tokens are numbered in packed (row-major) order, 0..T-1, as
    :meth:`SimCSEModel._encode_unpadded` packs them. Returns ``(buckets, restore)``: per bucket
    ``(gather (R*W,) int64 packed index per slot, R, W, key_mask (R, 1, 1, W) bool, real (T_b,) int64 slots
    holding real tokens)``, and ``restore`` (T,) int64 such that the buckets' real-slot outputs, concatenated,
    indexed by ``restore`` are back in packed order.
    """
    lengths = keep.sum(dim=1)  # (N,)
    total = int(lengths.sum())
    offsets = torch.cumsum(lengths, 0) - lengths  # packed index of each row's first token
    order = torch.argsort(lengths, descending=True, stable=True)
    n = order.numel()
    k = max(1, min(max_buckets, n))
    bounds = [round(i * n / k) for i in range(k + 1)]
    buckets, produced = [], []
    for a, b in zip(bounds[:-1], bounds[1:]):
        rows = order[a:b]
        lens = lengths[rows]
        width = int(lens.max()) if rows.numel() else 0
        if width == 0:
            continue  # only empty rows: no token to attend
        pos = torch.arange(width, device=keep.device)
        valid = pos[None, :] < lens[:, None]  # (R, W)
        gather = (offsets[rows][:, None] + torch.where(valid, pos[None, :], 0)).clamp_(max=max(total - 1, 0))
        real = valid.reshape(-1).nonzero().squeeze(1)
        buckets.append((gather.reshape(-1), rows.numel(), width, valid[:, None, None, :], real))
        produced.append(gather.reshape(-1)[real])
    packed = torch.cat(produced) if produced else torch.zeros(0, dtype=torch.long, device=keep.device)
    restore = torch.empty_like(packed)
    restore[packed] = torch.arange(packed.numel(), device=keep.device)
    return buckets, restore


def keep_mask(shape: tuple[int, ...] | torch.Size, p: float, generator: torch.Generator | None = None) -> tuple[torch.Tensor, float]:
    """A CPU dropout keep-mask drawn at half the random-number cost of ``torch.bernoulli``.

    Each 32-bit draw of the (Mersenne-twister, single-threaded) CPU generator is split into two 16-bit uniform
    integers; an element is kept when its integer is at least ``round(p * 65536)`` (counted from the bottom of
    the int16 range). Returns ``(mask, keep_scale)``: ``mask`` bool of ``shape``, ``keep_scale`` the inverted-dropout
    factor ``1 / P(keep)`` for the quantised probability. The drop probability is ``round(p * 65536) / 65536``
    (p = 0.1 -> 0.1000061), so the masks follow the same Bernoulli law as ``torch.nn.functional.dropout`` up
    to that rounding; the stream of random numbers differs (the outputs are equal in distribution, not
    bitwise). Reproducible under ``torch.manual_seed`` / HF ``set_seed`` (it draws from ``generator`` or the
    default CPU generator, whose state HF checkpoints save).

    Raises:
        ValueError: ``p`` outside [0, 1).
    """
    if not 0.0 <= p < 1.0:
        raise ValueError(f"dropout probability p must be in [0, 1); got {p}")
    n = math.prod(int(d) for d in shape)
    threshold = round(p * 65536)
    words = torch.empty((n + 1) // 2, dtype=torch.int32).random_(-2**31, 2**31, generator=generator)
    mask = words.view(torch.int16)[:n].view(shape) >= (threshold - 32768)
    return mask, 65536.0 / (65536 - threshold)


def cpu_dropout(x: torch.Tensor, p: float) -> torch.Tensor:
    """Inverted dropout of ``x`` (any shape, float dtype) with a :func:`keep_mask` mask; training mode only.

    Same law as ``torch.nn.functional.dropout(x, p, training=True)`` (see :func:`keep_mask` for the rounding of
    ``p``), about half its cost on CPU where mask drawing dominates (docs/performance.md). Off CPU it *is*
    ``torch.nn.functional.dropout``.
    """
    if p == 0.0:
        return x
    if x.device.type != "cpu":
        return torch.nn.functional.dropout(x, p=p, training=True)
    mask, scale = keep_mask(x.shape, p)
    return x * mask.to(x.dtype).mul_(scale)


class CPUDropout(nn.Dropout):
    """``nn.Dropout`` whose training-mode CPU forward is :func:`cpu_dropout` (eval mode: identity, as before).

    :meth:`SimCSEModel.set_cpu_dropout` swaps the class of the encoder's ``nn.Dropout`` modules to this one (same
    ``p``, no parameters, so checkpoints are unaffected) and back.
    """

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training or x.device.type != "cpu":
            return super().forward(x)
        return cpu_dropout(x, self.p)


def _attention_core(query, key, value, key_mask, dropout: float, scaling: float | None, fast_dropout: bool = False):
    """softmax(q k^T * scaling, keys masked by ``key_mask``) -> dropout -> @ v, for (N, h, L, d) tensors.

    On CPU with dropout, plain matmul / softmax / dropout (as transformers' eager attention): torch's SDPA
    has no fused CPU kernel with dropout, and its fallback spends more on mask handling (measured ~10% of a
    bf16 step on MiniLM, docs/performance.md). Otherwise SDPA (its fused kernels).
    """
    if dropout > 0 and query.device.type == "cpu":
        scale = scaling if scaling is not None else query.shape[-1] ** -0.5
        scores = torch.matmul(query, key.transpose(-1, -2)) * scale
        scores = scores.masked_fill(~key_mask, torch.finfo(scores.dtype).min)
        probs = torch.softmax(scores, dim=-1)
        probs = cpu_dropout(probs, dropout) if fast_dropout else torch.nn.functional.dropout(probs, p=dropout, training=True)
        return torch.matmul(probs, value)
    return torch.nn.functional.scaled_dot_product_attention(query, key, value, attn_mask=key_mask, dropout_p=dropout,
                                                            scale=scaling)


def _register_unpadded_attention() -> None:
    """Register :func:`_unpadded_sdpa` (and SDPA's mask builder for its padded calls) with transformers, once."""
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, AttentionMaskInterface, sdpa_mask
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS, AttentionInterface

    if UNPADDED_ATTENTION not in ALL_ATTENTION_FUNCTIONS:
        AttentionInterface.register(UNPADDED_ATTENTION, _unpadded_sdpa)
    if UNPADDED_ATTENTION not in ALL_MASK_ATTENTION_FUNCTIONS:
        AttentionMaskInterface.register(UNPADDED_ATTENTION, sdpa_mask)


def _padded_position_ids(encoder, input_ids: torch.Tensor) -> torch.Tensor:
    """(N, L) position ids the encoder's embeddings would use for the padded ``input_ids`` (N, L).

    RoBERTa-style embeddings number positions from ``padding_idx + 1`` and skip padding tokens; BERT-style ones
    use ``0 .. L-1`` whatever the padding.
    """
    emb = getattr(encoder, "embeddings", None)
    make = getattr(emb, "create_position_ids_from_input_ids", None)
    padding_idx = getattr(emb, "padding_idx", None)
    if make is not None and padding_idx is not None:
        return make(input_ids, padding_idx)
    rows, width = input_ids.shape
    return torch.arange(width, device=input_ids.device).expand(rows, width)


class SimCSEModel(nn.Module):
    """Encoder + pooler mapping token ids to sentence embeddings.

    Args:
        encoder: an HF ``PreTrainedModel`` returning ``last_hidden_state`` (and ``hidden_states`` on request).
        pooler_type: one of :data:`simcse.pooling.POOLERS` (``ValueError`` otherwise).
        mlp_only_train: apply the ``cls`` MLP in training only, not when encoding (paper's unsupervised
            default, Section 3 / reference ``--mlp_only_train``).
        tokenizer: the matching HF tokenizer (needed by :meth:`encode` and saved by :meth:`save_pretrained`).

    ``forward`` returns (N, H) embeddings in the encoder's dtype; dropout is whatever ``self.training`` says.
    """

    def __init__(self, encoder: nn.Module, pooler_type: str = "cls", mlp_only_train: bool = False, tokenizer=None,
                 hf_pooler: nn.Module | None = None):
        super().__init__()
        # The encoder's own pooler, detached (see _load_encoder); kept in a list so it is not a submodule.
        self._hf_pooler = [hf_pooler] if hf_pooler is not None else []
        self.pooler = get_pooler(pooler_type)
        self.encoder = encoder
        self.tokenizer = tokenizer
        self.mlp_only_train = bool(mlp_only_train)
        self.unpadded = False  # padding-free forward, see set_unpadded
        _check_tokenizer_fits(tokenizer, encoder)
        hidden = encoder.config.hidden_size
        self.mlp = MLPHead(hidden) if self.pooler.uses_mlp else None
        if self.mlp is not None:
            std = getattr(encoder.config, "initializer_range", 0.02)
            nn.init.normal_(self.mlp.dense.weight, mean=0.0, std=std)
            nn.init.zeros_(self.mlp.dense.bias)
            self.mlp.to(dtype=next(encoder.parameters()).dtype)

    def attach_mlm_head(self, path: str, trust_remote_code: bool = False) -> None:
        """Load the masked-LM head of checkpoint ``path`` for the auxiliary MLM loss (Appendix D).

        The head comes from ``AutoModelForMaskedLM``; its output embedding stays tied to this encoder's input
        embeddings when the architecture ties them.

        Raises:
            ValueError: the checkpoint has no (or an incomplete) MLM head; the message lists missing weights.
        """
        from transformers import AutoModelForMaskedLM

        mlm, info = AutoModelForMaskedLM.from_pretrained(path, trust_remote_code=trust_remote_code, output_loading_info=True)
        base = mlm.base_model
        heads = [m for _, m in mlm.named_children() if m is not base]
        prefix = mlm.base_model_prefix + "."
        missing = [k for k in info.get("missing_keys", []) if not k.startswith(prefix) and "pooler" not in k]
        if len(heads) != 1 or missing:
            raise ValueError(
                f"--do_mlm needs a masked-LM head, but checkpoint {path!r} has none "
                f"(missing: {sorted(missing)[:4]}); use a checkpoint trained with MLM such as bert-base-uncased or roberta-base"
            )
        head = heads[0]
        # Re-tie the head's decoder to *this* encoder's word embeddings (the head was loaded with its own copy).
        out_emb = mlm.get_output_embeddings()
        in_emb = self.encoder.get_input_embeddings()
        if out_emb is not None and out_emb.weight is mlm.get_input_embeddings().weight:
            out_emb.weight = in_emb.weight
        self.mlm_head = head.to(self.device)

    def mlm_logits(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, **encoder_kwargs) -> torch.Tensor:
        """(N, L) ids -> (N, L, vocab) MLM logits from the attached head (see :meth:`attach_mlm_head`)."""
        if getattr(self, "mlm_head", None) is None:
            raise ValueError("no MLM head attached; call attach_mlm_head(path) (train with --do_mlm)")
        hidden = self.encoder(input_ids=input_ids, attention_mask=attention_mask, return_dict=True, **encoder_kwargs).last_hidden_state
        return self.mlm_head(hidden)

    @property
    def pooler_type(self) -> str:
        return self.pooler.name

    @property
    def hidden_size(self) -> int:
        return self.encoder.config.hidden_size

    @property
    def max_input_tokens(self) -> int:
        """The longest input (tokens) the encoder takes: its position table (less RoBERTa's padding offset)
        and the tokenizer's ``model_max_length``, whichever is smaller."""
        cap = getattr(self.encoder.config, "max_position_embeddings", None) or 10**9
        emb = getattr(self.encoder, "embeddings", None)
        if getattr(emb, "padding_idx", None) is not None:
            cap -= int(emb.padding_idx) + 1  # RoBERTa-style positions start after padding_idx
        tok_max = getattr(self.tokenizer, "model_max_length", None)
        if isinstance(tok_max, int) and 0 < tok_max < cap:
            cap = tok_max
        return max(1, cap)

    @property
    def device(self) -> torch.device:
        return next(self.parameters()).device

    # ----------------------------------------------------------------------------------------- forward
    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, **encoder_kwargs) -> torch.Tensor:
        """input_ids, attention_mask: (N, L) int64 -> embeddings (N, H).

        Extra keyword tensors the tokenizer produced (e.g. ``token_type_ids`` (N, L)) go to the encoder.
        With :meth:`set_unpadded` on, the encoder runs on the real tokens only (same result, less work).
        """
        if self.unpadded and attention_mask is not None:
            last, hidden = self._encode_unpadded(input_ids, attention_mask, **encoder_kwargs)
        else:
            out = self.encoder(
                input_ids=input_ids,
                attention_mask=attention_mask,
                output_hidden_states=self.pooler.needs_hidden_states,
                return_dict=True,
                **encoder_kwargs,
            )
            last, hidden = out.last_hidden_state, out.hidden_states
        pooled = self.pooler.fn(last, attention_mask, hidden)  # (N, H)
        if self.mlp is not None and (self.training or not self.mlp_only_train):
            pooled = self.mlp(pooled)
        return pooled

    def gradient_checkpointing_enable(self, gradient_checkpointing_kwargs=None):
        """Delegate to the encoder (called by HF Trainer when ``--gradient_checkpointing``)."""
        self.encoder.gradient_checkpointing_enable(gradient_checkpointing_kwargs=gradient_checkpointing_kwargs)

    # ------------------------------------------------------------------------------ padding-free forward
    def _encode_unpadded(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, **encoder_kwargs):
        """Run the encoder on the real tokens of a padded (N, L) batch, packed as one (1, T) row.

        Position ids are those the padded batch would get; token-level keyword tensors (N, L) are packed the
        same way; attention sees one sentence at a time (:func:`_unpadded_sdpa`). Returns the last hidden state
        (N, L, H) and the hidden states (tuple or None), zero at padding positions (poolers mask them anyway).
        """
        rows, width = input_ids.shape
        keep = attention_mask.bool()
        flat = keep.reshape(-1).nonzero().squeeze(1)  # (T,) positions of real tokens in the flattened batch

        def pack(t: torch.Tensor) -> torch.Tensor:  # (N, L) -> (1, T)
            return t.reshape(-1)[flat].unsqueeze(0)

        extra = {k: pack(v) if torch.is_tensor(v) and v.shape == input_ids.shape else v for k, v in encoder_kwargs.items()}
        out = self.encoder(
            input_ids=pack(input_ids),
            position_ids=pack(_padded_position_ids(self.encoder, input_ids)),
            attention_mask=None,
            output_hidden_states=self.pooler.needs_hidden_states,
            return_dict=True,
            **{_LAYOUT_KWARG: _attention_buckets(keep)},
            **extra,
        )

        def unpack(h: torch.Tensor) -> torch.Tensor:  # (1, T, H) -> (N, L, H)
            full = h.new_zeros((rows * width, h.shape[-1])).index_put((flat,), h[0])
            return full.view(rows, width, -1)

        hidden = tuple(unpack(h) for h in out.hidden_states) if out.hidden_states is not None else None
        return unpack(out.last_hidden_state), hidden

    def set_unpadded(self, enabled: bool = True) -> bool:
        """Turn the padding-free ("unpadded") encoder forward on or off; returns whether it is on.

        On, :meth:`forward` drops the padding tokens of the batch before the encoder, so embeddings, linear
        layers, LayerNorm and dropout cost the real tokens only (on wiki sentences cut at 32 tokens, about 75%
        of the padded batch); attention runs per sentence. Outputs equal the padded forward up to float
        rounding (dropout draws its masks over the real tokens only: same distribution, different stream).
        Turning it on checks that on a small batch, in eval mode; an encoder that does not route attention
        through transformers' attention-function registry (or numbers positions differently) fails the check,
        and then a warning is logged and the padded forward is kept (returns False).
        """
        config = self.encoder.config
        if not enabled:
            if self.unpadded:
                config._attn_implementation = self._padded_attn_implementation
            self.unpadded = False
            return False
        if self.unpadded:
            return True
        _register_unpadded_attention()
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

        Training-mode dropout on CPU then draws its masks at half the random-number cost (:func:`keep_mask`);
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
    ) -> np.ndarray:
        """Embed ``sentences`` in eval mode (no dropout); returns float32 (N, H) in input order.

        All sentences are tokenised up front (one fast-tokenizer call per 8,192 sentences, ids kept in one
        flat int32 array), then batches of ``batch_size`` are cut from the list sorted by *token* length, so
        a batch carries almost no padding. ``max_length`` truncates (tokens, special tokens included; capped at
        :attr:`max_input_tokens`, the encoder's position table); when
        any sentence is cut, one ``UserWarning`` gives how many. ``dtype`` (e.g. ``torch.bfloat16``) runs
        the encoder under autocast for speed.

        Raises:
            TypeError: ``sentences`` is not a list/tuple of str (the message gives the bad position).
            ValueError: the model has no tokenizer, or ``batch_size``/``max_length`` is not a positive int.
        """
        if isinstance(sentences, str) or not isinstance(sentences, (list, tuple)):
            raise TypeError(f"sentences must be a list of str, got {type(sentences).__name__}")
        for i, s in enumerate(sentences):
            if not isinstance(s, str):
                raise TypeError(f"sentences[{i}] must be str, got {type(s).__name__}")
        for name, v in (("batch_size", batch_size), ("max_length", max_length)):
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"{name} must be a positive int, got {v!r}")
        if self.tokenizer is None:
            raise ValueError("this SimCSEModel has no tokenizer; pass one to the constructor or load with from_pretrained")
        max_length = min(max_length, self.max_input_tokens)  # longer would index past the position table
        n = len(sentences)
        if n == 0:
            return np.zeros((0, self.hidden_size), dtype=np.float32)
        if device is not None:
            self.to(device)
        dev = self.device
        tok = self.tokenizer

        import itertools

        # 1. Tokenise everything once, unpadded; keep each key's ids flat (offsets[i]:offsets[i+1] is row i).
        keys = [k for k in getattr(tok, "model_input_names", ["input_ids", "attention_mask"]) if k != "attention_mask"]
        flat: dict[str, list[np.ndarray]] = {}
        lengths = np.empty(n, dtype=np.int64)
        chunk = 8192
        for start in range(0, n, chunk):
            enc = tok(list(sentences[start : start + chunk]), truncation=True, max_length=max_length, padding=False,
                      return_attention_mask=False)
            ids = enc["input_ids"]
            lengths[start : start + len(ids)] = [len(x) for x in ids]
            for k in keys:
                if k in enc:
                    rows = enc[k]
                    flat.setdefault(k, []).append(np.fromiter(itertools.chain.from_iterable(rows), dtype=np.int32))
        flat_arr = {k: np.concatenate(v) for k, v in flat.items()}
        offsets = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])

        # A row at exactly max_length may have been cut: re-tokenise those few with one more token to tell.
        full = np.flatnonzero(lengths >= max_length)
        if len(full):
            longer = tok([sentences[i] for i in full], truncation=True, max_length=max_length + 1,
                         return_attention_mask=False)["input_ids"]
            n_cut = sum(len(x) > max_length for x in longer)
            if n_cut:
                import warnings

                warnings.warn(f"{n_cut} of {n} sentences are longer than max_length={max_length} tokens and were "
                              "truncated", UserWarning, stacklevel=3)

        pad_values = {"input_ids": tok.pad_token_id if tok.pad_token_id is not None else 0,
                      "token_type_ids": getattr(tok, "pad_token_type_id", 0) or 0}
        left = getattr(tok, "padding_side", "right") == "left"

        # 2. Batches over the token-length order (longest first, so an out-of-memory shows up at once).
        order = np.argsort(-lengths, kind="stable")
        out = np.empty((n, self.hidden_size), dtype=np.float32)
        starts = range(0, n, batch_size)
        if show_progress:
            from tqdm.auto import tqdm

            starts = tqdm(starts, desc="encoding", unit="batch")
        was_training = self.training
        self.eval()
        try:
            for start in starts:
                idx = order[start : start + batch_size]
                lens = lengths[idx]  # (B,)
                width = int(lens.max())
                cols = np.arange(width)
                if left:
                    mask = cols[None, :] >= (width - lens)[:, None]  # (B, W) bool
                    pos = offsets[idx][:, None] + cols[None, :] - (width - lens)[:, None]
                else:
                    mask = cols[None, :] < lens[:, None]
                    pos = offsets[idx][:, None] + cols[None, :]
                batch = {}
                for k, arr in flat_arr.items():
                    vals = np.full(mask.shape, pad_values.get(k, 0), dtype=np.int64)
                    vals[mask] = arr[pos[mask]]
                    batch[k] = torch.from_numpy(vals).to(dev)
                batch["attention_mask"] = torch.from_numpy(mask.astype(np.int64)).to(dev)
                with torch.autocast(device_type=dev.type, dtype=dtype, enabled=dtype is not None):
                    emb = self(**batch)
                emb = emb.float()
                if normalize:
                    emb = torch.nn.functional.normalize(emb, dim=-1)
                out[idx] = emb.cpu().numpy()
        finally:
            self.train(was_training)
        return out

    # ----------------------------------------------------------------------------------- save / load
    def simcse_config(self) -> dict:
        return {
            "format_version": FORMAT_VERSION,
            "pooler_type": self.pooler_type,
            "mlp_only_train": self.mlp_only_train,
            "hidden_size": self.hidden_size,
        }

    def save_pretrained(self, save_directory: str | os.PathLike, state_dict: dict | None = None) -> None:
        """Write the encoder, tokenizer, ``simcse_config.json`` and MLP weights (safetensors), the
        sentence-transformers module files (:func:`simcse.export.write_sentence_transformers_files`) and the
        model card ``README.md`` (:func:`simcse.model_card.write_model_card`).

        Files are first written to a temporary folder next to ``save_directory`` and then moved in one
        rename each, so an interrupted save never leaves a half-written weight file in place.
        """
        from safetensors.torch import save_file

        target = Path(save_directory)
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.tmp-", dir=target.parent))
        try:
            self._save_encoder(tmp)
            if self.tokenizer is not None:
                self.tokenizer.save_pretrained(tmp)
            if self.mlp is not None:
                save_file({k: v.detach().contiguous().cpu() for k, v in self.mlp.state_dict().items()}, str(tmp / MLP_WEIGHTS_NAME))
            (tmp / SIMCSE_CONFIG_NAME).write_text(json.dumps(self.simcse_config(), indent=2) + "\n")
            from .export import write_sentence_transformers_files

            write_sentence_transformers_files(self, tmp)  # the folder is a sentence-transformers folder too
            if not target.exists():
                os.replace(tmp, target)
            else:
                target.mkdir(exist_ok=True)
                for f in sorted(tmp.rglob("*")):
                    dest = target / f.relative_to(tmp)
                    if f.is_dir():
                        dest.mkdir(exist_ok=True)
                    else:
                        os.replace(f, dest)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        from .model_card import write_model_card

        write_model_card(target, simcse_config=self.simcse_config())  # keeps results/training info already there

    def _save_encoder(self, folder: Path) -> None:
        # Put the detached HF pooler back for the save so the folder is a complete HF model; when this model
        # has an MLP of the same shape, the pooler holds the MLP, so HF's ``pooler_output`` equals our ``cls``.
        hf_pooler = self._hf_pooler[0] if self._hf_pooler else None
        dense = _pooler_dense(hf_pooler)
        if dense is not None and self.mlp is not None and dense.weight.shape == self.mlp.dense.weight.shape:
            with torch.no_grad():
                dense.weight.copy_(self.mlp.dense.weight)
                dense.bias.copy_(self.mlp.dense.bias)
        if hf_pooler is not None:
            self.encoder.pooler = hf_pooler.to(self.device)
        try:
            self.encoder.save_pretrained(folder, safe_serialization=True)
        finally:
            if hf_pooler is not None:
                self.encoder.pooler = None

    @staticmethod
    def read_simcse_config(path: str | os.PathLike) -> dict | None:
        """The parsed ``simcse_config.json`` of a local folder, or None when it has none."""
        f = Path(path) / SIMCSE_CONFIG_NAME
        if not f.is_file():
            return None
        cfg = json.loads(f.read_text())
        if cfg.get("format_version", 0) > FORMAT_VERSION:
            raise ValueError(f"{f} has format_version {cfg['format_version']}; this simcse reads <= {FORMAT_VERSION}")
        return cfg

    @classmethod
    def from_pretrained(
        cls,
        model_name_or_path: str | os.PathLike,
        pooler_type: str | None = None,
        mlp_only_train: bool | None = None,
        new_mlp_init: str = "encoder_pooler",
        trust_remote_code: bool = False,
        **hf_kwargs,
    ) -> "SimCSEModel":
        """Load a folder saved by :meth:`save_pretrained`, a plain HF encoder folder, or a hub name.

        For a hub name, ``simcse_config.json`` and ``simcse_mlp.safetensors`` are read from the repository (or
        the Hub cache offline) like the encoder, so a pushed model comes back with its pooler and MLP.

        Args:
            pooler_type: overrides the saved pooler; for a plain HF encoder it defaults to ``cls`` with a warning.
            mlp_only_train: overrides the saved flag (default False for a plain encoder).
            new_mlp_init: how a ``cls`` MLP absent from the folder starts: ``"encoder_pooler"`` copies the
                encoder's own pretrained pooler (BERT's, as the reference evaluation's ``pooler_output``),
                ``"random"`` draws N(0, initializer_range) like the reference trainer's fresh ``MLPLayer``.
            trust_remote_code: passed to transformers; off by default.
            hf_kwargs: more ``AutoModel.from_pretrained`` options (``torch_dtype``, ``attn_implementation``...).

        Raises:
            FileNotFoundError: a local path that is missing or holds no weights.
            ValueError: an unknown pooler name or ``new_mlp_init``.
        """
        from transformers import AutoTokenizer

        path = str(model_name_or_path)
        if new_mlp_init not in ("encoder_pooler", "random"):
            raise ValueError(f"new_mlp_init must be 'encoder_pooler' or 'random', got {new_mlp_init!r}")
        is_local = _check_model_dir(path)
        hub_cfg = None if is_local else _hub_file(path, SIMCSE_CONFIG_NAME, hf_kwargs)
        cfg = cls.read_simcse_config(path if is_local else hub_cfg.parent) if is_local or hub_cfg else None
        if pooler_type is None:
            if cfg is not None:
                pooler_type = cfg["pooler_type"]
            else:
                pooler_type = "cls"
                logger.warning("%s has no %s; using pooler_type='cls' (pass pooler_type to choose)", path, SIMCSE_CONFIG_NAME)
        get_pooler(pooler_type)  # fail on a bad name before loading weights
        if mlp_only_train is None:
            mlp_only_train = bool(cfg["mlp_only_train"]) if cfg is not None else False
        encoder, hf_pooler = _load_encoder(path, trust_remote_code=trust_remote_code, **hf_kwargs)
        hf_dense = _pooler_dense(hf_pooler)
        tokenizer = AutoTokenizer.from_pretrained(path, trust_remote_code=trust_remote_code,
                                                  **{k: v for k, v in hf_kwargs.items() if k in _HUB_KWARGS})
        model = cls(encoder, pooler_type=pooler_type, mlp_only_train=mlp_only_train, tokenizer=tokenizer, hf_pooler=hf_pooler)
        if model.mlp is not None:
            mlp_file = Path(path) / MLP_WEIGHTS_NAME if is_local else _hub_file(path, MLP_WEIGHTS_NAME, hf_kwargs)
            if mlp_file is not None and mlp_file.is_file():
                from safetensors.torch import load_file

                model.mlp.load_state_dict(load_file(str(mlp_file)))
            elif new_mlp_init == "encoder_pooler" and hf_dense is not None and hf_dense.weight.shape == model.mlp.dense.weight.shape:
                model.mlp.dense.load_state_dict(hf_dense.state_dict())
            elif new_mlp_init == "encoder_pooler" and not mlp_only_train:
                logger.warning("%s has no MLP weights for pooler 'cls'; the MLP is randomly initialised", path)
        return model

    def load_weights(self, path: str | os.PathLike) -> None:
        """Load encoder and MLP weights saved by :meth:`save_pretrained` into this model, in place."""
        from safetensors.torch import load_file

        _check_model_dir(str(path))
        fresh, _ = _load_encoder(str(path), torch_dtype=next(self.encoder.parameters()).dtype)
        self.encoder.load_state_dict(fresh.state_dict())
        if self.mlp is not None:
            mlp_file = Path(path) / MLP_WEIGHTS_NAME
            if not mlp_file.is_file():
                raise FileNotFoundError(f"{mlp_file} is missing: the checkpoint has no MLP for pooler 'cls'")
            self.mlp.load_state_dict(load_file(str(mlp_file)))


# ------------------------------------------------------------------------------ ablations (paper Sec. 3)
DROPOUT_SUFFIXES = ("dropout", "dropout_prob", "dropout_rate")


def set_config_dropout(config, p: float) -> list[str]:
    """Set every dropout probability of an HF ``config`` to ``p`` in place; return the attribute names set.

    An attribute is a dropout probability when its name ends with one of :data:`DROPOUT_SUFFIXES`
    (``dropout``, ``dropout_prob``, ``dropout_rate``) and its value is a float (``None`` values such as
    BERT's unused ``classifier_dropout`` are left alone). For BERT/RoBERTa/MiniLM this is
    ``hidden_dropout_prob`` (embeddings, attention output, feed-forward output) and
    ``attention_probs_dropout_prob`` (attention weights); for DistilBERT ``dropout``, ``attention_dropout``
    and ``seq_classif_dropout``. The config must be changed *before* the model is built: HF modules read
    these values at construction (see :func:`encoder_config_with_dropout`).

    Raises:
        ValueError: ``p`` outside [0, 1), or a config with no float dropout attribute.
    """
    if isinstance(p, bool) or not isinstance(p, (int, float)) or not 0 <= p < 1:
        raise ValueError(f"dropout must be a number in [0, 1), got {p!r}")
    names = sorted(k for k, v in config.to_dict().items()
                   if k.endswith(DROPOUT_SUFFIXES) and isinstance(v, float) and not isinstance(v, bool))
    if not names:
        raise ValueError(f"config of type {type(config).__name__} has no float attribute ending in "
                         f"{DROPOUT_SUFFIXES}; cannot set dropout")
    for k in names:
        setattr(config, k, float(p))
    return names


def encoder_config_with_dropout(path: str, p: float, trust_remote_code: bool = False):
    """``(config, names)``: the ``AutoConfig`` of ``path`` with every dropout probability set to ``p``.

    Pass ``config=config`` to :meth:`SimCSEModel.from_pretrained` (it reaches ``AutoModel.from_pretrained``);
    the saved model's ``config.json`` then records ``p``. Errors: see :func:`set_config_dropout`.
    """
    from transformers import AutoConfig

    config = AutoConfig.from_pretrained(str(path), trust_remote_code=trust_remote_code)
    return config, set_config_dropout(config, p)


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
        import copy

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

    def gradient_checkpointing_enable(self, gradient_checkpointing_kwargs=None):
        for m in (self.first, self.second):
            m.gradient_checkpointing_enable(gradient_checkpointing_kwargs=gradient_checkpointing_kwargs)

    def save_pretrained(self, save_directory: str | os.PathLike, state_dict: dict | None = None) -> None:
        """Save ``first`` into ``save_directory`` and ``second`` into ``save_directory/second_encoder``."""
        self.first.save_pretrained(save_directory)
        self.second.save_pretrained(Path(save_directory) / SECOND_ENCODER_DIR)

    def load_weights(self, path: str | os.PathLike) -> None:
        """Load both encoders from a folder written by :meth:`save_pretrained`."""
        second = Path(path) / SECOND_ENCODER_DIR
        if not second.is_dir():
            raise FileNotFoundError(f"{second} is missing: {path} was not saved by a DualEncoderModel")
        self.first.load_weights(path)
        self.second.load_weights(second)
