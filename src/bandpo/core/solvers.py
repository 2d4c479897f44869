"""Solvers for the Band equation ``g_f(p, r) = delta`` (see ``bandpo.core.divergences``).

Three solvers, all elementwise, vectorised and free of device->host synchronisation (fixed iteration counts,
no data-dependent Python control flow), so they run inside CUDA graphs and under ``torch.compile``:

* ``generic_bounds``: bracketed bisection on the generator ``f`` alone; works for any convex ``f`` and is the
  reference the other two are tested against.
* ``kl_bounds``: Halley's method for ``f(u) = -log u`` in logit coordinates, from analytic outer starting
  points; 3 iterations reach float64 round-off on p in [1e-300, 1 - 1e-16], delta in [1e-3, 1].
* ``BoundsTable``: for a scalar ``delta``, a cached table of exact bounds indexed by the bit pattern of
  ``-logp`` (2^m bins per octave), linearly interpolated: integer ops, two gathers and two ``exp``.

All functions take ``p``/``q``/``logp`` already computed in the compute dtype (float32 or float64), with
``logp`` clamped away from 0 and -inf by the caller (``bandpo.core.bounds``).
"""

from __future__ import annotations

import math
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable

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
# The table's coordinate is the bit pattern of x = -logp >= 0 (IEEE-754): for a positive float the bits are
# (biased exponent << MANT) | mantissa, so ``bits >> (MANT - m)`` numbers 2^m equal bins per octave of x, and
# within one bin x is linear in the low bits. Index and interpolation weight then cost three integer ops and no
# log; octaves [2^E_MIN, 2^E_MAX) of x are tabulated, i.e. p from 1 - 9e-13 down to e^-1024.
_MANT = {torch.float32: 23, torch.float64: 52}
_BIAS = {torch.float32: 127, torch.float64: 1023}
_INT = {torch.float32: torch.int32, torch.float64: torch.int64}
_PAIR = {torch.float32: torch.int64}  # a (value, slope) pair of float32 gathered as one 8-byte element

# bins per octave (log2) per compute dtype: the interpolation error scales as 4^-m (measured in
# benchmarks/bench.py: <= 2.9e-5 relative at m = 11 in float32, <= 2.9e-7 at m = 14 in float64; the tests assert 1e-4)
TABLE_BINS_LOG2 = {torch.float32: 11, torch.float64: 14}
_SOLVE_X_MAX = 700.0  # beyond, p < e^-700: the bounds have reached their p -> 0 limits in float64


def chunk_ranges(n: int, chunk: int, device: torch.device) -> list[tuple[int, int]]:
    """``(start, end)`` of the pieces an elementwise solver runs on: on the CPU, chunks of ``chunk`` to
    ``2 chunk`` elements (no small trailing chunk), so that temporaries stay in cache; elsewhere one piece.
    Static in the shape: no data-dependent control flow."""
    pieces = max(n // chunk, 1) if device.type == "cpu" else 1
    size = max(-(-n // pieces), 1)
    return [(start, min(start + size, n)) for start in range(0, n, size)]


class BoundsTable:
    """Exact Band bounds for one (divergence, scalar delta), tabulated on the bit pattern of ``x = -logp``.

    Nodes ``x_k = 2^(E_MIN + k // 2^m) (1 + (k mod 2^m) / 2^m)``, ``k = 0 .. 2^m (E_MAX - E_MIN)``, hold
    ``z_lo = log lo`` and ``z_hi = log hi`` (float64 at build). Between nodes, x is linear in the low bits of its
    float representation, and so is the linear interpolant: ``z(x) = z_k + (z_{k+1} - z_k) * low_bits / 2^SH``.
    ``log hi = x + log(hi p)`` is interpolated exactly in its linear part ``x``. Node 0 holds the limit p -> 1
    (so p = 1 gives hi = 1 exactly); below 2^E_MIN the error is < sqrt(2 delta 2^E_MIN) ~ 1e-6 delta^(1/2);
    beyond 2^E_MAX, the last interval is used (p < e^-1024: zero in every float format).

    Memory per (divergence, delta, device, dtype): ``(E_MAX - E_MIN) 2^m + 1`` nodes x (value, slope) x 2 bounds:
    1.6 MB in float32 (m = 11), 26 MB in float64 (m = 14). Tables live in a small LRU cache.
    """

    E_MIN = -40
    E_MAX = 10

    def __init__(self, solve: Callable[[Tensor], tuple[Tensor, Tensor]], bins_log2: int) -> None:
        """``solve(logp) -> (lo, hi)``: an exact float64 solver for this divergence and delta, valid for
        logp in [-700, -1e-300]. ``bins_log2``: m, the table has 2^m bins per octave of x."""
        m = bins_log2
        n = (self.E_MAX - self.E_MIN) << m  # intervals; nodes 0..n
        k = torch.arange(n + 1, dtype=torch.float64)
        octave = torch.floor(k / 2**m)
        x = torch.ldexp(1.0 + (k - octave * 2**m) / 2**m, (octave + self.E_MIN).to(torch.int64))
        x_solve = torch.clamp(x, max=_SOLVE_X_MAX)
        x_solve[0] = 1e-300  # node 0: the p -> 1 limit
        lo, hi = solve(-x_solve)
        self.z_lo = torch.log(lo)  # may be -inf (saturated, or underflow): clamped per compute dtype
        self.z_hi = torch.log(hi) + (x - x_solve)  # p < e^-700: hi = c / p, log hi linear in x
        self.z_hi[0] = 0.0
        self.bins_log2 = m
        self.n_intervals = n
        self._copies: dict[tuple[torch.device, torch.dtype], tuple[Tensor, Tensor]] = {}

    def _pairs(self, z: Tensor, dtype: torch.dtype, shift: int, zmin: float) -> Tensor:
        """(n+1, 2) [value, slope per unit of low bits] of ``log2 = z / ln 2`` in ``dtype`` (``exp2`` is
        cheaper than ``exp``), the last slope 0."""
        z = torch.clamp(z, min=zmin) / math.log(2.0)
        slope = torch.diff(z, append=z[-1:]) * 2.0**-shift
        return torch.stack([z, slope], dim=-1).to(dtype).contiguous()

    def _on(self, device: torch.device, dtype: torch.dtype) -> tuple[Tensor, Tensor]:
        key = (device, dtype)
        if key not in self._copies:
            shift = _MANT[dtype] - self.bins_log2
            # log lo floor: just above the smallest normal number, not -inf (the denormal/underflow paths of
            # exp are 5-10x slower on CPUs); the lookup maps it back to 0
            zmin = math.log(torch.finfo(dtype).tiny) + 0.5
            self._copies[key] = (
                self._pairs(self.z_lo, dtype, shift, zmin).to(device),
                self._pairs(self.z_hi, dtype, shift, -math.inf).to(device),
            )
        return self._copies[key]

    def lookup(self, logp: Tensor, cap: float | None = None) -> tuple[Tensor, Tensor]:
        """Interpolated ``(lo, hi)`` with ``0 <= lo <= 1 <= hi <= cap``.

        Args:
            logp: (...) float32 or float64 (the table's compute dtype), any values in [-inf, 0]; NaN and
                positive values (unchecked input) give garbage in [0, 1] x [1, cap] (hi = inf without a cap),
                never an out-of-range index.
            cap: upper cap on ``hi`` (applied before ``exp``, so ``1/p`` overflow is never computed).

        Returns:
            ``(lo, hi)``, (...) in ``logp``'s dtype. Cost: 4 integer passes, 2 gathers of (value, slope)
            pairs, and per bound one multiply-add, one clamp and one ``exp2``. On the CPU the work runs in
            chunks of ``CPU_CHUNK`` to ``2 CPU_CHUNK`` tokens, so the temporaries stay in cache (1.8x faster at
            16M tokens).
        """
        dt = logp.dtype
        if dt not in _MANT or self.bins_log2 != TABLE_BINS_LOG2[dt]:
            raise ValueError(f"this table serves {TABLE_BINS_LOG2} bins for its dtype; got logp of {dt}")
        tables = self._on(logp.device, dt)
        flat = logp.reshape(-1)
        lo, hi = torch.empty_like(flat), torch.empty_like(flat)
        n = flat.numel()
        for start, end in chunk_ranges(n, self.CPU_CHUNK, logp.device):
            self._lookup_into(flat[start:end], tables, cap, lo[start:end], hi[start:end])
        return lo.view(logp.shape), hi.view(logp.shape)

    CPU_CHUNK = 1 << 18

    def _lookup_into(
        self, logp: Tensor, tables: tuple[Tensor, Tensor], cap: float | None, lo: Tensor, hi: Tensor
    ) -> None:
        """:meth:`lookup` on a flat ``logp`` (N,), writing into ``lo``/``hi`` (N,)."""
        dt = logp.dtype
        lo_tab, hi_tab = tables
        shift = _MANT[dt] - self.bins_log2
        bits = logp.view(_INT[dt]) & torch.iinfo(_INT[dt]).max  # bits of x = |logp|
        frac = (bits & ((1 << shift) - 1)).to(dt)  # low bits: the position inside the bin, 0 .. 2^shift - 1
        idx = bits.bitwise_right_shift_(shift).sub_((_BIAS[dt] + self.E_MIN) << self.bins_log2)
        idx.clamp_(0, self.n_intervals - 1)

        def gather(tab: Tensor) -> Tensor:  # (N, 2) [value, slope] rows; float32 pairs as one int64 each
            if dt not in _PAIR:
                return tab.index_select(0, idx)
            return tab.view(_PAIR[dt]).reshape(-1).index_select(0, idx).view(dt).view(-1, 2)

        v_hi = gather(hi_tab)
        # log2 hi >= 0 and log2 lo <= 0 up to rounding: clamp, so exp2 gives lo <= 1 <= hi exactly
        # (the exponent is capped a little above log2(cap), so capped tokens get exactly cap below)
        log2_cap = math.inf if cap is None else math.log2(cap) + 1e-3
        torch.addcmul(v_hi[:, 0], v_hi[:, 1], frac, out=hi).clamp_(0.0, log2_cap).exp2_()
        if cap is not None:
            hi.clamp_(max=cap)
        v_lo = gather(lo_tab)
        torch.addcmul(v_lo[:, 0], v_lo[:, 1], frac, out=lo).clamp_(max=0.0).exp2_()
        torch.nn.functional.threshold_(lo, 2.0 * torch.finfo(dt).tiny, 0.0)  # the log-lo floor back to 0


_TABLE_CACHE: OrderedDict[tuple[Hashable, float, int], BoundsTable] = OrderedDict()
_TABLE_LOCK = threading.Lock()
TABLE_CACHE_SIZE = 8


def cached_table(
    key: Hashable, delta: float, bins_log2: int, build: Callable[[], BoundsTable]
) -> BoundsTable:
    """An LRU cache of tables keyed by (divergence, delta, bins_log2); built on first use (~0.1-2 s). The key
    is the ``Divergence`` itself (a frozen dataclass: equal name *and* generator), so two user generators
    never share a table."""
    k = (key, float(delta), bins_log2)
    if torch.compiler.is_compiling():  # traced once by Dynamo (which cannot enter a lock): no other thread
        table = _TABLE_CACHE.get(k)
        return table if table is not None else build()
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
