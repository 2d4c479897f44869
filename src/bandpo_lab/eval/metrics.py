"""Sample-based accuracy over problems, each answered by ``n`` sampled completions: mean@n, pass@k, best@k, maj@k
(docs/method.md#metrics). Pure numpy. A sample is correct iff its value (0/1, bool or a verifier reward in
``[-1, 1]``) is ``> 0``; pass verifier rewards, not shaped ones. :func:`summarize` computes all of them in one dict.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from bandpo.validation import check_int_in


# ------------------------------------------------------------------------------------------------ validation
def _int_array(name: str, value: ArrayLike) -> NDArray[np.int64]:
    """``value`` as an int64 array; integer-valued floats are accepted, bools and fractions are not."""
    arr = np.asarray(value)
    if arr.dtype.kind in "iu":
        return arr.astype(np.int64)
    if arr.dtype.kind == "f" and bool(np.all(np.isfinite(arr))) and bool(np.all(arr == np.round(arr))):
        return arr.astype(np.int64)
    raise ValueError(f"{name} must be an integer or an array of integers, got {value!r}")


def to_correct(values: ArrayLike, name: str = "correct") -> NDArray[np.bool_]:
    """One problem's (n,) values (0/1, bool or verifier rewards in [-1, 1]) as an (n,) bool array ``values > 0``.

    Raises:
        ValueError: not a non-empty 1-D sequence of finite numbers in [-1, 1] (``name`` names it).
    """
    try:
        arr = np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError) as err:
        raise ValueError(f"{name} must be a 1-D sequence of numbers in [-1, 1], got {values!r}") from err
    if arr.ndim != 1 or arr.size == 0:
        raise ValueError(
            f"{name} must be a non-empty 1-D sequence of per-sample values, got shape {arr.shape}"
        )
    bad = ~np.isfinite(arr) | (arr < -1.0) | (arr > 1.0)
    if bool(bad.any()):
        raise ValueError(
            f"{name} must hold 0/1 correctness or verifier rewards in [-1, 1] (> 0 counts as correct), "
            f"got {float(arr[bad][0])!r}"
        )
    return arr > 0


def _problems(correct: Iterable[ArrayLike] | NDArray[Any], name: str = "correct") -> list[NDArray[np.bool_]]:
    """Per-problem correctness arrays from a ragged list of per-problem sequences or a (P, n) array."""
    if isinstance(correct, (str, bytes)) or not isinstance(correct, Iterable):
        raise ValueError(
            f"{name} must be a list of per-problem sequences of sample values (or a (problems, samples) "
            f"array), got {type(correct).__name__}"
        )
    if isinstance(correct, np.ndarray) and correct.ndim != 2:
        raise ValueError(f"{name} as an array must have shape (problems, samples), got shape {correct.shape}")
    out = [to_correct(row, f"{name}[{i}]") for i, row in enumerate(correct)]
    if not out:
        raise ValueError(f"{name} must hold at least one problem, got none")
    return out


# --------------------------------------------------------------------------------------------------- pass@k
def _pass_at_k_one(n: int, c: int, k: int) -> float:
    """``1 - C(n-c, k) / C(n, k)`` for valid scalars, in product form (docs/method.md#metrics)."""
    if n - c < k:  # every k-subset contains a correct sample
        return 1.0
    i = np.arange(n - c + 1, n + 1, dtype=np.float64)
    return float(-np.expm1(np.sum(np.log1p(-k / i)))) + 0.0  # + 0.0 turns -0.0 (c = 0) into 0.0


def pass_at_k(n: ArrayLike, c: ArrayLike, k: ArrayLike) -> float | NDArray[np.float64]:
    """Unbiased pass@k ``1 - C(n-c, k) / C(n, k)`` (docs/method.md#metrics) for ``n`` samples (>= 1), ``c`` correct
    (in [0, n]) and ``k`` in [1, n]: integer scalars or arrays that broadcast. Returns a ``float`` for scalars, else
    a float64 array of the broadcast shape.

    Raises:
        ValueError: non-integer input, shapes that do not broadcast, or values outside the ranges above.
    """
    n_arr, c_arr, k_arr = _int_array("n", n), _int_array("c", c), _int_array("k", k)
    try:
        n_b, c_b, k_b = np.broadcast_arrays(n_arr, c_arr, k_arr)
    except ValueError as err:
        raise ValueError(
            f"n, c and k must broadcast to one shape, got shapes {n_arr.shape}, {c_arr.shape}, {k_arr.shape}"
        ) from err
    checks = (
        (n_b < 1, "n must be >= 1 (samples per problem)"),
        ((c_b < 0) | (c_b > n_b), "c must be in [0, n] (correct samples out of n)"),
        ((k_b < 1) | (k_b > n_b), "k must be in [1, n] (k cannot exceed the number of samples n)"),
    )
    for bad, message in checks:
        if bool(bad.any()):
            idx = tuple(int(j) for j in np.argwhere(bad)[0])
            raise ValueError(f"{message}, got n={n_b[idx]}, c={c_b[idx]}, k={k_b[idx]}")
    out = np.empty(n_b.shape, dtype=np.float64)
    for idx in np.ndindex(n_b.shape):
        out[idx] = _pass_at_k_one(int(n_b[idx]), int(c_b[idx]), int(k_b[idx]))
    if n_arr.ndim == 0 and c_arr.ndim == 0 and k_arr.ndim == 0:
        return float(out)
    return out


# ------------------------------------------------------------------------------------------- mean/best/maj@k
def mean_at_k(correct: Iterable[ArrayLike] | NDArray[Any]) -> float:
    """mean@n of ``correct``: per-problem sequences (ragged allowed) of sample values, or a (problems, samples)
    array; each problem weighs the same."""
    return float(np.mean([x.mean() for x in _problems(correct)]))


def best_at_k(
    correct: Iterable[ArrayLike] | NDArray[Any], k: int, n_bootstrap: int = 1000, seed: int = 0
) -> float:
    """The authors' bootstrap best@k (docs/method.md#metrics): ``n_bootstrap`` (>= 1) resamples of ``k`` (in
    [1, n] for every problem) with replacement per problem; deterministic given ``seed`` (>= 0)."""
    problems = _problems(correct)
    _check_k(k, problems)
    n_bootstrap = check_int_in("n_bootstrap", n_bootstrap, 1)
    check_int_in("seed", seed, 0)
    rng = np.random.default_rng(seed)
    values = []
    for x in problems:
        idx = rng.integers(0, x.size, size=(n_bootstrap, k))  # (n_bootstrap, k)
        values.append(x[idx].max(axis=1).mean())
    return float(np.mean(values))


def _check_k(k: object, problems: list[NDArray[np.bool_]]) -> int:
    n_min = min(x.size for x in problems)
    return check_int_in("k", k, 1, n_min, note=" (k cannot exceed the number of samples of any problem)")


def _majority_correct(answers: Sequence[str | None], correct: NDArray[np.bool_]) -> bool:
    """Whether the majority answer is correct, by the rules of :func:`maj_at_k` (``most_common`` breaks a tie by
    first occurrence)."""
    votes = Counter(a for a in answers if a is not None)
    if not votes:
        return False
    winner = votes.most_common(1)[0][0]
    return bool(correct[answers.index(winner)])


def maj_at_k(
    answers: Sequence[Sequence[str | None]],
    correct: Iterable[ArrayLike] | NDArray[Any],
    k: int,
) -> float:
    """Majority-vote accuracy among the first ``k`` samples (docs/method.md#metrics: ``None`` does not vote, ties go
    to the answer seen first, the vote scores as its first occurrence, no parsed answer scores 0).

    Args:
        answers: per-problem sequences of normalised answer strings or ``None``, one per sample.
        correct: per-problem sequences of sample values, same lengths.
        k: samples that vote, integer in [1, n] for every problem.
    """
    problems = _problems(correct)
    if isinstance(answers, (str, bytes)) or not isinstance(answers, Sequence):
        raise ValueError(f"answers must be a list of per-problem sequences of answers, got {answers!r}")
    if len(answers) != len(problems):
        raise ValueError(
            f"answers must have one entry per problem: got {len(answers)} for {len(problems)} problems"
        )
    k = _check_k(k, problems)
    scores = []
    for i, (ans, x) in enumerate(zip(answers, problems)):
        ans = _check_answers(f"answers[{i}]", ans, x.size)
        scores.append(_majority_correct(ans[:k], x[:k]))
    return float(np.mean(scores))


def _check_answers(name: str, answers: object, n: int) -> list[str | None]:
    if isinstance(answers, (str, bytes)) or not isinstance(answers, Sequence):
        raise ValueError(f"{name} must be a sequence of answer strings or None, got {answers!r}")
    if len(answers) != n:
        raise ValueError(
            f"{name} must have one answer per sample: got {len(answers)} answers for {n} samples"
        )
    for a in answers:
        if a is not None and not isinstance(a, str):
            raise ValueError(f"{name} must hold answer strings or None, got {a!r}")
    return list(answers)


# ------------------------------------------------------------------------------------------------ summarize
def _as_result(i: int, item: object) -> tuple[Any, Any]:
    if not isinstance(item, Mapping):
        raise ValueError(
            f"per_problem_results[{i}] must be a mapping with 'correct' (and optional 'answers'), "
            f"got {type(item).__name__}"
        )
    if "correct" not in item:
        raise ValueError(
            f"per_problem_results[{i}] must have a 'correct' entry, got keys {sorted(map(str, item))}"
        )
    return item["correct"], item.get("answers")


def _check_ks(name: str, ks: object) -> list[int]:
    if isinstance(ks, (int, np.integer)) and not isinstance(ks, bool):
        ks = (ks,)
    if not isinstance(ks, Iterable) or isinstance(ks, (str, bytes)):
        raise ValueError(f"{name} must be an integer or a sequence of integers >= 1, got {ks!r}")
    out = sorted({check_int_in(f"{name} entries", k, 1) for k in ks})
    if not out:
        raise ValueError(f"{name} must hold at least one k, got {ks!r}")
    return out


def summarize(
    per_problem_results: Sequence[Mapping[str, Any]],
    ks: int | Sequence[int] = (1,),
    *,
    k: int | None = None,
    n_bootstrap: int = 1000,
    seed: int = 0,
) -> dict[str, float | int]:
    """All metrics in one flat dict: ``n_problems``, ``n_samples`` (total), ``mean@n`` (plain ``mean`` when problems
    have different sample counts), ``pass@j`` per j of ``ks``, ``best@k``, and with answers ``maj@k`` and
    ``n_unparsed`` (samples whose answer is ``None``).

    Args:
        per_problem_results: per problem a mapping with ``"correct"``, its (n,) sample values, and optional
            ``"answers"``, its (n,) extracted answers (``None``: unparsed); every problem has answers or none has.
        ks: the j of ``pass@j``, each <= every problem's sample count.
        k: the k of ``best@k`` and ``maj@k`` (default ``max(ks)``), <= every problem's sample count.
        n_bootstrap, seed: of :func:`best_at_k`.
    """
    if isinstance(per_problem_results, (str, bytes, Mapping)) or not isinstance(
        per_problem_results, Sequence
    ):
        raise ValueError(
            f"per_problem_results must be a sequence of per-problem results, got {type(per_problem_results).__name__}"
        )
    if not per_problem_results:
        raise ValueError("per_problem_results must hold at least one problem, got none")
    pairs = [_as_result(i, item) for i, item in enumerate(per_problem_results)]
    problems = [to_correct(c, f"per_problem_results[{i}].correct") for i, (c, _) in enumerate(pairs)]
    has_answers = [a is not None for _, a in pairs]
    if any(has_answers) and not all(has_answers):
        missing = has_answers.index(False)
        raise ValueError(
            f"per_problem_results must give answers for every problem or for none; "
            f"per_problem_results[{missing}] has none"
        )
    answers = (
        [
            _check_answers(f"per_problem_results[{i}].answers", a, problems[i].size)
            for i, (_, a) in enumerate(pairs)
        ]
        if all(has_answers)
        else None
    )

    ks_list = _check_ks("ks", ks)
    k = ks_list[-1] if k is None else check_int_in("k", k, 1)
    n_min = min(x.size for x in problems)
    for name, largest in (("ks", ks_list[-1]), ("k", k)):
        if largest > n_min:
            raise ValueError(
                f"{name} must not exceed the number of samples of any problem ({n_min}), got k={largest}"
            )

    sizes = {x.size for x in problems}
    out: dict[str, float | int] = {
        "n_problems": len(problems),
        "n_samples": int(sum(x.size for x in problems)),
    }
    mean_key = f"mean@{sizes.pop()}" if len(sizes) == 1 else "mean"
    out[mean_key] = mean_at_k(problems)
    n_arr = np.array([x.size for x in problems])
    c_arr = np.array([int(x.sum()) for x in problems])
    for j in ks_list:
        out[f"pass@{j}"] = float(np.mean(pass_at_k(n_arr, c_arr, j)))
    out[f"best@{k}"] = best_at_k(problems, k, n_bootstrap=n_bootstrap, seed=seed)
    if answers is not None:
        out[f"maj@{k}"] = maj_at_k(answers, problems, k)
        out["n_unparsed"] = int(sum(a is None for ans in answers for a in ans))
    return out
