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
    """Bisection steps that shrink the logit bracket (width <= 2 * 750) below the dtype's resolution."""
    return 72 if dtype == torch.float64 else 36


_THETA_MAX = {torch.float64: 750.0, torch.float32: 105.0}


def generic_bounds(
    f: Generator, logp: Tensor, log1mp: Tensor, delta: Tensor, iterations: int | None = None
) -> tuple[Tensor, Tensor]:
    """Band bounds for any convex generator ``f`` by fixed-step bisection.

    Args:
        f: generator, elementwise on tensors of ``logp``'s dtype, convex with ``f(1) = 0``. ``inf`` is allowed
            (e.g. ``-log 0``); ``nan`` is treated as infeasible.
        logp, log1mp: (...) float, ``log p`` and ``log(1 - p)`` for ``p`` in (0, 1), both finite.
        delta: (...) or scalar tensor, trust-region radius > 0.
        iterations: bisection steps per side (default: 72 in float64, 36 in float32).

    Returns:
        ``(lo, hi)``, (...) float: the feasible end of the final bracket, so ``g_f(p, lo), g_f(p, hi) <= delta``.

    Both sides are bisected in the logit of the token's new probability, ``theta = logit(r p)``, which
    represents the new mass of the token ``x = sigmoid(theta)`` and of the complement ``1 - x =
    sigmoid(-theta)`` without cancellation at either end of the simplex:
    ``r = exp(logsigmoid(theta) - log p)``, ``c = exp(logsigmoid(-theta) - log(1-p))``. The upper root lies in
    ``[logit p, THETA_MAX]`` and the lower one in ``[-THETA_MAX, logit p]``. Saturation (Prop. 3) is checked
    explicitly at ``r = 1/p`` (``hi = 1/p``) and ``r = 0`` (``lo = 0``).
    """
    dt = logp.dtype
    iterations = default_iterations(dt) if iterations is None else iterations
    theta_max = _THETA_MAX.get(dt, 105.0)
    logp, log1mp, delta = torch.broadcast_tensors(logp, log1mp, delta)
    p, q = torch.exp(logp), torch.exp(log1mp)

    def g(theta: Tensor) -> Tensor:
        r = torch.exp(F.logsigmoid(theta) - logp)
        c = torch.exp(F.logsigmoid(-theta) - log1mp)
        return p * f(r) + q * f(c)

    theta0 = logp - log1mp
    far = torch.full_like(logp, theta_max)
    hi_in, hi_out = theta0.clone(), far  # feasible end / infeasible end
    lo_in, lo_out = theta0.clone(), -far
    for _ in range(iterations):
        mid = 0.5 * (hi_in + hi_out)
        ok = g(mid) <= delta
        hi_in, hi_out = torch.where(ok, mid, hi_in), torch.where(ok, hi_out, mid)
        mid = 0.5 * (lo_in + lo_out)
        ok = g(mid) <= delta
        lo_in, lo_out = torch.where(ok, mid, lo_in), torch.where(ok, lo_out, mid)
    zero = torch.zeros_like(p)
    hi = torch.exp(F.logsigmoid(hi_in) - logp)
    lo = torch.exp(F.logsigmoid(lo_in) - logp)
    hi = torch.where(p * f(torch.reciprocal(p)) + q * f(zero) <= delta, torch.reciprocal(p), hi)
    lo = torch.where(p * f(zero) + q * f(torch.reciprocal(q)) <= delta, zero, lo)
    return lo, hi


_U_SWITCH = 30.0  # beyond, log(1 + a (e^u - 1)) ~ log a + u has no cancellation left to avoid


def kl_bounds(logp: Tensor, log1mp: Tensor, delta: Tensor, iterations: int = 3) -> tuple[Tensor, Tensor]:
    """Band bounds for ``KL(pi_old || pi_new)`` by Halley's method; ``delta`` may be a per-token tensor.

    With ``x = r p`` the token's new probability, ``g = KL(Bern(p) || Bern(x))``. The upper root for ``p`` and
    the lower root (mirrored: ``x -> 1 - x``, ``p <-> q``) are the same problem, so both sides are solved at
    once on a stacked (2, ...) tensor as "the upper root for a in {p, q}", ``b = 1 - a``, in the log-odds shift
    ``u = logit(x) - logit(a) > 0``:

        g(u) = log(1 + a (e^u - 1)) - a u              (evaluated as written for a <= 1/2,
             = b u + log(1 + b (e^-u - 1))              and in this form for a > 1/2: no cancellation)
        g'(u) = x - a = a b (1 - e^-u) e^(u - L),   g''(u) = x (1 - x) = a b e^(u - 2L),
        L = log(1 + a (e^u - 1)).

    ``g`` is convex in ``u``. Start: the smaller of the quadratic guess ``sqrt(2 delta / (a b))`` and the outer
    guess from ``g >= b log(b / (1 - x)) + a log a``; Halley then converges cubically (3 steps reach float64
    round-off over p in [1e-30, 1 - 1e-7], delta in [1e-3, 1]: ``tests/core/test_bounds.py``).
    Results: ``log hi = u_p - L_p = -log(a + b e^-u)`` (p side) and ``log lo = -L_q``.

    Args:
        logp, log1mp: (...) float, ``log p`` and ``log(1 - p)``, both finite (p in (0, 1)).
        delta: (...) or scalar tensor > 0.
        iterations: Halley steps.

    Returns:
        ``(log_lo, log_hi)``, (...) float.
    """
    loga = torch.stack(torch.broadcast_tensors(logp, log1mp))  # (2, ...)
    logb = torch.stack(torch.broadcast_tensors(log1mp, logp))
    a, b = torch.exp(loga), torch.exp(logb)
    d = delta
    small = a <= 0.5
    c = (d - a * loga) / b
    u_outer = torch.log(-torch.expm1(logb - c)) + c - loga
    u = torch.minimum(u_outer, torch.sqrt(2.0 * d / (a * b)))
    tiny = torch.finfo(logp.dtype).tiny

    def form_a(
        u: Tensor,
    ) -> Tensor:  # log(1 + a (e^u - 1)): log1p for small u, logaddexp(log b, log a + u) beyond
        return torch.where(
            u < _U_SWITCH,
            torch.log1p(a * torch.expm1(torch.clamp(u, max=_U_SWITCH))),
            torch.logaddexp(logb, loga + u),
        )

    for _ in range(iterations):
        emn = torch.expm1(-u)
        log_d_a = form_a(u)
        tail_b = torch.log1p(b * emn)
        h = torch.where(small, log_d_a - a * u, b * u + tail_b) - d
        big_l = torch.where(small, log_d_a, u + tail_b)
        # Halley step u -= t / (1 - t k / 2), t = h / h1, k = h2 / h1, in logs so nothing under- or overflows
        t = h * torch.exp(big_l - u - loga - logb) / (-emn)
        k = torch.exp(-big_l) / (-emn)
        u = torch.clamp(u - t / (1.0 - 0.5 * t * k), min=tiny)
    # log hi = u - L = -log(a + b e^-u), written so that no large u cancels against L (float32: u ~ 1/q)
    tail = torch.where(small, torch.logaddexp(loga, logb - u), torch.log1p(b * torch.expm1(-u)))
    big_l = torch.where(small, form_a(u), u + tail)
    return -big_l[1], -tail[0]


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
        # NaN input (unchecked) must not index out of range
        idx = u.to(torch.long).clamp_(0, self.n_points - 1)
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
