"""BandPO in verl: every clip rule as a policy-loss mode, selected by config, without a fork (docs/verl.md).

verl (>= 0.9) dispatches the actor's policy loss by ``actor.policy_loss.loss_mode`` through its registry
(``verl.trainer.ppo.core_algos``). This module puts one mode per clip rule there (:data:`LOSS_MODES`: ``bandpo``,
``dcpo`` and ``bandpo_<rule>``, named as in SkyRL; not ``adaptive_band``: verl passes a policy loss no entropy);
importing it registers them, and verl's ``verl.plugins`` entry point imports it in every process. Per token the
loss is ``bandpo.policy_loss``'s objective (``per_token_policy_loss``), aggregated with verl's own ``agg_loss`` and
the actor's ``global_batch_info``. :data:`VERL_NAMES` translates ``actor.policy_loss`` (the dataclass
:class:`BandPOPolicyLossConfig`, selected with ``_target_``) and the actor's clip ratios into a
``bandpo.losses.method.ClipMethod``. A changing radius needs verl's global step, which reaches an actor worker
only through ``ActorRolloutRefWorker.update_weights(global_steps=N)``: :func:`record_global_steps` wraps it and
update ``N + 1`` uses that step's radius (docs/verl.md, "Radius schedule"). Keys, metrics, older verl versions
and the separate environment that TRL 1.16 forces (:func:`trl_conflict`): docs/verl.md.
"""

from __future__ import annotations

import dataclasses
import functools
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from torch import Tensor

from bandpo._optional import install_hint
from bandpo.integrations.verl_env import TrlConflictWarning, trl_conflict
from bandpo.integrations.verl_steps import record_global_steps, set_global_step, update_step
from bandpo.losses.clip_rules import PAPER_CAP, PAPER_DELTA, ClipRule, clip_rule_params
from bandpo.losses.diagnostics import check_diagnostics
from bandpo.losses.inputs import is_dual_clip_c
from bandpo.losses.method import ClipMethod, clip_method, entropy_rule, freeze, loss_names
from bandpo.losses.policy_loss import per_token_policy_loss
from bandpo.losses.schedule import RadiusSchedule
from bandpo.losses.terms import TokenTerms, framework_metrics
from bandpo.registry import did_you_mean
from bandpo.validation import check_not_none

try:
    from verl.trainer.ppo.core_algos import POLICY_LOSS_REGISTRY, agg_loss, register_policy_loss
    from verl.workers.config import PolicyLossConfig
except ImportError as _err:  # pragma: no cover - exercised only without verl
    raise ImportError(
        f"bandpo.integrations.verl needs verl >= 0.9 ({install_hint('verl')}); "
        f"importing it failed with: {_err}"
    ) from _err

__all__ = [
    "LOSS_MODES",
    "VERL_METRIC_NAMES",
    "VERL_NAMES",
    "BandPOPolicyLossConfig",
    "TokenTerms",
    "TrlConflictWarning",
    "check_actor_config",
    "check_actor_configs",
    "clip_method_from_config",
    "clip_rule_from_config",
    "compute_policy_loss_bandpo",
    "compute_policy_loss_clip_rule",
    "compute_policy_loss_dcpo",
    "per_token_policy_loss",
    "radius_schedule_from_config",
    "record_global_steps",
    "register",
    "set_global_step",
    "trl_conflict",
]

#: verl's metric names for the standard PPO diagnostics, mapped to ``bandpo.clip_metrics`` names.
VERL_METRIC_NAMES: dict[str, str] = {
    "actor/pg_clipfrac": "clip/frac",
    "actor/ppo_kl": "policy/ppo_kl",
    "actor/pg_clipfrac_lower": "clip/frac_dual",
}


@dataclass
class BandPOPolicyLossConfig(PolicyLossConfig):
    """verl's ``actor.policy_loss`` config with BandPO's parameters (select it with ``_target_``); every key, its
    default and the modes that use it: docs/verl.md, "Select BandPO".

    Inherits every field of verl's ``PolicyLossConfig``; ``loss_mode`` defaults to ``"bandpo"``. ``cap=None``: Band
    is capped by ``1/p`` only, DCPO keeps its cap 10. ``delta_total_steps=None``: the actor's
    ``optim.total_training_steps`` (set by verl's trainer). ``diagnostics``: ``full``, ``basic`` or ``none``
    (``bandpo.losses.DIAGNOSTICS``; verl's own three metrics are logged at every level).

    Raises:
        ValueError: at construction (i.e. when verl builds the actor config) for a ``loss_mode`` that verl's
            registry does not hold (listing the registered names), an unknown divergence, method or schedule,
            ``delta <= 0``, ``cap < 1``, ``delta_end <= 0``, ``delta_hold_frac`` outside [0, 1), or a schedule
            with a mode whose rule has no radius, naming the field and the value received.
    """

    loss_mode: str = "bandpo"
    divergence: str = "kl"
    delta: float = PAPER_DELTA
    cap: float | None = PAPER_CAP
    relax: bool = False
    method: str = "auto"
    delta_schedule: str = "constant"
    delta_end: float | None = None
    delta_hold_frac: float | None = None
    delta_total_steps: int | None = None
    diagnostics: str = "full"

    def __post_init__(self) -> None:
        parent = getattr(super(), "__post_init__", None)
        if parent is not None:
            parent()
        if self.loss_mode not in POLICY_LOSS_REGISTRY:
            # verl itself looks the name up only at the first actor update (get_policy_loss_fn).
            rule = entropy_rule(self.loss_mode)
            note = f" ({rule!r} needs the per-token entropy, which verl does not pass to a policy loss)"
            raise ValueError(
                f"policy_loss.loss_mode must be a policy loss registered in verl, got {self.loss_mode!r}"
                f"{note if rule else ''}; valid names: {', '.join(sorted(POLICY_LOSS_REGISTRY))}"
            )
        # verl's configs are frozen: checked, not replaced by the canonical name
        if not isinstance(self.relax, bool):
            raise ValueError(f"policy_loss.relax must be true or false, got {self.relax!r}")
        # Band's parameters whatever the mode (the defaults of every bandpo mode), then the mode's own rule; where
        # Band's fail, the mode's own rule speaks first if it fails too (its message names it: DCPO's cap)
        rule = _MODE_RULES.get(self.loss_mode)
        settings = _settings(self)
        try:
            band = _method("band", settings)
        except ValueError:
            if rule is not None:
                _method(rule, settings)
            raise
        if not band.schedule.is_constant and (rule is None or "delta" not in clip_rule_params(rule)):
            raise ValueError(
                f"policy_loss.delta_schedule={band.schedule.kind!r} schedules Band's radius, which loss_mode="
                f"{self.loss_mode!r} does not have: use a loss_mode with one ("
                f"{', '.join(m for m, r in _MODE_RULES.items() if 'delta' in clip_rule_params(r))}) or "
                "delta_schedule='constant'"
            )
        if rule is not None:
            _method(rule, settings)
        if not band.schedule.is_constant:
            record_global_steps()


# ---- config -> clip method ------------------------------------------------------------------------------------

VERL_NAMES: dict[str, str | tuple[str, ...]] = {
    "policy_loss.divergence": "divergence",
    "policy_loss.delta": "delta",
    "policy_loss.cap": "cap",
    "policy_loss.relax": "relax",
    "policy_loss.method": "method",
    "policy_loss.delta_schedule": "delta_schedule",
    "policy_loss.delta_end": "delta_end",
    "policy_loss.delta_hold_frac": "delta_hold_frac",
    "policy_loss.delta_total_steps": "total_steps",
    "policy_loss.diagnostics": "diagnostics",
    "clip_ratio_low": ("eps_low", "clip_divergence_low"),
    "clip_ratio_high": ("eps_high", "clip_divergence_high"),
    "clip_ratio_c": "truncation_c",
}
"""verl's spelling (the actor config's keys) -> bandpo's name. ``policy_loss.relax`` is a bool in verl: ``true``
is Band's ``relax = (clip_ratio_low, clip_ratio_high)``; ``policy_loss.delta_total_steps`` falls back to the actor's
``optim.total_training_steps``; ``clip_ratio_c`` is DPPO's ``c``, ``truncation_c`` (and, for every rule, the dual
clip). The rule comes from ``policy_loss.loss_mode`` (:data:`LOSS_MODES`)."""

_POLICY_LOSS_FIELDS = [key.split(".", 1)[1] for key in VERL_NAMES if key.startswith("policy_loss.")]


def _get(config: Any, key: str, default: Any) -> Any:
    """``config[key]`` for verl dataclass configs, OmegaConf ``DictConfig``s and dicts; ``default`` if absent
    or ``None``."""
    value = config.get(key, default) if hasattr(config, "get") else getattr(config, key, default)
    return default if value is None else value


def _clip_ratios(config: Any) -> tuple[float, float]:
    """verl's ``(clip_ratio_low, clip_ratio_high)``, each falling back to ``clip_ratio`` like ``vanilla``."""
    eps = _get(config, "clip_ratio", 0.2)
    return float(_get(config, "clip_ratio_low", eps)), float(_get(config, "clip_ratio_high", eps))


_DEFAULTS = BandPOPolicyLossConfig.__dataclass_fields__


def _param(policy_loss: Any, key: str) -> Any:
    """A BandPO field of ``actor.policy_loss``; its dataclass default when the config lacks it (e.g. verl's
    plain ``PolicyLossConfig``). ``None`` is kept (``cap=None`` means no cap)."""
    default = _DEFAULTS[key].default
    if policy_loss is None:
        return default
    if hasattr(policy_loss, "get"):
        return policy_loss.get(key, default)
    return getattr(policy_loss, key, default)


_POLICY_LOSS_KEYS = tuple(field.name for field in dataclasses.fields(BandPOPolicyLossConfig))
"""The keys an ``actor.policy_loss`` may hold: the fields of :class:`BandPOPolicyLossConfig` (verl's and bandpo's)."""


_ACTOR_KEYS = ("clip_ratio", "clip_ratio_low", "clip_ratio_high", "clip_ratio_c", "policy_loss", "optim")
"""The keys of verl's actor config that bandpo reads itself (:func:`_settings`); of ``optim``, only
``total_training_steps`` (:data:`_OPTIM_KEYS`)."""

_OPTIM_KEYS = ("total_training_steps",)


@functools.lru_cache(maxsize=64)
def _misspelled(keys: frozenset[str], owned: tuple[str, ...]) -> tuple[str, ...]:
    """The ``keys`` that are not ``owned`` but close to one of them (:func:`bandpo.registry.did_you_mean`'s
    measure), sorted: the misspellings of bandpo's keys among verl's own."""
    return tuple(sorted(k for k in keys if k not in owned and did_you_mean(k, owned)))


def _check_keys(policy_loss: Any, config: Any) -> None:
    """The plain sections (a dict or ``DictConfig``; hydra checked the fields of verl's config dataclasses) hold no
    misspelled key, which would be read as absent and its default used: ``actor.policy_loss`` only
    :data:`_POLICY_LOSS_KEYS`; the actor config and its ``optim``, which hold verl's own keys too (``ppo_epochs``,
    ...), no key close to one bandpo reads there (:data:`_ACTOR_KEYS`, :data:`_OPTIM_KEYS`; did-you-mean's
    similarity, which none of verl 0.9's fields meets). Raises ``ValueError`` naming each with a "did you mean"."""
    # (where, section, owned keys, whether every other key is unknown there)
    sections = [("actor.policy_loss", policy_loss, _POLICY_LOSS_KEYS, True)]
    if config is not None:
        sections += [
            ("actor", config, _ACTOR_KEYS, False),
            ("actor.optim", _get(config, "optim", None), _OPTIM_KEYS, False),
        ]
    for where, section, owned, only_owned in sections:
        if section is None or dataclasses.is_dataclass(section) or not hasattr(section, "keys"):
            continue
        if only_owned:
            unknown = [key for key in section if key not in owned]
            allowed = f"valid: {', '.join(owned)}"
        else:
            unknown = _misspelled(frozenset(k for k in section if isinstance(k, str)), owned)
            allowed = f"bandpo reads {', '.join(owned)} there"
        if unknown:
            named = ", ".join(f"{key!r}{did_you_mean(key, owned)}" for key in unknown)
            raise ValueError(
                f"{where}: unknown key(s) {named}; {allowed} (a misspelled key would be ignored and its default used)"
            )


def _settings(policy_loss: Any, config: Any = None) -> dict[str, Any]:
    """verl's settings by :data:`VERL_NAMES`' spelling: the BandPO fields of ``policy_loss`` and, with the actor
    ``config``, its clip ratios and run length (without it, the rules' defaults). A plain dict ``policy_loss``
    with a key that is no field of :class:`BandPOPolicyLossConfig` raises, and a plain dict ``config`` with a
    misspelling of a key bandpo reads there (:func:`_check_keys`)."""
    _check_keys(policy_loss, config)
    fields = {key: _param(policy_loss, key) for key in _POLICY_LOSS_FIELDS}
    check_not_none("policy_loss", fields, BandPOPolicyLossConfig)
    settings = {f"policy_loss.{key}": value for key, value in fields.items()}
    relax = settings["policy_loss.relax"]
    settings["policy_loss.relax"] = None
    if config is not None:
        low, high = _clip_ratios(config)
        settings.update(
            clip_ratio_low=low, clip_ratio_high=high, clip_ratio_c=float(_get(config, "clip_ratio_c", 3.0))
        )
        settings["policy_loss.relax"] = (low, high) if relax else None
        if settings["policy_loss.delta_total_steps"] is None:
            total = int(_get(_get(config, "optim", None) or {}, "total_training_steps", -1))
            settings["policy_loss.delta_total_steps"] = total if total > 0 else None
    return settings


def _method(rule: str, settings: dict[str, Any], params: Any = None) -> ClipMethod:
    """The clip method of ``rule`` under verl's ``settings`` (:func:`_settings`), cached per parameter set."""
    return _cached_method(rule, freeze(settings), freeze(params))


@functools.lru_cache(maxsize=64)
def _cached_method(rule: str, settings: Any, params: Any) -> ClipMethod:
    return clip_method(
        dict(settings),
        VERL_NAMES,
        where="BandPO policy_loss config",
        strict=False,
        rule=rule,
        params=None if params is None else dict(params),
    )


def clip_method_from_config(loss_mode: str, config: Any) -> ClipMethod:
    """The clip method of bandpo's loss mode ``loss_mode`` (:data:`LOSS_MODES`) under verl's actor ``config``:
    :data:`VERL_NAMES` translates ``config.policy_loss``'s BandPO fields (the defaults of
    :class:`BandPOPolicyLossConfig` where absent), the clip ratios (``clip_ratio_low`` / ``clip_ratio_high``,
    falling back to ``clip_ratio``), ``clip_ratio_c`` and the run's length (``policy_loss.delta_total_steps``,
    else ``optim.total_training_steps``, which verl's trainer sets; ``-1`` before: ``None``). Cached per
    parameter set."""
    if loss_mode not in _MODE_RULES:
        raise ValueError(f"loss_mode must be one of {', '.join(_MODE_RULES)}, got {loss_mode!r}")
    return _method(_MODE_RULES[loss_mode], _settings(_get(config, "policy_loss", None), config))


def check_actor_config(config: Any) -> None:
    """Build the clip method of ``config``'s loss mode now, where it is one of bandpo's (nothing for another mode):
    the actor-level keys that reach a rule's parameters (``clip_ratio_low`` / ``_high``, ``clip_ratio_c``, and
    ``relax``'s interval) are refused when verl builds the actor config, in the driver's ``validate_config``, not
    at the first actor update after the models load and the first rollout (``BandPOPolicyLossConfig`` sees only
    ``actor.policy_loss``).

    Raises:
        ValueError: as :func:`clip_method_from_config`, naming verl's key.
    """
    mode = _get(_get(config, "policy_loss", None), "loss_mode", None)
    if not (isinstance(mode, str) and mode in _MODE_RULES):
        return
    rule = clip_method_from_config(mode, config).clip_rule
    if rule.truncation_c is None:  # clip_ratio_c is then the dual clip's c (DPPO's truncation c otherwise)
        clip_ratio_c = _get(config, "clip_ratio_c", 3.0)
        if not is_dual_clip_c(clip_ratio_c):
            raise ValueError(
                f"actor.clip_ratio_c must be a number > 1 (the dual clip's c of loss_mode {mode!r}), "
                f"got {clip_ratio_c!r}"
            )


def check_actor_configs() -> bool:
    """Wrap verl's ``ActorConfig.__post_init__`` (which FSDP's, Megatron's and the other engines' actor configs
    call through ``super()``) so that it runs :func:`check_actor_config` after verl's own checks. Idempotent;
    :func:`register` calls it. Returns whether the check is in place."""
    try:
        from verl.workers.config import ActorConfig
    except ImportError:  # pragma: no cover - a verl without it: the first update checks
        return False
    original = ActorConfig.__dict__.get("__post_init__")
    if original is None:  # pragma: no cover - verl 0.9 has one
        return False
    if getattr(original, "_bandpo_checks_actor", False):
        return True

    @functools.wraps(original)
    def __post_init__(self: Any) -> None:
        original(self)
        check_actor_config(self)

    __post_init__._bandpo_checks_actor = True  # type: ignore[attr-defined]
    ActorConfig.__post_init__ = __post_init__  # type: ignore[method-assign]
    return True


def radius_schedule_from_config(rule: ClipRule, config: Any) -> RadiusSchedule:
    """The schedule of ``rule``'s radius under verl's actor ``config`` (:func:`clip_method_from_config`'s
    schedule fields and run length, from ``rule``'s ``delta``)."""
    settings = _settings(_get(config, "policy_loss", None), config)
    return _method(rule.name, settings, rule.params()).schedule


def clip_rule_from_config(loss_mode: str, config: Any) -> ClipRule:
    """The clip rule that ``loss_mode`` (:data:`LOSS_MODES`) uses under verl's actor ``config`` for the actor
    update now running: :func:`clip_method_from_config`'s rule (cached per parameter set) or, with a changing
    radius, its rule at the radius of update ``k = N + 1`` (module docstring).

    Raises:
        RuntimeError: a changing radius and no recorded global step, or no run length.
    """
    method = clip_method_from_config(loss_mode, config)
    if method.schedule.is_constant:
        return method.clip_rule
    if method.total_steps is None:
        raise RuntimeError(
            f"policy_loss.delta_schedule={method.schedule.kind!r} needs the run's length: actor.optim.total_training_steps "
            "is not set (verl's trainer sets it before the workers start); set policy_loss.delta_total_steps"
        )
    return method.rule_at_step(update_step())


# ---- the policy losses ---------------------------------------------------------------------------------


def compute_policy_loss_clip_rule(
    old_log_prob: Tensor,
    log_prob: Tensor,
    advantages: Tensor,
    response_mask: Tensor,
    loss_agg_mode: str = "token-mean",
    config: Any = None,
    rollout_is_weights: Tensor | None = None,
    *,
    clip_rule: ClipRule,
) -> tuple[Tensor, dict[str, float]]:
    """verl's policy-loss contract for any bandpo ``ClipRule``: ``(loss, metrics)``.

    Args:
        old_log_prob, log_prob, advantages, response_mask: (B, T), as verl passes them (see
            :func:`per_token_policy_loss`).
        loss_agg_mode: any verl mode (``token-mean``, ``token-sum``, ``seq-mean-token-mean``,
            ``seq-mean-token-sum``, ``seq-mean-token-sum-norm``).
        config: verl's ``ActorConfig`` (or a ``DictConfig``/dict with the same keys): ``clip_ratio_c`` (default 3.0
            as in verl) and ``global_batch_info`` are read.
        rollout_is_weights: (B, T) float or ``None``, verl's rollout-correction weights.
        clip_rule: the bounds.

    Returns:
        ``(loss, metrics)``: () float loss from ``verl.trainer.ppo.core_algos.agg_loss``; metrics maps
        verl's names and ``actor/<bandpo name>`` to Python floats.
    """
    if config is None:
        raise ValueError("config (verl's ActorConfig) is required, got None")
    clip_ratio_c = float(_get(config, "clip_ratio_c", 3.0))
    terms = per_token_policy_loss(
        log_prob,
        old_log_prob,
        advantages,
        response_mask,
        clip_rule,
        clip_ratio_c=clip_ratio_c,
        rollout_is_weights=rollout_is_weights,
    )
    global_batch_info = dict(_get(config, "global_batch_info", None) or {})
    # verl's own mask, as verl's losses pass it: seq-mean-token-mean adds 1e-8 to the counts in its dtype
    loss = agg_loss(
        loss_mat=terms.loss, loss_mask=response_mask, loss_agg_mode=loss_agg_mode, **global_batch_info
    )
    level = _param(_get(config, "policy_loss", None), "diagnostics")
    level = check_diagnostics(
        "policy_loss.diagnostics", _DEFAULTS["diagnostics"].default if level is None else level
    )
    return loss, framework_metrics(terms, VERL_METRIC_NAMES, level, clip_rule, prefix="actor/")


def _mode_loss(mode: str, doc: str) -> Callable[..., tuple[Tensor, dict[str, float]]]:
    """The verl policy-loss function of ``mode``: its clip rule from the config, then the shared objective."""

    def loss_fn(
        old_log_prob: Tensor,
        log_prob: Tensor,
        advantages: Tensor,
        response_mask: Tensor,
        loss_agg_mode: str = "token-mean",
        config: Any = None,
        rollout_is_weights: Tensor | None = None,
    ) -> tuple[Tensor, dict[str, float]]:
        rule = clip_rule_from_config(mode, config)
        return compute_policy_loss_clip_rule(
            old_log_prob,
            log_prob,
            advantages,
            response_mask,
            loss_agg_mode,
            config,
            rollout_is_weights,
            clip_rule=rule,
        )

    loss_fn.__name__ = loss_fn.__qualname__ = f"compute_policy_loss_{mode}"
    loss_fn.__doc__ = doc
    return loss_fn


_MODE_RULES: dict[str, str] = {**loss_names(), "dcpo": "dcpo"}
"""bandpo's loss modes in verl -> their clip rule: ``bandpo`` -> ``band``, ``bandpo_<rule>`` -> ``<rule>`` (as in
SkyRL) and ``dcpo`` (the name it had first)."""

#: The policy-loss modes this module registers in verl, by name (:func:`register` adds the rules registered since).
LOSS_MODES: dict[str, Callable[..., tuple[Tensor, dict[str, float]]]] = {}


def _add_modes() -> None:
    """Add to :data:`_MODE_RULES` and :data:`LOSS_MODES` the modes of the clip rules registered in bandpo since the
    last call (``loss_names()`` is read now: a rule a user registers after this module's import gets its mode)."""
    _MODE_RULES.update({mode: rule for mode, rule in loss_names().items() if mode not in _MODE_RULES})
    for mode, rule in _MODE_RULES.items():
        if mode not in LOSS_MODES:
            LOSS_MODES[mode] = _mode_loss(
                mode,
                f"verl policy loss ``{mode}``: the clipped objective (the truncated one for DPPO's rules) with the "
                f"bounds of clip rule ``{rule}`` (see the module docstring).",
            )


_add_modes()
compute_policy_loss_bandpo = LOSS_MODES["bandpo"]
compute_policy_loss_dcpo = LOSS_MODES["dcpo"]


def _qualname(fn: Callable[..., Any]) -> str:
    return f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', repr(fn))}"


def register(*, overwrite: bool = False) -> list[str]:
    """Put :data:`LOSS_MODES` into verl's policy-loss registry; idempotent.

    Importing this module already calls it (verl's ``verl.plugins`` entry-point loading only imports the
    module). A clip rule registered later (``bandpo.register_clip_rule``) gets its mode ``bandpo_<rule>`` when
    this is called again, in every process that builds the config or computes the loss (the driver and verl's
    workers: import the module that registers the rule, then call this, e.g. from a module named in
    ``VERL_USE_EXTERNAL_MODULES``). It also wraps verl's ``ActorConfig.__post_init__`` (:func:`check_actor_configs`).
    A name that verl already maps to *another* function (e.g. a future built-in ``dcpo``) is left alone unless
    ``overwrite=True``. Warns (``TrlConflictWarning``) when the installed TRL would break verl's workers
    (:func:`trl_conflict`).

    Returns:
        The names that map to this module's losses afterwards.

    Raises:
        ValueError: a name is taken by another function and ``overwrite`` is false (the other names are
            registered first).
    """
    conflict = trl_conflict()
    if conflict is not None:
        warnings.warn(conflict, TrlConflictWarning, stacklevel=2)
    _add_modes()
    check_actor_configs()
    conflicts = []
    for name, fn in LOSS_MODES.items():
        existing = POLICY_LOSS_REGISTRY.get(name)
        if existing is fn:
            continue
        # A reloaded copy of this module counts as ours (same qualified name), anything else is a conflict.
        if existing is None or overwrite or _qualname(existing) == _qualname(fn):
            register_policy_loss(name)(fn)
        else:
            conflicts.append(f"{name!r} (taken by {_qualname(existing)})")
    if conflicts:
        raise ValueError(
            f"verl already registers policy loss(es) {', '.join(conflicts)}; "
            "call bandpo.integrations.verl.register(overwrite=True) to replace them"
        )
    return [name for name, fn in LOSS_MODES.items() if POLICY_LOSS_REGISTRY.get(name) is fn]


try:
    register()
except ValueError as _conflict:
    warnings.warn(str(_conflict), RuntimeWarning, stacklevel=2)
