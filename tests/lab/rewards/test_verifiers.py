"""Tests for bandpo_lab.rewards.verifiers: the dapo and boxed verifiers (with and without math-verify)."""

from __future__ import annotations

import importlib.util

import pytest

from bandpo_lab.rewards import (
    VerifyResult,
    math_verify_available,
    verifiers,
    verify_boxed,
    verify_dapo,
)


# ------------------------------------------------------------------------------------------------ verifiers
def test_verify_dapo() -> None:
    assert verify_dapo("work\nAnswer: 34", "34") == VerifyResult(True, "34")
    assert verify_dapo("Answer: 1/2", r"\frac{1}{2}") == VerifyResult(True, "1/2")
    assert verify_dapo("Answer: 35", 34) == VerifyResult(False, "35")
    assert verify_dapo("34", "34") == VerifyResult(False, None)
    assert verify_dapo("Answer: 3", ["2", "3"]).correct  # a list of accepted answers
    assert verify_dapo([{"role": "assistant", "content": "Answer: $34$."}], r"\boxed{34}").correct


def test_unicode_minus_is_a_minus() -> None:
    assert verify_dapo("Answer: \u22125", -5) == VerifyResult(True, "-5")  # U+2212
    assert verify_dapo("Answer: \u20135", -5) == VerifyResult(True, "-5")  # an en dash before a digit
    assert verify_dapo("Answer: \u22125", 5) == VerifyResult(False, "-5")
    assert verify_boxed("\\boxed{\u22125}", -5, use_math_verify=False) == VerifyResult(True, "-5")
    assert verify_boxed("\\boxed{\u22125}", 5, use_math_verify=False) == VerifyResult(False, "-5")


@pytest.mark.parametrize(
    ("ground_truth", "match"),
    [
        (None, "ground_truth must be a string"),
        ("$$", "empty after normalisation"),
        ([], "empty list"),
        (True, "string"),
    ],
)
def test_verifiers_reject_bad_ground_truth(ground_truth: object, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        verify_dapo("Answer: 1", ground_truth)
    with pytest.raises(ValueError, match=match):
        verify_boxed(r"\boxed{1}", ground_truth, use_math_verify=False)


def test_verify_boxed_string_fallback() -> None:
    assert verify_boxed(r"so \boxed{\dfrac{1}{2}}.", "1/2", use_math_verify=False) == VerifyResult(
        True, "1/2"
    )
    assert verify_boxed(r"\boxed{1} then \boxed{2}", "2", use_math_verify=False).correct
    assert verify_boxed(r"\boxed{0.5}", "1/2", use_math_verify=False) == VerifyResult(False, "0.5")
    assert verify_boxed("Answer: 2", "2", use_math_verify=False) == VerifyResult(False, None)
    assert verify_boxed(r"\boxed{7}", r"solution ... \boxed{7}", use_math_verify=False).correct


def test_verify_boxed_forced_math_verify_without_the_package(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(verifiers, "math_verify_available", lambda: False)  # where verify_boxed looks it up
    with pytest.raises(ImportError, match="math-verify"):
        verify_boxed(r"\boxed{1}", "1", use_math_verify=True)
    assert verify_boxed(r"\boxed{0.5}", "1/2") == VerifyResult(False, "0.5")  # auto: string fallback


@pytest.mark.skipif(importlib.util.find_spec("math_verify") is None, reason="math-verify not installed")
def test_verify_boxed_with_math_verify() -> None:
    assert math_verify_available()
    assert verify_boxed(r"\boxed{0.5}", r"\frac{1}{2}") == VerifyResult(True, "0.5")
    assert verify_boxed(r"\boxed{1+x^2}", "$x^2+1$").correct
    assert verify_boxed(r"\boxed{(1, 2)}", "(1,2)").correct
    assert not verify_boxed(r"\boxed{35}", "34").correct
    assert not verify_boxed(r"\boxed{\text{three}}", "3").correct
    assert verify_boxed(r"\boxed{2} and finally \boxed{3}", "3").correct  # only the last box
