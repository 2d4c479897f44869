"""Solver internals: naive references, no host synchronisation, the table cache."""

from __future__ import annotations

import pytest
import torch

import bandpo
from bandpo.core import solvers


def naive_kl_bisection(p: float, delta: float, upper: bool, iters: int = 200) -> float:
    """Textbook bisection on r in [1, 1/p] (upper) or [0, 1] (lower) with the KL g of SPEC section 2."""
    import math

    def g(r: float) -> float:
        c = (1 - r * p) / (1 - p)
        return -p * math.log(r) - (1 - p) * math.log(c) if r > 0 and c > 0 else math.inf

    a, b = (1.0, 1.0 / p) if upper else (0.0, 1.0)
    for _ in range(iters):
        m = 0.5 * (a + b)
        inside = g(m) <= delta
        if upper:
            a, b = (m, b) if inside else (a, m)
        else:
            a, b = (a, m) if inside else (m, b)
    return a if upper else b


@pytest.mark.parametrize("p", [0.01, 0.08, 0.3, 0.5, 0.9, 0.99])
@pytest.mark.parametrize("delta", [0.01, 0.05, 0.5])
def test_every_kl_method_matches_naive_bisection(p: float, delta: float) -> None:
    lp = torch.tensor([p], dtype=torch.float64).log()
    want = (naive_kl_bisection(p, delta, upper=False), naive_kl_bisection(p, delta, upper=True))
    for method in ("table", "newton", "bisection"):
        lo, hi = bandpo.band_bounds(lp, delta, "kl", cap=None, method=method)
        assert lo.item() == pytest.approx(want[0], rel=1e-6)
        assert hi.item() == pytest.approx(want[1], rel=1e-6)


def test_s_coordinate_roundtrip() -> None:
    s = torch.linspace(-40, 40, 1001, dtype=torch.float64)
    assert torch.allclose(solvers.s_coordinate(solvers.logp_from_s(s)), s, atol=1e-10)


def test_table_is_cached_and_shared() -> None:
    solvers.clear_table_cache()
    lp = -torch.rand(100)
    bandpo.band_bounds(lp, 0.0731, "kl")
    n = len(solvers._TABLE_CACHE)
    bandpo.band_bounds(lp.double(), 0.0731, "kl")  # another dtype: same float64 table, cast copy
    assert len(solvers._TABLE_CACHE) == n == 1


@pytest.mark.parametrize("method", ["table", "newton", "bisection"])
def test_no_host_sync_in_solvers(method: str) -> None:
    """With check_values=False the solvers never read a tensor value on the host (item/bool/tolist...):
    fixed iteration counts only. Checked by intercepting the Tensor methods that copy a value to the host."""
    lp = -torch.rand(64, dtype=torch.float64)
    calls: list[str] = []
    orig = {
        name: getattr(torch.Tensor, name) for name in ("__bool__", "item", "tolist", "__float__", "__int__")
    }

    def spy(name):
        def f(self, *a, **k):
            calls.append(name)
            return orig[name](self, *a, **k)

        return f

    try:
        for name in orig:
            setattr(torch.Tensor, name, spy(name))
        delta = torch.full_like(lp, 0.05) if method != "table" else 0.05
        bandpo.band_bounds(lp, delta, "kl", method=method, check_values=False)
    finally:
        for name, fn in orig.items():
            setattr(torch.Tensor, name, fn)
    assert calls == [], calls
