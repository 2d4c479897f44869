"""Tests for bandpo_lab.rewards.safe: safe_reward_func, the failure-tolerant wrapper."""

from __future__ import annotations

import functools
import logging
import math
import re
from typing import Any

import pytest

from bandpo_lab.rewards import (
    SafeRewardFunc,
    completion_text,
    dapo_reward,
    get_reward_func,
    safe_reward_func,
)


# ----------------------------------------------------------------------------------------- safe_reward_func
def exploding_reward(prompts: list, completions: list, answer: list, **kwargs: Any) -> list[float]:
    """Raises on any completion containing 'boom'; otherwise 1.0 when the completion equals its answer."""
    out = []
    for c, a in zip(completions, answer, strict=True):
        text = completion_text(c)
        if "boom" in text:
            raise RuntimeError("parser exploded")
        out.append(1.0 if text == a else -1.0)
    return out


def test_safe_reward_func_scores_failures_and_counts_them(caplog: pytest.LogCaptureFixture) -> None:
    safe = safe_reward_func(exploding_reward, failure_reward=0.0)
    assert isinstance(safe, SafeRewardFunc)
    assert safe.__name__ == "exploding_reward"
    with caplog.at_level(logging.WARNING, logger="bandpo_lab.rewards"):
        out = safe(["p"] * 4, ["a", "boom", "c", "x"], answer=["a", "b", "c", "y"])
    assert out == [1.0, 0.0, 1.0, -1.0]  # each completion scored against its own answer
    assert safe.n_failures == 1
    assert safe.n_completions == 4
    assert "parser exploded" in (safe.last_error or "")
    assert "failed on a completion" in caplog.text
    assert safe(["p"], ["a"], answer=["a"]) == [1.0]
    assert safe.n_failures == 1
    assert safe.n_completions == 5


def test_safe_reward_func_handles_chat_completions_and_logs_per_batch() -> None:
    logged: list[tuple[str, float]] = []
    safe = safe_reward_func(exploding_reward, failure_reward=-0.5)
    chat = [[{"role": "assistant", "content": t}] for t in ("a", "boom")]
    out = safe(
        ["p", "p"],
        chat,
        answer=["a", "a"],
        log_metric=lambda k, v: logged.append((k, v)),
        trainer_state=object(),
    )
    assert out == [1.0, -0.5]
    assert logged == [("rewards/exploding_reward/failure_frac", 0.5)]  # per-item retries do not log


def test_safe_reward_func_raises_when_every_completion_fails() -> None:
    safe = safe_reward_func(dapo_reward)
    with pytest.raises(RuntimeError, match=r"failed on all 2 completions.*configuration error") as info:
        safe(["p", "p"], ["Answer: 1", "Answer: 2"], solution=["1", "2"])  # wrong column name
    assert "column 'answer'" in str(info.value.__cause__)
    lenient = safe_reward_func(dapo_reward, failure_reward=0.0, raise_if_all_fail=False)
    assert lenient(["p", "p"], ["Answer: 1", "Answer: 2"], solution=["1", "2"]) == [0.0, 0.0]
    assert lenient.n_failures == 2


def test_safe_reward_func_checks_outputs() -> None:
    def bad_values(prompts: list, completions: list, **kwargs: Any) -> list[Any]:
        return [math.nan if c == "nan" else (None if c == "skip" else 1.0) for c in completions]

    safe = safe_reward_func(bad_values, failure_reward=0.0)
    assert safe(["p"] * 3, ["ok", "nan", "skip"]) == [1.0, 0.0, None]  # None (not applicable) passes through
    assert safe.n_failures == 1

    def wrong_length(prompts: list, completions: list, **kwargs: Any) -> list[float]:
        return [1.0]

    fixed = safe_reward_func(wrong_length)
    assert fixed(["p", "p"], ["a", "b"]) == [1.0, 1.0]  # one-by-one calls return one value each
    assert fixed.n_failures == 0


@pytest.mark.parametrize(
    ("value", "kind"), [("1.00", "str"), (b"10", "bytes"), (1.0, "float"), ({"a": 1}, "dict")]
)
def test_a_reward_returning_no_list_is_named_with_the_type_it_returned(value: object, kind: str) -> None:
    """A string is a sequence too: its characters must not be counted as rewards ("got 4 values")."""

    def as_text(prompts: list, completions: list, **kwargs: Any) -> object:
        return value

    safe = safe_reward_func(as_text)
    message = f"reward 'as_text' returned a {kind}, must return a list of floats (one per completion)"
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        safe._checked(value, 2)
    with pytest.raises(RuntimeError, match=r"failed on all 2 completions") as info:
        safe(["p", "p"], ["a", "b"])
    assert str(info.value.__cause__) == message


def test_safe_reward_func_rejects_bad_arguments() -> None:
    async def async_reward(prompts: list, completions: list, **kwargs: Any) -> list[float]:
        return [0.0]

    with pytest.raises(ValueError, match="async"):
        safe_reward_func(async_reward)
    with pytest.raises(ValueError, match="fn must be a reward function"):
        safe_reward_func(3)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="failure_reward must be a finite number"):
        safe_reward_func(dapo_reward, failure_reward=math.nan)


def test_safe_reward_func_names_partials_after_the_function() -> None:
    assert safe_reward_func(functools.partial(exploding_reward)).__name__ == "exploding_reward"
    assert safe_reward_func(get_reward_func("dapo", incorrect_reward=0.0)).__name__ == "dapo"
