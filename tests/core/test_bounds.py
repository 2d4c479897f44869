"""band_bounds against an independent mpmath reference, across divergences, methods, dtypes and extremes."""

from __future__ import annotations

import math
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import bandpo
from bandpo.core import solvers
from bandpo.core.bounds import METHODS
from bandpo.core.divergences import KL_DELTA_MAX

sys.path.insert(0, str(Path(__file__).parent))
from reference import g_value, reference_bounds

from helpers.numerics import rel_err, within

NAMES = bandpo.DIVERGENCES.names()
P_GRID = [1e-30, 1e-12, 1e-6, 1e-3, 0.01, 0.08, 0.2, 0.5, 0.8, 0.95, 0.999, 1 - 1e-5, 1 - 1e-7]
DELTAS = [1e-3, 0.01, 0.05, 0.2, 1.0]


def deltas_for(name: str) -> list[float]:
    """:data:`DELTAS` that ``name`` accepts: below its largest value (TV 1, JS log 2; ``saturating_delta``)."""
    return [d for d in DELTAS if d < bandpo.get_divergence(name).saturating_delta]


def methods_for(name: str) -> list[str]:
    div = bandpo.get_divergence(name)
    out = ["auto", "bisection"]
    if div.closed_form is not None:
        out.append("closed_form")
    if (
        div.fast_solver is not None
    ):  # the table is built by the fast solver (by bisection otherwise: 12-30 s a table)
        out += ["newton", "table"]
    return out


TABLE_LO_ATOL = 1e-4
"""The interpolated ``log lo``'s accuracy near a finite p where ``lo`` reaches 0 (reverse_kl, js: bandpo.core.bounds'
docstring): absolute 1e-4 for ``lo`` there, besides each test's relative tolerance."""


def lo_atol(name: str, method: str, atol: float) -> float:
    return TABLE_LO_ATOL if method == "table" and name != "kl" else atol


def _reference(name: str, logp: torch.Tensor, delta: float) -> tuple[torch.Tensor, torch.Tensor]:
    vals = [reference_bounds(name, float(v), delta) for v in logp.tolist()]
    lo = torch.tensor([v[0] for v in vals], dtype=torch.float64)
    hi = torch.tensor([v[1] for v in vals], dtype=torch.float64)
    return lo, hi


@pytest.mark.parametrize("name", NAMES)
def test_float64_matches_mpmath_reference(name: str) -> None:
    """Every method, float64 compute: relative error <= 1e-6 (absolute 1e-12 for bounds near 0)."""
    logp = torch.log(torch.tensor(P_GRID, dtype=torch.float64))
    for delta in deltas_for(name):
        ref_lo, ref_hi = _reference(name, logp, delta)
        for method in methods_for(name):
            lo, hi = bandpo.band_bounds(logp, delta, name, cap=None, method=method)
            assert lo.dtype == torch.float64 and hi.dtype == torch.float64
            e_lo = rel_err(lo, ref_lo, 1e-6, lo_atol(name, method, 1e-12))
            e_hi = rel_err(hi, ref_hi, 1e-6, 1e-12)
            assert within(e_lo, e_hi), (name, method, delta, e_lo, e_hi)


@pytest.mark.parametrize("name", NAMES)
def test_float32_matches_float64(name: str) -> None:
    """float32 compute against the float64 generic solver (checked against mpmath above) on the same inputs:
    relative error <= 1e-4, absolute 2e-7 (~2 ulp of 1.0) for bounds near 0."""
    logp32 = torch.log(torch.tensor(P_GRID, dtype=torch.float64)).float()
    for delta in deltas_for(name):
        ref_lo, ref_hi = bandpo.band_bounds(logp32.double(), delta, name, cap=None, method="bisection")
        for method in methods_for(name):
            lo, hi = bandpo.band_bounds(logp32, delta, name, cap=None, method=method)
            assert lo.dtype == torch.float32 and hi.dtype == torch.float32
            e_lo = rel_err(lo.double(), ref_lo, 1e-4, lo_atol(name, method, 2e-7))
            e_hi = rel_err(hi.double(), ref_hi, 1e-4, 2e-7)
            assert within(e_lo, e_hi), (name, method, delta, e_lo, e_hi)


@pytest.mark.parametrize("name", NAMES)
def test_root_residual(name: str) -> None:
    """Where a bound is neither saturated nor capped, g_f(p, bound) = delta to high accuracy."""
    logp = torch.log(torch.tensor([1e-4, 0.03, 0.3, 0.6, 0.9, 0.99], dtype=torch.float64))
    for delta in (0.01, 0.05, 0.3):
        lo, hi = bandpo.band_bounds(logp, delta, name, cap=None)
        assert bool(torch.isfinite(lo).all() and torch.isfinite(hi).all()), (
            name,
            delta,
            lo,
            hi,
        )  # NaN skips below
        for lp, a, b in zip(logp.tolist(), lo.tolist(), hi.tolist()):
            if a > 1e-12:
                assert abs(g_value(name, lp, a) - delta) <= 1e-6 * delta, (name, lp, "lo", a)
            if b < math.exp(-lp) * (1 - 1e-12):
                assert abs(g_value(name, lp, b) - delta) <= 1e-6 * delta, (name, lp, "hi", b)


def test_paper_reference_values() -> None:
    """docs/method.md#band-operator: KL, delta = 0.05."""
    logp = torch.log(torch.tensor([0.08, 0.5, 0.9], dtype=torch.float64))
    lo, hi = bandpo.band_bounds(logp, 0.05, "kl")
    assert lo.tolist() == pytest.approx([0.262, 0.692, 0.867], abs=6e-4)
    assert hi.tolist() == pytest.approx([2.411, 1.308, 1.076], abs=6e-4)


@pytest.mark.parametrize("method", ["table", "newton", "bisection"])
def test_kl_dense_grid_against_float64_newton(method: str) -> None:
    """Dense random grid: every KL method agrees with the Halley solver run in float64 (itself checked above)."""
    g = torch.Generator().manual_seed(0)
    s = torch.rand(20000, generator=g, dtype=torch.float64) * 80 - 40
    logp = -torch.exp(
        torch.rand(20000, generator=g, dtype=torch.float64) * 70 - 60
    )  # logp in [-e^10, -e^-60]
    logp = torch.cat([logp, s.clamp(max=-1e-3)])
    for delta in (1e-3, 0.05, 1.0):
        ref_lo, ref_hi = bandpo.band_bounds(logp, delta, "kl", cap=None, method="newton")
        lo, hi = bandpo.band_bounds(logp, delta, "kl", cap=None, method=method)
        assert rel_err(lo, ref_lo, 1e-6, 1e-12).max() <= 1
        assert rel_err(hi, ref_hi, 1e-6, 1e-12).max() <= 1


@pytest.mark.parametrize("method", ["auto", "newton", "bisection"])
def test_cap_beyond_the_output_dtype_is_its_largest_number(method: str) -> None:
    """float16 log-probs with a cap above float16's range (65504): hi is 65504 where the cap binds, not inf."""
    logp = torch.tensor([-math.inf, -30.0, -1.0], dtype=torch.float16)
    _, hi = bandpo.band_bounds(logp, 0.05, "kl", cap=1e6, method=method)
    assert hi[:2].tolist() == [65504.0, 65504.0] and 1.0 < hi[2].item() < 2.0


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64])
def test_extremes_are_finite_and_ordered(name: str, dtype: torch.dtype) -> None:
    info = torch.finfo(dtype)
    vals = [-math.inf, -1e4, -745.0, -100.0, -30.0, -1.0, -1e-3, -1e-30, 0.0, -info.tiny, info.min]
    logp = torch.tensor(vals, dtype=torch.float64).clamp(min=info.min).to(dtype)
    for cap in (10.0, None):
        lo, hi = bandpo.band_bounds(logp, 0.05, name, cap=cap)
        assert lo.dtype == dtype and hi.dtype == dtype
        assert not torch.isnan(lo).any() and not torch.isnan(hi).any()
        assert (lo >= 0).all() and (lo <= 1).all() and (hi >= 1).all()
        if cap is not None:
            assert (hi <= cap).all()
    lo, hi = bandpo.band_bounds(logp, 0.05, name, cap=None)
    p0 = torch.isinf(logp.double()) & (logp.double() < 0)
    assert (lo[p0] == 0).all() and torch.isinf(hi[p0]).all()  # p = 0: the whole simplex upwards
    assert (hi[logp == 0] == 1).all()  # p = 1: no room to grow


@pytest.mark.parametrize("name", [n for n in NAMES if bandpo.get_divergence(n).limit_lo_at_one is not None])
def test_limits_at_p_one(name: str) -> None:
    """The divergences with a closed-form ``lim_{p -> 1} lo`` (reverse KL and JS have none)."""
    div = bandpo.get_divergence(name)
    for delta in (0.01, 0.05, 0.5):
        lo, hi = bandpo.band_bounds(torch.tensor([0.0, -1e-20], dtype=torch.float64), delta, name)
        assert lo.tolist() == pytest.approx([div.limit_lo_at_one(delta)] * 2, rel=1e-6)
        assert hi.tolist() == pytest.approx([1.0, 1.0], abs=1e-9)


def test_shapes_empty_and_scalar() -> None:
    for shape in [(), (0,), (3, 0), (2, 3, 4)]:
        logp = -torch.rand(shape) if shape else torch.tensor(-0.3)
        for name in NAMES:
            lo, hi = bandpo.band_bounds(logp, 0.05, name)
            assert lo.shape == logp.shape and hi.shape == logp.shape


def test_per_token_delta_matches_scalar_calls() -> None:
    logp = torch.log(torch.tensor([[0.01, 0.2], [0.5, 0.9]], dtype=torch.float64))
    delta = torch.tensor([[0.01, 0.05], [0.2, 0.6]], dtype=torch.float64)  # 0.6: below JS's log 2
    for name in NAMES:
        lo, hi = bandpo.band_bounds(logp, delta, name)
        for idx in [(0, 0), (0, 1), (1, 0), (1, 1)]:
            a, b = bandpo.band_bounds(logp[idx], float(delta[idx]), name)
            assert lo[idx].item() == pytest.approx(a.item(), rel=1e-6)
            assert hi[idx].item() == pytest.approx(b.item(), rel=1e-6)
    # a row of radii broadcasts along the batch
    lo, hi = bandpo.band_bounds(logp, torch.tensor([0.01, 0.05], dtype=torch.float64), "kl")
    assert lo.shape == logp.shape


def test_cap_and_relax() -> None:
    logp = torch.log(torch.tensor([1e-6, 0.08, 0.5, 0.99]))
    _, hi = bandpo.band_bounds(logp, 0.05, "kl", cap=2.0)
    assert hi.max().item() == pytest.approx(2.0)
    lo_r, hi_r = bandpo.band_bounds(logp, 0.05, "kl", relax=(0.2, 0.28))
    lo_b, hi_b = bandpo.band_bounds(logp, 0.05, "kl")
    assert torch.equal(lo_r, torch.minimum(lo_b, torch.tensor(0.8)))
    assert torch.allclose(hi_r, torch.maximum(hi_b, torch.tensor(1.28)))


def test_user_generator_matches_registered() -> None:
    logp = torch.log(torch.tensor([1e-5, 0.1, 0.5, 0.9], dtype=torch.float64))

    def pearson(u: torch.Tensor) -> torch.Tensor:
        return (u - 1) ** 2

    lo, hi = bandpo.band_bounds(logp, 0.05, pearson, cap=None)
    lo2, hi2 = bandpo.band_bounds(logp, 0.05, "chi2", cap=None)
    assert torch.allclose(lo, lo2, rtol=1e-9) and torch.allclose(hi, hi2, rtol=1e-9)

    def alpha_half(
        u: torch.Tensor,
    ) -> torch.Tensor:  # alpha-divergence, alpha = 1/2: 4 (1 - sqrt(u)) + 2 (u - 1)
        return 4 * (1 - torch.sqrt(u)) + 2 * (u - 1)

    lo, hi = bandpo.band_bounds(logp, 0.05, alpha_half, cap=None)
    h_lo, h_hi = bandpo.band_bounds(logp, 0.05 / 2, "hellinger", cap=None)  # = 2 x squared Hellinger
    assert torch.allclose(lo, h_lo, rtol=1e-9) and torch.allclose(hi, h_hi, rtol=1e-9)


@pytest.mark.parametrize(
    "kwargs,exc,match",
    [
        (
            {"old_log_prob": torch.tensor([0.1])},
            ValueError,
            r"old_log_prob must hold log-probabilities.*0\.1",
        ),
        (
            {"old_log_prob": torch.tensor([float("nan")])},
            ValueError,
            "old_log_prob must hold log-probabilities",
        ),
        (
            {"old_log_prob": torch.tensor([float("inf")])},
            ValueError,
            "old_log_prob must hold log-probabilities",
        ),
        ({"old_log_prob": torch.tensor([-1, -2])}, TypeError, "old_log_prob must be a floating-point tensor"),
        ({"old_log_prob": [-0.1]}, TypeError, "old_log_prob must be a torch.Tensor"),
        ({"delta": -0.1}, ValueError, r"delta must be a finite number > 0, got -0.1"),
        ({"delta": 0.0}, ValueError, "delta must be a finite number > 0"),
        ({"delta": float("inf")}, ValueError, "delta must be a finite number > 0"),
        (
            {"delta": torch.tensor([0.1, -1.0])},
            ValueError,
            r"delta must hold finite numbers in \(0, 1000\] for divergence 'kl' \(from about 745 on its bounds are "
            r"\[0, 1/p\], the whole simplex\), found -1.0",
        ),
        (
            {"delta": torch.tensor([0.1, 2e3]), "divergence": "kl"},
            ValueError,
            r"in \(0, 1000\].*found 2000.0",
        ),
        (
            {"delta": torch.tensor([0.1, -1.0]), "divergence": "tv"},
            ValueError,
            r"finite numbers in \(0, 1\) for divergence 'tv' \(it is at most 1: .*\), found -1.0",
        ),
        ({"delta": torch.ones(3)}, ValueError, r"delta of shape \(3,\) must broadcast"),
        (
            {"divergence": "kll"},
            ValueError,
            r"unknown divergence 'kll' \(did you mean 'kl'\?\); valid names: kl,",
        ),
        ({"divergence": 3}, TypeError, "divergence must be a name"),
        ({"divergence": lambda u: (u - 1) ** 2 + 1}, ValueError, r"f\(1\) = 0"),
        ({"divergence": lambda u: -((u - 1) ** 2)}, ValueError, "must be convex"),
        ({"divergence": lambda u: torch.log(u)}, ValueError, "must be convex"),
        ({"cap": 0.5}, ValueError, r"cap must be a finite number >= 1 \(or None for no cap\), got 0.5"),
        ({"relax": (0.2,)}, ValueError, "relax must be None or a pair"),
        (
            {"method": "fast"},
            ValueError,
            r"^unknown method 'fast'; valid names: auto, closed_form, table, newton, bisection$",
        ),
        (
            {"method": "newtn"},
            ValueError,
            r"^unknown method 'newtn' \(did you mean 'newton'\?\); valid names: auto,",
        ),
        ({"method": "closed_form"}, ValueError, "not available for divergence 'kl'"),
        ({"method": "table", "delta": torch.full((2,), 0.1)}, ValueError, "needs a scalar delta"),
        (
            {"method": "newton", "divergence": "tv"},
            ValueError,
            "available for divergences 'kl', 'reverse_kl', 'js' only",
        ),
        ({"compute_dtype": torch.float16}, ValueError, "compute_dtype must be"),
    ],
)
def test_bad_input(kwargs: dict, exc: type, match: str) -> None:
    args = {"old_log_prob": torch.tensor([-0.5, -2.0])} | kwargs
    with pytest.raises(exc, match=match):
        bandpo.band_bounds(**args)


@pytest.mark.parametrize(
    "value,accepted",
    [
        (-math.inf, True),
        (-1e30, True),
        (-0.0, True),
        (0.0, True),
        (1e-30, False),
        (1e30, False),
        (math.nan, False),
        (math.inf, False),
    ],
)
def test_old_logp_domain_is_minus_inf_to_zero(value: float, accepted: bool) -> None:
    """The values ``band_bounds`` accepts: log-probabilities in [-inf, 0] (the same domain as ``policy_loss``'s
    ``old_log_prob``, tests/losses/test_policy_loss.py); anything else is refused, naming one such value."""
    old_log_prob = torch.tensor([-0.5, value], dtype=torch.float64)
    if accepted:
        lo, hi = bandpo.band_bounds(old_log_prob, 0.05, "kl")
        assert (lo >= 0).all() and (lo <= 1).all() and (hi >= 1).all() and (hi <= 10).all()
    else:
        with pytest.raises(
            ValueError,
            match=rf"old_log_prob must hold log-probabilities in \[-inf, 0\].*e\.g\. {re.escape(repr(value))}",
        ):
            bandpo.band_bounds(old_log_prob, 0.05, "kl")


KL_EXTREMES = [0.0, -1e-300, -1e-16, -1e-3, -1.0, -80.0, -700.0, -745.0, -1000.0, -math.inf]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("method", ["auto", "newton", "bisection"])
def test_kl_radius_limit_gives_the_whole_simplex_and_one_above_is_refused(
    method: str, dtype: torch.dtype
) -> None:
    """At ``KL_DELTA_MAX`` every KL solver gives finite bounds, already the simplex ``[0, 1/p]`` (so a larger radius
    could change nothing); the next float above it is refused, as are the thresholds that gave NaN (issue: 1.8e16)."""
    logp = torch.cat(
        [torch.tensor(KL_EXTREMES, dtype=torch.float64), -torch.logspace(-15, 3, 400, dtype=torch.float64)]
    ).to(dtype)
    lo, hi = bandpo.band_bounds(logp, KL_DELTA_MAX, "kl", cap=None, method=method)
    assert not torch.isnan(lo).any() and not torch.isnan(hi).any()
    assert (lo >= 0).all() and (lo <= 1e-21).all()  # bisection stops at its bracket, 1.9e-22
    inv_p = torch.exp(-logp.double())
    finite = torch.isfinite(inv_p)
    assert (hi.double()[finite] / inv_p[finite] >= 1 - 1e-5).all() and torch.isinf(hi[~finite]).all()
    for delta in (math.nextafter(KL_DELTA_MAX, math.inf), 1.77e4, 1.8e16):
        with pytest.raises(
            ValueError,
            match=rf"^delta must be a finite number in \(0, 1000\] for divergence 'kl' \(.*\), got {re.escape(repr(delta))}$",
        ):
            bandpo.band_bounds(logp, delta, "kl", method=method)


@pytest.mark.parametrize("dtype,logp_min", [(torch.float32, -80.0), (torch.float64, -700.0)])
def test_kl_solver_overflows_where_kl_delta_max_says(dtype: torch.dtype, logp_min: float) -> None:
    """Why KL's radius is limited: Halley's start ``~ delta / p`` overflows at p = e^logp_min (where band_bounds
    clamps p = 0) once delta > finfo.max e^logp_min (6141.6 in float32, 17724.7 in float64): NaN bounds from there,
    finite just below. The limit, 1000, lies below both (and above ~745, where the bounds are the whole simplex)."""
    onset = torch.finfo(dtype).max * math.exp(logp_min)
    assert KL_DELTA_MAX < onset < 2e4
    logp = torch.tensor([logp_min], dtype=dtype)
    log1mp = torch.log(-torch.expm1(logp))
    for delta, finite in ((0.999 * onset, True), (1.001 * onset, False)):
        log_lo, log_hi = solvers.kl_bounds(logp, log1mp, torch.tensor(delta, dtype=dtype))
        assert bool(torch.isfinite(log_hi).all() and not torch.isnan(log_lo).any()) == finite, delta


@pytest.mark.parametrize(
    "shape,ok",
    [
        ((), True),
        ((1,), True),
        ((3,), True),
        ((2, 1), True),
        ((2, 3), True),
        ((1, 1), True),
        ((4,), False),
        ((3, 1), False),
        ((1, 2, 3), False),
        ((2, 3, 1), False),
    ],
)
def test_per_token_delta_shapes_that_broadcast_to_old_logp(shape: tuple, ok: bool) -> None:
    """A tensor delta must broadcast to old_log_prob's shape (2, 3) without changing it (as torch.broadcast_shapes)."""
    logp = -torch.rand(2, 3, generator=torch.Generator().manual_seed(0))
    delta = torch.full(shape, 0.1)
    if ok:
        lo, hi = bandpo.band_bounds(logp, delta, "kl")
        ref_lo, ref_hi = bandpo.band_bounds(logp, torch.full((2, 3), 0.1), "kl")
        assert torch.equal(lo, ref_lo) and torch.equal(hi, ref_hi)
    else:
        with pytest.raises(
            ValueError, match=r"delta of shape .* must broadcast to old_log_prob's shape \(2, 3\)"
        ):
            bandpo.band_bounds(logp, delta, "kl")


def test_per_token_delta_does_not_import_sympy() -> None:
    """The shape check is written out: torch.broadcast_shapes imports sympy on first use (1-2 s idle, 18 s measured
    on a loaded machine), which the first adaptive_band loss used to pay."""
    code = (
        "import sys, torch, bandpo; "
        "bandpo.band_bounds(-torch.rand(2, 3), torch.full((3,), 0.1), 'kl'); "
        "print('sympy' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


@pytest.mark.parametrize("value", ["no", 0, None])
def test_the_value_check_switch_is_a_bool(value: object) -> None:
    """A string such as ``"no"`` would be truthy: refused, as Band's rules refuse it."""
    with pytest.raises(
        ValueError, match=rf"^check_values must be True or False, got {re.escape(repr(value))}$"
    ):
        bandpo.band_bounds(torch.tensor([-1.0]), 0.05, check_values=value)


def test_value_checks_can_be_switched_off() -> None:
    """``check_values=False``: no error and no host sync for a positive log-prob; garbage in, finite clamped garbage
    out (inside [0, 1] and [1, cap]), and the valid token's bounds are the checked call's."""
    from host_sync import record_host_reads

    logp = torch.tensor([0.5, -1.0])
    with record_host_reads() as calls:
        lo, hi = bandpo.band_bounds(logp, 0.05, "kl", check_values=False)
    assert calls == []
    assert bool(torch.isfinite(lo).all() and torch.isfinite(hi).all())
    assert bool(((lo >= 0) & (lo <= 1) & (hi >= 1) & (hi <= 10)).all()), (lo, hi)
    lo1, hi1 = bandpo.band_bounds(logp[1:], 0.05, "kl")
    assert (lo[1].item(), hi[1].item()) == (lo1.item(), hi1.item())


def test_methods_constant_lists_auto() -> None:
    assert METHODS[0] == "auto"
    assert {"kl", "tv", "chi2", "neyman_chi2", "hellinger", "reverse_kl", "js"} <= set(NAMES)
    assert "bandkl" in bandpo.DIVERGENCES and bandpo.get_divergence("bandkl").name == "kl"


@pytest.mark.parametrize("method", ["closed_form", "newton", "bisection", "table"])
def test_band_bounds_carry_no_gradient_with_any_solver(method: str) -> None:
    old = torch.log(torch.tensor([0.01, 0.3, 0.9], dtype=torch.float64)).requires_grad_()
    divergence = "tv" if method == "closed_form" else "kl"
    delta = torch.full((3,), 0.05, dtype=torch.float64, requires_grad=True) if method != "table" else 0.05
    lo, hi = bandpo.band_bounds(old, delta, divergence, method=method)
    assert not lo.requires_grad and not hi.requires_grad


@pytest.mark.parametrize("name", ["kl", "reverse_kl", "js", "tv"])
def test_a_radius_below_the_smallest_is_refused_and_the_smallest_gives_finite_bounds(name: str) -> None:
    """Reverse KL's and JS's Newton gave NaN bounds from about delta = 1e-30 (float32) / 1e-33 (float64), with no
    error: radii below ``DELTA_MIN`` are refused, scalar or per token; at ``DELTA_MIN`` every solver's bounds are
    finite, inside the simplex and next to 1."""
    from bandpo.core.checks import DELTA_MIN

    logp = torch.log(torch.tensor([1e-30, 1e-8, 1e-3, 0.2, 0.5, 0.9, 0.999999], dtype=torch.float64))
    for delta in (1e-13, 1e-40):
        with pytest.raises(ValueError, match=rf"^delta must be at least 1e-12 \(.*\), got {delta!r}$"):
            bandpo.band_bounds(logp, delta, name)
        with pytest.raises(ValueError, match=rf"^delta must hold radii of at least 1e-12, found {delta!r}$"):
            bandpo.band_bounds(logp, torch.full_like(logp, delta), name)
    for dtype in (torch.float32, torch.float64):
        for delta in (DELTA_MIN, torch.full(logp.shape, DELTA_MIN, dtype=dtype)):
            lo, hi = bandpo.band_bounds(logp.to(dtype), delta, name, cap=None)
            assert torch.isfinite(lo).all() and (lo >= 0).all() and (lo <= 1).all(), (dtype, lo)
            assert (hi >= 1).all() and (hi <= 1 / logp.exp().to(dtype) * (1 + 1e-5)).all(), (dtype, hi)
            assert (lo[2:] > 0.99).all() and (hi[3:] < 1.01).all(), (dtype, lo, hi)


@pytest.mark.parametrize("name", ["chi2", "neyman_chi2", "reverse_kl"])
def test_the_unbounded_divergences_take_radii_up_to_the_largest_and_refuse_more(name: str) -> None:
    """``chi2`` at 1e39 raised inside ``torch.full`` (float32 overflow) and ``neyman_chi2`` at 1e38 gave NaN at
    p = 1: every divergence now takes at most ``DELTA_MAX``, scalar or per token, and gives finite bounds in the
    simplex there in every dtype and solver."""
    from bandpo.core.checks import DELTA_MAX

    logp = torch.tensor([-math.inf, -100.0, -80.0, -10.0, -1.0, -1e-8, 0.0])
    for delta in (1e31, 1e39):
        with pytest.raises(
            ValueError, match=rf"^delta must be at most 1e\+30 \(.*\), got {re.escape(repr(delta))}$"
        ):
            bandpo.band_bounds(logp, delta, name)
    with pytest.raises(ValueError, match=r"^delta must hold radii of at most 1e\+30, found 1e\+31$"):
        bandpo.band_bounds(logp.double(), torch.full_like(logp.double(), 1e31), name)
    for dtype in (torch.bfloat16, torch.float32, torch.float64):
        for method in ("auto", "bisection"):
            lo, hi = bandpo.band_bounds(logp.to(dtype), DELTA_MAX, name, cap=None, method=method)
            assert not (lo.isnan().any() or hi.isnan().any()), (dtype, method, lo, hi)
            assert ((lo >= 0) & (lo <= 1) & (hi >= 1)).all(), (dtype, method, lo, hi)


def test_solvers_registry_dispatches_band_bounds() -> None:
    """``SOLVERS`` is the dispatch, not a list of names beside an if-chain: a solver registered there is what
    ``band_bounds(method=name)`` runs, refusals included, and ``auto`` tries the entries in their order."""
    from bandpo.core.bounds import SOLVERS, Solver, resolve_method

    calls: list[tuple[str, tuple[int, ...]]] = []

    def halves(div, logp, delta):  # a stand-in solver: lo = 1/2, hi = 2 everywhere
        calls.append((div.name, tuple(logp.shape)))
        return torch.full_like(logp, 0.5), torch.full_like(logp, 2.0)

    SOLVERS.register(
        "halves", Solver("test", lambda div, scalar: None if div.name == "kl" else "halves: kl only", halves)
    )
    try:
        lo, hi = bandpo.band_bounds(torch.log(torch.tensor([0.01, 0.5, 0.9])), 0.05, "kl", method="halves")
        assert calls == [("kl", (3,))]
        assert lo.tolist() == [0.5, 0.5, 0.5] and hi.tolist() == [2.0, 2.0, 2.0]
        with pytest.raises(ValueError, match="halves: kl only"):
            bandpo.band_bounds(torch.tensor([-1.0]), 0.05, "reverse_kl", method="halves")
        # auto still takes the first entry that serves: kl's table for a scalar radius, newton for a tensor one
        kl = bandpo.get_divergence("kl")
        assert resolve_method(kl, "auto", True) == "table" and resolve_method(kl, "auto", False) == "newton"
    finally:
        SOLVERS.unregister("halves")


def test_fast_solvers_registry_dispatches_newton() -> None:
    """``Divergence.fast_solver`` names an entry of ``FAST_SOLVERS``, which ``method="newton"`` runs: a registered
    one is taken (here KL's Halley solver under another name, so the bounds must equal KL's)."""
    from bandpo.core.divergences import FAST_SOLVERS, Divergence

    kl = bandpo.get_divergence("kl")
    seen: list[int] = []

    def counted(div, logp, log1mp, delta):
        seen.append(logp.numel())
        return FAST_SOLVERS.get("kl")(div, logp, log1mp, delta)

    FAST_SOLVERS.register("counted_kl", counted)
    try:
        mine = Divergence(
            "kl_again", kl.generator, "KL by a registered fast solver", fast_solver="counted_kl"
        )
        old = torch.log(torch.tensor([1e-6, 0.01, 0.3, 0.9], dtype=torch.float64))
        got = bandpo.band_bounds(old, 0.05, mine, method="newton", cap=None)
        want = bandpo.band_bounds(old, 0.05, "kl", method="newton", cap=None)
        assert seen == [4]
        torch.testing.assert_close(got, want, rtol=0, atol=0)
        with pytest.raises(
            ValueError, match=r"fast_solver must be one of None, 'kl', 'newton', 'counted_kl'"
        ):
            Divergence("x", kl.generator, "x", fast_solver="counted")
    finally:
        FAST_SOLVERS.unregister("counted_kl")
