"""The scripts' checks of their inputs: a bad value stops them with one line naming the option, the value and what
is allowed, before any work (no training, no model), instead of a loop that never ends or a traceback after minutes.
The benchmarks' own are in tests/benchmarks/test_benchmark_inputs.py."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from helpers import load_script as _load


def _usage_error(main, argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    """``main(argv)`` exits 2 through argparse; the last line of stderr (the one after the usage)."""
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    return capsys.readouterr().err.strip().splitlines()[-1]


# scripts/power.py


def test_power_functions_refuse_inputs_without_an_answer() -> None:
    """seeds_needed at effect 0 looped for ever (the power at 0 is alpha for every n); sd 0 divided by zero."""
    power = _load("scripts/power.py")
    with pytest.raises(ValueError, match=r"^effect must be a finite number other than 0 .*, got 0\.0$"):
        power.seeds_needed(0.0, 6.7)
    with pytest.raises(ValueError, match=r"^sd must be a finite number > 0, got 0\.0$"):
        power.power(2.0, 0.0, 5)
    with pytest.raises(ValueError, match=r"^sd must be a finite number > 0, got -1\.0$"):
        power.seeds_needed(5.0, -1.0)
    with pytest.raises(ValueError, match=r"^sd must be a finite number > 0, got 0\.0$"):
        power.minimum_detectable(0.0, 5)
    with pytest.raises(ValueError, match=r"^n must be an integer >= 2, got 1$"):
        power.minimum_detectable(6.7, 1)
    with pytest.raises(ValueError, match=r"^target must be a number in \(0\.05, 1\), got 1\.0$"):
        power.seeds_needed(5.0, 6.7, target=1.0)
    # the numbers the docs quote (docs/study.md: 68 seeds for +5 at sd 14.4; 11.3 points with 5 seeds at ~6.7)
    assert power.seeds_needed(5.0, 14.4) == 68 and power.seeds_needed(-5.0, 14.4) == 68
    assert round(power.minimum_detectable(6.7, 5), 1) == 11.3


def test_seeds_needed_is_the_smallest_count_and_fast_for_small_effects() -> None:
    """Doubling then bisecting finds what counting up one seed at a time finds, and a small effect (millions of
    seeds; counting took minutes to hours) answers at once."""
    import time

    power = _load("scripts/power.py")
    for effect, sd in [(5.0, 9.36), (5.0, 6.7), (11.3, 6.7), (2.0, 6.7), (3.0, 1.0), (1.0, 1.0)]:
        n = power.seeds_needed(effect, sd)
        assert power.power(effect, sd, n) >= 0.8 and (n == 2 or power.power(effect, sd, n - 1) < 0.8)
    assert power.seeds_needed(5.0, 9.36) == 30  # docs/study.md's registration
    t0 = time.perf_counter()
    assert power.seeds_needed(0.01, 6.7) > 1_000_000
    assert time.perf_counter() - t0 < 5.0


def test_minimum_detectable_scales_with_any_sd() -> None:
    """Per-seed differences equal up to rounding (sd 3e-17) made the fixed bracket [1e-9, 20 sd] fail in scipy."""
    power = _load("scripts/power.py")
    small, usual = power.minimum_detectable(3.2e-17, 10), power.minimum_detectable(6.7, 10)
    assert small / 3.2e-17 == pytest.approx(usual / 6.7, rel=1e-6)


def _power_by_integral(effect: float, n: int, alpha: float) -> float:
    """The paired t test's power at sd 1 without the noncentral t: P(|Z + nc| > crit * sqrt(V / df)) integrated
    over V ~ chi2(df)."""
    import math

    from scipy import integrate, stats

    df, nc = n - 1, effect * math.sqrt(n)
    crit = stats.t.ppf(1 - alpha / 2, df)

    def f(v: float) -> float:
        c = crit * math.sqrt(v / df)
        return float((stats.norm.sf(c - nc) + stats.norm.cdf(-c - nc)) * stats.chi2.pdf(v, df))

    return integrate.quad(f, 0, math.inf, limit=200)[0]


@pytest.mark.parametrize(
    ("n", "alpha", "target"), [(2, 0.05, 0.8), (3, 0.01, 0.95), (5, 0.01, 0.95), (2, 0.01, 0.99)]
)
def test_power_and_minimum_detectable_match_an_integral_with_few_seeds(
    n: int, alpha: float, target: float
) -> None:
    """scipy's nct.cdf(-crit) is NaN from a noncentrality of about 7 on: the power printed nan% (2 seeds at 9 sd,
    truly 68%), and minimum_detectable took NaN for a power of 1 (2 seeds: 7.6 sd for 80%, truly 11.6) or found no
    bracket in 20 sd (2 seeds, 99% at alpha 0.01: a scipy error)."""
    power = _load("scripts/power.py")
    for effect in (0.5, 3.0, 9.0, -9.0, 40.0):
        assert power.power(effect, 1.0, n, alpha) == pytest.approx(
            _power_by_integral(effect, n, alpha), abs=1e-8
        )
    mdd = power.minimum_detectable(1.0, n, target, alpha)
    assert _power_by_integral(mdd, n, alpha) == pytest.approx(target, abs=1e-6)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["--sd", "6.7", "--effect", "0"],
            "--effect must be a finite number, and other than 0 without --n (the power at 0 is 5% with any "
            "number of seeds), got 0.0",
        ),
        (["--sd", "0", "--n", "5", "--effect", "2"], "--sd must be a finite number > 0, got 0.0"),
        (["--sd", "6.7", "--n", "1", "--effect", "2"], "--n must be an integer >= 2, got 1"),
        (["--sd", "6.7", "--effect", "5", "--power", "1"], "--power must be a number in (0.05, 1), got 1.0"),
        (
            ["--sd", "6.7", "--mdd"],
            "--mdd needs --n (the number of seeds whose minimum detectable difference to print)",
        ),
    ],
)
def test_power_cli_names_the_bad_option(argv: list[str], message: str, capsys) -> None:
    power = _load("scripts/power.py")
    assert _usage_error(power.main, argv, capsys) == f"{Path(sys.argv[0]).name}: error: {message}"


def test_power_cli_still_prints_what_the_docs_quote(capsys) -> None:
    """`power.py --sd 6.7 --n 5 --effect 2 5 --mdd` (docs/study.md, docs/smollm2.md): 8% and 25%, 11.3 points.
    Effect 0 with --n is a power (alpha), not an error."""
    power = _load("scripts/power.py")
    power.main(["--sd", "6.7", "--n", "5", "--effect", "2", "5", "0", "--mdd"])
    assert capsys.readouterr().out.splitlines() == [
        "effect +2: power 8.2% with 5 seeds",
        "effect +5: power 25.2% with 5 seeds",
        "effect +0: power 5.0% with 5 seeds",
        "5 seeds detect 11.3 points with 80% power",
    ]
