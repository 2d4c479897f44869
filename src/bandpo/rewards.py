"""Rule-based rewards for math data, a registry of reward names, and a failure-tolerant wrapper.

Verifiers score one completion against one ground truth and return a :class:`VerifyResult` (``correct``, and
the normalised extracted ``answer``, ``None`` when nothing could be parsed: the eval's maj@k and
``n_unparsed`` read it):

* ``"dapo"`` (:func:`verify_dapo`): the DAPO / BandPO recipe (docs/method.md#recipe). The answer is the rest of the
  line after the *last* ``Answer:`` in the completion (case-insensitive, e.g. ``Final Answer: $42$``);
  answer and ground truth are normalised by :func:`normalize_answer` and compared by exact string match.
* ``"boxed"`` (:func:`verify_boxed`): the content of the last ``\\boxed{...}``. With the ``math-verify``
  package installed (extra ``bandpo[math]``) it is compared symbolically (``math_verify.parse``/``verify``);
  without it, by the normalised exact match of ``"dapo"``. :func:`math_verify_available` says which.

Reward functions follow TRL's signature ``fn(prompts, completions, **kwargs) -> list[float | None]``: one value
per completion; dataset columns arrive as keyword lists (the ground truth by default in ``answer``);
completions are strings or chat message lists ``[{"role": "assistant", "content": ...}]``.
``REWARDS`` maps names to them (``get_reward_func("dapo", incorrect_reward=0.0)``); another task adds its own
with :func:`register_reward`. :func:`safe_reward_func` wraps any of them so that a completion whose scoring
raises gets a fixed failure reward instead of ending the run, and counts those failures.
"""

from __future__ import annotations

import functools
import importlib.util
import inspect
import logging
import math
import re
import threading
from collections.abc import Callable, Mapping, Sequence
from numbers import Real
from typing import Any, NamedTuple

from bandpo.registry import Registry

logger = logging.getLogger(__name__)

__all__ = [
    "REWARDS",
    "VERIFIERS",
    "SafeRewardFunc",
    "VerifierReward",
    "VerifyResult",
    "boxed_reward",
    "completion_text",
    "dapo_reward",
    "extract_answer",
    "get_reward_func",
    "get_verifier",
    "last_boxed",
    "math_verify_available",
    "normalize_answer",
    "register_reward",
    "register_verifier",
    "reward_names",
    "safe_reward_func",
    "verify_boxed",
    "verify_dapo",
]

RewardFunc = Callable[..., Sequence["float | None"]]
"""TRL-style reward function ``fn(prompts, completions, **kwargs) -> list[float | None]``."""


class VerifyResult(NamedTuple):
    """Outcome of checking one completion.

    Attributes:
        correct: the answer matches the ground truth.
        answer: the normalised extracted answer; ``None`` when no answer could be parsed (then ``correct`` is
            False).
    """

    correct: bool
    answer: str | None


Verifier = Callable[[Any, Any], VerifyResult]
"""``verify(completion, ground_truth) -> VerifyResult``; ``completion`` a string or chat message list."""


# ------------------------------------------------------------------------------------------- completion text
def completion_text(completion: str | Sequence[Mapping[str, Any]] | Mapping[str, Any]) -> str:
    """The text of a completion as TRL passes it: a string, or a chat message list.

    For messages, the contents of all ``"assistant"`` messages are joined with newlines (all messages when
    none has that role), so the last ``Answer:`` line or ``\\boxed{}`` of a multi-message completion is found.
    Content may be a string, ``None``, or a list of parts ``{"type": "text", "text": ...}`` (other parts are
    skipped).

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


# ---------------------------------------------------------------------------------------------- latex helpers
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
    """Replace ``\\boxed{X}``, ``\\text{X}``, ``\\mathrm{X}``, ... by ``X`` (nested braces included)."""
    while (m := _WRAPPERS.search(s)) is not None:
        group = _brace_group(s, m.end())
        if group is None:  # unbalanced: drop the command word, keep the rest
            s = s[: m.start()] + s[m.end() :]
        else:
            s = s[: m.start()] + group[0] + s[group[1] :]
    return s


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
    """Normalise an answer string for exact matching (DAPO-style, cheap and deterministic).

    Steps, in order:

    1. ``\\$`` (a dollar sign) is dropped; with two or more ``$``, the first ``$...$`` (or ``$$...$$``) span is
       kept (``"$5$ dollars"`` -> ``5``), else lone ``$`` are removed.
    2. ``\\dfrac``/``\\tfrac`` -> ``\\frac``; ``\\left``, ``\\right``, ``\\displaystyle``, spacing (``\\,``,
       ``\\!``, ``\\;``, ``~``), ``\\(``/``\\)``/``\\[``/``\\]``, degrees (``^\\circ``) and percent signs are
       removed.
    3. Wrappers are unwrapped: ``\\boxed{X}``, ``\\fbox{X}``, ``\\text{X}``, ``\\textbf{X}``, ``\\mathrm{X}``, ...
    4. All whitespace is removed, trailing periods are stripped, and only the part after the last ``=`` is
       kept (``x=5`` -> ``5``; ``<=``, ``>=``, ``!=`` are not split).
    5. ``\\sqrt2`` -> ``\\sqrt{2}``; ``\\frac{a}{b}``, ``\\frac ab`` -> ``a/b`` (non-atomic parts in
       parentheses: ``\\frac{1+x}{2}`` -> ``(1+x)/2``); braces around the whole answer are removed.
    6. Numbers are canonical: thousands separators removed (``1,000`` and ``1{,}000`` -> ``1000``), leading
       ``+``, leading zeros and trailing decimal zeros dropped (``05.50`` -> ``5.5``, ``3.0`` -> ``3``).

    Fractions are not reduced and decimals are not compared with fractions (``0.5`` != ``1/2``): the
    recipe is exact match. Returns ``""`` when nothing is left.
    """
    s = str(answer).strip().replace("\\$", "")
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
    m = _NUMBER.fullmatch(s)
    if m and (m.group(2) or m.group(3)):
        sign, int_part, frac_part = m.group(1), m.group(2).lstrip("0") or "0", (m.group(3) or "").rstrip("0")
        s = int_part + (f".{frac_part}" if frac_part else "")
        if sign == "-" and s != "0":
            s = "-" + s
    return s


def _ground_truth_strs(ground_truth: object) -> list[str]:
    """The accepted answers as strings: one string/number, or a non-empty list/tuple of them."""
    items = list(ground_truth) if isinstance(ground_truth, (list, tuple)) else [ground_truth]
    for item in items:
        ok = isinstance(item, str) or (isinstance(item, Real) and not isinstance(item, bool))
        if not ok or (isinstance(item, Real) and not math.isfinite(float(item))):
            raise ValueError(
                f"ground_truth must be a string, a finite number or a non-empty list of them, got {ground_truth!r}"
            )
    if not items:
        raise ValueError(f"ground_truth must not be an empty list, got {ground_truth!r}")
    return [str(item) for item in items]


def _normalized(ground_truth: str) -> str:
    gt = normalize_answer(ground_truth)
    if not gt:
        raise ValueError(
            f"ground_truth {ground_truth!r} is empty after normalisation; nothing to match against"
        )
    return gt


# ------------------------------------------------------------------------------------------------ verifiers
_ANSWER = re.compile(r"(?<![A-Za-z])answer\s*:", flags=re.IGNORECASE)


def extract_answer(completion: str | Sequence[Mapping[str, Any]], *, normalize: bool = True) -> str | None:
    """The DAPO answer of a completion: the rest of the line after the last ``Answer:``.

    The match is case-insensitive and may follow other words (``Final Answer: 42``); the answer may start on
    the line after ``Answer:`` (DAPO's ``Answer\\s*:\\s*``). Markdown bold (``**``) is removed. With
    ``normalize`` (default) the result goes through :func:`normalize_answer`.

    Returns:
        The (normalised) answer, or ``None`` when there is no ``Answer:`` or nothing follows it.
    """
    text = completion_text(completion)
    matches = list(_ANSWER.finditer(text))
    if not matches:
        return None
    rest = text[matches[-1].end() :].replace("**", "").lstrip()
    line = rest.split("\n", 1)[0].strip()
    answer = normalize_answer(line) if normalize else line
    return answer or None


def verify_dapo(completion: str | Sequence[Mapping[str, Any]], ground_truth: object) -> VerifyResult:
    """DAPO verifier: the last ``Answer:`` line (:func:`extract_answer`), normalised, exact match.

    ``ground_truth`` is a string or number, or a list of accepted answers (any may match).

    Raises:
        ValueError: a ground truth that is not a string/number (list) or normalises to ``""``.
    """
    truths = {_normalized(gt) for gt in _ground_truth_strs(ground_truth)}
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
    """``\\boxed{}`` verifier: the last ``\\boxed{...}`` of the completion against the ground truth.

    Which comparison is used:

    * ``math-verify`` installed (or ``use_math_verify=True``): correct when the normalised strings match
      *or* ``math_verify.verify(parse(gold), parse("\\boxed{answer}"))`` holds, so ``0.5`` matches ``\\frac12``
      and ``x^2+1`` matches ``1+x^2``. Gold answers without ``$`` or ``\\boxed`` are parsed as ``$gold$``.
    * otherwise (or ``use_math_verify=False``): the normalised exact match of :func:`normalize_answer`.

    math-verify's 5-second parse/verify timeouts use ``signal.alarm``, so they apply in the main thread only;
    called from another thread it runs without them.

    ``ground_truth`` is a string or number, or a list of accepted answers (any may match); one containing
    ``\\boxed{}`` is reduced to its last boxed content first. The returned ``answer`` is the normalised boxed
    content (``None`` without a ``\\boxed{}``).

    Raises:
        ImportError: ``use_math_verify=True`` without the package.
        ValueError: a ground truth that is not a string/number (list) or normalises to ``""``.
    """
    gts_raw = [last_boxed(gt) or gt for gt in _ground_truth_strs(ground_truth)]
    gts = [_normalized(gt) for gt in gts_raw]
    if use_math_verify is None:
        use_math_verify = math_verify_available()
    elif use_math_verify and not math_verify_available():
        raise ImportError("use_math_verify=True needs the math-verify package: pip install 'bandpo[math]'")
    content = last_boxed(completion_text(completion))
    answer = normalize_answer(content) if content is not None else None
    if not answer:
        return VerifyResult(False, None)
    if answer in gts:
        return VerifyResult(True, answer)
    correct = use_math_verify and any(_mv_equal(gt, content) for gt in gts_raw)  # type: ignore[arg-type]
    return VerifyResult(bool(correct), answer)


# ------------------------------------------------------------------------------------ TRL reward functions
def _check_reward_value(name: str, value: object, allow_none: bool = False) -> float | None:
    if value is None and allow_none:
        return None
    if not isinstance(value, Real) or isinstance(value, bool) or not math.isfinite(float(value)):
        allowed = "a finite number or None" if allow_none else "a finite number"
        raise ValueError(f"{name} must be {allowed}, got {value!r}")
    return float(value)


def _column(kwargs: Mapping[str, Any], key: str, n: int) -> list[Any]:
    """Per-completion values of dataset column ``key``; a dotted key reads nested dicts
    (``"reward_model.ground_truth"`` as in the verl/DAPO parquet files)."""
    head, *path = key.split(".")
    if head not in kwargs:
        columns = sorted(k for k in kwargs if k not in ("trainer_state", "log_extra", "log_metric"))
        raise ValueError(
            f"the reward needs the ground truth in the dataset column {head!r} (answer_key={key!r}); "
            f"available columns: {columns}"
        )
    values = kwargs[head]
    if isinstance(values, (str, bytes)) or not isinstance(values, Sequence) or len(values) != n:
        got = len(values) if isinstance(values, Sequence) else type(values).__name__
        raise ValueError(f"column {head!r} must be a list with one entry per completion ({n}), got {got}")
    out = []
    for value in values:
        for part in path:
            if not isinstance(value, Mapping) or part not in value:
                raise ValueError(f"answer_key={key!r}: entry {value!r} has no key {part!r}")
            value = value[part]
        out.append(value)
    return out


class VerifierReward:
    """A TRL reward function from a :data:`Verifier`: each completion is scored against the ground truth in
    dataset column ``answer_key``.

    Args:
        name: the function's ``__name__`` (TRL logs ``rewards/<name>/mean``).
        verify: ``verify(completion, ground_truth) -> VerifyResult``.
        answer_key: dataset column of the ground truth; dots read nested dicts (``"reward_model.ground_truth"``).
        correct_reward: reward for a correct answer (default +1).
        incorrect_reward: reward for a wrong answer (default -1, the BandPO recipe; 0.0 for a 1/0 reward).
        unparsed_reward: reward when no answer was parsed; ``None`` (default) means ``incorrect_reward``.

    Calling it also logs ``rewards/<name>/unparsed_frac`` through TRL's ``log_metric`` keyword when given.
    """

    def __init__(
        self,
        name: str,
        verify: Verifier,
        *,
        answer_key: str = "answer",
        correct_reward: float = 1.0,
        incorrect_reward: float = -1.0,
        unparsed_reward: float | None = None,
    ) -> None:
        if not isinstance(name, str) or not name:
            raise ValueError(f"name must be a non-empty string, got {name!r}")
        if not callable(verify):
            raise ValueError(f"verify must be callable, got {verify!r}")
        if not isinstance(answer_key, str) or not answer_key or "" in answer_key.split("."):
            raise ValueError(f"answer_key must be a column name (dots for nested keys), got {answer_key!r}")
        self.__name__ = name
        self.verify = verify
        self.answer_key = answer_key
        self.correct_reward = _check_reward_value("correct_reward", correct_reward)
        self.incorrect_reward = _check_reward_value("incorrect_reward", incorrect_reward)
        self.unparsed_reward = _check_reward_value("unparsed_reward", unparsed_reward, allow_none=True)

    def with_options(self, **options: Any) -> VerifierReward:
        """A copy with some of ``answer_key``, ``correct_reward``, ``incorrect_reward``, ``unparsed_reward``
        changed (unknown options raise ``ValueError`` listing the valid ones)."""
        valid = ("answer_key", "correct_reward", "incorrect_reward", "unparsed_reward")
        unknown = sorted(set(options) - set(valid))
        if unknown:
            raise ValueError(
                f"reward {self.__name__!r} has no option(s) {unknown}; valid options: {list(valid)}"
            )
        current = {key: getattr(self, key) for key in valid}
        return VerifierReward(self.__name__, self.verify, **{**current, **options})

    def __call__(self, prompts: Sequence[Any], completions: Sequence[Any], **kwargs: Any) -> list[float]:
        if isinstance(completions, (str, bytes)) or not isinstance(completions, Sequence):
            raise ValueError(f"completions must be a list, got {type(completions).__name__}")
        truths = _column(kwargs, self.answer_key, len(completions))
        unparsed_reward = self.incorrect_reward if self.unparsed_reward is None else self.unparsed_reward
        rewards: list[float] = []
        n_unparsed = 0
        for completion, truth in zip(completions, truths):
            result = self.verify(completion, truth)
            if result.answer is None:
                n_unparsed += 1
                rewards.append(unparsed_reward)
            else:
                rewards.append(self.correct_reward if result.correct else self.incorrect_reward)
        log_metric = kwargs.get("log_metric")
        if callable(log_metric) and completions:
            log_metric(f"rewards/{self.__name__}/unparsed_frac", n_unparsed / len(completions))
        return rewards

    def __repr__(self) -> str:
        return (
            f"VerifierReward({self.__name__!r}, answer_key={self.answer_key!r}, correct_reward="
            f"{self.correct_reward}, incorrect_reward={self.incorrect_reward}, "
            f"unparsed_reward={self.unparsed_reward})"
        )


# ------------------------------------------------------------------------------------------------ registries
REWARDS: Registry[RewardFunc] = Registry("reward")
"""Reward name -> TRL-style reward function; configs and the CLI select rewards by these names."""

VERIFIERS: Registry[Verifier] = Registry("verifier")
"""Verifier name -> per-completion verifier (the eval reads answers through these); each also has a reward."""


def register_reward(name: str, fn: RewardFunc, aliases: tuple[str, ...] = ()) -> RewardFunc:
    """Register a TRL-style reward function ``fn(prompts, completions, **kwargs) -> list[float | None]``
    under ``name`` (e.g. ``register_reward("countdown", countdown_reward)``). Names must be new.

    Options given to :func:`get_reward_func` are bound to ``fn``'s keyword-only parameters (or passed to its
    ``with_options`` method when it has one). Returns ``fn``.
    """
    if not callable(fn):
        raise ValueError(
            f"reward {name!r} must be callable as fn(prompts, completions, **kwargs), got {fn!r}"
        )
    return REWARDS.register(name, fn, aliases)


def register_verifier(
    name: str, verify: Verifier, aliases: tuple[str, ...] = (), **reward_options: Any
) -> VerifierReward:
    """Register ``verify`` in :data:`VERIFIERS` and its :class:`VerifierReward` (built with
    ``reward_options``) in :data:`REWARDS`, both under ``name``. Returns the reward function."""
    if not callable(verify):
        raise ValueError(
            f"verifier {name!r} must be callable as verify(completion, ground_truth), got {verify!r}"
        )
    reward = VerifierReward(name, verify, **reward_options)
    for key in (name, *aliases):  # check both registries before changing either
        if key in REWARDS or key in VERIFIERS:
            raise ValueError(f"reward {key!r} is already registered")
    VERIFIERS.register(name, verify, aliases)
    REWARDS.register(name, reward, aliases)
    return reward


def reward_names() -> list[str]:
    """Registered reward names (for config validation and CLI choices)."""
    return REWARDS.names()


def get_verifier(name: str) -> Verifier:
    """The per-completion verifier registered as ``name`` (unknown names list the valid ones)."""
    return VERIFIERS.get(name)


def get_reward_func(name: str, **options: Any) -> RewardFunc:
    """The reward function registered as ``name``, with ``options`` applied.

    Options are validated now, before any model is loaded: a :class:`VerifierReward` takes ``answer_key``,
    ``correct_reward``, ``incorrect_reward``, ``unparsed_reward``; another function takes its keyword-only
    parameters (bound with ``functools.partial``, which TRL names after the wrapped function).

    Raises:
        ValueError: unknown name (the message lists the valid names) or unknown option.
    """
    fn = REWARDS.get(name)
    if not options:
        return fn
    with_options = getattr(fn, "with_options", None)
    if callable(with_options):
        return with_options(**options)
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        params = ()  # type: ignore[assignment]
    valid = [p.name for p in params if p.kind is inspect.Parameter.KEYWORD_ONLY]
    unknown = sorted(set(options) - set(valid))
    if unknown:
        raise ValueError(f"reward {name!r} has no option(s) {unknown}; valid options: {valid}")
    return functools.partial(fn, **options)


# -------------------------------------------------------------------------------------- failure tolerance
def _noop(*args: Any, **kwargs: Any) -> None:
    return None


class SafeRewardFunc:
    """A TRL reward function that never raises because of one completion (see :func:`safe_reward_func`).

    Attributes:
        fn: the wrapped reward function.
        failure_reward: reward given to a completion whose scoring failed.
        n_calls, n_completions, n_failures: cumulative counts (batches, completions scored, failed ones).
        last_error: ``repr`` of the most recent exception, or ``None``.
    """

    def __init__(
        self, fn: RewardFunc, failure_reward: float = 0.0, max_logged: int = 3, raise_if_all_fail: bool = True
    ) -> None:
        if not callable(fn):
            raise ValueError(f"fn must be a reward function fn(prompts, completions, **kwargs), got {fn!r}")
        if inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(fn.__call__):
            raise ValueError(f"safe_reward_func does not wrap async reward functions, got {fn!r}")
        self.fn = fn
        self.failure_reward = _check_reward_value("failure_reward", failure_reward)
        self.max_logged = int(max_logged)
        self.raise_if_all_fail = bool(raise_if_all_fail)
        target = fn
        while isinstance(target, functools.partial):
            target = target.func
        self.__name__: str = getattr(target, "__name__", type(target).__name__)
        self.n_calls = 0
        self.n_completions = 0
        self.n_failures = 0
        self.last_error: str | None = None
        self._window_completions = 0
        self._window_failures = 0

    def __call__(
        self, prompts: Sequence[Any], completions: Sequence[Any], **kwargs: Any
    ) -> list[float | None]:
        n = len(completions)
        try:
            rewards = self._checked(self.fn(prompts=prompts, completions=completions, **kwargs), n)
            failed = 0
        except Exception as err:  # score one completion at a time to isolate the failures
            self._record(err, None)
            rewards, failed = self._one_by_one(prompts, completions, kwargs)
            if self.raise_if_all_fail and n > 1 and failed == n:
                raise RuntimeError(
                    f"reward {self.__name__!r} failed on all {n} completions of the batch, which points to a "
                    f"configuration error (e.g. a missing dataset column) rather than bad completions; "
                    f"last error: {self.last_error}"
                ) from err
        self.n_calls += 1
        self.n_completions += n
        self.n_failures += failed
        self._window_completions += n
        self._window_failures += failed
        log_metric = kwargs.get("log_metric")
        if callable(log_metric) and n:
            log_metric(f"rewards/{self.__name__}/failure_frac", failed / n)
        return rewards

    def _one_by_one(
        self, prompts: Sequence[Any], completions: Sequence[Any], kwargs: Mapping[str, Any]
    ) -> tuple[list[float | None], int]:
        n = len(completions)
        rewards: list[float | None] = []
        failed = 0
        for i in range(n):
            item_kwargs = {key: _item(value, i, n) for key, value in kwargs.items()}
            for key in ("log_metric", "log_extra"):  # per-item calls must not log per-item values
                if key in item_kwargs:
                    item_kwargs[key] = _noop
            try:
                out = self._checked(
                    self.fn(prompts=_item(prompts, i, n), completions=[completions[i]], **item_kwargs), 1
                )
                rewards.append(out[0])
            except Exception as err:
                self._record(err, completions[i])
                rewards.append(self.failure_reward)
                failed += 1
        return rewards, failed

    def _checked(self, rewards: object, n: int) -> list[float | None]:
        if isinstance(rewards, (str, bytes)) or not isinstance(rewards, Sequence) or len(rewards) != n:
            got = f"{len(rewards)} values" if isinstance(rewards, Sequence) else type(rewards).__name__
            raise ValueError(f"reward function {self.__name__!r} must return {n} rewards, got {got}")
        out: list[float | None] = []
        for r in rewards:
            if r is not None and (not isinstance(r, Real) or not math.isfinite(float(r))):
                raise ValueError(
                    f"reward function {self.__name__!r} returned {r!r}; rewards must be finite or None"
                )
            out.append(None if r is None else float(r))
        return out

    def _record(self, err: Exception, completion: object) -> None:
        self.last_error = repr(err)
        if completion is None:
            return  # the batch failed; the per-completion calls report the culprits
        if self.n_failures < self.max_logged:
            try:
                preview = completion_text(completion)[-200:]  # type: ignore[arg-type]
            except TypeError:
                preview = repr(completion)[-200:]
            logger.warning(
                "reward %r failed on a completion (scored %s): %r; completion ends with %r",
                self.__name__,
                self.failure_reward,
                err,
                preview,
                exc_info=err,
            )

    def metrics(self, reset: bool = True) -> dict[str, float]:
        """Failure counts since the last reset, for the trainer to log: ``rewards/<name>/failures`` and
        ``rewards/<name>/failure_frac``."""
        frac = self._window_failures / self._window_completions if self._window_completions else 0.0
        out = {
            f"rewards/{self.__name__}/failures": float(self._window_failures),
            f"rewards/{self.__name__}/failure_frac": frac,
        }
        if reset:
            self._window_completions = 0
            self._window_failures = 0
        return out

    def __repr__(self) -> str:
        return (
            f"SafeRewardFunc({self.fn!r}, failure_reward={self.failure_reward}, n_failures={self.n_failures})"
        )


def _item(value: Any, i: int, n: int) -> Any:
    """Entry ``i`` of a per-completion list (kept a one-element list); other values pass unchanged."""
    if isinstance(value, (list, tuple)) and len(value) == n:
        return value[i : i + 1]
    return value


def safe_reward_func(
    fn: RewardFunc, failure_reward: float = 0.0, *, max_logged: int = 3, raise_if_all_fail: bool = True
) -> SafeRewardFunc:
    """Wrap a TRL reward function so an exception while scoring a completion gives it ``failure_reward``
    instead of ending the run.

    The whole batch is scored in one call; if that raises (or returns the wrong number of values, or a
    non-finite one), each completion is scored alone with its own slice of every per-completion keyword
    column, and only those that still fail get ``failure_reward``. ``None`` rewards (TRL: "not applicable")
    pass through. Completions may be strings or chat message lists: the wrapper never reads them.

    Failures are counted in ``n_failures`` (cumulative) and :meth:`SafeRewardFunc.metrics` (since the last
    reset); under TRL, ``rewards/<name>/failure_frac`` is also logged each batch through ``log_metric``. The
    first ``max_logged`` failures are logged as warnings with their traceback.

    With ``raise_if_all_fail`` (default), a batch of two or more completions in which *every* completion
    fails raises ``RuntimeError``: that is a configuration error (a missing ground-truth column, a bad
    option), not a bad completion, and zero rewards would silently waste the run.
    """
    return SafeRewardFunc(fn, failure_reward, max_logged, raise_if_all_fail)


# ------------------------------------------------------------------------------------------------- built-ins
dapo_reward: VerifierReward = register_verifier("dapo", verify_dapo)
"""TRL reward: :func:`verify_dapo`, +1 correct / -1 otherwise, ground truth in column ``answer``."""

boxed_reward: VerifierReward = register_verifier("boxed", verify_boxed)
"""TRL reward: :func:`verify_boxed`, +1 correct / -1 otherwise, ground truth in column ``answer``."""
