"""Dropout for SimCSE's ablations and CPU speed: cheaper CPU dropout masks, and setting a config's dropout.

``keep_mask`` / ``cpu_dropout`` / ``CPUDropout`` draw training-mode dropout masks on CPU from half a 32-bit
random output per element (docs/performance.md); ``set_config_dropout`` / ``encoder_config_with_dropout`` set
every dropout probability of an HF config before the model is built (paper Table 3, docs/ablations.md).
"""
from __future__ import annotations

import math

import torch
from torch import nn


def keep_mask(shape: tuple[int, ...] | torch.Size, p: float, generator: torch.Generator | None = None) -> tuple[torch.Tensor, float]:
    """A CPU dropout keep-mask drawn from half a 32-bit output of the CPU generator per element.

    The (Mersenne-twister, single-threaded) CPU generator's full-range 64-bit draws (two 32-bit outputs each,
    none wasted) are split into four 16-bit uniform integers, two per 32-bit output; an element is kept when its
    integer is at least ``round(p * 65536)`` (counted from the bottom of the int16 range). Returns ``(mask, keep_scale)``: ``mask`` bool of ``shape``, ``keep_scale`` the inverted-dropout
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
    # full int64 range: one 64-bit draw per word (a 2**32-wide int32 range would spend a 64-bit draw on 32 bits)
    words = torch.empty((n + 3) // 4, dtype=torch.int64).random_(-2**63, None, generator=generator)
    mask = words.view(torch.int16)[:n].view(shape) >= (threshold - 32768)
    return mask, 65536.0 / (65536 - threshold)


def cpu_dropout(x: torch.Tensor, p: float) -> torch.Tensor:
    """Inverted dropout of ``x`` (any shape, float dtype) with a :func:`keep_mask` mask; training mode only.

    Same law as ``torch.nn.functional.dropout(x, p, training=True)`` (see :func:`keep_mask` for the rounding of
    ``p``), with fewer random draws on CPU (timings in docs/performance.md). Off CPU it *is*
    ``torch.nn.functional.dropout``.
    """
    if p == 0.0:
        return x
    if x.device.type != "cpu":
        return torch.nn.functional.dropout(x, p=p, training=True)
    mask, scale = keep_mask(x.shape, p)
    return (x * mask).mul_(scale)  # bool mask: no float copy of it; the scale applied in float32 then rounded


class CPUDropout(nn.Dropout):
    """``nn.Dropout`` whose training-mode CPU forward is :func:`cpu_dropout` (eval mode: identity, as before).

    :meth:`SimCSEModel.set_cpu_dropout` swaps the class of the encoder's ``nn.Dropout`` modules to this one (same
    ``p``, no parameters, so checkpoints are unaffected) and back.
    """

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training or x.device.type != "cpu":
            return super().forward(x)
        return cpu_dropout(x, self.p)


def uses_cpu_dropout(module: nn.Module) -> bool:
    """True when a direct child of ``module`` is a :class:`CPUDropout` (``SimCSEModel.set_cpu_dropout`` is on).

    The padding-free attention kernel asks this of the attention layer that calls it, so its attention-probability
    dropout follows the same switch as the layer's ``nn.Dropout`` modules.
    """
    return any(isinstance(m, CPUDropout) for m in module.children())


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
