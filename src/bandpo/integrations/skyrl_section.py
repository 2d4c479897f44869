"""SkyRL's section ``trainer.algorithm.bandpo`` -> the clip method, without SkyRL: the section's fields and their
defaults (``_LossFields``), the checks of the fields that are SkyRL's own, and :data:`SKYRL_NAMES`, the one table
from SkyRL's spelling to bandpo's names, which :func:`clip_method_for` translates a config with
(``bandpo.losses.method.clip_method``, as verl's ``VERL_NAMES`` and TRL's ``trl_spec.TRL_NAMES``). ``bandpo.integrations.skyrl``
re-exports the public names; docs/skyrl.md describes the section.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping
from typing import Any

from bandpo.losses.clip_rules import PAPER_CAP, PAPER_DELTA, ClipRule
from bandpo.losses.method import ClipMethod, clip_method, freeze
from bandpo.losses.schedule import RadiusSchedule
from bandpo.validation import check_not_none

__all__ = ["ANCHORS", "SKYRL_NAMES", "clip_method_for", "clip_rule_for", "rule_params", "schedule_for"]

#: Where the trust region is centred: SkyRL's recomputed old log-probs, or the rollout engine's log-probs.
ANCHORS = ("old", "rollout")
_SECTION = "trainer.algorithm.bandpo"

SKYRL_NAMES: dict[str, str] = {
    "trainer.algorithm.bandpo.divergence": "divergence",
    "trainer.algorithm.bandpo.delta": "delta",
    "trainer.algorithm.bandpo.cap": "cap",
    "trainer.algorithm.bandpo.relax": "relax",
    "trainer.algorithm.bandpo.method": "method",
    "trainer.algorithm.bandpo.rule_kwargs": "params",
    "trainer.algorithm.bandpo.delta_schedule": "delta_schedule",
    "trainer.algorithm.bandpo.delta_end": "delta_end",
    "trainer.algorithm.bandpo.delta_hold_frac": "delta_hold_frac",
    "trainer.algorithm.bandpo.diagnostics": "diagnostics",
    "trainer.algorithm.eps_clip_low": "eps_low",
    "trainer.algorithm.eps_clip_high": "eps_high",
    "trainer.algorithm.dppo.delta_low": "clip_divergence_low",
    "trainer.algorithm.dppo.delta_high": "clip_divergence_high",
    "total_training_steps": "total_steps",
}
"""SkyRL's spelling (the keys of ``trainer.algorithm``) -> bandpo's name. ``bandpo.relax`` is a bool in SkyRL:
``true`` is Band's ``relax = (eps_clip_low, eps_clip_high)``; ``dppo.delta_low`` / ``dppo.delta_high`` are DPPO's
thresholds, as for SkyRL's own ``dppo`` (its ``dppo.dppo_type`` is not read: the rule, TV or KL, comes from the loss
name); ``bandpo.rule_kwargs`` adds or replaces any parameter of the rule (DPPO's truncation ``c``);
``total_training_steps`` is the run's length, which SkyRL's
trainer computes (``RayPPOTrainer.total_training_steps``). The rule comes from ``policy_loss_type``
(``bandpo.losses.method.loss_names``). Not in the table, as no clip-method setting: ``bandpo.dual_clip`` and
``bandpo.anchor`` (how the loss uses the rule) and ``bandpo.step_delta`` (the trainer's radius of the step)."""

#: The section's fields in the table, by field name -> SkyRL's spelling.
_SECTION_KEYS = {key.rsplit(".", 1)[1]: key for key in SKYRL_NAMES if key.startswith(f"{_SECTION}.")}


def _section_values(section: Any) -> dict[str, Any]:
    """The section as a dict (a :class:`BandPOLossConfig`, a mapping, or ``None`` for the defaults)."""
    if section is None:
        return {}
    if dataclasses.is_dataclass(section):
        return {f.name: getattr(section, f.name) for f in dataclasses.fields(section)}
    if isinstance(section, Mapping):
        return dict(section)
    raise ValueError(f"{_SECTION} must be a mapping of BandPO's parameters, got {section!r}")


@dataclasses.dataclass
class _LossFields:
    """The fields of the section ``trainer.algorithm.bandpo`` (:class:`BandPOLossConfig` adds SkyRL's base class
    and the checks); without the section a config runs with these defaults."""

    divergence: str = "kl"
    """Band's divergence (``bandpo.DIVERGENCES.names()``), for the rules that have one (band, band_upper,
    band_lower)."""
    delta: float = PAPER_DELTA
    """Band's trust-region radius, > 0 (the authors' 0.05)."""
    cap: float | None = PAPER_CAP
    """Maximum of the upper bound, >= 1 (the authors' 10); ``None``: Band capped by ``1/p`` only (DCPO keeps 10)."""
    relax: bool = False
    """Band only: join SkyRL's fixed interval ``[1 - eps_clip_low, 1 + eps_clip_high]`` (an ablation: it hurts)."""
    method: str = "auto"
    """Band's solver: ``auto``, ``closed_form``, ``table``, ``newton`` or ``bisection``."""
    dual_clip: bool = True
    """Cap the loss of ``A < 0`` tokens at ``-A clip_ratio_c`` (SkyRL's ``dual_clip``; its ``regular`` has none)."""
    anchor: str = "old"
    """The log-probs the trust region is centred on: ``old`` (SkyRL's recomputed ``old_log_probs``: what Band is
    defined with, in synchronous training) or ``rollout`` (the inference engine's log-probs, as SkyRL's ``dppo``
    and ``rollout_is``; ``old_log_probs`` when the batch has none)."""
    rule_kwargs: dict[str, Any] = dataclasses.field(default_factory=dict)
    """Further parameters of the selected clip rule, replacing the ones above (e.g. ``{truncation_c: 10}`` for
    ``bandpo_dppo_tv``); unknown names list the rule's parameters."""
    delta_schedule: str = "constant"
    """How the radius changes over the run (``bandpo.losses.RADIUS_SCHEDULES``: ``constant``, ``linear``,
    ``hold_then_linear``, ``cosine``): from ``delta`` at the start to ``delta_end`` at SkyRL's last training step."""
    delta_end: float | None = None
    """The radius at the end of the run (> 0); required by every schedule but ``constant``."""
    delta_hold_frac: float | None = None
    """``hold_then_linear``'s share of the run at ``delta``, in [0, 1) (``None``: the schedule's default 0.25)."""
    diagnostics: str = "full"
    """The clipping diagnostics the loss logs (``bandpo.losses.DIAGNOSTICS``): ``full`` (every ``clip/``, ``band/``
    and ``policy/`` metric), ``basic`` (the clip fractions and ``policy/ppo_kl``) or ``none`` (SkyRL's
    ``clip_ratio``, as its own losses log it; ``band/delta`` and the off-policy-correction metrics stay at every
    level). The loss is the same at every level."""
    step_delta: float | None = None
    """Set by bandpo's SkyRL trainer at every training step (the schedule's radius of that step, sent to the
    workers with the batch); ``None``: ``delta``. Not a setting."""


_FIELDS = tuple(f.name for f in dataclasses.fields(_LossFields))


def _section(algorithm: Any) -> dict[str, Any]:
    """The section ``bandpo`` of SkyRL's ``algorithm`` config as a dict, defaults filled in and checked (a
    BandPOLossConfig was checked when it was built: read as it is, the loss's fast path)."""
    section = getattr(algorithm, "bandpo", None)
    if isinstance(section, _LossFields):
        return {name: getattr(section, name) for name in _FIELDS}
    values = _section_values(section)
    _check_section(values)
    defaults = _LossFields()
    return {**{name: getattr(defaults, name) for name in _FIELDS}, **values}


def _check_section(values: Mapping[str, Any]) -> None:
    """The section's fields that :class:`ClipMethod` does not check (the section's own: its field names, SkyRL's
    booleans, the anchor, the type of ``rule_kwargs``); one line naming the field, the value and what is allowed."""
    unknown = sorted(set(values) - set(_FIELDS))
    if unknown:
        raise ValueError(
            f"unknown field(s) {', '.join(map(repr, unknown))} in {_SECTION}; valid: {', '.join(_FIELDS)}"
        )
    for key in ("relax", "dual_clip"):
        if key in values and not isinstance(values[key], bool):
            raise ValueError(f"{_SECTION}.{key} must be true or false, got {values[key]!r}")
    if "anchor" in values and values["anchor"] not in ANCHORS:
        raise ValueError(f"{_SECTION}.anchor must be one of {', '.join(ANCHORS)}, got {values['anchor']!r}")
    if not isinstance(values.get("rule_kwargs", {}), Mapping):
        raise ValueError(
            f"{_SECTION}.rule_kwargs must be a mapping of clip-rule parameters, got {values['rule_kwargs']!r}"
        )
    check_not_none(_SECTION, values, _LossFields)


def _settings(section: Mapping[str, Any], algorithm: Any, total_steps: int | None) -> dict[str, Any]:
    """SkyRL's settings by :data:`SKYRL_NAMES`' spelling but ``rule_kwargs`` (the caller passes those as the
    rule's parameters): the section's fields, the ``algorithm`` config's ``eps_clip_low`` / ``eps_clip_high`` and
    ``dppo.delta_low`` / ``dppo.delta_high`` (absent: the rules' defaults), ``relax=true`` as SkyRL's interval (0.2
    each without an algorithm config) and the run's length."""
    settings = {
        key: section[name] for name, key in _SECTION_KEYS.items() if name not in ("relax", "rule_kwargs")
    }
    low, high = (getattr(algorithm, f"eps_clip_{side}", None) for side in ("low", "high"))
    settings.update({"trainer.algorithm.eps_clip_low": low, "trainer.algorithm.eps_clip_high": high})
    dppo = getattr(algorithm, "dppo", None)
    for side in ("low", "high"):
        key = f"delta_{side}"
        value = dppo.get(key) if isinstance(dppo, Mapping) else getattr(dppo, key, None)
        settings[f"trainer.algorithm.dppo.{key}"] = value
    if section["relax"]:
        settings[f"{_SECTION}.relax"] = (0.2 if low is None else low, 0.2 if high is None else high)
    settings["total_training_steps"] = total_steps
    return settings


def clip_method_for(
    rule: str, algorithm: Any, section: dict[str, Any] | None = None, total_steps: int | None = None
) -> ClipMethod:
    """The clip method of clip rule ``rule`` under SkyRL's ``algorithm`` config (``trainer.algorithm``):
    :data:`SKYRL_NAMES` translates the section ``trainer.algorithm.bandpo`` (its defaults where the config has
    none), SkyRL's ``eps_clip_low`` / ``eps_clip_high`` and the run's length ``total_steps``, each applied to the
    rules that have that parameter (``clip_method`` with ``strict=False``). ``section``: the section as
    :func:`_section` reads it, if the caller has it already. Cached per parameter set.

    Raises:
        ValueError: one line ``invalid trainer.algorithm.bandpo config (clip rule '<rule>'): ...`` naming the
            setting in SkyRL's spelling (or the rule's parameter), the value and what is allowed.
    """
    section = _section(algorithm) if section is None else section
    settings = _settings(section, algorithm, total_steps)
    try:
        return _cached_method(rule, freeze(settings), freeze(section["rule_kwargs"] or {}))
    except TypeError as err:  # an unhashable value
        raise ValueError(f"invalid {_SECTION} config (clip rule {rule!r}): {err}") from err


@functools.lru_cache(maxsize=64)
def _cached_method(rule: str, settings: Any, params: Any) -> ClipMethod:
    return clip_method(
        dict(settings), SKYRL_NAMES, where=f"{_SECTION} config", strict=False, rule=rule, params=dict(params)
    )


def rule_params(rule: str, algorithm: Any, section: dict[str, Any] | None = None) -> dict[str, Any]:
    """The parameters of clip rule ``rule`` under SkyRL's ``algorithm`` config (:func:`clip_method_for`'s, as
    :data:`SKYRL_NAMES` translates them); parameters not set keep the rule's defaults."""
    return dict(clip_method_for(rule, algorithm, section).params)


def clip_rule_for(rule: str, algorithm: Any, section: dict[str, Any] | None = None) -> ClipRule:
    """The (cached) clip rule ``rule`` of :func:`clip_method_for`, at the radius of the current step when the
    trainer has set one (``step_delta``: the radius schedule's value; the rule then uses the tensor-radius solver,
    so no KL table is built per radius: ``ClipMethod.rule_at_radius``).

    Raises:
        ValueError: one line naming ``trainer.algorithm.bandpo`` and the bad setting and value.
    """
    section = _section(algorithm) if section is None else section
    return _step_rule(clip_method_for(rule, algorithm, section), section)


def _step_rule(method: ClipMethod, section: Mapping[str, Any]) -> ClipRule:
    """``method``'s rule at the radius of the step the trainer set (``step_delta``), else at its start radius."""
    step_delta = section["step_delta"]
    return method.clip_rule if step_delta is None else method.rule_at_radius(step_delta)


def schedule_for(rule: str, algorithm: Any, total_steps: int | None = None) -> RadiusSchedule:
    """The radius schedule of clip rule ``rule`` under SkyRL's ``algorithm`` config (``delta_schedule``,
    ``delta_end``, ``delta_hold_frac``; from the rule's ``delta``), over ``total_steps`` when given.

    Raises:
        ValueError: one line naming the field and the value (a radius <= 0, an unknown kind, a hold fraction
            outside [0, 1), a schedule on a rule without a radius).
    """
    return clip_method_for(rule, algorithm, total_steps=total_steps).schedule
