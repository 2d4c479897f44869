"""Figures (matplotlib, Agg backend): the paper's Figure-1-style bound plot, reused by the report."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from bandpo._optional import pyplot
from bandpo.losses.clip_rules import ClipRule, make_clip_rule


def default_rules(divergences: Sequence[str], delta: float, cap: float | None) -> dict[str, ClipRule]:
    """Band rules for ``divergences`` next to GRPO (eps 0.2), Clip-Higher (0.28) and DCPO, by label."""
    rules: dict[str, ClipRule] = {
        f"band {d} (delta={delta:g})": make_clip_rule("band", divergence=d, delta=delta, cap=cap)
        for d in divergences
    }
    rules["fixed eps=0.2 (GRPO)"] = make_clip_rule("grpo")
    rules["fixed eps=0.2/0.28 (Clip-Higher)"] = make_clip_rule("clip_higher")
    rules["DCPO"] = make_clip_rule("dcpo")
    return rules


FIGURE_MARK = "bandpo figure"
"""The ``Creator`` metadata of every figure bandpo writes in a format that keeps it (:data:`MARKED_FORMATS`): a
command may replace a file at a path a user names only when it holds this mark (:func:`is_bandpo_figure`)."""

MARKED_FORMATS = ("eps", "pdf", "png", "ps", "svg")
"""The figure formats whose file holds :data:`FIGURE_MARK` as written (matplotlib's metadata; uncompressed)."""


def save_figure(fig: Any, path: Path, dpi: int = 110) -> Path:
    """Write ``fig`` to ``path`` (parents created; the suffix picks the format; marked with :data:`FIGURE_MARK`
    where the format keeps it) and close it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    marked = path.suffix.lower().removeprefix(".") in MARKED_FORMATS
    fig.savefig(path, dpi=dpi, metadata={"Creator": FIGURE_MARK} if marked else None)
    pyplot().close(fig)
    return path


def is_bandpo_figure(path: Path) -> bool:
    """Whether the file ``path`` holds :data:`FIGURE_MARK` (a figure bandpo wrote, which it may replace)."""
    try:
        return FIGURE_MARK.encode() in path.read_bytes()
    except OSError:
        return False


def figure_formats() -> list[str]:
    """The file suffixes (lower case, without the dot) matplotlib can write a figure in, sorted: ``eps``,
    ``jpeg``, ..., ``pdf``, ``png``, ``svg``, ...; the suffix of a figure's path picks its format."""
    pyplot()  # matplotlib is installed (else MissingDependencyError)
    from matplotlib.backend_bases import FigureCanvasBase

    return sorted(FigureCanvasBase.get_supported_filetypes())


def plot_bounds(path: str | Path, rules: dict[str, ClipRule], n_points: int = 400) -> Path:
    """Write a two-panel figure: ratio bounds [lo, hi] against p_old, and the allowed probability change
    ``Delta pi = (hi - 1) p`` (up) / ``(1 - lo) p`` (down), for each rule, with the simplex limit 1/p. The suffix
    of ``path`` picks the format (:func:`figure_formats`; ``.png`` for the PNG)."""
    plt = pyplot()

    p = torch.logspace(-3, -1e-4, n_points, dtype=torch.float64)
    logp = torch.log(p)
    fig, (ax_r, ax_d) = plt.subplots(1, 2, figsize=(12, 5.4))
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for i, (label, rule) in enumerate(rules.items()):
        # entropy-driven rules at their base radius (entropy = entropy_ref gives delta itself)
        ent = torch.full_like(logp, float(getattr(rule, "entropy_ref", 1.0))) if rule.needs_entropy else None
        lo, hi = rule.bounds(logp, ent)
        c = colors[i % len(colors)]
        style = "-" if label.startswith("band") else "--"
        ax_r.plot(p, hi, style, color=c, label=label)
        ax_r.plot(p, lo, style, color=c)
        ax_d.plot(p, (hi - 1) * p, style, color=c, label=label)
        ax_d.plot(p, -(1 - lo) * p, style, color=c)
    ax_r.plot(p, 1 / p, ":", color="grey", label="simplex limit 1/p")
    ax_r.set(xscale="log", yscale="log", xlabel="p_old(a|s)", ylabel="ratio bound", ylim=(0.05, 20))
    ax_r.set_title("ratio bounds lo <= r <= hi")
    ax_d.plot(p, 1 - p, ":", color="grey", label="simplex limit 1 - p")
    ax_d.plot(p, -p, ":", color="grey")
    ax_d.set(xscale="log", xlabel="p_old(a|s)", ylabel="allowed change of pi(a|s)", ylim=(-1.05, 1.05))
    ax_d.set_title("Delta pi = (r - 1) p at the bounds")
    ax_d.axhline(0, color="black", lw=0.5)
    handles, labels = ax_r.get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=4, fontsize=8, frameon=False)
    fig.tight_layout(rect=(0, 0.12, 1, 1))
    return save_figure(fig, Path(path), dpi=120)
