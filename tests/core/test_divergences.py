"""Closed forms of ``bandpo.core.divergences`` at the edges of their radius range, against the generic solver."""

from __future__ import annotations

import pytest
import torch

import bandpo


@pytest.mark.parametrize("delta", [2.0, 3.0, 5.0])
def test_hellinger_radius_of_the_whole_simplex(delta: float) -> None:
    """Squared Hellinger is at most 2: from delta = 2 on every ratio in [0, 1/p] is feasible (lo = 0,
    hi = 1/p), never NaN. (Before the fix: lo = 0.1875 at p = 0.8, delta = 3, and NaN for delta > 4.)"""
    p = torch.tensor([1e-6, 0.01, 0.3, 0.8, 0.999999], dtype=torch.float64)
    lo, hi = bandpo.band_bounds(p.log(), delta, "hellinger", method="closed_form", cap=None)
    assert torch.equal(lo, torch.zeros_like(p))
    torch.testing.assert_close(hi, 1.0 / p, rtol=1e-15, atol=0.0)


@pytest.mark.parametrize("delta", [0.05, 1.0, 1.9, 1.999])
def test_hellinger_closed_form_matches_bisection_near_the_edge(delta: float) -> None:
    """Up to just below delta = 2 the closed form equals the generic bisection on f(u) = (sqrt(u) - 1)^2."""
    p = torch.tensor([1e-4, 0.01, 0.2, 0.5, 0.9, 0.99], dtype=torch.float64)
    lo, hi = bandpo.band_bounds(p.log(), delta, "hellinger", method="closed_form", cap=None)
    lo_b, hi_b = bandpo.band_bounds(p.log(), delta, "hellinger", method="bisection", cap=None)
    torch.testing.assert_close(lo, lo_b, rtol=1e-9, atol=1e-12)
    torch.testing.assert_close(hi, hi_b, rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize(("name", "suggested"), [("KL", "kl"), ("TV", "tv"), ("Chi2", "chi2"), ("kll", "kl")])
def test_a_divergence_name_in_another_case_gets_the_suggestion(name: str, suggested: str) -> None:
    """``divergence="KL"``: the registry's did-you-mean, from ``band_bounds`` and from the Band clip rule."""
    match = rf"^unknown divergence '{name}' \(did you mean '{suggested}'\?\); valid names: kl, "
    with pytest.raises(ValueError, match=match):
        bandpo.band_bounds(torch.log(torch.tensor([0.5])), 0.05, name)
    with pytest.raises(ValueError, match=match):
        bandpo.make_clip_rule("band", divergence=name)
