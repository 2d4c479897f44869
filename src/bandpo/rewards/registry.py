"""The reward and verifier registries: names -> TRL reward functions and per-completion verifiers, with the built-in
``dapo``, ``boxed`` and ``last_number``."""

from __future__ import annotations

import functools
import inspect
from typing import Any

from bandpo.registry import Registry
from bandpo.rewards.functions import RewardFunc, VerifierReward
from bandpo.rewards.verifiers import Verifier, verify_boxed, verify_dapo, verify_last_number

__all__ = [
    "REWARDS",
    "VERIFIERS",
    "boxed_reward",
    "dapo_reward",
    "get_reward_func",
    "get_verifier",
    "last_number_reward",
    "register_reward",
    "register_verifier",
    "reward_names",
]

REWARDS: Registry[RewardFunc] = Registry("reward")
"""Reward name -> TRL-style reward function; configs and the CLI select rewards by these names."""

VERIFIERS: Registry[Verifier] = Registry("verifier")
"""Verifier name -> per-completion verifier (the eval reads answers through these); each also has a reward."""


def register_reward(name: str, fn: RewardFunc, aliases: tuple[str, ...] = ()) -> RewardFunc:
    """Register a TRL-style reward function ``fn(prompts, completions, **kwargs) -> list[float | None]``
    under ``name`` (e.g. ``register_reward("countdown", countdown_reward)``). Names must be new.

    Options given to :func:`get_reward_func` are bound to ``fn``'s keyword-only parameters (or passed to its
    ``with_options`` method when it has one). Returns ``fn``.
    """
    if not callable(fn):
        raise ValueError(
            f"reward {name!r} must be callable as fn(prompts, completions, **kwargs), got {fn!r}"
        )
    return REWARDS.register(name, fn, aliases)


def register_verifier(
    name: str, verify: Verifier, aliases: tuple[str, ...] = (), **reward_options: Any
) -> VerifierReward:
    """Register ``verify`` in :data:`VERIFIERS` and its :class:`VerifierReward` (built with
    ``reward_options``) in :data:`REWARDS`, both under ``name``. Returns the reward function."""
    if not callable(verify):
        raise ValueError(
            f"verifier {name!r} must be callable as verify(completion, ground_truth), got {verify!r}"
        )
    reward = VerifierReward(name, verify, **reward_options)
    for key in (name, *aliases):  # check both registries before changing either
        if key in REWARDS or key in VERIFIERS:
            raise ValueError(f"reward {key!r} is already registered")
    VERIFIERS.register(name, verify, aliases)
    REWARDS.register(name, reward, aliases)
    return reward


def reward_names() -> list[str]:
    """Registered reward names (for config validation and CLI choices)."""
    return REWARDS.names()


def get_verifier(name: str) -> Verifier:
    """The per-completion verifier registered as ``name`` (unknown names list the valid ones)."""
    return VERIFIERS.get(name)


def get_reward_func(name: str, **options: Any) -> RewardFunc:
    """The reward function registered as ``name``, with ``options`` applied.

    Options are validated now, before any model is loaded: a :class:`VerifierReward` takes ``answer_key``,
    ``correct_reward``, ``incorrect_reward``, ``unparsed_reward``; another function takes its keyword-only
    parameters (bound with ``functools.partial``, which TRL names after the wrapped function).

    Raises:
        ValueError: unknown name (the message lists the valid names) or unknown option.
    """
    fn = REWARDS.get(name)
    if not options:
        return fn
    with_options = getattr(fn, "with_options", None)
    if callable(with_options):
        return with_options(**options)
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        params = ()  # type: ignore[assignment]
    valid = [p.name for p in params if p.kind is inspect.Parameter.KEYWORD_ONLY]
    unknown = sorted(set(options) - set(valid))
    if unknown:
        raise ValueError(f"reward {name!r} has no option(s) {unknown}; valid options: {valid}")
    return functools.partial(fn, **options)


# ------------------------------------------------------------------------------------------------- built-ins
dapo_reward: VerifierReward = register_verifier("dapo", verify_dapo)
"""TRL reward: :func:`verify_dapo`, +1 correct / -1 otherwise, ground truth in column ``answer``."""

boxed_reward: VerifierReward = register_verifier("boxed", verify_boxed)
"""TRL reward: :func:`verify_boxed`, +1 correct / -1 otherwise, ground truth in column ``answer``."""

last_number_reward: VerifierReward = register_verifier("last_number", verify_last_number)
"""TRL reward: :func:`verify_last_number`, +1 correct / -1 otherwise, ground truth in column ``answer``."""
