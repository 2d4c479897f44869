"""Summaries of the mechanism experiment: percentile-bootstrap intervals and one summary per outcome.

Every number in the table is a statistic over seeds with a 95% percentile-bootstrap interval: resample the seeds
with replacement ``n_boot`` times, compute the statistic on each resample, take the 2.5% and 97.5% quantiles
(numpy's default linear interpolation). Infinite values (an event that never happened within the budget) are
ordinary values of the sample: a median of ``inf`` reads "not reached by at least half the seeds".
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from mechanism import Trajectories

from bandpo.registry import Registry

REFERENCE_RULE = "grpo"
FIND_P = 0.5  # the rare action counts as found once its probability reaches this
FALL_FACTOR = 0.1  # the penalised action has fallen once its probability is below this times its start


def _stat(name: str) -> Callable[..., np.ndarray]:
    return {"median": np.median, "mean": np.mean}[name]


def bootstrap_ci(
    values: np.ndarray, stat: str = "median", n_boot: int = 1000, level: float = 0.95, seed: int = 0
) -> tuple[float, float, float]:
    """``(statistic, low, high)`` of ``stat`` ("median" or "mean") over the last axis of a 1-D sample.

    Percentile bootstrap: ``n_boot`` resamples of the seeds with replacement (numpy ``default_rng(seed)``).
    """
    values = np.asarray(values, dtype=np.float64)
    if values.ndim != 1 or values.size < 2:
        raise ValueError(f"values must be a 1-D sample of at least 2 values, got shape {values.shape}")
    if (values == values[0]).all():  # a constant sample: every resample gives the same statistic
        return float(values[0]), float(values[0]), float(values[0])
    point, low, high = bootstrap_curve(values[:, None], stat, n_boot, level, seed)
    return float(point[0]), float(low[0]), float(high[0])


def bootstrap_curve(
    values: np.ndarray, stat: str = "median", n_boot: int = 200, level: float = 0.95, seed: int = 0
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Pointwise ``(statistic, low, high)``, each (T,), of ``values`` (S, T): seeds resampled together."""
    f = _stat(stat)
    values = np.asarray(values, dtype=np.float64)
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, values.shape[0], size=(n_boot, values.shape[0]))  # (n_boot, S)
    with np.errstate(invalid="ignore"):
        boot = f(values[idx], axis=1)  # (n_boot, T)
        return f(values, axis=0), *_quantiles(boot, [(1 - level) / 2, (1 + level) / 2])


def _quantiles(x: np.ndarray, qs: list[float]) -> list[np.ndarray]:
    """numpy's linear-interpolation quantiles over axis 0, also where ``x`` holds +inf: a quantile that falls on
    an order statistic is that value, one strictly between a value and +inf is +inf (numpy gives NaN there, from
    ``inf - inf`` and ``0 * inf``)."""
    with np.errstate(invalid="ignore"):
        linear = np.quantile(x, qs, axis=0)
    lower = np.quantile(x, qs, axis=0, method="lower")
    out = []
    for q, lin, low in zip(qs, linear, lower):
        on_point = float(q * (x.shape[0] - 1)).is_integer()
        out.append(np.where(np.isnan(lin) & ~np.isnan(low), low if on_point else np.inf, lin))
    return out


def first_step(mask: np.ndarray) -> np.ndarray:
    """(..., T+1) bool -> (...) float: the first step where ``mask`` holds, ``inf`` where it never does."""
    hit = mask.any(axis=-1)
    return np.where(hit, mask.argmax(axis=-1).astype(np.float64), math.inf)


@dataclass(frozen=True)
class Metric:
    """One column of the table: a per-seed value (S,) from one rule's trajectories in one cell, its statistic."""

    name: str
    stat: str  # "median" or "mean"
    per_seed: Callable[[dict[str, np.ndarray], float | None], np.ndarray]
    # also compare with the reference rule seed by seed (same random numbers): "ratio" (median over seeds of
    # rule / reference) or "difference" (``stat`` over seeds of rule - reference)
    paired: str | None = None


@dataclass(frozen=True)
class Outcome:
    """What a scenario measures: the table's metrics and the figure's curve, (S, T+1) per seed, its statistic."""

    metrics: tuple[Metric, ...]
    curve: Callable[[dict[str, np.ndarray], float | None], np.ndarray]
    curve_stat: str
    curve_label: str
    curve_log: bool = False


OUTCOMES: Registry[Outcome] = Registry("mechanism outcome")


def _steps_to_find(d: dict[str, np.ndarray], p0: float | None) -> np.ndarray:
    return first_step(np.exp(d["log_p_rare"]) >= FIND_P)


def _steps_to_find_if_found(d: dict[str, np.ndarray], p0: float | None) -> np.ndarray:
    """Steps to find, over the seeds that found the rare action only (fewer values than seeds)."""
    steps = _steps_to_find(d, p0)
    return steps[np.isfinite(steps)]


def _log10_p_rare(d: dict[str, np.ndarray], p0: float | None) -> np.ndarray:
    return d["log_p_rare"] / math.log(10)


def _steps_to_fall(d: dict[str, np.ndarray], p0: float | None) -> np.ndarray:
    return first_step(np.exp(d["log_p_rare"]) <= FALL_FACTOR * p0)


def _steps_to_half_entropy(d: dict[str, np.ndarray], p0: float | None) -> np.ndarray:
    return first_step(d["entropy"] <= 0.5 * d["entropy"][..., :1])


def _share(key: str) -> Callable[[dict[str, np.ndarray], float | None], np.ndarray]:
    return lambda d, p0: d[key].astype(np.float64)


# Every outcome ends with these: how often the bounds bind (share of each batch's samples whose bound binds, upper
# for A > 0, lower for A < 0, over the K updates, averaged over the run) and the simplex-edge checks (share of seeds
# whose logits ever held NaN/inf, whose policy ever gave an action probability exactly 0 or exactly 1).
COMMON_METRICS = (
    Metric("clip_frac", "median", lambda d, p0: d["clip_frac"].mean(axis=-1)),
    Metric("nonfinite", "mean", _share("nonfinite")),
    Metric("hit_p0", "mean", _share("p_zero")),
    Metric("hit_p1", "mean", _share("p_one")),
)

OUTCOMES.register(
    "find",
    Outcome(
        metrics=(
            Metric(
                "found",
                "mean",
                lambda d, p0: np.isfinite(_steps_to_find(d, p0)).astype(np.float64),
                paired="difference",
            ),
            Metric("steps_to_find", "median", _steps_to_find),
            Metric("steps_to_find_if_found", "median", _steps_to_find_if_found),
            Metric("final_p_rare", "median", lambda d, p0: np.exp(d["log_p_rare"][..., -1])),
        ),
        curve=_log10_p_rare,
        curve_stat="median",
        curve_label="log10 p_rare",
    ),
)
OUTCOMES.register(
    "entropy",
    Outcome(
        metrics=(
            Metric("steps_to_half_entropy", "median", _steps_to_half_entropy),
            Metric("mean_entropy", "median", lambda d, p0: d["entropy"].mean(axis=-1), paired="ratio"),
            Metric("final_entropy", "median", lambda d, p0: d["entropy"][..., -1], paired="ratio"),
            Metric("final_p_head", "median", lambda d, p0: d["p_head"][..., -1]),
        ),
        curve=lambda d, p0: d["entropy"],
        curve_stat="median",
        curve_label="policy entropy (nats)",
    ),
)
OUTCOMES.register(
    "crash",
    Outcome(
        metrics=(
            Metric("steps_to_fall_10x", "median", _steps_to_fall),
            Metric(
                "final_log10_p_rare",
                "median",
                lambda d, p0: _log10_p_rare(d, p0)[..., -1],
                paired="difference",
            ),
        ),
        curve=_log10_p_rare,
        curve_stat="median",
        curve_label="log10 p_rare",
    ),
)


def cell_data(traj: Trajectories, k: int, r: int, lr: int, p: int) -> dict[str, np.ndarray]:
    """Every recorded array of one (updates, rule, learning rate, rare probability) cell, seeds first."""
    out = {}
    for group in (traj.curves, traj.rates, traj.flags):
        for key, x in group.items():
            out[key] = x[k, r, lr, p].numpy()
    return out


def _paired(m: Metric, x: np.ndarray, ref: np.ndarray, n_boot: int) -> dict:
    """Seed-by-seed comparison of a rule's values ``x`` (S,) with the reference rule's ``ref`` (S,)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        diff = x / ref if m.paired == "ratio" else x - ref
    value, low, high = bootstrap_ci(diff, "median" if m.paired == "ratio" else m.stat, n_boot)
    return {"paired": m.paired, "paired_value": value, "paired_ci_low": low, "paired_ci_high": high}


def summarize(traj: Trajectories, n_boot: int = 1000) -> list[dict]:
    """One row per (cell, rule, metric): statistic, 95% interval, and for paired metrics the comparison with GRPO
    (``paired``: "ratio" or "difference", ``paired_value``, ``paired_ci_low``, ``paired_ci_high``)."""
    outcome = OUTCOMES.get(traj.scenario.outcome)
    ref = traj.rules.index(REFERENCE_RULE) if REFERENCE_RULE in traj.rules else None
    rows = []
    for ki, k in enumerate(traj.updates_per_batch):
        for li, lr in enumerate(traj.learning_rates):
            for pi, p0 in enumerate(traj.rare_probs):
                ref_data = cell_data(traj, ki, ref, li, pi) if ref is not None else None
                for ri, rule in enumerate(traj.rules):
                    data = cell_data(traj, ki, ri, li, pi)
                    for m in (*outcome.metrics, *COMMON_METRICS):
                        x = m.per_seed(data, p0)
                        if x.size >= 2:
                            value, low, high = bootstrap_ci(x, m.stat, n_boot)
                        else:  # a conditional metric with fewer than 2 values: no interval
                            value, low, high = (float(x[0]) if x.size else math.nan), math.nan, math.nan
                        row = {
                            "scenario": traj.scenario.name,
                            "updates_per_batch": k,
                            "lr": lr,
                            "rare_p": p0,
                            "rule": rule,
                            "metric": m.name,
                            "stat": m.stat,
                            "value": value,
                            "ci_low": low,
                            "ci_high": high,
                            "seeds": int(x.shape[0]),
                        }
                        if m.paired is not None and ref_data is not None:
                            row.update(_paired(m, x, m.per_seed(ref_data, p0), n_boot))
                        rows.append(row)
    return rows
