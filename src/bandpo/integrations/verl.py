"""BandPO in verl: the policy-loss modes ``bandpo`` and ``dcpo``, selected by config, without a fork.

verl (>= 0.9) dispatches the actor's policy loss by name through ``verl.trainer.ppo.core_algos``'s registry
(``register_policy_loss`` / ``get_policy_loss_fn``) with the value of ``actor.policy_loss.loss_mode``. This
module puts two modes into that registry:

``bandpo``
    Band bounds (``bandpo.make_clip_rule("band", ...)``: any registered divergence, radius ``delta``, upper
    bound capped at ``cap``; ``relax=True`` takes the union with verl's fixed interval
    ``[1 - actor.clip_ratio_low, 1 + actor.clip_ratio_high]``).
``dcpo``
    DCPO's dynamic adaptive clipping with ``eps_low = actor.clip_ratio_low``, ``eps_high =
    actor.clip_ratio_high`` (the authors use 0.16 / 0.20) and the upper bound capped at ``cap``.

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

import functools
import importlib
import importlib.metadata
import inspect
import sys
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from bandpo.losses.clip_rules import ClipRule, make_clip_rule
from bandpo.losses.diagnostics import check_diagnostics
from bandpo.losses.policy_loss import TokenTerms, framework_metrics, per_token_policy_loss
from bandpo.losses.schedule import RadiusSchedule, radius_schedule, rule_at_step
from bandpo.validation import check_int_in

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
    "BandPOPolicyLossConfig",
    "TokenTerms",
    "TrlConflictWarning",
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
    """verl's ``actor.policy_loss`` config with BandPO's parameters (select it with ``_target_``).

    Inherits every field of verl's ``PolicyLossConfig`` (``loss_mode``, ``rollout_correction``, ...).

    Args:
        loss_mode: verl's registered policy-loss name; ``"bandpo"`` (default) or ``"dcpo"`` use the fields below.
        divergence: ``bandpo`` only: a registered divergence name (``bandpo.DIVERGENCES.names()``), default KL.
        delta: ``bandpo`` only: trust-region radius, > 0 (the authors' 0.05).
        cap: maximum of the upper bound (>= 1), both modes; the authors' ``upper_bound_max`` = 10. ``None``:
            Band is capped by ``1/p`` only, DCPO keeps its own cap 10.
        relax: ``bandpo`` only: union with verl's fixed interval ``[1 - clip_ratio_low, 1 + clip_ratio_high]``
            (the authors' ablation: it hurts).
        method: ``bandpo`` only: ``band_bounds`` solver (``"auto"``, ``"closed_form"``, ``"table"``,
            ``"newton"``, ``"bisection"``).
        delta_schedule: ``bandpo`` only: the radius schedule (``bandpo.losses.RADIUS_SCHEDULES``:
            ``constant``, ``linear``, ``hold_then_linear``, ``cosine``), from ``delta`` to ``delta_end``.
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
            with another mode than ``bandpo``, naming the field and the value received.
    """

    loss_mode: str = "bandpo"
    divergence: str = "kl"
    delta: float = 0.05
    cap: float | None = 10.0
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
                f"policy_loss.loss_mode must be a policy loss registered in verl, got {self.loss_mode!r}; valid "
                f"names: {', '.join(sorted(POLICY_LOSS_REGISTRY))}"
            )
        # verl's configs are frozen: checked, not replaced by the canonical name
        check_diagnostics("policy_loss.diagnostics", self.diagnostics)
        if not isinstance(self.relax, bool):
            raise ValueError(f"policy_loss.relax must be true or false, got {self.relax!r}")
        try:
            band = _band_rule(self.divergence, self.delta, self.cap, None, self.method)
            _dcpo_rule(0.0, 0.0, 10.0 if self.cap is None else self.cap)
            schedule = _schedule(
                band, self.delta_schedule, self.delta_end, self.delta_hold_frac, self.delta_total_steps
            )
        except ValueError as err:
            raise ValueError(f"invalid BandPO policy_loss config: {err}") from err
        if not schedule.is_constant and self.loss_mode != "bandpo":
            raise ValueError(
                f"policy_loss.delta_schedule={schedule.kind!r} schedules Band's radius, which loss_mode="
                f"{self.loss_mode!r} does not have: use loss_mode='bandpo' or delta_schedule='constant'"
            )
        if not schedule.is_constant:
            record_global_steps()


# ---- the training step: verl's global_steps, as the actor worker receives it ----------------------------

_global_step: int | None = None  # this process's last update_weights(global_steps=N); None: none seen


def set_global_step(step: int | None) -> None:
    """Record verl's global step ``N`` (an integer >= 0) of this process's last ``update_weights``: the radius
    schedule then gives the next actor update (step ``N + 1``) its radius. ``None`` forgets it."""
    global _global_step
    _global_step = None if step is None else check_int_in("global_steps", step, 0)


def _update_step() -> int:
    """The global step of the actor update now running: the last recorded ``N`` plus 1."""
    if _global_step is None:
        raise RuntimeError(
            "the radius schedule (policy_loss.delta_schedule) needs verl's global step, which reaches an actor "
            "worker only through ActorRolloutRefWorker.update_weights(global_steps=...), and none was recorded in "
            "this process: verl's engine_workers was not loaded when the actor config was built, or the trainer "
            "never calls update_weights; call bandpo.integrations.verl.set_global_step(step) before each update"
        )
    return _global_step + 1


_WORKER_MODULE, _WORKER_CLASS = "verl.workers.engine_workers", "ActorRolloutRefWorker"


def record_global_steps(worker_cls: type | None = None) -> bool:
    """Wrap ``worker_cls.update_weights`` (default: verl's ``ActorRolloutRefWorker``, if its module is loaded;
    nothing is imported) so that each call records its ``global_steps`` (:func:`set_global_step`) and then runs
    unchanged: same coroutine-ness and same verl dispatch attributes (``functools.wraps`` copies them).
    Idempotent. Returns whether the method records the step afterwards."""
    if worker_cls is None:
        module = sys.modules.get(_WORKER_MODULE)
        worker_cls = getattr(module, _WORKER_CLASS, None)
        if worker_cls is None:
            return False
    original = worker_cls.__dict__.get("update_weights")
    if original is None:
        return False
    if getattr(original, "_bandpo_records_global_steps", False):
        return True

    def record(args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        steps = kwargs.get("global_steps", args[0] if args else None)
        if steps is not None:  # verl also calls update_weights() without a step (validation's wake-up)
            set_global_step(int(steps))

    if inspect.iscoroutinefunction(original):

        @functools.wraps(original)
        async def update_weights(self: Any, *args: Any, **kwargs: Any) -> Any:
            record(args, kwargs)
            return await original(self, *args, **kwargs)

    else:

        @functools.wraps(original)
        def update_weights(self: Any, *args: Any, **kwargs: Any) -> Any:
            record(args, kwargs)
            return original(self, *args, **kwargs)

    update_weights._bandpo_records_global_steps = True  # type: ignore[attr-defined]
    worker_cls.update_weights = update_weights  # type: ignore[attr-defined]
    return True


# ---- config -> clip rule -------------------------------------------------------------------------------


@functools.lru_cache(maxsize=64)
def _band_rule(
    divergence: str, delta: float, cap: float | None, relax: tuple[float, float] | None, method: str
) -> ClipRule:
    return make_clip_rule("band", divergence=divergence, delta=delta, cap=cap, relax=relax, method=method)


@functools.lru_cache(maxsize=64)
def _dcpo_rule(eps_low: float, eps_high: float, cap: float) -> ClipRule:
    return make_clip_rule("dcpo", eps_low=eps_low, eps_high=eps_high, cap=cap)


_SCHEDULE_LABELS = {
    name: f"policy_loss.{key}"
    for name, key in (
        ("kind", "delta_schedule"),
        ("start", "delta"),
        ("end", "delta_end"),
        ("hold_frac", "delta_hold_frac"),
        ("total_steps", "delta_total_steps"),
    )
}


@functools.lru_cache(maxsize=64)
def _schedule(
    rule: ClipRule, kind: str, end: float | None, hold_frac: float | None, total: int | None
) -> RadiusSchedule:
    return radius_schedule(
        rule, kind, end=end, hold_frac=hold_frac, total_steps=total, labels=_SCHEDULE_LABELS
    )


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


def radius_schedule_from_config(rule: ClipRule, config: Any) -> RadiusSchedule:
    """The schedule of ``rule``'s radius under verl's actor ``config``: ``policy_loss.delta_schedule`` /
    ``delta_end`` / ``delta_hold_frac`` and the run's length, ``policy_loss.delta_total_steps`` or else the actor's
    ``optim.total_training_steps`` (verl's trainer sets it; ``-1`` before: ``None``). Cached per parameter set."""
    policy_loss = _get(config, "policy_loss", None)
    total = _param(policy_loss, "delta_total_steps")
    if total is None:
        total = _get(_get(config, "optim", None) or {}, "total_training_steps", -1)
        total = int(total) if int(total) > 0 else None
    return _schedule(
        rule,
        str(_param(policy_loss, "delta_schedule")),
        _param(policy_loss, "delta_end"),
        _param(policy_loss, "delta_hold_frac"),
        total,
    )


def clip_rule_from_config(loss_mode: str, config: Any) -> ClipRule:
    """The clip rule that ``loss_mode`` (``"bandpo"`` or ``"dcpo"``) uses under verl's actor ``config`` for the
    actor update now running.

    Reads Band's parameters from ``config.policy_loss`` (defaults of :class:`BandPOPolicyLossConfig` where
    absent) and the fixed clip ratios (``clip_ratio_low`` / ``clip_ratio_high``, falling back to
    ``clip_ratio``) from the actor config. Rules are cached per parameter set. With a changing radius
    (:func:`radius_schedule_from_config`), the radius of update ``k = N + 1`` (module docstring).

    Raises:
        RuntimeError: a changing radius and no recorded global step, or no run length.
    """
    if loss_mode not in LOSS_MODES:
        raise ValueError(f"loss_mode must be one of {', '.join(LOSS_MODES)}, got {loss_mode!r}")
    policy_loss = _get(config, "policy_loss", None)
    cap = _param(policy_loss, "cap")
    cap = None if cap is None else float(cap)
    eps_low, eps_high = _clip_ratios(config)
    if loss_mode == "dcpo":
        return _dcpo_rule(eps_low, eps_high, 10.0 if cap is None else cap)
    relax = _param(policy_loss, "relax")
    rule = _band_rule(
        str(_param(policy_loss, "divergence")),
        float(_param(policy_loss, "delta")),
        cap,
        (eps_low, eps_high) if relax else None,
        str(_param(policy_loss, "method")),
    )
    schedule = radius_schedule_from_config(rule, config)
    if schedule.is_constant:
        return rule
    if schedule.total_steps is None:
        raise RuntimeError(
            f"policy_loss.delta_schedule={schedule.kind!r} needs the run's length: actor.optim.total_training_steps "
            "is not set (verl's trainer sets it before the workers start); set policy_loss.delta_total_steps"
        )
    return rule_at_step(rule, schedule, _update_step())


# ---- the policy losses ---------------------------------------------------------------------------------


def _to_floats(metrics: dict[str, Tensor]) -> dict[str, float]:
    """Detached () tensors -> Python floats with a single device->host transfer."""
    if not metrics:
        return {}
    values = torch.stack([v.detach().to(torch.float64).reshape(()) for v in metrics.values()]).tolist()
    return dict(zip(metrics, values))


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
    floats = _to_floats(metrics)
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


compute_policy_loss_bandpo = _mode_loss(
    "bandpo",
    "verl policy loss ``bandpo``: the clipped objective with Band bounds (see the module docstring).",
)
compute_policy_loss_dcpo = _mode_loss(
    "dcpo",
    "verl policy loss ``dcpo``: the clipped objective with DCPO's bounds (eps from the actor's clip ratios).",
)


#: The policy-loss modes this module registers in verl, by name.
LOSS_MODES: dict[str, Callable[..., tuple[Tensor, dict[str, float]]]] = {
    "bandpo": compute_policy_loss_bandpo,
    "dcpo": compute_policy_loss_dcpo,
}


def _qualname(fn: Callable[..., Any]) -> str:
    return f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', repr(fn))}"


class TrlConflictWarning(UserWarning):
    """The installed TRL lacks the class verl's workers import from it (see :func:`trl_conflict`)."""


_VALUE_HEAD = "AutoModelForCausalLMWithValueHead"


def _version(distribution: str, module: Any = None) -> str:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return str(getattr(module, "__version__", "unknown"))


def trl_conflict() -> str | None:
    """Why verl's workers will fail to import from the installed TRL, or ``None`` (no TRL, or a TRL that works).

    verl 0.9.1 imports ``AutoModelForCausalLMWithValueHead`` from ``trl.experimental.ppo``, else from ``trl``,
    whenever TRL is importable (``verl.utils.model.patch_valuehead_model``, ``verl.models.transformers.
    monkey_patch``). TRL 1.16 has neither, so a verl actor's ``init_model`` raises ``ImportError``. This makes
    the same look-ups, without TRL's warnings, and returns a message naming both versions and the fix.
    """
    try:
        trl = importlib.import_module("trl")
    except ModuleNotFoundError as err:
        if err.name == "trl":
            return None  # no TRL: verl skips the value-head patch
        trl, problem = None, f"importing trl fails ({err})"
    except Exception as err:  # a broken TRL fails verl's import the same way
        trl, problem = None, f"importing trl fails ({type(err).__name__}: {err})"
    else:
        problem = f"trl has no {_VALUE_HEAD} (neither trl.experimental.ppo nor trl exports it)"
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # trl.experimental warns on import
            for module_name in ("trl.experimental.ppo", "trl"):
                try:
                    module = importlib.import_module(module_name)
                    if hasattr(module, _VALUE_HEAD):
                        return None
                except Exception:  # a missing module is the case looked for
                    continue
    trl_version = _version("trl", trl)
    verl_version = _version("verl", importlib.import_module("verl"))
    return (
        f"trl {trl_version} is installed next to verl {verl_version}, and verl's workers will fail: they import "
        f"{_VALUE_HEAD} from trl when it is installed (verl.utils.model, verl.models.transformers.monkey_patch), "
        f"but {problem}, so the actor's init_model raises ImportError. Fix: run verl in a separate environment "
        f"without trl {trl_version} (pip install 'bandpo[verl]' there; keep 'bandpo[trl]' for BandPOTrainer in "
        "another), or pip uninstall trl in this one."
    )


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
