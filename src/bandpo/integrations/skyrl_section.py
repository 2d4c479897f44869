"""SkyRL's section ``trainer.algorithm.bandpo`` -> clip rule and radius schedule, without SkyRL: the fields and their
defaults (``_LossFields``), their checks, the parameters of each rule (:func:`rule_params`), the cached rule of a
config and step (:func:`clip_rule_for`) and its radius schedule (:func:`schedule_for`). ``bandpo.integrations.skyrl``
re-exports the public names; its module docstring describes the section.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping
from typing import Any

from bandpo.losses.clip_rules import ClipRule, clip_rule_params, make_clip_rule
from bandpo.losses.diagnostics import check_diagnostics
from bandpo.losses.method import freeze
from bandpo.losses.schedule import RadiusSchedule, radius_schedule, rule_at_radius

__all__ = ["ANCHORS", "clip_rule_for", "rule_params", "schedule_for"]

#: Where the trust region is centred: SkyRL's recomputed old log-probs, or the rollout engine's log-probs.
ANCHORS = ("old", "rollout")
_SECTION = "trainer.algorithm.bandpo"


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
    """Band's divergence (``bandpo.DIVERGENCES.names()``), for the rules that have one (band)."""
    delta: float = 0.05
    """Band's trust-region radius, > 0 (the authors' 0.05)."""
    cap: float | None = 10.0
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
    """Further parameters of the selected clip rule, replacing the ones above (e.g. ``{clip_divergence_low:
    0.1}`` for ``bandpo_dppo_tv``); unknown names list the rule's parameters."""
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
    """The section's own fields that no clip rule checks (one line naming the field and the value)."""
    unknown = sorted(set(values) - set(_FIELDS))
    if unknown:
        raise ValueError(
            f"unknown field(s) {', '.join(map(repr, unknown))} in {_SECTION}; valid: {', '.join(_FIELDS)}"
        )
    for key in ("relax", "dual_clip"):
        if key in values and not isinstance(values[key], bool):
            raise ValueError(f"{_SECTION}.{key} must be true or false, got {values[key]!r}")
    if "diagnostics" in values:
        check_diagnostics(f"{_SECTION}.diagnostics", values["diagnostics"])
    if "anchor" in values and values["anchor"] not in ANCHORS:
        raise ValueError(f"{_SECTION}.anchor must be one of {', '.join(ANCHORS)}, got {values['anchor']!r}")
    if not isinstance(values.get("rule_kwargs", {}), Mapping):
        raise ValueError(
            f"{_SECTION}.rule_kwargs must be a mapping of clip-rule parameters, got {values['rule_kwargs']!r}"
        )


def rule_params(rule: str, algorithm: Any, section: dict[str, Any] | None = None) -> dict[str, Any]:
    """The parameters of clip rule ``rule`` under SkyRL's ``algorithm`` config (``trainer.algorithm``).

    A rule's ``divergence`` / ``delta`` / ``cap`` / ``method`` come from the section ``trainer.algorithm.bandpo``
    (its dataclass defaults where the config has no section), its ``eps_low`` / ``eps_high`` from SkyRL's
    ``eps_clip_low`` / ``eps_clip_high``, Band's ``relax`` (when ``relax=true``) is SkyRL's fixed interval, and
    ``rule_kwargs`` adds or replaces any parameter. ``cap=None`` means no cap for Band; DCPO keeps its cap 10.
    ``section``: the section as :func:`_section` reads it, if the caller has it already.
    """
    section = _section(algorithm) if section is None else section
    valid = clip_rule_params(rule)
    params: dict[str, Any] = {
        key: section[key] for key in ("divergence", "delta", "cap", "method") if key in valid
    }
    if rule == "dcpo" and params.get("cap") is None:
        params["cap"] = valid["cap"]
    for ours, skyrl in (("eps_low", "eps_clip_low"), ("eps_high", "eps_clip_high")):
        if ours in valid:
            params[ours] = getattr(algorithm, skyrl, valid[ours])
    if "relax" in valid and section["relax"]:
        params["relax"] = (getattr(algorithm, "eps_clip_low", 0.2), getattr(algorithm, "eps_clip_high", 0.2))
    params.update(section["rule_kwargs"] or {})
    return params


class _AlgorithmView:
    """An algorithm config with another section ``bandpo`` (the other fields from ``algorithm``; without one,
    SkyRL's eps fields are absent and their defaults apply)."""

    def __init__(self, bandpo: Any, algorithm: Any = None) -> None:
        self.bandpo = bandpo
        self._algorithm = algorithm

    def __getattr__(self, name: str) -> Any:
        if self._algorithm is None:
            raise AttributeError(name)
        return getattr(self._algorithm, name)


@functools.lru_cache(maxsize=64)
def _cached_rule(rule: str, frozen: tuple[tuple[str, Any], ...]) -> ClipRule:
    return make_clip_rule(rule, **dict(frozen))


def clip_rule_for(rule: str, algorithm: Any, section: dict[str, Any] | None = None) -> ClipRule:
    """The (cached) clip rule ``rule`` with :func:`rule_params` from SkyRL's ``algorithm`` config, at the radius
    of the current step when the trainer has set one (``step_delta``: the radius schedule's value; the rule then
    uses the tensor-radius solver, so no KL table is built per radius: ``bandpo.losses.rule_at_radius``).

    Raises:
        ValueError: one line naming ``trainer.algorithm.bandpo`` and the bad parameter and value.
    """
    section = _section(algorithm) if section is None else section
    params = rule_params(rule, algorithm, section)
    try:
        base = _cached_rule(rule, freeze(params))
    except (TypeError, ValueError) as err:  # TypeError: an unhashable parameter value
        raise ValueError(f"invalid {_SECTION} config for clip rule {rule!r}: {err}") from err
    step_delta = section["step_delta"]
    return base if step_delta is None else _rule_at_radius(base, float(step_delta))


@functools.lru_cache(maxsize=16)
def _rule_at_radius(rule: ClipRule, delta: float) -> ClipRule:
    return rule_at_radius(rule, delta)


#: The radius-schedule fields of the section, by RadiusSchedule field (for the messages).
_SCHEDULE_LABELS = {
    "kind": f"{_SECTION}.delta_schedule",
    "start": f"{_SECTION}.delta",
    "end": f"{_SECTION}.delta_end",
    "hold_frac": f"{_SECTION}.delta_hold_frac",
    "total_steps": "the run's total training steps",
}


def schedule_for(rule: str, algorithm: Any, total_steps: int | None = None) -> RadiusSchedule:
    """The radius schedule of clip rule ``rule`` under SkyRL's ``algorithm`` config (``delta_schedule``,
    ``delta_end``, ``delta_hold_frac``; from the rule's ``delta``), over ``total_steps`` when given.

    Raises:
        ValueError: one line naming the field and the value (a radius <= 0, an unknown kind, a hold fraction
            outside [0, 1), a schedule on a rule without a radius).
    """
    section = _section(algorithm)
    base = clip_rule_for(rule, _AlgorithmView({**section, "step_delta": None}, algorithm))
    try:
        return radius_schedule(
            base,
            section["delta_schedule"],
            end=section["delta_end"],
            hold_frac=section["delta_hold_frac"],
            total_steps=total_steps,
            labels=_SCHEDULE_LABELS,
        )
    except ValueError as err:
        raise ValueError(f"invalid {_SECTION} radius schedule for clip rule {rule!r}: {err}") from err
