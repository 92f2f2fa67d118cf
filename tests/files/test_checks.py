"""simcse.files.checks: the one "integer option" and "number option" rule (bools refused, numpy accepted)."""
import math

import numpy as np
import pytest

from simcse.files.checks import check_int, check_number, is_integer


def test_integers_bools_and_numpy():
    assert is_integer(3) and is_integer(np.int64(3)) and not is_integer(True) and not is_integer(3.0)
    assert check_int(np.int32(4), "k") == 4 and check_int(None, "k", allow_none=True) is None


@pytest.mark.parametrize("value, kwargs, message", [
    (0, {}, "k must be a positive int, got 0"),
    (True, {}, "k must be a positive int, got True"),
    (2.0, {}, "k must be a positive int, got 2.0"),
    (None, {}, "k must be a positive int, got None"),
    (-1, {"minimum": 0}, "k must be an integer >= 0, got -1"),
    (9, {"minimum": 1, "maximum": 8, "hint": " (the size)"}, "k must be an integer in [1, 8] (the size), got 9"),
])
def test_check_int_messages_name_the_option_and_the_rule(value, kwargs, message):
    with pytest.raises(ValueError) as exc:
        check_int(value, "k", **kwargs)
    assert str(exc.value) == message


@pytest.mark.parametrize("value, kwargs, message", [
    (-1.0, {"low": 0, "low_open": True}, "lr must be a finite number > 0, got -1.0"),
    (math.nan, {"low": 0}, "lr must be a finite number >= 0, got nan"),
    (1.0, {"low": 0, "high": 1, "high_open": True}, "lr must be a finite number >= 0 and < 1, got 1.0"),
    (False, {}, "lr must be a finite number, got False"),
])
def test_check_number_messages(value, kwargs, message):
    with pytest.raises(ValueError) as exc:
        check_number(value, "lr", **kwargs)
    assert str(exc.value) == message
    assert check_number(0.5, "lr", 0, 1) == 0.5
