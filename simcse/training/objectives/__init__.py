"""Training objectives: one registry, one module per objective (``--loss NAME --loss_args '{json}'``).

:func:`register_objective` adds a subclass of :class:`~simcse.training.objectives.base.Objective` under its
name; :func:`get_objective` looks one up (an unknown name is refused with the list of valid ones, as the
pooler registry does); :func:`build_objective` constructs one from ``--loss_args``. The built-in objectives
are registered when this package is imported; an objective defined anywhere else (a notebook, a test file, a
user package) registers itself the same way and is then available to ``simcse train --loss`` in that process.
Objectives outside the package are also found without registering: ``--loss package.module:ClassName`` imports
the class, and an installed package may list its objectives under the entry-point group ``simcse.objectives``
(``[project.entry-points."simcse.objectives"] dcl = "my_pkg.dcl:DCL"``), found by name.
"""
from __future__ import annotations

import json
from typing import Callable

from simcse.training.objectives.base import LossContext, Objective

__all__ = ["OBJECTIVES", "Objective", "LossContext", "register_objective", "get_objective", "build_objective",
           "parse_loss_args"]

OBJECTIVES: dict[str, type[Objective]] = {}


def register_objective(cls: type[Objective] | None = None, *, name: str | None = None, replace: bool = False):
    """Register an :class:`Objective` subclass under ``name`` (default ``cls.name``); usable as a decorator.

    Raises:
        TypeError: ``cls`` is not an Objective subclass. ValueError: no name, or the name is taken by another
            class (pass ``replace=True`` to override on purpose).
    """
    def deco(c: type[Objective]) -> type[Objective]:
        if not (isinstance(c, type) and issubclass(c, Objective)):
            raise TypeError(f"register_objective expects a subclass of Objective, got {c!r}")
        key = name or c.name
        if not key:
            raise ValueError(f"objective class {c.__name__} has no name: set the class attribute `name`")
        if key in OBJECTIVES and OBJECTIVES[key] is not c and not replace:
            raise ValueError(f"objective name {key!r} is already registered by {OBJECTIVES[key].__name__}; "
                             "pass replace=True to override it")
        OBJECTIVES[key] = c
        return c

    return deco(cls) if cls is not None else deco


ENTRY_POINT_GROUP = "simcse.objectives"


def get_objective(name: str) -> type[Objective]:
    """The objective class ``name``: a registered name (the built-ins, and anything registered in this process),
    the name of an installed package's entry point in the ``simcse.objectives`` group, or an import spec
    ``package.module:ClassName`` (imported, checked and registered under that spec).

    Raises:
        ValueError: ``name`` is none of these (the message lists the valid names and the spec form), a spec
            whose module cannot be imported or whose attribute is not an :class:`Objective` subclass, or an entry
            point that cannot be loaded (the message names ``--loss``, the entry point and the error).
    """
    _load_builtins()
    if name in OBJECTIVES:
        return OBJECTIVES[name]
    if isinstance(name, str) and ":" in name:
        return _import_spec(name)
    found = _entry_points().get(name)
    if found is not None:
        where = f"the entry point {name!r} ({found.value}, group {ENTRY_POINT_GROUP})"
        try:
            loaded = found.load()
        except Exception as e:  # an installed package's import failing in any way: said as the option's error
            first = (str(e).strip().splitlines() or [""])[0]
            raise ValueError(f"--loss {name}: {where} cannot be loaded ({type(e).__name__}: {first}); fix or "
                             "reinstall the package that declares it, or name the class as package.module:ClassName"
                             ) from None
        cls = _check_class(loaded, where)
        OBJECTIVES[name] = cls
        return cls
    raise ValueError(f"unknown --loss {name!r}; expected one of {sorted(set(OBJECTIVES) | set(_entry_points()))}, "
                     "or an objective class as package.module:ClassName")


def _check_class(obj, where: str) -> type[Objective]:
    if not (isinstance(obj, type) and issubclass(obj, Objective)):
        raise ValueError(f"--loss {where} is {obj!r}, not a subclass of simcse.training.objectives.Objective")
    if obj.loss is Objective.loss:
        raise ValueError(f"--loss {where} is {obj.__module__}:{obj.__qualname__}, which defines no loss(): name a "
                         "subclass that implements it")
    return obj


def _import_spec(spec: str) -> type[Objective]:
    """``package.module:ClassName`` -> the class, imported and registered under ``spec``."""
    import importlib

    module_name, _, qualname = spec.partition(":")
    if not module_name or not qualname:
        raise ValueError(f"--loss {spec!r}: expected package.module:ClassName")
    try:
        obj = importlib.import_module(module_name)
    except Exception as e:  # ImportError, or any error the module raises while importing
        raise ValueError(f"--loss {spec!r}: cannot import {module_name!r} ({e}); is it installed or on PYTHONPATH?") from None
    for part in qualname.split("."):
        if not hasattr(obj, part):
            raise ValueError(f"--loss {spec!r}: module {module_name!r} has no {qualname!r}")
        obj = getattr(obj, part)
    OBJECTIVES[spec] = _check_class(obj, repr(spec))
    return OBJECTIVES[spec]


def _entry_points() -> dict:
    """Installed packages' objectives: ``{name: EntryPoint}`` of the ``simcse.objectives`` group."""
    from importlib.metadata import entry_points

    return {ep.name: ep for ep in entry_points(group=ENTRY_POINT_GROUP)}


def parse_loss_args(loss_args) -> dict:
    """``--loss_args`` as a dict: a JSON object string, a dict, or None/"" (no arguments).

    Raises:
        ValueError: not valid JSON, or not an object (the message names ``--loss_args``).
    """
    if loss_args is None or loss_args == "":
        return {}
    if isinstance(loss_args, dict):
        value = dict(loss_args)
    else:
        try:
            value = json.loads(loss_args)
        except (TypeError, json.JSONDecodeError) as e:
            raise ValueError(f"--loss_args must be a JSON object such as '{{\"temp\": 0.05}}', got {loss_args!r}: {e}") from None
    if not isinstance(value, dict):
        raise ValueError(f"--loss_args must be a JSON object, got {type(value).__name__}: {loss_args!r}")
    _check_finite(value, "")
    return value


def _check_finite(value, where: str) -> None:
    """Refuse NaN and +-Infinity anywhere in ``--loss_args`` (JSON's NaN/Infinity extension, or a float of a dict):
    no objective's range check is meant to see them (``NaN > 0`` is False, ``inf > 0`` is True).

    Raises:
        ValueError: naming the key path and the value.
    """
    import math

    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"--loss_args {where or 'value'} must be a finite number, got {value!r}")
    if isinstance(value, dict):
        for k, v in value.items():
            _check_finite(v, f"{where}.{k}" if where else str(k))
    elif isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            _check_finite(v, f"{where}[{i}]")


def _boolean_arguments(cls: type[Objective], kwargs: dict, name: str) -> dict:
    """``kwargs`` with the values of the objective's boolean arguments (a ``bool`` default or annotation) read by
    the one boolean rule (:func:`simcse.files.checks.as_bool`: true/false, 1/0, yes/no; else refused)."""
    import inspect

    from simcse.files.checks import as_bool

    out = dict(kwargs)
    for key, p in inspect.signature(cls.__init__).parameters.items():
        if key in out and (isinstance(p.default, bool) or p.annotation in (bool, "bool")):
            out[key] = as_bool(out[key], f"--loss_args {key} for --loss {name}")
    return out


def build_objective(name: str, loss_args=None) -> Objective:
    """Construct the registered objective ``name`` with the keyword arguments of ``loss_args``.

    Raises:
        ValueError: unknown name, bad ``--loss_args`` JSON, an argument the objective does not take (the
            message lists the ones it takes), or a value the objective refuses.
    """
    import inspect

    cls = get_objective(name)
    kwargs = parse_loss_args(loss_args)
    params = inspect.signature(cls.__init__).parameters
    if not any(p.kind is p.VAR_KEYWORD for p in params.values()):
        allowed = [p for p in params if p != "self"]
        unknown = sorted(set(kwargs) - set(allowed))
        if unknown:
            raise ValueError(f"--loss_args for --loss {name}: unknown key(s) {unknown}; it takes {allowed}")
    try:
        return cls(**_boolean_arguments(cls, kwargs, name))
    except TypeError as e:  # a value of the wrong type met the constructor's own checks ('>' of a str and an int)
        raise ValueError(f"--loss_args for --loss {name}: a value of the wrong type ({e}); got {kwargs}") from None
    except ValueError as e:
        text = str(e)
        raise ValueError(text if text.startswith("--") else f"--loss {name}: {text}") from None


_loaded = False


def _load_builtins() -> None:
    """Import every module of this package once (each built-in objective registers itself on import), so adding
    an objective is adding one file."""
    global _loaded
    if _loaded:
        return
    _loaded = True
    import importlib
    import pkgutil

    for info in pkgutil.iter_modules(__path__):
        if info.name not in ("base", "compose") and not info.name.startswith("_"):
            importlib.import_module(f"{__name__}.{info.name}")
