"""Answers of math completions: the text of a completion (:func:`completion_text`), the ``Answer:`` line
(:func:`extract_answer`), the last ``\\boxed{}`` (:func:`last_boxed`), and the normalisation that makes equal answers
equal strings (:func:`normalize_answer`; DAPO-style exact match, docs/method.md#recipe)."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from decimal import Decimal
from numbers import Integral, Real
from typing import Any

_EN_DASH_MINUS = re.compile(r"(?<![\w.])\u2013(?=\.?\d)")


def ascii_minus(text: str) -> str:
    """``text`` with the minus signs models write in Unicode made ASCII ``-``: every U+2212 (``−``), and an en
    dash (``–``) directly before a number that does not follow a word or number (``x = –5``; the range
    ``3–5`` is left alone)."""
    return _EN_DASH_MINUS.sub("-", text.replace("\u2212", "-"))


def completion_text(completion: str | Sequence[Mapping[str, Any]] | Mapping[str, Any]) -> str:
    """The text of a completion as TRL passes it: a string, or a chat message list whose ``"assistant"`` messages'
    contents (all messages' when none has that role) are joined with newlines. Content may be a string, ``None``,
    or a list of parts ``{"type": "text", "text": ...}`` (other parts are skipped).

    Raises:
        TypeError: anything else.
    """
    if isinstance(completion, str):
        return completion
    if isinstance(completion, Mapping):
        messages: list[Any] = [completion]
    elif isinstance(completion, Sequence):
        messages = list(completion)
    else:
        raise TypeError(
            f"completion must be a string or a list of chat messages, got {type(completion).__name__}"
        )
    for m in messages:
        if not isinstance(m, Mapping):
            raise TypeError(
                f"chat messages must be mappings with 'role' and 'content', got {type(m).__name__}: {m!r}"
            )
    chosen = [m for m in messages if m.get("role") == "assistant"] or messages
    return "\n".join(_content_text(m.get("content")) for m in chosen)


def _content_text(content: object) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, Sequence):
        parts = []
        for part in content:
            if isinstance(part, str):
                parts.append(part)
            elif isinstance(part, Mapping) and part.get("type", "text") == "text":
                parts.append(str(part.get("text", "")))
        return "".join(parts)
    raise TypeError(
        f"message content must be a string, None or a list of parts, got {type(content).__name__}"
    )


def _brace_group(s: str, start: int) -> tuple[str, int] | None:
    """For ``s[start] == "{"``: ``(content, index after the matching "}")``; ``None`` if unbalanced.

    Escaped braces ``\\{`` and ``\\}`` do not count.
    """
    depth = 0
    j = start
    while j < len(s):
        ch = s[j]
        if ch == "\\":
            j += 2
            continue
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0:
                return s[start + 1 : j], j + 1
        j += 1
    return None


_BOXED = re.compile(r"\\(?:boxed|fbox)(?![a-zA-Z])")


def last_boxed(text: str) -> str | None:
    """Content of the last ``\\boxed{...}`` (or ``\\fbox{...}``) in ``text``, nested braces included.

    Also accepts the brace-less form ``\\boxed 42`` (up to the next space or ``$``). Returns ``None`` when
    there is no ``\\boxed``, when the last one is unbalanced, or when its content is blank.
    """
    matches = list(_BOXED.finditer(text))
    if not matches:
        return None
    i = matches[-1].end()
    while i < len(text) and text[i] in " \t":
        i += 1
    if i < len(text) and text[i] == "{":
        group = _brace_group(text, i)
        content = group[0] if group else None
    elif i > matches[-1].end():  # "\boxed 42"
        content = re.match(r"[^\s$]*", text[i:]).group(0)  # type: ignore[union-attr]
    else:
        content = None
    return content if content and content.strip() else None


_WRAPPERS = re.compile(
    r"\\(?:boxed|fbox|text|textbf|textit|textrm|textnormal|textup|mathrm|mathbf|mathit|mathnormal|mbox)\s*(?=\{)"
)


def _unwrap(s: str) -> str:
    """Replace ``\\boxed{X}``, ``\\text{X}``, ``\\mathrm{X}``, ... by ``X`` (nested braces included; one unclosed
    loses its command word only). One pass, linear in ``len(s)``: a degenerate reply with thousands of unclosed
    ``\\text{`` does not stall the reward."""
    out: list[str] = []
    opened: list[int | None] = []  # per open brace: where a dropped command's "{" would go in out, else None
    i = 0
    while i < len(s):
        if (m := _WRAPPERS.match(s, i)) is not None:
            opened.append(len(out))
            i = m.end() + 1
            continue
        ch = s[i : i + 2] if s[i] == "\\" else s[i]  # an escaped brace does not count
        if ch == "{":
            opened.append(None)
        elif ch == "}" and opened and opened.pop() is not None:
            ch = ""
        out.append(ch)
        i += max(len(ch), 1)
    for pos in reversed([p for p in opened if p is not None]):  # unclosed: keep its "{"
        out.insert(pos, "{")
    return "".join(out)


def _frac_arg(s: str, i: int) -> tuple[str, int] | None:
    """One argument of ``\\frac`` at ``s[i]``: a brace group, a command (``\\pi``) or a single character."""
    if i >= len(s):
        return None
    if s[i] == "{":
        return _brace_group(s, i)
    if s[i] == "\\":
        m = re.match(r"\\[a-zA-Z]+", s[i:])
        return (m.group(0), i + m.end()) if m else None
    return s[i], i + 1


_ATOM = re.compile(r"-?[\w.\\{}^]+")
_FRAC = re.compile(r"\\frac(?![a-zA-Z])")


def _paren(x: str) -> str:
    return x if _ATOM.fullmatch(x) else f"({x})"


def _fracs_to_slash(s: str) -> str:
    """``\\frac{a}{b}`` (and ``\\frac12``) -> ``a/b``; non-atomic parts get parentheses: ``(1+x)/2``."""
    out = []
    pos = 0
    for m in _FRAC.finditer(s):
        if m.start() < pos:  # inside an argument already converted
            continue
        num = _frac_arg(s, m.end())
        den = _frac_arg(s, num[1]) if num else None
        if num is None or den is None:  # malformed: leave the rest untouched
            break
        out.append(s[pos : m.start()])
        out.append(f"{_paren(_fracs_to_slash(num[0]))}/{_paren(_fracs_to_slash(den[0]))}")
        pos = den[1]
    out.append(s[pos:])
    return "".join(out)


def _strip_outer_braces(s: str) -> str:
    while s.startswith("{") and (g := _brace_group(s, 0)) is not None and g[1] == len(s):
        s = g[0]
    return s


_LATEX_NOISE = re.compile(
    r"\\left(?![a-zA-Z])|\\right(?![a-zA-Z])|\\displaystyle|\\[!,;: ]|~|\\[()\[\]]"
    r"|\^\s*\{\s*\\circ\s*\}|\^\s*\\circ|°|\\degree|\\%|%"
)
_THOUSANDS = re.compile(r"[+-]?\d{1,3}(?:,\d{3})+(?:\.\d+)?")
_NUMBER = re.compile(r"([+-]?)(\d*)(?:\.(\d*))?")


def normalize_answer(answer: object) -> str:
    """``answer`` normalised for exact matching (DAPO-style, cheap and deterministic: ``"$\\frac{1}{2}$."`` ->
    ``"1/2"``, ``"x = 1{,}000"`` -> ``"1000"``; the steps: docs/trl.md, "Rewards and answer checking"); ``""``
    when nothing is left."""
    s = ascii_minus(str(answer)).strip().replace("\\$", "")
    if s.count("$") >= 2:
        m = re.search(r"\$+(.*?)\$+", s, flags=re.DOTALL)
        s = m.group(1) if m else s.replace("$", "")
    s = s.replace("$", "")
    s = re.sub(r"\\[dt]frac(?![a-zA-Z])", r"\\frac", s)
    s = _LATEX_NOISE.sub("", s)
    s = re.sub(r"\\(boxed|fbox)\s+(?=[^{\s])", "", s)  # "\boxed 42"
    s = _unwrap(s)
    s = re.sub(r"\s+", "", s).rstrip(".")
    s = re.split(r"(?<![<>!])=", s)[-1]
    s = re.sub(r"\\sqrt(\d)", r"\\sqrt{\1}", s)
    s = _fracs_to_slash(s)
    s = _strip_outer_braces(s)
    s = s.replace("{,}", ",")
    if _THOUSANDS.fullmatch(s):
        s = s.replace(",", "")
    return canonical_number(s) or s


def canonical_number(text: str) -> str | None:
    """``text`` as a canonical number (no leading ``+``, no leading zeros, no trailing decimal zeros, ``-0`` is
    ``0``: ``"+05.50"`` -> ``"5.5"``, ``"3.0"`` -> ``"3"``), or ``None`` when it is not one (thousands separators
    included)."""
    m = _NUMBER.fullmatch(text)
    if not m or not (m.group(2) or m.group(3)):
        return None
    sign, int_part, frac_part = m.group(1), m.group(2).lstrip("0") or "0", (m.group(3) or "").rstrip("0")
    number = int_part + (f".{frac_part}" if frac_part else "")
    return "-" + number if sign == "-" and number != "0" else number


def ground_truth_strs(ground_truth: object) -> list[str]:
    """The accepted answers as strings: one string/number, or a non-empty list/tuple of them. Numbers are written
    positionally (``1e-05`` -> ``"0.00001"``, ``1e16`` -> ``"10000000000000000"``, ``7.0`` -> ``"7.0"``): ``str``
    would give scientific notation, which no reply is matched against."""
    items = list(ground_truth) if isinstance(ground_truth, (list, tuple)) else [ground_truth]
    for item in items:
        ok = isinstance(item, str) or (isinstance(item, Real) and not isinstance(item, bool))
        if not ok or (isinstance(item, Real) and not math.isfinite(float(item))):
            raise ValueError(
                f"ground_truth must be a string, a finite number or a non-empty list of them, got {ground_truth!r}"
            )
    if not items:
        raise ValueError(f"ground_truth must not be an empty list, got {ground_truth!r}")
    return [item if isinstance(item, str) else _positional(item) for item in items]  # type: ignore[arg-type]


def _positional(number: Real) -> str:
    """``number`` (finite) in positional notation: integers exactly, floats by their shortest repr."""
    if isinstance(number, Integral):
        return str(int(number))
    return format(Decimal(repr(float(number))), "f")


def normalized_ground_truth(ground_truth: str) -> str:
    """``normalize_answer(ground_truth)``; raises ``ValueError`` when nothing is left to match against."""
    gt = normalize_answer(ground_truth)
    if not gt:
        raise ValueError(
            f"ground_truth {ground_truth!r} is empty after normalisation; nothing to match against"
        )
    return gt


_ANSWER = re.compile(r"(?<![A-Za-z])answer\s*\**\s*:\**", flags=re.IGNORECASE)
"""``Answer:`` with the Markdown emphasis a model puts around it: ``**Answer**:``, ``*Answer*:``, ``*Answer:*``."""


def extract_answer(completion: str | Sequence[Mapping[str, Any]], *, normalize: bool = True) -> str | None:
    """The DAPO answer of a completion: the rest of the line after the last ``Answer:`` (case-insensitive, after
    other words, on the next line, with Markdown emphasis: docs/trl.md, "Rewards and answer checking"), through
    :func:`normalize_answer` with ``normalize``; ``None`` when there is no ``Answer:`` or nothing follows it."""
    text = completion_text(completion)
    matches = list(_ANSWER.finditer(text))
    if not matches:
        return None
    rest = text[matches[-1].end() :].replace("**", "").lstrip()
    line = rest.split("\n", 1)[0].strip()
    answer = normalize_answer(line) if normalize else line
    return answer or None
