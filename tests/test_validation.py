"""bandpo.validation: the scalar checks every layer uses, their messages and what they return."""

from __future__ import annotations

import dataclasses
import math

try:
    import numpy as np
except ImportError:  # the library needs torch alone; the numpy cases run where numpy is installed
    np = None
import pytest

from bandpo.validation import (
    check_int_in,
    check_not_none,
    check_number_above,
    check_number_in,
    check_positive_number,
    is_finite_real,
    is_int_in,
)


@pytest.mark.parametrize(
    ("args", "kwargs", "want"),
    [
        (("n", 3, 1), {}, 3),
        (("n", 0, 0), {}, 0),
        (("n", 4, 2, 4), {}, 4),
        *([(("n", np.int64(5), 1), {}, 5)] if np else []),  # numpy integers pass (numbers.Integral)
        (("n", -3, -5, 5), {}, -3),
    ],
)
def test_check_int_in_accepts_and_returns_int(args: tuple, kwargs: dict, want: int) -> None:
    got = check_int_in(*args, **kwargs)
    assert got == want and type(got) is int


@pytest.mark.parametrize(
    ("value", "low", "high", "match"),
    [
        (0, 1, None, r"^n must be an integer >= 1, got 0$"),
        (1.0, 1, None, r"^n must be an integer >= 1, got 1.0$"),
        (True, 0, None, r"^n must be an integer >= 0, got True$"),
        *([(np.bool_(True), 0, None, r"^n must be an integer >= 0, got ")] if np else []),
        ("3", 1, None, r"^n must be an integer >= 1, got '3'$"),
        (None, 1, None, r"^n must be an integer >= 1, got None$"),
        (7, 2, 4, r"^n must be an integer in \[2, 4\], got 7$"),
        (1, 2, 4, r"^n must be an integer in \[2, 4\], got 1$"),
    ],
)
def test_check_int_in_rejects_with_the_one_message(
    value: object, low: int, high: int | None, match: str
) -> None:
    with pytest.raises(ValueError, match=match):
        check_int_in("n", value, low, high)


def test_check_int_in_note_and_error_type() -> None:
    class MyError(ValueError):
        pass

    with pytest.raises(MyError, match=r"^k must be an integer in \[1, 3\] \(k <= n\), got 5$"):
        check_int_in("k", 5, 1, 3, note=" (k <= n)", error=MyError)


@pytest.mark.parametrize("bad", [0, -1.0, math.inf, math.nan, True, "1", None])
def test_check_positive_number(bad: object) -> None:
    assert check_positive_number("delta", 2) == 2.0
    with pytest.raises(ValueError, match=r"^delta must be a finite number > 0, got "):
        check_positive_number("delta", bad)


def test_check_positive_number_allow_zero() -> None:
    assert check_positive_number("eps", 0, allow_zero=True) == 0.0
    with pytest.raises(ValueError, match=r"^eps must be a finite number >= 0, got -0.1$"):
        check_positive_number("eps", -0.1, allow_zero=True)


def test_check_number_in_and_above() -> None:
    assert check_number_in("p", 1, 0.0, 1.0) == 1.0
    assert check_number_above("c", 1.5, 1.0) == 1.5
    for bad in (1.5, math.nan, False):
        with pytest.raises(ValueError, match=r"^p must be a finite number in \[0.0, 1.0\], got "):
            check_number_in("p", bad, 0.0, 1.0)
    for bad in (1.0, math.inf, "2"):
        with pytest.raises(ValueError, match=r"^c must be a finite number > 1, got "):
            check_number_above("c", bad, 1.0)


@pytest.mark.parametrize(
    ("value", "low", "high", "want"),
    [
        (3, 1, None, True),
        *([(np.int32(3), 1, 3, True)] if np else []),
        (0, 1, None, False),
        (4, 1, 3, False),
        (True, 0, None, False),
        (2.0, 0, None, False),
        ("2", 0, None, False),
        (None, 0, None, False),
        (-1, -1, -1, True),
    ],
)
def test_is_int_in_is_the_test_behind_check_int_in(
    value: object, low: int, high: int | None, want: bool
) -> None:
    assert is_int_in(value, low, high) is want
    if want:
        assert check_int_in("x", value, low, high) == int(value)  # type: ignore[arg-type]
    else:
        with pytest.raises(ValueError, match="x must be an integer"):
            check_int_in("x", value, low, high)


@pytest.mark.parametrize(
    ("value", "want"),
    [
        (0, True),
        (-2.5, True),
        *([(np.float32(0.5), True), (np.int64(3), True)] if np else []),  # numpy reals pass (numbers.Real)
        (math.inf, False),
        (math.nan, False),
        (True, False),
        ("1", False),
        (None, False),
        (10**400, False),  # an integer beyond float's range: not a finite real (float() would overflow)
    ],
)
def test_is_finite_real_is_the_test_behind_the_number_checks(value: object, want: bool) -> None:
    assert is_finite_real(value) is want
    if not want:
        with pytest.raises(ValueError, match="x must be a finite number"):
            check_number_in("x", value, -10, 10)


@dataclasses.dataclass
class _Section:
    required: int
    delta: float = 0.05
    cap: float | None = 10.0
    end: float | None = None


def test_check_not_none_refuses_null_only_where_the_field_has_no_none() -> None:
    check_not_none(
        "sec", {"cap": None, "end": None, "delta": 0.1, "other": None}, _Section
    )  # allowed / unknown
    check_not_none("sec", {}, _Section)  # absent keys take their defaults
    with pytest.raises(
        ValueError, match=r"^sec\.delta must be set, got None \(leave the key out for its default, 0\.05\)$"
    ):
        check_not_none("sec", {"delta": None}, _Section)
    with pytest.raises(ValueError, match=r"^sec\.required must be set, got None$"):  # no default to name
        check_not_none("sec", {"required": None}, _Section)
