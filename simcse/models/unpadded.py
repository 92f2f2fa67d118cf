"""Padding-free ("unpadded") encoder forward: attention kernel, its registration with transformers, and packing.

The encoder runs on the real tokens of a padded (N, L) batch packed as one (1, T) row; the registered attention
function :func:`_unpadded_sdpa` attends the sentences bucket by bucket (docs/performance.md).
:meth:`simcse.models.modeling.SimCSEModel.set_unpadded` turns it on.
"""
from __future__ import annotations

import torch

from simcse.models.dropout import cpu_dropout, uses_cpu_dropout

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
    fast_dropout = uses_cpu_dropout(module)  # set_cpu_dropout is on
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
    :func:`encode_unpadded` packs them. Returns ``(buckets, restore)``: per bucket
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


def _attention_core(query, key, value, key_mask, dropout: float, scaling: float | None, fast_dropout: bool = False):
    """softmax(q k^T * scaling, keys masked by ``key_mask``) -> dropout -> @ v, for (N, h, L, d) tensors.

    On CPU with dropout, plain matmul / softmax / dropout (as transformers' eager attention): torch's SDPA
    has no fused CPU kernel with dropout, and its fallback spends more on mask handling (timings in
    docs/performance.md). Otherwise SDPA (its fused kernels).
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


def register_unpadded_attention() -> None:
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


def encode_unpadded(encoder, input_ids: torch.Tensor, attention_mask: torch.Tensor, output_hidden_states: bool = False,
                    **encoder_kwargs) -> tuple[torch.Tensor, tuple | None]:
    """Run ``encoder`` on the real tokens of a padded (N, L) batch, packed as one (1, T) row.

    The encoder's config must name :data:`UNPADDED_ATTENTION` (registered by :func:`register_unpadded_attention`).
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
    out = encoder(
        input_ids=pack(input_ids),
        position_ids=pack(_padded_position_ids(encoder, input_ids)),
        attention_mask=None,
        output_hidden_states=output_hidden_states,
        return_dict=True,
        **{_LAYOUT_KWARG: _attention_buckets(keep)},
        **extra,
    )

    def unpack(h: torch.Tensor) -> torch.Tensor:  # (1, T, H) -> (N, L, H)
        full = h.new_zeros((rows * width, h.shape[-1])).index_put((flat,), h[0])
        return full.view(rows, width, -1)

    hidden = tuple(unpack(h) for h in out.hidden_states) if out.hidden_states is not None else None
    return unpack(out.last_hidden_state), hidden
