"""Tests for ``bandpo_lab.training.methods``: the one registry of method names (clip rules + TRL-native methods), the
config keys that select a method (``method:`` / ``clip_rule:``, switching in layers), the GRPOConfig fields a
TRL-native method sets, the trainer ``train`` builds for each kind, and the errors for bad input (config time).
A tiny end-to-end run of each TRL-native method is marked slow."""

from __future__ import annotations

from pathlib import Path

import pytest

from helpers import CONFIGS
from helpers.tiny import SMALL_RUN, save_countdown_model_dir

pytest.importorskip("trl")

from trl import GRPOConfig, GRPOTrainer

from bandpo.integrations.trl import BandPOConfig, BandPOTrainer
from bandpo.losses import CLIP_RULES, FixedClip
from bandpo_lab.training import run as run_module
from bandpo_lab.training.config import ConfigError, load_train_config
from bandpo_lab.training.methods import METHODS, TRL_METHODS, ClipRuleMethod, TrlNativeMethod
from bandpo_lab.training.run import prepare, train

TINY = CONFIGS / "tiny.yaml"


def out_dir(tmp_path: Path) -> list[str]:
    return [f"output_dir={tmp_path / 'out'}", "report_to=none"]


# ------------------------------------------------------------------------------------------------ the registry
def test_names_are_the_clip_rules_then_the_trl_native_methods(monkeypatch: pytest.MonkeyPatch) -> None:
    assert METHODS.names() == [*CLIP_RULES.names(), "cispo", "sapo", "gspo"]
    assert {"dppo_tv", "dppo_kl", "band", "grpo"} <= set(METHODS.clip_rule_names())
    # the clip rules are read from CLIP_RULES at each lookup, not copied: a rule registered later is a method
    monkeypatch.setitem(CLIP_RULES._items, "late_rule", FixedClip)
    assert "late_rule" in METHODS.names() and METHODS.get("late_rule") == ClipRuleMethod("late_rule")


@pytest.mark.parametrize(
    ("name", "config_class", "trainer_class"),
    [
        ("band", BandPOConfig, BandPOTrainer),
        ("grpo", BandPOConfig, BandPOTrainer),
        ("dppo_kl", BandPOConfig, BandPOTrainer),
        ("cispo", GRPOConfig, GRPOTrainer),
        ("sapo", GRPOConfig, GRPOTrainer),
        ("gspo", GRPOConfig, GRPOTrainer),
    ],
)
def test_lookup_dispatches_on_the_kind(name: str, config_class: type, trainer_class: type) -> None:
    method = METHODS.get(name)
    assert method.name == name
    assert method.config_class() is config_class and method.trainer_class() is trainer_class
    assert isinstance(method, TrlNativeMethod) == (name in TRL_METHODS)


def test_a_name_in_both_registries_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(CLIP_RULES._items, "cispo", FixedClip)
    with pytest.raises(ValueError, match=r"'cispo' is registered both as a clip rule and as a TRL-native"):
        METHODS.get("cispo")


# --------------------------------------------------------------------------------- selecting and switching
def test_method_over_a_band_recipe_drops_the_rule_and_the_fields_the_method_owns() -> None:
    config = load_train_config(TINY, ["method=cispo"])
    assert config.method == "cispo"
    for key in ("clip_rule", "band_divergence", "band_delta", "band_cap", "loss_type"):
        assert key not in config.trainer, key  # tiny.yaml's Band settings and its loss_type: grpo
    assert config.trainer["beta"] == 0.1 and config.trainer["num_generations"] == 8  # the recipe stays
    assert config.to_dict()["method"] == "cispo"
    assert load_train_config(TINY).to_dict().get("method") is None  # clip-rule configs are written as before
    # back to a clip rule: the method goes, the rule starts from its defaults
    back = config.with_overrides(["clip_rule=grpo"])
    assert back.method is None and back.trainer["clip_rule"] == "grpo" and "band_delta" not in back.trainer
    # method: NAME of a clip rule is clip_rule: NAME
    same = load_train_config(TINY, ["method=band"])
    assert same.method is None and same.trainer["clip_rule"] == "band" and same.trainer["band_delta"] == 0.05
    assert load_train_config(TINY, ["method=grpo"]).trainer["clip_rule"] == "grpo"


def test_a_derived_file_selects_a_trl_native_method(tmp_path: Path) -> None:
    path = tmp_path / "gspo.yaml"
    path.write_text(f"base: {TINY}\nmethod: gspo\nepsilon_high: 5.0e-4\n")
    config = load_train_config(path)
    assert config.method == "gspo" and config.trainer["epsilon_high"] == 5e-4
    # gspo's settings reset on a switch
    assert load_train_config(path, ["method=sapo"]).trainer.get("epsilon_high") is None


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        (["method=cispo"], {"loss_type": "cispo", "importance_sampling_level": "token", "epsilon_high": 5.0}),
        (["method=cispo", "epsilon_high=4"], {"loss_type": "cispo", "epsilon_high": 4.0}),
        (
            ["method=sapo"],
            {"loss_type": "sapo", "sapo_temperature_pos": 1.0, "sapo_temperature_neg": 1.05},
        ),
        (["method=sapo", "sapo_temperature_neg=2"], {"sapo_temperature_neg": 2.0}),
        (
            ["method=gspo"],
            {
                "importance_sampling_level": "sequence",
                "loss_type": "grpo",
                "epsilon": 3e-4,
                "epsilon_high": 4e-4,
            },
        ),
        (["method=gspo", "loss_type=grpo"], {"loss_type": "grpo"}),  # repeating what the method sets is fine
    ],
)
def test_trl_native_methods_build_grpo_config_with_their_fields(
    tmp_path: Path, overrides: list[str], expected: dict[str, object]
) -> None:
    prepared = prepare(load_train_config(TINY, [*out_dir(tmp_path), *overrides]))
    args = prepared.args
    assert type(args) is GRPOConfig and not isinstance(args, BandPOConfig)
    assert prepared.method.trainer_class() is GRPOTrainer
    for key, value in expected.items():
        assert getattr(args, key) == value, key
    # the rest of the recipe is tiny.yaml's
    recipe = (args.beta, args.learning_rate, args.num_generations, args.steps_per_generation)
    assert recipe == (0.1, 5e-4, 8, 4)


def test_clip_rules_still_build_bandpo_config(tmp_path: Path) -> None:
    prepared = prepare(load_train_config(TINY, [*out_dir(tmp_path), "clip_rule=dppo_kl"]))
    assert type(prepared.args) is BandPOConfig and prepared.method == ClipRuleMethod("dppo_kl")
    assert prepared.args.build_clip_rule().name == "dppo_kl"


def test_train_builds_the_trainer_of_the_method(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``train`` dispatches through the method: plain GRPOTrainer for a TRL-native method, BandPOTrainer for a rule
    (stopped where the trainer would be constructed; no model is loaded)."""
    model_dir = save_countdown_model_dir(tmp_path / "model")
    built: list[type] = []

    class Stop(Exception):
        pass

    real = run_module._trainer_class

    def record(base: type) -> type:
        built.append(real(base))
        raise Stop

    monkeypatch.setattr(run_module, "_trainer_class", record)
    for name in ("cispo", "band"):
        config = load_train_config(
            TINY,
            [f"method={name}", f"model.path={model_dir}", f"output_dir={tmp_path / name}", "report_to=none"],
        )
        with pytest.raises(Stop):
            train(config)
    cispo, band = built
    assert issubclass(cispo, GRPOTrainer) and not issubclass(cispo, BandPOTrainer)
    assert issubclass(band, BandPOTrainer)
    text = (tmp_path / "cispo" / "train_config.yaml").read_text()
    assert text.startswith("method: cispo\n") and "clip_rule" not in text


# ------------------------------------------------------------------------------------------------ bad input
@pytest.mark.parametrize(
    ("overrides", "match"),
    [
        (
            ["method=cipso"],
            r"method \(from the overrides\): unknown method 'cipso' \(did you mean 'cispo'\?\); clip rules: grpo, "
            r".*dppo_kl.*; TRL-native methods: cispo, sapo, gspo",
        ),
        (
            ["clip_rule=bandd"],
            r"unknown clip rule 'bandd' \(did you mean 'band'\?\); valid names: grpo, clip_higher, dcpo, band.*"
            r"TRL-native methods \(method: NAME\): cispo, sapo, gspo",
        ),
        (["clip_rule=cispo"], r"clip_rule='cispo' .* is TRL's CISPO .*a TRL-native method.*method: cispo"),
        (
            ["loss_type=cispo"],
            r"loss_type='cispo' .*cannot be used with a clip rule: select it with method: cispo",
        ),
        (["loss_type=sapo"], r"select it with method: sapo"),
        (
            ["loss_type=cipso"],
            r"unknown loss_type 'cipso' \(from the overrides\) \(did you mean 'cispo'\?\); TRL 1.16 loss types: "
            r"grpo, bnpo, dr_grpo, dapo, cispo, sapo",
        ),
        (["loss_type=vespo"], r"loss_type='vespo'.*cannot be used with a clip rule: .*Gamma"),
        (["importance_sampling_level=sequence"], r"importance_sampling_level='sequence'.*set method: gspo"),
        # a TRL-native method with clip-rule fields
        (
            ["method=cispo", "band_delta=0.1"],
            r"band_delta=0.1 \(from the overrides\) is a clip-rule setting, but method='cispo' is TRL-native .*"
            r"remove band_delta, or choose a clip rule \(grpo, ",
        ),
        (
            ["method=sapo", "clip_rule_kwargs.delta=0.1"],
            r"clip_rule_kwargs=\{'delta': 0.1\}.* is a clip-rule",
        ),
        (["method=gspo", "clip_rule=band"], r"method='band'|clip_rule='band'"),
        # a field the method sets, with another value; one its loss ignores
        (
            ["method=cispo", "loss_type=dapo"],
            r"loss_type='dapo' \(from the overrides\) conflicts with method='cispo', which sets loss_type='cispo'",
        ),
        (["method=sapo", "importance_sampling_level=sequence"], r"conflicts with method='sapo'"),
        (
            ["method=sapo", "epsilon_high=0.3"],
            r"epsilon_high=0.3 .* has no effect with method='sapo'.*its parameters: sapo_temperature_pos",
        ),
        (["method=cispo", "epsilon=0.1"], r"epsilon=0.1 .* has no effect with method='cispo'"),
        # thresholds out of range
        (
            ["method=cispo", "epsilon_high=0.5"],
            r"epsilon_high \(from the overrides\) must be a finite number >= 1 for method 'cispo'.*got 0.5",
        ),
        (
            ["method=gspo", "epsilon=0"],
            r"epsilon .*must be a finite number in \(0, 1\) for method 'gspo'.*got 0",
        ),
        (["method=gspo", "epsilon=1.5"], r"must be a finite number in \(0, 1\)"),
        (["method=gspo", "epsilon_high=-1"], r"epsilon_high .*must be a finite number > 0 for method 'gspo'"),
        (["method=sapo", "sapo_temperature_pos=0"], r"sapo_temperature_pos .*must be a finite number > 0"),
        (["method=sapo", "sapo_temperature_neg=inf"], r"sapo_temperature_neg .*must be a finite number > 0"),
    ],
)
def test_bad_input_is_one_clear_error_at_config_time(overrides: list[str], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        load_train_config(TINY, overrides)


def test_method_and_clip_rule_in_one_layer_must_agree(tmp_path: Path) -> None:
    path = tmp_path / "both.yaml"
    path.write_text(f"base: {TINY}\nmethod: grpo\nclip_rule: band\n")
    with pytest.raises(
        ConfigError, match=r"method='grpo' \(in .*both.yaml:2\) and clip_rule='band'.*set one"
    ):
        load_train_config(path)
    path.write_text(f"base: {TINY}\nmethod: [cispo]\n")
    with pytest.raises(
        ConfigError, match=r"method \(in .*both.yaml:2\) must be a method name \(grpo, .*gspo\)"
    ):
        load_train_config(path)


# ------------------------------------------------------------------------------------------------ end to end
@pytest.mark.slow
@pytest.mark.parametrize("name", ["cispo", "sapo", "gspo"])
def test_trl_native_method_trains_with_trls_metrics_and_not_ours(
    name: str, tmp_path: Path, warm_model_dir: Path
) -> None:
    import torch
    from safetensors.torch import load_file

    from bandpo_lab.training.callbacks import read_metrics

    config = load_train_config(
        TINY,
        [
            f"method={name}",
            f"model.path={warm_model_dir}",
            f"output_dir={tmp_path / 'out'}",
            "activation_checkpointing=false",
            *SMALL_RUN,
            "max_steps=2",
            "report_to=none",
        ],
    )
    out = train(config)
    rows = [r for r in read_metrics(out) if "loss" in r]
    assert [r["step"] for r in rows] == [1, 2]
    first = rows[0]
    # TRL's metrics, and our reward-failure counter
    assert "entropy" in first and "rewards/countdown/failures" in first
    assert not [k for r in rows for k in r if k.startswith(("clip/", "band/", "policy/"))], "our hook ran"
    trl_clip = {"cispo": "cispo_clip_ratio", "sapo": None, "gspo": "clip_ratio/region_mean"}[name]
    if trl_clip:
        assert trl_clip in first
    before = load_file(warm_model_dir / "model.safetensors")
    after = load_file(out / "model.safetensors")
    assert any(not torch.equal(before[k], after[k]) for k in before), "no parameter changed"
