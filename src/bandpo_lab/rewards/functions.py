"""TRL reward functions built on a verifier: :class:`VerifierReward` scores each completion against the ground truth
in a dataset column and maps correct / incorrect / unparsed to rewards."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from numbers import Real
from typing import Any

from bandpo_lab.rewards.verifiers import Verifier

RewardFunc = Callable[..., Sequence["float | None"]]
"""TRL-style reward function ``fn(prompts, completions, **kwargs) -> list[float | None]``."""


def check_reward_value(name: str, value: object, allow_none: bool = False) -> float | None:
    """``value`` as a float; raises ``ValueError`` naming ``name`` unless it is a finite real number (or ``None``
    with ``allow_none``)."""
    if value is None and allow_none:
        return None
    if not isinstance(value, Real) or isinstance(value, bool) or not math.isfinite(float(value)):
        allowed = "a finite number or None" if allow_none else "a finite number"
        raise ValueError(f"{name} must be {allowed}, got {value!r}")
    return float(value)


def _column(kwargs: Mapping[str, Any], key: str, n: int) -> list[Any]:
    """Per-completion values of dataset column ``key``; a dotted key reads nested dicts
    (``"reward_model.ground_truth"`` as in the verl/DAPO parquet files)."""
    head, *path = key.split(".")
    if head not in kwargs:
        columns = sorted(k for k in kwargs if k not in ("trainer_state", "log_extra", "log_metric"))
        raise ValueError(
            f"the reward needs the ground truth in the dataset column {head!r} (answer_key={key!r}); "
            f"available columns: {columns}"
        )
    values = kwargs[head]
    if isinstance(values, (str, bytes)) or not isinstance(values, Sequence) or len(values) != n:
        got = len(values) if isinstance(values, Sequence) else type(values).__name__
        raise ValueError(f"column {head!r} must be a list with one entry per completion ({n}), got {got}")
    out = []
    for value in values:
        for part in path:
            if not isinstance(value, Mapping) or part not in value:
                raise ValueError(f"answer_key={key!r}: entry {value!r} has no key {part!r}")
            value = value[part]
        out.append(value)
    return out


class VerifierReward:
    """A TRL reward function from a :data:`Verifier`: each completion is scored against the ground truth in
    dataset column ``answer_key``.

    Args:
        name: the function's ``__name__`` (TRL logs ``rewards/<name>/mean``).
        verify: ``verify(completion, ground_truth) -> VerifyResult``.
        answer_key: dataset column of the ground truth; dots read nested dicts (``"reward_model.ground_truth"``).
        correct_reward: reward for a correct answer (default +1).
        incorrect_reward: reward for a wrong answer (default -1, the BandPO recipe; 0.0 for a 1/0 reward).
        unparsed_reward: reward when no answer was parsed; ``None`` (default) means ``incorrect_reward``.

    Calling it also logs ``rewards/<name>/unparsed_frac`` through TRL's ``log_metric`` keyword when given.
    """

    def __init__(
        self,
        name: str,
        verify: Verifier,
        *,
        answer_key: str = "answer",
        correct_reward: float = 1.0,
        incorrect_reward: float = -1.0,
        unparsed_reward: float | None = None,
    ) -> None:
        if not isinstance(name, str) or not name:
            raise ValueError(f"name must be a non-empty string, got {name!r}")
        if not callable(verify):
            raise ValueError(f"verify must be callable, got {verify!r}")
        if not isinstance(answer_key, str) or not answer_key or "" in answer_key.split("."):
            raise ValueError(f"answer_key must be a column name (dots for nested keys), got {answer_key!r}")
        self.__name__ = name
        self.verify = verify
        self.answer_key = answer_key
        self.correct_reward = check_reward_value("correct_reward", correct_reward)
        self.incorrect_reward = check_reward_value("incorrect_reward", incorrect_reward)
        self.unparsed_reward = check_reward_value("unparsed_reward", unparsed_reward, allow_none=True)

    def with_options(self, **options: Any) -> VerifierReward:
        """A copy with some of ``answer_key``, ``correct_reward``, ``incorrect_reward``, ``unparsed_reward``
        changed (unknown options raise ``ValueError`` listing the valid ones)."""
        valid = ("answer_key", "correct_reward", "incorrect_reward", "unparsed_reward")
        unknown = sorted(set(options) - set(valid))
        if unknown:
            raise ValueError(
                f"reward {self.__name__!r} has no option(s) {unknown}; valid options: {list(valid)}"
            )
        current = {key: getattr(self, key) for key in valid}
        return VerifierReward(self.__name__, self.verify, **{**current, **options})

    def __call__(self, prompts: Sequence[Any], completions: Sequence[Any], **kwargs: Any) -> list[float]:
        if isinstance(completions, (str, bytes)) or not isinstance(completions, Sequence):
            raise ValueError(f"completions must be a list, got {type(completions).__name__}")
        truths = _column(kwargs, self.answer_key, len(completions))
        unparsed_reward = self.incorrect_reward if self.unparsed_reward is None else self.unparsed_reward
        rewards: list[float] = []
        n_unparsed = 0
        for completion, truth in zip(completions, truths):
            result = self.verify(completion, truth)
            if isinstance(result, bool):  # a verifier that only says right or wrong: always parsed
                rewards.append(self.correct_reward if result else self.incorrect_reward)
                continue
            if not hasattr(result, "correct") or not hasattr(result, "answer"):
                raise ValueError(
                    f"verifier {self.__name__!r} must return a bool or a VerifyResult(correct, answer), got {result!r}"
                )
            if result.answer is None:
                n_unparsed += 1
                rewards.append(unparsed_reward)
            else:
                rewards.append(self.correct_reward if result.correct else self.incorrect_reward)
        log_metric = kwargs.get("log_metric")
        if callable(log_metric) and completions:
            log_metric(f"rewards/{self.__name__}/unparsed_frac", n_unparsed / len(completions))
        return rewards

    def __repr__(self) -> str:
        return (
            f"VerifierReward({self.__name__!r}, answer_key={self.answer_key!r}, correct_reward="
            f"{self.correct_reward}, incorrect_reward={self.incorrect_reward}, "
            f"unparsed_reward={self.unparsed_reward})"
        )
