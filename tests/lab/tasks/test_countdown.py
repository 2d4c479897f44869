"""Tests for bandpo_lab.tasks.countdown: generator, verifier and config validation."""

from __future__ import annotations

import itertools
import random

import pytest

from bandpo_lab.tasks.countdown import (
    CountdownConfig,
    count_puzzles,
    countdown_reward,
    countdown_reward_func,
    evaluate_expression,
    format_prompt,
    make_splits,
    parse_expression,
    parse_prompt,
    random_guess_accuracy,
    solutions,
)


def _key(problem: dict) -> tuple[tuple[int, ...], int]:
    return tuple(sorted(problem["digits"])), problem["target"]


# ------------------------------------------------------------------------------------------------ generator
def test_splits_deterministic_by_seed() -> None:
    cfg = CountdownConfig(n_train=300, n_test=50, seed=3)
    assert make_splits(cfg) == make_splits(CountdownConfig(n_train=300, n_test=50, seed=3))
    other = make_splits(CountdownConfig(n_train=300, n_test=50, seed=4))
    assert other != make_splits(cfg)


def test_splits_sizes_disjoint_and_unique() -> None:
    cfg = CountdownConfig()
    train, test = make_splits(cfg)
    assert len(train) == cfg.n_train and len(test) == cfg.n_test
    train_keys = {_key(p) for p in train}
    test_keys = {_key(p) for p in test}
    assert len(train_keys) == len(train) and len(test_keys) == len(test)
    assert not train_keys & test_keys
    assert not {p["prompt"] for p in train} & {p["prompt"] for p in test}


def test_test_split_does_not_depend_on_n_train() -> None:
    _, test_a = make_splits(CountdownConfig(n_train=10, n_test=40))
    _, test_b = make_splits(CountdownConfig(n_train=900, n_test=40))
    assert test_a == test_b


@pytest.mark.parametrize(
    "cfg",
    [
        CountdownConfig(),
        CountdownConfig(
            n_numbers=2, min_digit=0, max_digit=5, min_target=-10, max_target=30, n_train=20, n_test=5
        ),
        CountdownConfig(n_numbers=4, n_train=300, n_test=100, seed=1),
    ],
    ids=["default", "two-digits-negative-targets", "four-digits"],
)
def test_every_problem_solvable_and_reference_accepted(cfg: CountdownConfig) -> None:
    train, test = make_splits(cfg)
    for problem in train + test:
        digits, target = problem["digits"], problem["target"]
        assert len(digits) == cfg.n_numbers
        assert all(cfg.min_digit <= d <= cfg.max_digit for d in digits)
        assert cfg.min_target <= target <= cfg.max_target
        assert problem["prompt"] == format_prompt(digits, target)
        assert parse_prompt(problem["prompt"]) == (digits, target)
        assert countdown_reward(problem["prompt"], problem["answer"]) == 1.0
        assert problem["answer"] in solutions(digits, target)


def test_count_puzzles_matches_brute_force() -> None:
    cfg = CountdownConfig(
        n_numbers=2, min_digit=1, max_digit=4, min_target=0, max_target=10, n_train=1, n_test=1
    )
    brute = {
        (tuple(sorted(ds)), evaluate_expression(ds, [op]))
        for ds in itertools.product(range(1, 5), repeat=2)
        for op in "+-*"
        if 0 <= evaluate_expression(ds, [op]) <= 10
    }
    assert count_puzzles(cfg) == len(brute)
    assert count_puzzles(CountdownConfig()) == 1345


def test_random_guess_accuracy() -> None:
    # 1,1 -> 1+1=2, 1-1=0, 1*1=1: one of the 2 orders x 3 operators... both orders give the same values
    assert random_guess_accuracy([1, 1], 2) == pytest.approx(1 / 3)
    assert random_guess_accuracy([3, 7, 2], 23) == pytest.approx(4 / 54)  # 3*7+2, 7*3+2, 2+3*7, 2+7*3


# -------------------------------------------------------------------------------------------------- parsing
@pytest.mark.parametrize(
    ("text", "numbers", "ops"),
    [
        ("3*7+2", [3, 7, 2], ["*", "+"]),
        (" 3 * 7 + 2 ", [3, 7, 2], ["*", "+"]),
        ("12-0", [12, 0], ["-"]),
        ("5", [5], []),
    ],
)
def test_parse_expression(text: str, numbers: list[int], ops: list[str]) -> None:
    assert parse_expression(text) == (numbers, ops)


@pytest.mark.parametrize(
    "text", ["", "   ", "3*", "*3", "3**7", "3 7", "-3+7", "(3+7)*2", "3/7", "03+7", "3+7=10", "3.0+7", "3+x"]
)
def test_parse_expression_rejects_malformed(text: str) -> None:
    with pytest.raises(ValueError, match=r"expression|character"):
        parse_expression(text)


def test_evaluate_expression_matches_python_precedence() -> None:
    rng = random.Random(0)
    for _ in range(500):
        n = rng.randint(1, 5)
        numbers = [rng.randint(0, 12) for _ in range(n)]
        ops = [rng.choice("+-*") for _ in range(n - 1)]
        text = "".join(f"{a}{o}" for a, o in zip(numbers, ops)) + str(numbers[-1])
        assert evaluate_expression(numbers, ops) == eval(text)  # reference only; the module never evals


def test_parse_prompt_rejects_non_countdown() -> None:
    with pytest.raises(ValueError, match="prompt must hold a puzzle"):
        parse_prompt("what is 2+2?")
    assert parse_prompt("Solve: 3,7,2:-4= ") == ([3, 7, 2], -4)


@pytest.mark.parametrize(
    "template",
    [
        "{prompt}\nWrite only the expression.",
        "Puzzle {prompt} (use every digit once)",
        "e.g. 1,2:3= 1+2\n{prompt}",
    ],
)
def test_parse_prompt_reads_the_puzzle_inside_a_template(template: str) -> None:
    """A ``data.prompt_template`` that adds text after ``{prompt}`` made every reward call raise (the puzzle had to
    end the prompt): training crashed at step 1 although ``--dry-run`` passed."""
    prompt = template.format(prompt="3,7,2:23=")
    assert parse_prompt(prompt) == ([3, 7, 2], 23)
    assert countdown_reward_func([prompt, prompt], ["3*7+2", "3*7+3"]) == [1.0, 0.0]


# --------------------------------------------------------------------------------------------------- reward
@pytest.mark.parametrize(
    "completion",
    [
        "3*7+2",
        "7*3+2",
        "2+3*7",
        " 3*7+2\n",
        "3 * 7 + 2",
        "3*7+2<eos>",
        "3*7+2<eos><pad><pad>",
        "3*7+2</s>",
        "3*7+2<|endoftext|>junk after the end",
    ],
)
def test_reward_accepts_right_answers(completion: str) -> None:
    assert countdown_reward("3,7,2:23=", completion) == 1.0


@pytest.mark.parametrize(
    "completion",
    [
        "3*7+3",  # wrong digit multiset
        "3*7",  # a digit missing
        "3*7+2+2",  # a digit used twice
        "7*2+3",  # right digits, wrong value
        "37-2*7",  # concatenated digits
        "(3*7)+2",  # parentheses are not part of the language
        "23",  # the target itself
        "3*7+2=23",
        "",
        "<eos>3*7+2",  # nothing before the end marker
        "3*7+2 junk",
        "-2+3*7+2+2",
    ],
)
def test_reward_rejects_wrong_and_malformed(completion: str) -> None:
    assert countdown_reward("3,7,2:23=", completion) == 0.0


def test_reward_negative_target_and_repeated_digits() -> None:
    assert countdown_reward("1,9,4:-5=", "1-9+4*1") == 0.0  # one digit too many
    assert countdown_reward("1,9,4:-4=", "1-9+4") == 1.0
    assert countdown_reward("4,4,1:15=", "4*4-1") == 1.0
    assert countdown_reward("4,4,1:15=", "4*4-4") == 0.0


def test_reward_func_trl_formats() -> None:
    prompts = ["3,7,2:23=", "3,7,2:23=", [{"role": "user", "content": "3,7,2:23="}]]
    completions = ["3*7+2", "3*7+3", [{"role": "assistant", "content": "2+7*3"}]]
    assert countdown_reward_func(prompts, completions, answer=["x"] * 3) == [1.0, 0.0, 1.0]
    with pytest.raises(ValueError, match="same length"):
        countdown_reward_func(prompts, completions[:2])


# --------------------------------------------------------------------------------------------------- config
@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"n_train": 0}, r"n_train must be an integer >= 1, got 0"),
        ({"n_test": -3}, r"n_test must be an integer >= 1, got -3"),
        ({"n_test": 1.5}, r"n_test must be an integer >= 1, got 1.5"),
        ({"n_numbers": 1}, r"n_numbers must be an integer in \[2, 4\], got 1"),
        ({"n_numbers": 7}, r"n_numbers must be an integer in \[2, 4\], got 7"),
        ({"max_digit": 10}, r"max_digit must be an integer in \[0, 9\], got 10"),
        ({"min_digit": 5, "max_digit": 3}, r"max_digit must be >= min_digit \(5\)"),
        ({"min_target": 50, "max_target": 10}, r"max_target must be >= min_target \(50\)"),
        ({"seed": -1}, r"seed must be an integer >= 0, got -1"),
        ({"seed": True}, r"seed must be an integer >= 0, got True"),
        ({"min_target": 800, "max_target": 900}, r"no puzzle has a target in \[min_target, max_target\]"),
        ({"n_train": 1300, "n_test": 200}, r"n_train \+ n_test must be <= 1345.*got n_train=1300"),
        ({"min_digit": 0, "max_digit": 0, "n_train": 1, "n_test": 1}, r"n_train \+ n_test must be <= 1"),
    ],
)
def test_config_errors(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        CountdownConfig(**kwargs)


def test_config_is_frozen_and_hashable() -> None:
    cfg = CountdownConfig()
    with pytest.raises(AttributeError):
        cfg.seed = 1  # type: ignore[misc]
    assert hash(cfg) == hash(CountdownConfig())
