"""Countdown: a synthetic arithmetic puzzle with a verifiable 0/1 reward (docs/tiny-task.md): prompt ``"3,7,2:23="``,
answer ``"3*7+2"``, each digit once with ``+ - *`` (usual precedence; no parentheses, unary minus or concatenated
digits). The puzzles (digit multiset and target) are enumerated exhaustively, so each is solvable; train and test
never share one. The verifier parses the expression itself; it never calls ``eval``.
"""

from __future__ import annotations

import itertools
import random
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from bandpo.validation import check_int_in

OPERATORS = "+-*"
"""The binary operators an answer may use."""

END_OF_TEXT_MARKERS = ("<eos>", "<|endoftext|>", "<|im_end|>", "<|eot_id|>", "</s>")
"""End-of-text strings the verifier cuts a completion at (the tiny model's eos is ``<eos>``)."""

MAX_N_NUMBERS = 4  # exhaustive enumeration: 495 multisets x 24 orders x 27 operator choices at n=4
MAX_ABS_TARGET = 10**6

_PROMPT_RE = re.compile(r"(?P<digits>\d+(?:,\d+)*):(?P<target>-?\d+)=")
_TOKEN_RE = re.compile(r"\s*(?:(?P<number>[0-9]+)|(?P<op>[-+*]))")


@dataclass(frozen=True)
class CountdownConfig:
    """Which countdown puzzles exist and how they are split.

    Args:
        n_numbers: digits per puzzle, in ``[2, 4]``.
        min_digit, max_digit: the digits are drawn from ``[min_digit, max_digit]``, within ``[0, 9]``.
        min_target, max_target: only puzzles whose target lies in ``[min_target, max_target]`` are kept.
        n_train, n_test: split sizes, each >= 1; their sum may not exceed the number of distinct puzzles
            (:func:`count_puzzles`; 1345 for the defaults).
        seed: seed of the shuffle that assigns puzzles to splits and of the digit order in the prompts.
    """

    n_numbers: int = 3
    min_digit: int = 1
    max_digit: int = 9
    min_target: int = 0
    max_target: int = 99
    n_train: int = 1000
    n_test: int = 200
    seed: int = 0

    def __post_init__(self) -> None:
        check_int_in("n_numbers", self.n_numbers, 2, MAX_N_NUMBERS)
        check_int_in("min_digit", self.min_digit, 0, 9)
        check_int_in("max_digit", self.max_digit, 0, 9)
        if self.max_digit < self.min_digit:
            raise ValueError(
                f"max_digit must be >= min_digit ({self.min_digit}) and <= 9, got {self.max_digit!r}"
            )
        check_int_in("min_target", self.min_target, -MAX_ABS_TARGET, MAX_ABS_TARGET)
        check_int_in("max_target", self.max_target, -MAX_ABS_TARGET, MAX_ABS_TARGET)
        if self.max_target < self.min_target:
            raise ValueError(f"max_target must be >= min_target ({self.min_target}), got {self.max_target!r}")
        check_int_in("n_train", self.n_train, 1)
        check_int_in("n_test", self.n_test, 1)
        check_int_in("seed", self.seed, 0)
        available = count_puzzles(self)
        if available == 0:
            raise ValueError(
                f"no puzzle has a target in [min_target, max_target] = [{self.min_target}, {self.max_target}] "
                f"with n_numbers={self.n_numbers} digits in [{self.min_digit}, {self.max_digit}]; "
                "widen the target range or change the digits"
            )
        if self.n_train + self.n_test > available:
            raise ValueError(
                f"n_train + n_test must be <= {available}, the number of distinct puzzles with "
                f"n_numbers={self.n_numbers}, digits in [{self.min_digit}, {self.max_digit}] and targets in "
                f"[{self.min_target}, {self.max_target}]; got n_train={self.n_train} + n_test={self.n_test} = "
                f"{self.n_train + self.n_test}"
            )


def parse_expression(text: str) -> tuple[list[int], list[str]]:
    """Split ``"3*7+2"`` into numbers ``[3, 7, 2]`` and operators ``["*", "+"]``.

    Whitespace between tokens is allowed. Raises ``ValueError`` on anything else: empty text, a leading or
    trailing operator, two operators or two numbers in a row, parentheses, unary minus, numbers with a leading
    zero (``"03"``) and any other character.
    """
    numbers: list[int] = []
    ops: list[str] = []
    pos = 0
    stripped = text.rstrip()
    while pos < len(stripped):
        match = _TOKEN_RE.match(stripped, pos)
        if match is None:
            raise ValueError(f"unexpected character {stripped[pos:].lstrip()[:1]!r} in expression {text!r}")
        pos = match.end()
        number, op = match.group("number"), match.group("op")
        expect_number = len(numbers) == len(ops)
        if number is not None:
            if not expect_number:
                raise ValueError(f"two numbers in a row in expression {text!r}")
            if len(number) > 1 and number[0] == "0":
                raise ValueError(f"number with a leading zero {number!r} in expression {text!r}")
            numbers.append(int(number))
        else:
            if expect_number:
                raise ValueError(f"operator {op!r} where a number is expected in expression {text!r}")
            ops.append(op)
    if not numbers or len(numbers) != len(ops) + 1:
        raise ValueError(f"expression {text!r} must be numbers joined by binary operators {OPERATORS!r}")
    return numbers, ops


def evaluate_expression(numbers: Sequence[int], ops: Sequence[str]) -> int:
    """Value of ``numbers[0] ops[0] numbers[1] ...`` with ``*`` binding tighter than ``+`` and ``-``.

    Equivalent to Python's evaluation of the same infix string, without ``eval``.
    """
    if len(numbers) != len(ops) + 1:
        raise ValueError(f"need len(numbers) == len(ops) + 1, got {len(numbers)} numbers and {len(ops)} ops")
    total = 0
    sign = 1
    term = numbers[0]
    for op, number in zip(ops, numbers[1:]):
        if op == "*":
            term *= number
        elif op in "+-":
            total += sign * term
            sign = 1 if op == "+" else -1
            term = number
        else:
            raise ValueError(f"ops must each be one of {OPERATORS!r}, got {op!r}")
    return total + sign * term


def join_expression(numbers: Sequence[int], ops: Sequence[str]) -> str:
    """``join_expression([3, 7, 2], ["*", "+"]) == "3*7+2"``."""
    return "".join(f"{n}{o}" for n, o in zip(numbers, ops)) + str(numbers[-1])


def _expressions(digits: Sequence[int]) -> Iterator[tuple[str, int]]:
    """Every expression over ``digits`` (each once, distinct orders sorted, ``+ - *``) with its value."""
    op_choices = list(itertools.product(OPERATORS, repeat=len(digits) - 1))
    for order in sorted(set(itertools.permutations(digits))):
        for ops in op_choices:
            yield join_expression(order, ops), evaluate_expression(order, ops)


@lru_cache(maxsize=8)
def _enumerate(
    n_numbers: int, min_digit: int, max_digit: int, min_target: int, max_target: int
) -> dict[tuple[tuple[int, ...], int], tuple[str, ...]]:
    """All puzzles ``(sorted digits, target) -> all solution strings``, in a fixed (sorted) order."""
    table: dict[tuple[tuple[int, ...], int], list[str]] = {}
    for multiset in itertools.combinations_with_replacement(range(min_digit, max_digit + 1), n_numbers):
        for text, value in _expressions(multiset):
            if min_target <= value <= max_target:
                table.setdefault((multiset, value), []).append(text)
    return {key: tuple(table[key]) for key in sorted(table)}


def _puzzles(cfg: CountdownConfig) -> dict[tuple[tuple[int, ...], int], tuple[str, ...]]:
    return _enumerate(cfg.n_numbers, cfg.min_digit, cfg.max_digit, cfg.min_target, cfg.max_target)


def count_puzzles(cfg: CountdownConfig) -> int:
    """Number of distinct puzzles (digit multiset, target) that ``cfg``'s ranges allow."""
    return len(_puzzles(cfg))


def solutions(digits: Sequence[int], target: int) -> list[str]:
    """Every expression (as a string, digits in any order, ``+ - *``) over ``digits`` that equals ``target``.

    Exhaustive: ``len(digits)! * 3**(len(digits)-1)`` evaluations, so meant for a handful of digits.
    """
    return [text for text, value in _expressions(digits) if value == target]


def format_prompt(digits: Sequence[int], target: int) -> str:
    """``format_prompt([3, 7, 2], 23) == "3,7,2:23="``."""
    return ",".join(str(d) for d in digits) + f":{target}="


def parse_prompt(prompt: str) -> tuple[list[int], int]:
    """Digits and target of the last puzzle ``"3,7,2:23="`` in a prompt. Text around it is ignored: instructions
    before it, and what a ``data.prompt_template`` adds after ``{prompt}`` (a prompt that ends with the puzzle,
    as the task writes it, reads as when the puzzle had to be at the end).

    Raises ``ValueError`` when the prompt holds no such pattern.
    """
    matches = list(_PROMPT_RE.finditer(prompt))
    if not matches:
        raise ValueError(f"prompt must hold a puzzle 'd,d,...,d:target=' (e.g. '3,7,2:23='), got {prompt!r}")
    match = matches[-1]
    return [int(d) for d in match.group("digits").split(",")], int(match.group("target"))


def _problem(
    key: tuple[tuple[int, ...], int], answers: tuple[str, ...], rng: random.Random
) -> dict[str, Any]:
    multiset, target = key
    digits = list(multiset)
    rng.shuffle(digits)
    return {
        "prompt": format_prompt(digits, target),
        "answer": rng.choice(answers),
        "digits": digits,
        "target": target,
    }


def make_splits(cfg: CountdownConfig) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Deterministic, disjoint train and test puzzles: dicts with ``prompt`` (``"3,7,2:23="``), ``answer`` (one
    reference solution), ``digits`` (in prompt order) and ``target``. The puzzles are shuffled by ``cfg.seed``; the
    test split is the first ``n_test`` of them, so it does not depend on ``n_train``."""
    table = _puzzles(cfg)
    keys = list(table)
    rng = random.Random(cfg.seed)
    rng.shuffle(keys)
    test = [_problem(key, table[key], rng) for key in keys[: cfg.n_test]]
    train = [_problem(key, table[key], rng) for key in keys[cfg.n_test : cfg.n_test + cfg.n_train]]
    return train, test


def strip_completion(completion: str) -> str:
    """``completion`` cut at the first end-of-text marker (:data:`END_OF_TEXT_MARKERS`) and stripped."""
    cut = len(completion)
    for marker in END_OF_TEXT_MARKERS:
        idx = completion.find(marker)
        if idx != -1:
            cut = min(cut, idx)
    return completion[:cut].strip()


def countdown_reward(prompt: str, completion: str) -> float:
    """1.0 if ``completion``, cut at its first end-of-text marker (:func:`strip_completion`), is an expression that
    uses exactly the prompt's digits with ``+ - *`` and evaluates to the target, else 0.0 (malformed ones too); a
    prompt that is not a countdown prompt raises ``ValueError``."""
    digits, target = parse_prompt(prompt)
    if not isinstance(completion, str):
        raise TypeError(f"completion must be a str, got {type(completion).__name__}")
    try:
        numbers, ops = parse_expression(strip_completion(completion))
    except ValueError:
        return 0.0
    if sorted(numbers) != sorted(digits):
        return 0.0
    return 1.0 if evaluate_expression(numbers, ops) == target else 0.0


def _text_of(item: Any, name: str) -> str:
    """Text of a standard (str) or conversational (list of ``{"role", "content"}``) TRL prompt/completion."""
    if isinstance(item, str):
        return item
    if isinstance(item, Sequence) and item and isinstance(item[-1], Mapping) and "content" in item[-1]:
        return "".join(str(m["content"]) for m in item) if name == "completion" else str(item[-1]["content"])
    raise TypeError(f"{name} must be a str or a list of chat messages with 'content', got {item!r}")


def countdown_reward_func(prompts: Sequence[Any], completions: Sequence[Any], **kwargs: Any) -> list[float]:
    """TRL reward function: ``[countdown_reward(p, c) for p, c in zip(prompts, completions)]``, for strings or
    chat messages (the last prompt message holds the puzzle, the completion messages are concatenated); other
    dataset columns are ignored."""
    if len(prompts) != len(completions):
        raise ValueError(
            f"prompts and completions must have the same length, got {len(prompts)} and {len(completions)}"
        )
    return [
        countdown_reward(_text_of(p, "prompt"), _text_of(c, "completion"))
        for p, c in zip(prompts, completions)
    ]


def random_guess_accuracy(digits: Sequence[int], target: int) -> float:
    """Chance that a uniformly random digit order and operator choice solves the puzzle (a baseline for pass@1:
    8.6% averaged over the default test split). Every distinct order is equally likely, so it is the share of
    solutions among them."""
    orders = len(set(itertools.permutations(digits)))
    return len(solutions(digits, target)) / (orders * len(OPERATORS) ** (len(digits) - 1))
