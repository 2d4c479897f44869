"""Tests for ``bandpo.integrations.trl``'s version pin, its import without TRL, the suite's warning filters, and
``BandPOConfig``: defaults, shortcuts, the command line, errors, and when clipping can bind (no model needed)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("trl")

from bandpo.integrations import trl as bandpo_trl
from bandpo.integrations.trl import BandPOConfig, check_trl_version
from bandpo.losses import AdaptiveBandClip, BandClip, FixedClip

# ----------------------------------------------------------------------------------------------------------------
# Version pin


def test_supported_trl_version_passes() -> None:
    check_trl_version()
    check_trl_version("1.16.0")
    check_trl_version("1.16.7")


@pytest.mark.parametrize("version", ["1.15.2", "1.17.0", "2.0.0", "unknown"])
def test_unsupported_trl_version_is_refused(version: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(bandpo_trl.ALLOW_UNSUPPORTED_TRL_ENV, raising=False)
    with pytest.raises(ImportError, match=rf"supports trl>=1\.16,<1\.17, found trl {version}"):
        check_trl_version(version)
    monkeypatch.setenv(bandpo_trl.ALLOW_UNSUPPORTED_TRL_ENV, "1")
    with pytest.warns(UserWarning, match="supports trl"):
        check_trl_version(version)


def test_warning_filters_name_what_they_hide(pytestconfig: pytest.Config) -> None:
    """The suite hides only named warnings: a blanket ``ignore::DeprecationWarning`` would hide exactly what an
    adapter over TRL internals needs to see (a TRL or transformers API it uses going away)."""
    for entry in pytestconfig.getini("filterwarnings"):
        action, message = [*entry.split(":", 2), ""][:2]
        if action == "ignore":
            assert message, f"filterwarnings entry {entry!r} ignores a whole category; name the message"


def test_bandpo_imports_without_trl() -> None:
    code = textwrap.dedent(
        """
        import sys
        sys.modules["trl"] = None  # makes `import trl` fail
        import bandpo, bandpo.integrations
        assert "trl" not in dir(bandpo.integrations)
        try:
            import bandpo.integrations.trl
        except ImportError as err:
            assert "pip install" in str(err), err
        else:
            raise AssertionError("bandpo.integrations.trl imported without trl")
        """
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


# ----------------------------------------------------------------------------------------------------------------
# Config


def test_config_default_is_band(tmp_path: Path) -> None:
    args = BandPOConfig(output_dir=str(tmp_path), report_to="none", use_cpu=True)
    rule = args.build_clip_rule()
    assert isinstance(rule, BandClip)
    assert (rule.divergence, rule.delta, rule.cap, rule.relax) == ("kl", 0.05, 10.0, None)


def test_config_shortcuts_and_kwargs(tmp_path: Path) -> None:
    args = BandPOConfig(
        output_dir=str(tmp_path),
        report_to="none",
        use_cpu=True,
        band_divergence="tv",
        band_delta=0.1,
        band_cap=5.0,
        band_relax=[0.2, 0.28],
    )
    rule = args.build_clip_rule()
    assert (rule.divergence, rule.delta, rule.cap, rule.relax) == ("tv", 0.1, 5.0, (0.2, 0.28))

    args = BandPOConfig(
        output_dir=str(tmp_path),
        report_to="none",
        use_cpu=True,
        clip_rule="adaptive_band",
        clip_rule_kwargs='{"power": 1.0, "cap": null}',  # the command line passes JSON
        band_delta=0.02,
    )
    rule = args.build_clip_rule()
    assert isinstance(rule, AdaptiveBandClip)
    assert (rule.power, rule.cap, rule.delta) == (1.0, None, 0.02)
    assert args.clip_rule_kwargs == {"power": 1.0, "cap": None}

    args = BandPOConfig(
        output_dir=str(tmp_path),
        report_to="none",
        use_cpu=True,
        clip_rule="grpo",
        clip_rule_kwargs={"eps_low": 0.2, "eps_high": 0.28},
    )
    assert args.build_clip_rule() == FixedClip(eps_low=0.2, eps_high=0.28)


def test_config_from_command_line(tmp_path: Path) -> None:
    from transformers import HfArgumentParser

    (args,) = HfArgumentParser(BandPOConfig).parse_args_into_dataclasses(
        [
            "--output_dir",
            str(tmp_path),
            "--report_to",
            "none",
            "--use_cpu",
            "--clip_rule",
            "band",
            "--band_delta",
            "0.1",
            "--band_relax",
            "0.2",
            "0.28",
            "--clip_rule_kwargs",
            '{"divergence": "chi2"}',
        ]
    )
    rule = args.build_clip_rule()
    assert (rule.divergence, rule.delta, rule.relax) == ("chi2", 0.1, (0.2, 0.28))


@pytest.mark.parametrize(
    ("overrides", "match"),
    [
        ({"clip_rule": "bandd"}, r"unknown clip rule 'bandd'.*valid names: grpo, clip_higher, dcpo, band"),
        ({"clip_rule": None}, r"^clip_rule must be a registered clip rule name, got None; valid names: grpo"),
        ({"band_delta": -0.1}, r"\): band_delta must be a finite number > 0, got -0\.1$"),
        ({"band_divergence": "nope"}, r"\): band_divergence: unknown divergence 'nope'.*valid names"),
        (  # TV <= 1: from radius 1 on the bounds are the whole simplex [0, 1/p] and nothing is clipped
            {"band_divergence": "tv", "band_delta": 5},
            r"\): band_delta must be a finite number in \(0, 1\) for divergence 'tv' \(it is at most 1: .* nothing is "
            r"clipped\), got 5$",
        ),
        (  # band_cap=None keeps the default cap: the message names where None means no cap
            {"band_cap": 0.5},
            r"\): band_cap must be a finite number >= 1 \(band_cap=None keeps the rule's default; no cap: "
            r"clip_rule_kwargs=\{'cap': None\}\), got 0\.5$",
        ),
        ({"band_relax": [0.2]}, r"\): band_relax must be None or a pair"),
        (
            {"clip_rule": "grpo", "clip_rule_kwargs": {"eps_low": 1.5}},
            r"\): clip_rule_kwargs\['eps_low'\] must be a finite number in \[0\.0, 1\.0\], got 1\.5$",
        ),
        (
            {"clip_rule": "grpo", "band_delta": 0.1},
            r"band_delta=0\.1 does not apply to clip_rule='grpo'.*eps_low",
        ),
        (
            {"band_delta": 0.1, "clip_rule_kwargs": {"delta": 0.2}},
            r"band_delta=0\.1 and clip_rule_kwargs\['delta'\]=0\.2 both set",
        ),
        (
            {"clip_rule_kwargs": {"detla": 0.1}},
            r"clip_rule_kwargs: unknown parameter\(s\) 'detla'.*valid: divergence, delta",
        ),
        ({"clip_rule_kwargs": "{delta: 0.1}"}, r"clip_rule_kwargs must be a dict or a JSON object string"),
        (
            {"clip_rule_kwargs": [0.1]},
            r"clip_rule_kwargs must be a dict or a JSON object string, got \[0\.1\]",
        ),
        (
            {"importance_sampling_level": "sequence"},
            r"importance_sampling_level='sequence' is not supported.*'token'",
        ),
        (
            {"loss_type": "cispo"},
            r"loss_type='cispo' cannot be used.*absolute cap.*With a clip rule: grpo, bnpo, dr_grpo, dapo",
        ),
        ({"loss_type": "sapo"}, r"loss_type='sapo' cannot be used.*soft sigmoid gate"),
        ({"loss_type": "vespo"}, r"loss_type='vespo' cannot be used.*Gamma"),
        ({"loss_type": "luspo"}, r"loss_type='luspo' cannot be used.*sequence-level"),
        (
            {"loss_type": "not_a_loss"},
            r"unknown loss_type 'not_a_loss'; TRL 1\.16 loss types: grpo, bnpo, dr_grpo, dapo, cispo",
        ),
        ({"epsilon": 0.3}, r"epsilon=0\.3 / epsilon_high=None are TRL's fixed clip range"),
        ({"epsilon_high": 0.28}, r"epsilon_high=0\.28 are TRL's fixed clip range.*clip_rule='grpo'"),
        ({"diagnostics": "all"}, r"diagnostics must be one of full, basic, none, got 'all'"),
    ],
)
def test_config_errors(tmp_path: Path, overrides: dict[str, Any], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        BandPOConfig(output_dir=str(tmp_path), report_to="none", use_cpu=True, **overrides)


@pytest.mark.parametrize("rule", ["band", "adaptive_band"])
@pytest.mark.parametrize("delta", [-1.0, 0.1, 1.0, float("nan")])
def test_trl_delta_at_or_below_one_is_refused_next_to_a_band_rule(
    tmp_path: Path, rule: str, delta: float
) -> None:
    """TRL's own ``delta`` (its two-sided clamp) at or below 1 next to a rule with a radius is Band's radius under
    TRL's name: ``BandPOConfig`` refuses it in one line naming ``band_delta``; an upper clamp > 1 stays. Rules
    without a radius refuse it too (TRL does not check it), with the other message."""
    kwargs: dict[str, Any] = dict(output_dir=str(tmp_path), report_to="none", use_cpu=True, clip_rule=rule)
    with pytest.raises(
        ValueError, match=r"^delta=.* is TRL's two-sided clamp.*takes its radius from band_delta"
    ) as err:
        BandPOConfig(**kwargs, delta=delta)
    assert "\n" not in str(err.value)
    assert BandPOConfig(**kwargs, delta=10.0).delta == 10.0
    with pytest.raises(
        ValueError, match=r"^delta=.* is TRL's two-sided clamp.*: it must be a finite number > 1"
    ):
        BandPOConfig(**{**kwargs, "clip_rule": "grpo"}, delta=delta)
    assert BandPOConfig(**{**kwargs, "clip_rule": "grpo"}, delta=1.5).delta == 1.5


@pytest.mark.parametrize(
    ("settings", "delta", "largest"),
    [
        ({"clip_rule": "band"}, 3.0, "10"),  # SkyRL's and verl's clip_ratio_c, under Band's cap
        ({"clip_rule": "band", "clip_rule_kwargs": {"cap": None}}, 10.0, "unbounded: the rule has no cap"),
        ({"clip_rule": "dcpo"}, 9.0, "10"),
        ({"clip_rule": "adaptive_band"}, 5.0, "10"),
        ({"clip_rule": "clip_higher"}, 1.25, "1.28"),
        ({"clip_rule": "band_lower"}, 1.1, "1.2"),
    ],
)
def test_trl_delta_below_the_rules_largest_upper_bound_is_refused(
    tmp_path: Path, settings: dict[str, Any], delta: float, largest: str
) -> None:
    """TRL clamps every token's ratio at its ``delta`` before the clip, whatever the advantage's sign: a dual clip
    only at or above the rule's largest upper bound. ``delta: 3`` beside Band (cap 10) took the gradient of rare
    tokens with a positive advantage inside Band's region, where bandpo.policy_loss (verl, SkyRL) keeps it."""
    kwargs: dict[str, Any] = dict(output_dir=str(tmp_path), report_to="none", use_cpu=True, **settings)
    with pytest.raises(ValueError, match=rf"^delta={delta!r} is TRL's clamp of every token's ratio") as err:
        BandPOConfig(**kwargs, delta=delta)
    assert f"below the largest upper bound of clip rule {settings['clip_rule']}(" in str(err.value)
    assert f"({largest}): tokens with a positive advantage would lose their gradient" in str(err.value)
    if largest[0].isdigit():
        assert BandPOConfig(**kwargs, delta=float(largest)).delta == float(
            largest
        )  # at the bound: a dual clip
    assert BandPOConfig(**kwargs).delta is None


@pytest.mark.parametrize("rule", ["dppo_tv", "dppo_kl"])
def test_trl_delta_is_refused_beside_dppos_truncated_objective(tmp_path: Path, rule: str) -> None:
    """DPPO has no dual clip: TRL's delta (the real-scale recipes' ``delta: 10``, kept on ``clip_rule=dppo_tv``) added
    one and cut its ratios; refused, and DPPO's own c stays ``truncation_c``."""
    kwargs: dict[str, Any] = dict(output_dir=str(tmp_path), report_to="none", use_cpu=True, clip_rule=rule)
    with pytest.raises(
        ValueError, match=rf"clip rule '{rule}' has no dual clip .*truncation_c=20.*leave delta null"
    ):
        BandPOConfig(**kwargs, delta=10.0)
    assert BandPOConfig(**kwargs).delta is None


@pytest.mark.parametrize("loss_type", bandpo_trl.SUPPORTED_LOSS_TYPES)
def test_config_accepts_token_clip_loss_types(tmp_path: Path, loss_type: str) -> None:
    """The loss types that clip the token ratio (they differ only in aggregation) are accepted and kept as given,
    and the clip rule built beside each is still the default Band (KL, delta 0.05, cap 10)."""
    args = BandPOConfig(output_dir=str(tmp_path), report_to="none", use_cpu=True, loss_type=loss_type)
    assert args.loss_type == loss_type
    rule = args.build_clip_rule()
    assert isinstance(rule, BandClip)
    assert (rule.divergence, rule.delta, rule.cap, rule.relax) == ("kl", 0.05, 10.0, None)


@pytest.mark.parametrize(
    ("overrides", "can_bind"),
    [
        ({}, False),  # TRL's default: steps_per_generation = gradient_accumulation_steps, num_iterations = 1
        ({"gradient_accumulation_steps": 4}, False),
        ({"gradient_accumulation_steps": 4, "steps_per_generation": 2}, False),  # 2 generations per step
        ({"steps_per_generation": 4}, True),
        ({"num_iterations": 2}, True),
        ({"gradient_accumulation_steps": 2, "steps_per_generation": 4}, True),
    ],
)
def test_clipping_can_bind(tmp_path: Path, overrides: dict[str, Any], can_bind: bool) -> None:
    kwargs: dict[str, Any] = dict(output_dir=str(tmp_path), report_to="none", use_cpu=True, num_generations=2)
    args = BandPOConfig(**{**kwargs, **overrides})
    assert args.clipping_can_bind is can_bind


def test_the_on_policy_note_says_what_the_ratio_is_with_vllms_importance_correction(tmp_path: Path) -> None:
    """With vLLM and its importance sampling correction (TRL's default) TRL computes old log-probs on every layout,
    so the ratio is 1 only up to rounding; the note said "exactly 1" and "never binds"."""
    kwargs: dict[str, Any] = dict(output_dir=str(tmp_path), report_to="none", use_cpu=True, num_generations=2)
    plain = BandPOConfig(**kwargs).on_policy_note()
    assert plain is not None and "is exactly 1" in plain and "never binds" in plain
    vllm = BandPOConfig(**kwargs, use_vllm=True).on_policy_note()
    assert vllm is not None and "differs from 1 only by the rounding of two forward passes" in vllm
    assert "exactly 1" not in vllm and "never binds" not in vllm
    no_correction = BandPOConfig(**kwargs, use_vllm=True, vllm_importance_sampling_correction=False)
    assert "is exactly 1" in (no_correction.on_policy_note() or "")
