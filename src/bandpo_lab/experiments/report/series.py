"""The numbers behind the report's figures: training curves aggregated over seeds, clip rates by probability bin."""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

Curve = tuple[list[float], list[float], list[float], list[float]]
"""``(steps, mean, min, max)``: per optimizer step, over the seeds that logged it."""


def bin_names(names: Iterable[str]) -> list[str]:
    """Probability-bin names (``p0.0-0.2``, ...) sorted by their lower edge."""
    return sorted(names, key=lambda b: float(b[1:].split("-")[0]))


def _smooth(ys: list[float], window: int) -> list[float]:
    if window <= 1:
        return ys
    out = []
    for i in range(len(ys)):
        chunk = ys[max(0, i - window + 1) : i + 1]
        out.append(sum(chunk) / len(chunk))
    return out


def _series(rows: Sequence[Mapping[str, Any]], key: str, smooth: int) -> list[tuple[float, float]]:
    pts = [
        (float(r["step"]), float(r[key]))
        for r in rows
        if r.get(key) is not None and r.get("step") is not None
    ]
    if not pts:
        return []
    xs, ys = zip(*pts)
    return list(zip(xs, _smooth(list(ys), smooth)))


def curve(logs: Sequence[Sequence[Mapping[str, Any]]], key: str, smooth: int) -> Curve | None:
    """``key`` against ``step`` in each run's log rows (rolling mean over ``smooth`` logged points), then per step
    the mean, min and max over the runs that logged it; ``None`` when no run logged ``key``."""
    series = [s for s in (_series(rows, key, smooth) for rows in logs) if s]
    if not series:
        return None
    by_step: dict[float, list[float]] = {}
    for s in series:
        for x, y in s:
            by_step.setdefault(x, []).append(y)
    steps = sorted(by_step)
    return (
        steps,
        [statistics.fmean(by_step[x]) for x in steps],
        [min(by_step[x]) for x in steps],
        [max(by_step[x]) for x in steps],
    )


@dataclass(frozen=True)
class BinBars:
    """Clipping by old-probability bin, per method, in %.

    ``rate[(side, label)]``: per bin the share of the bin's tokens clipped on ``side`` (``"up"``/``"down"``), mean
    over seeds of the per-run means, with ``rate_err[(side, label)]`` the distance to the min and max over seeds
    (``None`` when no seed differs); ``where[(side, label)]``: per bin its share of all tokens clipped on ``side``.
    Methods that log no bins are left out (no bars of 0)."""

    bins: list[str]
    labels: list[str]
    rate: dict[tuple[str, str], list[float]]
    rate_err: dict[tuple[str, str], list[list[float]] | None]
    where: dict[tuple[str, str], list[float]]


def clip_bin_bars(
    labels: Sequence[str], per_method: Mapping[str, Mapping[str, Mapping[str, Any]]]
) -> BinBars | None:
    """The :class:`BinBars` of ``per_method`` (``label -> key -> mean_ci``: ``bins/up/<bin>``, ``bins/down/<bin>``,
    ``bins/mass/<side>/<bin>``); ``None`` when no method logged a bin."""

    def measured(label: str) -> bool:
        return any(
            k.startswith("bins/") and v.get("mean") is not None for k, v in per_method.get(label, {}).items()
        )

    labels = [label for label in labels if measured(label)]
    bins = bin_names(
        {k.split("/")[-1] for label in labels for k in per_method[label] if k.startswith("bins/up/")}
    )
    if not bins:
        return None
    rate, rate_err, where = {}, {}, {}
    for side in ("up", "down"):
        for label in labels:
            m = per_method.get(label, {})
            rates = [m.get(f"bins/{side}/{b}", {}).get("mean") for b in bins]
            ys = [100 * (r or 0.0) for r in rates]
            lo = [100 * (m.get(f"bins/{side}/{b}", {}).get("min") or 0.0) for b in bins]
            hi = [100 * (m.get(f"bins/{side}/{b}", {}).get("max") or 0.0) for b in bins]
            err = [[max(0.0, y - a) for y, a in zip(ys, lo)], [max(0.0, b - y) for y, b in zip(ys, hi)]]
            rate[(side, label)] = ys
            rate_err[(side, label)] = err if any(e > 0 for side_err in err for e in side_err) else None
            # per step rate x share, then averaged: the product of the averaged rate and share weighs each step's
            # rate by the mean share, not its own
            mass = [m.get(f"bins/mass/{side}/{b}", {}).get("mean") or 0.0 for b in bins]
            total = sum(mass)
            where[(side, label)] = [100 * x / total if total > 0 else 0.0 for x in mass]
    return BinBars(bins=bins, labels=labels, rate=rate, rate_err=rate_err, where=where)
