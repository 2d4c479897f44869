"""Input validation shared by the core, the losses and the integrations (no framework imports)."""

from __future__ import annotations

import math
from numbers import Real

import torch
from torch import Tensor

FLOAT_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


def check_float_tensor(name: str, x: object) -> Tensor:
    """``x`` must be a floating-point tensor (half, bfloat16, float32 or float64)."""
    if not isinstance(x, Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    if x.dtype not in FLOAT_DTYPES:
        raise TypeError(
            f"{name} must be a floating-point tensor (float16, bfloat16, float32 or float64), got dtype {x.dtype}"
        )
    return x


def check_positive_number(name: str, value: object, *, allow_zero: bool = False) -> float:
    """``value`` must be a finite real number > 0 (>= 0 with ``allow_zero``)."""
    ok = isinstance(value, Real) and not isinstance(value, bool) and math.isfinite(float(value))
    if ok:
        ok = float(value) >= 0 if allow_zero else float(value) > 0
    if not ok:
        rel = ">= 0" if allow_zero else "> 0"
        raise ValueError(f"{name} must be a finite number {rel}, got {value!r}")
    return float(value)


def check_number_in(name: str, value: object, low: float, high: float) -> float:
    """``value`` must be a finite real number in [low, high]."""
    ok = isinstance(value, Real) and not isinstance(value, bool) and math.isfinite(float(value))
    if not ok or not (low <= float(value) <= high):
        raise ValueError(f"{name} must be a finite number in [{low}, {high}], got {value!r}")
    return float(value)


def check_int_in(name: str, value: object, low: int, high: int | None = None) -> int:
    """``value`` must be an ``int`` (not a bool) in ``[low, high]`` (``high=None``: no upper limit)."""
    ok = isinstance(value, int) and not isinstance(value, bool)
    if ok:
        ok = value >= low and (high is None or value <= high)
    if not ok:
        allowed = f"an integer >= {low}" if high is None else f"an integer in [{low}, {high}]"
        raise ValueError(f"{name} must be {allowed}, got {value!r}")
    return int(value)  # type: ignore[arg-type]


def check_logprobs(name: str, logp: Tensor, mask: Tensor | None = None) -> None:
    """Log-probabilities must be <= 0 and not NaN or +inf (``-inf``, probability 0, is allowed).

    Needs a device->host sync; callers make it optional. Positions where ``mask`` is 0 are ignored.
    """
    bad = torch.isnan(logp) | (logp > 0)
    if mask is not None:
        bad = bad & (mask != 0)
    if bool(bad.any()):
        first = logp[bad].reshape(-1)[0].item()
        n = int(bad.sum())
        raise ValueError(
            f"{name} must hold log-probabilities in [-inf, 0] (no NaN, no +inf, no positive values); "
            f"found {n} invalid value(s), e.g. {first!r}"
        )
