"""Closed forms of ``bandpo.core.divergences`` at the edges of their radius range, against the generic solver."""

from __future__ import annotations

import math

import pytest
import torch

import bandpo


@pytest.mark.parametrize("delta", [2.0, 3.0, 5.0])
def test_hellinger_radius_of_the_whole_simplex(delta: float) -> None:
    """Squared Hellinger is at most 2: from delta = 2 on every ratio in [0, 1/p] is feasible (lo = 0,
    hi = 1/p), never NaN. (Before the fix: lo = 0.1875 at p = 0.8, delta = 3, and NaN for delta > 4.) Such a radius
    is refused (test_a_radius_at_or_beyond_a_bounded_divergence_s_largest_value_is_refused); per-token radii with
    check_values=False reach the closed form unchecked, and it stays exact there."""
    p = torch.tensor([1e-6, 0.01, 0.3, 0.8, 0.999999], dtype=torch.float64)
    d = torch.full_like(p, delta)
    lo, hi = bandpo.band_bounds(p.log(), d, "hellinger", method="closed_form", cap=None, check_values=False)
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


EDGES = {  # divergence -> its largest value (the radius from which the bounds are [0, 1/p] for every p), or None
    "kl": None,  # never saturates (lo -> e^-delta at p = 1); KL_DELTA_MAX = 1000 is a solver limit instead
    "reverse_kl": None,  # hi = 1/p only for p >= e^-delta, lo = 0 only for p <= 1 - e^-delta
    "tv": 1.0,  # p |r - 1| <= 1
    "chi2": None,  # lo -> 1 at p = 1
    "neyman_chi2": None,  # lo -> 1 / (1 + delta) at p = 1
    "hellinger": 2.0,  # sum (sqrt P - sqrt Q)^2 <= 2
    "js": math.log(2.0),  # JS <= log 2 (disjoint supports: p = 1, r = 0)
}
EDGE_GRID = torch.tensor([1e-300, 1e-30, 1e-6, 0.01, 0.3, 0.8, 0.999999, 1.0], dtype=torch.float64)


def _whole_simplex(lo: torch.Tensor, hi: torch.Tensor, p: torch.Tensor) -> bool:
    return bool((lo == 0).all() and torch.allclose(hi * p, torch.ones_like(p), rtol=1e-12, atol=0.0))


def test_every_divergence_has_its_edge_written_here() -> None:
    assert set(EDGES) == set(bandpo.DIVERGENCES.names())


@pytest.mark.parametrize("name", list(EDGES))
def test_a_radius_at_or_beyond_a_bounded_divergence_s_largest_value_is_refused(name: str) -> None:
    """``band_bounds(divergence="tv", delta=2)``, ``bandpo.make_clip_rule("band", divergence="tv", delta=5)``: accepted,
    and the bounds were [0, 1/p] for every p (the region the whole simplex: nothing clipped). A bounded divergence
    (TV 1, squared Hellinger 2, JS log 2) refuses a radius at or beyond its largest value, naming the divergence
    and the range, as a float, a per-token tensor and a clip rule's radius; just below it the bounds still clip
    (lo > 0 at p = 1). An unbounded one takes any radius (KL up to its solver limit KL_DELTA_MAX)."""
    edge = EDGES[name]
    logp = EDGE_GRID.log()
    if edge is None:
        assert bandpo.get_divergence(name).saturating_delta == math.inf
        delta = 100.0  # large, and still a trust region
        lo, hi = bandpo.band_bounds(logp, delta, name, cap=None)
        assert (
            not _whole_simplex(lo, hi, EDGE_GRID) and not torch.isnan(lo).any() and not torch.isnan(hi).any()
        )
        bandpo.make_clip_rule("band", divergence=name, delta=delta)
        return
    # refused are exactly the radii where the bounds are the whole simplex
    full = torch.full_like(logp, edge)
    assert _whole_simplex(*bandpo.band_bounds(logp, full, name, cap=None, check_values=False), EDGE_GRID)
    allowed = rf"in \(0, {edge:g}\) for divergence '{name}' \(it is at most {edge:g}: from there on its bounds are \[0, 1/p\] for every p, the whole simplex, and nothing is clipped\)"
    for delta in (edge, 2 * edge, 5.0):
        with pytest.raises(ValueError, match=rf"^delta must be a finite number {allowed}, got {delta!r}$"):
            bandpo.band_bounds(logp, delta, name)
        with pytest.raises(ValueError, match=rf"^delta must hold finite numbers {allowed}, found {delta!r}$"):
            bandpo.band_bounds(logp, torch.full_like(logp, delta), name)
        with pytest.raises(ValueError, match=rf"delta must be a finite number {allowed}, got {delta!r}"):
            bandpo.make_clip_rule("band", divergence=name, delta=delta)
    below = edge * (1 - 1e-6)
    lo, hi = bandpo.band_bounds(logp, below, name, cap=None)
    assert lo[-1] > 0 and not _whole_simplex(lo, hi, EDGE_GRID)  # p = 1 still has a lower bound
    assert torch.equal(lo, bandpo.band_bounds(logp, torch.full_like(logp, below), name, cap=None)[0])
    bandpo.make_clip_rule("band", divergence=name, delta=below)


def _f_sq(u: torch.Tensor) -> torch.Tensor:
    return (u - 1.0) ** 2


@pytest.mark.parametrize(
    "fields,error,match",
    [
        (
            {"fast_solver": "Newton"},
            ValueError,
            r"fast_solver must be one of None, 'kl', 'newton', got 'Newton' \(did you mean 'newton'\?\)",
        ),
        ({"fast_solver": "newton"}, ValueError, r"fast_solver='newton' needs derivative"),
        ({"name": ""}, ValueError, r"name must be a non-empty string, got ''"),
        ({"generator": 2.0}, TypeError, r"generator must be a function, got 2.0"),
        ({"derivative": "f'"}, TypeError, r"derivative must be a function"),
        ({"max_delta": 0.0}, ValueError, r"max_delta must be a number > 0 \(inf: none\), got 0.0"),
        ({"saturating_delta": math.nan}, ValueError, r"saturating_delta must be a number > 0"),
    ],
)
def test_a_divergence_refuses_a_field_a_solver_would_trip_over(fields: dict, error: type, match: str) -> None:
    """A misspelled ``fast_solver`` ran the generic solver silently (about 50 times slower); it is refused when the
    Divergence is made, as is every field a solver reads later."""
    with pytest.raises(error, match=match):
        bandpo.Divergence(**{"name": "sq", "generator": _f_sq, "description": "chi^2", **fields})


def test_register_divergence_needs_a_divergence() -> None:
    with pytest.raises(
        TypeError, match=r"register_divergence needs a Divergence\(name, generator, .*got function"
    ):
        bandpo.register_divergence(_f_sq)
    assert "sq" not in bandpo.DIVERGENCES
