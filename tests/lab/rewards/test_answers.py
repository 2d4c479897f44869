"""Tests for bandpo_lab.rewards.answers: completion text, answer extraction and normalisation."""

from __future__ import annotations

import time
from typing import Any

import pytest

from bandpo_lab.rewards import (
    completion_text,
    extract_answer,
    last_boxed,
    normalize_answer,
)
from bandpo_lab.rewards.answers import ascii_minus

MINUS = "\u2212"  # the Unicode minus sign models write
EN_DASH = "\u2013"


# ------------------------------------------------------------------------------------------- normalisation
@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("42", "42"),
        (" 42. ", "42"),
        ("$42$", "42"),
        ("$$42$$", "42"),
        (r"\boxed{42}", "42"),
        (r"$\boxed{42}$.", "42"),
        (r"\text{42}", "42"),
        (r"\boxed 7", "7"),
        ("x = 5", "5"),
        (r"\frac{1}{2}", "1/2"),
        (r"\dfrac12", "1/2"),
        (r"\tfrac{1}2", "1/2"),
        ("1 / 2", "1/2"),
        (r"-\frac{1}{2}", "-1/2"),
        (r"\frac{1+x}{2}", "(1+x)/2"),
        (r"\frac{\sqrt{3}}{2}", r"\sqrt{3}/2"),
        (r"\frac{\frac{1}{2}}{3}", "(1/2)/3"),
        (r"\sqrt2", r"\sqrt{2}"),
        ("1,000", "1000"),
        ("1{,}000", "1000"),
        ("05.50", "5.5"),
        ("3.0", "3"),
        ("+7", "7"),
        ("-0", "0"),
        (r"90^\circ", "90"),
        (r"90^{\circ}", "90"),
        (r"50\%", "50"),
        (r"\left( 1, 2 \right)", "(1,2)"),
        ("$5$ dollars", "5"),
        (r"\$5", "5"),
        (r"x \leq 3", r"x\leq3"),
        (r"\boxed{\{1,2\}}", r"\{1,2\}"),
        ("{5}", "5"),
        (r"\mathrm{(B)}", "(B)"),
        ("", ""),
        ("$$", ""),
        (r"\frac{1}{2", r"\frac{1}{2"),  # malformed latex is left alone, not an error
    ],
)
def test_normalize_answer(raw: str, expected: str) -> None:
    assert normalize_answer(raw) == expected


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (r"\text{a \text{b}} c", "abc"),
        (r"\textbf {a{b}c}", "a{b}c"),
        (r"\text{a}}", "a}"),
        (r"\text{a \text{b}", "{ab"),  # an unclosed command loses its word, keeps its brace
        (r"\text{a}\text{b", "a{b"),
        (r"\text{\{a\}}", r"\{a\}"),  # escaped braces do not close the group
    ],
)
def test_normalize_unwraps_nested_and_unclosed_commands(raw: str, expected: str) -> None:
    assert normalize_answer(raw) == expected


def test_unclosed_commands_take_linear_time() -> None:
    """120k characters of unclosed ``\\text{`` (a degenerate reply's ``Answer:`` line) took ~40 s when each
    unclosed command rescanned the rest of the string."""
    line = r"\text{" * 20_000
    start = time.perf_counter()
    assert extract_answer("Answer: " + line) == "{" * 20_000
    assert time.perf_counter() - start < 2.0


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("42", r"$\boxed{42}$"),
        (r"\frac{3}{4}", "3/4"),
        ("1,234", "1234"),
        ("7.0", "7"),
        (r"\dfrac{5}{6}", r"\frac56"),
    ],
)
def test_equivalent_forms_normalise_alike(a: str, b: str) -> None:
    assert normalize_answer(a) == normalize_answer(b)


@pytest.mark.parametrize(
    ("a", "b"), [("0.5", "1/2"), ("2", "3"), ("2/4", "1/2"), ("12", "1,2,3"), ("-1", "1")]
)
def test_different_answers_stay_different(a: str, b: str) -> None:
    assert normalize_answer(a) != normalize_answer(b)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (f"{MINUS}5", "-5"),
        (f"3 {MINUS} 8 = {MINUS}5", "3 - 8 = -5"),
        (f"x = {EN_DASH}5", "x = -5"),
        (f"{EN_DASH}.5", "-.5"),
        (f"pages 3{EN_DASH}5", f"pages 3{EN_DASH}5"),  # a range stays a range
        (f"3 {EN_DASH} 5", f"3 {EN_DASH} 5"),  # a spaced dash is not a sign
    ],
)
def test_ascii_minus(text: str, expected: str) -> None:
    assert ascii_minus(text) == expected


@pytest.mark.parametrize("raw", [f"{MINUS}5", f"{EN_DASH}5", f"$\\boxed{{{MINUS}5}}$", f"x = {MINUS}5."])
def test_unicode_minus_normalises_as_minus(raw: str) -> None:
    assert normalize_answer(raw) == "-5"


# ---------------------------------------------------------------------------------------------- extraction
@pytest.mark.parametrize(
    ("completion", "expected"),
    [
        ("Let me think.\nAnswer: 42", "42"),
        ("Answer: 42\n", "42"),
        ("...\nAnswer: $\\frac{1}{2}$.\n", "1/2"),
        ("**Answer:** 42", "42"),
        ("**Answer**: 42", "42"),
        ("**Final Answer**: 42", "42"),
        ("*Answer*: 42", "42"),
        ("*Answer:* 42", "42"),
        ("**Answer** : 42", "42"),
        ("Answer: **42**.", "42"),
        ("Final Answer: 7", "7"),
        ("answer:\n  13", "13"),  # DAPO's Answer\s*:\s* lets the answer start on the next line
        ("ANSWER : \\boxed{9}", "9"),
        ("Answer: 1\nOn second thought\nAnswer: 2", "2"),  # the last one counts
        ([{"role": "assistant", "content": "Answer: 9"}], "9"),
    ],
)
def test_extract_answer_accepts(completion: Any, expected: str) -> None:
    assert extract_answer(completion) == expected


@pytest.mark.parametrize(
    "completion",
    [
        "",
        "no answer here",
        "The result is 42.",
        "Answer:",
        "Answer:   \n  ",
        "Answer: $$",
        "MyAnswer: 3",
        r"\boxed{42}",
    ],
)
def test_extract_answer_returns_none_when_unparseable(completion: str) -> None:
    assert extract_answer(completion) is None


def test_extract_answer_raw() -> None:
    assert extract_answer("Answer: $\\frac{1}{2}$.", normalize=False) == "$\\frac{1}{2}$."


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (r"a \boxed{1} b \boxed{c{d}e} end", "c{d}e"),
        (r"\boxed{\frac{a}{b}}", r"\frac{a}{b}"),
        (r"\boxed{\{1,2\}}", r"\{1,2\}"),
        (r"\fbox{5}", "5"),
        (r"so \boxed 5$", "5"),
        ("no box", None),
        (r"\boxed{unbalanced", None),
        (r"\boxed{  }", None),
        (r"\boxedfoo{3}", None),
    ],
)
def test_last_boxed(text: str, expected: str | None) -> None:
    assert last_boxed(text) == expected


# ------------------------------------------------------------------------------------------ completion text
def test_completion_text_accepts_strings_and_chat_messages() -> None:
    assert completion_text("hi") == "hi"
    assert completion_text([{"role": "assistant", "content": "a"}]) == "a"
    assert completion_text({"role": "assistant", "content": "a"}) == "a"
    messages = [
        {"role": "assistant", "content": "step"},
        {"role": "tool", "content": "Answer: 0"},
        {
            "role": "assistant",
            "content": [{"type": "text", "text": "Answer: "}, {"type": "text", "text": "5"}],
        },
    ]
    assert completion_text(messages) == "step\nAnswer: 5"
    assert extract_answer(messages) == "5"
    assert completion_text([{"content": "x"}]) == "x"  # no roles: all contents
    assert completion_text([{"role": "assistant", "content": None}]) == ""


@pytest.mark.parametrize("bad", [3, None, [3], [{"role": "assistant", "content": 3}]])
def test_completion_text_rejects_other_types(bad: object) -> None:
    with pytest.raises(TypeError, match="must be"):
        completion_text(bad)  # type: ignore[arg-type]


def test_numeric_ground_truths_are_written_positionally() -> None:
    """``str`` writes 1e-05 and 1e+16, which no reply is compared against: the verifiers saw those strings."""
    import numpy as np

    from bandpo_lab.rewards.answers import ground_truth_strs

    numbers = [1e-05, 1e16, 7.0, 3, np.float64(0.25), np.int64(12), 0.1, -2.5e-7]
    assert ground_truth_strs(numbers) == [
        "0.00001",
        "10000000000000000",
        "7.0",
        "3",
        "0.25",
        "12",
        "0.1",
        "-0.00000025",
    ]
    assert ground_truth_strs("1e-05") == ["1e-05"]  # a string is the caller's own spelling: kept


def test_float_ground_truths_reach_the_verifiers() -> None:
    from bandpo_lab.rewards.verifiers import verify_dapo, verify_last_number

    assert verify_dapo("Answer: 0.00001", 1e-05).correct
    assert verify_last_number("so it is 100000000000000000", 1e17).correct
    assert verify_last_number("so it is 5", "+5").correct  # a leading + in a ground truth string
