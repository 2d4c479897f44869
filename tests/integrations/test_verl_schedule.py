"""The radius schedule in verl (skipped without verl): ``policy_loss.delta_schedule`` / ``delta_end`` /
``delta_hold_frac`` / ``delta_total_steps`` checked when verl builds the actor config, the global step taken from the
actor worker's ``update_weights(global_steps=N)``, and the loss of update ``N + 1`` at its scheduled radius, logged
as ``actor/band/delta``, without a KL table per radius.

The schedule's values are checked against the authors' formulas in tests/losses/test_schedule.py; the loss at a
given radius against an independent reference in tests/losses/test_policy_loss.py. verl's trainer itself (Ray,
GPUs) does not run here: the worker whose ``update_weights`` is wrapped is a stand-in with verl's own ``register``
decorator, the method verl 0.9.1's ``ActorRolloutRefWorker`` defines.
"""

from __future__ import annotations

import asyncio
import inspect
import sys
import types
from typing import Any

import pytest
import torch

pytest.importorskip("verl", reason="verl is not installed (pip install '.[verl]' in bandpo's clone)")

from test_verl import actor_config, call_verl_style, loss_and_grad, make_batch
from verl.single_controller.base.decorator import MAGIC_ATTR, Dispatch, register
from verl.trainer.ppo.core_algos import get_policy_loss_fn

import bandpo
import bandpo.integrations.verl as bverl
import bandpo.integrations.verl_steps as verl_steps
from bandpo.core import solvers
from bandpo.losses import RadiusSchedule

pytestmark = pytest.mark.verl

DECAY = {"delta": 0.2, "delta_schedule": "linear", "delta_end": 0.02}


@pytest.fixture(autouse=True)
def no_recorded_step() -> Any:
    """Each test starts with no global step recorded in this process, and leaves none."""
    bverl.set_global_step(None)
    yield
    bverl.set_global_step(None)


def decaying_config(total: int = 10, **params: Any) -> Any:
    """A verl ``ActorConfig`` with a decaying radius over ``total`` steps (as verl's trainer sets the length)."""
    config = actor_config(**{**DECAY, **params})
    config.optim.total_training_steps = total
    return config


# ---- config time --------------------------------------------------------------------------------------------


def test_actor_config_carries_the_schedule() -> None:
    config = decaying_config(100, delta_schedule="hold_linear", delta_hold_frac=0.3)
    assert (config.policy_loss.delta_schedule, config.policy_loss.delta_end) == ("hold_linear", 0.02)
    band = bandpo.make_clip_rule("band", delta=0.2)
    assert bverl.radius_schedule_from_config(band, config) == RadiusSchedule(
        "hold_then_linear", 0.2, 0.02, 0.3, 100
    )
    explicit = decaying_config(100, delta_total_steps=40)
    assert bverl.radius_schedule_from_config(band, explicit).total_steps == 40
    assert bverl.radius_schedule_from_config(band, actor_config()).is_constant


@pytest.mark.parametrize(
    ("params", "match"),
    [
        (
            {"delta_schedule": "cosin"},
            r"policy_loss\.delta_schedule: unknown radius schedule 'cosin' \(did you mean",
        ),
        ({"delta_schedule": "linear"}, r"policy_loss\.delta_end must be set \(a finite number > 0\)"),
        ({**DECAY, "delta_end": -0.02}, r"policy_loss\.delta_end must be a finite number > 0, got -0\.02"),
        (
            {**DECAY, "delta_schedule": "hold_then_linear", "delta_hold_frac": 1.5},
            r"policy_loss\.delta_hold_frac must be a finite number in \[0, 1\), got 1\.5",
        ),
        (
            {**DECAY, "delta_total_steps": 0},
            r"policy_loss\.delta_total_steps must be an integer >= 1 or None, got 0",
        ),
        (
            {"delta_end": 0.02},
            r"policy_loss\.delta_end=0\.02 has no effect with policy_loss\.delta_schedule='constant'",
        ),
        ({**DECAY, "method": "table"}, r"method='table', which builds one table per radius"),
        (
            {**DECAY, "loss_mode": "dcpo"},
            r"delta_schedule='linear' schedules Band's radius, which loss_mode='dcpo' does not have: use a "
            r"loss_mode with one \(bandpo, bandpo_band_upper, bandpo_band_lower\) or",
        ),
    ],
)
def test_bad_schedule_fails_when_the_config_is_built(params: dict[str, Any], match: str) -> None:
    with pytest.raises(ValueError, match=match) as err:
        bverl.BandPOPolicyLossConfig(**params)
    assert "\n" not in str(err.value)
    with pytest.raises(Exception, match=match):  # hydra wraps it in an InstantiationException
        actor_config(**params)


# ---- the global step ----------------------------------------------------------------------------------------


def stand_in_worker_module(calls: list[Any]) -> types.ModuleType:
    """A module ``verl.workers.engine_workers`` whose ``ActorRolloutRefWorker.update_weights`` is declared as
    verl 0.9.1 declares it (``@register(dispatch_mode=Dispatch.ONE_TO_ALL, blocking=False)``, ``async``)."""

    class ActorRolloutRefWorker:
        @register(dispatch_mode=Dispatch.ONE_TO_ALL, blocking=False)
        async def update_weights(self, global_steps: int | None = None, mode: str = "auto") -> str:
            calls.append((global_steps, mode))
            return "synced"

    module = types.ModuleType("verl.workers.engine_workers")
    module.ActorRolloutRefWorker = ActorRolloutRefWorker  # type: ignore[attr-defined]
    return module


def test_building_a_scheduled_config_makes_update_weights_record_the_step(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls: list[Any] = []
    module = stand_in_worker_module(calls)
    monkeypatch.setitem(sys.modules, "verl.workers.engine_workers", module)
    worker_cls = module.ActorRolloutRefWorker
    original = worker_cls.update_weights

    actor_config()  # a constant radius leaves verl's worker alone
    assert worker_cls.update_weights is original
    decaying_config()  # as the actor worker's init_model builds it
    wrapped = worker_cls.update_weights
    assert wrapped is not original and inspect.iscoroutinefunction(wrapped)
    assert getattr(wrapped, MAGIC_ATTR) == getattr(original, MAGIC_ATTR)  # verl's dispatch still sees it
    decaying_config()
    assert worker_cls.update_weights is wrapped  # idempotent

    worker = worker_cls()
    assert (
        asyncio.run(worker.update_weights(global_steps=0)) == "synced"
    )  # fresh run, after the checkpoint load
    assert verl_steps.update_step() == 1
    asyncio.run(worker.update_weights(7, "naive"))  # positional, as a resumed run's first call could pass it
    assert verl_steps.update_step() == 8
    asyncio.run(worker.update_weights())  # validation's wake-up carries no step
    assert verl_steps.update_step() == 8 and calls == [(0, "auto"), (7, "naive"), (None, "auto")]


def test_without_verls_worker_module_nothing_is_wrapped(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delitem(sys.modules, "verl.workers.engine_workers", raising=False)
    assert bverl.record_global_steps() is False
    decaying_config()  # still valid


# ---- the loss -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("recorded", [0, 3, 9], ids=["first_update", "step_4", "last_update"])
def test_loss_uses_the_radius_of_the_update_it_computes(recorded: int) -> None:
    """Wiring test: with a decaying radius, update ``N + 1``'s loss and gradient are those of a constant radius
    ``schedule.value(N + 1)`` with the same solver (Halley's). The constant-radius loss is ``bandpo.policy_loss``'s
    (test_verl.py's wiring tests), whose numerics are checked against an independent reference in
    tests/losses/test_policy_loss.py::test_matches_naive_reference_values_and_grads."""
    config = decaying_config(10, loss_agg_mode="seq-mean-token-mean")
    bverl.set_global_step(recorded)
    expected = RadiusSchedule("linear", 0.2, 0.02, total_steps=10).value(recorded + 1)
    constant = actor_config(loss_agg_mode="seq-mean-token-mean", delta=expected, method="newton")
    data = make_batch(seed=recorded)
    fn = get_policy_loss_fn("bandpo")
    ours = loss_and_grad(lambda: call_verl_style(fn, data, config), data["log_prob"])
    ref = loss_and_grad(lambda: call_verl_style(fn, data, constant), data["log_prob"])
    torch.testing.assert_close(ours, ref, rtol=0, atol=0)
    assert ours[1].abs().sum() > 0
    assert call_verl_style(fn, data, config)[1]["actor/band/delta"] == expected


def test_radius_per_update_and_after_a_resume_without_building_tables(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    builds: list[int] = []
    real_init = solvers.BoundsTable.__init__

    def counting(self: Any, *args: Any, **kwargs: Any) -> None:
        builds.append(1)
        real_init(self, *args, **kwargs)

    monkeypatch.setattr(solvers.BoundsTable, "__init__", counting)
    solvers.clear_table_cache()
    config, data, fn = decaying_config(4), make_batch(), get_policy_loss_fn("bandpo")
    schedule = RadiusSchedule("linear", 0.2, 0.02, total_steps=4)

    def logged(last_synced: int) -> float:
        bverl.set_global_step(last_synced)
        return call_verl_style(fn, data, config)[1]["actor/band/delta"]

    assert [logged(n) for n in range(4)] == [schedule.value(k) for k in (1, 2, 3, 4)]
    assert logged(2) == schedule.value(3)  # resumed from global_step_2: the first update is step 3
    assert builds == []
    constant = actor_config()
    assert call_verl_style(fn, data, constant)[1]["actor/band/delta"] == 0.05
    assert len(builds) == 1  # the constant radius: KL's table, once
    solvers.clear_table_cache()


def test_missing_step_or_length_raises() -> None:
    data, fn = make_batch(), get_policy_loss_fn("bandpo")
    with pytest.raises(
        RuntimeError, match=r"needs verl's global step.*update_weights\(global_steps=\.\.\.\)"
    ):
        call_verl_style(fn, data, decaying_config())
    bverl.set_global_step(2)
    unset = actor_config(**DECAY)  # optim.total_training_steps -1: no trainer set it
    with pytest.raises(RuntimeError, match=r"needs the run's length.*set policy_loss\.delta_total_steps"):
        call_verl_style(fn, data, unset)
    with pytest.raises(ValueError, match=r"global_steps must be an integer >= 0, got -1"):
        bverl.set_global_step(-1)
