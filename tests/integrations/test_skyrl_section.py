"""bandpo.integrations.skyrl_section against the real SkyRL 0.4.0 (``make test-skyrl``, Python 3.12): the
``trainer.algorithm.bandpo`` section and the algorithm config, checked at construction in one line, SkyRL's own
check of the loss name with bandpo's note, the documented recipe, the radius schedule's settings. Skipped on
Python 3.11 (SkyRL needs 3.12)."""

from __future__ import annotations

import pytest

import bandpo.integrations.skyrl as bskyrl
from bandpo.losses.clip_rules import make_clip_rule
from helpers import REPO
from helpers.skyrl import algorithm, needs_skyrl

# ---- config: checked at construction -----------------------------------------------------------------------------


@needs_skyrl
def test_config_defaults_select_band_and_build_from_cli() -> None:
    cfg = bskyrl.BandPOSkyRLConfig.from_cli_overrides(
        ["trainer.algorithm.bandpo.delta=0.02", "trainer.algorithm.bandpo.divergence=chi2"]
    )
    alg = cfg.trainer.algorithm
    assert type(alg).__name__ == "BandPOAlgorithmConfig" and isinstance(alg, bskyrl.BandPOAlgorithmConfig)
    assert isinstance(alg.bandpo, bskyrl.BandPOLossConfig)
    assert alg.policy_loss_type == "bandpo"
    assert bskyrl.clip_rule_for("band", alg) == make_clip_rule("band", delta=0.02, divergence="chi2")
    from skyrl.train.config.config import AlgorithmConfig, SkyRLTrainConfig

    assert isinstance(alg, AlgorithmConfig) and isinstance(cfg, SkyRLTrainConfig)


@needs_skyrl
@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("bandpo.delta=-0.1", r"trainer\.algorithm\.bandpo.*delta must be a finite number > 0, got -0\.1"),
        ("bandpo.delta=abc", r"delta must be a finite number > 0, got 'abc'"),
        ("bandpo.divergence=kll", r"trainer\.algorithm\.bandpo.*unknown divergence 'kll'.*did you mean 'kl'"),
        ("bandpo.cap=0.5", r"cap must be a finite number >= 1 .*got 0\.5"),
        ("bandpo.method=fast", r"trainer\.algorithm\.bandpo.*'fast'"),
        ("bandpo.relax=maybe", r"trainer\.algorithm\.bandpo\.relax must be true or false, got 'maybe'"),
        (
            "bandpo.anchor=behaviour",
            r"trainer\.algorithm\.bandpo\.anchor must be one of old, rollout, got 'behaviour'",
        ),
        ("bandpo.rule_kwargs={eps: 0.1}", r"unknown parameter\(s\) 'eps' for clip rule 'band'"),
        (
            "bandpo.diagnostics=all",
            r"trainer\.algorithm\.bandpo\.diagnostics must be one of full, basic, none, got 'all'",
        ),
        (  # null is not "absent": the default would run without a word
            "bandpo.delta=null",
            r"^trainer\.algorithm\.bandpo\.delta must be set, got None \(leave the key out for its default, 0\.05\)$",
        ),
        (
            "bandpo.divergence=null",
            r"^trainer\.algorithm\.bandpo\.divergence must be set, got None .*'kl'\)$",
        ),
        ("bandpo.bogus=1", r"(Invalid fields \{'bogus'\} for BandPOLossConfig|unknown field)"),
        (
            "policy_loss_type=bandpo_dcpp",
            r"'bandpo_dcpp' is not one of bandpo's policy losses \(did you mean 'bandpo_dcpo'\?\)",
        ),
        ("policy_loss_type=bandpo_adaptive_band", r"'adaptive_band' needs the per-token entropy"),
        ("clip_ratio_c=1.0", r"trainer\.algorithm\.clip_ratio_c must be a number > 1 .*got 1\.0"),
        (
            "eps_clip_low=1.5",
            r"trainer\.algorithm\.eps_clip_low must be a finite number in \[0\.0, 1\.0\], got 1\.5",
        ),
    ],
)
def test_bad_config_is_refused_at_construction_in_one_line(override: str, message: str) -> None:
    args = [f"trainer.algorithm.{override}"]
    if override.startswith("eps_clip_low"):
        args.append("trainer.algorithm.policy_loss_type=bandpo_grpo")
    with pytest.raises(ValueError, match=message) as info:
        bskyrl.BandPOSkyRLConfig.from_cli_overrides(args)
    assert "\n" not in str(info.value)


@needs_skyrl
def test_unknown_policy_loss_type_gets_skyrl_error_with_bandpo_names() -> None:
    """SkyRL's own check (validate_cfg) refuses an unknown name; when it looks meant as bandpo's, the error
    carries a note listing bandpo's names; for any other name it is SkyRL's error alone."""
    bskyrl.register()
    console = "trainer.logger=console"  # SkyRL's default logger, wandb, needs WANDB_API_KEY
    cfg = bskyrl.BandPOSkyRLConfig.from_cli_overrides([console, "trainer.algorithm.policy_loss_type=dcpo"])
    with pytest.raises(AssertionError, match=r"invalid policy_loss_type: dcpo\. Must be one of") as info:
        bskyrl.validate_config(cfg)
    notes = getattr(info.value, "__notes__", [])
    assert len(notes) == 1 and "did you mean 'bandpo_dcpo'?" in notes[0] and "bandpo_dppo_tv" in notes[0]
    assert "bandpo_dcpo" in str(info.value)  # SkyRL's list of registered names holds ours too

    other = bskyrl.BandPOSkyRLConfig.from_cli_overrides(
        [console, "trainer.algorithm.policy_loss_type=mystery"]
    )
    with pytest.raises(AssertionError, match=r"invalid policy_loss_type: mystery") as info:
        bskyrl.validate_config(other)
    assert not getattr(info.value, "__notes__", [])


def _docs_recipe() -> list[str]:
    """The overrides of docs/skyrl.md's recipe (the first bash block under "The authors' recipe")."""
    text = (REPO / "docs" / "skyrl.md").read_text()
    section = text.split("\n## The authors' recipe\n", 1)[1].split("\n## ", 1)[0]
    block = section.split("```bash", 1)[1].split("```", 1)[0]
    return [
        tok
        for tok in block.split()
        if "=" in tok and tok.split("=", 1)[0].startswith(("trainer.", "generator."))
    ]


@needs_skyrl
def test_docs_recipe_builds_and_validates() -> None:
    """docs/skyrl.md's recipe in SkyRL's names is a config SkyRL accepts (every key exists, validate_cfg passes)."""
    args = _docs_recipe()
    assert "trainer.override_entrypoint=bandpo.integrations.skyrl" in args and len(args) > 15
    bskyrl.register()
    cfg = bskyrl.BandPOSkyRLConfig.from_cli_overrides(
        [a for a in args if not a.startswith("trainer.override_entrypoint=")] + ["trainer.logger=console"]
    )
    bskyrl.validate_config(cfg)
    alg = cfg.trainer.algorithm
    assert (alg.policy_loss_type, alg.bandpo.delta, alg.clip_ratio_c) == ("bandpo", 0.05, 10)
    assert cfg.generator.n_samples_per_prompt == 16 and cfg.trainer.train_batch_size == 256


# ---- the radius schedule -------------------------------------------------------------------------------------


@needs_skyrl
@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["bandpo.delta_schedule=linear"], r"trainer\.algorithm\.bandpo\.delta_end must be set"),
        (
            ["bandpo.delta_schedule=exponential", "bandpo.delta_end=0.02"],
            r"delta_schedule: unknown radius schedule 'exponential'",
        ),
        (
            ["bandpo.delta_schedule=linear", "bandpo.delta_end=-0.02"],
            r"bandpo\.delta_end must be a finite number > 0, got -0\.02",
        ),
        (
            ["bandpo.delta_schedule=linear", "bandpo.delta_end=0.02", "bandpo.delta=0"],
            r"delta must be a finite number > 0, got 0",
        ),
        (
            ["bandpo.delta_schedule=hold_then_linear", "bandpo.delta_end=0.02", "bandpo.delta_hold_frac=1.0"],
            r"bandpo\.delta_hold_frac must be a finite number in \[0, 1\), got 1\.0",
        ),
        (
            ["policy_loss_type=bandpo_dcpo", "bandpo.delta_schedule=cosine", "bandpo.delta_end=0.02"],
            r"clip rule dcpo\(.*\) has no delta parameter",
        ),
    ],
)
def test_bad_radius_schedule_is_refused_at_construction(overrides: list[str], message: str) -> None:
    with pytest.raises(ValueError, match=message) as info:
        bskyrl.BandPOSkyRLConfig.from_cli_overrides([f"trainer.algorithm.{o}" for o in overrides])
    assert "\n" not in str(info.value)


@needs_skyrl
def test_increasing_radius_schedule_is_allowed() -> None:
    alg = algorithm(**{"bandpo.delta": 0.02, "bandpo.delta_schedule": "linear", "bandpo.delta_end": 0.2})
    assert bskyrl.schedule_for("band", alg, 10).value(10) == 0.2
