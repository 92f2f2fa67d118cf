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


class _RowGather(torch.autograd.Function):
    """``x.index_select(0, index)`` whose backward is a gather too, not ``index_select``'s scatter-add.

    ``x`` (n, ...) any float dtype; ``index`` (m,) int64 rows of ``x``; ``inverse`` (n,) int64: for each row of
    ``x``, the one output row whose gradient it receives; with ``zero_row`` true, ``inverse`` may name row m
    (an appended zero: that row of ``x`` gets no gradient). Exact when every output row that ``inverse`` does not
    name has a zero gradient -- true in the bucketed attention: padding slots are masked keys (attention
    weight exactly 0) or query rows whose outputs are dropped. torch's own backward (``index_add_``, a
    scatter-add on CPU) costs about ten times a gather of the same size there.
    """

    @staticmethod
    def forward(ctx, x, index, inverse, zero_row: bool):
        ctx.save_for_backward(inverse)
        ctx.zero_row = zero_row
        return x.index_select(0, index)

    @staticmethod
    def backward(ctx, grad):
        (inverse,) = ctx.saved_tensors
        if ctx.zero_row:
            grad = torch.cat([grad, grad.new_zeros((1, *grad.shape[1:]))])
        return grad.index_select(0, inverse), None, None, None


def _unpadded_sdpa(module, query, key, value, attention_mask, dropout: float = 0.0, scaling: float | None = None,
                   **kwargs):
    """Attention function registered with transformers as :data:`UNPADDED_ATTENTION`.

    Called by the encoder's attention layers with packed ``query``/``key``/``value`` of shape (1, heads, T, d),
    where T is the number of real (non-padding) tokens of the batch, and a :class:`_Layout` (the buckets of
    :func:`_attention_buckets`) in the keyword :data:`_LAYOUT_KWARG`. Query, key and value are gathered once
    each, (token, head) rows of d values, straight into every bucket's contiguous (R, heads, W, d) block, R
    sentences of similar length padded to the bucket's longest W; each bucket is attended with a key-padding
    mask and attention dropout ``dropout`` (:func:`_attention_core`), and one more gather puts the real tokens
    back in packed order: returns ``((1, T, heads, d), None)``. Attention thus costs about sum_b R_b * W_b^2
    instead of N * L^2, every other layer of the encoder runs on T tokens instead of N*L, and the only copies
    are the gathers (whose backward is a gather too, :class:`_RowGather`) and one ``cat``. Without the layout
    keyword (a padded call, e.g. the MLM head's) it is transformers' own SDPA attention.
    """
    layout = kwargs.pop(_LAYOUT_KWARG, None)
    if layout is None:
        from transformers.integrations.sdpa_attention import sdpa_attention_forward

        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, **kwargs)
    heads, tokens, d = query.shape[1], query.shape[2], query.shape[3]
    if key.shape[1] != heads:  # grouped-query attention: one key/value head per group
        key = key.repeat_interleave(heads // key.shape[1], dim=1)
        value = value.repeat_interleave(heads // value.shape[1], dim=1)
    buckets, gather, slot_of, token_of_slot = layout.for_heads(heads)
    if not buckets:  # no real token at all
        return query.new_zeros((1, tokens, heads, d)), None

    def rows(x):  # (1, h, T, d) -> (T*h, d), row t*h + j = token t, head j (a view of the projection's output)
        return x.transpose(1, 2).reshape(tokens * heads, x.shape[-1])

    sizes = [r * heads * w for r, w, _ in buckets]
    q, k, v = (_RowGather.apply(rows(x), gather, slot_of, False).split(sizes) for x in (query, key, value))
    fast_dropout = uses_cpu_dropout(module)  # set_cpu_dropout is on
    outs = []
    for (r, w, key_mask), qb, kb, vb in zip(buckets, q, k, v):
        out = _attention_core(qb.view(r, heads, w, d), kb.view(r, heads, w, d), vb.view(r, heads, w, d), key_mask,
                              dropout, scaling, fast_dropout)  # (R, h, W, d)
        outs.append(out.reshape(r * heads * w, d))
    out = torch.cat(outs) if len(outs) > 1 else outs[0]  # (S*h, d)
    out = _RowGather.apply(out, slot_of, token_of_slot, True)  # (T*h, d) in packed order
    return out.view(1, tokens, heads, d), None


class _Layout:
    """The length buckets of one padded batch (:func:`_attention_buckets`), and their (token, head) indices for a
    number of heads (:meth:`for_heads`, computed once per head count and kept: every layer uses them)."""

    def __init__(self, keep: torch.Tensor, max_buckets: int = 4):
        self.base = _attention_buckets(keep, max_buckets)
        self.tokens = int(keep.sum())
        self._by_heads: dict[int, tuple] = {}

    def for_heads(self, heads: int) -> tuple[list[tuple], torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(buckets, gather, slot_of, token_of_slot)`` over (token, head) rows for ``heads`` heads.

        Bucket b's block holds R_b * heads * W_b rows, (row r, head j, position w) at
        ``start_b * heads + (r * heads + j) * W_b + w``, so that it views as a contiguous (R, heads, W, d) tensor;
        ``buckets`` lists ``(R, W, key_mask)``. ``gather`` (S*heads,) int64: the (token, head) row ``t * heads + j``
        each slot holds; ``slot_of`` (T*heads,): each (token, head)'s own slot; ``token_of_slot`` (S*heads,): the
        row of a real slot, T*heads for a padding slot.
        """
        if heads not in self._by_heads:
            buckets, gather, slot_of, token_of_slot = self.base
            head = torch.arange(heads, device=gather.device).view(1, heads, 1)
            gathers, reals, out = [], [], []
            for start, r, w, key_mask in buckets:
                g = gather[start:start + r * w].view(r, 1, w)
                gathers.append((g * heads + head).reshape(-1))
                reals.append(key_mask.view(r, 1, w).expand(r, heads, w).reshape(-1))
                out.append((r, w, key_mask))
            g = torch.cat(gathers) if gathers else gather.new_zeros(0)
            real = torch.cat(reals) if reals else gather.new_zeros(0, dtype=torch.bool)
            total = self.tokens * heads
            slots = torch.empty(total, dtype=torch.long, device=g.device)
            slots[g[real]] = real.nonzero().squeeze(1)
            self._by_heads[heads] = (out, g, slots, torch.where(real, g, total))
        return self._by_heads[heads]


def _attention_buckets(keep: torch.Tensor, max_buckets: int = 4) -> tuple[list[tuple], torch.Tensor, torch.Tensor,
                                                                            torch.Tensor]:
    """Group the rows of a (N, L) bool keep-mask into at most ``max_buckets`` buckets of similar length.

    Rows are sorted by their number of real tokens (descending) and cut into equal-sized groups; each group is
    padded to its own longest row only. Real tokens are numbered in packed (row-major) order, 0..T-1, as
    :func:`encode_unpadded` packs them; the buckets' padded slots are numbered 0..S-1, bucket after bucket, row
    after row. Returns ``(buckets, gather, slot_of, token_of_slot)``: per bucket ``(start, R, W, key_mask
    (R, 1, 1, W) bool)`` (its slots are ``start .. start + R*W - 1``); ``gather`` (S,) int64, the packed token
    each slot holds (a padding slot holds some real token of its row's neighbourhood, masked as a key);
    ``slot_of`` (T,) int64, each token's own slot; ``token_of_slot`` (S,) int64, the token of a real slot and T
    for a padding slot.
    """
    lengths = keep.sum(dim=1)  # (N,)
    total = int(lengths.sum())
    offsets = torch.cumsum(lengths, 0) - lengths  # packed index of each row's first token
    order = torch.argsort(lengths, descending=True, stable=True)
    n = order.numel()
    k = max(1, min(max_buckets, n))
    bounds = [round(i * n / k) for i in range(k + 1)]
    buckets, gathers, reals = [], [], []
    start = 0
    for a, b in zip(bounds[:-1], bounds[1:]):
        rows = order[a:b]
        lens = lengths[rows]
        width = int(lens.max()) if rows.numel() else 0
        if width == 0:
            continue  # only empty rows: no token to attend
        pos = torch.arange(width, device=keep.device)
        valid = pos[None, :] < lens[:, None]  # (R, W)
        gather = (offsets[rows][:, None] + torch.where(valid, pos[None, :], 0)).clamp_(max=max(total - 1, 0))
        buckets.append((start, rows.numel(), width, valid[:, None, None, :]))
        gathers.append(gather.reshape(-1))
        reals.append(valid.reshape(-1))
        start += rows.numel() * width
    empty = torch.zeros(0, dtype=torch.long, device=keep.device)
    gather = torch.cat(gathers) if gathers else empty
    real = torch.cat(reals) if reals else empty.bool()
    token_of_slot = torch.where(real, gather, total)
    slot_of = torch.empty(total, dtype=torch.long, device=keep.device)
    slot_of[gather[real]] = real.nonzero().squeeze(1)
    return buckets, gather, slot_of, token_of_slot


def _attention_core(query, key, value, key_mask, dropout: float, scaling: float | None, fast_dropout: bool = False):
    """softmax(q k^T * scaling, keys masked by ``key_mask``) -> dropout -> @ v, for (N, h, L, d) tensors.

    On CPU, plain matmul / softmax / dropout (as transformers' eager attention): torch's SDPA has no fused CPU
    kernel with dropout, and its fallback spends more on mask handling; without dropout (evaluation) its flash
    kernel is slower than the plain products at these short, bucket-padded lengths (timings in
    docs/performance.md). Elsewhere SDPA (its fused kernels).
    """
    if query.device.type == "cpu":
        scale = scaling if scaling is not None else query.shape[-1] ** -0.5
        scores = torch.matmul(query, key.transpose(-1, -2)) * scale
        scores = scores.masked_fill_(~key_mask, torch.finfo(scores.dtype).min)  # in place: scores is a fresh tensor
        # bf16/fp16 scores give float32 probabilities (a bf16 softmax costs more on CPU); float64 stays float64
        probs = torch.softmax(scores, dim=-1, dtype=torch.promote_types(scores.dtype, torch.float32))
        if dropout > 0:
            probs = cpu_dropout(probs, dropout) if fast_dropout else torch.nn.functional.dropout(probs, p=dropout,
                                                                                                 training=True)
        return torch.matmul(probs.to(value.dtype), value)
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
    Position ids are those the padded batch would get (or ``position_ids`` (N, L) when given); token-level keyword tensors (N, L) are packed the
    same way; attention sees one sentence at a time (:func:`_unpadded_sdpa`). Returns the last hidden state
    (N, L, H) and the hidden states (tuple or None), zero at padding positions (poolers mask them anyway).
    """
    rows, width = input_ids.shape
    keep = attention_mask.bool()
    positions = encoder_kwargs.pop("position_ids", None)  # (N, L) to use instead of the padded batch's own
    flat = keep.reshape(-1).nonzero().squeeze(1)  # (T,) positions of real tokens in the flattened batch

    def pack(t: torch.Tensor) -> torch.Tensor:  # (N, L) -> (1, T)
        return t.reshape(-1)[flat].unsqueeze(0)

    extra = {k: pack(v) if torch.is_tensor(v) and v.shape == input_ids.shape else v for k, v in encoder_kwargs.items()}
    packed_ids = pack(input_ids)
    out = encoder(
        input_ids=packed_ids,
        position_ids=pack(_padded_position_ids(encoder, input_ids) if positions is None else positions),
        # an all-ones mask, not None: given position ids and no mask, transformers >= 5.25 builds a (T, T) mask of
        # the packed sequences it reads from the positions; the layout already separates the sentences
        attention_mask=torch.ones_like(packed_ids),
        output_hidden_states=output_hidden_states,
        return_dict=True,
        **{_LAYOUT_KWARG: _Layout(keep)},
        **extra,
    )

    def unpack(h: torch.Tensor) -> torch.Tensor:  # (1, T, H) -> (N, L, H)
        full = h.new_zeros((rows * width, h.shape[-1])).index_put((flat,), h.squeeze(0))
        return full.view(rows, width, -1)

    hidden = tuple(unpack(h) for h in out.hidden_states) if out.hidden_states is not None else None
    return unpack(out.last_hidden_state), hidden
