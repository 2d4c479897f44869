"""Tests for bandpo_lab.rewards.registry: the REWARDS and VERIFIERS registries and their functions."""

from __future__ import annotations

import functools
from collections.abc import Iterator
from typing import Any

import pytest

from bandpo_lab.rewards import (
    REWARDS,
    VERIFIERS,
    VerifierReward,
    VerifyResult,
    completion_text,
    get_reward_func,
    get_verifier,
    register_reward,
    register_verifier,
    reward_names,
    verify_boxed,
    verify_dapo,
)


@pytest.fixture
def restore_registries() -> Iterator[None]:
    """Registrations made by a test are undone afterwards."""
    saved = [(reg, dict(reg._items), dict(reg._aliases)) for reg in (REWARDS, VERIFIERS)]
    yield
    for reg, items, aliases in saved:
        reg._items = items
        reg._aliases = aliases


# ----------------------------------------------------------------------------------------------- registry
def test_registry_has_the_builtin_rewards() -> None:
    assert {"dapo", "boxed"} <= set(reward_names())
    assert get_verifier("dapo") is verify_dapo
    assert get_verifier("boxed") is verify_boxed


def test_unknown_reward_lists_valid_names() -> None:
    with pytest.raises(
        ValueError, match=r"unknown reward 'dappo' \(did you mean 'dapo'\?\); valid names: dapo, boxed"
    ):
        get_reward_func("dappo")
    with pytest.raises(ValueError, match="unknown verifier 'nope'; valid names: dapo, boxed"):
        get_verifier("nope")


@pytest.mark.usefixtures("restore_registries")
def test_register_reward_and_bind_keyword_options() -> None:
    def length_reward(prompts: list, completions: list, *, scale: float = 1.0, **kwargs: Any) -> list[float]:
        return [scale * len(c) for c in completions]

    assert register_reward("length", length_reward) is length_reward
    assert "length" in reward_names()
    fn = get_reward_func("length", scale=2.0)
    assert isinstance(fn, functools.partial)
    assert fn.func.__name__ == "length_reward"  # TRL names a partial after the wrapped function
    assert fn(["p"], ["abc"]) == [6.0]
    with pytest.raises(ValueError, match=r"has no option\(s\) \['bogus'\]; valid options: \['scale'\]"):
        get_reward_func("length", bogus=1)
    with pytest.raises(ValueError, match="reward 'length' is already registered"):
        register_reward("length", length_reward)
    with pytest.raises(ValueError, match="must be callable"):
        register_reward("broken", 3)  # type: ignore[arg-type]


@pytest.mark.usefixtures("restore_registries")
def test_register_verifier_adds_verifier_and_reward() -> None:
    def verify_upper(completion: Any, ground_truth: Any) -> VerifyResult:
        text = completion_text(completion).strip()
        return VerifyResult(text.upper() == str(ground_truth), text or None)

    reward = register_verifier("upper", verify_upper, incorrect_reward=0.0)
    assert isinstance(reward, VerifierReward)
    assert get_reward_func("upper") is reward
    assert get_verifier("upper") is verify_upper
    assert reward(["p", "p", "p"], ["abc", "abd", ""], answer=["ABC"] * 3) == [1.0, 0.0, 0.0]
    with pytest.raises(ValueError, match="reward 'dapo' is already registered"):
        register_verifier("dapo", verify_upper)
    assert get_verifier("dapo") is verify_dapo  # a failed registration changes neither registry
