"""bandpo.integrations.verl against a real verl (skipped without it): registration, config, loss, metrics.

Wiring: ``get_policy_loss_fn("bandpo" | "dcpo")`` called as verl calls it, with an ``ActorConfig`` built by verl's
own config machinery, gives ``bandpo.policy_loss``'s loss and gradients for every aggregation mode (both run
``per_token_policy_loss``). Independent reference: with a fixed clip rule the adapter reproduces verl's ``vanilla``
loss and metrics exactly.
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

verl = pytest.importorskip("verl", reason="verl is not installed (pip install '.[verl]' in bandpo's clone)")

from omegaconf import OmegaConf  # noqa: E402  (verl's dependency: importable once verl is)
from verl.trainer.ppo.core_algos import POLICY_LOSS_REGISTRY, get_policy_loss_fn  # noqa: E402
from verl.utils.config import omega_conf_to_dataclass  # noqa: E402
from verl.utils.metric import Metric  # noqa: E402

import bandpo  # noqa: E402
import bandpo.integrations  # noqa: E402
import bandpo.integrations.verl as bverl  # noqa: E402
import bandpo.integrations.verl_env as verl_env  # noqa: E402
from bandpo.losses.aggregation import aggregate  # noqa: E402
from bandpo.losses.clip_rules import FixedClip  # noqa: E402

pytestmark = pytest.mark.verl

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "verl" / "run_bandpo_qwen2.5_3b.sh"
TARGET = "bandpo.integrations.verl.BandPOPolicyLossConfig"
SHARED_AGG_MODES = ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm"]
VERL_METRICS = ("actor/pg_clipfrac", "actor/ppo_kl", "actor/pg_clipfrac_lower")
TOL = {"rtol": 1e-7, "atol": 1e-10}  # float64; verl's seq-mean-token-mean adds 1e-8 to token counts


def actor_config(
    loss_mode: str = "bandpo",
    *,
    target: str | None = TARGET,
    loss_agg_mode: str = "token-mean",
    clip_ratio_c: float = 10.0,
    clip_ratio_low: float = 0.2,
    clip_ratio_high: float = 0.2,
    **policy_loss: Any,
) -> Any:
    """A verl ``ActorConfig`` built as verl builds it: OmegaConf node with ``_target_`` -> hydra instantiate."""
    node: dict[str, Any] = {"loss_mode": loss_mode, **policy_loss}
    node["_target_"] = target or "verl.workers.config.PolicyLossConfig"
    cfg = OmegaConf.create(
        {
            "_target_": "verl.workers.config.ActorConfig",
            "strategy": "fsdp",
            "rollout_n": 4,
            "ppo_micro_batch_size_per_gpu": 2,
            "loss_agg_mode": loss_agg_mode,
            "clip_ratio_c": clip_ratio_c,
            "clip_ratio_low": clip_ratio_low,
            "clip_ratio_high": clip_ratio_high,
            "policy_loss": node,
        }
    )
    return omega_conf_to_dataclass(cfg)


def make_batch(
    batch: int = 6,
    length: int = 12,
    seed: int = 0,
    dtype: torch.dtype = torch.float64,
    pad_nan: bool = False,
    empty_row: bool = True,
) -> dict[str, torch.Tensor]:
    """Old/new log-probs spanning tail and head tokens, ratios far enough from 1 to clip both ways and trigger
    the dual clip, GRPO-style per-sequence advantages of both signs, ragged bool mask (row 1 empty with
    ``empty_row``)."""
    g = torch.Generator().manual_seed(seed)
    p_old = torch.rand(batch, length, generator=g, dtype=torch.float64) ** 2 * 0.98 + 0.01
    old = torch.log(p_old)
    new = (old + 0.8 * torch.randn(batch, length, generator=g, dtype=torch.float64)).clamp(max=-1e-4)
    adv = torch.randn(batch, 1, generator=g, dtype=torch.float64).expand(batch, length).clone()
    lengths = torch.randint(1, length + 1, (batch,), generator=g)
    lengths[0] = length
    if empty_row:
        lengths[1] = 0  # an empty row: verl's seq-mean modes do not count it locally, nor do ours
    mask = torch.arange(length).unsqueeze(0) < lengths.unsqueeze(1)  # (B, T) bool
    weights = torch.rand(batch, length, generator=g, dtype=torch.float64) + 0.5
    if pad_nan:
        old = torch.where(mask, old, torch.full_like(old, float("nan")))
        new = torch.where(mask, new, torch.full_like(new, float("nan")))
    return {
        "old_log_prob": old.to(dtype),
        "log_prob": new.to(dtype).requires_grad_(),
        "advantages": adv.to(dtype),
        "response_mask": mask,
        "rollout_is_weights": weights.to(dtype),
    }


def call_verl_style(fn: Any, data: dict[str, torch.Tensor], config: Any, weights: bool = True) -> Any:
    """Keyword call exactly as verl 0.9's ``ppo_loss`` makes it."""
    return fn(
        old_log_prob=data["old_log_prob"],
        log_prob=data["log_prob"],
        advantages=data["advantages"],
        response_mask=data["response_mask"],
        loss_agg_mode=config.loss_agg_mode,
        config=config,
        rollout_is_weights=data["rollout_is_weights"] if weights else None,
    )


def loss_and_grad(compute: Any, log_prob: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    log_prob.grad = None
    loss = compute()[0]
    (grad,) = torch.autograd.grad(loss, log_prob)
    return loss.detach(), grad


# ---- registration ---------------------------------------------------------------------------------------


def test_registry_holds_our_modes_after_import() -> None:
    for name, fn in bverl.LOSS_MODES.items():
        assert POLICY_LOSS_REGISTRY[name] is fn
        assert get_policy_loss_fn(name) is fn
    # every rule verl can run (no entropy-driven rule: verl passes a policy loss no entropy), named as in SkyRL
    assert set(bverl.LOSS_MODES) == {
        "bandpo",
        "dcpo",
        *(
            f"bandpo_{rule}"
            for rule in ("grpo", "clip_higher", "dcpo", "band_upper", "band_lower", "dppo_tv", "dppo_kl")
        ),
    }


def test_register_is_idempotent_and_keeps_foreign_names(monkeypatch: pytest.MonkeyPatch) -> None:
    assert bverl.register() == list(bverl.LOSS_MODES)
    assert bverl.register() == list(bverl.LOSS_MODES)

    def other_dcpo(**kwargs: Any) -> Any:
        raise AssertionError("not called")

    monkeypatch.setitem(POLICY_LOSS_REGISTRY, "dcpo", other_dcpo)
    monkeypatch.delitem(POLICY_LOSS_REGISTRY, "bandpo")
    with pytest.raises(ValueError, match=r"'dcpo' \(taken by .*other_dcpo\).*overwrite=True"):
        bverl.register()
    assert POLICY_LOSS_REGISTRY["bandpo"] is bverl.compute_policy_loss_bandpo  # the free name was registered
    assert POLICY_LOSS_REGISTRY["dcpo"] is other_dcpo
    assert bverl.register(overwrite=True) == list(bverl.LOSS_MODES)


def test_a_rule_registered_after_import_gets_its_mode_when_register_is_called_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``loss_names()`` promises a rule registered later; ``register()`` reads it at call time, so the rule's mode
    ``bandpo_<rule>`` builds a config and computes bandpo's loss with that rule."""

    @dataclasses.dataclass(frozen=True)
    class WideFixed(FixedClip):
        eps_low: float = 0.3
        eps_high: float = 0.5

    monkeypatch.setattr(bverl, "_MODE_RULES", dict(bverl._MODE_RULES))
    monkeypatch.setattr(bverl, "LOSS_MODES", dict(bverl.LOSS_MODES))
    monkeypatch.setitem(POLICY_LOSS_REGISTRY, "bandpo_wide_fixed_test", None)  # removed again afterwards
    bandpo.register_clip_rule("wide_fixed_test")(WideFixed)
    try:
        assert "bandpo_wide_fixed_test" in bverl.register()
        fn = POLICY_LOSS_REGISTRY["bandpo_wide_fixed_test"]
        assert fn is bverl.LOSS_MODES["bandpo_wide_fixed_test"]
        config = actor_config("bandpo_wide_fixed_test", clip_ratio_low=0.25, clip_ratio_high=0.4)
        rule = WideFixed(eps_low=0.25, eps_high=0.4)
        assert bverl.clip_method_from_config("bandpo_wide_fixed_test", config).clip_rule == rule
        data = make_batch(empty_row=False)
        got, _ = call_verl_style(fn, data, config, weights=False)
        want, _ = bandpo.policy_loss(
            data["log_prob"],
            data["old_log_prob"],
            data["advantages"],
            data["response_mask"],
            rule,
            loss_agg_mode="token-mean",
            clip_ratio_c=10.0,
        )
        torch.testing.assert_close(got, want, **TOL)
    finally:
        bandpo.losses.CLIP_RULES.unregister("wide_fixed_test")


_PROBE = (
    "import sys, verl\n"
    "from verl.trainer.ppo.core_algos import POLICY_LOSS_REGISTRY as R\n"
    "print(','.join(sorted(n for n in ('bandpo', 'dcpo') if n in R and R[n].__module__ == "
    "'bandpo.integrations.verl')))\n"
)


def test_import_verl_in_a_fresh_process_registers_through_the_entry_point() -> None:
    """As in a Ray worker: a new interpreter that only runs ``import verl`` (which loads the ``verl.plugins``
    entry points while verl itself is still being imported)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("VERL_USE_EXTERNAL")}
    result = subprocess.run(
        [sys.executable, "-c", _PROBE], env=env, capture_output=True, text=True, timeout=180, check=False
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip().splitlines()[-1] == "bandpo,dcpo"


def test_verl_use_external_modules_route_registers(monkeypatch: pytest.MonkeyPatch) -> None:
    """The route for verl 0.6-0.8: ``VERL_USE_EXTERNAL_MODULES=bandpo.integrations.verl`` makes ``import verl``
    call ``import_external_libs`` on it; replayed here on a fresh copy of the module (restored afterwards)."""
    from verl.utils.import_utils import import_external_libs

    monkeypatch.delitem(sys.modules, "bandpo.integrations.verl")
    monkeypatch.setattr(bandpo.integrations, "verl", bverl)  # the re-import rebinds it; undo restores ours
    for name in bverl.LOSS_MODES:
        monkeypatch.delitem(POLICY_LOSS_REGISTRY, name)
    import_external_libs(["bandpo.integrations.verl"])
    fresh = sys.modules["bandpo.integrations.verl"]
    assert fresh is not bverl
    assert POLICY_LOSS_REGISTRY["bandpo"] is fresh.compute_policy_loss_bandpo
    assert POLICY_LOSS_REGISTRY["dcpo"] is fresh.compute_policy_loss_dcpo


def _fake_trl(monkeypatch: pytest.MonkeyPatch, *, value_head_in: str | None) -> None:
    """Replace ``trl`` by a stub (version 1.16.0) that exports ``AutoModelForCausalLMWithValueHead`` from
    ``value_head_in`` (``"trl"`` or ``"trl.experimental.ppo"``) or, with ``None``, from nowhere, as TRL 1.16."""
    import types

    trl = types.ModuleType("trl")
    trl.__version__ = "1.16.0"
    ppo = types.ModuleType("trl.experimental.ppo")
    if value_head_in is not None:
        (trl if value_head_in == "trl" else ppo).AutoModelForCausalLMWithValueHead = object
    monkeypatch.setitem(sys.modules, "trl", trl)
    monkeypatch.setitem(sys.modules, "trl.experimental", types.ModuleType("trl.experimental"))
    monkeypatch.setitem(sys.modules, "trl.experimental.ppo", ppo if value_head_in is not None else None)
    monkeypatch.setattr(
        verl_env, "_version", lambda dist, module=None: {"trl": "1.16.0", "verl": "0.9.1"}[dist]
    )


def test_trl_without_value_head_warns_when_registering(monkeypatch: pytest.MonkeyPatch) -> None:
    """TRL 1.16 next to verl: verl's workers would fail in init_model; registering says so, with the fix."""
    _fake_trl(monkeypatch, value_head_in=None)
    message = bverl.trl_conflict()
    assert message is not None
    assert message.startswith("trl 1.16.0 is installed next to verl 0.9.1")
    assert "AutoModelForCausalLMWithValueHead" in message and "init_model raises ImportError" in message
    assert "separate environment without trl 1.16.0" in message
    with pytest.warns(bverl.TrlConflictWarning, match=r"trl 1\.16\.0 is installed next to verl 0\.9\.1"):
        assert bverl.register() == list(bverl.LOSS_MODES)


@pytest.mark.parametrize("value_head_in", ["trl", "trl.experimental.ppo"])
def test_trl_with_value_head_is_no_conflict(monkeypatch: pytest.MonkeyPatch, value_head_in: str) -> None:
    import warnings

    _fake_trl(monkeypatch, value_head_in=value_head_in)
    assert bverl.trl_conflict() is None
    with warnings.catch_warnings():
        warnings.simplefilter("error", bverl.TrlConflictWarning)
        bverl.register()


def test_no_trl_is_no_conflict(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "trl", None)  # `import trl` raises ModuleNotFoundError
    assert bverl.trl_conflict() is None


def test_installed_trl_conflict_is_detected() -> None:
    """The real environment: the check agrees with what verl's worker import would do."""
    import importlib.metadata

    try:
        import trl  # noqa: F401
    except ImportError:
        pytest.skip("trl is not installed: nothing to conflict with")
    try:
        from trl import AutoModelForCausalLMWithValueHead  # noqa: F401
    except ImportError:
        message = bverl.trl_conflict()
        assert message is not None
        trl_v, verl_v = importlib.metadata.version("trl"), importlib.metadata.version("verl")
        assert message.startswith(f"trl {trl_v} is installed next to verl {verl_v}")
    else:
        assert bverl.trl_conflict() is None


# ---- config ---------------------------------------------------------------------------------------------


def test_actor_config_carries_band_parameters() -> None:
    cfg = actor_config(divergence="tv", delta=0.1, cap=5.0, relax=True)
    assert type(cfg).__name__ == "ActorConfig"
    assert isinstance(cfg.policy_loss, bverl.BandPOPolicyLossConfig)
    assert (cfg.policy_loss.divergence, cfg.policy_loss.delta, cfg.policy_loss.cap) == ("tv", 0.1, 5.0)
    rule = bverl.clip_rule_from_config("bandpo", cfg)
    assert rule == bandpo.make_clip_rule("band", divergence="tv", delta=0.1, cap=5.0, relax=(0.2, 0.2))
    assert bverl.clip_rule_from_config("bandpo", cfg) is rule  # cached


def test_plain_verl_policy_loss_config_uses_band_defaults() -> None:
    cfg = actor_config(target=None)
    assert type(cfg.policy_loss).__name__ == "PolicyLossConfig"
    assert bverl.clip_rule_from_config("bandpo", cfg) == bandpo.make_clip_rule("band")


@pytest.mark.parametrize("loss_mode", ["bandpo_grpo", "bandpo_dcpo", "bandpo_dppo_kl"])
def test_every_rule_is_a_loss_mode_and_its_parameters_are_checked_when_the_config_is_built(
    loss_mode: str,
) -> None:
    """``bandpo_<rule>`` (SkyRL's names) select each rule verl can run; the rule's parameters and Band's are checked
    when verl builds the config, a schedule with a rule without a radius is refused, adaptive_band is not offered."""
    assert bverl.clip_rule_from_config(loss_mode, actor_config(loss_mode)).name == loss_mode[len("bandpo_") :]
    named = "dcpo" if loss_mode == "bandpo_dcpo" else "band"  # the mode's own rule first, where it has a cap
    with pytest.raises(
        Exception, match=rf"\(clip rule '{named}'\): policy_loss\.cap must be a finite number >= 1"
    ):
        actor_config(loss_mode, cap=0.5)
    with pytest.raises(
        Exception, match=rf"delta_schedule='linear' schedules Band's radius, which loss_mode='{loss_mode}'"
    ):
        actor_config(loss_mode, delta_schedule="linear", delta_end=0.02)
    with pytest.raises(
        ValueError,
        match=r"policy_loss\.loss_mode must be a policy loss registered in verl, got 'bandpo_adaptive_band' "
        r"\('adaptive_band' needs the per-token entropy, which verl does not pass to a policy loss\); valid names",
    ):
        bverl.BandPOPolicyLossConfig(loss_mode="bandpo_adaptive_band")


@pytest.mark.parametrize(
    ("loss_mode", "setting", "message"),
    [
        (
            "bandpo_grpo",
            {"clip_ratio_low": 1.5},
            r": clip_ratio_low must be a finite number in \[0\.0, 1\.0\]",
        ),
        (
            "bandpo_dppo_kl",
            {"clip_ratio_high": 5000.0},
            r": clip_ratio_high must be a finite number in \(0, 1000\]",
        ),
        ("bandpo_dppo_tv", {"clip_ratio_c": 1.0}, r": clip_ratio_c must be a finite number > 1, got 1\.0\b"),
        *(
            (
                mode,
                {"clip_ratio_c": 0.5},
                rf"actor\.clip_ratio_c must be a number > 1 \(the dual clip's c of loss_mode '{mode}'\), got 0\.5",
            )
            for mode in ("bandpo", "dcpo", "bandpo_grpo")
        ),
        ("dcpo", {"clip_ratio_low": -0.1}, r": clip_ratio_low must be a finite number >= 0, got -0\.1\b"),
        ("bandpo", {"delta": -1}, r": policy_loss\.delta must be a finite number > 0, got -1"),
    ],
)
def test_rule_parameter_errors_name_verls_setting(
    loss_mode: str, setting: dict[str, Any], message: str
) -> None:
    """A rule parameter's error names the actor config's key it came from (``clip_ratio_low``, not the rule's
    ``eps_low``; ``clip_ratio_c``, not ``truncation_c``), when verl builds the actor config (hydra wraps it in an
    InstantiationException), not at the first update: the actor-level keys too, through ``check_actor_configs``."""
    with pytest.raises(Exception, match=message):
        actor_config(loss_mode, **setting)


@pytest.mark.parametrize(
    ("key", "default"),
    [
        ("delta", "0.05"),
        ("divergence", "'kl'"),
        ("method", "'auto'"),
        ("delta_schedule", "'constant'"),
        ("diagnostics", "'full'"),
    ],
)
def test_null_is_refused_where_the_field_has_no_none(key: str, default: str) -> None:
    """``null`` in a field typed without ``None`` is refused (verl's config and a plain section alike), not read
    as an absent key whose default then runs without a word; ``cap: null`` keeps its meaning (no cap)."""
    message = rf"^policy_loss\.{key} must be set, got None \(leave the key out for its default, {default}\)$"
    with pytest.raises(ValueError, match=message):
        bverl.BandPOPolicyLossConfig(loss_mode="bandpo", **{key: None})
    with pytest.raises(ValueError, match=message):
        bverl.clip_method_from_config("bandpo", {"policy_loss": {"loss_mode": "bandpo", key: None}})
    assert bverl.clip_method_from_config("bandpo", {"policy_loss": {"cap": None}}).clip_rule.cap is None


def test_the_actor_check_wraps_verls_post_init_once_and_leaves_other_modes_alone() -> None:
    from verl.workers.config import ActorConfig

    assert bverl.check_actor_configs() and bverl.check_actor_configs()  # idempotent
    wrapped = ActorConfig.__dict__["__post_init__"]
    assert wrapped._bandpo_checks_actor and not getattr(wrapped.__wrapped__, "_bandpo_checks_actor", False)
    # verl's own checks still run first; another mode's clip ratios are verl's business
    assert actor_config("vanilla", target=None, clip_ratio_low=1.5).clip_ratio_low == 1.5
    with pytest.raises(Exception, match="Invalid loss_agg_mode"):
        actor_config("bandpo", loss_agg_mode="mean")


def test_unknown_loss_mode_fails_when_the_config_is_built() -> None:
    """A typo in loss_mode fails when verl builds the actor config, listing verl's registered names, not at the
    first actor update."""
    match = r"loss_mode must be a policy loss registered in verl, got 'bandp'; valid names: .*bandpo.*dcpo"
    with pytest.raises(ValueError, match=match) as info:
        bverl.BandPOPolicyLossConfig(loss_mode="bandp")
    assert all(name in str(info.value) for name in POLICY_LOSS_REGISTRY)
    with pytest.raises(Exception, match=match):  # hydra wraps it in an InstantiationException
        actor_config("bandp")
    for name in ("bandpo", "dcpo", "vanilla"):
        assert bverl.BandPOPolicyLossConfig(loss_mode=name).loss_mode == name
    assert "needs the per-token entropy" not in str(info.value)  # only for a rule that does


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"delta": -0.1}, "delta"),
        ({"divergence": "not_a_divergence"}, "not_a_divergence"),
        ({"cap": 0.5}, "cap"),
        ({"method": "magic"}, "magic"),
        ({"diagnostics": "most"}, "policy_loss.diagnostics must be one of full, basic, none, got 'most'"),
    ],
)
def test_invalid_band_parameters_fail_when_the_config_is_built(params: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        bverl.BandPOPolicyLossConfig(**params)
    with pytest.raises(Exception, match=message):  # hydra wraps it in an InstantiationException
        actor_config(**params)


def test_a_misspelled_key_of_a_plain_dict_policy_loss_is_refused() -> None:
    """A plain dict config (``{"policy_loss": {"deltaa": 0.5}}``) ran with the default radius, the key ignored, while
    hydra's ``_target_`` route refuses it: refused in one line with a "did you mean"; the known keys (verl's and
    bandpo's) pass, in a dict as in an OmegaConf DictConfig."""
    data = make_batch()
    match = (
        r"^actor\.policy_loss: unknown key\(s\) 'deltaa' \(did you mean 'delta'\?\), 'caap' \(did you mean 'cap'\?\); "
        r"valid: _target_, loss_mode, .*, delta, cap, .* \(a misspelled key would be ignored and its default used\)$"
    )
    for config in (
        {"policy_loss": {"deltaa": 0.5, "caap": 2.0}},
        OmegaConf.create({"policy_loss": {"deltaa": 0.5, "caap": 2.0}}),
    ):
        with pytest.raises(ValueError, match=match):
            bverl.clip_method_from_config("bandpo", config)
        with pytest.raises(ValueError, match=match):
            get_policy_loss_fn("bandpo")(
                data["old_log_prob"],
                data["log_prob"],
                data["advantages"],
                data["response_mask"],
                config=config,
            )
    good = {"policy_loss": {"loss_mode": "bandpo", "delta": 0.07, "rollout_correction": None}}
    assert bverl.clip_rule_from_config("bandpo", good) == bandpo.make_clip_rule("band", delta=0.07)
    assert bverl.clip_rule_from_config("bandpo", {"clip_ratio_c": 3.0}) == bandpo.make_clip_rule("band")


def test_a_misspelled_actor_key_bandpo_reads_is_refused_and_verls_own_keys_pass() -> None:
    """A plain dict actor config with ``clip_ratio_lo`` ran with ``clip_ratio``'s 0.2 as the lower ratio, the key
    ignored: a misspelling of a key bandpo reads (the clip ratios, ``policy_loss``, ``optim.total_training_steps``)
    is refused in one line with a "did you mean"; verl's own actor keys, which bandpo does not read, pass."""
    data = make_batch()
    for config, match in (
        (
            {"clip_ratio_lo": 0.1, "clip_ratio_high": 0.3},
            r"^actor: unknown key\(s\) 'clip_ratio_lo' \(did you mean 'clip_ratio_low'\?\); bandpo reads clip_ratio, "
            r"clip_ratio_low, clip_ratio_high, clip_ratio_c, policy_loss, optim there \(a misspelled key would be "
            r"ignored and its default used\)$",
        ),
        (
            {"policy_los": {"delta": 0.1}},
            r"^actor: unknown key\(s\) 'policy_los' \(did you mean 'policy_loss'\?\)",
        ),
        (
            {"optim": {"lr": 1e-6, "total_training_step": 100}},
            r"^actor\.optim: unknown key\(s\) 'total_training_step' \(did you mean 'total_training_steps'\?\)",
        ),
    ):
        for plain in (config, OmegaConf.create(config)):
            with pytest.raises(ValueError, match=match):
                bverl.clip_method_from_config("bandpo", plain)
            with pytest.raises(ValueError, match=match):
                get_policy_loss_fn("bandpo")(
                    data["old_log_prob"],
                    data["log_prob"],
                    data["advantages"],
                    data["response_mask"],
                    config=plain,
                )
    verls_own = {
        "ppo_mini_batch_size": 8, "ppo_epochs": 1, "loss_agg_mode": "token-mean", "entropy_coeff": 0.0,
        "use_kl_loss": False, "kl_loss_coef": 0.001, "kl_loss_type": "low_var_kl", "grad_clip": 1.0,
        "clip_ratio": 0.2, "clip_ratio_low": 0.1, "clip_ratio_c": 3.0, "shuffle": False, "strategy": "fsdp",
        "optim": {"lr": 1e-6, "lr_warmup_steps_ratio": 0.0, "total_training_steps": 10, "weight_decay": 0.01,
                  "lr_warmup_steps": -1, "betas": [0.9, 0.999], "clip_grad": 1.0, "warmup_style": "constant"},
        "policy_loss": {"loss_mode": "bandpo", "relax": True},
    }  # fmt: skip
    method = bverl.clip_method_from_config("bandpo", verls_own)
    assert method.total_steps == 10 and method.params["relax"] == (0.1, 0.2)  # bandpo's keys are read


def _example_overrides(**env: str) -> list[str]:
    result = subprocess.run(
        ["bash", str(EXAMPLE)],
        env={**os.environ, "DRY_RUN": "1", **env},
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    return result.stdout.splitlines()


@pytest.mark.parametrize("loss_mode", ["bandpo", "dcpo", "vanilla"])
def test_example_script_overrides_compose_with_verls_config(loss_mode: str) -> None:
    """The launch script's overrides compose against verl's ppo_trainer.yaml, pass verl's driver-side
    ``validate_config`` and build an actor config carrying our policy loss, as verl's workers do (the GRPO
    baseline, ``LOSS_MODE=vanilla``, keeps verl's plain config)."""
    from hydra import compose, initialize_config_dir
    from verl.utils.config import validate_config

    overrides = _example_overrides(LOSS_MODE=loss_mode, DIVERGENCE="hellinger", DELTA="0.07")
    config_dir = str(Path(verl.__file__).parent / "trainer" / "config")
    with initialize_config_dir(config_dir=config_dir, version_base=None):
        cfg = compose(config_name="ppo_trainer", overrides=overrides)
    validate_config(cfg, use_reference_policy=True, use_critic=False)
    actor = omega_conf_to_dataclass(cfg.actor_rollout_ref.actor)
    assert actor.policy_loss.loss_mode == loss_mode
    if loss_mode == "vanilla":
        assert type(actor.policy_loss).__name__ == "PolicyLossConfig"
    else:
        assert isinstance(actor.policy_loss, bverl.BandPOPolicyLossConfig)
        assert (actor.policy_loss.divergence, actor.policy_loss.delta) == ("hellinger", 0.07)
    assert (actor.clip_ratio_c, actor.loss_agg_mode, actor.rollout_n) == (10.0, "seq-mean-token-mean", 16)
    assert (actor.use_kl_loss, actor.kl_loss_coef, actor.kl_loss_type) == (True, 0.001, "low_var_kl")
    if loss_mode == "dcpo":
        assert (actor.clip_ratio_low, actor.clip_ratio_high) == (0.16, 0.2)
    assert callable(get_policy_loss_fn(actor.policy_loss.loss_mode))


# ---- the loss -------------------------------------------------------------------------------------------


def test_per_token_policy_loss_aggregates_to_policy_loss() -> None:
    """The factored per-token matrix equals bandpo.policy_loss for every mode, with NaN padding and (B,) advantages.
    Wiring test: policy_loss runs that same code; its numerics are checked against an independent reference in
    tests/losses/test_policy_loss.py::test_matches_naive_reference_values_and_grads."""
    data = make_batch(pad_nan=True)
    rule = bandpo.make_clip_rule("band", divergence="kl", delta=0.05)
    adv = data["advantages"][:, 0]  # (B,)
    for mode in SHARED_AGG_MODES:
        ours = loss_and_grad(
            lambda mode=mode: (
                aggregate(
                    bverl.per_token_policy_loss(
                        data["log_prob"],
                        data["old_log_prob"],
                        adv,
                        data["response_mask"],
                        rule,
                        clip_ratio_c=3.0,
                        rollout_is_weights=data["rollout_is_weights"],
                    ).loss,
                    data["response_mask"],
                    mode,
                ),
            ),
            data["log_prob"],
        )
        ref = loss_and_grad(
            lambda mode=mode: bandpo.policy_loss(
                data["log_prob"],
                data["old_log_prob"],
                adv,
                data["response_mask"],
                rule,
                loss_agg_mode=mode,
                clip_ratio_c=3.0,
                rollout_is_weights=data["rollout_is_weights"],
            ),
            data["log_prob"],
        )
        assert torch.isfinite(ours[1]).all()
        torch.testing.assert_close(ours, ref, rtol=1e-12, atol=1e-14)


CASES = [
    # (loss_mode, policy_loss params, clip ratios (low, high), clip_ratio_c, reference rule)
    ("bandpo", {}, (0.2, 0.2), 10.0, bandpo.make_clip_rule("band")),
    (
        "bandpo",
        {"divergence": "tv", "delta": 0.1, "cap": 4.0, "relax": True},
        (0.2, 0.28),
        3.0,
        bandpo.make_clip_rule("band", divergence="tv", delta=0.1, cap=4.0, relax=(0.2, 0.28)),
    ),
    (
        "bandpo",
        {"divergence": "hellinger", "delta": 0.05, "cap": None},
        (0.2, 0.2),
        3.0,
        bandpo.make_clip_rule("band", divergence="hellinger", cap=None),
    ),
    ("dcpo", {}, (0.16, 0.2), 10.0, bandpo.make_clip_rule("dcpo", eps_low=0.16, eps_high=0.2)),
    # every other rule by its SkyRL name: eps from the clip ratios, Band's fields where the rule has them
    ("bandpo_grpo", {"delta": 0.3}, (0.2, 0.28), 10.0, bandpo.make_clip_rule("grpo", eps_high=0.28)),
    (
        "bandpo_clip_higher",
        {},
        (0.1, 0.3),
        3.0,
        bandpo.make_clip_rule("clip_higher", eps_low=0.1, eps_high=0.3),
    ),
    (
        "bandpo_dcpo",
        {"cap": 5.0},
        (0.16, 0.2),
        10.0,
        bandpo.make_clip_rule("dcpo", eps_low=0.16, eps_high=0.2, cap=5.0),
    ),
    (  # Band's upper side: its fixed lower bound from clip_ratio_low, Band's fields from the section
        "bandpo_band_upper",
        {"delta": 0.1},
        (0.3, 0.28),
        10.0,
        bandpo.make_clip_rule("band_upper", delta=0.1, eps_low=0.3),
    ),
    (  # Band's lower side: its fixed upper bound from clip_ratio_high
        "bandpo_band_lower",
        {"divergence": "tv"},
        (0.3, 0.28),
        10.0,
        bandpo.make_clip_rule("band_lower", divergence="tv", eps_high=0.28),
    ),
    (
        "bandpo_dppo_tv",
        {},
        (0.1, 0.2),
        20.0,
        bandpo.make_clip_rule("dppo_tv", clip_divergence_low=0.1, clip_divergence_high=0.2),
    ),
]


@pytest.mark.parametrize("agg_mode", SHARED_AGG_MODES)
@pytest.mark.parametrize(("loss_mode", "params", "ratios", "clip_c", "rule"), CASES)
@pytest.mark.parametrize("weights", [True, False], ids=["is_weights", "no_weights"])
def test_registered_loss_matches_bandpo_policy_loss(
    agg_mode: str,
    loss_mode: str,
    params: dict[str, Any],
    ratios: tuple[float, float],
    clip_c: float,
    rule: Any,
    weights: bool,
) -> None:
    """Wiring test: verl's registry lookup, verl's keyword call and the ``ActorConfig``'s clip ratios,
    ``clip_ratio_c`` and Band parameters reach ``per_token_policy_loss`` with the rule, weights and aggregation
    ``bandpo.policy_loss`` gets here (both run that function). The numerics are checked against an independent
    reference in tests/losses/test_policy_loss.py::test_matches_naive_reference_values_and_grads, and against verl's own ``vanilla`` in
    tests/integrations/test_verl.py::test_fixed_rule_reproduces_verl_vanilla.
    """
    config = actor_config(
        loss_mode,
        loss_agg_mode=agg_mode,
        clip_ratio_c=clip_c,
        clip_ratio_low=ratios[0],
        clip_ratio_high=ratios[1],
        **params,
    )
    data = make_batch(seed=SHARED_AGG_MODES.index(agg_mode))
    fn = get_policy_loss_fn(config.policy_loss.loss_mode)
    ours = loss_and_grad(lambda: call_verl_style(fn, data, config, weights), data["log_prob"])
    ref = loss_and_grad(
        lambda: bandpo.policy_loss(
            data["log_prob"],
            data["old_log_prob"],
            data["advantages"],
            data["response_mask"],
            rule,
            loss_agg_mode=agg_mode,
            clip_ratio_c=clip_c,
            rollout_is_weights=data["rollout_is_weights"] if weights else None,
        ),
        data["log_prob"],
    )
    torch.testing.assert_close(ours, ref, **TOL)
    assert ours[1].abs().sum() > 0


def test_token_sum_mode_is_verls() -> None:
    data = make_batch()
    fn = get_policy_loss_fn("bandpo")
    total, _ = call_verl_style(fn, data, actor_config(loss_agg_mode="token-sum"))
    mean, _ = call_verl_style(fn, data, actor_config(loss_agg_mode="token-mean"))
    torch.testing.assert_close(total, mean * data["response_mask"].sum(), **TOL)


@pytest.mark.parametrize("agg_mode", ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum"])
def test_global_batch_info_is_honoured(agg_mode: str) -> None:
    """With verl's global batch info for 2 data-parallel ranks holding identical micro-batches, the local loss
    is the full-batch mean (agg_loss multiplies by dp_size and divides by the global counts). No empty row: verl's
    global_batch_size (the mini-batch size) counts it, while the local seq-mean does not."""
    data = make_batch(empty_row=False)
    fn = get_policy_loss_fn("bandpo")
    local, _ = call_verl_style(fn, data, actor_config(loss_agg_mode=agg_mode))
    config = actor_config(loss_agg_mode=agg_mode)
    config.global_batch_info.update(
        dp_size=2,
        batch_num_tokens=2 * int(data["response_mask"].sum()),
        global_batch_size=2 * data["response_mask"].shape[0],
        loss_scale_factor=None,
    )
    scaled, _ = call_verl_style(fn, data, config)
    torch.testing.assert_close(scaled, local, **TOL)
    config.global_batch_info["dp_size"] = 1  # half the global batch -> half the loss
    torch.testing.assert_close(call_verl_style(fn, data, config)[0], local / 2, **TOL)


def test_fixed_rule_reproduces_verl_vanilla() -> None:
    """The adapter with verl's own fixed interval is verl's ``vanilla`` loss: same loss, gradients, metrics."""
    data = make_batch(seed=3)
    for agg_mode in ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm"]:
        config = actor_config("vanilla", loss_agg_mode=agg_mode, clip_ratio_c=3.0, clip_ratio_high=0.28)

        def ours(config: Any = config) -> Any:
            return bverl.compute_policy_loss_clip_rule(
                data["old_log_prob"],
                data["log_prob"],
                data["advantages"],
                data["response_mask"],
                config.loss_agg_mode,
                config,
                data["rollout_is_weights"],
                clip_rule=FixedClip(eps_low=0.2, eps_high=0.28),
            )

        vanilla = get_policy_loss_fn("vanilla")
        got, want = ours(), call_verl_style(vanilla, data, config)
        torch.testing.assert_close(
            loss_and_grad(ours, data["log_prob"]),
            loss_and_grad(lambda v=vanilla, c=config: call_verl_style(v, data, c), data["log_prob"]),
            **TOL,
        )
        for key in VERL_METRICS:
            assert got[1][key] == pytest.approx(want[1][key], rel=1e-6, abs=1e-9), key
    assert want[1]["actor/pg_clipfrac"] > 0 and want[1]["actor/pg_clipfrac_lower"] > 0  # both branches hit


def test_metrics_have_verls_names_and_ours() -> None:
    data = make_batch()
    for mode in bverl.LOSS_MODES:
        config = actor_config(mode, clip_ratio_c=3.0)
        loss, metrics = call_verl_style(get_policy_loss_fn(mode), data, config)
        assert loss.dim() == 0 and loss.requires_grad
        assert set(VERL_METRICS) <= set(metrics)
        for key in (
            "actor/clip/frac_up",
            "actor/clip/frac_down",
            "actor/clip/tail_share",
            "actor/band/hi_mean",
        ):
            assert key in metrics
        assert all(k.startswith("actor/") for k in metrics)
        assert all(type(v) is float for v in metrics.values())
        assert metrics["actor/pg_clipfrac"] == metrics["actor/clip/frac"]
        assert metrics["actor/pg_clipfrac_lower"] == metrics["actor/clip/frac_dual"]
        assert metrics["actor/ppo_kl"] == metrics["actor/policy/ppo_kl"]
        aggregated = Metric.from_dict(metrics, aggregation="mean")  # what verl's ppo_loss does with them
        assert aggregated["actor/pg_clipfrac"].aggregate() == pytest.approx(metrics["actor/pg_clipfrac"])


@pytest.mark.parametrize("level", ["basic", "none"])
def test_lighter_diagnostics_keep_verls_metrics_and_the_loss(level: str) -> None:
    data = make_batch()
    fn = get_policy_loss_fn("bandpo")
    loss_full, full = call_verl_style(fn, data, actor_config(clip_ratio_c=3.0))
    loss, metrics = call_verl_style(fn, data, actor_config(clip_ratio_c=3.0, diagnostics=level))
    assert torch.equal(loss, loss_full)
    ours = {"actor/clip/frac", "actor/clip/frac_up", "actor/clip/frac_down", "actor/clip/frac_dual"}
    ours |= {"actor/policy/ppo_kl"}
    want = set(VERL_METRICS) | {"actor/band/delta"} | (ours if level == "basic" else set())
    assert set(metrics) == want
    assert all(metrics[k] == full[k] for k in metrics)


def test_through_verls_ppo_loss() -> None:
    """verl's own actor loss (``verl.workers.utils.losses.ppo_loss``) with a TensorDict micro-batch in verl's
    no-padding layout gives bandpo.policy_loss's value and gradients.
    Wiring test: verl's layout reaches the right tokens of the code policy_loss runs; the numerics are checked
    against an independent reference in
    tests/losses/test_policy_loss.py::test_matches_naive_reference_values_and_grads.
    """
    from tensordict import TensorDict
    from verl.utils import tensordict_utils as tu
    from verl.workers.utils.losses import ppo_loss

    data = make_batch(batch=4, length=6, seed=5)
    log_prob, mask = data["log_prob"], data["response_mask"]
    batch, length = log_prob.shape
    prompt = 3
    # model output (total_nnz,): per sequence prompt + response tokens, shifted left by one token
    lengths = mask.sum(1).tolist()
    pieces = []
    for b in range(batch):
        pieces += [log_prob.new_zeros(prompt - 1), log_prob[b, : lengths[b]], log_prob.new_zeros(1)]
    flat = torch.cat(pieces)
    micro = TensorDict(
        {
            "prompts": torch.ones(batch, prompt, dtype=torch.long),
            "responses": torch.ones(batch, length, dtype=torch.long),
            "attention_mask": torch.cat([torch.ones(batch, prompt, dtype=torch.long), mask.long()], dim=1),
            "response_mask": mask.long(),
            "old_log_probs": data["old_log_prob"],
            "advantages": data["advantages"],
            "rollout_is_weights": data["rollout_is_weights"],
        },
        batch_size=[batch],
    )
    tu.assign_non_tensor(micro, dp_size=1, batch_num_tokens=None, global_batch_size=None)
    config = actor_config(loss_agg_mode="seq-mean-token-mean", divergence="kl", delta=0.05)
    loss, metrics = ppo_loss(config, {"log_probs": flat}, micro)
    (grad,) = torch.autograd.grad(loss, log_prob)
    ref = loss_and_grad(
        lambda: bandpo.policy_loss(
            log_prob,
            data["old_log_prob"],
            data["advantages"],
            mask,
            "band",
            loss_agg_mode="seq-mean-token-mean",
            clip_ratio_c=10.0,
            rollout_is_weights=data["rollout_is_weights"],
        ),
        log_prob,
    )
    torch.testing.assert_close((loss.detach(), grad), ref, **TOL)
    assert set(VERL_METRICS) <= set(metrics) and "actor/pg_loss" in metrics


def test_low_precision_and_extreme_inputs_stay_finite() -> None:
    data = make_batch(dtype=torch.bfloat16)
    with torch.no_grad():
        data["log_prob"][0, :3] = torch.tensor([-60.0, 0.0, -1e-8])
        data["old_log_prob"][0, :3] = torch.tensor([0.0, -60.0, -1e-8])
    loss, metrics = call_verl_style(get_policy_loss_fn("bandpo"), data, actor_config())
    (grad,) = torch.autograd.grad(loss, data["log_prob"])
    assert loss.dtype == torch.float32 and grad.dtype == torch.bfloat16  # computed in float32 (issue 11)
    assert torch.isfinite(loss) and torch.isfinite(grad).all()
    assert all(v == v for v in metrics.values())  # no NaN
    # and the values: bandpo.policy_loss on the same bfloat16 numbers in float32 (p = 1 and ratios clamped at e^+-20)
    lp32 = data["log_prob"].detach().float().requires_grad_()
    want, _ = bandpo.policy_loss(
        lp32,
        data["old_log_prob"].float(),
        data["advantages"].float(),
        data["response_mask"],
        "band",
        loss_agg_mode="token-mean",
        clip_ratio_c=10.0,
        rollout_is_weights=data["rollout_is_weights"].float(),
    )
    (want_grad,) = torch.autograd.grad(want, lp32)
    torch.testing.assert_close(loss, want, rtol=1e-6, atol=0)
    torch.testing.assert_close(grad, want_grad.to(torch.bfloat16), rtol=0, atol=0)


def test_config_is_required_and_shapes_are_checked() -> None:
    data = make_batch()
    with pytest.raises(ValueError, match="config"):
        bverl.compute_policy_loss_bandpo(
            data["old_log_prob"], data["log_prob"], data["advantages"], data["response_mask"]
        )
    with pytest.raises(ValueError, match="old_log_prob shape"):
        bverl.compute_policy_loss_bandpo(
            data["old_log_prob"][:, :-1],
            data["log_prob"],
            data["advantages"],
            data["response_mask"],
            config=actor_config(),
        )
    with pytest.raises(ValueError, match="loss_mode must be one of"):
        bverl.clip_rule_from_config("vanilla", actor_config())


def test_adapter_refuses_a_clip_ratio_c_that_dppo_would_ignore() -> None:
    """verl's DPPO losses take their c from ``actor.clip_ratio_c``; through the adapter a bandpo DPPO rule with
    another c is refused (``per_token_policy_loss``), where the config's value used to be dropped silently."""
    d = make_batch()
    rule = bandpo.make_clip_rule("dppo_tv", truncation_c=20.0)
    args = (d["old_log_prob"], d["log_prob"], d["advantages"], d["response_mask"], "token-mean")
    with pytest.raises(
        ValueError,
        match=r"^clip_ratio_c=3\.0 has no effect on the truncated objective of clip rule dppo_tv\(.*truncation_c=20\.0\) "
        r"\(its c is 20",
    ):
        bverl.compute_policy_loss_clip_rule(*args, actor_config(clip_ratio_c=3.0), clip_rule=rule)
    loss, _ = bverl.compute_policy_loss_clip_rule(*args, actor_config(clip_ratio_c=20.0), clip_rule=rule)
    assert torch.isfinite(loss)
