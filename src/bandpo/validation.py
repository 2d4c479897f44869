"""Scalar argument checks for every layer of the package: numbers and THE integer check.

Each check returns the value converted (``float`` or ``int``) or raises with a message that names the argument,
the value received and what is allowed, e.g. ``delta must be a finite number > 0, got -0.1``. No framework and
no tensor imports: importable from anywhere (core to cli). Tensor checks live in ``bandpo.core.checks``.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import typing
from collections.abc import Mapping
from numbers import Integral, Real

__all__ = [
    "check_bool",
    "check_int_in",
    "check_not_none",
    "check_number_above",
    "check_number_in",
    "check_positive_number",
    "is_finite_real",
    "is_int_in",
]


def is_finite_real(value: object) -> bool:
    """Whether ``value`` is a real number (Python or numpy, not a bool) with a finite value: the test behind the
    number checks below, for tables of predicates that phrase their own message."""
    if not isinstance(value, Real) or isinstance(value, bool):
        return False
    try:
        return math.isfinite(float(value))
    except OverflowError:  # an integer beyond float's range (10**400)
        return False


def check_bool(name: str, value: object) -> bool:
    """``value`` must be ``True`` or ``False`` (a string such as ``"false"`` would be truthy)."""
    if not isinstance(value, bool):
        raise ValueError(f"{name} must be True or False, got {value!r}")
    return value


def check_positive_number(name: str, value: object, *, allow_zero: bool = False) -> float:
    """``value`` must be a finite real number > 0 (>= 0 with ``allow_zero``)."""
    ok = is_finite_real(value)
    if ok:
        ok = float(value) >= 0 if allow_zero else float(value) > 0  # type: ignore[arg-type]
    if not ok:
        rel = ">= 0" if allow_zero else "> 0"
        raise ValueError(f"{name} must be a finite number {rel}, got {value!r}")
    return float(value)  # type: ignore[arg-type]


def check_number_in(name: str, value: object, low: float, high: float) -> float:
    """``value`` must be a finite real number in [low, high]."""
    if not is_finite_real(value) or not (low <= float(value) <= high):  # type: ignore[arg-type]
        raise ValueError(f"{name} must be a finite number in [{low}, {high}], got {value!r}")
    return float(value)  # type: ignore[arg-type]


def check_number_above(name: str, value: object, low: float) -> float:
    """``value`` must be a finite real number strictly greater than ``low``."""
    if not is_finite_real(value) or not float(value) > low:  # type: ignore[arg-type]
        raise ValueError(f"{name} must be a finite number > {low:g}, got {value!r}")
    return float(value)  # type: ignore[arg-type]


def is_int_in(value: object, low: int, high: int | None = None) -> bool:
    """Whether ``value`` is an integer (Python or numpy, not a bool) in ``[low, high]``: the test behind
    :func:`check_int_in`, for tables of predicates that phrase their own message."""
    if not isinstance(value, Integral) or isinstance(value, bool):
        return False
    return int(value) >= low and (high is None or int(value) <= high)


def check_int_in(
    name: str,
    value: object,
    low: int,
    high: int | None = None,
    *,
    note: str = "",
    error: type[ValueError] = ValueError,
) -> int:
    """``value`` must be an integer in ``[low, high]`` (``high=None``: no upper limit); returns it as ``int``.

    The package's one integer check. Python and numpy integers pass; bools, floats (even ``2.0``) and strings
    do not. The message is ``"{name} must be an integer >= {low}{note}, got {value!r}"`` (``"... an integer in
    [{low}, {high}]{note}, ..."`` with a ``high``); ``note`` adds a reason, e.g. ``" (k cannot exceed n)"``.

    Raises:
        ``error`` (``ValueError`` or a subclass of it, e.g. a module's own error type).
    """
    if not is_int_in(value, low, high):
        allowed = f"an integer >= {low}" if high is None else f"an integer in [{low}, {high}]"
        raise error(f"{name} must be {allowed}{note}, got {value!r}")
    return int(value)  # type: ignore[arg-type]


@functools.lru_cache(maxsize=16)
def _fields_without_none(fields: type) -> dict[str, object]:
    """The dataclass ``fields``' fields whose type does not admit ``None`` (``delta: float``, not
    ``cap: float | None``), with their defaults."""
    hints = typing.get_type_hints(fields)
    return {
        field.name: field.default
        for field in dataclasses.fields(fields)
        if type(None) not in typing.get_args(hints[field.name]) and hints[field.name] is not type(None)
    }


def check_not_none(section: str, values: Mapping[str, object], fields: type) -> None:
    """``None`` (a config's ``null``) only where the dataclass ``fields`` types a field ``X | None``: a framework's
    config section reads ``null`` as an absent key, so a ``delta: null`` would otherwise run with the default
    radius without a word. Raises ``ValueError`` naming ``<section>.<key>`` and the default an absent key takes,
    e.g. ``policy_loss.delta must be set, got None (leave the key out for its default, 0.05)``."""
    for key, default in _fields_without_none(fields).items():
        if key in values and values[key] is None:
            hint = (
                "" if default is dataclasses.MISSING else f" (leave the key out for its default, {default!r})"
            )
            raise ValueError(f"{section}.{key} must be set, got None{hint}")
