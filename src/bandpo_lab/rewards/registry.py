"""The reward and verifier registries: names -> TRL reward functions and per-completion verifiers, with the built-in
``dapo``, ``boxed`` and ``last_number``."""

from __future__ import annotations

import functools
import inspect
from typing import Any

from bandpo.registry import Registry
from bandpo_lab.rewards.functions import RewardFunc, VerifierReward
from bandpo_lab.rewards.verifiers import Verifier, verify_boxed, verify_dapo, verify_last_number

REWARDS: Registry[RewardFunc] = Registry("reward")
"""Reward name -> TRL-style reward function; configs and the CLI select rewards by these names."""

VERIFIERS: Registry[Verifier] = Registry("verifier")
"""Verifier name -> per-completion verifier (the eval reads answers through these); each also has a reward."""


def register_reward(name: str, fn: RewardFunc, aliases: tuple[str, ...] = ()) -> RewardFunc:
    """Register a TRL-style reward function ``fn(prompts, completions, **kwargs) -> list[float | None]`` under a
    new ``name`` (its options: :func:`get_reward_func`); returns ``fn``."""
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


def _import_reward(path: str) -> RewardFunc:
    """The reward function at import path ``module:attribute`` (:func:`get_reward_func`)."""
    import importlib

    module_name, _, attr = path.partition(":")
    if not module_name or not attr or ":" in attr:
        raise ValueError(f"a reward import path must look like 'my_pkg.rewards:score', got {path!r}")
    try:
        module = importlib.import_module(module_name)
    except ImportError as err:
        raise ValueError(f"reward {path!r}: cannot import module {module_name!r} ({err})") from None
    target: Any = module
    for part in attr.split("."):
        if not hasattr(target, part):
            public = sorted(n for n in dir(target) if not n.startswith("_"))[:20]
            raise ValueError(
                f"reward {path!r}: {module_name!r} has no attribute {attr!r} (it has: {', '.join(public)})"
            )
        target = getattr(target, part)
    if not callable(target):
        raise ValueError(f"reward {path!r} is a {type(target).__name__}, not a function")
    if _is_verifier(target):
        return VerifierReward(getattr(target, "__name__", attr.rsplit(".", 1)[-1]), target)
    return target


def _is_verifier(fn: Any) -> bool:
    """A user's verifier ``verify(completion, ground_truth)`` rather than a TRL reward function
    ``fn(prompts, completions, **kwargs)``: two positional parameters, neither named ``prompts`` nor
    ``completions``, and no ``**kwargs``."""
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        return False
    names = {p.name for p in params}
    if "prompts" in names or "completions" in names or any(p.kind is p.VAR_KEYWORD for p in params):
        return False
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    return len(positional) == 2


def is_import_path(name: object) -> bool:
    """Whether a reward name is an import path ``module:attribute`` rather than a registered name."""
    return isinstance(name, str) and ":" in name


def reward_display_name(name: str) -> str:
    """The name a reward's metrics carry (``rewards/<name>/mean``): the registered name, or the attribute of an
    import path (``my_pkg.rewards:score`` -> ``score``)."""
    if is_import_path(name):
        return name.partition(":")[2].rsplit(".", 1)[-1]
    return REWARDS.canonical(name)


def get_reward_func(name: str, **options: Any) -> RewardFunc:
    """The reward function registered as ``name`` (or at the import path ``module:attribute``: a TRL reward
    function, or a verifier, :func:`_is_verifier`, wrapped in a :class:`VerifierReward`), with ``options`` checked
    now and applied: a :class:`VerifierReward`'s own, or another function's keyword-only parameters (bound with
    ``functools.partial``, which TRL names after the wrapped function).

    Raises:
        ValueError: unknown name (the message lists the valid names) or unknown option.
    """
    fn = _import_reward(name) if is_import_path(name) else REWARDS.get(name)
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


# The built-in rewards: +1 correct / -1 otherwise, ground truth in column ``answer``.
dapo_reward: VerifierReward = register_verifier("dapo", verify_dapo)
boxed_reward: VerifierReward = register_verifier("boxed", verify_boxed)
register_verifier("last_number", verify_last_number)
