"""Tests for ``bandpo_lab.eval.scorers``: what each verifier counts as correct and what answer it votes with (maj@k)."""

from __future__ import annotations

import pytest

from bandpo_lab.eval.metrics import maj_at_k
from bandpo_lab.eval.scorers import get_scorer
from bandpo_lab.tasks.countdown import countdown_reward

PROMPT = "3,7,2:23="


def test_countdown_correct_expressions_vote_for_one_answer() -> None:
    """Every correct expression votes for the target: four correct ones written differently beat two copies of one
    wrong one (voting on the expression string, the wrong pair won and maj@6 was 0)."""
    score, _ = get_scorer("countdown")
    samples = ["3*7+2", "2+3*7", "7*3+2", "2+7*3", "3+7+2", "3+7+2"]
    scored = [score(PROMPT, c, None) for c in samples]
    assert [answer for _, answer in scored] == ["23"] * 4 + ["12"] * 2
    assert maj_at_k([[a for _, a in scored]], [[c for c, _ in scored]], 6) == 1.0


@pytest.mark.parametrize(
    ("completion", "answer"),
    [
        ("3*7+2", "23"),
        (" 3 * 7 + 2 <|endoftext|>junk", "23"),  # read as the reward reads it: cut at the marker, stripped
        ("7-3*2", "1"),  # the prompt's digits, a wrong value: votes with that value
        ("20+3", "=20+3"),  # other digits reaching the target: its own answer, never pooled with "23"
        ("3*(7+2)", None),  # does not parse: no vote
        ("", None),
    ],
)
def test_countdown_answer_and_correctness_agree_with_the_reward(completion: str, answer: str | None) -> None:
    score, _ = get_scorer("countdown")
    correct, got = score(PROMPT, completion, None)
    assert got == answer
    assert correct == (countdown_reward(PROMPT, completion) > 0)
    assert correct == (answer == "23")  # a vote for the target is a correct sample, and only those
