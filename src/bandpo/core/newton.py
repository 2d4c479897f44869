"""Fast exact Band bounds for an f-divergence whose generator derivative ``f'`` is known (Newton's method).

Used for ``reverse_kl`` and ``js`` (``Divergence.fast_solver == "newton"``); ``kl`` keeps its Halley solver
``bandpo.core.solvers.kl_bounds``. Elementwise, vectorised and free of device->host synchronisation (fixed
iteration counts, no data-dependent Python control flow), so it runs inside CUDA graphs and under
``torch.compile``; ``delta`` may be a per-token tensor.

Both sides are one problem. With ``x = r p`` the token's new mass, the Band equation reads

    g(x) = a f(x / a) + b f((1 - x) / b) = delta,    g'(x) = f'(x / a) - f'((1 - x) / b),

with ``(a, b) = (p, q)`` for the upper root (``hi = x / p``). Mirrored (``x -> 1 - x``), the lower root is the
upper root of the same equation with ``(a, b) = (q, p)``, and ``lo = (1 - x) / p``. So both are solved at once
on a stacked (2, ...) tensor as "the root ``x`` in ``(a, 1]`` of ``g(x) = delta``". ``g`` is convex in ``x``
with ``g(a) = g'(a) = 0``, hence:

* a Newton step from any point of ``(a, 1)`` lands on the outer side of the root (``g >= delta``): the tangent
  of a convex function lies below it; from the outer side Newton converges monotonically (and quadratically);
* the chord ``g(x) <= g(1) (x - a) / b`` gives a point on the inner side, ``z_in = delta / g(1)`` in the
  relative coordinate ``z = (x - a) / b``; the quadratic model ``g ~ f''(1) (x - a)^2 / (2 a b)`` gives
  ``z_q = sqrt(2 delta a / (f''(1) b))``. Start: ``z0 = max(z_in, min(z_q, (1 + z_in) / 2))`` (the quadratic
  guess, but never below the certified inner point and never at the simplex edge, where ``g'`` is infinite
  for ``f'(0) = -inf``).

The new masses of the token and of the complement, ``x`` and ``y = 1 - x``, are carried as two separate
numbers (the logit ``log x - log y`` in split form): ``hi = x / p`` needs ``x`` to relative precision and
``lo = y / p`` (mirrored side) needs ``y``, which may be astronomically small near saturation. A Newton step
moves them by ``-/+ dx``, which keeps ``x + y = 1`` without ever forming ``1 - x``. ``g`` is evaluated as
``a f~(x/a) + b f~(y/b)`` with ``f~(u) = f(u) - f'(1) (u - 1)`` (equal to ``g`` since
``a (r - 1) + b (c - 1) = 0``): ``f~`` is flat at 1, so rounding ``r = x/a`` near 1 costs nothing to first order (with ``f`` itself,
float32 ``reverse_kl`` loses ~1e-3 relative accuracy near saturation).

Saturation (paper Prop. 3) is detected exactly as ``solvers.generic_bounds`` does: ``hi = 1/p`` where
``p f(1/p) + q f(0) <= delta`` and ``lo = 0`` where ``p f(0) + q f(1/q) <= delta``.

Iterations (default): 5 in float64, 4 in float32, for any ``delta``. Measured on p in [1e-30, 1 - 1e-7],
delta in [1e-3, 1] (``tests/core/test_newton.py``; float64 generic bisection and mpmath references): in
float64, 4 steps reach <= 1e-7 relative error and 5 steps <= 1e-11; in float32, 3 steps <= 1e-3 and 4 steps
~1e-5 (round-off).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import Tensor

Generator = Callable[[Tensor], Tensor]


def default_newton_iterations(dtype: torch.dtype) -> int:
    """Newton steps per call: 5 in float64, 4 in float32 (measured margins in the module docstring)."""
    return 5 if dtype == torch.float64 else 4


# the complement's new mass never goes below e^-EDGE (a normal number in the dtype): ``f'(0)`` may be -inf
_EDGE = {torch.float64: 700.0, torch.float32: 80.0}
_FD_STEP = 2.0**-10  # central difference for f''(1) (only the starting point uses it)


def _curvature_at_one(fprime: Generator, like: Tensor) -> Tensor:
    """``f''(1)`` by a central difference of ``f'``, as a 0-dim tensor on ``like``'s device and dtype.

    Built from fill kernels only (no host->device copy), so it is safe inside CUDA-graph capture."""
    up = torch.full((), 1.0 + _FD_STEP, dtype=like.dtype, device=like.device)
    down = torch.full((), 1.0 - _FD_STEP, dtype=like.dtype, device=like.device)
    return (fprime(up) - fprime(down)) * (0.5 / _FD_STEP)


def fdiv_newton_bounds(
    f: Generator,
    fprime: Generator,
    logp: Tensor,
    log1mp: Tensor,
    delta: Tensor,
    iterations: int | None = None,
    curvature: float | Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    """Band log-bounds ``(log lo, log hi)`` for a convex generator ``f`` with derivative ``fprime``.

    Args:
        f: generator ``f(u)``, elementwise on float tensors (``u >= 0``), convex with ``f(1) = 0`` and
            ``f(0)`` finite (the divergence saturates).
        fprime: its derivative ``f'(u)``, elementwise, evaluated only at ``u > 0``; finite or at most
            logarithmically singular at 0 (``reverse_kl``, ``js``: ``f' ~ log u``). Near-edge roots are reached
            from the edge ``y = e^-EDGE`` in a few steps only then; a stronger singularity (hellinger's
            ``-u^-1/2``) or ``f(0) = inf`` (kl, neyman_chi2) would need many more steps: those divergences
            have closed forms or their own solver.
        logp, log1mp: (...) float32 or float64, ``log p`` and ``log(1 - p)`` for ``p`` in (0, 1), both finite
            (the caller clamps ``logp`` to [-80, -1e-20] in float32, [-700, -1e-200] in float64).
        delta: tensor of ``logp``'s dtype broadcastable to (...) (per token, or 0-dim), radius > 0.
        iterations: Newton steps (default :func:`default_newton_iterations`).
        curvature: ``f''(1)`` for the starting point; default: a central difference of ``fprime`` at 1.

    Returns:
        ``(log_lo, log_hi)``, (...) in ``logp``'s dtype: ``log_lo = -inf`` where ``lo = 0`` is saturated,
        ``log_hi = -logp`` where ``hi = 1/p`` is saturated. Log-bounds like ``solvers.kl_bounds``:
        ``bounds._in_log_space`` exponentiates them and maps ``log_hi`` back to the unclamped ``p``.
    """
    dt = logp.dtype
    iterations = default_newton_iterations(dt) if iterations is None else iterations
    edge = math.exp(-_EDGE.get(dt, 80.0))
    tiny = torch.finfo(dt).tiny
    logp, log1mp = torch.broadcast_tensors(logp, log1mp)
    loga = torch.stack([logp, log1mp])  # (2, ...): (p, q) for hi, mirrored (q, p) for lo
    logb = torch.stack([log1mp, logp])
    a, b = torch.exp(loga), torch.exp(logb)
    inv_a, inv_b = torch.reciprocal(a), torch.reciprocal(b)

    # saturation: g(1) = a f(1/a) + b f(0) <= delta means the whole edge of the simplex is inside the region.
    # float64: the very test of generic_bounds; float32: with f~ (below) as the iteration does, so that b
    # survives when a rounds to 1 (p < 6e-8; the plain sum then calls lo saturated for delta < ~6e-8)
    f1 = fprime(torch.ones((), dtype=dt, device=logp.device))
    if dt == torch.float64:
        g_edge = a * f(inv_a) + b * f(torch.zeros_like(a))
    else:
        g_edge = a * (f(inv_a) - f1 * (inv_a - 1.0)) + b * (f(torch.zeros_like(a)) + f1)
    saturated = g_edge <= delta

    # start in z = (x - a) / b: the quadratic guess, kept above the chord's inner point and off the edge
    kappa = _curvature_at_one(fprime, logp) if curvature is None else curvature
    z_in = torch.clamp(delta / g_edge, max=1.0)
    z_q = torch.sqrt(2.0 * delta * a * inv_b / kappa)
    z = torch.maximum(z_in, torch.minimum(z_q, 0.5 * (1.0 + z_in)))
    x = a + b * z
    y = torch.clamp(b - b * z, min=edge)

    # Newton in x: g(x) = a f~(x/a) + b f~(y/b), f~(u) = f(u) - f'(1) (u - 1); g'(x) = f'(x/a) - f'(y/b);
    # x -= dx, y += dx with dx = (g - delta) / g'
    for _ in range(iterations):
        r, c = x * inv_a, y * inv_b
        g = a * (f(r) - f1 * (r - 1.0)) + b * (f(c) - f1 * (c - 1.0))
        dx = (g - delta) / torch.clamp(fprime(r) - fprime(c), min=tiny)  # g' > 0 for x > a
        # an overshoot past the simplex edge lands on it, on both sides (y + dx < edge <=> x - dx > 1 - edge)
        x = torch.clamp(x - dx, max=1.0 - edge)
        y = torch.clamp(y + dx, min=edge)

    log_hi = torch.where(saturated[0], -logp, torch.log(x[0]) - logp)
    log_lo = torch.where(saturated[1], torch.full_like(logp, -math.inf), torch.log(y[1]) - logp)
    return log_lo, log_hi
