"""Solvers for the Band equation ``g_f(p, r) = delta`` (see ``bandpo.core.divergences``).

Three solvers, all elementwise, vectorised and free of device->host synchronisation (fixed iteration counts,
no data-dependent Python control flow), so they run inside CUDA graphs and under ``torch.compile``:

* ``generic_bounds``: bracketed bisection on the generator ``f`` alone; works for any convex ``f`` and is the
  reference the other two are tested against.
* ``kl_bounds``: Halley's method for ``f(u) = -log u`` in logit coordinates, from analytic outer starting
  points; 3 iterations reach float64 round-off on p in [1e-300, 1 - 1e-16], delta in [1e-3, 1].
* ``BoundsTable``: for a scalar ``delta``, a cached table of exact bounds on a uniform grid of
  ``s = logp - log(-logp)``, linearly interpolated: a handful of elementwise ops and one gather.

All functions take ``p``/``q``/``logp`` already computed in the compute dtype (float32 or float64), with
``logp`` clamped away from 0 and -inf by the caller (``bandpo.core.bounds``).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor

Generator = Callable[[Tensor], Tensor]


def default_iterations(dtype: torch.dtype) -> int:
    """Bisection steps that shrink a unit bracket below the dtype's resolution."""
    return 64 if dtype == torch.float64 else 32


def generic_bounds(
    f: Generator, p: Tensor, q: Tensor, delta: Tensor, iterations: int | None = None
) -> tuple[Tensor, Tensor]:
    """Band bounds for any convex generator ``f`` by fixed-step bisection.

    Args:
        f: generator, elementwise on tensors of ``p``'s dtype, convex with ``f(1) = 0``. ``inf`` is allowed
            (e.g. ``-log 0``); ``nan`` is treated as infeasible.
        p, q: (...) float, ``p = pi_old(a|s)`` in (0, 1) and ``q = 1 - p`` (computed without cancellation).
        delta: (...) or scalar tensor, trust-region radius > 0.
        iterations: bisection steps per side (default: 64 in float64, 32 in float32).

    Returns:
        ``(lo, hi)``, (...) float: the feasible end of the final bracket, so ``g_f(p, lo), g_f(p, hi) <= delta``.

    The upper side is parametrised by the complement's new mass ``y = 1 - r p`` in [0, q] (``r = (1-y)/p``,
    ``c = y/q``), the lower side by the token's new mass ``x = r p`` in [0, p] (``c = 1 + (p-x)/q``): both
    keep ``r`` and ``c`` free of cancellation at either end of the simplex. Saturation (Prop. 3) is the
    bracket end ``y = 0`` (``hi = 1/p``) or ``x = 0`` (``lo = 0``) being feasible, checked explicitly.
    """
    iterations = default_iterations(p.dtype) if iterations is None else iterations
    p, q, delta = torch.broadcast_tensors(p, q, delta)

    def g_upper(y: Tensor) -> Tensor:
        return p * f((1.0 - y) / p) + q * f(y / q)

    def g_lower(x: Tensor) -> Tensor:
        return p * f(x / p) + q * f(1.0 + (p - x) / q)

    zero = torch.zeros_like(p)
    # upper: feasible end starts at y = q (r = 1), the other at y = 0 (r = 1/p)
    y_in, y_out = q.clone(), zero.clone()
    x_in, x_out = p.clone(), zero.clone()
    for _ in range(iterations):
        y_mid = 0.5 * (y_in + y_out)
        ok = g_upper(y_mid) <= delta
        y_in = torch.where(ok, y_mid, y_in)
        y_out = torch.where(ok, y_out, y_mid)
        x_mid = 0.5 * (x_in + x_out)
        ok = g_lower(x_mid) <= delta
        x_in = torch.where(ok, x_mid, x_in)
        x_out = torch.where(ok, x_out, x_mid)
    y_in = torch.where(g_upper(zero) <= delta, zero, y_in)
    x_in = torch.where(g_lower(zero) <= delta, zero, x_in)
    return x_in / p, (1.0 - y_in) / p


def kl_bounds(
    p: Tensor, q: Tensor, logp: Tensor, log1mp: Tensor, delta: Tensor, iterations: int = 3
) -> tuple[Tensor, Tensor]:
    """Band bounds for ``KL(pi_old || pi_new)`` by Halley's method; ``delta`` may be a per-token tensor.

    With ``x = r p`` the token's new probability, ``g = KL(Bern(p) || Bern(x))``. In logit coordinates
    ``theta = logit(x)`` this is the Bregman divergence of ``softplus``:

        g(theta) = softplus(theta) - p theta - H(p),     H(p) = -p log p - q log q,

    convex in ``theta``, with ``g' = x - p`` and ``g'' = x (1 - x)``. The upper root for ``p`` and the lower root
    (mirrored: ``theta -> -theta``, ``p <-> q``) are the same problem, so both sides are solved at once on a
    stacked (2, ...) tensor as "upper root for a in {p, q}", written without cancellation as

        h(theta) = softplus(-theta) + b theta - H - delta = 0,   b = 1 - a,   theta > logit(a).

    Start: the smaller of the quadratic guess ``logit(a) + sqrt(2 delta / (a b))`` and the outer guess from
    ``g >= b log(b / (1 - x)) + a log a``; Halley then converges cubically (measured: 3 steps reach float64
    round-off over p in [1e-30, 1 - 1e-7], delta in [1e-3, 1]).

    Args:
        p, q, logp, log1mp: (...) float, ``p`` in (0, 1), ``q = 1-p``, their logs (``logp`` clamped, finite).
        delta: (...) or scalar tensor > 0.
        iterations: Halley steps.

    Returns:
        ``(log_lo, log_hi_times_p)``: ``log lo`` and ``log(hi * p) = log x_hi``; the caller subtracts its own
        (unclamped) ``logp`` so that ``p = 0`` maps to ``hi = inf`` exactly.
    """
    a = torch.stack(torch.broadcast_tensors(p, q))  # (2, ...)
    b = torch.stack(torch.broadcast_tensors(q, p))
    loga = torch.stack(torch.broadcast_tensors(logp, log1mp))
    logb = torch.stack(torch.broadcast_tensors(log1mp, logp))
    d = delta.expand_as(a) if delta.dim() <= a.dim() - 1 else delta
    entropy = -(p * logp + q * log1mp)  # (...)
    theta0 = loga - logb
    c = (d - a * loga) / b
    theta_outer = torch.log(-torch.expm1(logb - c)) - logb + c
    theta = torch.minimum(theta_outer, theta0 + torch.sqrt(2.0 * d / (a * b)))
    for _ in range(iterations):
        sig_neg = torch.sigmoid(-theta)
        h = F.softplus(-theta) + b * theta - entropy - d
        h1 = b - sig_neg  # = sigmoid(theta) - a, cancellation-free for a -> 1
        h2 = sig_neg * (1.0 - sig_neg)
        theta = theta - 2.0 * h * h1 / (2.0 * h1 * h1 - h * h2)
    log_x_hi = -F.softplus(-theta[0])
    log_lo = -F.softplus(theta[1]) - logp
    return log_lo, log_x_hi


# --------------------------------------------------------------------------------------------------- tables
def s_coordinate(logp: Tensor) -> Tensor:
    """Table coordinate ``s = logp - log(-logp)``: ~ logp as p -> 0, ~ -log(1-p) as p -> 1, monotone."""
    return logp - torch.log(-logp)


def logp_from_s(s: Tensor) -> Tensor:
    """Inverse of :func:`s_coordinate` (float64 Newton on ``v = -logp``: ``v + log v = -s``)."""
    v = torch.where(s < 0, -s, torch.exp(-s))  # asymptotic start on both sides
    for _ in range(60):
        v = v - (v + torch.log(v) + s) / (1.0 + 1.0 / v)
        v = torch.clamp(v, min=1e-300)
    return -v


class BoundsTable:
    """Exact Band bounds for one (divergence, scalar delta) on a uniform grid in ``s``, linearly interpolated.

    Stored (float64 at build, cast to the compute dtype): ``z_lo = log lo`` and ``z_hi = log(hi p)``, both
    smooth and bounded at the grid's ends (``z_hi -> log(1 - e^-delta)``-like constants as p -> 0, ``-> 0`` as
    p -> 1); outside ``[s_min, s_max]`` the end values are used (the bounds have reached their limits to
    better than 1e-16 there). Memory: ``4 * n_points`` numbers (default 160,001 points: 5.1 MB in float64,
    2.6 MB in float32) per (divergence, delta, device, dtype), kept in a small LRU cache.
    """

    S_MIN = -40.0
    S_MAX = 40.0

    def __init__(self, solve: Callable[[Tensor], tuple[Tensor, Tensor]], n_points: int = 160_001) -> None:
        """``solve(logp) -> (lo, hi)``: an exact float64 solver for this divergence and delta."""
        s = torch.linspace(self.S_MIN, self.S_MAX, n_points, dtype=torch.float64)
        logp = logp_from_s(s)
        lo, hi = solve(logp)
        z_lo = torch.log(lo).clamp(min=-1e4)  # lo = 0 (saturated / underflow) -> e^-1e4 = 0 again
        z_hi = torch.log(hi) + logp
        self.values = torch.stack([z_lo, z_hi], dim=-1)  # (M, 2)
        self.slopes = torch.diff(self.values, dim=0, append=self.values[-1:])  # (M, 2), 0 in the last row
        self.h = (self.S_MAX - self.S_MIN) / (n_points - 1)
        self.n_points = n_points
        self._copies: dict[tuple[torch.device, torch.dtype], tuple[Tensor, Tensor]] = {}

    def _on(self, device: torch.device, dtype: torch.dtype) -> tuple[Tensor, Tensor]:
        key = (device, dtype)
        if key not in self._copies:
            self._copies[key] = (self.values.to(device, dtype), self.slopes.to(device, dtype))
        return self._copies[key]

    def lookup(self, logp: Tensor) -> tuple[Tensor, Tensor]:
        """Interpolated ``(log lo, log hi)`` for ``logp`` (...) float, any values in [-inf, 0]."""
        values, slopes = self._on(logp.device, logp.dtype)
        flat = logp.reshape(-1)
        u = (s_coordinate(flat) - self.S_MIN) * (1.0 / self.h)
        u = torch.clamp(u, 0.0, float(self.n_points - 1))  # also maps s = -inf / +inf to the ends
        idx = u.to(torch.long)
        frac = (u - idx).unsqueeze(-1)  # (N, 1)
        z = torch.addcmul(values.index_select(0, idx), slopes.index_select(0, idx), frac)  # (N, 2)
        log_lo = z[:, 0].reshape(logp.shape)
        log_hi = (z[:, 1] - flat).reshape(logp.shape)
        return log_lo, log_hi


_TABLE_CACHE: OrderedDict[tuple[str, float, int], BoundsTable] = OrderedDict()
_TABLE_LOCK = threading.Lock()
TABLE_CACHE_SIZE = 16


def cached_table(
    key: str, delta: float, build: Callable[[], BoundsTable], n_points: int = 160_001
) -> BoundsTable:
    """An LRU cache of tables keyed by (divergence name, delta, n_points); built on first use (tens of ms)."""
    k = (key, float(delta), n_points)
    with _TABLE_LOCK:
        table = _TABLE_CACHE.get(k)
        if table is not None:
            _TABLE_CACHE.move_to_end(k)
            return table
    table = build()
    with _TABLE_LOCK:
        _TABLE_CACHE[k] = table
        while len(_TABLE_CACHE) > TABLE_CACHE_SIZE:
            _TABLE_CACHE.popitem(last=False)
    return table


def clear_table_cache() -> None:
    with _TABLE_LOCK:
        _TABLE_CACHE.clear()
