"""Arith: one- and two-digit arithmetic questions for instruct models (``What is 23 + 45?``), answered in prose,
scored by the last number (docs/smollm2.md, "The task: arith"). ``3 + 4`` and ``4 + 3`` are two problems.
"""

from __future__ import annotations

import operator
import random
from dataclasses import dataclass, field
from typing import Any

from bandpo.validation import check_int_in

ARITH_OPERATORS = {"+": "+", "-": "-", "*": "*", "x": "*"}
"""Operator names the options accept -> the operator of the problem (``x`` is ``*``)."""

MAX_DIGITS = 3
_APPLY = {"+": operator.add, "-": operator.sub, "*": operator.mul}


def _digit_range(digits: int) -> range:
    return range(10) if digits == 1 else range(10 ** (digits - 1), 10**digits)


@dataclass(frozen=True)
class ArithConfig:
    """Which arithmetic problems exist and how they are split.

    Args:
        digits: the operand digit counts to draw from (each in ``[1, 3]``), e.g. ``[1]`` or ``[1, 2]``.
        second_digits: the digit counts of the second operand, when they differ from the first's (``None``:
            ``digits`` for both), e.g. ``digits: [1, 2]`` with ``second_digits: [1]`` gives ``37 + 5``, ``4 * 8``.
        operators: among ``+``, ``-``, ``*`` (``x`` means ``*``); no repeats.
        nonnegative: subtraction never goes below zero (``a - b`` with ``a >= b``).
        n_train, n_test: split sizes (>= 1); their sum may not exceed the number of distinct problems
            (:func:`count_arith_problems`).
        seed: seed of the draw (>= 0).
    """

    digits: list[int] = field(default_factory=lambda: [1, 2])
    second_digits: list[int] | None = None
    operators: list[str] = field(default_factory=lambda: ["+", "-", "*"])
    nonnegative: bool = True
    n_train: int = 2000
    n_test: int = 200
    seed: int = 0

    def __post_init__(self) -> None:
        for name, counts in (("digits", self.digits), ("second_digits", self.second_digits)):
            if name == "second_digits" and counts is None:
                continue
            if not isinstance(counts, (list, tuple)) or not counts:
                null = "null or " if name == "second_digits" else ""
                raise ValueError(
                    f"{name} must be {null}a non-empty list of digit counts in [1, {MAX_DIGITS}], got {counts!r}"
                )
            for d in counts:
                check_int_in(name, d, 1, MAX_DIGITS)
            if len(set(counts)) != len(counts):
                raise ValueError(f"{name} must not repeat a digit count, got {counts!r}")
        if not isinstance(self.operators, (list, tuple)) or not self.operators:
            raise ValueError(
                f"operators must be a non-empty list of {', '.join(ARITH_OPERATORS)}, got {self.operators!r}"
            )
        for op in self.operators:
            if op not in ARITH_OPERATORS:
                raise ValueError(
                    f"operators must be among {', '.join(ARITH_OPERATORS)}, got {op!r} in {self.operators!r}"
                )
        ops = [ARITH_OPERATORS[o] for o in self.operators]
        if len(set(ops)) != len(ops):
            raise ValueError(f"operators must not repeat an operator ('x' is '*'), got {self.operators!r}")
        if not isinstance(self.nonnegative, bool):
            raise ValueError(f"nonnegative must be true or false, got {self.nonnegative!r}")
        check_int_in("n_train", self.n_train, 1)
        check_int_in("n_test", self.n_test, 1)
        check_int_in("seed", self.seed, 0)
        available = count_arith_problems(self)
        if self.n_train + self.n_test > available:
            raise ValueError(
                f"n_train + n_test must be <= {available}, the number of distinct problems with digits "
                f"{list(self.digits)} and operators {list(self.operators)}; got n_train={self.n_train} + "
                f"n_test={self.n_test} = {self.n_train + self.n_test}"
            )

    @property
    def ops(self) -> list[str]:
        """The operators as ``+``, ``-``, ``*``."""
        return [ARITH_OPERATORS[o] for o in self.operators]


def _values(digits: list[int]) -> set[int]:
    return {v for d in digits for v in _digit_range(d)}


def count_arith_problems(config: ArithConfig) -> int:
    """How many distinct problems ``config`` allows (``a op b`` triples, ``a`` of ``digits``, ``b`` of
    ``second_digits``; with ``nonnegative``, ``a - b`` with ``a < b`` is written ``b - a``, so a subtraction
    counts once per unordered pair it can be written from)."""
    first = _values(config.digits)
    second = _values(config.second_digits or config.digits)
    total = 0
    for op in config.ops:
        if op == "-" and config.nonnegative:
            total += len({(max(a, b), min(a, b)) for a in first for b in second})
        else:
            total += len(first) * len(second)
    return total


def arith_answer(a: int, op: str, b: int) -> int:
    """``a op b`` for ``op`` in ``+ - *``."""
    if op not in _APPLY:
        raise ValueError(f"op must be one of + - *, got {op!r}")
    return _APPLY[op](a, b)


def make_arith_splits(config: ArithConfig) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """``(train, test)``: problems as dicts with ``prompt`` (one user message), ``answer`` (the result as text),
    ``question`` (the prompt text); disjoint, test drawn first (module docstring)."""
    rng = random.Random(config.seed)
    ops = config.ops
    seen: set[tuple[int, str, int]] = set()
    drawn: list[tuple[int, str, int]] = []
    needed = config.n_test + config.n_train
    while len(drawn) < needed:
        op = rng.choice(ops)
        a = rng.choice(_digit_range(rng.choice(config.digits)))
        b = rng.choice(_digit_range(rng.choice(config.second_digits or config.digits)))
        if op == "-" and config.nonnegative and a < b:
            a, b = b, a
        key = (a, op, b)
        if key not in seen:
            seen.add(key)
            drawn.append(key)

    def row(a: int, op: str, b: int) -> dict[str, Any]:
        text = f"What is {a} {op} {b}?"
        return {
            "prompt": [{"role": "user", "content": text}],
            "answer": str(arith_answer(a, op, b)),
            "question": text,
        }

    rows = [row(*key) for key in drawn]
    return rows[config.n_test :], rows[: config.n_test]
