"""Tests for bandpo.rewards: answer extraction and normalisation, verifiers, registry, failure tolerance."""

from __future__ import annotations

import functools
import logging
import math
import pickle
from collections.abc import Iterator
from typing import Any

import pytest

from bandpo import rewards
from bandpo.rewards import (
    REWARDS,
    VERIFIERS,
    SafeRewardFunc,
    VerifierReward,
    VerifyResult,
    boxed_reward,
    completion_text,
    dapo_reward,
    extract_answer,
    get_reward_func,
    get_verifier,
    last_boxed,
    math_verify_available,
    normalize_answer,
    register_reward,
    register_verifier,
    reward_names,
    safe_reward_func,
    verify_boxed,
    verify_dapo,
)


@pytest.fixture
def restore_registries() -> Iterator[None]:
    """Registrations made by a test are undone afterwards."""
    saved = [(reg, dict(reg._items), dict(reg._aliases)) for reg in (REWARDS, VERIFIERS)]
    yield
    for reg, items, aliases in saved:
        reg._items = items
        reg._aliases = aliases


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


# ---------------------------------------------------------------------------------------------- extraction
@pytest.mark.parametrize(
    ("completion", "expected"),
    [
        ("Let me think.\nAnswer: 42", "42"),
        ("Answer: 42\n", "42"),
        ("...\nAnswer: $\\frac{1}{2}$.\n", "1/2"),
        ("**Answer:** 42", "42"),
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


# ------------------------------------------------------------------------------------------------ verifiers
def test_verify_dapo() -> None:
    assert verify_dapo("work\nAnswer: 34", "34") == VerifyResult(True, "34")
    assert verify_dapo("Answer: 1/2", r"\frac{1}{2}") == VerifyResult(True, "1/2")
    assert verify_dapo("Answer: 35", 34) == VerifyResult(False, "35")
    assert verify_dapo("34", "34") == VerifyResult(False, None)
    assert verify_dapo("Answer: 3", ["2", "3"]).correct  # a list of accepted answers
    assert verify_dapo([{"role": "assistant", "content": "Answer: $34$."}], r"\boxed{34}").correct


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
    monkeypatch.setattr(rewards, "math_verify_available", lambda: False)
    with pytest.raises(ImportError, match="math-verify"):
        verify_boxed(r"\boxed{1}", "1", use_math_verify=True)
    assert verify_boxed(r"\boxed{0.5}", "1/2") == VerifyResult(False, "0.5")  # auto: string fallback


@pytest.mark.skipif(not math_verify_available(), reason="math-verify not installed")
def test_verify_boxed_with_math_verify() -> None:
    assert verify_boxed(r"\boxed{0.5}", r"\frac{1}{2}") == VerifyResult(True, "0.5")
    assert verify_boxed(r"\boxed{1+x^2}", "$x^2+1$").correct
    assert verify_boxed(r"\boxed{(1, 2)}", "(1,2)").correct
    assert not verify_boxed(r"\boxed{35}", "34").correct
    assert not verify_boxed(r"\boxed{\text{three}}", "3").correct
    assert verify_boxed(r"\boxed{2} and finally \boxed{3}", "3").correct  # only the last box


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


# ----------------------------------------------------------------------------------------------- registry
def test_registry_has_the_builtin_rewards() -> None:
    assert {"dapo", "boxed"} <= set(reward_names())
    assert get_verifier("dapo") is verify_dapo
    assert get_verifier("boxed") is verify_boxed


def test_unknown_reward_lists_valid_names() -> None:
    with pytest.raises(
        ValueError, match=r"unknown reward 'dappo' \(did you mean 'dapo'\?\); valid names: dapo, boxed"
    ):
        get_reward_func("dappo")
    with pytest.raises(ValueError, match="unknown verifier 'nope'; valid names: dapo, boxed"):
        get_verifier("nope")


@pytest.mark.usefixtures("restore_registries")
def test_register_reward_and_bind_keyword_options() -> None:
    def length_reward(prompts: list, completions: list, *, scale: float = 1.0, **kwargs: Any) -> list[float]:
        return [scale * len(c) for c in completions]

    assert register_reward("length", length_reward) is length_reward
    assert "length" in reward_names()
    fn = get_reward_func("length", scale=2.0)
    assert isinstance(fn, functools.partial)
    assert fn.func.__name__ == "length_reward"  # TRL names a partial after the wrapped function
    assert fn(["p"], ["abc"]) == [6.0]
    with pytest.raises(ValueError, match=r"has no option\(s\) \['bogus'\]; valid options: \['scale'\]"):
        get_reward_func("length", bogus=1)
    with pytest.raises(ValueError, match="reward 'length' is already registered"):
        register_reward("length", length_reward)
    with pytest.raises(ValueError, match="must be callable"):
        register_reward("broken", 3)  # type: ignore[arg-type]


@pytest.mark.usefixtures("restore_registries")
def test_register_verifier_adds_verifier_and_reward() -> None:
    def verify_upper(completion: Any, ground_truth: Any) -> VerifyResult:
        text = completion_text(completion).strip()
        return VerifyResult(text.upper() == str(ground_truth), text or None)

    reward = register_verifier("upper", verify_upper, incorrect_reward=0.0)
    assert isinstance(reward, VerifierReward)
    assert get_reward_func("upper") is reward
    assert get_verifier("upper") is verify_upper
    assert reward(["p", "p", "p"], ["abc", "abd", ""], answer=["ABC"] * 3) == [1.0, 0.0, 0.0]
    with pytest.raises(ValueError, match="reward 'dapo' is already registered"):
        register_verifier("dapo", verify_upper)
    assert get_verifier("dapo") is verify_dapo  # a failed registration changes neither registry


# ----------------------------------------------------------------------------------------- safe_reward_func
def exploding_reward(prompts: list, completions: list, answer: list, **kwargs: Any) -> list[float]:
    """Raises on any completion containing 'boom'; otherwise 1.0 when the completion equals its answer."""
    out = []
    for c, a in zip(completions, answer, strict=True):
        text = completion_text(c)
        if "boom" in text:
            raise RuntimeError("parser exploded")
        out.append(1.0 if text == a else -1.0)
    return out


def test_safe_reward_func_scores_failures_and_counts_them(caplog: pytest.LogCaptureFixture) -> None:
    safe = safe_reward_func(exploding_reward, failure_reward=0.0)
    assert isinstance(safe, SafeRewardFunc)
    assert safe.__name__ == "exploding_reward"
    with caplog.at_level(logging.WARNING, logger="bandpo.rewards"):
        out = safe(["p"] * 4, ["a", "boom", "c", "x"], answer=["a", "b", "c", "y"])
    assert out == [1.0, 0.0, 1.0, -1.0]  # each completion scored against its own answer
    assert safe.n_failures == 1
    assert safe.n_completions == 4
    assert "parser exploded" in (safe.last_error or "")
    assert "failed on a completion" in caplog.text
    assert safe(["p"], ["a"], answer=["a"]) == [1.0]
    assert safe.metrics() == {
        "rewards/exploding_reward/failures": 1.0,
        "rewards/exploding_reward/failure_frac": 0.2,
    }
    assert safe.metrics() == {
        "rewards/exploding_reward/failures": 0.0,
        "rewards/exploding_reward/failure_frac": 0.0,
    }
    assert safe.n_failures == 1  # cumulative count is not reset


def test_safe_reward_func_handles_chat_completions_and_logs_per_batch() -> None:
    logged: list[tuple[str, float]] = []
    safe = safe_reward_func(exploding_reward, failure_reward=-0.5)
    chat = [[{"role": "assistant", "content": t}] for t in ("a", "boom")]
    out = safe(
        ["p", "p"],
        chat,
        answer=["a", "a"],
        log_metric=lambda k, v: logged.append((k, v)),
        trainer_state=object(),
    )
    assert out == [1.0, -0.5]
    assert logged == [("rewards/exploding_reward/failure_frac", 0.5)]  # per-item retries do not log


def test_safe_reward_func_raises_when_every_completion_fails() -> None:
    safe = safe_reward_func(dapo_reward)
    with pytest.raises(RuntimeError, match=r"failed on all 2 completions.*configuration error") as info:
        safe(["p", "p"], ["Answer: 1", "Answer: 2"], solution=["1", "2"])  # wrong column name
    assert "column 'answer'" in str(info.value.__cause__)
    lenient = safe_reward_func(dapo_reward, failure_reward=0.0, raise_if_all_fail=False)
    assert lenient(["p", "p"], ["Answer: 1", "Answer: 2"], solution=["1", "2"]) == [0.0, 0.0]
    assert lenient.n_failures == 2


def test_safe_reward_func_checks_outputs() -> None:
    def bad_values(prompts: list, completions: list, **kwargs: Any) -> list[Any]:
        return [math.nan if c == "nan" else (None if c == "skip" else 1.0) for c in completions]

    safe = safe_reward_func(bad_values, failure_reward=0.0)
    assert safe(["p"] * 3, ["ok", "nan", "skip"]) == [1.0, 0.0, None]  # None (not applicable) passes through
    assert safe.n_failures == 1

    def wrong_length(prompts: list, completions: list, **kwargs: Any) -> list[float]:
        return [1.0]

    fixed = safe_reward_func(wrong_length)
    assert fixed(["p", "p"], ["a", "b"]) == [1.0, 1.0]  # one-by-one calls return one value each
    assert fixed.n_failures == 0


def test_safe_reward_func_rejects_bad_arguments() -> None:
    async def async_reward(prompts: list, completions: list, **kwargs: Any) -> list[float]:
        return [0.0]

    with pytest.raises(ValueError, match="async"):
        safe_reward_func(async_reward)
    with pytest.raises(ValueError, match="fn must be a reward function"):
        safe_reward_func(3)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="failure_reward must be a finite number"):
        safe_reward_func(dapo_reward, failure_reward=math.nan)


def test_safe_reward_func_names_partials_after_the_function() -> None:
    assert safe_reward_func(functools.partial(exploding_reward)).__name__ == "exploding_reward"
    assert safe_reward_func(get_reward_func("dapo", incorrect_reward=0.0)).__name__ == "dapo"
