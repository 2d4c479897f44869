"""Scorers: how a sampled answer is checked.

An answer verifier of :data:`bandpo_lab.rewards.VERIFIERS` (``dapo``: the last ``Answer:`` line; ``boxed``: the last
``\\boxed{}``) against the ground truth, or a task verifier that reads the prompt instead (``countdown``: the
expression must solve the puzzle of the prompt).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from bandpo_lab.eval.errors import EvalError

Scorer = Callable[[str, str, Any], "tuple[bool, str | None]"]
"""``score(raw_prompt, completion, ground_truth) -> (correct, extracted answer or None)``."""


def _countdown_score(prompt: str, completion: str, ground_truth: Any) -> tuple[bool, str | None]:
    """The countdown task's verifier (:func:`bandpo_lab.tasks.countdown.countdown_reward`). The answer that votes in
    maj@k (docs/method.md#metrics): the value an expression with the prompt's digits reaches (``"23"``), an
    expression with other digits as itself (``"=20+3"``), ``None`` when it does not parse."""
    from bandpo_lab.tasks.countdown import (
        countdown_reward,
        evaluate_expression,
        parse_expression,
        parse_prompt,
        strip_completion,
    )

    correct = countdown_reward(prompt, completion) > 0
    text = strip_completion(completion)
    try:
        numbers, ops = parse_expression(text)
    except ValueError:
        return correct, None
    if sorted(numbers) != sorted(parse_prompt(prompt)[0]):
        return correct, "=" + "".join(text.split())
    return correct, str(evaluate_expression(numbers, ops))


def _countdown_check(prompt: str, ground_truth: Any) -> None:
    from bandpo_lab.tasks.countdown import parse_prompt

    parse_prompt(prompt)


# Verifiers that read the prompt instead of a ground truth (tasks whose problems define their own answer).
TASK_SCORERS: dict[str, tuple[Scorer, Callable[[str, Any], None]]] = {
    "countdown": (_countdown_score, _countdown_check),
}


def verifier_names() -> list[str]:
    """Valid ``verifier`` names: the registered answer verifiers (``dapo``, ``boxed``, ...) and the task verifiers
    (``countdown``)."""
    from bandpo_lab.rewards import VERIFIERS

    return [*VERIFIERS.names(), *[n for n in TASK_SCORERS if n not in VERIFIERS]]


def get_scorer(name: str) -> tuple[Scorer, Callable[[str, Any], None]]:
    """``(score, check_ground_truth)`` of verifier ``name``; ``check`` raises on a ground truth it cannot use."""
    from bandpo_lab.rewards import VERIFIERS

    if name in TASK_SCORERS:
        return TASK_SCORERS[name]
    if name not in VERIFIERS:
        raise EvalError(f"verifier must be one of {', '.join(verifier_names())}, got {name!r}")
    verify = VERIFIERS.get(name)

    def score(prompt: str, completion: str, ground_truth: Any) -> tuple[bool, str | None]:
        result = verify(completion, ground_truth)
        if isinstance(result, bool):  # a verifier that only says right or wrong
            return result, None
        return bool(result.correct), result.answer

    def check(prompt: str, ground_truth: Any) -> None:
        if ground_truth is None:
            raise ValueError("no ground truth")
        verify("", ground_truth)  # normalises the ground truth first: raises when it cannot be parsed

    return score, check
