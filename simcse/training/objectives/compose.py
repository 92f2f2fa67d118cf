"""Build a run's objective from its options: ``--loss``/``--loss_args`` and the ablation wrappers
(``--fixed_dropout``, ``--do_mlm``); one home for how the reference's options become an objective."""
from __future__ import annotations

import inspect

from simcse.training.objectives import build_objective, get_objective, parse_loss_args
from simcse.training.objectives.base import Objective


def simcse_objective(temp: float = 0.05, hard_negative_alpha: float = 1.0, fixed_dropout: bool = False,
                     mlm_weight: float = 0.0, mlm_masker=None, loss: str = "infonce", loss_args=None) -> Objective:
    """The objective of a run: ``loss`` built with ``loss_args`` (a JSON object string or dict), then wrapped
    in :class:`~simcse.training.objectives.fixed_dropout.FixedDropout` (``fixed_dropout``) and
    :class:`~simcse.training.objectives.mlm.WithMLM` (``mlm_weight > 0``).

    ``temp`` and ``hard_negative_alpha`` (the reference's ``--temp`` / ``--hard_negative_weight``) fill the
    objective's arguments of the same names unless ``loss_args`` sets them.

    Raises:
        ValueError: an unknown ``loss`` (lists the valid names), bad ``loss_args``, or a bad value.
    """
    args = parse_loss_args(loss_args)
    params = inspect.signature(get_objective(loss).__init__).parameters
    for key, value in (("temp", temp), ("hard_negative_alpha", hard_negative_alpha)):
        if key in params and key not in args:
            args[key] = value
    objective = build_objective(loss, args)
    if fixed_dropout:
        from simcse.training.objectives.fixed_dropout import FixedDropout

        objective = FixedDropout(objective)
    if mlm_weight and mlm_weight > 0:
        from simcse.training.objectives.mlm import WithMLM

        objective = WithMLM(objective, weight=mlm_weight, masker=mlm_masker)
    return objective
