"""Tests for bandpo_lab.rewards.functions: VerifierReward, the TRL reward functions built on a verifier."""

from __future__ import annotations

import math
import pickle

import pytest

from bandpo_lab.rewards import (
    boxed_reward,
    dapo_reward,
    get_reward_func,
    safe_reward_func,
)

# ------------------------------------------------------------------------------------------ reward functions
COMPLETIONS = ["Answer: 4", "Answer: 5", "I don't know", "Answer: $4$."]
TRUTHS = ["4", "4", "4", "4"]


def test_dapo_reward_scores_plus_minus_one() -> None:
    assert dapo_reward(prompts=["p"] * 4, completions=COMPLETIONS, answer=TRUTHS) == [1.0, -1.0, -1.0, 1.0]
    chat = [[{"role": "assistant", "content": c}] for c in COMPLETIONS]
    assert dapo_reward(["p"] * 4, chat, answer=TRUTHS) == [1.0, -1.0, -1.0, 1.0]
    assert dapo_reward.__name__ == "dapo"


def test_reward_options_from_the_registry() -> None:
    zero_one = get_reward_func("dapo", incorrect_reward=0.0)
    assert zero_one(["p"] * 4, COMPLETIONS, answer=TRUTHS) == [1.0, 0.0, 0.0, 1.0]
    shaped = get_reward_func("dapo", unparsed_reward=-2.0, answer_key="reward_model.ground_truth")
    column = [{"ground_truth": t, "style": "rule"} for t in TRUTHS]
    assert shaped(["p"] * 4, COMPLETIONS, reward_model=column) == [1.0, -1.0, -2.0, 1.0]
    assert get_reward_func("dapo") is dapo_reward
    boxed = get_reward_func("boxed", incorrect_reward=0.0)
    assert boxed(["p", "p"], [r"\boxed{4}", "4"], answer=["4", "4"]) == [1.0, 0.0]
    assert boxed_reward.__name__ == "boxed"


def test_reward_logs_unparsed_fraction() -> None:
    logged: list[tuple[str, float]] = []
    dapo_reward(["p"] * 4, COMPLETIONS, answer=TRUTHS, log_metric=lambda k, v: logged.append((k, v)))
    assert logged == [("rewards/dapo/unparsed_frac", 0.25)]


def test_reward_missing_column_lists_the_columns() -> None:
    with pytest.raises(ValueError, match=r"column 'answer'.*available columns: \['solution'\]"):
        dapo_reward(["p"], ["Answer: 1"], solution=["1"], trainer_state=None)
    with pytest.raises(ValueError, match="one entry per completion"):
        dapo_reward(["p"], ["Answer: 1"], answer=["1", "2"])
    with pytest.raises(ValueError, match="has no key 'ground_truth'"):
        get_reward_func("dapo", answer_key="reward_model.ground_truth")(
            ["p"], ["Answer: 1"], reward_model=[{}]
        )


@pytest.mark.parametrize(
    ("options", "match"),
    [
        ({"incorrect_reward": "zero"}, "incorrect_reward must be a finite number, got 'zero'"),
        ({"correct_reward": math.inf}, "correct_reward must be a finite number"),
        ({"answer_key": ""}, "answer_key must be a column name"),
        ({"bogus": 1}, r"reward 'dapo' has no option\(s\) \['bogus'\]; valid options: \['answer_key'"),
    ],
)
def test_reward_options_are_validated_eagerly(options: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        get_reward_func("dapo", **options)


def test_reward_functions_pickle() -> None:
    restored = pickle.loads(pickle.dumps(get_reward_func("dapo", incorrect_reward=0.0)))
    assert restored(["p"], ["Answer: 2"], answer=["3"]) == [0.0]
    safe = pickle.loads(pickle.dumps(safe_reward_func(dapo_reward)))
    assert safe(["p"], ["Answer: 3"], answer=["3"]) == [1.0]
