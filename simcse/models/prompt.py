"""Prompt-template sentence embeddings (PromptBERT, Jiang et al., EMNLP 2022, arXiv 2201.04337).

A sentence ``s`` is wrapped in a template such as ``This sentence : "{sentence}" means {mask} .`` and its
embedding is the last-layer state of the template's ``[MASK]`` token (the ``prompt_mask`` poolers of
:mod:`simcse.models.pooling`). *Template denoising* (paper Section 5, the official ``--mask_embedding_sentence_delta``)
subtracts the ``[MASK]`` state of the template alone, encoded with the position ids that a sentence of the same
token length would give the template's suffix.

The template is applied to token ids, inside the model (as the official ``sentemb_forward`` does at evaluation):
the tokenizer makes ``[CLS] s [SEP]`` as usual and :meth:`BoundPrompt.wrap` inserts the template's prefix and
suffix ids, so every surface that tokenises normally (``encode``, the evaluator, the trainer's collator) gets
the template. Ids are those of the official code: prefix = ``tokenizer.encode(prefix)[:-1]`` (with ``[CLS]``),
suffix = ``tokenizer.encode(suffix)[1:]`` (with ``[SEP]``), the sentence's ids in between.

Templates are written with ``{sentence}`` and ``{mask}`` (the tokenizer's mask token), or in the official
scripts' notation (``*cls*_This_sentence_:_"*sent_0*"_means*mask*.*sep+*``; ``_`` is a space), which
:func:`parse_template` converts.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from simcse.models.pooling import PROMPT_POOLERS

import torch

__all__ = ["PromptConfig", "BoundPrompt", "Prompting", "parse_template", "prompt_forward", "DENOISE_POSITIONS"]

# PromptConfig.denoise_positions: the official rule first
DENOISE_POSITIONS = ("first_template", "own_template")


def parse_template(template: str) -> str:
    """``template`` in this library's notation (``... {sentence} ... {mask} ...``).

    The official notation (``*cls*``, ``*sent_0*``, ``*mask*``, ``*sep+*``, ``_`` for a space) is converted.

    Raises:
        ValueError: not a str, or not exactly one ``{sentence}`` and one ``{mask}`` (names the template).
    """
    if not isinstance(template, str):
        raise ValueError(f"prompt template must be a str, got {type(template).__name__}")
    t = template
    if "*sent_0*" in t:
        t = (t.replace("*cls*", "").replace("*sep+*", "").replace("*mask*", "{mask}")
             .replace("*sent_0*", "{sentence}").replace("_", " "))
    if t.count("{sentence}") != 1 or t.count("{mask}") != 1 or t.index("{mask}") < t.index("{sentence}"):
        raise ValueError(f"prompt template {template!r} must hold one {{sentence}} followed by one {{mask}}, e.g. "
                         "'This sentence : \"{sentence}\" means {mask} .'")
    return t


@dataclass(frozen=True)
class PromptConfig:
    """What a prompt model records (``simcse_config.json`` key ``prompt``).

    Attributes:
        templates: ``templates[0]`` is the inference template; in training view ``v`` uses
            ``templates[min(v, len - 1)]`` (the official ``--mask_embedding_sentence_different_template``: view 0
            the first template, views 1.. the second).
        denoise: subtract the template-only ``[MASK]`` state in training (official ``..._delta``).
        denoise_at_inference: also when encoding (the official supervised evaluation; its unsupervised one does not).
        denoise_positions: where the template-only rows' position shift starts. ``"first_template"`` (the official
            ``get_delta``, prompt_bert/models.py: ``d_position_ids[:, len(cls.bs)+1:]`` with ``cls.bs`` the *first*
            template's prefix, for both templates) or ``"own_template"`` (each template from its own prefix: the
            suffix of a second template whose prefix is shorter or longer than the first's is then shifted from
            its own first suffix token). Equal when the templates' prefixes have the same number of tokens, as the
            official BERT and RoBERTa pairs do.
    """

    templates: tuple[str, ...]
    denoise: bool = True
    denoise_at_inference: bool = False
    denoise_positions: str = "first_template"

    def __post_init__(self):
        if isinstance(self.templates, str) or not self.templates:
            raise ValueError(f"prompt templates must be a non-empty list of str, got {self.templates!r}")
        if self.denoise_positions not in DENOISE_POSITIONS:
            raise ValueError(f"prompt denoise_positions must be one of {list(DENOISE_POSITIONS)}, "
                             f"got {self.denoise_positions!r}")
        object.__setattr__(self, "templates", tuple(parse_template(t) for t in self.templates))

    def to_dict(self) -> dict:
        return {"templates": list(self.templates), "denoise": self.denoise,
                "denoise_at_inference": self.denoise_at_inference, "denoise_positions": self.denoise_positions}

    @classmethod
    def from_dict(cls, d: dict) -> "PromptConfig":
        """Raises ValueError on unknown keys (names them). A folder written before ``denoise_positions`` existed
        reads as ``"first_template"`` (inference uses the first template only, where both rules agree)."""
        unknown = set(d) - {"templates", "denoise", "denoise_at_inference", "denoise_positions"}
        if unknown:
            raise ValueError(f"prompt config has unknown keys {sorted(unknown)}")
        return cls(tuple(d["templates"]), bool(d.get("denoise", True)), bool(d.get("denoise_at_inference", False)),
                   d.get("denoise_positions", "first_template"))


@dataclass
class BoundPrompt:
    """A template tokenised by one tokenizer: prefix ids (with the leading special token), suffix ids (with the
    trailing one) and the ``[MASK]``'s index in the suffix."""

    prefix: torch.Tensor  # (P,) int64, starts with [CLS]
    suffix: torch.Tensor  # (S,) int64, ends with [SEP]
    mask_index: int  # index of [MASK] in suffix
    pad_id: int
    _device_cache: dict = field(default_factory=dict)

    @classmethod
    def bind(cls, template: str, tokenizer) -> "BoundPrompt":
        """Tokenise ``template`` as the official code does.

        Raises:
            ValueError: the tokenizer has no mask token, does not wrap a sentence in one leading and one trailing
                special token, or the suffix does not tokenise to exactly one mask token.
        """
        mask = getattr(tokenizer, "mask_token", None)
        if mask is None:
            raise ValueError(f"a prompt template needs a tokenizer with a mask token; {type(tokenizer).__name__} has none")
        empty = tokenizer.encode("")
        if len(empty) != 2:
            raise ValueError(f"a prompt template needs a tokenizer that wraps a sentence in 2 special tokens "
                             f"([CLS] ... [SEP]); {type(tokenizer).__name__} gives {empty} for ''")
        t = parse_template(template)
        before, after = t.split("{sentence}")
        if _is_bpe(tokenizer):
            before = before.strip()
        after = after.replace("{mask}", mask)
        prefix = tokenizer.encode(before)[:-1]
        suffix = tokenizer.encode(after)[1:]
        hits = [i for i, x in enumerate(suffix) if x == tokenizer.mask_token_id]
        if len(hits) != 1:
            raise ValueError(f"prompt template {template!r}: its suffix {after!r} tokenises to {len(hits)} mask tokens, "
                             "expected 1")
        pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
        return cls(torch.tensor(prefix, dtype=torch.long), torch.tensor(suffix, dtype=torch.long), hits[0], int(pad))

    @property
    def extra_tokens(self) -> int:
        """Tokens the template adds to a ``[CLS] s [SEP]`` row."""
        return len(self.prefix) + len(self.suffix) - 2

    def wrap(self, input_ids: torch.Tensor, attention_mask: torch.Tensor):
        """Rows ``[CLS] s [SEP] pad..`` (N, L) -> ``[CLS] prefix s suffix [SEP] pad..`` (N, L + extra_tokens).

        Returns ``(ids (N, W) int64, attention_mask (N, W) int64, mask_positions (N,) int64, sentence_lengths (N,)
        int64)``; ``sentence_lengths`` counts the sentence's tokens (no special tokens)."""
        dev = input_ids.device
        prefix, suffix = self.prefix.to(dev), self.suffix.to(dev)
        rows, width = input_ids.shape
        p, s = len(prefix), len(suffix)  # p includes [CLS], s includes [SEP]
        n = attention_mask.sum(-1).long()  # (N,) tokens incl. [CLS] and [SEP]
        sent = (n - 2).clamp(min=0)
        out_w = width + p + s - 2
        out = torch.full((rows, out_w), self.pad_id, dtype=torch.long, device=dev)
        out[:, :p] = prefix
        cols = torch.arange(width - 1, device=dev)  # source columns 1.. of the sentence
        src = input_ids[:, 1:]
        keep = cols[None, :] < sent[:, None]
        r, c = keep.nonzero(as_tuple=True)
        out[r, c + p] = src[r, c]
        tail = (p + sent)[:, None] + torch.arange(s - 1, device=dev)[None, :]  # suffix without [SEP] ...
        out.scatter_(1, tail, suffix[:-1].expand(rows, s - 1))
        last = (p + sent + s - 1)[:, None]  # ... then the row's own last token ([SEP])
        out.scatter_(1, last, input_ids.gather(1, (n - 1).clamp(min=0)[:, None]))
        total = p + sent + s  # (N,)
        mask = (torch.arange(out_w, device=dev)[None, :] < total[:, None]).long()
        return out, mask, p + sent + self.mask_index, sent

    def template_only(self, lengths: torch.Tensor, base_positions: torch.Tensor, shift_from: int | None = None):
        """The denoising rows: the bare template ``[CLS] prefix suffix [SEP]`` once per entry of ``lengths`` (R,),
        with the position ids from index ``shift_from`` on shifted by that length (official ``get_delta``:
        ``d_position_ids[:, len(cls.bs)+1:] += length``, ``cls.bs`` the first template's prefix without
        ``[CLS]``; None: this template's own prefix length, ``[CLS]`` included). ``base_positions`` (T,) are the
        template's unshifted position ids. Returns ``(ids (R, T), position_ids (R, T), mask_positions (R,))``."""
        dev = lengths.device
        ids = torch.cat([self.prefix.to(dev), self.suffix.to(dev)])[None, :].expand(len(lengths), -1)
        pos = base_positions.to(dev)[None, :].repeat(len(lengths), 1)
        pos[:, len(self.prefix) if shift_from is None else shift_from:] += lengths[:, None]
        mpos = torch.full_like(lengths, len(self.prefix) + self.mask_index)
        return ids, pos, mpos


class Prompting:
    """The prompt methods of :class:`simcse.SimCSEModel` (``self.prompt``, ``self.pooler``, ``self.tokenizer``)."""

    def set_prompt(self, prompt: PromptConfig | dict | None) -> None:
        """Set (or with None clear) the prompt template(s) a ``prompt_mask`` pooler wraps sentences in.

        Raises:
            ValueError: the pooler is not a ``prompt_mask`` pooler, or the template does not fit the tokenizer
                (no mask token, not exactly one ``[MASK]``...; :meth:`simcse.models.prompt.BoundPrompt.bind`).
        """
        if prompt is not None and self.pooler.name not in PROMPT_POOLERS:
            raise ValueError(f"a prompt template needs pooler_type one of {list(PROMPT_POOLERS)}, got {self.pooler.name!r}")
        self.prompt = PromptConfig.from_dict(prompt) if isinstance(prompt, dict) else prompt
        self._bound = None
        if self.prompt is not None and self.tokenizer is not None:
            self.bound_prompts()  # a template that does not fit the tokenizer fails here, not at the first batch

    def bound_prompts(self) -> list[BoundPrompt]:
        """The prompt's templates tokenised by this model's tokenizer (cached).

        Raises:
            ValueError: no prompt set (names ``set_prompt``), or no tokenizer.
        """
        if self.prompt is None:
            raise ValueError(f"pooler_type {self.pooler.name!r} needs a prompt template: SimCSEModel.set_prompt(...) or "
                             "from_pretrained(..., prompt={'templates': [...]}) (training: --loss promptbert)")
        if self.tokenizer is None:
            raise ValueError("a prompt template needs the model's tokenizer")
        if self._bound is None:
            self._bound = [BoundPrompt.bind(t, self.tokenizer) for t in self.prompt.templates]
        return self._bound

    @property
    def takes_views(self) -> bool:
        """True for a prompt model with per-view templates: the trainer then hands ``forward`` (B, V, L) views."""
        return self.prompt is not None and len(self.prompt.templates) > 1


def _is_bpe(tokenizer) -> bool:
    """RoBERTa-style byte-level BPE (the official code strips the prefix's spaces for RoBERTa)."""
    return "roberta" in type(tokenizer).__name__.lower() or "gpt2" in type(tokenizer).__name__.lower()


def _mask_states(model, ids, mask, mpos, position_ids=None):
    """Last-layer states (N, H) at ``mpos`` of the encoder run on ``ids`` (N, W) / ``mask``."""
    if model.unpadded:
        from simcse.models.unpadded import encode_unpadded

        kw = {} if position_ids is None else {"position_ids": position_ids}
        last, _ = encode_unpadded(model.encoder, ids, mask, False, **kw)
    else:
        # the mask is always passed: given position ids and no mask, transformers >= 5.25 reads a jump in the
        # positions (the template-only rows' shifted suffix) as the start of another packed sequence and stops
        # attention across it; the official code (transformers 4) attends over the whole row
        last = model.encoder(input_ids=ids, attention_mask=mask, position_ids=position_ids,
                             return_dict=True).last_hidden_state
    return last[torch.arange(len(ids), device=ids.device), mpos]


def prompt_forward(model, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """The ``[MASK]`` embeddings of a :class:`simcse.SimCSEModel` with a prompt (before its MLP).

    ``input_ids``/``attention_mask``: (N, L) rows (every row gets ``templates[0]``) or (B, V, L) views (view v gets
    ``templates[min(v, len-1)]``), tokenised as ``[CLS] s [SEP]``. Denoising applies in training when
    ``prompt.denoise``, when encoding when ``prompt.denoise_at_inference``; the template-only forward then
    runs with gradients (official default, ``--mask_embedding_sentence_delta_freeze`` off), once per distinct
    sentence length and template. Returns (N, H) or (B, V, H) in the encoder's dtype.
    """
    views = input_ids.dim() == 3
    if views:
        b, v, length = input_ids.shape
        groups = [(input_ids[:, i], attention_mask[:, i], min(i, len(model.prompt.templates) - 1)) for i in range(v)]
    else:
        groups = [(input_ids, attention_mask, 0)]
    bounds = model.bound_prompts()
    wrapped = [bounds[t].wrap(ids, m) for ids, m, t in groups]
    width = max(w[0].shape[1] for w in wrapped)
    ids = torch.cat([torch.nn.functional.pad(w[0], (0, width - w[0].shape[1]), value=bounds[0].pad_id) for w in wrapped])
    mask = torch.cat([torch.nn.functional.pad(w[1], (0, width - w[1].shape[1])) for w in wrapped])
    offsets = torch.cat([w[2] for w in wrapped])
    pooled = _mask_states(model, ids, mask, offsets)  # (G*N, H)
    denoise = model.prompt.denoise if model.training else model.prompt.denoise_at_inference
    if denoise:
        parts = []
        for (_, _, t), w in zip(groups, wrapped):
            sent = w[3]
            uniq, inverse = torch.unique(sent, return_inverse=True)
            # unshifted positions 0..T-1: the official get_delta uses arange for every architecture; the shift
            # starts after the first template's prefix for every template (official) or after this one's own
            shift_from = len(bounds[0].prefix) if model.prompt.denoise_positions == "first_template" else None
            d_ids, d_pos, d_mpos = bounds[t].template_only(uniq, torch.arange(len(bounds[t].prefix) + len(bounds[t].suffix)),
                                                           shift_from)
            delta = _mask_states(model, d_ids, torch.ones_like(d_ids), d_mpos, position_ids=d_pos)  # (R, H)
            parts.append(delta[inverse])
        pooled = pooled - torch.cat(parts)
    if views:
        return pooled.view(v, b, -1).transpose(0, 1)
    return pooled
