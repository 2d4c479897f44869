"""The Newton solver for reverse_kl and js (``bandpo.core.newton``): against the mpmath reference and the generic
bisection, per-token delta, saturation, extremes, no host synchronisation."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest
import torch

import bandpo
from bandpo.core import solvers
from bandpo.core.bounds import resolve_method
from bandpo.core.newton import default_newton_iterations, fdiv_newton_bounds

sys.path.insert(0, str(Path(__file__).parent))
from host_sync import record_host_reads
from reference import reference_bounds

from helpers.numerics import rel_err, within

NAMES = ["reverse_kl", "js"]
P_GRID = [1e-30, 1e-20, 1e-12, 1e-6, 1e-3, 0.01, 0.08, 0.2, 0.5, 0.8, 0.95, 0.999, 1 - 1e-5, 1 - 1e-7]
DELTAS = [1e-3, 0.05, 0.3, 1.0]
TOL = {torch.float64: (1e-6, 1e-12), torch.float32: (1e-4, 2e-7)}  # (relative, absolute floor near 0)


def _mpmath(name: str, logp: torch.Tensor, delta: float) -> tuple[torch.Tensor, torch.Tensor]:
    vals = [reference_bounds(name, v, delta) for v in logp.double().tolist()]
    return (
        torch.tensor([v[0] for v in vals], dtype=torch.float64),
        torch.tensor([v[1] for v in vals], dtype=torch.float64),
    )


def _newton(
    name: str, logp: torch.Tensor, delta: float | torch.Tensor, check_values: bool = True
) -> tuple[torch.Tensor, torch.Tensor]:
    return bandpo.band_bounds(logp, delta, name, cap=None, method="newton", check_values=check_values)


def test_auto_and_method_resolution() -> None:
    for name in NAMES:
        div = bandpo.get_divergence(name)
        assert div.fast_solver == "newton" and div.derivative is not None
        assert resolve_method(div, "auto", scalar_delta=True) == "newton"
        assert resolve_method(div, "auto", scalar_delta=False) == "newton"
    assert resolve_method(bandpo.get_divergence("kl"), "auto", scalar_delta=False) == "newton"
    # fast_solver="newton" without a derivative is refused when made (test_divergences.py); without a fast solver
    # there is no Newton solver
    bare = bandpo.Divergence("bare", bandpo.get_divergence("js").generator, "js without f'")
    assert resolve_method(bare, "auto", scalar_delta=False) == "bisection"
    with pytest.raises(
        ValueError, match="available for divergences 'kl', 'reverse_kl', 'js' only, got 'bare'"
    ):
        resolve_method(bare, "newton", scalar_delta=False)


def test_derivatives_match_generators() -> None:
    """f' against a central difference of f, across (0, 1e6]."""
    u = torch.logspace(-6, 6, 241, dtype=torch.float64)
    h = 1e-4 * u
    for name in NAMES:
        div = bandpo.get_divergence(name)
        fd = (div.generator(u + h) - div.generator(u - h)) / (2 * h)
        assert torch.allclose(div.derivative(u), fd, rtol=1e-5, atol=1e-5), name


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_matches_mpmath_reference(name: str, dtype: torch.dtype) -> None:
    """p in [1e-30, 1 - 1e-7], delta in [1e-3, 1]: relative error <= 1e-6 (float64) / 1e-4 (float32), against
    mpmath at the exact (dtype-rounded) inputs; saturated bounds exactly 0 resp. 1/p."""
    rtol, atol = TOL[dtype]
    logp = torch.log(torch.tensor(P_GRID, dtype=torch.float64)).to(dtype)
    for delta in [d for d in DELTAS if d < bandpo.get_divergence(name).saturating_delta]:  # js: < log 2
        ref_lo, ref_hi = _mpmath(name, logp, delta)
        lo, hi = _newton(name, logp, delta)
        assert lo.dtype == dtype and hi.dtype == dtype
        e_lo, e_hi = rel_err(lo, ref_lo, rtol, atol), rel_err(hi, ref_hi, rtol, atol)
        assert within(e_lo, e_hi), (name, dtype, delta, e_lo, e_hi)


@pytest.mark.parametrize("name", NAMES)
def test_matches_generic_bisection_random(name: str) -> None:
    """Random p (log-uniform in [1e-30, 1), and 1 - p log-uniform in [1e-7, 1)) with per-token delta
    log-uniform in [1e-3, 1], against the float64 generic bisection on the same inputs."""
    g = torch.Generator().manual_seed(3)
    n = 4000
    lp_small = -torch.rand(n, generator=g, dtype=torch.float64) * 69.0
    lp_big = torch.log1p(-torch.exp(-torch.rand(n, generator=g, dtype=torch.float64) * 16.1))
    logp = torch.cat([lp_small, lp_big]).clamp(max=math.log1p(-1e-7))
    delta = 1e-3 * torch.exp(torch.rand(2 * n, generator=g, dtype=torch.float64) * math.log(1e3))
    div = bandpo.get_divergence(name)
    for dtype in (torch.float64, torch.float32):
        rtol, atol = TOL[dtype]
        lp, d = logp.to(dtype), delta.to(dtype)
        lp64 = lp.double()
        ref_lo, ref_hi = solvers.generic_bounds(
            div.generator, lp64, torch.log(-torch.expm1(lp64)), d.double()
        )
        # unchecked: JS's radii from log 2 on are refused, but per-token radii with check_values=False reach the solver
        lo, hi = _newton(name, lp, d, check_values=False)
        assert rel_err(lo, ref_lo, rtol, atol).max() <= 1, (name, dtype)
        assert rel_err(hi, ref_hi, rtol, atol).max() <= 1, (name, dtype)


@pytest.mark.parametrize("name", NAMES)
def test_default_iterations_converged(name: str) -> None:
    """Three more Newton steps change the float64 result by < 1e-9 relative (the default has margin)."""
    logp = torch.log(torch.logspace(-30, -1e-7, 400, dtype=torch.float64))
    log1mp = torch.log(-torch.expm1(logp))
    div = bandpo.get_divergence(name)
    n = default_newton_iterations(torch.float64)
    for delta in (1e-3, 0.05, 0.5):
        d = torch.tensor(delta, dtype=torch.float64)
        a = fdiv_newton_bounds(div.generator, div.derivative, logp, log1mp, d, iterations=n)
        b = fdiv_newton_bounds(div.generator, div.derivative, logp, log1mp, d, iterations=n + 3)
        for x, y in zip(a, b):
            assert rel_err(torch.exp(x), torch.exp(y), 1e-9, 1e-14).max() <= 1, (name, delta)


@pytest.mark.parametrize("name", NAMES)
def test_per_token_delta_matches_scalar_calls(name: str) -> None:
    logp = torch.log(torch.tensor([[1e-9, 0.01, 0.2], [0.5, 0.9, 0.999]], dtype=torch.float64))
    delta = torch.tensor([[1e-3, 0.05, 0.3], [0.6, 0.01, 0.2]], dtype=torch.float64)  # 0.6: below JS's log 2
    for dtype, rtol in ((torch.float64, 1e-12), (torch.float32, 1e-5)):
        lo, hi = _newton(name, logp.to(dtype), delta.to(dtype))
        for i in range(2):
            for j in range(3):
                a, b = _newton(name, logp[i, j].to(dtype), float(delta[i, j].to(dtype)))
                assert lo[i, j].item() == pytest.approx(a.item(), rel=rtol, abs=1e-30)
                assert hi[i, j].item() == pytest.approx(b.item(), rel=rtol)
        # a row of radii broadcasts along the batch
        lo_row, _ = _newton(name, logp.to(dtype), delta[0].to(dtype))
        assert lo_row.shape == logp.shape


@pytest.mark.parametrize("name", NAMES)
def test_saturation_exactly_as_generic(name: str) -> None:
    """Saturated by the generic bisection's own test (hi = 1/p where p f(1/p) + q f(0) <= delta, lo = 0 where
    p f(0) + q f(1/q) <= delta), and then exactly; dense around the thresholds."""
    div = bandpo.get_divergence(name)
    f = div.generator
    for delta in (1e-3, 0.05, 0.3, 0.69, 1.0):
        # reverse_kl: hi = 1/p for p >= e^-delta, lo = 0 for p <= 1 - e^-delta (js: somewhere on the grid)
        centers = [math.exp(-delta), -math.expm1(-delta)]
        p = torch.cat(
            [c * (1 + torch.linspace(-0.2, 0.2, 801, dtype=torch.float64)) for c in centers]
            + [
                torch.logspace(-12, 0, 4001, dtype=torch.float64),
                1 - torch.logspace(-7, 0, 2001, dtype=torch.float64),
            ]
        )
        p = p.clamp(1e-30, 1 - 1e-7)
        logp = torch.log(p)
        log1mp = torch.log(-torch.expm1(logp))
        d = torch.tensor(delta, dtype=torch.float64)
        pp, qq, zero = torch.exp(logp), torch.exp(log1mp), torch.zeros_like(p)
        sat_hi = pp * f(torch.reciprocal(pp)) + qq * f(zero) <= d
        sat_lo = pp * f(zero) + qq * f(torch.reciprocal(qq)) <= d
        assert sat_hi.any() and sat_lo.any()
        assert (~sat_hi).any() == (~sat_lo).any() == (name == "reverse_kl" or delta < math.log(2.0))
        g_lo, g_hi = solvers.generic_bounds(f, logp, log1mp, d)
        log_lo, log_hi = fdiv_newton_bounds(f, div.derivative, logp, log1mp, d)
        assert (g_hi[sat_hi] == torch.reciprocal(pp)[sat_hi]).all() and (g_lo[sat_lo] == 0).all()
        assert (log_hi[sat_hi] == -logp[sat_hi]).all() and (log_lo[sat_lo] == -math.inf).all()
        assert (log_hi[~sat_hi] <= -logp[~sat_hi]).all() and (log_lo[~sat_lo] > -math.inf).all()
        assert rel_err(torch.exp(log_hi), g_hi, 1e-6, 1e-12).max() <= 1
        assert rel_err(torch.exp(log_lo), g_lo, 1e-6, 1e-12).max() <= 1
        if delta < div.saturating_delta:  # band_bounds refuses JS's radii >= log 2 (the whole simplex)
            lo, hi = _newton(name, logp, delta)  # through band_bounds: exactly 0 and 1/p = exp(-logp)
            assert (lo[sat_lo] == 0).all() and torch.equal(hi[sat_hi], torch.exp(-logp)[sat_hi])
        if name == "reverse_kl":  # the analytic thresholds, away from rounding
            margin = 1 + 1e-9
            assert (
                sat_hi[p > math.exp(-delta) * margin].all()
                and not sat_hi[p < math.exp(-delta) / margin].any()
            )
            assert sat_lo[p < -math.expm1(-delta) / margin].all()
            assert not sat_lo[p > -math.expm1(-delta) * margin].any()


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64])
def test_extremes_finite_and_ordered(name: str, dtype: torch.dtype) -> None:
    """p = 0 (logp = -inf), p = 1 (logp = 0) and everything between, scalar and per-token extreme deltas."""
    info = torch.finfo(dtype)
    vals = [-math.inf, -1e4, -745.0, -700.0, -100.0, -80.0, -30.0, -1.0, -1e-3, -1e-30, -info.tiny, 0.0]
    logp = torch.tensor(vals, dtype=torch.float64).clamp(min=info.min).to(dtype)
    sat = bandpo.get_divergence(name).saturating_delta  # JS: log 2, where the region is the whole simplex
    deltas: list[float | torch.Tensor] = [d for d in (1e-6, 1e-3, 0.05, 0.69, 1.0, 50.0) if d < sat]
    deltas.append(torch.logspace(-6, 2, len(vals), dtype=torch.float64).clamp(max=0.999 * sat).to(dtype))
    for delta in deltas:
        lo, hi = _newton(name, logp, delta)
        assert lo.dtype == dtype and hi.dtype == dtype
        assert not torch.isnan(lo).any() and not torch.isnan(hi).any(), (name, dtype, delta)
        assert (lo >= 0).all() and (lo <= 1).all() and (hi >= 1).all()
        assert lo[0] == 0 and torch.isinf(hi[0])  # p = 0: the whole simplex upwards
        assert hi[-1] == 1  # p = 1: no room to grow
        lo_c, hi_c = bandpo.band_bounds(logp, delta, name, method="newton")  # default cap 10
        assert torch.isfinite(hi_c).all() and (hi_c <= 10).all() and torch.equal(lo_c, lo)


@pytest.mark.parametrize("name", NAMES)
def test_no_host_sync(name: str) -> None:
    """With check_values=False the Newton path never reads a tensor value on the host (item/bool/tolist...):
    fixed iteration counts only. Checked by intercepting the Tensor methods that copy a value to the host."""
    lp = -torch.rand(64, dtype=torch.float64) * 30
    with record_host_reads() as calls:
        for delta in (torch.full_like(lp, 0.05), 0.05):
            for logp in (lp, lp.float()):
                d = delta.to(logp.dtype) if isinstance(delta, torch.Tensor) else delta
                bandpo.band_bounds(logp, d, name, method="auto", check_values=False)
    assert calls == [], calls


def test_float32_saturation_test_keeps_the_complement() -> None:
    """p below float32's 1 - eps with a tiny delta: the saturation test must not lose q = 1 - p (lo is not 0)."""
    lp = torch.tensor([3e-8]).log()
    lo, _ = bandpo.band_bounds(lp, 1e-10, "reverse_kl")
    want, _ = bandpo.band_bounds(lp.double(), 1e-10, "reverse_kl")
    assert lo.item() == pytest.approx(want.item(), rel=1e-4) and want.item() > 0.5
