"""The statistics of the report, pure functions of numbers on scipy.stats (imported on first use, about 1.5 s)."""

from __future__ import annotations

import math
import numbers
import statistics
import warnings
from collections.abc import Mapping, Sequence
from typing import Any

from bandpo._optional import require


def _stats() -> Any:
    return require("scipy.stats", "report statistics", "lab")


def t_quantile(df: float) -> float:
    """The 0.975 quantile of Student's t with ``df`` degrees of freedom, any real ``df > 0`` (the half-width factor
    of a two-sided 95% interval; ``scipy.stats.t.ppf``; ``inf``: the normal quantile 1.95996...)."""
    if isinstance(df, bool) or not (isinstance(df, numbers.Real) and df > 0):  # also refuses NaN
        raise ValueError(f"df must be a number > 0, got {df!r}")
    return float(_stats().t.ppf(0.975, df))


def mean_ci(values: Sequence[float]) -> dict[str, Any]:
    """``{"mean", "ci95", "n", "min", "max", "values"}`` of ``values`` (``None`` entries dropped): ``ci95`` is the
    half-width ``t_{0.975, n-1} * sd / sqrt(n)`` of the 95% t-interval (``None`` for fewer than 2 values)."""
    xs = [float(v) for v in values if v is not None and math.isfinite(float(v))]
    if not xs:
        return {"mean": None, "ci95": None, "n": 0, "min": None, "max": None, "values": []}
    half = t_quantile(len(xs) - 1) * statistics.stdev(xs) / math.sqrt(len(xs)) if len(xs) >= 2 else None
    return {
        "mean": statistics.fmean(xs),
        "ci95": half,
        "n": len(xs),
        "min": min(xs),
        "max": max(xs),
        "values": xs,
    }


def compare_methods(reference: Mapping[int, float], other: Mapping[int, float]) -> dict[str, Any]:
    """Difference ``other - reference`` of a metric given per seed, with a 95% interval.

    Paired over the seeds both have (same seed: same data order and sampling seed) when there are >= 2 of them (the
    t-interval of the per-seed differences, :func:`mean_ci`); otherwise Welch's unpaired interval when both have
    >= 2 values (``scipy.stats.ttest_ind(equal_var=False)``; two constant sides: the interval is the difference
    itself); otherwise the plain difference of means. ``None``, NaN and infinite values count as missing (``n`` is
    the number of values used).

    Returns:
        ``{"diff", "lo", "hi", "n", "kind": "paired" | "welch" | "single", "significant"}`` (``lo``/``hi``/
        ``significant`` are ``None`` without an interval); ``diff`` is ``None`` when a side has no value.
    """
    ref = {s: float(v) for s, v in reference.items() if v is not None and math.isfinite(float(v))}
    oth = {s: float(v) for s, v in other.items() if v is not None and math.isfinite(float(v))}
    common = sorted(set(ref) & set(oth))
    out: dict[str, Any] = {
        "diff": None,
        "lo": None,
        "hi": None,
        "n": 0,
        "kind": "single",
        "significant": None,
    }
    if len(common) >= 2:
        d = [oth[s] - ref[s] for s in common]
        ci = mean_ci(d)
        out.update(
            diff=ci["mean"], lo=ci["mean"] - ci["ci95"], hi=ci["mean"] + ci["ci95"], n=len(d), kind="paired"
        )
    elif len(ref) >= 2 and len(oth) >= 2:
        a, b = list(ref.values()), list(oth.values())
        diff = statistics.fmean(b) - statistics.fmean(a)
        if statistics.variance(a) == statistics.variance(b) == 0:  # exact; scipy's df would be 0 / 0
            lo = hi = diff
        else:
            with warnings.catch_warnings():
                # scipy warns where a side's values are all equal (their variance is then rounding noise, ~1e-33,
                # instead of 0): the interval is the same to every printed digit
                warnings.filterwarnings("ignore", "Precision loss occurred", RuntimeWarning)
                test = _stats().ttest_ind(b, a, equal_var=False)
            lo, hi = (float(x) for x in test.confidence_interval(0.95))
        out.update(diff=diff, lo=lo, hi=hi, n=min(len(a), len(b)), kind="welch")
    elif ref and oth:
        out.update(
            diff=statistics.fmean(oth.values()) - statistics.fmean(ref.values()), n=min(len(ref), len(oth))
        )
    if out["lo"] is not None:
        out["significant"] = bool(out["lo"] > 0 or out["hi"] < 0)
    return out
