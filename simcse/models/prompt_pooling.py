"""Mean pooling without the instruction: sentence-transformers' ``Pooling(include_prompt=False)``.

A model trained or used with a prompt (an instruction prefixed to the text, :meth:`simcse.SimCSEModel.encode`'s
``prompt``, ``simcse train --prompts``) may leave the prompt's tokens out of its mean: they are still encoded and
attended to, but not averaged. The rules are sentence-transformers' (6.2), so a saved folder encodes the same
there:

* the prompt's length is counted on the prompt tokenised alone, with the tokenizer's special tokens, less one
  when its last id is a special token (:func:`prompt_token_count`): a BOS is counted as a prompt token, an
  EOS or ``[SEP]`` after the prompt is not;
* that many positions are dropped from each row's pooling mask from the row's first real token on
  (:func:`exclude_prompt`), whatever the padding side; the prompt and the text are tokenised together, so a
  token that straddles their boundary is counted as the tokenised prompt says;
* without a prompt nothing is left out.
"""
from __future__ import annotations

import torch

# the poolers that reduce token states over the pooling mask (simcse.models.pooling): the means, and
# sentence-transformers' max / weightedmean / mean_sqrt_len_tokens, which leave prompt tokens out alike
MEAN_POOLERS = ("avg", "avg_top2", "avg_first_last", "avg_first_last_embeddings", "max", "weighted_avg",
                "avg_sqrt_len")


def is_mean_pooler(pooler_type: str) -> bool:
    """Whether ``pooler_type`` reduces over the pooling mask (:data:`MEAN_POOLERS`), a concatenation
    (``"avg+max"``) when every part does: then ``include_prompt`` False applies to it."""
    return all(part in MEAN_POOLERS for part in str(pooler_type).split("+"))


def check_include_prompt(include_prompt, pooler_type: str) -> bool:
    """``include_prompt`` as a bool, checked against the pooler.

    Raises:
        ValueError: not a bool, or False with a pooler that is not a mean (one line naming ``include_prompt``):
            ``cls`` reads the first token and ``last_token`` the last one, neither of which is a prompt token to
            leave out.
    """
    if not isinstance(include_prompt, bool):
        raise ValueError(f"include_prompt must be true or false, got {include_prompt!r}")
    if not include_prompt and not is_mean_pooler(pooler_type):
        raise ValueError(f"include_prompt false leaves the prompt's tokens out of a mean; pooler {pooler_type!r} is "
                         f"not a mean: use a pooler of {list(MEAN_POOLERS)} or include_prompt true")
    return include_prompt


def recorded_include_prompt(folder, simcse_config: dict | None, pooler_type: str) -> bool:
    """The ``include_prompt`` a model folder records: its ``simcse_config.json``'s (``simcse_config``, parsed),
    else, for a mean pooler, a sentence-transformers folder's ``1_Pooling/config.json`` (for the other poolers the
    flag changes nothing there), else True. ``folder``: a local folder, or None (a hub name)."""
    from simcse.models.pooling import st_pooling_config

    if simcse_config is not None:
        return bool(simcse_config.get("include_prompt", True))
    found = st_pooling_config(folder) if folder is not None else None
    return not (found is not None and found[0].get("include_prompt") is False and is_mean_pooler(pooler_type))


def prompt_token_count(tokenizer, prompt: str, max_length: int) -> int:
    """How many leading tokens of a row are the prompt's (sentence-transformers' ``_get_prompt_length``): the
    length of ``prompt`` tokenised alone (special tokens added, cut at ``max_length``), less one when its last id
    is one of the tokenizer's special ids. 0 for an empty prompt."""
    if not prompt:
        return 0
    ids = tokenizer(prompt, truncation=True, max_length=max_length)["input_ids"]
    n = len(ids)
    if n and ids[-1] in set(tokenizer.all_special_ids):
        n -= 1
    return n


def exclude_prompt(attention_mask: torch.Tensor, prompt_length) -> torch.Tensor:
    """The pooling mask of rows whose first ``prompt_length`` real tokens are a prompt.

    Args:
        attention_mask: (N, L) int/bool, 1 on real tokens (right or left padding).
        prompt_length: an int, or an (N,) / (N, 1) integer tensor (one count per row; 0: nothing left out).

    Returns:
        A new (N, L) mask of ``attention_mask``'s dtype, 0 on the padding and on each row's first
        ``prompt_length`` positions from its first real token (sentence-transformers'
        ``Pooling._exclude_prompt_from_mask``).
    """
    n = torch.as_tensor(prompt_length, device=attention_mask.device).reshape(-1, 1)  # (N, 1) or (1, 1)
    start = attention_mask.to(torch.int32).argmax(dim=1, keepdim=True)  # (N, 1) first real token (left padding)
    positions = torch.arange(attention_mask.shape[1], device=attention_mask.device)[None, :]
    return attention_mask * (positions >= start + n).to(attention_mask.dtype)
