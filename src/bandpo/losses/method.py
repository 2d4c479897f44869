"""The clip method, framework-neutral: a clip rule with its parameters, the radius schedule and the diagnostics level.

Inside bandpo every parameter has one name, the clip rule's (``delta`` is Band's radius, the paper's name). A
framework adapter translates its own config slot into these names once, with one table ``its spelling ->
bandpo's name`` (docs/names.md lists every spelling); the names of the method itself are :data:`METHOD_NAMES`,
every other name is a parameter of the clip rule.

This module imports no framework and knows no framework's spelling: each table lives with its adapter
(``bandpo.integrations.trl_spec.TRL_NAMES``, ``bandpo.integrations.verl.VERL_NAMES``,
``bandpo.integrations.skyrl_section.SKYRL_NAMES``).
"""

from __future__ import annotations

import dataclasses
import functools
import re
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from bandpo.core.checks import NO_CAP_HINT
from bandpo.losses.clip_rules import CLIP_RULES, ClipRule, clip_rule_params, make_clip_rule
from bandpo.losses.diagnostics import check_diagnostics
from bandpo.losses.schedule import RadiusSchedule, radius_schedule, rule_at_radius

__all__ = [
    "LOSS_NAME",
    "METHOD_NAMES",
    "RULE_PREFIX",
    "ClipMethod",
    "clip_method",
    "loss_names",
]

METHOD_NAMES = (
    "rule",
    "params",
    "delta_schedule",
    "delta_end",
    "delta_hold_frac",
    "total_steps",
    "diagnostics",
)
"""bandpo's names of the method's own settings: the rule's name, its parameter dict, the radius schedule (kind,
end radius, hold fraction, the run's length) and the diagnostics level. Every other name is a clip-rule parameter
(``divergence``, ``delta``, ``cap``, ``relax``, ``eps_low``, ...)."""

LOSS_NAME = "bandpo"
"""The policy-loss name of Band in the frameworks that select a loss by name (verl, SkyRL)."""
RULE_PREFIX = "bandpo_"
"""Every other clip rule's policy-loss name there is ``RULE_PREFIX + <rule name>``."""


def loss_names() -> dict[str, str]:
    """Policy-loss name -> clip rule, for every registered rule a framework that passes a policy loss no entropy
    can run: ``bandpo`` -> ``band`` and ``bandpo_<rule>`` -> ``<rule>`` (rules that need the per-token entropy,
    ``adaptive_band``, are left out). Read at call time: a rule registered later is included."""
    names = {LOSS_NAME: "band"}
    for rule in CLIP_RULES.names():
        if rule != "band" and not CLIP_RULES.get(rule).needs_entropy:
            names[RULE_PREFIX + rule] = rule
    return names


def entropy_rule(name: object) -> str | None:
    """The clip rule of ``name`` = ``bandpo_<rule>`` where that rule needs the per-token entropy (``adaptive_band``),
    which is why :func:`loss_names` leaves the name out; ``None`` for any other name."""
    rule = name[len(RULE_PREFIX) :] if isinstance(name, str) and name.startswith(RULE_PREFIX) else None
    return rule if rule in CLIP_RULES and CLIP_RULES.get(rule).needs_entropy else None


_SCHEDULE_FIELDS = {
    "kind": "delta_schedule",
    "start": "delta",
    "end": "delta_end",
    "hold_frac": "delta_hold_frac",
    "total_steps": "total_steps",
}
"""``RadiusSchedule``'s fields -> bandpo's names (the schedule's start is the rule's ``delta``)."""


def freeze(value: Any) -> Any:
    """``value`` with lists and tuples as tuples and mappings as sorted ``(key, value)`` tuples, recursively: a
    hashable cache key for a rule's parameters."""
    if isinstance(value, (list, tuple)):
        return tuple(freeze(v) for v in value)
    if isinstance(value, Mapping):
        return tuple(sorted((k, freeze(v)) for k, v in value.items()))
    return value


@functools.lru_cache(maxsize=128)
def _cached_rule(rule: str, params: tuple[tuple[str, Any], ...]) -> ClipRule:
    return make_clip_rule(rule, **dict(params))


@functools.lru_cache(maxsize=64)
def _cached_rule_at_radius(rule: ClipRule, delta: float) -> ClipRule:
    return rule_at_radius(rule, delta)


@dataclass(frozen=True, eq=True)
class ClipMethod:
    """A clip rule with its parameters, the schedule of its radius and the diagnostics level: what every framework
    adapter builds from its config slot (:func:`clip_method`), validated once at construction.

    Args:
        rule: a registered clip rule name (``bandpo.CLIP_RULES``: ``band``, ``grpo``, ``dcpo``, ...).
        params: the rule's parameters by bandpo's names (``{"divergence": "kl", "delta": 0.05}``); a list
            ``relax`` becomes a tuple.
        delta_schedule: the radius schedule's kind (``bandpo.losses.RADIUS_SCHEDULES``), from the rule's ``delta``
            to ``delta_end``.
        delta_end: the radius at the end of the run (> 0); required by every schedule but ``constant``.
        delta_hold_frac: ``hold_then_linear``'s share of the run at the start radius, in [0, 1); ``None``: 0.25.
        total_steps: the run's length in optimizer steps (>= 1); ``None`` until the framework knows it
            (:meth:`for_run`).
        diagnostics: the diagnostics level (``bandpo.losses.DIAGNOSTICS``), stored as its canonical name.
        spelling: (not compared) bandpo's name -> the caller's spelling of the setting, for the messages, e.g.
            ``{"delta": "band_delta"}``.
        where: (not compared) what the caller's config slot holds, for the messages (``"clip rule configuration"``,
            ``"BandPO policy_loss config"``).
        unset_by_none: (not compared) the rule parameters whose caller's spelling reads ``None`` as "keep the
            rule's default" (TRL's ``band_cap``), so that a message does not offer ``None`` there as "no cap".

    Attributes:
        clip_rule: the built rule (cached per parameter set), at the schedule's start radius.
        schedule: the ``RadiusSchedule`` of its radius.

    Raises:
        ValueError: one line ``invalid <where> (clip_rule='<rule>'): ...`` naming the setting in the caller's
            spelling (the schedule's fields, the diagnostics level, the rule's parameters: ``band_delta must be a
            finite number > 0, got -1``; a parameter the caller has no spelling for keeps bandpo's name), the
            value and what is allowed.
    """

    rule: str = "band"
    params: Mapping[str, Any] = field(default_factory=dict)
    delta_schedule: str = "constant"
    delta_end: float | None = None
    delta_hold_frac: float | None = None
    total_steps: int | None = None
    diagnostics: str = "full"
    spelling: Mapping[str, str] = field(default_factory=dict, repr=False, compare=False)
    where: str = field(default="clip method", repr=False, compare=False)
    unset_by_none: frozenset[str] = field(default=frozenset(), repr=False, compare=False)
    clip_rule: ClipRule = field(init=False, repr=False, compare=False)
    schedule: RadiusSchedule = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(
            self, "diagnostics", check_diagnostics(self.label("diagnostics"), self.diagnostics)
        )
        if not isinstance(self.rule, str):
            raise ValueError(
                f"{self.label('rule')} must be a registered name, got {self.rule!r}; valid names: "
                f"{', '.join(CLIP_RULES.names())}"
            )
        if not isinstance(self.params, Mapping):
            raise ValueError(
                f"{self.label('params')} must be a mapping of the rule's parameters, got {self.params!r}"
            )
        params = {k: tuple(v) if k == "relax" and isinstance(v, list) else v for k, v in self.params.items()}
        object.__setattr__(self, "params", MappingProxyType(params))
        object.__setattr__(self, "spelling", MappingProxyType(dict(self.spelling)))
        try:
            try:
                rule = _cached_rule(self.rule, freeze(params))
            except ValueError as err:
                raise ValueError(self._spelled(str(err))) from err
            labels = {ours: self.label(name) for ours, name in _SCHEDULE_FIELDS.items()}
            schedule = radius_schedule(
                rule,
                self.delta_schedule,
                end=self.delta_end,
                hold_frac=self.delta_hold_frac,
                total_steps=self.total_steps,
                labels=labels,
            )
        except (TypeError, ValueError) as err:  # TypeError: an unhashable parameter value
            raise ValueError(f"invalid {self.where} ({self.setting('rule', self.rule)}): {err}") from err
        object.__setattr__(self, "clip_rule", rule)
        object.__setattr__(self, "schedule", schedule)

    def __hash__(self) -> int:
        return hash((self.rule, freeze(self.params), self.schedule, self.diagnostics))

    def _spelled(self, message: str) -> str:
        """A clip rule's error ``message`` in the caller's spelling: a leading parameter name (``delta must be
        ...``, ``relax eps_low must be ...``) replaced by the caller's spelling of it (``band_delta must be ...``);
        a lookup of an unknown value (``unknown divergence 'foo'; ...``) or unknown parameters prefixed with the
        setting (``band_divergence: unknown divergence 'foo'; ...``). Other messages are returned as they are."""
        if message.startswith("unknown parameter"):
            return f"{self.label('params')}: {message}" if self.label("params") != "params" else message
        names = clip_rule_params(self.rule) if self.rule in CLIP_RULES else {}
        for name in sorted(names, key=len, reverse=True):
            label = self.label(name)
            if label == name:
                continue
            if message.startswith(f"{name} "):
                if name in self.unset_by_none:
                    message = message.replace(
                        NO_CAP_HINT,
                        f" ({label}=None keeps the rule's default; no cap: {self.label('params')}"
                        f"={{{name!r}: None}})",
                    )
                return label + message[len(name) :]
            if message.startswith(f"unknown {name} "):
                return f"{label}: {message}"
        return message

    def label(self, name: str) -> str:
        """The caller's spelling of bandpo's setting ``name`` (``name`` itself where the caller gave none)."""
        return self.spelling.get(name, name)

    def setting(self, name: str, value: Any) -> str:
        """``<the caller's spelling>=<value!r>`` for the messages (``clip rule 'band'`` for an unspelled rule)."""
        label = self.label(name)
        return f"clip rule {value!r}" if label == "rule" else f"{label}={value!r}"

    def for_run(self, total_steps: int) -> ClipMethod:
        """This method over a run of ``total_steps`` optimizer steps (itself when the length is already that)."""
        if self.total_steps == total_steps:
            return self
        return dataclasses.replace(self, total_steps=total_steps)

    def rule_at_step(self, step: int) -> ClipRule:
        """The clip rule optimizer update ``step`` (1-based) uses: :attr:`clip_rule` under a constant schedule
        (its own solver: KL's cached table), else the rule at the schedule's radius of ``step`` with the
        tensor-radius solver (``bandpo.losses.rule_at_radius``; cached per radius).

        Raises:
            ValueError: a changing radius without ``total_steps``.
        """
        if self.schedule.is_constant:
            return self.clip_rule
        return self.rule_at_radius(self.schedule.value(step))

    def rule_at_radius(self, delta: float) -> ClipRule:
        """:attr:`clip_rule` at radius ``delta`` with the tensor-radius solver (cached per radius)."""
        return _cached_rule_at_radius(self.clip_rule, float(delta))


def _takes_none(rule: str, param: str) -> bool:
    """Whether ``param`` of clip rule ``rule`` may be ``None``: its annotation says so (Band's ``cap: float | None``,
    or ``Optional[float]`` on a user's rule), as an object or as text (``from __future__ import annotations``)."""
    for f in dataclasses.fields(CLIP_RULES.get(rule)):
        if f.name == param:
            if isinstance(f.type, str):
                return re.search(r"\bNone\b|\bOptional\[", f.type) is not None
            return f.type is type(None) or type(None) in typing.get_args(f.type)
    return False


def clip_method(
    settings: Mapping[str, Any],
    names: Mapping[str, str | tuple[str, ...]],
    *,
    where: str,
    strict: bool = True,
    rule: str | None = None,
    params: Mapping[str, Any] | None = None,
) -> ClipMethod:
    """The :class:`ClipMethod` of a framework's config slot: the one translation every adapter makes.

    Args:
        settings: the slot's values by the framework's spelling (``{"band_delta": 0.1, "clip_rule": "band"}``).
        names: the framework's table, its spelling -> bandpo's name (:data:`METHOD_NAMES` or a rule parameter),
            or a tuple of names for a setting that gives several rule parameters (verl's ``clip_ratio_low`` is
            ``eps_low`` and DPPO's ``clip_divergence_low``). Settings absent from ``settings`` are unset; the
            rule is ``band`` unless set (a rule setting present with the value ``None`` raises, unless ``rule``
            is given). Where the table spells ``params``, the messages name a parameter set
            there as ``<its spelling>['<name>']`` (``clip_rule_kwargs['delta']``).
        where: the slot, for the messages (``BandPOConfig``, ``policy_loss``, ``trainer.algorithm.bandpo``).
        strict: how a setting of a rule parameter meets the rule. ``True`` (TRL's ``band_*`` shortcuts): ``None``
            is unset; a set value the rule has no parameter for raises, and so does one that ``params`` sets too.
            ``False`` (verl, SkyRL: a section whose every field has a default): a setting applies to the rules
            that have the parameter and is skipped by the others; ``None`` passes where the rule's parameter
            takes ``None`` (Band's ``cap``: no cap) and leaves the rule's default elsewhere (DCPO's cap 10);
            ``params`` adds or replaces parameters.
        rule: the rule, where the framework selects it by another setting than a spelling in ``names`` (verl's
            and SkyRL's policy-loss names, :func:`loss_names`).
        params: parameters that add to or replace the slot's (replacing a ``params`` entry of ``settings``).

    Raises:
        ValueError: one line naming the setting in the framework's spelling, the value and what is allowed.
    """
    spelling: dict[str, str] = {}
    method: dict[str, Any] = {}
    for key, name in names.items():
        for ours in (name,) if isinstance(name, str) else name:
            spelling.setdefault(ours, key)
            if ours in METHOD_NAMES and settings.get(key) is not None:
                method[ours] = settings[key]
    rule_keys = [key for key, name in names.items() if name == "rule" and key in settings]
    if rule is None and any(settings[key] is None for key in rule_keys):
        raise ValueError(
            f"{rule_keys[0]} must be a registered clip rule name, got None; valid names: "
            f"{', '.join(CLIP_RULES.names())}"
        )
    selected = method.pop("rule", "band")
    rule = selected if rule is None else rule
    if isinstance(rule, str):
        try:
            valid = clip_rule_params(rule)
        except ValueError as err:
            raise ValueError(f"{spelling.get('rule', 'rule')}: {err}") from err
    else:
        valid = {}  # ClipMethod names the setting and the valid rules
    extra = method.pop("params", None) if params is None else params
    params_label = spelling.get("params", "params")
    if extra is not None and not isinstance(extra, Mapping):
        raise ValueError(f"{params_label} must be a mapping of the rule's parameters, got {extra!r}")
    extra = dict(extra or {})
    if "params" in spelling:  # a parameter set there is named there in the messages
        spelling.update({ours: f"{params_label}[{ours!r}]" for ours in extra})
    params: dict[str, Any] = {}
    for key, name in names.items():
        if key not in settings:
            continue
        value = settings[key]
        for ours in (name,) if isinstance(name, str) else name:
            if ours in METHOD_NAMES:
                continue
            if strict:
                if value is None:
                    continue
                if ours not in valid:
                    raise ValueError(
                        f"{key}={value!r} does not apply to {spelling.get('rule', 'rule')}={rule!r}, which has no "
                        f"{ours!r} parameter (its parameters: {', '.join(valid) or 'none'})"
                    )
                if ours in extra:
                    raise ValueError(
                        f"{key}={value!r} and {params_label}[{ours!r}]={extra[ours]!r} both set {ours!r}; set it once"
                    )
            elif ours not in valid or (value is None and not _takes_none(rule, ours)):
                continue
            params[ours] = value
    # strict: the shortcuts set these (none also set in params, refused above) and read None as unset
    unset_by_none = frozenset(params) if strict else frozenset()
    return ClipMethod(
        rule, {**params, **extra}, **method, spelling=spelling, where=where, unset_by_none=unset_by_none
    )
