"""Tests for bandpo_lab.eval.metrics: hand-built cases, brute-force references, bootstrap vs exact, properties."""

from __future__ import annotations

import itertools
import math
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bandpo_lab.eval.metrics import (
    best_at_k,
    maj_at_k,
    mean_at_k,
    pass_at_k,
    summarize,
    to_correct,
)


# ---------------------------------------------------------------------------------------------- references
def brute_force_pass_at_k(n: int, c: int, k: int) -> Fraction:
    """Fraction of the k-subsets of n samples (the first c correct) that contain a correct sample."""
    subsets = list(itertools.combinations(range(n), k))
    hits = sum(any(i < c for i in subset) for subset in subsets)
    return Fraction(hits, len(subsets))


def exact_best_at_k(n: int, c: int, k: int) -> float:
    """E[max of k draws with replacement] for 0/1 data with c ones out of n."""
    return 1.0 - (1.0 - c / n) ** k


# --------------------------------------------------------------------------------------------------- pass@k
@pytest.mark.parametrize(
    ("n", "c", "k", "expected"),
    [(10, 0, 3, 0.0), (10, 10, 3, 1.0), (4, 1, 2, 0.5), (5, 2, 2, 0.7), (5, 4, 2, 1.0), (32, 8, 1, 0.25)],
)
def test_pass_at_k_hand_cases(n: int, c: int, k: int, expected: float) -> None:
    assert pass_at_k(n, c, k) == pytest.approx(expected, abs=1e-15)


def test_pass_at_k_matches_enumeration_of_all_subsets() -> None:
    for n in range(1, 8):
        for c in range(n + 1):
            for k in range(1, n + 1):
                expected = float(brute_force_pass_at_k(n, c, k))
                assert pass_at_k(n, c, k) == pytest.approx(expected, abs=1e-13), (n, c, k)


@pytest.mark.parametrize(("n", "c", "k"), [(1000, 1, 1), (1000, 3, 100), (5000, 2, 7), (200, 150, 40)])
def test_pass_at_k_exact_for_large_n(n: int, c: int, k: int) -> None:
    exact = 1 - Fraction(math.comb(n - c, k), math.comb(n, k))
    got = pass_at_k(n, c, k)
    assert got == pytest.approx(float(exact), rel=1e-12)


def test_pass_at_k_zero_is_positive_zero() -> None:
    assert math.copysign(1.0, pass_at_k(16, 0, 4)) == 1.0


def test_pass_at_k_arrays_broadcast() -> None:
    out = pass_at_k(np.array([4, 5, 10]), np.array([1, 2, 0]), 2)
    assert isinstance(out, np.ndarray)
    assert out.dtype == np.float64
    np.testing.assert_allclose(out, [0.5, 0.7, 0.0], atol=1e-15)
    grid = pass_at_k(8, np.arange(9)[:, None], np.arange(1, 9)[None, :])
    assert grid.shape == (9, 8)
    assert isinstance(pass_at_k(8, 3, 2), float)
    assert isinstance(pass_at_k(np.int64(8), np.int32(3), 2.0), float)  # integer-valued floats accepted


@pytest.mark.parametrize(
    ("n", "c", "k", "match"),
    [
        (32, 3, 33, r"k must be in \[1, n\].*k=33"),
        (32, 3, 0, r"k must be in \[1, n\]"),
        (4, 5, 1, r"c must be in \[0, n\].*c=5"),
        (4, -1, 1, r"c must be in \[0, n\]"),
        (0, 0, 1, r"n must be >= 1"),
        (8, 2, 1.5, r"k must be an integer"),
        (8, True, 1, r"c must be an integer"),
        ("8", 2, 1, r"n must be an integer"),
    ],
)
def test_pass_at_k_rejects_bad_input(n: object, c: object, k: object, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        pass_at_k(n, c, k)  # type: ignore[arg-type]


def test_pass_at_k_rejects_shapes_that_do_not_broadcast() -> None:
    with pytest.raises(ValueError, match="broadcast"):
        pass_at_k([4, 5], [1, 2, 3], 1)


@st.composite
def n_c_k(draw: st.DrawFn) -> tuple[int, int, int]:
    n = draw(st.integers(1, 80))
    return n, draw(st.integers(0, n)), draw(st.integers(1, n))


@settings(max_examples=200, deadline=None)
@given(n_c_k())
def test_pass_at_k_properties(nck: tuple[int, int, int]) -> None:
    n, c, k = nck
    p = pass_at_k(n, c, k)
    assert 0.0 <= p <= 1.0
    assert pass_at_k(n, c, 1) == pytest.approx(c / n, abs=1e-14)
    if k < n:
        assert pass_at_k(n, c, k + 1) >= p - 1e-14  # monotone in k
    if c < n:
        assert pass_at_k(n, c + 1, k) >= p - 1e-14  # monotone in c
    assert exact_best_at_k(n, c, k) <= p + 1e-12  # with replacement never beats without


# --------------------------------------------------------------------------------------------------- mean@k
def test_mean_at_k_averages_per_problem_then_over_problems() -> None:
    assert mean_at_k([[1, 0, 1, 1], [0, 0]]) == pytest.approx(0.375)
    assert mean_at_k(np.array([[1, 0], [1, 1]])) == pytest.approx(0.75)
    assert mean_at_k([[True, False]]) == pytest.approx(0.5)


def test_rewards_plus_minus_one_and_zero_one_agree() -> None:
    zero_one = [[1, 0, 0, 1], [0, 0, 0, 1]]
    plus_minus = [[1.0, -1.0, -1.0, 1.0], [-1.0, -1.0, -1.0, 1.0]]
    assert mean_at_k(zero_one) == mean_at_k(plus_minus)
    assert best_at_k(zero_one, 4) == best_at_k(plus_minus, 4)
    np.testing.assert_array_equal(to_correct([1.0, -1.0, 0.0, 0.5]), [True, False, False, True])


@pytest.mark.parametrize(
    ("correct", "match"),
    [
        ([], "at least one problem"),
        ([[1, 0], []], r"correct\[1\] must be a non-empty"),
        ([[1, 2]], r"correct\[0\] must hold .* \[-1, 1\].*got 2"),
        ([[1, float("nan")]], r"correct\[0\]"),
        ([["a"]], r"correct\[0\] must be a 1-D sequence"),
        (np.zeros(3), r"shape \(problems, samples\)"),
        ("1010", "list of per-problem"),
    ],
)
def test_mean_at_k_rejects_bad_input(correct: object, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        mean_at_k(correct)  # type: ignore[arg-type]


# --------------------------------------------------------------------------------------------------- best@k
def test_best_at_k_extremes_and_determinism() -> None:
    assert best_at_k([[1, 1, 1]], 3) == 1.0
    assert best_at_k([[0, 0, 0]], 3) == 0.0
    data = [[1, 0, 0, 0, 0, 0, 0, 0], [1, 1, 0, 0, 0, 0, 0, 0]]
    assert best_at_k(data, 8, seed=3) == best_at_k(data, 8, seed=3)
    assert best_at_k(data, 8, seed=3) != best_at_k(data, 8, seed=4)


@pytest.mark.parametrize(
    ("n", "c", "k"), [(8, 1, 8), (8, 3, 4), (5, 2, 1), (16, 5, 16), (4, 0, 4), (4, 4, 2)]
)
def test_best_at_k_matches_exact_expectation(n: int, c: int, k: int) -> None:
    n_bootstrap = 20_000
    correct = [[1] * c + [0] * (n - c)]
    expected = exact_best_at_k(n, c, k)
    stderr = math.sqrt(expected * (1 - expected) / n_bootstrap)
    assert best_at_k(correct, k, n_bootstrap=n_bootstrap, seed=1) == pytest.approx(
        expected, abs=5 * stderr + 1e-12
    )


def test_best_at_k_below_pass_at_k_like_the_authors_logs() -> None:
    rng = np.random.default_rng(0)
    correct = (rng.random((50, 32)) < 0.1).astype(int)
    best = best_at_k(correct, 32)
    pass32 = float(np.mean(pass_at_k(32, correct.sum(axis=1), 32)))
    assert best < pass32


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"k": 5}, r"k must be an integer in \[1, 4\].*cannot exceed.*got 5"),
        ({"k": 0}, r"k must be an integer in \[1, 4\]"),
        ({"k": 2, "n_bootstrap": 0}, r"n_bootstrap must be an integer >= 1, got 0"),
        ({"k": 2, "seed": -1}, r"seed must be an integer >= 0"),
    ],
)
def test_best_at_k_rejects_bad_input(kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        best_at_k([[1, 0, 0, 1]], **kwargs)


# ---------------------------------------------------------------------------------------------------- maj@k
def test_maj_at_k_hand_cases() -> None:
    # problem 0: "2" wins 2-1 and is wrong; problem 1: "7" wins and is right; problem 2: nothing parsed
    answers = [["1", "2", "2", None], ["7", "7", "3", "7"], [None, None, None, None]]
    correct = [[1, 0, 0, 0], [1, 1, 0, 1], [0, 0, 0, 0]]
    assert maj_at_k(answers, correct, 4) == pytest.approx(1 / 3)


def test_maj_at_k_ties_go_to_the_first_seen_answer() -> None:
    assert maj_at_k([["3", "5", "5", "3"]], [[1, 0, 0, 1]], 4) == 1.0
    assert maj_at_k([["5", "3", "3", "5"]], [[0, 1, 1, 0]], 4) == 0.0


def test_maj_at_k_uses_the_first_k_samples() -> None:
    answers = [["1", "1", "2", "2", "2"]]
    correct = [[1, 1, 0, 0, 0]]
    assert maj_at_k(answers, correct, 2) == 1.0
    assert maj_at_k(answers, correct, 5) == 0.0


@pytest.mark.parametrize(
    ("answers", "correct", "k", "match"),
    [
        ([["1", "2"]], [[1, 0], [0, 1]], 2, "one entry per problem: got 1 for 2"),
        ([["1"]], [[1, 0]], 1, r"answers\[0\] must have one answer per sample: got 1 answers for 2"),
        ([["1", 2]], [[1, 0]], 1, r"answers\[0\] must hold answer strings or None, got 2"),
        ([["1", "2"]], [[1, 0]], 3, r"k must be an integer in \[1, 2\]"),
    ],
)
def test_maj_at_k_rejects_bad_input(answers: list, correct: list, k: int, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        maj_at_k(answers, correct, k)


# ------------------------------------------------------------------------------------------------ summarize
def test_summarize_flat_dict() -> None:
    results = [
        {"correct": [1, -1, -1, 1], "answers": ["4", "5", None, "4"]},
        {"correct": [0, 0, 0, 1], "answers": ["2", "2", "3", "9"]},
    ]
    out = summarize(results, ks=(1, 2, 4), n_bootstrap=500, seed=0)
    assert list(out) == [
        "n_problems",
        "n_samples",
        "mean@4",
        "pass@1",
        "pass@2",
        "pass@4",
        "best@4",
        "maj@4",
        "n_unparsed",
    ]
    assert out["n_problems"] == 2
    assert out["n_samples"] == 8
    assert out["mean@4"] == pytest.approx(0.375)
    assert out["pass@1"] == pytest.approx(0.375)
    assert out["pass@2"] == pytest.approx((pass_at_k(4, 2, 2) + pass_at_k(4, 1, 2)) / 2)
    assert out["pass@4"] == 1.0
    assert out["best@4"] == best_at_k([[1, 0, 0, 1], [0, 0, 0, 1]], 4, n_bootstrap=500, seed=0)
    assert out["maj@4"] == 0.5
    assert out["n_unparsed"] == 1


def test_summarize_without_answers_and_with_ragged_problems() -> None:
    out = summarize([{"correct": [1, 0, 0]}, {"correct": [1, 1]}], ks=2, k=1)
    assert "mean" in out
    assert "maj@1" not in out
    assert "n_unparsed" not in out
    assert set(out) >= {"pass@2", "best@1"}
    assert out["mean"] == pytest.approx((1 / 3 + 1) / 2)


@pytest.mark.parametrize(
    ("results", "kwargs", "match"),
    [
        ([], {}, "at least one problem"),
        ([{"answers": ["1"]}], {}, r"per_problem_results\[0\] must have a 'correct' entry"),
        ([[1, 0]], {}, r"per_problem_results\[0\] must be a mapping with 'correct'"),
        ([{"correct": [1, 0], "answers": ["1", "2"]}, {"correct": [1, 0]}], {}, "every problem or for none"),
        ([{"correct": [1, 0]}], {"ks": (1, 4)}, r"ks must not exceed the number of samples .*\(2\), got k=4"),
        ([{"correct": [1, 0]}], {"k": 3}, r"k must not exceed the number of samples .*\(2\), got k=3"),
        ([{"correct": [1, 0]}], {"ks": ()}, "at least one k"),
        ([{"correct": [1, 0]}], {"ks": (0,)}, r"ks entries must be an integer >= 1, got 0"),
    ],
)
def test_summarize_rejects_bad_input(results: list, kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        summarize(results, **kwargs)
