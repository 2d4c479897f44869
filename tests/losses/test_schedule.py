"""The radius schedule (``bandpo.losses.schedule``): each kind against the authors' formulas written out naively,
endpoints, monotonicity, validation, and the scheduled rule's solver (no KL table built per radius)."""

from __future__ import annotations

import fractions
import itertools
import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import bandpo
from bandpo.core import solvers
from bandpo.losses import (
    RADIUS_SCHEDULES,
    RadiusSchedule,
    make_clip_rule,
    radius_schedule,
    rule_at_radius,
    rule_at_step,
)

KINDS = ["linear", "hold_then_linear", "cosine"]


def naive(kind: str, step: int, total: int, start: float, end: float, hold: float) -> float:
    """The authors' schedules as their verl fork writes them (``decaying_clipbound.py``), progress
    ``s = clip(step / total, 0, 1)``: written in their form (start + slope), not in ``w(s)``."""
    s = min(max(step / total, 0.0), 1.0)
    if kind == "constant":
        return start
    if kind == "linear":
        return start + (end - start) * s
    if kind == "hold_then_linear":
        slope = (end - start) / (1.0 - hold)
        return start if s <= hold else start + slope * (s - hold)
    if kind == "cosine":
        return end + 0.5 * (start - end) * (1.0 + math.cos(math.pi * s))
    raise AssertionError(kind)


def test_registry_holds_the_authors_kinds() -> None:
    assert RADIUS_SCHEDULES.names() == ["constant", "linear", "hold_then_linear", "cosine"]
    assert RadiusSchedule("hold_linear", 0.2, 0.02).kind == "hold_then_linear"  # the fork's name


@pytest.mark.parametrize("kind", ["constant", *KINDS])
@pytest.mark.parametrize(("start", "end"), [(0.2, 0.02), (0.02, 0.2)])
def test_each_kind_matches_the_naive_formula(kind: str, start: float, end: float) -> None:
    total, hold = 37, 0.3
    schedule = RadiusSchedule(kind, start, None if kind == "constant" else end, hold, total)
    for step in range(total + 5):
        expected = naive(kind, step, total, start, end, hold)
        assert schedule.value(step) == pytest.approx(expected, rel=1e-14, abs=1e-15), step


@pytest.mark.parametrize("kind", KINDS)
def test_endpoints(kind: str) -> None:
    schedule = RadiusSchedule(kind, 0.2, 0.02, total_steps=10)
    assert schedule.value(0) == 0.2
    assert schedule.value(10) == 0.02
    assert schedule.value(1000) == schedule.value(10)  # past the end: the end value


def test_hold_then_linear_holds_for_its_share_of_the_run() -> None:
    schedule = RadiusSchedule("hold_then_linear", 0.2, 0.02, hold_frac=0.25, total_steps=100)
    assert [schedule.value(k) for k in range(26)] == [0.2] * 26
    assert schedule.value(26) < 0.2
    assert RadiusSchedule().hold_frac == 0.25  # the authors' effective default
    flat = RadiusSchedule("hold_then_linear", 0.2, 0.02, hold_frac=0.0, total_steps=10)
    linear = RadiusSchedule("linear", 0.2, 0.02, total_steps=10)
    assert [flat.value(k) for k in range(11)] == pytest.approx([linear.value(k) for k in range(11)])


@settings(max_examples=80, deadline=None)
@given(
    kind=st.sampled_from(KINDS),
    start=st.floats(1e-4, 2.0),
    end=st.floats(1e-4, 2.0),
    hold=st.floats(0.0, 0.99),
    total=st.integers(1, 500),
)
def test_monotone_between_start_and_end(kind: str, start: float, end: float, hold: float, total: int) -> None:
    schedule = RadiusSchedule(kind, start, end, hold, total)
    values = [schedule.value(k) for k in range(total + 2)]
    lo, hi = min(start, end), max(start, end)
    tol = 1e-12 * hi
    assert all(lo - tol <= v <= hi + tol for v in values)
    sign = 1.0 if end >= start else -1.0
    assert all(sign * (b - a) >= -tol for a, b in itertools.pairwise(values))
    assert values[0] == start and values[-1] == end


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        (
            {"kind": "linaer", "end": 0.02},
            r"kind: unknown radius schedule 'linaer' \(did you mean 'linear'\?\); ",
        ),
        ({"kind": "linear", "start": 0.0, "end": 0.02}, r"^start must be a finite number > 0, got 0\.0$"),
        ({"kind": "linear", "start": -0.1, "end": 0.02}, r"^start must be a finite number > 0, got -0\.1$"),
        ({"kind": "linear", "end": -0.02}, r"^end must be a finite number > 0, got -0\.02$"),
        ({"kind": "cosine", "end": float("nan")}, r"^end must be a finite number > 0, got nan$"),
        ({"kind": "linear"}, r"^end must be set \(a finite number > 0\) for kind='linear', got None$"),
        ({"kind": "constant", "end": 0.02}, r"^end=0\.02 has no effect with kind='constant'"),
        (
            {"kind": "hold_then_linear", "end": 0.02, "hold_frac": 1.0},
            r"^hold_frac must be .* \[0, 1\), got 1\.0$",
        ),
        ({"kind": "hold_then_linear", "end": 0.02, "hold_frac": -0.1}, r"hold_frac must .* got -0\.1$"),
        ({"kind": "hold_then_linear", "end": 0.02, "hold_frac": "0.3"}, r"hold_frac must .* got '0\.3'$"),
        ({"kind": "hold_then_linear", "end": 0.02, "hold_frac": True}, r"hold_frac must .* got True$"),
        (
            {"kind": "linear", "end": 0.02, "total_steps": 0},
            r"^total_steps must be an integer >= 1 or None, got 0$",
        ),
        (
            {"kind": "linear", "end": 0.02, "total_steps": 2.5},
            r"total_steps must be an integer >= 1 .*got 2\.5$",
        ),
    ],
)
def test_bad_input_is_one_line_naming_the_value(kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match) as err:
        RadiusSchedule(**kwargs)
    assert "\n" not in str(err.value)


def test_hold_frac_takes_any_real_number_as_start_and_end_do() -> None:
    """Any finite real in [0, 1) (``numbers.Real``: a numpy float too), as ``start`` and ``end`` take any."""
    schedule = RadiusSchedule("hold_then_linear", 0.2, 0.02, hold_frac=fractions.Fraction(1, 4))
    assert schedule.hold_frac == 0.25 and type(schedule.hold_frac) is float


def test_labels_name_the_callers_fields() -> None:
    labels = {"kind": "band_delta_schedule", "end": "band_delta_end", "hold_frac": "band_delta_hold_frac"}
    with pytest.raises(ValueError, match=r"^band_delta_end must be a finite number > 0, got 0$"):
        RadiusSchedule("linear", 0.2, 0, labels=labels)
    with pytest.raises(ValueError, match=r"^band_delta_schedule: unknown radius schedule 'cos'"):
        RadiusSchedule("cos", 0.2, 0.02, labels=labels)


def test_increasing_schedule_is_allowed() -> None:
    schedule = RadiusSchedule("linear", 0.02, 0.2, total_steps=4)
    assert [schedule.value(k) for k in range(5)] == pytest.approx([0.02, 0.065, 0.11, 0.155, 0.2])


def test_value_needs_a_step_and_a_length() -> None:
    schedule = RadiusSchedule("linear", 0.2, 0.02)
    with pytest.raises(ValueError, match=r"radius schedule 'linear' needs total_steps .* got None"):
        schedule.value(3)
    assert schedule.for_run(10).value(5) == pytest.approx(0.11)
    with pytest.raises(ValueError, match=r"^step must be an integer >= 0, got -1$"):
        schedule.for_run(10).value(-1)
    assert RadiusSchedule(start=0.07).value(123) == 0.07  # constant: no length needed
    assert schedule.for_run(10).describe() == "linear 0.2 -> 0.02 over 10 steps"
    assert RadiusSchedule(start=0.05).describe() == "constant 0.05"


# ---- the schedule on a clip rule --------------------------------------------------------------------------


def test_radius_schedule_starts_at_the_rules_delta_and_checks_the_rule() -> None:
    rule = make_clip_rule("band", delta=0.2)
    schedule = radius_schedule(rule, "cosine", end=0.02, total_steps=8)
    assert (schedule.start, schedule.end, schedule.total_steps) == (0.2, 0.02, 8)
    with pytest.raises(
        ValueError,
        match=r"kind='linear' sets the radius delta, but clip rule grpo\(.*no delta parameter \(rules with one: "
        r"band, band_upper, band_lower, adaptive_band\)$",
    ):
        radius_schedule(make_clip_rule("grpo"), "linear", end=0.02)
    assert radius_schedule(make_clip_rule("grpo")).is_constant  # constant: any rule
    with pytest.raises(ValueError, match=r"method='table', which builds one table per radius"):
        radius_schedule(make_clip_rule("band", method="table"), "linear", end=0.02)
    with pytest.raises(ValueError, match=r"^hold_frac=0\.3 has no effect with kind='linear'"):
        radius_schedule(rule, "linear", end=0.02, hold_frac=0.3)


@pytest.mark.parametrize(
    ("rule", "end", "largest"),
    [("band", 5000.0, 5000.0), ("adaptive_band", 300.0, 1200.0)],  # adaptive: end * max_scale (4) is checked
)
def test_the_end_radius_is_checked_against_the_rule_when_built(rule: str, end: float, largest: float) -> None:
    """The radius at the last steps must be one the rule allows (KL: at most 1000): refused at construction,
    not on the run's last updates."""
    with pytest.raises(
        ValueError,
        match=rf"^delta_end={end!r} is not a radius clip rule '{rule}' allows: .*"
        rf"\(0, 1000\] for divergence 'kl'.*got {largest!r}",
    ):
        radius_schedule(make_clip_rule(rule), "linear", end=end, total_steps=10, labels={"end": "delta_end"})
    ok = radius_schedule(make_clip_rule(rule), "linear", end=1000.0 / (largest / end), total_steps=10)
    assert rule_at_step(make_clip_rule(rule), ok, 10).delta == ok.end  # the last step builds


def test_constant_schedule_keeps_the_rule_and_its_table() -> None:
    rule = make_clip_rule("band", delta=0.05)
    assert rule_at_step(rule, radius_schedule(rule), 17) is rule


@pytest.mark.parametrize(
    ("divergence", "solver"), [("kl", "newton"), ("tv", "closed_form"), ("js", "newton")]
)
def test_scheduled_rule_uses_the_tensor_radius_solver(divergence: str, solver: str) -> None:
    """Equal to ``band_bounds`` with the step's radius as a per-token tensor (the tensor-radius path, whose
    accuracy against the float64 reference is tests/core/test_bounds.py's)."""
    rule = make_clip_rule("band", divergence=divergence, delta=0.2)
    schedule = radius_schedule(rule, "linear", end=0.02, total_steps=10)
    old = torch.log(torch.rand(64, generator=torch.Generator().manual_seed(0), dtype=torch.float64))
    for step in (1, 5, 10):
        scheduled = rule_at_step(rule, schedule, step)
        assert scheduled.delta == schedule.value(step) and scheduled.method == solver
        delta = torch.full_like(old, schedule.value(step))
        expected = bandpo.band_bounds(old, delta, divergence, cap=10.0)
        torch.testing.assert_close(scheduled.bounds(old), expected, rtol=0, atol=0)


def test_adaptive_band_schedules_its_base_radius() -> None:
    rule = make_clip_rule("adaptive_band", delta=0.2)
    scheduled = rule_at_radius(rule, 0.1)
    entropy = torch.tensor([0.5, 1.0, 2.0], dtype=torch.float64)
    torch.testing.assert_close(scheduled.radius(entropy), rule.radius(entropy) / 2)


def test_a_radius_per_step_builds_no_table(monkeypatch: pytest.MonkeyPatch) -> None:
    """The KL table cache is not thrashed: 50 steps of a decaying radius build no table; the constant radius
    builds one, once."""
    builds = []
    real = solvers.BoundsTable.__init__

    def counting(self, *args, **kwargs):
        builds.append(1)
        real(self, *args, **kwargs)

    monkeypatch.setattr(solvers.BoundsTable, "__init__", counting)
    solvers.clear_table_cache()
    old = torch.log(torch.rand(4, 32, generator=torch.Generator().manual_seed(1)))
    rule = make_clip_rule("band", delta=0.2)
    schedule = radius_schedule(rule, "cosine", end=0.02, total_steps=50)
    for step in range(1, 51):
        for _ in range(3):  # micro-batches of one optimizer step
            rule_at_step(rule, schedule, step).bounds(old)
    assert len(builds) == 0
    constant = radius_schedule(rule)
    for step in range(1, 51):
        rule_at_step(rule, constant, step).bounds(old)
    assert len(builds) == 1
    solvers.clear_table_cache()
