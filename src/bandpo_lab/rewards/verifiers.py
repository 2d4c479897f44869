"""Verifiers: score one completion against one ground truth (``dapo``, ``boxed``, ``last_number``: docs/trl.md,
"Rewards and answer checking")."""

from __future__ import annotations

import functools
import importlib.util
import re
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

from bandpo._optional import install_hint
from bandpo_lab.rewards.answers import (
    ascii_minus,
    canonical_number,
    completion_text,
    extract_answer,
    ground_truth_strs,
    last_boxed,
    normalize_answer,
    normalized_ground_truth,
)


class VerifyResult(NamedTuple):
    """Outcome of checking one completion: whether the answer matches the ground truth, and the normalised
    extracted answer (``None`` when none could be parsed; then ``correct`` is False)."""

    correct: bool
    answer: str | None


Verifier = Callable[[Any, Any], VerifyResult]
"""``verify(completion, ground_truth) -> VerifyResult``; ``completion`` a string or chat message list."""


def verify_dapo(completion: str | Sequence[Mapping[str, Any]], ground_truth: object) -> VerifyResult:
    """DAPO verifier: the last ``Answer:`` line (:func:`extract_answer`), normalised, exact match against
    ``ground_truth`` (a string or number, or a list of accepted answers).

    Raises:
        ValueError: a ground truth that is not a string/number (list) or normalises to ``""``.
    """
    truths = {normalized_ground_truth(gt) for gt in ground_truth_strs(ground_truth)}
    answer = extract_answer(completion)
    return VerifyResult(answer is not None and answer in truths, answer)


@functools.lru_cache(maxsize=1)
def math_verify_available() -> bool:
    """Whether the optional ``math-verify`` package (extra ``bandpo[math]``) can be imported."""
    try:
        return importlib.util.find_spec("math_verify") is not None
    except (ImportError, ValueError):  # e.g. blocked with sys.modules["math_verify"] = None
        return False


def _timeout() -> int | None:
    # math_verify enforces timeouts with signal.alarm, which works in the main thread only.
    return 5 if threading.current_thread() is threading.main_thread() else None


@functools.lru_cache(maxsize=4096)
def _mv_parse_gold(gold: str) -> tuple[Any, ...]:
    import math_verify

    text = gold if "$" in gold or "\\boxed" in gold else f"${gold}$"
    return tuple(math_verify.parse(text, parsing_timeout=_timeout()))


def _mv_equal(gold: str, content: str) -> bool:
    import math_verify

    gold_parsed = list(_mv_parse_gold(gold))
    pred_parsed = math_verify.parse(f"\\boxed{{{content}}}", parsing_timeout=_timeout())
    if not gold_parsed or not pred_parsed:
        return False
    return bool(math_verify.verify(gold_parsed, pred_parsed, timeout_seconds=_timeout()))


def verify_boxed(
    completion: str | Sequence[Mapping[str, Any]],
    ground_truth: object,
    *,
    use_math_verify: bool | None = None,
) -> VerifyResult:
    """``\\boxed{}`` verifier: the last ``\\boxed{...}`` of the completion, normalised, against the ground truth
    (a string or number, or a list of accepted answers); also symbolically with ``math-verify`` when installed (or
    ``use_math_verify=True``). Details: docs/trl.md, "Rewards and answer checking".

    Raises:
        ImportError: ``use_math_verify=True`` without the package.
        ValueError: a ground truth that is not a string/number (list) or normalises to ``""``.
    """
    gts_raw = [last_boxed(gt) or gt for gt in ground_truth_strs(ground_truth)]
    gts = [normalized_ground_truth(gt) for gt in gts_raw]
    if use_math_verify is None:
        use_math_verify = math_verify_available()
    elif use_math_verify and not math_verify_available():
        raise ImportError(f"use_math_verify=True needs the math-verify package: {install_hint('math')}")
    content = last_boxed(completion_text(completion))
    answer = normalize_answer(content) if content is not None else None
    if not answer:
        return VerifyResult(False, None)
    if answer in gts:
        return VerifyResult(True, answer)
    correct = use_math_verify and any(_mv_equal(gt, content) for gt in gts_raw)  # type: ignore[arg-type]
    return VerifyResult(bool(correct), answer)


_NUMBER_RE = re.compile(r"(?<![\w.])-?[0-9]+(?:,[0-9]{3})*(?:\.[0-9]+)?")
"""A number as a reply writes it (after :func:`ascii_minus`): optional minus, ASCII digits with optional thousands
commas, optional decimals (``-1,234.50``); not part of a word (``x2``) and not the tail of a decimal (``.5`` is
skipped). Other scripts' digits (``\\d`` would take ``۷`` or a fullwidth ``７``) are not read: kept as typed, they
never equalled an ASCII ground truth, and hid an ASCII answer before them."""


def last_number(text: str) -> str | None:
    """The last number in ``text`` in canonical form (commas removed, trailing decimal zeros dropped, ``-0`` is
    ``0``: ``"1,234.50"`` -> ``"1234.5"``), or ``None`` when it holds none. Unicode minus signs count as ``-``
    (:func:`~bandpo_lab.rewards.answers.ascii_minus`: ``"−5"`` -> ``"-5"``)."""
    found = _NUMBER_RE.findall(ascii_minus(text))
    return canonical_number(found[-1].replace(",", "")) if found else None


def verify_last_number(completion: str | Sequence[Mapping[str, Any]], ground_truth: object) -> VerifyResult:
    """The last number in the reply (:func:`last_number`) equals the ground truth (a number or a numeric string, or
    a list of them) as a number (``"7.0"`` = ``7``).

    Raises:
        ValueError: a ground truth that is not a number.
    """
    truths = set()
    for gt in ground_truth_strs(ground_truth):
        text = ascii_minus(gt).strip().removeprefix("+")  # a ground truth "+5" is the number 5
        canonical = canonical_number(text.replace(",", "")) if _NUMBER_RE.fullmatch(text) else None
        if canonical is None:
            raise ValueError(f"the last_number verifier needs a numeric ground truth, got {gt!r}")
        truths.add(canonical)
    answer = last_number(completion_text(completion))
    return VerifyResult(answer is not None and answer in truths, answer)
