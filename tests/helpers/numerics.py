"""Numerical comparison helpers for the reference tests."""

from __future__ import annotations

import torch


def rel_err(got: torch.Tensor, ref: torch.Tensor, rtol: float, atol: float) -> torch.Tensor:
    """``|got - ref| / (rtol |ref| + atol)`` elementwise, in float64: <= 1 means within ``rtol`` relative or
    ``atol`` absolute; equal infinities count as exact (error 0).

    The absolute floor only matters for values far below 1 (e.g. a lower bound of 1e-20), whose relative error
    is ill-conditioned and irrelevant to a ratio clamp.
    """
    got, ref = got.double(), ref.double()
    both_inf = torch.isinf(got) & torch.isinf(ref) & (torch.sign(got) == torch.sign(ref))
    err = (got - ref).abs() / (rtol * ref.abs() + atol)
    return torch.where(both_inf, torch.zeros_like(err), err)


def within(*errors: torch.Tensor) -> bool:
    """Whether every error of :func:`rel_err` is <= 1. NaN fails: a NaN value, or a finite value against an infinite
    reference (``max(a, nan)`` in Python is ``a``, so comparing maxima as floats let a NaN bound through)."""
    return all(bool((e <= 1).all()) for e in errors)
