"""Checks the core owns: tensor inputs (dtype, log-probability range), the radius and the Band's ``cap`` and
``relax``.

Shared by ``core.bounds`` and ``losses.clip_rules`` (no framework imports). Scalar checks (numbers, integers)
are in ``bandpo.validation``.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from bandpo.core.divergences import Divergence
from bandpo.validation import check_number_in, check_positive_number, is_finite_real

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


def expand_advantages(advantages: Tensor, shape: tuple[int, ...] | torch.Size) -> Tensor:
    """``advantages`` as a (B, T) view for ``shape = (B, T)``: one per sequence, (B,) or TRL's (B, 1), or one per
    token, (B, T). Torch's own broadcasting would line a (B,) tensor up with T, silently wrong when B == T.

    Raises:
        ValueError: naming the shape given and the shapes allowed.
    """
    b_t = tuple(shape)
    if tuple(advantages.shape) == b_t[:1]:
        return advantages.unsqueeze(-1).expand(b_t)  # (B,) -> (B, T)
    if tuple(advantages.shape) in ((b_t[0], 1), b_t):
        return advantages.expand(b_t)  # (B, 1) -> (B, T), or (B, T) itself
    raise ValueError(
        f"advantages shape {tuple(advantages.shape)} must be (B,), (B, 1) or (B, T) with (B, T) = {b_t}"
    )


def delta_range(divergence: Divergence) -> str:
    """The radii ``divergence`` accepts, for messages: ``"> 0"``, ``"in (0, 1000] for divergence 'kl' (...)"``
    or ``"in (0, 1) for divergence 'tv' (...)"``, with why the range ends (:func:`check_delta`)."""
    sat, top = divergence.saturating_delta, divergence.max_delta
    if math.isfinite(sat) and sat <= top:
        return (
            f"in (0, {sat:g}) for divergence {divergence.name!r} (it is at most {sat:g}: from there on its bounds "
            "are [0, 1/p] for every p, the whole simplex, and nothing is clipped)"
        )
    if math.isfinite(top):
        return (
            f"in (0, {top:g}] for divergence {divergence.name!r} (from about 745 on its bounds are [0, 1/p], "
            "the whole simplex)"
        )
    return "> 0"


DELTA_MIN = 1e-12
"""The smallest radius every divergence accepts. Below it a bound differs from 1 by about ``sqrt(2 delta (1-p)/p)``,
under 1.5e-6 at p = 1/2: near float32's resolution of 1, and the iterative solvers lose the bound (reverse KL's and
JS's Newton gave NaN from about 1e-30 in float32, 1e-33 in float64)."""

DELTA_MAX = 1e30
"""The largest radius any divergence accepts (KL's own limit, 1000, is lower): the unbounded divergences (chi^2,
Neyman chi^2, reverse KL) have no finite one, and above about 1e38 float32 overflows (``chi2`` raised inside
``torch.full``, ``neyman_chi2`` gave NaN at p = 1)."""


def delta_refused(delta: Tensor, divergence: Divergence) -> Tensor:
    """Where a radius tensor lies outside ``divergence``'s range (:func:`check_delta`): bool, no host sync."""
    return (
        ~torch.isfinite(delta)
        | (delta < DELTA_MIN)
        | (delta > min(divergence.max_delta, DELTA_MAX))
        | (delta >= divergence.saturating_delta)
    )


def check_delta(name: str, value: object, divergence: Divergence) -> float:
    """A trust-region radius of ``divergence``: a finite number in ``[DELTA_MIN, divergence.max_delta]`` (at most
    :data:`DELTA_MAX` for the unbounded ones) and below
    ``divergence.saturating_delta`` (a bounded divergence: TV < 1, squared Hellinger < 2, JS < log 2; at or
    above, the bounds are the whole simplex ``[0, 1/p]`` for every p, a clip rule that clips nothing).

    The one check for ``band_bounds``' scalar ``delta``, Band's ``delta`` and DPPO-KL's thresholds (KL's limit:
    ``bandpo.core.divergences.KL_DELTA_MAX``). Returns it as a float.
    """
    delta = check_positive_number(name, value)
    if delta > divergence.max_delta or delta >= divergence.saturating_delta:
        raise ValueError(f"{name} must be a finite number {delta_range(divergence)}, got {value!r}")
    if delta > DELTA_MAX:
        raise ValueError(
            f"{name} must be at most {DELTA_MAX:g} (larger radii overflow float32), got {value!r}"
        )
    if delta < DELTA_MIN:
        raise ValueError(
            f"{name} must be at least {DELTA_MIN:g} (below it the bounds differ from 1 by less than the solvers "
            f"resolve), got {value!r}"
        )
    return delta


NO_CAP_HINT = " (or None for no cap)"
"""What :func:`check_cap`'s message says of ``None``; a caller whose spelling of ``cap`` reads ``None`` as unset
replaces it (``bandpo.losses.method.ClipMethod``)."""


def check_cap(value: object, *, allow_none: bool = True) -> float | None:
    """The upper cap on a ratio bound: a finite number >= 1 (``None``, no cap, where ``allow_none``).

    The one check (and message) for every ``cap`` of the package: ``band_bounds`` and the clip rules.
    """
    if value is None and allow_none:
        return None
    if not is_finite_real(value) or not float(value) >= 1.0:
        alt = NO_CAP_HINT if allow_none else ""
        raise ValueError(f"cap must be a finite number >= 1{alt}, got {value!r}")
    return float(value)


def check_relax(value: object) -> tuple[float, float] | None:
    """Band's ``relax``: ``None`` or a pair ``(eps_low, eps_high)`` with ``0 <= eps_low <= 1`` and
    ``eps_high >= 0`` (the fixed interval ``[1 - eps_low, 1 + eps_high]`` joined to the bounds).

    The one check for ``band_bounds(relax=...)`` and the Band clip rule; returns the pair as floats.
    """
    if value is None:
        return None
    if not (isinstance(value, (tuple, list)) and len(value) == 2):
        raise ValueError(f"relax must be None or a pair (eps_low, eps_high), got {value!r}")
    return (
        check_number_in("relax eps_low", value[0], 0.0, 1.0),
        check_positive_number("relax eps_high", value[1], allow_zero=True),
    )


def check_logprobs(name: str, logp: Tensor) -> None:
    """Log-probabilities must be <= 0 and not NaN or +inf (``-inf``, probability 0, is allowed).

    Needs a device->host sync; callers make it optional.
    """
    bad = torch.isnan(logp) | (logp > 0)
    if bool(bad.any()):
        first = logp[bad].reshape(-1)[0].item()
        n = int(bad.sum())
        raise ValueError(
            f"{name} must hold log-probabilities in [-inf, 0] (no NaN, no +inf, no positive values); "
            f"found {n} invalid value(s), e.g. {first!r}"
        )
