"""Hypothesis properties of the Band operator (docs/method.md#band-operator: saturation, monotonicity, limits) for every registered divergence."""

from __future__ import annotations

import math

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import bandpo

NAMES = bandpo.DIVERGENCES.names()
# log-probs: half drawn where real tokens live (p in [e^-7, 0.999]), half log-uniform in -logp over [1e-12, 700]
# (p from e^-700 to 1 - 1e-12); a plain st.floats(-700, -1e-12) put 76% of its draws below p = e^-100
logp_1 = st.one_of(
    st.floats(-7.0, -1e-3), st.floats(math.log(1e-12), math.log(700.0)).map(lambda u: -math.exp(u))
)
logps = st.lists(logp_1, min_size=2, max_size=24)
deltas = st.floats(1e-3, 1.0)


def _inside(delta: float, name: str) -> float:
    """``delta`` in [1e-3, 1] scaled into ``name``'s range where it is bounded (TV < 1, JS < log 2), keeping order."""
    return delta * min(1.0, 0.99 * bandpo.get_divergence(name).saturating_delta)


def _bounds(logp: list[float], delta: float, name: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    lp = torch.tensor(sorted(logp), dtype=torch.float64)  # increasing p
    lo, hi = bandpo.band_bounds(lp, _inside(delta, name), name, cap=None)
    return lp, lo, hi


@settings(max_examples=40, deadline=None)
@given(logp=logps, delta=deltas, name=st.sampled_from(NAMES))
def test_ordered_and_inside_simplex(logp: list[float], delta: float, name: str) -> None:
    lp, lo, hi = _bounds(logp, delta, name)
    inv_p = torch.exp(-lp)
    assert (lo >= 0).all() and (lo <= 1).all()
    assert (hi >= 1).all() and (hi <= inv_p * (1 + 1e-12)).all()


@settings(max_examples=40, deadline=None)
@given(logp=logps, delta=deltas, name=st.sampled_from(NAMES))
def test_monotone_in_p(logp: list[float], delta: float, name: str) -> None:
    """Prop. 2: hi decreases and lo increases as p grows (non-strict where saturated)."""
    _, lo, hi = _bounds(logp, delta, name)
    tol = 1e-9
    assert (torch.diff(hi) <= tol * hi[1:]).all(), hi
    assert (torch.diff(lo) >= -tol * lo[1:] - 1e-15).all(), lo


@settings(max_examples=40, deadline=None)
@given(logp=logp_1, d1=deltas, d2=deltas, name=st.sampled_from(NAMES))
def test_monotone_in_delta(logp: float, d1: float, d2: float, name: str) -> None:
    small, large = sorted((_inside(d1, name), _inside(d2, name)))
    lp = torch.tensor([logp], dtype=torch.float64)
    lo_s, hi_s = bandpo.band_bounds(lp, small, name, cap=None)
    lo_l, hi_l = bandpo.band_bounds(lp, large, name, cap=None)
    assert hi_l.item() >= hi_s.item() * (1 - 1e-9)
    assert lo_l.item() <= lo_s.item() * (1 + 1e-9) + 1e-15


@settings(max_examples=20, deadline=None)
@given(delta=deltas, name=st.sampled_from(NAMES))
def test_limits(delta: float, name: str) -> None:
    """Prop. 1: p -> 0: hi -> infinity within 1/p, lo -> 0; p -> 1: hi -> 1."""
    lp = torch.tensor([-600.0, -1e-15], dtype=torch.float64)
    lo, hi = bandpo.band_bounds(lp, _inside(delta, name), name, cap=None)
    assert hi[0].item() > 1e100 and lo[0].item() < 1e-6  # chi2 grows like p^(-1/2): e^300
    assert math.isclose(hi[1].item(), 1.0, abs_tol=1e-6)


@settings(max_examples=25, deadline=None)
@given(logp=logps, delta=deltas)
def test_kl_methods_agree(logp: list[float], delta: float) -> None:
    """The optimized KL paths (table, Halley) against the generic bisection on random inputs."""
    lp = torch.tensor(logp, dtype=torch.float64)
    ref_lo, ref_hi = bandpo.band_bounds(lp, delta, "kl", cap=None, method="bisection")
    for method in ("table", "newton"):
        lo, hi = bandpo.band_bounds(lp, delta, "kl", cap=None, method=method)
        assert torch.allclose(lo, ref_lo, rtol=1e-6, atol=1e-12)
        assert torch.allclose(hi, ref_hi, rtol=1e-6, atol=1e-12)
