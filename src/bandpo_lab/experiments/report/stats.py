"""The statistics of the report: Student-t quantiles, mean with a 95% interval over seeds, the difference of two
methods with its interval. Pure functions of numbers (no files)."""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["compare_methods", "mean_ci", "t_quantile"]

# Two-sided 95% Student-t quantiles t_{0.975, df} for df = 1..30.
_T975 = (
    12.7062, 4.3027, 3.1824, 2.7764, 2.5706, 2.4469, 2.3646, 2.3060, 2.2622, 2.2281,
    2.2010, 2.1788, 2.1604, 2.1448, 2.1314, 2.1199, 2.1098, 2.1009, 2.0930, 2.0860,
    2.0796, 2.0739, 2.0687, 2.0639, 2.0595, 2.0555, 2.0518, 2.0484, 2.0452, 2.0423,
)  # fmt: skip


def t_quantile(df: float) -> float:
    """The 0.975 quantile of Student's t with ``df`` degrees of freedom (the half-width factor of a two-sided 95%
    interval). Exact table for integer ``df <= 30`` (non-integer ``df`` rounds down: conservative); above, the
    Cornish-Fisher expansion (error < 1e-4)."""
    if not df >= 1:
        raise ValueError(f"df must be a number >= 1, got {df!r}")
    if df <= 30:
        return _T975[math.floor(df) - 1]
    z = 1.959963984540054
    return z + (z**3 + z) / (4 * df) + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * df**2)


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

    Paired over the seeds both have (same seed: same data order and sampling seed) when there are >= 2 of them;
    otherwise Welch's unpaired interval when both have >= 2 values; otherwise the plain difference of means.
    ``None``, NaN and infinite values count as missing (``n`` is the number of values used).

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
        va, vb = statistics.variance(a) / len(a), statistics.variance(b) / len(b)
        diff = statistics.fmean(b) - statistics.fmean(a)
        se = math.sqrt(va + vb)
        if se > 0:
            df = (va + vb) ** 2 / (va**2 / (len(a) - 1) + vb**2 / (len(b) - 1))
        else:
            df = len(a) + len(b) - 2
        half = t_quantile(max(df, 1.0)) * se
        out.update(diff=diff, lo=diff - half, hi=diff + half, n=min(len(a), len(b)), kind="welch")
    elif ref and oth:
        out.update(
            diff=statistics.fmean(oth.values()) - statistics.fmean(ref.values()), n=min(len(ref), len(oth))
        )
    if out["lo"] is not None:
        out["significant"] = bool(out["lo"] > 0 or out["hi"] < 0)
    return out
