"""``bandpo.losses.method``: the clip method (rule, parameters, radius schedule, diagnostics level) validated once, and
the one translation from a framework's spelling (:func:`clip_method`), in both of its modes."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from typing import Optional

import pytest
import torch
from torch import Tensor

from bandpo.integrations.trl_spec import TRL_NAMES  # a real table of spellings for clip_method
from bandpo.losses import (
    CLIP_RULES,
    ClipRule,
    RadiusSchedule,
    make_clip_rule,
    register_clip_rule,
    rule_at_radius,
)
from bandpo.losses.method import (
    ClipMethod,
    clip_method,
    loss_names,
)

VERL_LIKE = {
    "policy_loss.delta": "delta",
    "policy_loss.cap": "cap",
    "policy_loss.delta_schedule": "delta_schedule",
    "policy_loss.delta_end": "delta_end",
    "clip_ratio_low": ("eps_low", "clip_divergence_low"),
}


def test_defaults_are_band_kl_constant_full() -> None:
    method = ClipMethod()
    assert method.clip_rule == make_clip_rule("band")
    assert method.schedule == RadiusSchedule("constant", 0.05)
    assert method.diagnostics == "full"
    assert method.rule_at_step(7) is method.clip_rule


def test_rule_is_cached_per_parameter_set_and_methods_compare_by_value() -> None:
    a = ClipMethod("band", {"delta": 0.1, "relax": [0.2, 0.28]})
    b = ClipMethod("band", {"relax": (0.2, 0.28), "delta": 0.1}, spelling={"delta": "band_delta"}, where="x")
    assert a.clip_rule is b.clip_rule and a == b and hash(a) == hash(b)
    assert a.clip_rule.relax == (0.2, 0.28)
    assert a != ClipMethod("band", {"delta": 0.2})


def test_scheduled_rule_uses_the_tensor_radius_solver_at_each_step() -> None:
    method = ClipMethod("band", {"delta": 0.2}, delta_schedule="linear", delta_end=0.02).for_run(10)
    assert method.for_run(10) is method and method.total_steps == 10
    for step in (1, 5, 10, 12):
        rule = method.rule_at_step(step)
        assert rule == rule_at_radius(method.clip_rule, method.schedule.value(step))
        assert rule is method.rule_at_step(step)  # cached per radius
    with pytest.raises(ValueError, match="needs total_steps"):
        ClipMethod("band", delta_schedule="cosine", delta_end=0.02).rule_at_step(1)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (
            {"params": {"delta": -1.0}},
            r"^invalid BandPO settings \(clip rule 'band'\): delta must be a finite number > 0, got -1\.0$",
        ),
        ({"rule": "bandd"}, r"\(clip rule 'bandd'\): unknown clip rule 'bandd' \(did you mean 'band'\?\)"),
        ({"rule": 3}, r"^rule must be a registered name, got 3; valid names: grpo"),
        ({"params": [0.1]}, r"^params must be a mapping of the rule's parameters, got \[0\.1\]$"),
        (
            {"delta_schedule": "linear"},
            r"delta_end must be set \(a finite number > 0\) for delta_schedule='linear'",
        ),
        (
            {"rule": "grpo", "delta_schedule": "linear", "delta_end": 0.02},
            r"delta_schedule='linear' sets the radius delta, but clip rule grpo\(.*\) has no delta parameter",
        ),
        ({"diagnostics": "al"}, r"^diagnostics must be one of full, basic, none, got 'al'$"),
    ],
)
def test_one_line_errors_name_the_setting(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message) as err:
        ClipMethod(**{"where": "BandPO settings", **kwargs})
    assert "\n" not in str(err.value)


def test_strict_translation_is_trls_band_shortcuts() -> None:
    """TRL's table: ``band_*`` set a rule parameter, ``None`` is unset, a shortcut the rule lacks or one that
    ``clip_rule_kwargs`` also sets is refused; messages use TRL's spelling."""
    settings = {
        "clip_rule": "band",
        "band_delta": 0.1,
        "band_cap": None,
        "clip_rule_kwargs": {"divergence": "tv"},
    }
    method = clip_method(settings, TRL_NAMES, where="clip rule configuration")
    assert method.clip_rule == make_clip_rule("band", delta=0.1, divergence="tv")
    assert method.label("delta") == "band_delta" and method.label("total_steps") == "max_steps"
    with pytest.raises(
        ValueError, match=r"^band_delta=0\.1 does not apply to clip_rule='grpo', which has no 'delta'"
    ):
        clip_method({**settings, "clip_rule": "grpo", "clip_rule_kwargs": None}, TRL_NAMES, where="x")
    with pytest.raises(
        ValueError, match=r"^band_delta=0\.1 and clip_rule_kwargs\['delta'\]=0\.2 both set 'delta'"
    ):
        clip_method({**settings, "clip_rule_kwargs": {"delta": 0.2}}, TRL_NAMES, where="x")
    with pytest.raises(
        ValueError,
        match=r"^invalid x \(clip_rule='band'\): band_delta_end must be set .* for band_delta_schedule='linear'",
    ):
        clip_method({**settings, "band_delta_schedule": "linear"}, TRL_NAMES, where="x")
    with pytest.raises(ValueError, match=r"^clip_rule: unknown clip rule 'bnad'"):
        clip_method({"clip_rule": "bnad"}, TRL_NAMES, where="x")


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"band_delta": -1}, r"\(clip_rule='band'\): band_delta must be a finite number > 0, got -1$"),
        (  # TRL's band_cap=None keeps the default cap: the message points to the entry where None is "no cap"
            {"band_cap": 0.5},
            r": band_cap must be a finite number >= 1 \(band_cap=None keeps the rule's default; no cap: "
            r"clip_rule_kwargs=\{'cap': None\}\), got 0\.5$",
        ),
        (
            {"clip_rule_kwargs": {"cap": 0.5}},
            r": clip_rule_kwargs\['cap'\] must be .* \(or None for no cap\), got 0\.5$",
        ),
        (
            {"band_relax": [1.5, 0.2]},
            r": band_relax eps_low must be a finite number in \[0\.0, 1\.0\], got 1\.5$",
        ),
        ({"band_divergence": "foo"}, r": band_divergence: unknown divergence 'foo'; valid names: kl"),
        (
            {"clip_rule": "grpo", "clip_rule_kwargs": {"eps_low": 1.5}},
            r"\(clip_rule='grpo'\): clip_rule_kwargs\['eps_low'\] must be a finite number in \[0\.0, 1\.0\]",
        ),
        (
            {"clip_rule_kwargs": {"delta": -1}},
            r": clip_rule_kwargs\['delta'\] must be a finite number > 0, got -1$",
        ),
        (
            {"clip_rule_kwargs": {"detla": 0.1}},
            r": clip_rule_kwargs: unknown parameter\(s\) 'detla' \(did you mean 'delta'\?\) for clip rule",
        ),
    ],
)
def test_rule_parameter_errors_name_the_callers_spelling(settings: dict, message: str) -> None:
    """The rule's own check words its message with bandpo's name (``delta must ...``); the method's message
    names the setting as the caller's config spells it (TRL: ``band_delta``, or the ``clip_rule_kwargs`` entry)."""
    with pytest.raises(ValueError, match=message) as err:
        clip_method(settings, TRL_NAMES, where="clip rule configuration")
    assert "\n" not in str(err.value)


@pytest.mark.parametrize(
    ("rule", "settings", "message"),
    [
        (
            "grpo",
            {"clip_ratio_low": 1.5},
            r": clip_ratio_low must be a finite number in \[0\.0, 1\.0\], got 1\.5$",
        ),
        ("dppo_kl", {"clip_ratio_low": 5000.0}, r": clip_ratio_low must be a finite number in \(0, 1000\]"),
        ("band", {"policy_loss.delta": -1}, r": policy_loss\.delta must be a finite number > 0, got -1$"),
    ],
)
def test_lenient_rule_parameter_errors_name_the_callers_spelling(
    rule: str, settings: dict, message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        clip_method(settings, VERL_LIKE, where="x", strict=False, rule=rule)


def test_a_rule_setting_of_none_is_refused_not_band_by_default() -> None:
    """``clip_rule=None`` selected Band at its defaults; a rule given by the caller (verl, SkyRL) still works."""
    with pytest.raises(
        ValueError, match=r"^clip_rule must be a registered clip rule name, got None; valid names: grpo"
    ):
        clip_method({"clip_rule": None, "band_delta": 0.1}, TRL_NAMES, where="x")
    assert clip_method({"clip_rule": None}, TRL_NAMES, where="x", rule="grpo").rule == "grpo"
    assert clip_method({"band_delta": 0.1}, TRL_NAMES, where="x").rule == "band"  # absent: Band


def test_a_cap_error_offers_none_where_the_spelling_reads_it_as_no_cap() -> None:
    """verl's and SkyRL's ``cap: null`` is no cap, so their message offers it; TRL's ``band_cap`` does not."""
    with pytest.raises(
        ValueError, match=r": policy_loss.cap must be a finite number >= 1 \(or None for no cap\), got 0\.5$"
    ):
        clip_method({"policy_loss.cap": 0.5}, VERL_LIKE, where="x", strict=False, rule="band")
    with pytest.raises(ValueError, match=r"band_cap=None keeps the rule's default"):
        clip_method({"band_cap": 0.5}, TRL_NAMES, where="x")


def test_lenient_translation_applies_each_setting_where_the_rule_has_it() -> None:
    """verl's and SkyRL's mode: a setting applies to the rules with that parameter, one spelling may give several
    parameters, ``None`` passes where the rule takes it (Band's cap) and leaves the default elsewhere (DCPO's)."""
    settings = {"policy_loss.delta": 0.1, "policy_loss.cap": None, "clip_ratio_low": 0.1}

    def rule(name: str) -> object:
        return clip_method(settings, VERL_LIKE, where="x", strict=False, rule=name).clip_rule

    assert rule("band") == make_clip_rule("band", delta=0.1, cap=None)
    assert rule("dcpo") == make_clip_rule("dcpo", eps_low=0.1)  # cap 10 kept
    assert rule("grpo") == make_clip_rule("grpo", eps_low=0.1)
    assert rule("dppo_tv") == make_clip_rule("dppo_tv", clip_divergence_low=0.1)
    replaced = clip_method(settings, VERL_LIKE, where="x", strict=False, params={"delta": 0.3})
    assert replaced.clip_rule.delta == 0.3
    with pytest.raises(
        ValueError, match=r"policy_loss\.delta_end must be set .* policy_loss\.delta_schedule="
    ):
        clip_method({**settings, "policy_loss.delta_schedule": "linear"}, VERL_LIKE, where="x", strict=False)


def test_loss_names() -> None:
    names = loss_names()
    assert names["bandpo"] == "band" and "bandpo_band" not in names
    assert {rule for rule in CLIP_RULES.names() if not CLIP_RULES.get(rule).needs_entropy} == set(
        names.values()
    )


def test_losses_import_no_framework() -> None:
    code = "import sys, bandpo.losses.method; print(sorted({'trl', 'verl', 'skyrl', 'transformers'} & set(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


@pytest.mark.parametrize(
    "annotation",
    [
        Optional[float],  # noqa: UP045 (the spelling a user may write)
        "Optional[float]",
        "float | None",
        float | None,
    ],
)
def test_a_users_rule_takes_none_where_its_annotation_allows_it(annotation: object) -> None:
    """verl's and SkyRL's ``null`` reaches a parameter annotated ``Optional[float]`` (typing's object or its text
    under ``from __future__ import annotations``) as well as ``float | None``; a parameter that is not optional keeps
    its default."""

    def bounds(self: ClipRule, old_log_prob: Tensor, entropy: Tensor | None = None) -> tuple[Tensor, Tensor]:
        return torch.zeros_like(old_log_prob), torch.ones_like(old_log_prob)

    cls = dataclasses.make_dataclass(
        "CappedRule",
        [("cap", annotation, 10.0), ("eps", float, 0.2)],
        bases=(ClipRule,),
        namespace={"bounds": bounds, "__module__": __name__},
        frozen=True,
    )
    register_clip_rule("capped_test_rule")(cls)
    try:
        names = {"policy_loss.cap": "cap", "policy_loss.eps": "eps"}
        settings = {"policy_loss.cap": None, "policy_loss.eps": None}
        got = clip_method(settings, names, where="x", strict=False, rule="capped_test_rule").clip_rule
        assert got.cap is None and got.eps == 0.2
    finally:
        CLIP_RULES.unregister("capped_test_rule")
