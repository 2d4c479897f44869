"""Power of a paired comparison over seeds (two-sided paired t test, at 5 % unless ``--alpha``), as docs/study.md
plans studies with.

    .venv/bin/python scripts/power.py --sd 6.7 --n 5 --effect 2 5      # power at +2 and +5 points with 5 seeds
    .venv/bin/python scripts/power.py --sd 6.7 --effect 5 --power 0.8  # seeds needed for +5 at 80 % power
    .venv/bin/python scripts/power.py --sd 6.7 --n 5 --mdd             # smallest difference 5 seeds detect at 80 %

``sd`` is the standard deviation of the per-seed differences (method B - method A, in points). Power is the exact
probability from the noncentral t distribution (df = n - 1, noncentrality effect / (sd / sqrt(n))).
"""

from __future__ import annotations

import argparse
import math
from numbers import Integral

from scipy import optimize, stats

# The checks phrase their errors as bandpo.validation does ("NAME must be ..., got VALUE"); not imported from it,
# so that this scipy-only script does not import torch (bandpo's package import) for three comparisons.


def _check_sd(sd: float, name: str = "sd") -> None:
    if not (math.isfinite(sd) and sd > 0):
        raise ValueError(f"{name} must be a finite number > 0, got {sd!r}")


def _check_n(n: int, name: str = "n") -> None:
    if isinstance(n, bool) or not isinstance(n, Integral) or n < 2:  # df = n - 1 >= 1
        raise ValueError(f"{name} must be an integer >= 2, got {n!r}")


def _check_target(target: float, alpha: float, name: str = "target") -> None:
    """The target power must lie in (alpha, 1): at or below alpha even a zero difference reaches it, and 1 is
    reached by no finite number of seeds."""
    if not alpha < target < 1:  # also false for NaN
        raise ValueError(f"{name} must be a number in ({alpha:g}, 1), got {target!r}")


def power(effect: float, sd: float, n: int, alpha: float = 0.05) -> float:
    """Probability that the two-sided paired t test at ``alpha`` rejects 0 when the true mean difference is
    ``effect`` and the per-seed differences have standard deviation ``sd``, with ``n`` seeds (>= 2).

    Raises ``ValueError`` for ``sd`` not a finite number > 0 or ``n`` not an integer >= 2."""
    _check_sd(sd)
    _check_n(n)
    df = n - 1
    crit = stats.t.ppf(1 - alpha / 2, df)
    nc = effect / (sd / math.sqrt(n))
    # both tails as survival functions: P(T < -crit | nc) = P(T > crit | -nc); scipy's nct.cdf(-crit) is NaN for
    # noncentralities from about 7 on, where the other tail is still far from 1 with few seeds
    return float(stats.nct.sf(crit, df, nc) + stats.nct.sf(crit, df, -nc))


def seeds_needed(effect: float, sd: float, target: float = 0.8, alpha: float = 0.05) -> int:
    """The smallest number of seeds whose power at ``effect`` reaches ``target``.

    Raises ``ValueError`` for an ``effect`` of 0 (or not finite): the power at 0 is ``alpha`` whatever the number
    of seeds, so no number reaches ``target``; likewise for ``sd`` <= 0 and ``target`` outside (alpha, 1)."""
    if not math.isfinite(effect) or effect == 0:
        raise ValueError(f"effect must be a finite number other than 0 to solve for seeds, got {effect!r}")
    _check_sd(sd)
    _check_target(target, alpha)
    lo, hi = 1, 2  # power(lo) < target <= power(hi); the power grows with n: double, then bisect
    while power(effect, sd, hi, alpha) < target:
        lo, hi = hi, 2 * hi
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if power(effect, sd, mid, alpha) < target else (lo, mid)
    return hi


def minimum_detectable(sd: float, n: int, target: float = 0.8, alpha: float = 0.05) -> float:
    """The difference that ``n`` seeds detect with probability ``target``.

    Raises ``ValueError`` for ``sd`` <= 0, ``n`` < 2 and ``target`` outside (alpha, 1)."""
    _check_sd(sd)
    _check_n(n)
    _check_target(target, alpha)

    def gap(d: float) -> float:  # d in units of sd: the power depends on effect / sd only
        return power(d, 1.0, n, alpha) - target

    hi = 20.0  # few seeds at a small alpha need more than 20 sd (2 seeds, 99% at alpha 0.01: 116 sd)
    while gap(hi) < 0:
        hi *= 2
    return sd * float(optimize.brentq(gap, 1e-9, hi))  # solved at sd 1 then scaled: any sd > 0 works


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sd", type=float, required=True, help="sd of the per-seed differences (points)")
    parser.add_argument("--n", type=int, default=None, help="seeds")
    parser.add_argument("--effect", type=float, nargs="*", default=[], help="true differences (points)")
    parser.add_argument("--power", type=float, default=0.8, help="target power for --n absent / --mdd")
    parser.add_argument("--mdd", action="store_true", help="print the minimum detectable difference at --n")
    parser.add_argument(
        "--alpha",
        type=float,
        default=0.05,
        help="two-sided level of each test (default 0.05; 0.025 for each of two contrasts under Bonferroni)",
    )
    parser.add_argument(
        "--unit", default="points", help="the unit of --sd, for the printed line (default points)"
    )
    args = parser.parse_args(argv)
    try:  # one line naming the flag, the value and what is allowed, before any computing
        _check_sd(args.sd, "--sd")
        if args.n is not None:
            _check_n(args.n, "--n")
        if not 0 < args.alpha < 0.5:  # also false for NaN
            raise ValueError(f"--alpha must be a number in (0, 0.5), got {args.alpha!r}")
        _check_target(args.power, args.alpha, "--power")
    except ValueError as err:
        parser.error(str(err))
    for effect in args.effect:
        if not math.isfinite(effect) or (effect == 0 and args.n is None):
            parser.error(
                f"--effect must be a finite number, and other than 0 without --n (the power at 0 is {100 * args.alpha:g}% "
                f"with any number of seeds), got {effect!r}"
            )
    if args.mdd and args.n is None:
        parser.error("--mdd needs --n (the number of seeds whose minimum detectable difference to print)")
    for effect in args.effect:
        if args.n is None:
            print(
                f"effect {effect:+g}: {seeds_needed(effect, args.sd, args.power, args.alpha)} seeds for "
                f"{args.power:.0%} power"
            )
        else:
            print(
                f"effect {effect:+g}: power {power(effect, args.sd, args.n, args.alpha):.1%} with {args.n} seeds"
            )
    if args.mdd and args.n is not None:
        mdd = minimum_detectable(args.sd, args.n, args.power, args.alpha)
        level = "" if args.alpha == 0.05 else f" at alpha {args.alpha:g}"
        print(f"{args.n} seeds detect {mdd:.3g} {args.unit} with {args.power:.0%} power{level}")


if __name__ == "__main__":
    main()
