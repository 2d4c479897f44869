"""BandPO in verl: every clip rule as a policy-loss mode, selected by config, without a fork.

verl (>= 0.9) dispatches the actor's policy loss by name through ``verl.trainer.ppo.core_algos``'s registry
(``register_policy_loss`` / ``get_policy_loss_fn``) with the value of ``actor.policy_loss.loss_mode``. This
module puts one mode per clip rule into that registry (:data:`LOSS_MODES`), named as in SkyRL
(``bandpo.losses.method.loss_names``), and keeps ``dcpo``:

``bandpo``
    Band bounds (``bandpo.make_clip_rule("band", ...)``: any registered divergence, radius ``delta``, upper
    bound capped at ``cap``; ``relax=True`` takes the union with verl's fixed interval
    ``[1 - actor.clip_ratio_low, 1 + actor.clip_ratio_high]``).
``dcpo`` (and its other name ``bandpo_dcpo``)
    DCPO's dynamic adaptive clipping with ``eps_low = actor.clip_ratio_low``, ``eps_high =
    actor.clip_ratio_high`` (the authors use 0.16 / 0.20) and the upper bound capped at ``cap``.
``bandpo_<rule>``
    every other registered rule: ``bandpo_grpo`` and ``bandpo_clip_higher`` (``eps_low`` / ``eps_high`` are the
    actor's ``clip_ratio_low`` / ``clip_ratio_high``), ``bandpo_dppo_tv`` and ``bandpo_dppo_kl`` (DPPO's truncated
    objective; thresholds ``clip_ratio_low`` / ``clip_ratio_high`` and ``c = clip_ratio_c``, as verl's own
    ``dppo_tv`` / ``dppo_kl``). Rules that need the policy's per-token entropy (``adaptive_band``) are not offered:
    verl passes a policy loss no entropy.

:data:`VERL_NAMES` translates verl's settings into bandpo's names (``bandpo.losses.method.ClipMethod``); a setting
applies to the rules that have that parameter.

Per token, exactly as ``bandpo.policy_loss`` (docs/method.md#objective), with ``r = exp(clamp(logp - logp_old, -20,
20))``, ``[lo, hi]`` from the rule and ``c = actor.clip_ratio_c``:

    L1 = max(-A r, -A clamp(r, lo, hi));   L = min(L1, -A c) if A < 0 else L1;   L *= rollout_is_weights

then aggregated with verl's own ``agg_loss`` and the actor config's ``global_batch_info`` (dp size, global
token and sequence counts, ``loss_scale_factor``), as verl's built-in ``vanilla`` loss does, so the loss is
invariant to the data-parallel / micro-batch split and every verl ``loss_agg_mode`` works. The KL-to-reference and entropy terms stay verl's
(``actor.use_kl_loss``, ``actor.entropy_coeff``).

Configuration: Band's parameters travel in ``actor.policy_loss`` through the dataclass
:class:`BandPOPolicyLossConfig` (a subclass of verl's ``PolicyLossConfig``), selected with ``_target_``::

    actor_rollout_ref.actor.policy_loss._target_=bandpo.integrations.verl.BandPOPolicyLossConfig
    actor_rollout_ref.actor.policy_loss.loss_mode=bandpo
    +actor_rollout_ref.actor.policy_loss.divergence=kl
    +actor_rollout_ref.actor.policy_loss.delta=0.05

verl builds ``ActorConfig`` with ``omega_conf_to_dataclass`` (hydra ``instantiate``, recursive over
``_target_``), so the parameters are validated when the config is built, before any model is loaded. Without
the ``_target_`` override, ``loss_mode=bandpo`` runs with the defaults of :class:`BandPOPolicyLossConfig`.

The radius schedule (``policy_loss.delta_schedule``: ``constant`` by default, ``linear``, ``hold_then_linear``,
``cosine``; ``bandpo.losses.schedule``, the authors' ``use_decaying_clip``): the radius goes from ``delta`` to
``delta_end`` over ``delta_total_steps`` (default: ``actor.optim.total_training_steps``, which verl's trainer sets
to the run's length before the workers start). Update ``k`` (verl's ``global_steps``, 1-based) uses
``schedule.value(k)``. verl 0.9.1 passes a policy loss neither the step nor the batch (only the actor config), and
the step reaches an actor worker's process in one place: ``ActorRolloutRefWorker.update_weights(global_steps=N)``,
which the trainer calls once after loading a checkpoint (``N`` = the resumed step, 0 for a fresh run) and after
every step's actor update (``N`` = that step). So when a config with a changing radius is built in a process where
verl's ``engine_workers`` is loaded (the actor worker builds it in ``init_model``, before training starts),
:func:`record_global_steps` wraps that method to record ``N`` (:func:`set_global_step`; the call goes on
unchanged), and the loss uses ``k = N + 1``; after a resume, ``N`` is the checkpoint's step, so the radius is the
one the step implies. The wrapper takes effect because verl's trainers run workers inside its colocated
``WorkerDict``, which looks a worker's method up by name at each call. A loss with a changing radius and no
recorded step raises instead of guessing. (Tested with a stand-in worker class carrying verl's own ``register``
decorator; verl's trainer itself needs GPUs and did not run here.)

Registration in every process (the driver and each Ray worker): ``import verl`` (>= 0.9) loads every entry
point of the group ``verl.plugins``; bandpo declares ``bandpo = "bandpo.integrations.verl:register"``.
verl only *loads* the entry point (imports this module and looks ``register`` up; it does not call it and
logs failures at DEBUG level only), so importing this module registers the modes; :func:`register` is
idempotent and can be called again. The ``_target_`` above imports this module too, wherever verl builds
the actor config. For verl 0.6-0.8 (no entry-point discovery) set ``VERL_USE_EXTERNAL_MODULES=
bandpo.integrations.verl`` in the environment of every process (verl imports the listed modules at
``import verl``). verl < 0.6 expected a 4-tuple from policy losses and is not supported.

Metrics (returned as Python floats, one device->host transfer per call; verl reduces them across micro-batches
with a mean): verl's names ``actor/pg_clipfrac`` (clipped term active), ``actor/ppo_kl`` (k1 KL(old || new)),
``actor/pg_clipfrac_lower`` (dual clip active), plus ``bandpo.clip_metrics`` under ``actor/`` (``actor/clip/
frac_up``, ``actor/clip/tail_share``, ``actor/band/hi_mean``, ...) and, for a rule with a radius,
``actor/band/delta`` (the radius the update used). verl adds ``actor/pg_loss`` itself.

One environment for verl, another for TRL. verl 0.9.1's workers import ``AutoModelForCausalLMWithValueHead``
from ``trl`` whenever TRL is installed (``verl.utils.model.patch_valuehead_model``,
``verl.models.transformers.monkey_patch``); TRL 1.16, which ``bandpo[trl]`` needs, no longer has it, so the
actor's ``init_model`` fails with ``ImportError``. :func:`register` detects this (:func:`trl_conflict`) and
warns with both versions (``TrlConflictWarning``): install ``bandpo[verl]`` in an environment without TRL 1.16.

This module needs verl; ``import bandpo`` does not import it.
"""

from __future__ import annotations

import dataclasses
import functools
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from torch import Tensor

from bandpo.integrations.verl_env import TrlConflictWarning, trl_conflict
from bandpo.integrations.verl_steps import record_global_steps, set_global_step, update_step
from bandpo.losses.clip_rules import CLIP_RULES, PAPER_CAP, PAPER_DELTA, ClipRule, clip_rule_params
from bandpo.losses.diagnostics import check_diagnostics, metrics_to_floats
from bandpo.losses.method import RULE_PREFIX, ClipMethod, clip_method, freeze, loss_names
from bandpo.losses.policy_loss import per_token_policy_loss
from bandpo.losses.schedule import RadiusSchedule
from bandpo.losses.terms import TokenTerms, framework_metrics
from bandpo.registry import did_you_mean

try:
    from verl.trainer.ppo.core_algos import POLICY_LOSS_REGISTRY, agg_loss, register_policy_loss
    from verl.workers.config import PolicyLossConfig
except ImportError as _err:  # pragma: no cover - exercised only without verl
    raise ImportError(
        "bandpo.integrations.verl needs verl >= 0.9 (pip install 'bandpo[verl]'); "
        f"importing it failed with: {_err}"
    ) from _err

__all__ = [
    "LOSS_MODES",
    "VERL_METRIC_NAMES",
    "VERL_NAMES",
    "BandPOPolicyLossConfig",
    "TokenTerms",
    "TrlConflictWarning",
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


def _entropy_rule_note(loss_mode: object) -> str:
    """Why ``bandpo_<rule>`` is not a verl loss where the rule needs the per-token entropy (``adaptive_band``):
    verl passes a policy loss none. Empty for any other name."""
    if isinstance(loss_mode, str) and loss_mode.startswith(RULE_PREFIX):
        rule = loss_mode[len(RULE_PREFIX) :]
        if rule in CLIP_RULES and CLIP_RULES.get(rule).needs_entropy:
            return f" ({rule!r} needs the per-token entropy, which verl does not pass to a policy loss)"
    return ""


@dataclass
class BandPOPolicyLossConfig(PolicyLossConfig):
    """verl's ``actor.policy_loss`` config with BandPO's parameters (select it with ``_target_``).

    Inherits every field of verl's ``PolicyLossConfig`` (``loss_mode``, ``rollout_correction``, ...).

    Args:
        loss_mode: verl's registered policy-loss name; bandpo's (:data:`LOSS_MODES`: ``"bandpo"``, the default,
            ``"dcpo"``, ``"bandpo_<rule>"``) use the fields below, each where the mode's rule has that parameter.
        divergence: Band's divergence, a registered name (``bandpo.DIVERGENCES.names()``), default KL.
        delta: Band's trust-region radius, > 0 (the authors' 0.05).
        cap: maximum of the upper bound (>= 1); the authors' ``upper_bound_max`` = 10. ``None``: Band is capped
            by ``1/p`` only, DCPO keeps its own cap 10.
        relax: Band only: union with verl's fixed interval ``[1 - clip_ratio_low, 1 + clip_ratio_high]`` (the
            authors' ablation: it hurts).
        method: Band's ``band_bounds`` solver (``"auto"``, ``"closed_form"``, ``"table"``, ``"newton"``,
            ``"bisection"``).
        delta_schedule: a mode whose rule has a radius (``bandpo``): the radius schedule
            (``bandpo.losses.RADIUS_SCHEDULES``: ``constant``, ``linear``, ``hold_then_linear``, ``cosine``), from
            ``delta`` to ``delta_end``.
        delta_end: the radius at the end of the run (> 0); required by every schedule but ``constant``.
        delta_hold_frac: ``hold_then_linear``'s share of the run at ``delta``, in [0, 1) (default 0.25).
        delta_total_steps: the run's length in verl's global steps (>= 1); ``None``: the actor's
            ``optim.total_training_steps`` (set by verl's trainer).
        diagnostics: the clipping diagnostics the loss logs (``bandpo.losses.DIAGNOSTICS``): ``full`` (default:
            every ``actor/clip/...``, ``actor/band/...``, ``actor/policy/...`` metric), ``basic`` (verl's own three,
            ``actor/pg_clipfrac``, ``actor/ppo_kl``, ``actor/pg_clipfrac_lower``, and the up/down clip fractions)
            or ``none`` (verl's three, as its ``vanilla`` loss logs them, and ``actor/band/delta`` for Band).

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
            raise ValueError(
                f"policy_loss.loss_mode must be a policy loss registered in verl, got {self.loss_mode!r}"
                f"{_entropy_rule_note(self.loss_mode)}; valid names: {', '.join(sorted(POLICY_LOSS_REGISTRY))}"
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
                f"{self.loss_mode!r} does not have: use loss_mode='bandpo' or delta_schedule='constant'"
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


def _check_policy_loss_keys(policy_loss: Any) -> None:
    """A plain ``actor.policy_loss`` (a dict or ``DictConfig``, not a verl config dataclass, whose fields hydra
    checked) holds only :data:`_POLICY_LOSS_KEYS`: a misspelled key (``deltaa``) was read as absent, its default
    used instead. Raises ``ValueError`` naming each unknown key with a "did you mean"."""
    if policy_loss is None or isinstance(policy_loss, PolicyLossConfig) or not hasattr(policy_loss, "keys"):
        return
    unknown = [key for key in policy_loss if key not in _POLICY_LOSS_KEYS]
    if unknown:
        named = ", ".join(f"{key!r}{did_you_mean(key, _POLICY_LOSS_KEYS)}" for key in unknown)
        raise ValueError(
            f"actor.policy_loss: unknown key(s) {named}; valid: {', '.join(_POLICY_LOSS_KEYS)} (a misspelled key "
            "would be ignored and its default used)"
        )


_ACTOR_KEYS = ("clip_ratio", "clip_ratio_low", "clip_ratio_high", "clip_ratio_c", "policy_loss", "optim")
"""The keys of verl's actor config that bandpo reads itself (:func:`_settings`); of ``optim``, only
``total_training_steps`` (:data:`_OPTIM_KEYS`)."""

_OPTIM_KEYS = ("total_training_steps",)


@functools.lru_cache(maxsize=64)
def _misspelled(keys: frozenset[str], owned: tuple[str, ...]) -> tuple[str, ...]:
    """The ``keys`` that are not ``owned`` but close to one of them (:func:`bandpo.registry.did_you_mean`'s
    measure), sorted: the misspellings of bandpo's keys among verl's own."""
    return tuple(sorted(k for k in keys if k not in owned and did_you_mean(k, owned)))


def _check_actor_keys(config: Any) -> None:
    """A plain actor config (a dict or ``DictConfig``, not verl's ``ActorConfig`` dataclass, whose fields hydra
    checked) holds no misspelling of a key bandpo reads (:data:`_ACTOR_KEYS`; ``optim``'s :data:`_OPTIM_KEYS`):
    ``clip_ratio_lo`` was ignored and ``clip_ratio`` used instead. The actor config is verl's and holds verl's
    own keys too (``ppo_epochs``, ``loss_agg_mode``, ...), which bandpo does not know: only a key close to one
    of bandpo's (did-you-mean's similarity) is refused; none of verl 0.9's actor or optimizer fields is.
    Raises ``ValueError`` naming each with a "did you mean"."""
    for where, section, owned in (
        ("actor", config, _ACTOR_KEYS),
        ("actor.optim", _get(config, "optim", None), _OPTIM_KEYS),
    ):
        if section is None or dataclasses.is_dataclass(section) or not hasattr(section, "keys"):
            continue
        unknown = _misspelled(frozenset(k for k in section if isinstance(k, str)), owned)
        if unknown:
            named = ", ".join(f"{key!r}{did_you_mean(key, owned)}" for key in unknown)
            raise ValueError(
                f"{where}: unknown key(s) {named}; bandpo reads {', '.join(owned)} there (a misspelled key "
                "would be ignored and its default used)"
            )


def _settings(policy_loss: Any, config: Any = None) -> dict[str, Any]:
    """verl's settings by :data:`VERL_NAMES`' spelling: the BandPO fields of ``policy_loss`` and, with the actor
    ``config``, its clip ratios and run length (without it, the rules' defaults). A plain dict ``policy_loss``
    with a key that is no field of :class:`BandPOPolicyLossConfig` raises (:func:`_check_policy_loss_keys`), and
    a plain dict ``config`` with a misspelling of a key bandpo reads there (:func:`_check_actor_keys`)."""
    _check_policy_loss_keys(policy_loss)
    if config is not None:
        _check_actor_keys(config)
    settings = {f"policy_loss.{key}": _param(policy_loss, key) for key in _POLICY_LOSS_FIELDS}
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
    # verl's own three metrics at every level: its trainer logs them for every loss
    metrics, ours = framework_metrics(terms, VERL_METRIC_NAMES, level)
    metrics.update({f"actor/{name}": value for name, value in ours.items()})
    floats = metrics_to_floats(metrics)
    delta = getattr(clip_rule, "delta", None)
    if isinstance(delta, (int, float)) and not isinstance(delta, bool):
        floats["actor/band/delta"] = float(delta)
    return loss, floats


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

#: The policy-loss modes this module registers in verl, by name.
LOSS_MODES: dict[str, Callable[..., tuple[Tensor, dict[str, float]]]] = {
    mode: _mode_loss(
        mode,
        f"verl policy loss ``{mode}``: the clipped objective (the truncated one for DPPO's rules) with the bounds of "
        f"clip rule ``{rule}`` (see the module docstring).",
    )
    for mode, rule in _MODE_RULES.items()
}
compute_policy_loss_bandpo = LOSS_MODES["bandpo"]
compute_policy_loss_dcpo = LOSS_MODES["dcpo"]


def _qualname(fn: Callable[..., Any]) -> str:
    return f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', repr(fn))}"


def register(*, overwrite: bool = False) -> list[str]:
    """Put :data:`LOSS_MODES` into verl's policy-loss registry; idempotent.

    Importing this module already calls it (verl's ``verl.plugins`` entry-point loading only imports the
    module). A name that verl already maps to *another* function (e.g. a future built-in ``dcpo``) is left
    alone unless ``overwrite=True``. Warns (``TrlConflictWarning``) when the installed TRL would break verl's
    workers (:func:`trl_conflict`).

    Returns:
        The names that map to this module's losses afterwards.

    Raises:
        ValueError: a name is taken by another function and ``overwrite`` is false (the other names are
            registered first).
    """
    conflict = trl_conflict()
    if conflict is not None:
        warnings.warn(conflict, TrlConflictWarning, stacklevel=2)
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
