"""Sentence poolers: one registry, used by training, evaluation and encoding.

Each pooler maps the encoder's outputs to one vector per sentence:

    fn(last_hidden (N, L, H), attention_mask (N, L), hidden_states tuple[(N, L, H)] | None) -> (N, H)

``hidden_states`` is the HF tuple ``(embeddings, layer_1, ..., layer_n)``; it is only computed when
the pooler asks for it (``Pooler.needs_hidden_states``). The names and semantics follow the SimCSE
reference implementation (``models.py: Pooler``):

* ``cls``: last-layer [CLS] vector; :class:`SimCSEModel` applies the MLP head (:class:`MLPHead`) on top.
* ``cls_before_pooler``: last-layer [CLS] vector, no MLP.
* ``avg``: attention-masked mean of the last layer.
* ``avg_top2``: masked mean of the average of the last two layers.
* ``avg_first_last``: masked mean of the average of the *first transformer layer's output*
  (``hidden_states[1]``; ``hidden_states[0]`` is the embedding layer and is not used) and the last layer.
  This is the reference code's ``avg_first_last`` after its fix.
* ``last_token``: the last-layer state of each sentence's last real token (the position of the last 1 of the
  attention mask, so right and left padding give the same vector): the pooler of decoder LLM embedders
  (E5-mistral, GTE-Qwen; sentence-transformers' ``pooling_mode_lasttoken``), whose last token has attended to
  the whole sentence under causal attention.
* ``prompt_mask`` / ``prompt_mask_before_pooler``: the last-layer state of the ``[MASK]`` token of a prompt
  template wrapped around the sentence (PromptBERT; :mod:`simcse.models.prompt`), with / without the MLP head
  (like ``cls`` / ``cls_before_pooler``).
* ``avg_first_last_embeddings``: masked mean of the average of the *embedding layer's output*
  (``hidden_states[0]``) and the last layer: what the paper's printed "first-last avg." rows (Tables 1, 6 and
  the BERT/RoBERTa baselines of Table 5) computed, per the reference README's note on that bug.
* ``max``, ``weighted_avg``, ``avg_sqrt_len``: sentence-transformers' ``Pooling`` modes ``max``,
  ``weightedmean`` and ``mean_sqrt_len_tokens`` over the last layer (the per-dimension maximum over the real
  tokens; the mean weighted by token position 1..L; the sum divided by the square root of the token count), as
  its ``Pooling._forward_padded`` (6.2) computes them, for the folders it saves and for training.
* ``a+b`` (e.g. ``cls_before_pooler+avg``): the poolers ``a``, ``b``... concatenated, (N, k*H), as
  sentence-transformers concatenates the modes of one ``Pooling`` (``pooling_mode=("cls", "mean")``), in the
  order named (:func:`get_pooler`).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch
from torch import nn


def _masked_mean(hidden: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    # hidden (N, L, H), attention_mask (N, L) -> (N, H); padding positions contribute nothing.
    mask = attention_mask.unsqueeze(-1).to(hidden.dtype)  # (N, L, 1)
    return (hidden * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1.0)


@dataclass(frozen=True)
class Pooler:
    """A registered pooler: ``fn`` computes (N, width * H) from the encoder outputs (``width`` 1 but for a
    concatenation of poolers, :func:`get_pooler`)."""

    name: str
    fn: Callable[[torch.Tensor, torch.Tensor, tuple | None], torch.Tensor]
    needs_hidden_states: bool
    uses_mlp: bool
    width: int = 1


POOLERS: dict[str, Pooler] = {}


def _register(name: str, needs_hidden_states: bool = False, uses_mlp: bool = False):
    def deco(fn):
        POOLERS[name] = Pooler(name, fn, needs_hidden_states, uses_mlp)
        return fn

    return deco


@_register("cls", uses_mlp=True)
@_register("cls_before_pooler")
def _cls(last_hidden, attention_mask, hidden_states):
    return last_hidden[:, 0]  # (N, H)


@_register("avg")
def _avg(last_hidden, attention_mask, hidden_states):
    return _masked_mean(last_hidden, attention_mask)


@_register("last_token")
def _last_token(last_hidden, attention_mask, hidden_states):
    # index of the last 1 of each row of the mask: argmax of position * mask (ties impossible: positions grow)
    positions = torch.arange(attention_mask.shape[1], device=attention_mask.device)
    last = (positions * attention_mask.to(positions.dtype)).argmax(dim=1)  # (N,)
    return last_hidden[torch.arange(last_hidden.shape[0], device=last_hidden.device), last]  # (N, H)


@_register("max")
def _max(last_hidden, attention_mask, hidden_states):
    # sentence-transformers' "max": padding (mask 0) set to the lowest value of the dtype, then the max over tokens
    # (6.2 uses -inf; any row with one real token gives the same vector)
    fill = torch.finfo(last_hidden.dtype).min
    return last_hidden.masked_fill(attention_mask.unsqueeze(-1) == 0, fill).max(dim=1).values  # (N, H)


@_register("weighted_avg")
def _weighted_avg(last_hidden, attention_mask, hidden_states):
    # sentence-transformers' "weightedmean": token j (0-based, from the row's start: rows are right-padded) weighs
    # j + 1; the pooling mask (prompt tokens left out or not) says which tokens count, with their original weights
    # weights and sums in float32 for a half-precision encoder (bf16 counts integers exactly only up to 256)
    acc = torch.float32 if last_hidden.dtype in (torch.float16, torch.bfloat16) else last_hidden.dtype
    weights = torch.arange(1, last_hidden.shape[1] + 1, device=last_hidden.device, dtype=acc)
    w = attention_mask.to(acc) * weights[None, :]  # (N, L)
    out = (last_hidden.to(acc) * w.unsqueeze(-1)).sum(dim=1) / w.sum(dim=1, keepdim=True).clamp(min=1e-9)
    return out.to(last_hidden.dtype)


@_register("avg_sqrt_len")
def _avg_sqrt_len(last_hidden, attention_mask, hidden_states):
    # sentence-transformers' "mean_sqrt_len_tokens": the masked sum divided by sqrt(number of pooled tokens)
    mask = attention_mask.unsqueeze(-1).to(last_hidden.dtype)  # (N, L, 1)
    return (last_hidden * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1.0).sqrt()


@_register("avg_top2", needs_hidden_states=True)
def _avg_top2(last_hidden, attention_mask, hidden_states):
    return _masked_mean((hidden_states[-1] + hidden_states[-2]) / 2.0, attention_mask)


@_register("avg_first_last", needs_hidden_states=True)
def _avg_first_last(last_hidden, attention_mask, hidden_states):
    return _masked_mean((hidden_states[1] + hidden_states[-1]) / 2.0, attention_mask)


@_register("avg_first_last_embeddings", needs_hidden_states=True)
def _avg_first_last_embeddings(last_hidden, attention_mask, hidden_states):
    return _masked_mean((hidden_states[0] + hidden_states[-1]) / 2.0, attention_mask)


PROMPT_POOLERS = ("prompt_mask", "prompt_mask_before_pooler")


@_register("prompt_mask", uses_mlp=True)
@_register("prompt_mask_before_pooler")
def _prompt_mask(last_hidden, attention_mask, hidden_states):
    # The [MASK] state of a prompt template: SimCSEModel computes it (simcse.models.prompt.prompt_forward), as
    # the template is inserted into the token ids before the encoder runs.
    raise ValueError("the prompt_mask poolers need the model's prompt template; use SimCSEModel (set_prompt)")


def get_pooler(name: str) -> Pooler:
    """Return the registered pooler ``name``, or for ``"a+b[+...]"`` the concatenation of registered poolers
    ``a``, ``b``...: ``fn`` gives ``torch.cat([a(...), b(...)], dim=-1)``, (N, k*H), and ``width`` k
    (sentence-transformers' ``Pooling`` with several modes, which concatenates them in the order given).

    Raises:
        ValueError: ``name`` is not registered; the message lists the valid names. For a concatenation: a part
            that is not registered, or one with the ``cls`` MLP or a prompt template (``cls``, ``prompt_mask*``:
            their heads act on one H-vector), one line naming it.
    """
    if name in POOLERS:
        return POOLERS[name]
    if isinstance(name, str) and "+" in name:
        return _concatenation(name)
    raise ValueError(f"unknown pooler_type {name!r}; expected one of {sorted(POOLERS)} (or several of them joined "
                     "by '+', concatenated)")


def _concatenation(name: str) -> Pooler:
    """The pooler ``"a+b[+...]"`` of :func:`get_pooler`."""
    parts = name.split("+")
    for part in parts:
        if part not in POOLERS:
            raise ValueError(f"unknown pooler {part!r} in pooler_type {name!r}; expected poolers of "
                             f"{sorted(POOLERS)} joined by '+'")
        if POOLERS[part].uses_mlp or part in PROMPT_POOLERS:
            raise ValueError(f"pooler {part!r} cannot be concatenated (pooler_type {name!r}): its MLP head or prompt "
                             "template acts on one vector; concatenate poolers without them (cls_before_pooler, avg, "
                             "max, ...)")
    poolers = [POOLERS[p] for p in parts]

    def fn(last_hidden, attention_mask, hidden_states):
        return torch.cat([p.fn(last_hidden, attention_mask, hidden_states) for p in poolers], dim=-1)

    return Pooler(name, fn, any(p.needs_hidden_states for p in poolers), False, width=len(parts))


class MLPHead(nn.Module):
    """The ``cls`` pooler's MLP: Linear(H, H) + Tanh (reference ``MLPLayer``, paper Section 3).

    Input (N, H) float, output (N, H) same dtype.
    """

    def __init__(self, hidden_size: int):
        super().__init__()
        self.dense = nn.Linear(hidden_size, hidden_size)
        self.activation = nn.Tanh()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.activation(self.dense(x))


def recorded_pooler(folder) -> tuple[str, str] | None:
    """The pooler a local model folder records, as ``(pooler name, file it is read from)``, or None.

    * ``simcse_config.json`` (a folder saved by simcse): its ``pooler_type``.
    * a sentence-transformers folder (``modules.json``: a Transformer, a Pooling, any Dense modules and optionally
      a Normalize module): ``1_Pooling/config.json``'s mode read as :data:`simcse.models.st_files.ST_MODE_POOLERS`
      says (mean -> ``avg``, cls -> ``cls_before_pooler``, the [CLS] vector without the BERT pooler, lasttoken ->
      ``last_token``, max, weightedmean -> ``weighted_avg``, mean_sqrt_len_tokens -> ``avg_sqrt_len``), several
      modes as those poolers joined by ``+`` (``cls_before_pooler+avg``)
      (:func:`simcse.models.st_files.read_st_pipeline`).

    A hub name or a folder with neither file gives None: nothing is guessed from the model's name (the
    reference tool picked ``cls_before_pooler`` for names containing "unsup").

    Raises:
        ValueError: a sentence-transformers folder whose pipeline simcse cannot encode alike: a module other than
            Transformer, Pooling, Dense and Normalize (``LayerNorm``...), a Dense module simcse does not apply, or a
            Pooling mode sentence-transformers 6.2 does not have; the message names the module or file.
    """
    import json
    from pathlib import Path

    from simcse.models.st_files import read_st_pipeline

    root = Path(folder)
    if not root.is_dir():
        return None
    cfg = root / "simcse_config.json"
    if cfg.is_file():
        name = json.loads(cfg.read_text()).get("pooler_type")
        return (name, str(cfg)) if name else None
    pipeline = read_st_pipeline(root)
    if pipeline is None:
        return None
    if pipeline.pooler is None:
        raise ValueError(pipeline.unsupported_pooling(folder))
    return pipeline.pooler, pipeline.pooling_file


# sentence-transformers' boolean keys (every release before 6) and the mode each one names in 6.x's ``pooling_mode``
def st_pooling_config(folder) -> tuple[dict, str] | None:
    """``(1_Pooling/config.json as a dict, its path)`` of a local sentence-transformers folder
    (:func:`simcse.models.st_files.read_st_pipeline`), else None.

    Raises:
        ValueError: as :func:`simcse.models.st_files.read_st_pipeline`.
    """
    from simcse.models.st_files import read_st_pipeline

    pipeline = read_st_pipeline(folder)
    return (pipeline.pooling_config, pipeline.pooling_file) if pipeline is not None else None


def pooler_to_use(folder, requested: str | None, option: str = "pooler",
                  override_hint: str = "SimCSEModel.from_pretrained(..., pooler_type=...) loads a model with another "
                                       "pooler on purpose") -> tuple[str | None, tuple[str, str] | None]:
    """The one pooler rule of the tool (:class:`simcse.SimCSE`, ``simcse encode/index/serve``) and the evaluator
    (``simcse evaluate`` / ``scripts/evaluation.py``): a folder that records its pooler
    (:func:`recorded_pooler`) is encoded with it, and a requested pooler that would give other embeddings is an
    error, not a silent switch. A folder that records none uses ``requested`` (None: the loader's default).

    The request agrees with the folder when it names the recorded pooler or, for a ``cls`` model trained with
    ``mlp_only_train`` (``simcse_config.json``), ``cls_before_pooler``: what that model encodes with (paper
    Section 3; the reference's habit of passing ``--pooler cls_before_pooler`` for unsupervised models).

    Args:
        folder: a model folder (a hub name or a missing path records nothing).
        requested: the pooler asked for, or None.
        option: how the caller spells the setting in its error message: ``"pooler"`` (``pooler='avg'``) or
            ``"--pooler"`` (``--pooler avg``).
        override_hint: how to use another pooler on purpose (said in the message; ``simcse export`` names its
            ``--override-pooler``).

    Returns:
        ``(pooler to load with, (recorded pooler, file it is read from) or None)``.

    Raises:
        ValueError: an unknown ``requested`` name, or one that differs from the recorded pooler.
    """
    if requested is not None:
        get_pooler(requested)  # an unknown name fails first, with the list of poolers
    rec = recorded_pooler(folder)
    if rec is None:
        return requested, None
    if requested is None or requested in _agreeing_poolers(folder, rec[0]):
        return rec[0], rec
    check_pooler_agrees(requested, rec[0], repr(str(folder)), option=option, where=rec[1],
                        fix=f"{_drop(option)} to use it ({override_hint})")


def _agreeing_poolers(folder, recorded: str) -> set[str]:
    """The pooler names that encode like the folder's recorded pooler (see :func:`pooler_to_use`)."""
    import json
    from pathlib import Path

    names = {recorded}
    cfg = Path(folder) / "simcse_config.json"
    if recorded in ("cls", "prompt_mask") and cfg.is_file() and json.loads(cfg.read_text()).get("mlp_only_train"):
        names.add(f"{recorded}_before_pooler")
    return names


def _drop(option: str) -> str:
    return f"drop {option}" if option.startswith("--") else f"drop {option}="


def check_pooler_agrees(requested: str | None, recorded: str | None, source: str, *, option: str = "pooler",
                        where: str | None = None, agreeing=(), fix: str | None = None) -> None:
    """The one pooler-agreement check and message of every surface (the tool, ``simcse encode/index/search/serve``,
    the evaluator, export, the index and shard folders): vectors encoded with another pooler than the one a
    model, graph, index or shard folder records would be compared wrongly, so a mismatch is an error.

    Args:
        requested: the pooler asked for or in use (None: nothing to check).
        recorded: the pooler ``source`` records (None: nothing to check).
        source: what records it, as said in the message (``"'path/to/model'"``, ``"the index"``, ...).
        option: how the caller spells the setting: ``"--pooler"`` (``--pooler avg``) or ``"pooler"``
            (``pooler='avg'``).
        where: the file that records it, named in the message.
        agreeing: other names that encode like ``recorded`` (e.g. ``cls_before_pooler`` for an ``mlp_only_train``
            ``cls`` model).
        fix: what to do, said after the semicolon (default: drop the option to use the recorded pooler).

    Raises:
        ValueError: ``{option} {requested} differs from the pooler {source} records ({recorded}[, in {where}]);
            {fix}``, one line.
    """
    if requested is None or recorded is None or requested == recorded or requested in agreeing:
        return
    asked = f"{option} {requested}" if option.startswith("--") else f"{option}={requested!r}"
    in_file = f", in {where}" if where else ""
    raise ValueError(f"{asked} differs from the pooler {source} records ({recorded!r}{in_file}); "
                     f"{fix or _drop(option) + ' to use it'}")
