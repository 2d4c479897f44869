"""Failure tolerance: :func:`safe_reward_func` wraps a TRL reward function so that a completion whose scoring raises
gets a fixed failure reward instead of ending the run, and counts those failures."""

from __future__ import annotations

import functools
import inspect
import logging
import math
from collections.abc import Mapping, Sequence
from numbers import Real
from typing import Any

from bandpo_lab.rewards.answers import completion_text
from bandpo_lab.rewards.functions import RewardFunc, check_reward_value

logger = logging.getLogger(__name__)


def _noop(*args: Any, **kwargs: Any) -> None:
    return None


class SafeRewardFunc:
    """A TRL reward function that never raises because of one completion (see :func:`safe_reward_func`).

    Attributes:
        fn: the wrapped reward function.
        failure_reward: reward given to a completion whose scoring failed.
        n_completions, n_failures: cumulative counts (completions scored, failed ones).
        last_error: ``repr`` of the most recent exception, or ``None``.
    """

    def __init__(
        self, fn: RewardFunc, failure_reward: float = 0.0, max_logged: int = 3, raise_if_all_fail: bool = True
    ) -> None:
        if not callable(fn):
            raise ValueError(f"fn must be a reward function fn(prompts, completions, **kwargs), got {fn!r}")
        if inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(fn.__call__):
            raise ValueError(f"safe_reward_func does not wrap async reward functions, got {fn!r}")
        self.fn = fn
        self.failure_reward = check_reward_value("failure_reward", failure_reward)
        self.max_logged = int(max_logged)
        self.raise_if_all_fail = bool(raise_if_all_fail)
        target = fn
        while isinstance(target, functools.partial):
            target = target.func
        self.__name__: str = getattr(target, "__name__", type(target).__name__)
        self.n_completions = 0
        self.n_failures = 0
        self.last_error: str | None = None

    def __call__(
        self, prompts: Sequence[Any], completions: Sequence[Any], **kwargs: Any
    ) -> list[float | None]:
        n = len(completions)
        try:
            rewards = self._checked(self.fn(prompts=prompts, completions=completions, **kwargs), n)
            failed = 0
        except Exception as err:  # score one completion at a time to isolate the failures
            self._record(err, None)
            rewards, failed = self._one_by_one(prompts, completions, kwargs)
            if self.raise_if_all_fail and n > 1 and failed == n:
                raise RuntimeError(
                    f"reward {self.__name__!r} failed on all {n} completions of the batch, which points to a "
                    f"configuration error (e.g. a missing dataset column) rather than bad completions; "
                    f"last error: {self.last_error}"
                ) from err
        self.n_completions += n
        self.n_failures += failed
        log_metric = kwargs.get("log_metric")
        if callable(log_metric) and n:
            log_metric(f"rewards/{self.__name__}/failure_frac", failed / n)
        return rewards

    def _one_by_one(
        self, prompts: Sequence[Any], completions: Sequence[Any], kwargs: Mapping[str, Any]
    ) -> tuple[list[float | None], int]:
        n = len(completions)
        rewards: list[float | None] = []
        failed = 0
        for i in range(n):
            item_kwargs = {key: _item(value, i, n) for key, value in kwargs.items()}
            for key in ("log_metric", "log_extra"):  # per-item calls must not log per-item values
                if key in item_kwargs:
                    item_kwargs[key] = _noop
            try:
                out = self._checked(
                    self.fn(prompts=_item(prompts, i, n), completions=[completions[i]], **item_kwargs), 1
                )
                rewards.append(out[0])
            except Exception as err:
                self._record(err, completions[i])
                rewards.append(self.failure_reward)
                failed += 1
        return rewards, failed

    def _checked(self, rewards: object, n: int) -> list[float | None]:
        if isinstance(rewards, (str, bytes, bytearray)) or not isinstance(rewards, Sequence):
            raise ValueError(
                f"reward {self.__name__!r} returned a {type(rewards).__name__}, must return a list of floats "
                "(one per completion)"
            )
        if len(rewards) != n:
            raise ValueError(
                f"reward function {self.__name__!r} must return {n} rewards, got {len(rewards)} values"
            )
        out: list[float | None] = []
        for r in rewards:
            if r is not None and (not isinstance(r, Real) or not math.isfinite(float(r))):
                raise ValueError(
                    f"reward function {self.__name__!r} returned {r!r}; rewards must be finite or None"
                )
            out.append(None if r is None else float(r))
        return out

    def _record(self, err: Exception, completion: object) -> None:
        self.last_error = repr(err)
        if completion is None:
            return  # the batch failed; the per-completion calls report the culprits
        if self.n_failures < self.max_logged:
            try:
                preview = completion_text(completion)[-200:]  # type: ignore[arg-type]
            except TypeError:
                preview = repr(completion)[-200:]
            logger.warning(
                "reward %r failed on a completion (scored %s): %r; completion ends with %r",
                self.__name__,
                self.failure_reward,
                err,
                preview,
                exc_info=err,
            )

    def __repr__(self) -> str:
        return (
            f"SafeRewardFunc({self.fn!r}, failure_reward={self.failure_reward}, n_failures={self.n_failures})"
        )


def _item(value: Any, i: int, n: int) -> Any:
    """Entry ``i`` of a per-completion list (kept a one-element list); other values pass unchanged."""
    if isinstance(value, (list, tuple)) and len(value) == n:
        return value[i : i + 1]
    return value


def safe_reward_func(
    fn: RewardFunc, failure_reward: float = 0.0, *, max_logged: int = 3, raise_if_all_fail: bool = True
) -> SafeRewardFunc:
    """Wrap a TRL reward function so an exception while scoring a completion gives it ``failure_reward``
    instead of ending the run (docs/trl.md, "Rewards and answer checking"): failures are counted (``n_failures``),
    the first ``max_logged`` logged with their traceback; with ``raise_if_all_fail``, a batch of two or more
    completions that all fail raises ``RuntimeError``."""
    return SafeRewardFunc(fn, failure_reward, max_logged, raise_if_all_fail)
