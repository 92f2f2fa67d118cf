"""Option checks shared by every wing: "an integer >= n", "a finite number in a range" and "a boolean", each
written once.

A ``bool`` is not accepted where an integer is asked for (``True`` is an ``int`` in Python, but ``--k true`` is
a slip, not the number 1); numpy integers and floats are accepted. The messages name the option as the caller
spells it (``--max_steps``, ``batch_size``) and say what was expected and what was given, in one line.
"""
from __future__ import annotations

import math
import numbers


def is_integer(value) -> bool:
    """Whether ``value`` is an integer (Python or numpy), not a bool."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def check_int(value, name: str, minimum: int | None = 1, maximum: int | None = None, *, allow_none: bool = False,
              hint: str = ""):
    """``value`` unchanged when it is an integer in ``[minimum, maximum]`` (either bound None: open).

    ``allow_none``: None passes too. ``hint`` is appended to the message (e.g. ``" (0 = off)"``).

    Raises:
        ValueError: one line, e.g. ``--gradient_accumulation_steps must be a positive int, got 0``,
            ``--shuffle_buffer_size must be an integer >= 0, got -1``, ``dim must be an integer in [1, 8], got 9``.
    """
    if value is None and allow_none:
        return value
    if not is_integer(value) or (minimum is not None and value < minimum) or (maximum is not None and value > maximum):
        if minimum is not None and maximum is not None:
            want = f"an integer in [{minimum}, {maximum}]"
        elif minimum == 1:
            want = "a positive int"
        else:
            want = "an integer" + (f" >= {minimum}" if minimum is not None else f" <= {maximum}" if maximum is not None else "")
        raise ValueError(f"{name} must be {want}{hint}, got {value!r}")
    return value


MAX_SEED = 2**32 - 1  # the largest seed every generator a run seeds takes (numpy's; HF's set_seed seeds it)


def check_seed(value, name: str = "--seed"):
    """``value`` unchanged when it is a seed every generator takes: an integer in ``[0, 2**32 - 1]``.

    Raises:
        ValueError: ``--seed must be an integer in [0, 4294967295], got 4294967296``.
    """
    return check_int(value, name, 0, MAX_SEED)


def check_number(value, name: str, low: float | None = None, high: float | None = None, *, low_open: bool = False,
                 high_open: bool = False, allow_none: bool = False, hint: str = ""):
    """``value`` unchanged when it is a finite real number (not a bool) within the bounds.

    ``low``/``high`` None: unbounded on that side; ``low_open``/``high_open``: the bound itself is excluded.

    Raises:
        ValueError: one line, e.g. ``--learning_rate must be a finite number > 0, got -1.0``.
    """
    if value is None and allow_none:
        return value
    ok = isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value)
    if ok and low is not None:
        ok = value > low if low_open else value >= low
    if ok and high is not None:
        ok = value < high if high_open else value <= high
    if not ok:
        parts = []
        if low is not None:
            parts.append(f"{'>' if low_open else '>='} {low:g}")
        if high is not None:
            parts.append(f"{'<' if high_open else '<='} {high:g}")
        raise ValueError(f"{name} must be a finite number{' ' + ' and '.join(parts) if parts else ''}{hint}, "
                         f"got {value!r}")
    return value


_TRUE = ("true", "1", "yes")
_FALSE = ("false", "0", "no")


def as_bool(value, name: str, *, allow_none: bool = False) -> bool | None:
    """The one rule for boolean options everywhere (command line, config files, ``--loss_args``, the Python
    entry): ``True``/``False``, the integers 1/0 and the strings true/false, 1/0, yes/no (any case, spaces
    around ignored). Anything else is refused rather than read by truthiness (``"false"`` is not true).

    Raises:
        ValueError: one line, e.g. ``--fp16 must be true or false (also 1/0, yes/no), got 'maybe'``.
    """
    if value is None and allow_none:
        return None
    if isinstance(value, bool):
        return value
    if is_integer(value) and value in (0, 1):
        return bool(value)
    if isinstance(value, str) and value.strip().lower() in _TRUE + _FALSE:
        return value.strip().lower() in _TRUE
    raise ValueError(f"{name} must be true or false (also 1/0, yes/no), got {value!r}")


def bool_field_kind(cls, name: str) -> str | None:
    """``"bool"`` or ``"bool | None"`` when dataclass field ``name`` of ``cls`` is a boolean (optional) option, else
    None (any other type, ``bool | str`` included)."""
    import dataclasses
    import typing

    f = next((f for f in dataclasses.fields(cls) if f.name == name), None)
    if f is None:
        return None
    kind = f.type if isinstance(f.type, str) else str(f.type).replace("typing.Optional[bool]", "bool | None")
    kind = {"<class 'bool'>": "bool", "bool": "bool", "bool | None": "bool | None", "Optional[bool]": "bool | None"}.get(kind)
    if kind is None and f.type is not None and typing.get_origin(f.type) in (typing.Union, getattr(__import__("types"), "UnionType", None)) \
            and set(typing.get_args(f.type)) == {bool, type(None)}:
        kind = "bool | None"
    return kind


def coerce_bool_fields(obj) -> None:
    """Read every boolean field of dataclass instance ``obj`` by the one rule (:func:`as_bool`), in place: the
    strings of a Python caller (``do_mlm="false"``) mean what they say, and other values are refused.

    Raises:
        ValueError: a boolean field holds something else than true/false, 1/0, yes/no (names it as ``--name``).
    """
    import dataclasses

    for f in dataclasses.fields(obj):
        kind = bool_field_kind(type(obj), f.name)
        value = getattr(obj, f.name, None)
        if kind is not None and not isinstance(value, bool) and not (value is None and kind == "bool | None"):
            object.__setattr__(obj, f.name, as_bool(value, f"--{f.name}", allow_none=kind == "bool | None"))


def unique_keys(pairs: list) -> dict:
    """A ``json.loads`` ``object_pairs_hook``: the object, refusing a key given twice (JSON itself keeps the last
    one, silently), e.g. ``json.loads(text, object_pairs_hook=unique_keys)``.

    Raises:
        ValueError: ``key 'b' is given twice in one object; give each key once``.
    """
    out = {}
    for key, value in pairs:
        if key in out:
            raise ValueError(f"key {key!r} is given twice in one object (JSON would keep only the last, silently); "
                             "give each key once")
        out[key] = value
    return out
