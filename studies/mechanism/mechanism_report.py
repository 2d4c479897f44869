"""The whole mechanism run (``run_mechanism``) and its files: tables (json, csv, md) and one PNG per scenario.

``results.json``: ``{"meta": {...}, "fields": [...], "rows": [[...], ...]}``, the rows of
``mechanism_stats.summarize`` as lists in the order of ``fields`` (floats to 4 significant digits, non-finite ones
as ``null``: a step count of ``null`` means "never within the budget"). ``results.csv``: the same rows, ``inf``
spelled out. ``results.md``: per scenario, one table per metric (rows: cells, columns: rules, entries
``statistic [95% interval] n=<seeds the statistic is over>``, ``n`` always printed: a statistic over the seeds where an
event happened has fewer seeds than its neighbours). ``<scenario>.png``: the scenario's curve per cell, statistic
over seeds with its pointwise 95% bootstrap band, one colour per rule.
"""

from __future__ import annotations

import csv
import dataclasses
import io
import json
import math
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from mechanism import (
    MechanismConfig,
    Scenario,
    Trajectories,
    run_scenario,
    total_updates,
)
from mechanism_stats import (
    OUTCOMES,
    REFERENCE_RULE,
    bootstrap_curve,
    cell_data,
    summarize,
)

from bandpo.losses.clip_rules import ClipRule

CSV_FIELDS = (
    "scenario", "updates_per_batch", "lr", "rare_p", "rule", "metric", "stat", "value", "ci_low", "ci_high",
    "seeds", "paired", "paired_value", "paired_ci_low", "paired_ci_high",
)  # fmt: skip
MAX_CURVE_POINTS = 61


def _round(x: Any, digits: int = 4) -> Any:
    """Floats to ``digits`` significant digits (the bootstrap intervals are not more precise than that)."""
    if isinstance(x, float) and math.isfinite(x) and x != 0:
        return float(f"{x:.{digits}g}")
    return x


def _json_safe(x: Any) -> Any:
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if isinstance(x, dict):
        return {k: _json_safe(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_json_safe(v) for v in x]
    return x


def fmt(x: float | None) -> str:
    """Compact number: ``never`` for +inf (an event not reached), ``n/a`` for NaN (no value, e.g. no seed found the
    rare action), 3 significant digits otherwise."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "n/a"
    if math.isinf(x):
        return "never" if x > 0 else "-inf"
    if x == 0:
        return "0"
    if abs(x) >= 1e4 or abs(x) < 1e-3:
        return f"{x:.2e}"
    return f"{x:.3g}"


def _cell_label(row: dict) -> str:
    label = f"K={row['updates_per_batch']}, lr={row['lr']:g}"
    return label if row["rare_p"] is None else f"{label}, p0={row['rare_p']:g}"


def markdown_tables(rows: Sequence[dict]) -> str:
    """Per scenario and metric, a table of ``statistic [low, high] n=seeds`` with cells as rows and rules as columns.

    ``rows``: the summary rows of ``mechanism_stats.summarize`` (keys ``scenario``, ``updates_per_batch``, ``lr``,
    ``rare_p``, ``rule``, ``metric``, ``stat``, ``value``, ``ci_low``, ``ci_high``, ``seeds`` and the ``paired_*``
    comparison). Every entry prints its number of seeds ``n``, also where all rules share it.
    """
    lines: list[str] = []
    for scenario in dict.fromkeys(r["scenario"] for r in rows):
        sc_rows = [r for r in rows if r["scenario"] == scenario]
        rules = list(dict.fromkeys(r["rule"] for r in sc_rows))
        lines.append(f"## {scenario}\n")
        for metric in dict.fromkeys(r["metric"] for r in sc_rows):
            m_rows = [r for r in sc_rows if r["metric"] == metric]
            lines.append(f"### {metric} ({m_rows[0]['stat']} over seeds, 95% bootstrap interval)\n")
            lines.append("| cell | " + " | ".join(rules) + " |")
            lines.append("|---|" + "---|" * len(rules))
            for cell in dict.fromkeys(_cell_label(r) for r in m_rows):
                by_rule = {r["rule"]: r for r in m_rows if _cell_label(r) == cell}
                entries = []
                for rule in rules:
                    r = by_rule[rule]
                    text = f"{fmt(r['value'])} [{fmt(r['ci_low'])}, {fmt(r['ci_high'])}] n={r['seeds']}"
                    if r.get("paired") and rule != REFERENCE_RULE:
                        sign = "x" if r["paired"] == "ratio" else ("+" if r["paired_value"] >= 0 else "")
                        text += (
                            f" ({sign}{fmt(r['paired_value'])} [{fmt(r['paired_ci_low'])}, "
                            f"{fmt(r['paired_ci_high'])}] vs {REFERENCE_RULE})"
                        )
                    entries.append(text)
                lines.append(f"| {cell} | " + " | ".join(entries) + " |")
            lines.append("")
    return "\n".join(lines)


def plot_scenario(path: Path, traj: Trajectories, n_boot: int = 200) -> Path:
    """One panel per cell (rows: updates per batch x initial rare probability; columns: learning rates)."""
    from bandpo._optional import pyplot

    plt = pyplot()

    outcome = OUTCOMES.get(traj.scenario.outcome)
    n_rows = len(traj.updates_per_batch) * len(traj.rare_probs)
    n_cols = len(traj.learning_rates)
    fig, axes = plt.subplots(
        n_rows, n_cols, figsize=(3.6 * n_cols, 2.5 * n_rows + 0.8), sharex=True, sharey="col", squeeze=False
    )
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for ki, k in enumerate(traj.updates_per_batch):
        for pi, p0 in enumerate(traj.rare_probs):
            for li, lr in enumerate(traj.learning_rates):
                ax = axes[ki * len(traj.rare_probs) + pi, li]
                for ri, rule in enumerate(traj.rules):
                    y = outcome.curve(cell_data(traj, ki, ri, li, pi), p0)  # (S, T+1)
                    every = max(1, math.ceil(y.shape[1] / MAX_CURVE_POINTS))
                    steps = np.arange(y.shape[1])[::every]
                    mid, low, high = bootstrap_curve(y[:, ::every], outcome.curve_stat, n_boot)
                    c = colors[ri % len(colors)]
                    ax.plot(steps, mid, color=c, lw=1.3, label=rule)
                    ax.fill_between(steps, low, high, color=c, alpha=0.15, lw=0)
                title = f"K={k}, lr={lr:g}" + ("" if p0 is None else f", p0={p0:g}")
                ax.set_title(title, fontsize=9)
                ax.grid(alpha=0.3)
                if li == 0:
                    ax.set_ylabel(outcome.curve_label, fontsize=8)
                if ki * len(traj.rare_probs) + pi == n_rows - 1:
                    ax.set_xlabel("step (sampled batch)", fontsize=8)
    handles, labels = axes[0, 0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=min(len(labels), 8), fontsize=8, frameon=False)
    fig.suptitle(
        f"{traj.scenario.name}: {outcome.curve_stat} over {traj.config.seeds} seeds, 95% bootstrap band "
        f"(vocab {traj.config.vocab}, group {traj.scenario.group_size})",
        fontsize=10,
    )
    fig.tight_layout(rect=(0, 0.05, 1, 0.97))
    path.parent.mkdir(parents=True, exist_ok=True)
    buf = io.BytesIO()
    fig.savefig(buf, dpi=80)
    plt.close(fig)
    _save_palette_png(buf, path)
    return path


def _save_palette_png(buf: io.BytesIO, path: Path) -> None:
    """Write a PNG with a 256-colour palette (a third of the RGBA size for these line plots)."""
    from PIL import Image

    buf.seek(0)
    with Image.open(buf) as img:
        img.convert("RGB").quantize(colors=256).save(path, optimize=True)


def write_results(
    out_dir: str | Path,
    trajectories: Sequence[Trajectories],
    rows: Sequence[dict],
    meta: dict,
    figures: bool = True,
    start: float | None = None,
) -> list[Path]:
    """Write, with ``figures``, one PNG per scenario, then the tables (md, csv, json); returns the paths.

    With ``start`` (a ``time.perf_counter()`` value) ``meta["wall_time_s"]`` is the time since then, figures included.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    figs = [plot_scenario(out / f"{t.scenario.name}.png", t) for t in trajectories] if figures else []
    if start is not None:
        meta["wall_time_s"] = round(time.perf_counter() - start, 1)
    paths = [out / "results.json", out / "results.csv", out / "results.md"]
    table = [[_round(row.get(k)) for k in CSV_FIELDS] for row in rows]
    paths[0].write_text(json.dumps(_json_safe({"meta": meta, "fields": CSV_FIELDS, "rows": table})) + "\n")
    with paths[1].open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=CSV_FIELDS, extrasaction="ignore")
        writer.writeheader()
        for row in rows:
            writer.writerow({k: ("" if row.get(k) is None else _round(row.get(k))) for k in CSV_FIELDS})
    header = [
        "# Mechanism experiment: results\n",
        f"Command: `{meta.get('command', '')}`  ",
        f"Seeds {meta['seeds']}, vocabulary {meta['vocab']}, wall time {meta.get('wall_time_s', 0):.0f} s. "
        "`K` = updates per sampled batch, `lr` = SGD step on the logits, `p0` = initial probability of the rare "
        "action. `never`: not reached within the step budget; `n/a`: no value (no seed to take a median over); "
        "`n`: the seeds the statistic is over (fewer than all where it is taken over the seeds where an event "
        "happened). "
        "In parentheses: the seed-by-seed comparison with grpo (same random numbers), its 95% interval.\n",
    ]
    for traj in trajectories:
        header.append(
            f"- `{traj.scenario.name}`: {traj.scenario.question} ({traj.config.steps or traj.scenario.steps} steps)"
        )
    paths[2].write_text("\n".join(header) + "\n\n" + markdown_tables(rows))
    return paths + figs


def run_mechanism(
    config: MechanismConfig,
    scenarios: Sequence[Scenario],
    rules: dict[str, ClipRule],
    out_dir: str | Path | None = None,
    *,
    progress: bool = True,
    command: str = "",
    figures: bool = True,
) -> tuple[list[Trajectories], list[dict], dict]:
    """Run every scenario with every rule, summarise, and (with ``out_dir``) write the files.

    Returns the trajectories, the summary rows and the metadata (settings, rule parameters, wall time)."""
    start = time.perf_counter()
    bar = _progress_bar(total_updates(scenarios, config), progress)
    trajectories = []
    try:
        for scenario in scenarios:
            if bar is not None:
                bar.set_description(scenario.name)
            trajectories.append(
                run_scenario(scenario, config, rules, bar.update if bar is not None else None)
            )
    finally:
        if bar is not None:
            bar.close()
    rows = [row for traj in trajectories for row in summarize(traj)]
    meta = {
        "command": command,
        "seeds": config.seeds,
        "vocab": config.vocab,
        "steps": config.steps,
        "zipf_exponent": config.zipf_exponent,
        "dtype": str(config.dtype).removeprefix("torch."),
        "seed": config.seed,
        "rules": {name: rule.params() for name, rule in rules.items()},
        "scenarios": {
            s.name: {k: v for k, v in dataclasses.asdict(s).items() if k != "name"} for s in scenarios
        },
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
    }
    meta["simulate_s"] = round(time.perf_counter() - start, 1)
    if out_dir is not None:
        write_results(out_dir, trajectories, rows, meta, figures=figures, start=start)
    else:
        meta["wall_time_s"] = round(time.perf_counter() - start, 1)
    return trajectories, rows, meta


def _progress_bar(total: int, enabled: bool):
    if not enabled:
        return None
    try:
        from tqdm.auto import tqdm
    except ImportError:  # progress bars are optional
        return None
    return tqdm(total=total, unit="update", dynamic_ncols=True, smoothing=0.05)
