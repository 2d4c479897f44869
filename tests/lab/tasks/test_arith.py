"""Tests for bandpo_lab.tasks.arith: options, problem counts (against brute force), seeded disjoint splits, answers."""

from __future__ import annotations

import itertools

import pytest

from bandpo_lab.tasks.arith import ArithConfig, arith_answer, count_arith_problems, make_arith_splits


def _values(digits: list[int]) -> list[int]:
    return sorted({v for d in digits for v in (range(10) if d == 1 else range(10 ** (d - 1), 10**d))})


def _brute_count(config: ArithConfig) -> int:
    """Every problem the draw can produce: ``a`` of ``digits``, ``b`` of ``second_digits``, a negative
    subtraction written the other way round."""
    keys = set()
    for op in config.ops:
        for a, b in itertools.product(_values(config.digits), _values(config.second_digits or config.digits)):
            if op == "-" and config.nonnegative and a < b:
                a, b = b, a
            keys.add((a, op, b))
    return len(keys)


@pytest.mark.parametrize(
    "options",
    [
        {"digits": [1], "operators": ["+"], "n_train": 50, "n_test": 10},
        {"digits": [1], "operators": ["-"], "n_train": 50, "n_test": 5},
        {"digits": [1], "operators": ["-"], "nonnegative": False, "n_train": 50, "n_test": 5},
        {"digits": [1, 2], "operators": ["+", "x"], "n_train": 50, "n_test": 5},
        {"digits": [2], "operators": ["+", "-", "*"], "n_train": 50, "n_test": 5},
        {"digits": [1, 2], "second_digits": [1], "n_train": 50, "n_test": 5},
        {"digits": [2], "second_digits": [1, 2], "operators": ["-"], "n_train": 50, "n_test": 5},
    ],
)
def test_count_matches_brute_force(options: dict) -> None:
    config = ArithConfig(**options)
    assert count_arith_problems(config) == _brute_count(config)


def test_splits_are_disjoint_seeded_and_correct() -> None:
    config = ArithConfig(digits=[1, 2], n_train=500, n_test=100, seed=3)
    train, test = make_arith_splits(config)
    assert (len(train), len(test)) == (500, 100)
    questions = [r["question"] for r in train + test]
    assert len(set(questions)) == 600  # no problem twice, train and test disjoint
    for row in train + test:
        a, op, b = row["question"].removeprefix("What is ").removesuffix("?").split()
        assert int(row["answer"]) == arith_answer(int(a), op, int(b))
        assert op in "+-*"
        assert row["prompt"] == [{"role": "user", "content": row["question"]}]
        if op == "-":
            assert int(a) >= int(b)  # nonnegative by default
    assert make_arith_splits(config) == (train, test)  # deterministic
    assert make_arith_splits(ArithConfig(digits=[1, 2], n_train=500, n_test=100, seed=4))[1] != test
    # the test split does not depend on n_train
    assert make_arith_splits(ArithConfig(digits=[1, 2], n_train=50, n_test=100, seed=3))[1] == test


def test_digit_counts_and_operators_are_respected() -> None:
    train, test = make_arith_splits(ArithConfig(digits=[2], operators=["x"], n_train=100, n_test=20))
    for row in train + test:
        a, op, b = row["question"].removeprefix("What is ").removesuffix("?").split()
        assert op == "*" and 10 <= int(a) <= 99 and 10 <= int(b) <= 99


def test_a_split_can_use_every_problem() -> None:
    config = ArithConfig(digits=[1], operators=["+"], n_train=90, n_test=10)
    train, test = make_arith_splits(config)
    assert len({r["question"] for r in train + test}) == 100 == count_arith_problems(config)


@pytest.mark.parametrize(
    ("options", "match"),
    [
        ({"digits": []}, "digits must be a non-empty list"),
        ({"digits": [4]}, "digits"),
        ({"digits": [1, 1]}, "must not repeat a digit count"),
        ({"operators": ["/"]}, r"operators must be among \+, -, \*, x, got '/'"),
        ({"operators": ["x", "*"]}, "must not repeat an operator"),
        ({"operators": []}, "non-empty list"),
        ({"n_train": 0}, "n_train"),
        (
            {"digits": [1], "operators": ["+"], "n_train": 95, "n_test": 10},
            r"n_train \+ n_test must be <= 100",
        ),
        ({"seed": -1}, "seed"),
        ({"nonnegative": "yes"}, "nonnegative must be true or false"),
    ],
)
def test_bad_options_are_one_clear_error(options: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        ArithConfig(**options)


def test_task_is_registered_with_the_last_number_reward() -> None:
    from bandpo_lab.training.config import ConfigError, DataConfig
    from bandpo_lab.training.tasks import TASKS

    spec = TASKS.get("arith")
    assert spec.default_reward == "last_number" and spec.build_model is None
    rows = spec.build_split(spec.options({"n_train": 10, "n_test": 5}), "test")
    assert len(rows) == 5
    with pytest.raises(ConfigError, match=r"data.task_options.*digits"):
        DataConfig(task="arith", task_options={"digits": [7]})


def test_second_digits_sets_the_second_operand() -> None:
    config = ArithConfig(digits=[2], second_digits=[1], operators=["+", "*"], n_train=300, n_test=100)
    train, test = make_arith_splits(config)
    for row in train + test:
        a, _, b = row["question"].removeprefix("What is ").removesuffix("?").split()
        assert 10 <= int(a) <= 99 and 0 <= int(b) <= 9
    assert len({r["question"] for r in train + test}) == 400


@pytest.mark.parametrize("value", [[], [4], [1, 1], "1"])
def test_bad_second_digits_are_refused(value: object) -> None:
    with pytest.raises(ValueError, match="second_digits"):
        ArithConfig(digits=[1], second_digits=value, n_train=5, n_test=5)
