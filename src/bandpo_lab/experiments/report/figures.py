"""The report's figures (matplotlib) drawn from :class:`~bandpo_lab.experiments.report.data.ReportData` into
``<report>/figures/`` (the list: docs/trl.md), and one run's curves (:func:`draw_run`, ``bandpo demo``'s)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from bandpo._optional import pyplot
from bandpo_lab.experiments.report.data import ReportData
from bandpo_lab.experiments.report.document import Figure
from bandpo_lab.plots import save_figure

Panel = tuple[str, str, str]  # (title, metrics key, y label)

_CURVES: tuple[tuple[str, list[Panel], str], ...] = (
    (
        "reward.png",
        [("training reward (mean over the generation batch)", "reward", "reward")],
        "Training reward.",
    ),
    (
        "entropy.png",
        [("policy entropy (nats per response token)", "policy/entropy", "nats")],
        "Policy entropy during training.",
    ),
    (
        "clip_fraction.png",
        [
            ("clipped up: r > hi, A > 0", "clip/frac_up", "% of tokens"),
            ("clipped down: r < lo, A < 0", "clip/frac_down", "% of tokens"),
        ],
        "Clip fraction (share of response tokens whose clipped term is active), up and down.",
    ),
    (
        "tail_share.png",
        [
            (
                "tail share of clipping: clipped tokens with p_old < 0.2",
                "clip/tail_share",
                "% of clipped tokens",
            )
        ],
        "Share of the clipped tokens that are tail tokens (p_old < 0.2); steps without clipping count as 0.",
    ),
    (
        "band_bounds.png",
        [("mean upper bound hi", "band/hi_mean", "ratio"), ("mean lower bound lo", "band/lo_mean", "ratio")],
        "Mean per-token ratio bounds over the response tokens (fixed rules are constant).",
    ),
)
_PERCENT = ("clip_fraction.png", "tail_share.png")


def draw_figures(data: ReportData, fig_dir: Path) -> list[Figure]:
    """Draw every figure ``data`` has numbers for into ``fig_dir``; returns them in report order (a figure without
    data is left out; a bounds figure that cannot be drawn becomes a note)."""
    figures = [_heldout(data, fig_dir)]
    for name, panels, caption in _CURVES:
        scale = 100.0 if name in _PERCENT else 1.0
        if _plot_curves(fig_dir / name, panels, data, data.smooth, scale=scale):
            smoothing = f" Rolling mean over {data.smooth} logged points." if data.smooth > 1 else ""
            figures.append(Figure(name, caption + smoothing))
    if _plot_bins(fig_dir / "clip_by_prob_bin.png", data):
        caption = "Clipping by old-probability bin (mean over logged steps and seeds; error bars min-max over seeds)."
        figures.append(Figure("clip_by_prob_bin.png", caption))
    figures.append(_bounds(data, fig_dir))
    return [f for f in figures if f is not None]


_RUN_PANELS: tuple[tuple[str, tuple[str, ...], str, float], ...] = (
    ("training reward", ("reward",), "reward", 1.0),
    ("policy entropy", ("policy/entropy", "entropy"), "nats per response token", 1.0),
    ("clipped tokens", ("clip/frac",), "% of response tokens", 100.0),
)
""":func:`draw_run`'s panels: (title, metrics keys, the first one a row has is plotted; y label; scale)."""


def run_curves(rows: Sequence[Mapping[str, Any]]) -> list[tuple[list[int], list[float]]]:
    """Per :data:`_RUN_PANELS` entry, the ``(steps, values)`` :func:`draw_run` plots: from each row with an integer
    ``step``, the first of the panel's keys holding a number, scaled; non-finite values left out."""
    curves: list[tuple[list[int], list[float]]] = []
    for _, keys, _, scale in _RUN_PANELS:
        points = []
        for row in rows:
            value = next((row[k] for k in keys if isinstance(row.get(k), (int, float))), None)
            if value is not None and isinstance(row.get("step"), int) and math.isfinite(value):
                points.append((row["step"], scale * float(value)))
        curves.append(([s for s, _ in points], [v for _, v in points]))
    return curves


def draw_run(rows: Sequence[Mapping[str, Any]], path: Path, title: str) -> bool:
    """One PNG of a training run's logged rows (``metrics.jsonl``): a panel per :data:`_RUN_PANELS` entry against
    the optimizer step (:func:`run_curves`), panels without values left empty. Returns False (no file) when no row
    has any of them."""
    curves = run_curves(rows)
    if not any(steps for steps, _ in curves):
        return False
    fig, axes = pyplot().subplots(1, len(_RUN_PANELS), figsize=(5.2 * len(_RUN_PANELS), 3.8), squeeze=False)
    for ax, (panel, _, ylabel, _), (steps, values) in zip(axes[0], _RUN_PANELS, curves):
        ax.plot(steps, values, lw=1.4)
        ax.set(title=panel, xlabel="optimizer step", ylabel=ylabel)
        ax.grid(alpha=0.3)
    fig.suptitle(title)
    fig.tight_layout()
    save_figure(fig, path)
    return True


def _heldout(data: ReportData, fig_dir: Path) -> Figure | None:
    key, main = data.heldout_key, data.final_key
    panels = [(f"held-out {key} during training", key, "accuracy %")] if key else []
    if key and _plot_curves(fig_dir / "heldout.png", panels, data, 1, heldout=True, scale=100.0):
        return Figure(
            "heldout.png",
            f"Held-out accuracy ({key}) against optimizer step: mean over seeds, band = min-max.",
        )
    if _plot_points(fig_dir / "heldout.png", data, f"{main} %", f"held-out {main}: start and end"):
        return Figure(
            "heldout.png",
            f"Held-out {main}: the starting policy (step 0) and each run's final policy (no curve was logged during "
            "training).",
        )
    return None


def _bounds(data: ReportData, fig_dir: Path) -> Figure | None:
    try:
        from bandpo.losses import CLIP_RULES, make_clip_rule
        from bandpo_lab.plots import plot_bounds

        rules = {label: data.rule_of[label] for label in data.labels if data.rule_of[label][0] in CLIP_RULES}
        if not rules:  # only TRL-native methods
            return None
        plot_bounds(
            fig_dir / "bounds.png", {label: make_clip_rule(r, **dict(p)) for label, (r, p) in rules.items()}
        )
    except (ValueError, TypeError) as err:  # an unregistered rule in old run specs: skip the figure
        return Figure(None, f"(bounds figure skipped: {err})")
    return Figure(
        "bounds.png",
        "The ratio bounds of the methods compared against p_old (adaptive rules at their base radius).",
    )


def _plot_curves(
    path: Path,
    panels: Sequence[Panel],
    data: ReportData,
    smooth: int,
    heldout: bool = False,
    scale: float = 1.0,
) -> bool:
    """One PNG with a panel per ``(title, key, ylabel)``: per method the mean over seeds (line) and the min-max
    range (band). Returns False (no file) when no run logged any of the keys."""
    pairs = [(key, label) for _, key, _ in panels for label in data.labels]
    curves = {(key, label): data.curve(label, key, heldout=heldout, smooth=smooth) for key, label in pairs}
    if not any(curves.values()):
        return False
    fig, axes = pyplot().subplots(1, len(panels), figsize=(6.2 * len(panels), 4.4), squeeze=False)
    for ax, (title, key, ylabel) in zip(axes[0], panels):
        for label in data.labels:
            if curves[(key, label)] is None:
                continue
            steps, mean, lo, hi = curves[(key, label)]
            n, color = len(data.groups[label]), data.colors[label]
            ax.plot(steps, [scale * v for v in mean], color=color, label=f"{label} (n={n})", lw=1.6)
            if n > 1:
                ax.fill_between(
                    steps, [scale * v for v in lo], [scale * v for v in hi], color=color, alpha=0.18
                )
        ax.set(title=title, xlabel="optimizer step", ylabel=ylabel)
        ax.grid(alpha=0.3)
    legends = [ax.get_legend_handles_labels() for ax in axes[0]]  # the legend: the first panel's with lines
    handles, labels = next((legend for legend in legends if legend[0]), legends[0])
    fig.legend(
        handles, labels, loc="lower center", ncol=min(4, max(1, len(labels))), fontsize=8, frameon=False
    )
    fig.tight_layout(rect=(0, 0.1, 1, 1))
    save_figure(fig, path)
    return True


def _plot_points(path: Path, data: ReportData, ylabel: str, title: str) -> bool:
    """Held-out accuracy when no curve was logged: the starting point and each run's final point."""
    if not any(data.final_points.values()):
        return False
    fig, ax = pyplot().subplots(figsize=(7, 4.4))
    for label, pts in data.final_points.items():
        if not pts:
            continue
        xs, ys = zip(*pts)
        ax.plot(xs, [100 * y for y in ys], "o-", color=data.colors.get(label, "grey"), label=label, alpha=0.8)
    ax.set(title=title, xlabel="optimizer step", ylabel=ylabel)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    save_figure(fig, path)
    return True


def _plot_bins(path: Path, data: ReportData) -> bool:
    """Grouped bars per old-probability bin (:meth:`ReportData.clip_bins`). Top: share of the bin's tokens clipped
    (up, down; error bars min-max over seeds); bottom: where the clipped tokens are (the bin's share of all clipped
    tokens, up and down)."""
    bars = data.clip_bins()
    if bars is None:
        return False
    fig, axes = pyplot().subplots(2, 2, figsize=(13, 8.2))
    width = 0.8 / max(1, len(bars.labels))
    panels = (
        (axes[0][0], "up", "rate", "clipped up (r > hi, A > 0): % of the bin's tokens"),
        (axes[0][1], "down", "rate", "clipped down (r < lo, A < 0): % of the bin's tokens"),
        (axes[1][0], "up", "share", "where up-clipping happens: % of all up-clipped tokens"),
        (axes[1][1], "down", "share", "where down-clipping happens: % of all down-clipped tokens"),
    )
    for ax, side, what, title in panels:
        for i, label in enumerate(bars.labels):
            if what == "rate":
                ys, err = bars.rate[(side, label)], bars.rate_err[(side, label)]
            else:
                ys, err = bars.where[(side, label)], None
            xs = [j + (i - (len(bars.labels) - 1) / 2) * width for j in range(len(bars.bins))]
            ax.bar(
                xs, ys, width=width, color=data.colors[label], label=label, yerr=err, capsize=2 if err else 0
            )
        ax.set_xticks(range(len(bars.bins)), [f"p_old {b[1:]}" for b in bars.bins], fontsize=8)
        ax.set(title=title, ylabel="%")
        ax.grid(axis="y", alpha=0.3)
    handles, names = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, names, loc="lower center", ncol=min(7, len(names)), fontsize=8, frameon=False)
    fig.tight_layout(rect=(0, 0.06, 1, 1))
    save_figure(fig, path)
    return True
