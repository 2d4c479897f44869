"""Tests for the last_number verifier (bandpo_lab.rewards.verifiers.verify_last_number) and its reward."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bandpo_lab.rewards import get_reward_func, get_verifier
from bandpo_lab.rewards.verifiers import last_number, verify_last_number


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("3 + 4 = 7", "7"),
        ("The answer is 7.", "7"),
        ("It is 1,234 apples", "1234"),
        ("-12 degrees", "-12"),
        ("about 2.50 dollars", "2.5"),
        ("7.0", "7"),
        ("-0", "0"),
        ("x2 and y3", None),  # inside words: not numbers
        ("no digits here", None),
        ("first 3 then 12 finally 5, done", "5"),
        ("version .5", None),
        ("So 3 \u2212 8 = \u22125", "-5"),  # U+2212, the Unicode minus sign
        ("it drops to \u20135.", "-5"),  # an en dash used as a minus
        ("pages 3\u20135", "5"),  # an en dash in a range is not a sign
        # other scripts' digits are not read (kept as typed they never matched, and hid the ASCII answer)
        ("3 + 4 = 7 \u06f7", "7"),  # Extended Arabic-Indic seven after the answer
        ("The answer is \uff17", None),  # a fullwidth seven
    ],
)
def test_last_number(text: str, expected: str | None) -> None:
    assert last_number(text) == expected


def test_verify_last_number() -> None:
    assert verify_last_number("3 + 4 = 7", "7").correct
    assert verify_last_number("So 7.0 it is", 7).correct
    assert verify_last_number("1,000", "1000").correct
    assert verify_last_number("3 + 4 = 8", "7") == (False, "8")
    assert verify_last_number("seven", "7") == (False, None)
    assert verify_last_number([{"role": "assistant", "content": "It is 12"}], ["11", "12"]).correct
    assert verify_last_number("So 3 \u2212 8 = \u22125", 5) == (False, "-5")
    assert verify_last_number("So 3 \u2212 8 = \u22125", -5) == (True, "-5")
    assert verify_last_number("-5", "\u22125").correct  # a ground truth written with U+2212
    with pytest.raises(ValueError, match="numeric ground truth, got 'seven'"):
        verify_last_number("7", "seven")


@given(st.integers(-(10**9), 10**9), st.text(alphabet="abc .!?\n", max_size=20))
def test_any_integer_written_with_commas_is_read_back(value: int, tail: str) -> None:
    text = f"so the result is {value:,}{tail}"
    assert last_number(text) == str(value)


def test_registered_as_verifier_and_reward() -> None:
    assert get_verifier("last_number") is verify_last_number
    reward = get_reward_func("last_number", incorrect_reward=0.0)
    out = reward(prompts=["q"] * 3, completions=["= 7", "= 8", "none"], answer=["7", "7", "7"])
    assert out == [1.0, 0.0, 0.0]
