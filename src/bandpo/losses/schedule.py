"""The radius schedule: Band's trust-region radius ``delta`` as a function of the training step.

One formula for every kind (``w`` the kind's weight of ``start``, one function per kind below, registered in
:data:`RADIUS_SCHEDULES`)::

    delta(step) = end + (start - end) * w(s),      s = min(step / total_steps, 1)

``w(0) = 1`` and ``w(1) = 0`` (``constant``: ``w = 1``, ``end`` unused), so ``delta`` goes from ``start`` at step 0
to ``end`` at ``total_steps`` and stays there; it is monotone (an increasing schedule, ``start < end``, is
allowed). ``step`` counts optimizer updates from 1 (verl's ``global_steps``), as the authors' ``use_decaying_clip``
schedules do; the kinds side by side, their provenance, the default ``hold_frac`` 0.25 and the cost:
docs/trl.md#the-radius-schedule.

A radius that changes every step must not rebuild Band's KL table (one per scalar radius, cached) at every step:
:func:`rule_at_step` gives a scheduled rule the solver that ``band_bounds`` picks for a tensor radius
(``method="auto"`` resolved with ``scalar_delta=False``), which needs no table; a constant schedule keeps the rule
as it is (KL's cached table).

Use (every framework adapter does this)::

    rule = make_clip_rule("band", delta=0.2)                                  # delta: the schedule's start
    schedule = radius_schedule(rule, "linear", end=0.02, total_steps=1000)    # validated here
    rule_k = rule_at_step(rule, schedule, step)                                # the rule update ``step`` uses
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping
from dataclasses import InitVar, dataclass

from bandpo.core.bounds import resolve_divergence, resolve_method
from bandpo.losses.clip_rules import CLIP_RULES, ClipRule, clip_rule_params
from bandpo.registry import Registry
from bandpo.validation import check_int_in, check_positive_number, is_finite_real

__all__ = [
    "RADIUS_SCHEDULES",
    "RadiusSchedule",
    "check_schedulable",
    "radius_schedule",
    "rule_at_radius",
    "rule_at_step",
]

RadiusWeight = Callable[[float, float], float]
"""``(s, hold_frac) -> w``: the weight of ``start`` at training progress ``s`` in [0, 1]; ``w(0) = 1``,
``w(1) = 0`` (``constant``: 1)."""

RADIUS_SCHEDULES: Registry[RadiusWeight] = Registry("radius schedule")
"""The schedule kinds by name; each entry is the kind's weight ``w(s, hold_frac)`` (module docstring)."""


@RADIUS_SCHEDULES.decorator("constant")
def _constant(s: float, hold_frac: float) -> float:
    return 1.0


@RADIUS_SCHEDULES.decorator("linear")
def _linear(s: float, hold_frac: float) -> float:
    return 1.0 - s


@RADIUS_SCHEDULES.decorator("hold_then_linear", aliases=("hold_linear",))
def _hold_then_linear(s: float, hold_frac: float) -> float:
    return 1.0 if s <= hold_frac else (1.0 - s) / (1.0 - hold_frac)


@RADIUS_SCHEDULES.decorator("cosine")
def _cosine(s: float, hold_frac: float) -> float:
    return 0.5 * (1.0 + math.cos(math.pi * s))


DEFAULT_HOLD_FRAC = 0.25
"""The authors' effective ``hold_frac`` (module docstring)."""


@dataclass(frozen=True)
class RadiusSchedule:
    """``delta`` by training step (module docstring), validated at construction.

    Args:
        kind: a name of :data:`RADIUS_SCHEDULES` (``constant``, ``linear``, ``hold_then_linear`` or its alias
            ``hold_linear``, ``cosine``); stored as the registered name.
        start: the radius at step 0, > 0.
        end: the radius at ``total_steps``, > 0; ``None`` for ``constant`` (which refuses another value than
            ``start``: it would have no effect), required by the other kinds.
        hold_frac: ``hold_then_linear``'s share of the run at ``start``, in [0, 1).
        total_steps: the run's length in optimizer steps, an integer >= 1; ``None`` until known (a framework
            learns it when training starts: :meth:`for_run`), then :meth:`value` of a non-constant kind raises.
        labels: (init only) the names the caller's config gives these fields, for the messages, e.g.
            ``{"end": "band_delta_end"}``.

    Raises:
        ValueError: one line naming the field, the value and what is allowed.
    """

    kind: str = "constant"
    start: float = 0.05
    end: float | None = None
    hold_frac: float = DEFAULT_HOLD_FRAC
    total_steps: int | None = None
    labels: InitVar[Mapping[str, str] | None] = None

    def __post_init__(self, labels: Mapping[str, str] | None) -> None:
        def name(field: str) -> str:
            return (labels or {}).get(field, field)

        try:
            kind = RADIUS_SCHEDULES.canonical(self.kind)
        except ValueError as err:
            raise ValueError(f"{name('kind')}: {err}") from err
        object.__setattr__(self, "kind", kind)
        object.__setattr__(self, "start", check_positive_number(name("start"), self.start))
        if self.end is not None:
            object.__setattr__(self, "end", check_positive_number(name("end"), self.end))
        if kind == "constant":
            if self.end is not None and self.end != self.start:
                others = ", ".join(n for n in RADIUS_SCHEDULES.names() if n != "constant")
                raise ValueError(
                    f"{name('end')}={self.end!r} has no effect with {name('kind')}='constant' (the radius stays "
                    f"{name('start')}={self.start!r}): remove it, or choose a schedule ({others})"
                )
        elif self.end is None:
            raise ValueError(
                f"{name('end')} must be set (a finite number > 0) for {name('kind')}={kind!r}, got None"
            )
        hold = self.hold_frac
        if not is_finite_real(hold) or not 0.0 <= float(hold) < 1.0:
            raise ValueError(f"{name('hold_frac')} must be a finite number in [0, 1), got {hold!r}")
        object.__setattr__(self, "hold_frac", float(hold))
        if self.total_steps is not None:
            check_int_in(name("total_steps"), self.total_steps, 1, note=" or None")
            object.__setattr__(self, "total_steps", int(self.total_steps))

    @property
    def is_constant(self) -> bool:
        """Whether the radius never changes (kind ``constant``)."""
        return self.kind == "constant"

    def for_run(self, total_steps: int) -> RadiusSchedule:
        """This schedule over a run of ``total_steps`` optimizer steps (an integer >= 1)."""
        return dataclasses.replace(self, total_steps=total_steps)

    def value(self, step: int) -> float:
        """The radius of optimizer update ``step`` (an integer >= 0; past ``total_steps``: ``end``).

        Raises:
            ValueError: a negative or non-integer ``step``, or a non-constant kind without ``total_steps``.
        """
        check_int_in("step", step, 0)
        if self.is_constant:
            return self.start
        if self.total_steps is None:
            raise ValueError(
                f"radius schedule {self.kind!r} needs total_steps (the run's length) to give the radius of step "
                f"{step}; got None (use for_run(total_steps))"
            )
        s = min(int(step) / self.total_steps, 1.0)
        end = self.start if self.end is None else self.end
        w = RADIUS_SCHEDULES.get(self.kind)(s, self.hold_frac)
        if w in (0.0, 1.0):  # exactly end / start (the formula may round them by an ulp)
            return end if w == 0.0 else self.start
        return end + (self.start - end) * w

    def describe(self) -> str:
        """One line for logs: ``linear 0.2 -> 0.02 over 1000 steps``, ``constant 0.05``."""
        if self.is_constant:
            return f"constant {self.start:g}"
        hold = f" (hold {self.hold_frac:g})" if self.kind == "hold_then_linear" else ""
        over = "the run" if self.total_steps is None else f"{self.total_steps} steps"
        return f"{self.kind}{hold} {self.start:g} -> {self.end:g} over {over}"


def check_schedulable(rule: ClipRule, what: str = "a radius schedule") -> None:
    """``rule`` must have a scalar radius ``delta`` (``band``, ``band_upper``, ``band_lower``, ``adaptive_band``) and a
    solver that serves any radius without a per-radius table (not ``method="table"``); ``ValueError`` naming the rule
    otherwise."""
    fields = {f.name for f in dataclasses.fields(rule)} if dataclasses.is_dataclass(rule) else set()
    if "delta" not in fields:
        raise ValueError(
            f"{what} sets the radius delta, but clip rule {rule.describe()} has no delta parameter (rules with "
            f"one: {', '.join(n for n in CLIP_RULES.names() if 'delta' in clip_rule_params(n))})"
        )
    if getattr(rule, "method", None) == "table":
        raise ValueError(
            f"{what} changes delta every step, but clip rule {rule.describe()} has method='table', which builds "
            "one table per radius: use method='auto' (Halley's method for KL, closed forms where they exist)"
        )


def radius_schedule(
    rule: ClipRule,
    kind: str = "constant",
    *,
    end: float | None = None,
    hold_frac: float | None = None,
    total_steps: int | None = None,
    labels: Mapping[str, str] | None = None,
) -> RadiusSchedule:
    """The schedule of ``rule``'s radius: from ``rule.delta`` (the start) to ``end`` (validated).

    ``hold_frac`` ``None``: the default (0.25); set with another kind than ``hold_then_linear`` it raises (it
    would have no effect). ``labels`` name the fields as the caller's config does (``kind``, ``end``,
    ``hold_frac``, ``total_steps``; ``start`` is the rule's ``delta``). A non-constant kind needs a schedulable
    rule (:func:`check_schedulable`).
    """
    names = {"start": "delta", **(labels or {})}
    schedule = RadiusSchedule(
        kind,
        getattr(rule, "delta", 1.0),
        end,
        DEFAULT_HOLD_FRAC if hold_frac is None else hold_frac,
        total_steps,
        labels=names,
    )
    if hold_frac is not None and schedule.kind != "hold_then_linear":
        raise ValueError(
            f"{names.get('hold_frac', 'hold_frac')}={hold_frac!r} has no effect with "
            f"{names.get('kind', 'kind')}={schedule.kind!r}: it applies to 'hold_then_linear' only"
        )
    if not schedule.is_constant:
        check_schedulable(rule, f"{names.get('kind', 'kind')}={schedule.kind!r}")
        try:  # every kind moves between start (the rule's own delta) and end: the end is the other extreme
            rule_at_radius(rule, schedule.end)  # type: ignore[arg-type]
        except ValueError as err:
            raise ValueError(
                f"{names.get('end', 'end')}={schedule.end!r} is not a radius clip rule {rule.name!r} allows: {err}"
            ) from err
    return schedule


def rule_at_radius(rule: ClipRule, delta: float) -> ClipRule:
    """``rule`` with radius ``delta`` and, for ``method="auto"``, the solver ``band_bounds`` uses for a tensor
    radius (no per-radius table; module docstring). ``rule`` must be schedulable (:func:`check_schedulable`)."""
    check_schedulable(rule)
    changes: dict[str, object] = {"delta": float(delta)}
    if getattr(rule, "method", None) == "auto":
        changes["method"] = resolve_method(resolve_divergence(rule.divergence), "auto", scalar_delta=False)
    return dataclasses.replace(rule, **changes)


def rule_at_step(rule: ClipRule, schedule: RadiusSchedule, step: int) -> ClipRule:
    """The clip rule optimizer update ``step`` uses: ``rule`` itself under a constant schedule (its own solver:
    KL's cached table), else :func:`rule_at_radius` at ``schedule.value(step)``."""
    if schedule.is_constant:
        return rule
    return rule_at_radius(rule, schedule.value(step))
