"""Build a run's objective from its options: ``--loss``/``--loss_args`` and the ablation wrappers
(``--fixed_dropout``, ``--do_mlm``); one home for how the reference's options become an objective."""
from __future__ import annotations

import inspect
import math

from simcse.training.objectives import build_objective, get_objective, parse_loss_args
from simcse.training.objectives.base import Objective


HARD_NEGATIVE_KEYS = ("hard_negative_alpha", "hard_negative_weight")


def simcse_objective(temp: float | None = None, hard_negative_alpha: float = 1.0, fixed_dropout: bool = False,
                     mlm_weight: float = 0.0, mlm_masker=None, loss: str = "infonce", loss_args=None,
                     hard_negative_given: bool = False) -> Objective:
    """The objective of a run: ``loss`` built with ``loss_args`` (a JSON object string or dict), then wrapped
    in :class:`~simcse.training.objectives.fixed_dropout.FixedDropout` (``fixed_dropout``) and
    :class:`~simcse.training.objectives.mlm.WithMLM` (``mlm_weight > 0``).

    ``temp`` and the hard-negative weight (the reference's ``--temp`` / ``--hard_negative_weight``, here as
    ``hard_negative_alpha`` = exp(weight)), when the user gave them, fill the objective's arguments of the same
    names unless ``loss_args`` sets them (an option not given leaves the objective's own default): ``temp``, ``hard_negative_alpha`` (multiplicative) and ``hard_negative_weight`` (added to the
    logit). A wrapper (``--loss matryoshka``...) passes them to the objective it wraps. ``hard_negative_given``:
    the user gave ``--hard_negative_weight``/``--hard_negative_alpha``, so an objective without either argument,
    or a ``loss_args`` value that differs, is refused instead of silently training with another weight. ``temp``
    None (``--temp`` not given): the objective's own default; given, a ``loss_args`` ``temp`` that differs is refused.

    Raises:
        ValueError: an unknown ``loss`` (lists the valid names), bad ``loss_args``, or a bad value.
    """
    fills = {} if temp is None else {"temp": temp}  # an option fills an argument only when the user gave it
    if hard_negative_given:
        fills["hard_negative_alpha"] = hard_negative_alpha
        fills["hard_negative_weight"] = math.log(hard_negative_alpha) if hard_negative_alpha > 0 else -math.inf
    args = _fill(loss, parse_loss_args(loss_args), fills, hard_negative_given)
    objective = build_objective(loss, args)
    if fixed_dropout:
        from simcse.training.objectives.fixed_dropout import FixedDropout

        objective = FixedDropout(objective)
    if mlm_weight and mlm_weight > 0:
        from simcse.training.objectives.mlm import WithMLM

        objective = WithMLM(objective, weight=mlm_weight, masker=mlm_masker)
    return objective


def _fill(name: str, args: dict, fills: dict, hard_negative_given: bool) -> dict:
    """``args`` (the ``--loss_args`` of objective ``name``) with ``fills`` added for the arguments it takes and
    does not set; a wrapper's (an argument ``loss`` and ``loss_args``) go to the objective it wraps."""
    cls = get_objective(name)
    params = inspect.signature(cls.__init__).parameters
    if "loss" in params and "loss_args" in params:  # a wrapper: the options reach the wrapped objective
        inner = args.get("loss", params["loss"].default)
        if isinstance(inner, str):
            args = {**args, "loss_args": _fill(inner, parse_loss_args(args.get("loss_args")), fills, hard_negative_given)}
        return args
    takes = [k for k in HARD_NEGATIVE_KEYS if k in params]
    if hard_negative_given and not takes:
        raise ValueError(f"--hard_negative_weight/--hard_negative_alpha: --loss {name} has no hard-negative weight "
                         f"(its arguments: {[p for p in params if p != 'self']}); drop the option")
    for key in takes if hard_negative_given else ():
        if key in args and not _same(args[key], fills[key]):
            raise ValueError(f"--hard_negative_weight/--hard_negative_alpha (= {key} {fills[key]:g}) and --loss_args "
                             f"{key} {args[key]!r} disagree: give the weight once")
    if "temp" in fills and "temp" in params and "temp" in args and not _same(args["temp"], fills["temp"]):
        raise ValueError(f"--temp {fills['temp']:g} and --loss_args temp {args['temp']!r} disagree: give the temperature once")
    for key, value in fills.items():
        if key in params and key not in args:
            args[key] = value
    return args


def _same(a, b) -> bool:
    try:
        return a == b or math.isclose(float(a), float(b), rel_tol=1e-9, abs_tol=1e-12)
    except (TypeError, ValueError):
        return False


def hard_negative_weight_of(objective: Objective) -> float | None:
    """The hard-negative weight (the logit bonus w, ``-inf`` for alpha 0) ``objective`` trains with, looked up
    through wrappers: its ``hard_negative_weight``, else ``log(hard_negative_alpha)``; None when it has neither
    (recorded as what trained, in the model card)."""
    from simcse.training.objectives.base import ObjectiveWrapper

    while isinstance(objective, ObjectiveWrapper):
        objective = objective.inner
    if isinstance(getattr(objective, "hard_negative_weight", None), (int, float)):
        return float(objective.hard_negative_weight)
    alpha = getattr(objective, "hard_negative_alpha", None)
    if isinstance(alpha, (int, float)):
        return math.log(alpha) if alpha > 0 else -math.inf
    return None
