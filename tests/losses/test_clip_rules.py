"""Clip rules: registry, parameter validation, formulas."""

from __future__ import annotations

import logging
import math
import re

import pytest
import torch
from hypothesis import assume, given, settings
from hypothesis import strategies as st

import bandpo
from bandpo.core import solvers
from bandpo.losses import CLIP_RULES, AdaptiveBandClip, clip_rule_params, make_clip_rule, policy_loss


def test_registry_names() -> None:
    assert CLIP_RULES.names() == [
        "grpo",
        "clip_higher",
        "dcpo",
        "band",
        "band_upper",
        "band_lower",
        "adaptive_band",
        "dppo_tv",
        "dppo_kl",
    ]
    with pytest.raises(ValueError, match="already registered"):
        CLIP_RULES.register("grpo", object)


def test_register_clip_rule_refuses_before_changing_the_class() -> None:
    from dataclasses import dataclass

    from bandpo.losses.clip_rules import BandClip, ClipRule, FixedClip, register_clip_rule

    with pytest.raises(ValueError, match="clip rule 'grpo' is already registered"):
        register_clip_rule("grpo")(BandClip)
    assert BandClip.name == "band" and make_clip_rule("band").describe().startswith("band(")

    class Plain(FixedClip):  # inherits a dataclass, is not one itself
        pass

    @dataclass
    class Mutable(ClipRule):
        eps: float = 0.2

    for cls in (Plain, Mutable, int):
        with pytest.raises(
            TypeError, match=r"register_clip_rule\('new'\) needs a ClipRule subclass decorated"
        ):
            register_clip_rule("new")(cls)
    assert "new" not in CLIP_RULES.names()


@given(
    p=st.lists(st.floats(1e-9, 1.0), min_size=1, max_size=20),
    divergence=st.sampled_from(["kl", "tv", "chi2"]),
    delta=st.floats(0.01, 0.5),
    eps=st.floats(0.0, 0.9),
)
@settings(max_examples=60, deadline=None)
def test_one_sided_band_rules_keep_one_side_of_band_and_the_fixed_other(
    p: list[float], divergence: str, delta: float, eps: float
) -> None:
    """``band_upper``: Band's ``hi`` and ``lo = 1 - eps_low``; ``band_lower``: Band's ``lo`` and ``hi = 1 + eps_high``;
    each side equal bit for bit to ``band``'s (same divergence, radius, cap) or to GRPO's fixed bound."""
    lp = torch.log(torch.tensor(p, dtype=torch.float64))
    band_lo, band_hi = make_clip_rule("band", divergence=divergence, delta=delta).bounds(lp)
    fixed_lo, fixed_hi = make_clip_rule("grpo", eps_low=eps, eps_high=eps).bounds(lp)
    lo, hi = make_clip_rule("band_upper", divergence=divergence, delta=delta, eps_low=eps).bounds(lp)
    assert torch.equal(lo, fixed_lo) and torch.equal(hi, band_hi)
    lo, hi = make_clip_rule("band_lower", divergence=divergence, delta=delta, eps_high=eps).bounds(lp)
    assert torch.equal(lo, band_lo) and torch.equal(hi, fixed_hi)
    assert lo.dtype == hi.dtype == torch.float64


def test_one_sided_band_rules_at_the_papers_defaults() -> None:
    """The numbers the study's hypotheses quote (Band-KL, delta 0.05, cap 10): at p = 0.08 Band's ``hi`` 2.4 and ``lo``
    0.262 against GRPO's 1.2 and 0.8; a common token (p = 0.9) keeps GRPO's lower bound under ``band_upper``."""
    lp = torch.log(torch.tensor([0.08, 0.01, 0.9]))
    lo, hi = make_clip_rule("band_upper").bounds(lp)
    assert torch.equal(lo, torch.full((3,), 0.8))
    assert hi[0].item() == pytest.approx(2.4, abs=0.06) and hi[1].item() == pytest.approx(7.8, abs=0.2)
    lo, hi = make_clip_rule("band_lower").bounds(lp)
    assert torch.equal(hi, torch.full((3,), 1.2))
    assert lo[0].item() == pytest.approx(0.262, abs=1e-3) and lo[1].item() == pytest.approx(0.0025, abs=1e-4)
    assert make_clip_rule("band_upper").describe() == (
        "band_upper(divergence=kl, delta=0.05, cap=10.0, method=auto, check_values=False, eps_low=0.2)"
    )


@pytest.mark.parametrize(
    ("rule", "params", "message"),
    [
        ("band_upper", {"eps_low": 1.5}, "eps_low"),
        ("band_upper", {"eps_high": 0.2}, "unknown parameter.*'eps_high'.*band_upper"),
        ("band_lower", {"eps_high": -0.1}, "eps_high"),
        ("band_lower", {"eps_low": 0.2}, "unknown parameter.*'eps_low'.*band_lower"),
        ("band_lower", {"delta": 0.0}, "delta"),
        ("band_upper", {"divergence": "kll"}, "kll"),
        ("band_upper", {"cap": 0.5}, "cap"),
    ],
)
def test_one_sided_band_rules_refuse_bad_parameters(rule: str, params: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        make_clip_rule(rule, **params)


def test_fixed_rules() -> None:
    lp = torch.log(torch.tensor([0.01, 0.5, 0.99]))
    lo, hi = make_clip_rule("grpo").bounds(lp)
    assert torch.allclose(lo, torch.full((3,), 0.8)) and torch.allclose(hi, torch.full((3,), 1.2))
    lo, hi = make_clip_rule("clip_higher").bounds(lp)
    assert torch.allclose(hi, torch.full((3,), 1.28))


def test_dcpo_formula() -> None:
    q = torch.tensor([0.01, 0.5, 0.8, 1.0], dtype=torch.float64)
    lo, hi = make_clip_rule("dcpo").bounds(q.log())
    for qi, a, b in zip(q.tolist(), lo.tolist(), hi.tolist()):
        assert a == pytest.approx(0.5 + 0.5 * math.sqrt(max(1 - 4 * 0.16 / qi, 0)))
        assert b == pytest.approx(min(0.5 + 0.5 * math.sqrt(1 + 4 * 0.2 / qi), 10))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_dcpo_extremes_have_no_nan(dtype: torch.dtype) -> None:
    """eps = 0 is allowed: it fixes that side at 1, also where 1/q overflows (p = 0, or p < 1e-38 in float32),
    instead of 0 * inf = nan; the other side keeps its own formula."""
    lp = torch.tensor([-math.inf, -95.0, -1.0, 0.0], dtype=dtype)
    lo, hi = make_clip_rule("dcpo", eps_low=0.0, eps_high=0.0).bounds(lp)
    assert torch.equal(lo, torch.ones(4, dtype=dtype)) and torch.equal(hi, torch.ones(4, dtype=dtype))
    lo, hi = make_clip_rule("dcpo", eps_low=0.0).bounds(lp)
    assert torch.equal(lo, torch.ones(4, dtype=dtype))
    assert hi[0] == 10.0 and float(hi[-1]) == pytest.approx(
        0.5 + 0.5 * math.sqrt(1.8)
    )  # a float: approx of a tensor needs numpy
    lo, hi = make_clip_rule("dcpo").bounds(lp)  # defaults at p = 0: the lower bound's floor 0.5 and the cap
    assert not (lo.isnan().any() or hi.isnan().any()) and lo[0] == 0.5 and hi[0] == 10.0


def test_band_rule_is_band_bounds() -> None:
    """Wiring test: the ``band`` rule's bounds are ``band_bounds`` with the rule's parameters; the bounds
    themselves are checked against mpmath in tests/core/test_bounds.py::test_float64_matches_mpmath_reference."""
    lp = -torch.rand(50) * 5
    rule = make_clip_rule("band", divergence="chi2", delta=0.1, cap=5.0, relax=[0.2, 0.28])
    lo, hi = rule.bounds(lp)
    lo2, hi2 = bandpo.band_bounds(lp, 0.1, "chi2", cap=5.0, relax=(0.2, 0.28))
    assert torch.equal(lo, lo2) and torch.equal(hi, hi2)


def test_adaptive_band_radius_and_bounds() -> None:
    rule = AdaptiveBandClip(delta=0.05, entropy_ref=1.0, power=0.5, min_scale=0.25, max_scale=4.0)
    ent = torch.tensor([0.0, 0.01, 1.0, 4.0, 100.0])
    assert torch.allclose(rule.radius(ent), torch.tensor([0.0125, 0.005 * 2.5, 0.05, 0.1, 0.2]))
    lp = torch.full((5,), math.log(0.3))
    lo, hi = rule.bounds(lp, ent)
    assert (torch.diff(hi) >= 0).all() and (torch.diff(lo) <= 0).all()  # wider where the policy is uncertain
    _lo1, hi1 = rule.bounds(lp, torch.ones(5))  # entropy = entropy_ref: the base radius delta
    assert torch.allclose(hi1, bandpo.band_bounds(lp, 0.05, "kl")[1])


def test_adaptive_band_without_entropy_raises() -> None:
    """No silent fallback to plain Band: the rule, policy_loss and the per-token objective all refuse."""
    lp = torch.full((2, 3), math.log(0.3))
    with pytest.raises(ValueError, match=r"clip rule 'adaptive_band' needs the per-token entropy.*got None"):
        make_clip_rule("adaptive_band").bounds(lp)
    with pytest.raises(ValueError, match=r"clip rule 'adaptive_band' needs the per-token entropy.*got None"):
        bandpo.policy_loss(lp, lp, torch.ones(2), torch.ones(2, 3), "adaptive_band")


@pytest.mark.parametrize("relax", [(0.2, 0.0), [0.0, 0.0], (1.0, 0.28)])
def test_relax_one_validator_accepts_the_same_pairs(relax: tuple) -> None:
    lp = -torch.rand(20, dtype=torch.float64) * 5
    lo, hi = make_clip_rule("band", relax=relax).bounds(lp)
    lo2, hi2 = bandpo.band_bounds(lp, 0.05, "kl", relax=tuple(relax))
    assert torch.equal(lo, lo2) and torch.equal(hi, hi2)
    assert (lo <= 1.0 - relax[0]).all() and (hi >= 1.0 + relax[1]).all()


@pytest.mark.parametrize(
    "relax,match",
    [
        ((0.2, -0.1), r"relax eps_high must be a finite number >= 0, got -0.1"),
        ((1.5, 0.2), r"relax eps_low must be a finite number in \[0.0, 1.0\], got 1.5"),
        ((0.2,), r"relax must be None or a pair \(eps_low, eps_high\), got \(0.2,\)"),
        (("a", 0.2), r"relax eps_low must be a finite number in \[0.0, 1.0\], got 'a'"),
    ],
)
def test_relax_one_validator_same_errors(relax: tuple, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        make_clip_rule("band", relax=relax)
    with pytest.raises(ValueError, match=match):
        bandpo.band_bounds(torch.zeros(3), 0.05, "kl", relax=relax)


@pytest.mark.parametrize("cap", [0.5, 0, -1.0, float("nan"), float("inf"), "10", True])
def test_cap_one_validator_same_message(cap: object) -> None:
    """band_bounds, band, adaptive_band and dcpo reject a bad cap with one message."""
    msg = rf"cap must be a finite number >= 1 \(or None for no cap\), got {re.escape(repr(cap))}$"
    with pytest.raises(ValueError, match=msg):
        bandpo.band_bounds(torch.zeros(3), 0.05, "kl", cap=cap)
    for rule in ("band", "adaptive_band"):
        with pytest.raises(ValueError, match=msg):
            make_clip_rule(rule, cap=cap)
    with pytest.raises(ValueError, match=rf"cap must be a finite number >= 1, got {re.escape(repr(cap))}$"):
        make_clip_rule("dcpo", cap=cap)


@pytest.mark.parametrize(
    "name,params,match",
    [
        ("grpo", {"eps_low": 1.5}, r"eps_low must be a finite number in \[0.0, 1.0\], got 1.5"),
        ("grpo", {"eps_high": -0.1}, "eps_high must be a finite number >= 0"),
        ("band", {"delta": 0}, "delta must be a finite number > 0, got 0"),
        ("band", {"divergence": "kll"}, r"unknown divergence 'kll' \(did you mean 'kl'\?\)"),
        ("band", {"cap": 0.5}, "cap must be a finite number >= 1"),
        ("band", {"relax": 0.2}, "relax must be None or a pair"),
        (
            "band",
            {"method": "newton", "divergence": "tv"},
            "method='newton' is available for divergences 'kl', 'reverse_kl', 'js' only",
        ),
        (
            "band",
            {"detla": 0.1},
            r"unknown parameter\(s\) 'detla' \(did you mean 'delta'\?\) for clip rule 'band'; valid: divergence, delta",
        ),
        ("dcpo", {"cap": 0.9}, "cap must be a finite number >= 1"),
        *(
            (
                rule,
                {"check_values": value},
                rf"^check_values must be True or False, got {re.escape(repr(value))}$",
            )
            for rule in ("band", "band_upper", "band_lower", "adaptive_band")
            for value in ("false", None, 0)
        ),
        ("adaptive_band", {"min_scale": 2.0, "max_scale": 1.0}, "min_scale must be <= max_scale"),
        (
            "nope",
            {},
            r"unknown clip rule 'nope'; valid names: grpo, clip_higher, dcpo, band, band_upper, band_lower, adaptive_band, dppo_tv, dppo_kl",
        ),
        ("dppo_tv", {"clip_divergence_low": 0}, r"clip_divergence_low must be a finite number > 0, got 0$"),
        (
            "dppo_kl",
            {"clip_divergence_high": -0.05},
            r"clip_divergence_high must be a finite number > 0, got -0.05",
        ),
        (
            "dppo_kl",
            {"clip_divergence_high": float("nan")},
            r"clip_divergence_high must be a finite number > 0",
        ),
        (
            "dppo_kl",
            {"clip_divergence_high": 1.8e16},
            r"^clip_divergence_high must be a finite number in \(0, 1000\] for divergence 'kl' \(.*\), got 1\.8e\+16$",
        ),
        (
            "dppo_kl",
            {"clip_divergence_low": math.nextafter(1000.0, math.inf)},
            r"^clip_divergence_low must be a finite number in \(0, 1000\] for divergence 'kl' .*got 1000.0000000000001$",
        ),
        ("band", {"delta": 1001.0}, r"^delta must be a finite number in \(0, 1000\] for divergence 'kl'"),
        (
            "adaptive_band",
            {"delta": 300.0},  # x max_scale 4
            r"^delta \* max_scale \(the largest per-token radius\) must be a finite number in \(0, 1000\].*got 1200.0$",
        ),
        (  # the smallest radius too: below 1e-12 reverse KL's Newton step gives NaN
            "adaptive_band",
            {"divergence": "reverse_kl", "min_scale": 1e-30},  # x delta 0.05
            r"^delta \* min_scale \(the smallest per-token radius\) must be at least 1e-12 .*got 5e-32$",
        ),
        ("adaptive_band", {"delta": 1e-12}, r"^delta \* min_scale .* must be at least 1e-12 .*got 2\.5e-13$"),
        ("dppo_tv", {"truncation_c": 1.0}, r"truncation_c must be a finite number > 1, got 1.0$"),
        ("dppo_kl", {"truncation_c": 0.5}, r"truncation_c must be a finite number > 1, got 0.5$"),
        ("dppo_kl", {"truncation_c": float("inf")}, r"truncation_c must be a finite number > 1, got inf"),
        (
            "dppo_tv",
            {"c": 3.0},
            r"unknown parameter\(s\) 'c' for clip rule 'dppo_tv'; valid: clip_divergence_low",
        ),
    ],
)
def test_validation_at_construction(name: str, params: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        make_clip_rule(name, **params)


@pytest.mark.parametrize("name", ["dppo_kl", "band", "adaptive_band"])
def test_kl_radius_at_its_limit_gives_finite_bounds(name: str) -> None:
    """The largest accepted KL radius (thresholds 1000; Band's delta 1000; adaptive: delta x max_scale 1000) builds
    and gives finite bounds for every p, 0 and 1 included: the metrics and TRL's clamp never see NaN."""
    params = {
        "dppo_kl": {"clip_divergence_low": 1000.0, "clip_divergence_high": 1000.0},
        "band": {"delta": 1000.0, "cap": None},
        "adaptive_band": {"delta": 250.0, "cap": None},
    }[name]
    rule = make_clip_rule(name, **params)
    old = torch.tensor([0.0, -1e-12, -0.5, -30.0, -80.0, -700.0, -1e4, -math.inf])
    lo, hi = rule.bounds(old, torch.full_like(old, 1e6) if rule.needs_entropy else None)  # entropy: max_scale
    assert not torch.isnan(lo).any() and not torch.isnan(hi).any()
    assert (lo >= 0).all() and (lo <= 1).all() and (hi >= 1).all()


def test_dppo_tv_thresholds_are_below_one() -> None:
    """|p_new - p_old| <= 1: from a threshold of 1 on every token is inside DPPO-TV's region (Band-TV's bounds are
    [0, 1/p] for every p), so thresholds >= 1 are refused as Band-TV's radius is, naming TV's range; any threshold
    below gives finite bounds (1 -+ delta / p in [0, 1/p]: no overflow), and p = 1 keeps lo > 0."""
    for key in ("clip_divergence_low", "clip_divergence_high"):
        for value in (1.0, 1.8e16):
            with pytest.raises(
                ValueError, match=rf"^{key} must be a finite number in \(0, 1\) for divergence 'tv'"
            ):
                make_clip_rule("dppo_tv", **{key: value})
    rule = make_clip_rule("dppo_tv", clip_divergence_low=0.999, clip_divergence_high=0.999)
    lo, hi = rule.bounds(torch.tensor([0.0, -0.5, -80.0, -math.inf]))
    assert not torch.isnan(lo).any() and not torch.isnan(hi).any()
    assert lo[0].item() == pytest.approx(0.001, rel=1e-4) and (lo[1:] == 0).all()  # float32


def _count_table_builds(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """Record the radius of every KL table built from now on (``solvers.BoundsTable``)."""
    built: list[float] = []
    real = solvers.cached_table

    def counting(key, delta, bins_log2, build):
        return real(key, delta, bins_log2, lambda: built.append(delta) or build())

    monkeypatch.setattr(solvers, "cached_table", counting)
    return built


def test_dppo_kl_builds_its_tables_at_construction_and_logs_them(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A new DPPO-KL threshold costs a KL table (0.1-2 s): construction pays it, once per threshold, and says so in
    the log; the first loss then builds nothing (before: the first bounds call built them)."""
    built = _count_table_builds(monkeypatch)
    low, high = 0.0312, 0.0687  # thresholds no other test uses
    with caplog.at_level(logging.INFO, logger="bandpo.core.bounds"):
        rule = make_clip_rule("dppo_kl", clip_divergence_low=low, clip_divergence_high=high)
    assert sorted(built) == [low, high]
    logged = [r.getMessage() for r in caplog.records]
    for delta in (low, high):
        assert any(
            f"built the kl bounds table for delta={delta:g} (float32 compute, 102401 nodes) in " in m
            for m in logged
        )
    built.clear()
    new = torch.log(torch.rand(4, 16, generator=torch.Generator().manual_seed(0)))
    old = new + 0.3 * torch.randn(4, 16, generator=torch.Generator().manual_seed(1))
    policy_loss(new, old.clamp(max=0.0), torch.randn(4), torch.ones(4, 16), rule)
    make_clip_rule("dppo_kl", clip_divergence_low=low, clip_divergence_high=high)  # cached: no rebuild
    assert built == []


@pytest.mark.parametrize("name", ["grpo", "dcpo", "band", "adaptive_band", "dppo_tv"])
def test_warm_builds_what_the_first_bounds_call_would(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """``warm`` is the first bounds call done early: Band-KL's scalar radius gets its table, the others need none."""
    built = _count_table_builds(monkeypatch)
    params = {"band": {"delta": 0.0418}, "adaptive_band": {"delta": 0.0418}}.get(name, {})
    rule = make_clip_rule(name, **params)
    assert built == []  # only dppo_kl builds at construction
    rule.warm()
    assert built == ([0.0418] if name == "band" else [])
    built.clear()
    rule.bounds(-torch.rand(8), torch.ones(8) if rule.needs_entropy else None)
    assert built == []


@pytest.mark.parametrize("name", ["band", "adaptive_band"])
def test_a_divergence_alias_is_stored_as_its_name(name: str) -> None:
    """The authors' spelling ``bandkl`` builds the same rule as ``kl``: equal, hashed alike (rules are cache keys)
    and logged under one name."""
    alias, plain = make_clip_rule(name, divergence="bandkl"), make_clip_rule(name)
    assert alias == plain and hash(alias) == hash(plain) and alias.divergence == "kl"
    assert alias.describe() == plain.describe()


def test_params_listing() -> None:
    assert clip_rule_params("band")["delta"] == 0.05
    assert make_clip_rule("band").describe().startswith("band(divergence=kl, delta=0.05")


def test_dppo_params_and_objective() -> None:
    assert clip_rule_params("dppo_tv") == {
        "clip_divergence_low": 0.15,
        "clip_divergence_high": 0.15,
        "truncation_c": 20.0,
    }
    assert clip_rule_params("dppo_kl")["clip_divergence_high"] == 0.05
    assert make_clip_rule("dppo_kl", truncation_c=3).truncation_c == 3.0
    assert all(make_clip_rule(n).truncation_c is None for n in ("grpo", "clip_higher", "dcpo", "band"))


@pytest.mark.parametrize("name,divergence", [("dppo_tv", "tv"), ("dppo_kl", "kl")])
def test_dppo_bounds_are_band_without_cap(name: str, divergence: str) -> None:
    """DPPO's region as ratio bounds: Band's bounds of the same binary divergence, radius the threshold, no cap."""
    lp = torch.log(torch.rand(200, dtype=torch.float64) * 0.999 + 1e-4)
    lo, hi = make_clip_rule(name, clip_divergence_low=0.03, clip_divergence_high=0.2).bounds(lp)
    assert torch.equal(lo, bandpo.band_bounds(lp, 0.03, divergence, cap=None)[0])
    assert torch.equal(hi, bandpo.band_bounds(lp, 0.2, divergence, cap=None)[1])


@settings(max_examples=60, deadline=None)
@given(
    p_old=st.floats(1e-6, 0.999),
    factor=st.floats(-8.0, 8.0),
    low=st.sampled_from([0.02, 0.05, 0.15]),  # a few radii: Band-KL tabulates each one once
    high=st.sampled_from([0.05, 0.3]),
    name=st.sampled_from(["dppo_tv", "dppo_kl"]),
)
def test_dppo_region_masks_agree_with_their_bounds(
    p_old: float, factor: float, low: float, high: float, name: str
) -> None:
    """The probability-space test (verl's) and the ratio bounds describe one region, away from its edge (and,
    for KL, from p -> 1, where verl's 1e-8 matters)."""
    rule = make_clip_rule(name, clip_divergence_low=low, clip_divergence_high=high)
    old = torch.tensor([math.log(p_old)], dtype=torch.float64)
    new = torch.clamp(old + factor / 2, max=-1e-4)  # p_new <= 0.9999
    ratio = torch.exp(new - old)
    lo, hi = rule.bounds(old)
    up_ok, down_ok = rule.region_masks(new, old, ratio, lo, hi)
    for edge in (hi, lo):
        assume(abs(ratio.item() - edge.item()) > 1e-6 * max(edge.item(), 1e-3))
    assert bool(up_ok) == bool(ratio <= hi)
    assert bool(down_ok) == bool(ratio >= lo)


@pytest.mark.parametrize("name", CLIP_RULES.names())
def test_bounds_carry_no_gradient_whatever_the_rule(name: str) -> None:
    """The bounds are constants of the objective: no rule's bounds (nor band_bounds' with any solver) depend on
    ``old_log_prob`` or the entropy through autograd. DCPO's and the raw Band's closed forms and Newton did."""
    old = torch.log(torch.tensor([[0.01, 0.3, 0.9]], dtype=torch.float64)).requires_grad_()
    entropy = torch.tensor([[0.5, 1.0, 2.0]], dtype=torch.float64, requires_grad=True)
    lo, hi = make_clip_rule(name).bounds(old, entropy)
    assert not lo.requires_grad and not hi.requires_grad
