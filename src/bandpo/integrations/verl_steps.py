"""verl's global step in an actor worker's process, for the radius schedule (``bandpo.integrations.verl``'s module
docstring says why and how): :func:`record_global_steps` wraps ``ActorRolloutRefWorker.update_weights`` to record the
step it receives, :func:`set_global_step` records one, and the loss reads the update's step with
:func:`update_step`. Imports no verl: the worker class is looked up where verl has loaded it.
"""

from __future__ import annotations

import functools
import inspect
import sys
from typing import Any

from bandpo.validation import check_int_in

__all__ = ["record_global_steps", "set_global_step", "update_step"]


_global_step: int | None = None  # this process's last update_weights(global_steps=N); None: none seen


def set_global_step(step: int | None) -> None:
    """Record verl's global step ``N`` (an integer >= 0) of this process's last ``update_weights``: the radius
    schedule then gives the next actor update (step ``N + 1``) its radius. ``None`` forgets it."""
    global _global_step
    _global_step = None if step is None else check_int_in("global_steps", step, 0)


def update_step() -> int:
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
