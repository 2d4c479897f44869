"""High-precision (mpmath, 24 digits) reference for the Band bounds, independent of bandpo's solvers.

Each bound is a root of g_f(p, r) = p f(r) + (1-p) f((1 - r p)/(1 - p)) = delta. The upper root is found in
the complement's new mass y = 1 - r p in (0, q] and the lower root in the token's new mass x = r p in [0, p),
each in log coordinates (roots can be astronomically small) by bisection in mpmath arithmetic.
"""

from __future__ import annotations

import functools

import mpmath as mp

mp.mp.dps = 24


def _xlogx(u):
    return mp.mpf(0) if u == 0 else u * mp.log(u)


GENERATORS = {
    "kl": lambda u: mp.inf if u == 0 else -mp.log(u),
    "reverse_kl": _xlogx,
    "tv": lambda u: abs(u - 1) / 2,
    "chi2": lambda u: (u - 1) ** 2,
    "neyman_chi2": lambda u: mp.inf if u == 0 else (u - 1) ** 2 / u,
    "hellinger": lambda u: (mp.sqrt(u) - 1) ** 2,
    "js": lambda u: (_xlogx(u) - (1 + u) * mp.log((1 + u) / 2)) / 2,
}

_DEPTH = 900  # search roots down to exp(-900) times the bracket scale


def _root_log(h, a, b, iterations: int = 84):
    """Root of increasing h on [a, b] with h(a) <= 0 < h(b): plain bisection (width 900 * 2^-84 ~ 5e-23)."""
    for _ in range(iterations):
        m = (a + b) / 2
        if h(m) > 0:
            b = m
        else:
            a = m
    return (a + b) / 2


@functools.cache
def reference_bounds(name: str, logp: float, delta: float) -> tuple[float, float]:
    """(lo, hi) as floats for divergence ``name`` at old log-probability ``logp`` (a float64 value)."""
    f = GENERATORS[name]
    lp = mp.mpf(logp)
    p = mp.exp(lp)
    q = -mp.expm1(lp)
    d = mp.mpf(delta)
    if q == 0:
        raise ValueError("reference needs p < 1")

    def g_upper(y):
        return p * f((1 - y) / p) + q * f(y / q)

    def g_lower(x):
        return p * f(x / p) + q * f(1 + (p - x) / q)

    # upper: g_upper decreases in y; root y* in (0, q)
    if g_upper(mp.mpf(0)) <= d:
        hi = 1 / p
    else:
        t_small = mp.log(q) - _DEPTH
        if g_upper(mp.exp(t_small)) <= d:
            hi = (1 - mp.exp(t_small)) / p
        else:
            t = _root_log(lambda t: d - g_upper(mp.exp(t)), t_small, mp.log(q))
            hi = (1 - mp.exp(t)) / p
    # lower: g_lower decreases in x; root x* in (0, p)
    if g_lower(mp.mpf(0)) <= d:
        lo = mp.mpf(0)
    else:
        t_small = lp - _DEPTH
        if g_lower(mp.exp(t_small)) <= d:
            lo = mp.mpf(0)  # root below exp(-900) p: zero in float64
        else:
            t = _root_log(lambda t: d - g_lower(mp.exp(t)), t_small, lp)
            lo = mp.exp(t) / p
    return float(lo), float(hi)


def g_value(name: str, logp: float, r: float) -> float:
    """g_f(p, r) in high precision."""
    f = GENERATORS[name]
    lp = mp.mpf(logp)
    p, q = mp.exp(lp), -mp.expm1(lp)
    r = mp.mpf(r)
    return float(p * f(r) + q * f((1 - r * p) / q))
