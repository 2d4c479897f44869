"""Clip rules: registry, parameter validation, formulas."""

from __future__ import annotations

import math

import pytest
import torch

import bandpo
from bandpo.losses import CLIP_RULES, AdaptiveBandClip, clip_rule_params, make_clip_rule


def test_registry_names() -> None:
    assert CLIP_RULES.names() == ["grpo", "clip_higher", "dcpo", "band", "adaptive_band"]
    with pytest.raises(ValueError, match="already registered"):
        CLIP_RULES.register("grpo", object)


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


def test_band_rule_is_band_bounds() -> None:
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
    _lo0, hi0 = rule.bounds(lp)  # no entropy: plain delta
    assert torch.allclose(hi0, bandpo.band_bounds(lp, 0.05, "kl")[1])


@pytest.mark.parametrize(
    "name,params,match",
    [
        ("grpo", {"eps_low": 1.5}, r"eps_low must be a finite number in \[0.0, 1.0\], got 1.5"),
        ("grpo", {"eps_high": -0.1}, "eps_high must be a finite number >= 0"),
        ("band", {"delta": 0}, "delta must be a finite number > 0, got 0"),
        ("band", {"divergence": "kll"}, r"unknown divergence 'kll' \(did you mean 'kl'\?\)"),
        ("band", {"cap": 0.5}, "cap must be >= 1"),
        ("band", {"relax": 0.2}, "relax must be None or a pair"),
        (
            "band",
            {"method": "newton", "divergence": "tv"},
            "method='newton' is available for divergences 'kl', 'reverse_kl', 'js' only",
        ),
        (
            "band",
            {"detla": 0.1},
            r"unknown parameter\(s\) 'detla' for clip rule 'band'; valid: divergence, delta",
        ),
        ("dcpo", {"cap": 0.9}, "cap must be >= 1"),
        ("adaptive_band", {"min_scale": 2.0, "max_scale": 1.0}, "min_scale must be <= max_scale"),
        ("nope", {}, r"unknown clip rule 'nope'; valid names: grpo, clip_higher, dcpo, band, adaptive_band"),
    ],
)
def test_validation_at_construction(name: str, params: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        make_clip_rule(name, **params)


def test_params_listing() -> None:
    assert clip_rule_params("band")["delta"] == 0.05
    assert make_clip_rule("band").describe().startswith("band(divergence=kl, delta=0.05")
