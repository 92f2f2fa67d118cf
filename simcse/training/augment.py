"""Discrete data augmentations for the SimCSE ablations (paper Section 3, Table 1) and their collator.

Unsupervised SimCSE makes the positive pair from two dropout masks on the same sentence. Table 1 of the paper
compares that with discrete augmentations of the text. Here each example ``x`` becomes the pair
``(x, aug(x))``: the first view (the query) is the sentence itself, the second (the positive) is augmented.
The paper does not say whether one or both views were augmented; we augment one, so that "delete one word"
means what it says.

Word-level augmentations work on the whitespace-separated words of the sentence (``str.split``), before
tokenisation:

* ``crop`` with ratio k: keep one contiguous span of ``max(1, round((1 - k) * n))`` of the ``n`` words,
  starting at a uniformly drawn position ("keep 100-k% of the length");
* ``word_deletion`` with ratio k: delete ``min(n - 1, round(k * n))`` distinct words drawn uniformly,
  keeping the order of the rest ("delete k% words");
* ``delete_one_word``: delete one uniformly drawn word (a one-word sentence is left as it is).

``mlm`` works on tokens, after tokenisation: ``max(1, round(k * m))`` of the ``m`` non-special tokens are
replaced with the prediction of a *frozen* masked-language model (the paper: "use BERT-base to replace k% of
words"). All chosen positions are masked at once, the model is run once, and each chosen token becomes the
highest-scoring vocabulary entry that is neither a special token nor the original token, so every chosen
token really changes. The MLM is the training checkpoint's own pre-trained MLM head, loaded once and never
trained; a checkpoint without one (e.g. a sentence-transformers export such as all-MiniLM-L6-v2) is an error.

In training, every draw is keyed by (seed, epoch, example): :class:`simcse.training.data.EpochKeyedSampler` hands each
example's position ``epoch * n + row`` to :class:`simcse.training.data.KeyedDataset`, which puts it in the example as
``draw_key``, and :class:`AugmentingCollator` seeds the draws of each batch from its keys. So every epoch draws anew, and a
run gives the same batches and the same augmentations with 0 or N DataLoader workers, persistent or not,
and after a resume (HF Trainer sets the sampler's epoch).
"""
from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Callable, Sequence

import torch

from simcse.training.data import DRAW_KEY

__all__ = [
    "AUGMENTATIONS", "Augmentation", "register_augmentation", "get_augmentation", "crop", "word_deletion",
    "delete_one_word", "word_augmenter", "MLMReplacer", "load_mlm_model", "AugmentingCollator",
]


@dataclass(frozen=True)
class Augmentation:
    """A registered augmentation of the positive view (``--augmentation NAME``).

    ``level`` is ``"word"`` (``make(ratio) -> f(sentence, rng) -> sentence``, applied to the text before
    tokenisation) or ``"token"`` (built by the trainer's setup from the checkpoint: ``mlm``). ``uses_ratio``:
    whether ``--augmentation_ratio`` applies (it must then be in (0, 1)).
    """

    name: str
    level: str
    make: Callable[[float], Callable[[str, random.Random], str]] | None
    uses_ratio: bool = True


AUGMENTATIONS: dict[str, Augmentation] = {}


def register_augmentation(name: str, level: str = "word", uses_ratio: bool = True):
    """Register ``make(ratio) -> f(sentence, rng)`` under ``name`` (a decorator), as the pooler and objective
    registries do. Raises ValueError for a taken name or an unknown level."""
    if level not in ("word", "token"):
        raise ValueError(f"augmentation level must be 'word' or 'token', got {level!r}")

    def deco(make):
        if name in AUGMENTATIONS or name == "none":
            raise ValueError(f"augmentation {name!r} is already registered")
        AUGMENTATIONS[name] = Augmentation(name, level, make, uses_ratio)
        return make

    return deco


def get_augmentation(name: str) -> Augmentation:
    """The registered augmentation ``name``.

    Raises:
        ValueError: ``name`` is not registered; the message lists the valid names (and ``none``).
    """
    if name not in AUGMENTATIONS:
        raise ValueError(f"unknown --augmentation {name!r}; expected one of {['none', *AUGMENTATIONS]}")
    return AUGMENTATIONS[name]


def _check_ratio(ratio: float, name: str) -> float:
    if isinstance(ratio, bool) or not isinstance(ratio, (int, float)) or not 0 <= ratio < 1:
        raise ValueError(f"{name} ratio must be a number in [0, 1), got {ratio!r}")
    return float(ratio)


def crop(words: Sequence[str], ratio: float, rng: random.Random) -> list[str]:
    """Keep a random contiguous span of ``max(1, round((1 - ratio) * n))`` of the ``n`` words.

    ``ratio`` in [0, 1) is the fraction removed (paper "crop k%"). An empty input gives an empty list.
    Raises ``ValueError`` for a ratio outside [0, 1).
    """
    ratio = _check_ratio(ratio, "crop")
    n = len(words)
    if n == 0:
        return []
    keep = max(1, round((1.0 - ratio) * n))
    start = rng.randrange(n - keep + 1)
    return list(words[start : start + keep])


def word_deletion(words: Sequence[str], ratio: float, rng: random.Random) -> list[str]:
    """Delete ``min(n - 1, round(ratio * n))`` distinct random words of the ``n``; the rest keep their order.

    At least one word always remains. Raises ``ValueError`` for a ratio outside [0, 1).
    """
    ratio = _check_ratio(ratio, "word_deletion")
    n = len(words)
    drop = min(max(n - 1, 0), round(ratio * n))
    gone = set(rng.sample(range(n), drop)) if drop else set()
    return [w for i, w in enumerate(words) if i not in gone]


def delete_one_word(words: Sequence[str], rng: random.Random) -> list[str]:
    """Delete one uniformly drawn word; a sentence of one word (or none) is returned unchanged."""
    n = len(words)
    if n <= 1:
        return list(words)
    i = rng.randrange(n)
    return list(words[:i]) + list(words[i + 1 :])


@register_augmentation("crop")
def _make_crop(ratio: float):
    _check_ratio(ratio, "crop")
    return lambda s, rng: " ".join(crop(s.split(), ratio, rng))


@register_augmentation("word_deletion")
def _make_word_deletion(ratio: float):
    _check_ratio(ratio, "word_deletion")
    return lambda s, rng: " ".join(word_deletion(s.split(), ratio, rng))


@register_augmentation("delete_one_word", uses_ratio=False)
def _make_delete_one_word(ratio: float):
    return lambda s, rng: " ".join(delete_one_word(s.split(), rng))


register_augmentation("mlm", level="token")(None)  # built from the checkpoint's MLM head: MLMReplacer


def word_augmenter(name: str, ratio: float = 0.1) -> Callable[[str, random.Random], str]:
    """``f(sentence, rng) -> augmented sentence`` for a registered word-level augmentation.

    Words are ``sentence.split()`` and are re-joined with single spaces (the tokenizer sees the same words).

    Raises:
        ValueError: an unknown name, a token-level one (``mlm``: see :class:`MLMReplacer`), or a bad ratio.
    """
    words = [a for a, aug in AUGMENTATIONS.items() if aug.level == "word"]
    if name not in AUGMENTATIONS or AUGMENTATIONS[name].level != "word":
        raise ValueError(f"unknown word-level augmentation {name!r}; expected one of {words}")
    return AUGMENTATIONS[name].make(ratio)


def load_mlm_model(path: str, trust_remote_code: bool = False):
    """The masked-LM model (``AutoModelForMaskedLM``) of checkpoint ``path``, in eval mode, gradients off.

    Raises:
        ValueError: the checkpoint has no (or an incomplete) MLM head, naming missing weights; HF's loader
            would otherwise initialise the head at random without complaint.
    """
    from transformers import AutoModelForMaskedLM

    try:
        mlm, info = AutoModelForMaskedLM.from_pretrained(path, trust_remote_code=trust_remote_code, output_loading_info=True)
    except (ValueError, KeyError) as e:  # an architecture with no masked-LM class
        raise ValueError(f"--augmentation mlm needs a masked-LM head, but {path!r} has no masked-LM architecture: {e}") from e
    prefix = mlm.base_model_prefix + "."
    missing = [k for k in info.get("missing_keys", []) if not k.startswith(prefix) and "pooler" not in k]
    if missing:
        raise ValueError(
            f"--augmentation mlm needs a masked-LM head, but checkpoint {path!r} has none "
            f"(missing: {sorted(missing)[:4]}); use a checkpoint trained with MLM such as bert-base-uncased"
        )
    mlm.eval()
    mlm.requires_grad_(False)
    return mlm


class MLMReplacer:
    """Replace ``ratio`` of the non-special tokens of each sentence with a frozen MLM's predictions.

    Args:
        mlm: an ``AutoModelForMaskedLM`` (see :func:`load_mlm_model`); run on CPU under ``torch.no_grad``.
        mask_token_id: the tokenizer's [MASK] id.
        special_ids: ids never chosen and never predicted ([CLS], [SEP], [PAD], [MASK], ...).
        ratio: fraction k in (0, 1) of non-special tokens to replace (at least one per sentence).

    ``__call__(input_ids, rng)`` takes a list of token-id lists and returns new lists of the same lengths in
    which exactly ``max(1, round(k * m))`` positions per sentence differ (``m`` non-special tokens; a
    sentence with none is unchanged).
    """

    def __init__(self, mlm, mask_token_id: int, special_ids: Sequence[int], ratio: float = 0.15):
        if mask_token_id is None:
            raise ValueError("--augmentation mlm needs a tokenizer with a mask token")
        self.ratio = _check_ratio(ratio, "mlm")
        if self.ratio == 0:
            raise ValueError("mlm ratio must be > 0")
        self.mlm = mlm
        self.mask_token_id = int(mask_token_id)
        self.special_ids = sorted(set(int(i) for i in special_ids))

    @torch.no_grad()
    def __call__(self, input_ids: list[list[int]], rng: random.Random) -> list[list[int]]:
        if not input_ids:
            return []
        longest = max(len(x) for x in input_ids)
        ids = torch.zeros(len(input_ids), longest, dtype=torch.long)
        mask = torch.zeros_like(ids)
        chosen: list[list[int]] = []
        for i, row in enumerate(input_ids):
            ids[i, : len(row)] = torch.as_tensor(row, dtype=torch.long)
            mask[i, : len(row)] = 1
            cand = [j for j, t in enumerate(row) if t not in self.special_ids]
            k = max(1, round(self.ratio * len(cand))) if cand else 0
            chosen.append(sorted(rng.sample(cand, k)))
        masked = ids.clone()
        for i, pos in enumerate(chosen):
            masked[i, pos] = self.mask_token_id
        device = next(self.mlm.parameters()).device
        logits = self.mlm(input_ids=masked.to(device), attention_mask=mask.to(device)).logits.float().cpu()  # (B, L, V)
        vocab = logits.shape[-1]
        banned = torch.as_tensor([s for s in self.special_ids if s < vocab], dtype=torch.long)
        logits[..., banned] = float("-inf")
        out = [list(row) for row in input_ids]
        for i, pos in enumerate(chosen):
            for j in pos:
                scores = logits[i, j].clone()
                scores[ids[i, j]] = float("-inf")  # a real replacement, never the original token
                out[i][j] = int(scores.argmax())
        return out


@dataclass
class AugmentingCollator:
    """Collate raw sentences into (B, 2, L) batches whose second view is augmented.

    Examples are mappings with a text column ``text_column``. View 0 is the tokenised sentence, view 1 the
    tokenised ``word_augment(sentence)`` (word-level) or ``token_augment(view-0 ids)`` (``mlm``). Tokenisation
    truncates to ``max_seq_length``; padding and the output keys are those of ``base``
    (:class:`simcse.training.data.ContrastiveCollator`). Examples that carry a ``draw_key`` (from :class:`KeyedDataset`)
    get their draws from ``random.Random`` seeded by ``seed`` and the batch's keys: the same whichever process
    collates the batch. Without keys, draws come from one ``random.Random(seed)`` stream (inside a DataLoader
    worker, ``seed`` and the worker id). The ``mlm`` augmenter runs its model on the CPU inside the collator.

    Raises:
        ValueError: neither or both of ``word_augment``/``token_augment`` given; an example without the
            text column.
    """

    tokenizer: object
    base: object
    max_seq_length: int = 32
    word_augment: Callable[[str, random.Random], str] | None = None
    token_augment: Callable[[list[list[int]], random.Random], list[list[int]]] | None = None
    text_column: str = "sent0"
    seed: int = 0
    rng: random.Random = field(init=False, repr=False)

    def __post_init__(self):
        if (self.word_augment is None) == (self.token_augment is None):
            raise ValueError("give exactly one of word_augment and token_augment")
        self.rng = random.Random(self.seed)

    def __call__(self, features: list[dict]) -> dict[str, torch.Tensor]:
        worker = torch.utils.data.get_worker_info()
        if worker is not None and not getattr(self, "_worker_seeded", False):
            # each DataLoader worker holds a copy of this collator: give each its own stream
            self.rng = random.Random(self.seed * 1_000_003 + worker.id + 1)
            self._worker_seeded = True
        try:
            texts = [f[self.text_column] for f in features]
        except KeyError:
            raise ValueError(f"AugmentingCollator needs a {self.text_column!r} text column; got keys "
                             f"{sorted(features[0]) if features else []}") from None
        keys = [f.get(DRAW_KEY) for f in features]
        keyed = all(k is not None for k in keys)
        tok = lambda xs: self.tokenizer(xs, truncation=True, max_length=self.max_seq_length)  # noqa: E731
        first = tok(texts)
        if self.word_augment is not None:
            rngs = [random.Random(f"{self.seed}:{k}") for k in keys] if keyed else [self.rng] * len(texts)
            second = tok([self.word_augment(t, r) for t, r in zip(texts, rngs)])
        else:
            rng = random.Random(f"{self.seed}:{','.join(map(str, keys))}") if keyed else self.rng
            new_ids = self.token_augment(first["input_ids"], rng)
            second = {k: [list(v) for v in first[k]] for k in first.keys()}
            second["input_ids"] = new_ids
        names = [k for k in ("input_ids", "attention_mask", "token_type_ids") if k in first]
        feats = [{k: [first[k][i], second[k][i]] for k in names} for i in range(len(texts))]
        return self.base(feats)

