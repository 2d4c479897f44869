"""The report of ``bandpo compare``: tables, figures, and a plain statement of the outcome.

:func:`build_report` reads only the files of a compare output directory, so it can be rebuilt at any time
(``bandpo compare --config ... --report-only``) and tested on synthetic run directories:

* ``runs/<label>/seed<seed>/run_spec.json``: ``label``, ``method`` (a clip rule or a TRL-native method; older
  specs have ``clip_rule`` only), ``params``, ``seed`` (``method_index``);
* ``.../metrics.jsonl``: the training logs (``bandpo.training.callbacks``: ``step``, ``policy/entropy``,
  ``clip/frac``, ``clip/frac_up``, ``clip/frac_down``, ``clip/frac_up/p0.0-0.2``, ..., ``clip/tail_share``,
  ``tokens/share/<bin>``, ``band/hi_mean``, ``band/lo_mean``, ``reward``);
* ``.../heldout.jsonl`` (optional): held-out accuracy during training (``step``, ``mean@k``, ...);
* ``.../results.json``: the final evaluation (``metrics``: ``mean@k``, ``pass@j``, ``best@k``, ``maj@k``,
  ``entropy``, ...); a run without it is unfinished and left out of the tables;
* ``baseline/results.json`` (optional): the starting policy; ``compare_plan.json`` (optional): method order,
  reference method, seeds.

What it writes to ``<output_dir>/report/``: ``report.md`` and ``report.html`` (figures inline as base64 PNG),
``results.md`` / ``results.csv`` / ``results.json`` (per method: mean, 95% t-interval half-width, min, max over
seeds), ``runs.csv`` (every run's numbers) and ``figures/*.png``.

Per-run training numbers, from ``metrics.jsonl`` rows (a row counts for a key when it has a non-null value):

* ``train/entropy_last``: the last logged ``policy/entropy``;
* ``train/clip_frac``, ``train/clip_frac_up``, ``train/clip_frac_down``: the mean over logged steps of ``clip/frac``,
  ``clip/frac_up``, ``clip/frac_down``;
* ``train/tail_up_rate``: the mean of ``clip/frac_up/p0.0-0.2`` (share of tail tokens clipped at the upper bound);
* ``train/tail_share``: the share of all clipped tokens with ``p_old < 0.2``, pooled over steps:
  ``sum(clip/frac/p0.0-0.2 * tokens/share/p0.0-0.2) / sum(clip/frac)`` (the mean of ``clip/tail_share`` when the
  bin keys are absent);
* ``train/hi_mean``, ``train/lo_mean``: the mean of ``band/hi_mean``, ``band/lo_mean``;
* ``train/reward_last``: the last logged ``reward``; ``train/steps``: the last logged step.

A number that was not measured is shown as ``-`` (never 0): the runs of a TRL-native method (``bandpo.training.methods``,
trained by plain ``GRPOTrainer``) log TRL's metrics but none of our ``clip/*`` / ``band/*`` diagnostics, so their clip
columns are ``-``, and they are left out of the clip-by-bin and bounds figures.
"""

from __future__ import annotations

import base64
import csv
import html
import io
import json
import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bandpo._files import read_jsonl

__all__ = [
    "RunData",
    "build_report",
    "compare_methods",
    "load_runs",
    "mean_ci",
    "run_summary",
    "t_quantile",
]

TAIL_BIN = "p0.0-0.2"
BAND_RULES = ("band", "adaptive_band")
"""Clip rules that are BandPO (the outcome statement singles them out)."""

# Two-sided 95% Student-t quantiles t_{0.975, df} for df = 1..30.
_T975 = (
    12.7062, 4.3027, 3.1824, 2.7764, 2.5706, 2.4469, 2.3646, 2.3060, 2.2622, 2.2281,
    2.2010, 2.1788, 2.1604, 2.1448, 2.1314, 2.1199, 2.1098, 2.1009, 2.0930, 2.0860,
    2.0796, 2.0739, 2.0687, 2.0639, 2.0595, 2.0555, 2.0518, 2.0484, 2.0452, 2.0423,
)  # fmt: skip


# ---------------------------------------------------------------------------------------------------- stats
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

    Returns:
        ``{"diff", "lo", "hi", "n", "kind": "paired" | "welch" | "single", "significant"}`` (``lo``/``hi``/
        ``significant`` are ``None`` without an interval); ``diff`` is ``None`` when a side has no value.
    """
    ref = {s: float(v) for s, v in reference.items() if v is not None}
    oth = {s: float(v) for s, v in other.items() if v is not None}
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


# ---------------------------------------------------------------------------------------------------- data
@dataclass
class RunData:
    """One run's files (see the module docstring)."""

    label: str
    clip_rule: str
    params: dict[str, Any]
    seed: int
    method_index: int
    run_dir: Path
    metrics: list[dict[str, Any]] = field(default_factory=list)
    heldout: list[dict[str, Any]] = field(default_factory=list)
    results: dict[str, Any] | None = None


def load_runs(output_dir: str | Path) -> list[RunData]:
    """Every ``runs/<label>/seed<seed>/`` with a ``run_spec.json``, with its metrics, held-out rows and results."""
    runs = []
    for spec_path in sorted(Path(output_dir).glob("runs/*/seed*/run_spec.json")):
        try:
            spec = json.loads(spec_path.read_text())
        except json.JSONDecodeError:
            continue
        run_dir = spec_path.parent
        results_path = run_dir / "results.json"
        results = None
        if results_path.is_file():
            try:
                results = json.loads(results_path.read_text())
            except json.JSONDecodeError:
                results = None
        runs.append(
            RunData(
                label=str(spec.get("label", run_dir.parent.name)),
                clip_rule=str(spec.get("method") or spec.get("clip_rule") or "?"),
                params=dict(spec.get("params") or {}),
                seed=int(spec.get("seed", 0)),
                method_index=int(spec.get("method_index", 10**6)),
                run_dir=run_dir,
                metrics=[r for r in read_jsonl(run_dir / "metrics.jsonl") if "train_runtime" not in r],
                heldout=read_jsonl(run_dir / "heldout.jsonl"),
                results=results,
            )
        )
    runs.sort(key=lambda r: (r.method_index, r.label, r.seed))
    return runs


def _values(rows: Sequence[Mapping[str, Any]], key: str) -> list[float]:
    return [float(r[key]) for r in rows if r.get(key) is not None]


def _mean(xs: Sequence[float]) -> float | None:
    return statistics.fmean(xs) if xs else None


def _bins(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    names = {k.split("/")[-1] for r in rows for k in r if k.startswith("clip/frac_up/")}
    return sorted(names, key=lambda b: float(b[1:].split("-")[0]))


def run_summary(run: RunData) -> dict[str, Any]:
    """One run's numbers: the final evaluation's metrics (``results.json``) and the training numbers of the module
    docstring (``train/...``), plus per-bin clip rates ``bins/up/<bin>``, ``bins/down/<bin>``, ``bins/share/<bin>``
    (the mean over logged steps of ``clip/frac_up/<bin>``, ``clip/frac_down/<bin>``, ``tokens/share/<bin>``)."""
    out: dict[str, Any] = {}
    if run.results:
        for key, value in (run.results.get("metrics") or {}).items():
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                out[key] = value
        for key in ("train_wall_s", "eval_wall_s"):
            if run.results.get(key) is not None:
                out[key] = run.results[key]
    rows = run.metrics
    steps = _values(rows, "step")
    out["train/steps"] = int(max(steps)) if steps else None
    entropy = _values(rows, "policy/entropy") or _values(rows, "entropy")
    out["train/entropy_last"] = entropy[-1] if entropy else None
    reward = _values(rows, "reward")
    out["train/reward_last"] = reward[-1] if reward else None
    for name, key in (
        ("train/clip_frac", "clip/frac"),
        ("train/clip_frac_up", "clip/frac_up"),
        ("train/clip_frac_down", "clip/frac_down"),
        ("train/tail_up_rate", f"clip/frac_up/{TAIL_BIN}"),
        ("train/hi_mean", "band/hi_mean"),
        ("train/lo_mean", "band/lo_mean"),
    ):
        out[name] = _mean(_values(rows, key))
    pooled = [
        r
        for r in rows
        if all(
            r.get(k) is not None for k in ("clip/frac", f"clip/frac/{TAIL_BIN}", f"tokens/share/{TAIL_BIN}")
        )
    ]
    if pooled:
        clipped = sum(float(r["clip/frac"]) for r in pooled)
        tail = sum(float(r[f"clip/frac/{TAIL_BIN}"]) * float(r[f"tokens/share/{TAIL_BIN}"]) for r in pooled)
        out["train/tail_share"] = tail / clipped if clipped > 0 else 0.0
    else:
        out["train/tail_share"] = _mean(_values(rows, "clip/tail_share"))
    for b in _bins(rows):
        out[f"bins/up/{b}"] = _mean(_values(rows, f"clip/frac_up/{b}"))
        out[f"bins/down/{b}"] = _mean(_values(rows, f"clip/frac_down/{b}"))
        out[f"bins/share/{b}"] = _mean(_values(rows, f"tokens/share/{b}"))
    return out


# --------------------------------------------------------------------------------------------------- blocks
# A report is a list of blocks rendered twice: to Markdown and to HTML.
Block = tuple[Any, ...]


def _md(blocks: Sequence[Block]) -> str:
    out: list[str] = []
    for block in blocks:
        kind = block[0]
        if kind in ("h1", "h2", "h3"):
            out.append("#" * int(kind[1]) + " " + block[1])
        elif kind == "p":
            out.append(block[1])
        elif kind == "ul":
            out.append("\n".join(f"- {item}" for item in block[1]))
        elif kind == "table":
            header, rows = block[1], block[2]

            def cell(x: Any) -> str:
                return str(x).replace("|", "\\|")

            lines = ["| " + " | ".join(map(cell, header)) + " |", "|" + "|".join("---" for _ in header) + "|"]
            lines.extend("| " + " | ".join(map(cell, row)) + " |" for row in rows)
            out.append("\n".join(lines))
        elif kind == "img":
            out.append(f"![{block[2]}]({block[1]})\n\n*{block[2]}*")
        elif kind == "pre":
            out.append("```\n" + block[1] + "\n```")
    return "\n\n".join(out) + "\n"


_CSS = """
body { font-family: -apple-system, Segoe UI, Helvetica, Arial, sans-serif; max-width: 1100px; margin: 2em auto;
       padding: 0 1em; color: #222; line-height: 1.45; }
table { border-collapse: collapse; margin: 1em 0; font-size: 0.9em; }
th, td { border: 1px solid #ccc; padding: 4px 8px; text-align: right; }
th:first-child, td:first-child { text-align: left; }
th { background: #f3f3f3; }
figure { margin: 1.5em 0; } figure img { max-width: 100%; border: 1px solid #eee; }
figcaption { font-size: 0.9em; color: #555; }
pre { background: #f6f6f6; padding: 0.8em; overflow-x: auto; }
"""


def _html(blocks: Sequence[Block], base_dir: Path, title: str) -> str:
    esc = html.escape
    out = [
        f"<!DOCTYPE html>\n<html><head><meta charset='utf-8'><title>{esc(title)}</title><style>{_CSS}</style>"
    ]
    out.append("</head><body>")
    for block in blocks:
        kind = block[0]
        if kind in ("h1", "h2", "h3"):
            out.append(f"<{kind}>{esc(block[1])}</{kind}>")
        elif kind == "p":
            out.append(f"<p>{esc(block[1])}</p>")
        elif kind == "ul":
            out.append("<ul>" + "".join(f"<li>{esc(str(i))}</li>" for i in block[1]) + "</ul>")
        elif kind == "table":
            head = "".join(f"<th>{esc(str(h))}</th>" for h in block[1])
            body = "".join(
                "<tr>" + "".join(f"<td>{esc(str(c))}</td>" for c in row) + "</tr>" for row in block[2]
            )
            out.append(f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>")
        elif kind == "img":
            data = base64.b64encode((base_dir / block[1]).read_bytes()).decode("ascii")
            out.append(
                f"<figure><img alt='{esc(block[2])}' src='data:image/png;base64,{data}'>"
                f"<figcaption>{esc(block[2])}</figcaption></figure>"
            )
        elif kind == "pre":
            out.append(f"<pre>{esc(block[1])}</pre>")
    out.append("</body></html>\n")
    return "\n".join(out)


# -------------------------------------------------------------------------------------------------- figures
def _pyplot() -> Any:
    from bandpo._optional import pyplot

    return pyplot()


def _smooth(ys: list[float], window: int) -> list[float]:
    if window <= 1:
        return ys
    out = []
    for i in range(len(ys)):
        chunk = ys[max(0, i - window + 1) : i + 1]
        out.append(sum(chunk) / len(chunk))
    return out


def _aggregate(
    series: Sequence[Sequence[tuple[float, float]]],
) -> tuple[list[float], list[float], list[float], list[float]]:
    """Per step over seeds: ``(steps, mean, min, max)`` of the seeds that logged that step."""
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


def _plot_curves(
    path: Path,
    panels: Sequence[tuple[str, str, str]],
    groups: Mapping[str, Sequence[RunData]],
    colors: Mapping[str, str],
    smooth: int,
    source: str = "metrics",
    scale: float = 1.0,
) -> bool:
    """One PNG with a panel per ``(title, key, ylabel)``: per method the mean over seeds (line) and the min-max
    range (band). Returns False (no file) when no run logged any of the keys."""
    data = {}
    for _, key, _ in panels:
        for label, runs in groups.items():
            series = [_series(r.metrics if source == "metrics" else r.heldout, key, smooth) for r in runs]
            series = [s for s in series if s]
            if series:
                data[(key, label)] = _aggregate(series)
    if not data:
        return False
    plt = _pyplot()
    fig, axes = plt.subplots(1, len(panels), figsize=(6.2 * len(panels), 4.4), squeeze=False)
    for ax, (title, key, ylabel) in zip(axes[0], panels):
        for label in groups:
            if (key, label) not in data:
                continue
            steps, mean, lo, hi = data[(key, label)]
            n = len(groups[label])
            ax.plot(steps, [scale * v for v in mean], color=colors[label], label=f"{label} (n={n})", lw=1.6)
            if n > 1:
                ax.fill_between(
                    steps, [scale * v for v in lo], [scale * v for v in hi], color=colors[label], alpha=0.18
                )
        ax.set(title=title, xlabel="optimizer step", ylabel=ylabel)
        ax.grid(alpha=0.3)
    handles, labels = axes[0][0].get_legend_handles_labels()
    if not handles:
        for ax in axes[0][1:]:
            handles, labels = ax.get_legend_handles_labels()
            if handles:
                break
    fig.legend(
        handles, labels, loc="lower center", ncol=min(4, max(1, len(labels))), fontsize=8, frameon=False
    )
    fig.tight_layout(rect=(0, 0.1, 1, 1))
    _save(plt, fig, path)
    return True


def _save(plt: Any, fig: Any, path: Path) -> None:
    """Write ``fig`` to ``path`` (parents created) and release it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _plot_points(
    path: Path,
    points: Mapping[str, Sequence[tuple[float, float]]],
    colors: Mapping[str, str],
    ylabel: str,
    title: str,
) -> bool:
    """Held-out accuracy when no curve was logged: the starting point and each run's final point."""
    if not any(points.values()):
        return False
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.4))
    for label, pts in points.items():
        if not pts:
            continue
        xs, ys = zip(*pts)
        ax.plot(xs, [100 * y for y in ys], "o-", color=colors.get(label, "grey"), label=label, alpha=0.8)
    ax.set(title=title, xlabel="optimizer step", ylabel=ylabel)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    _save(plt, fig, path)
    return True


def _plot_bins(
    path: Path,
    labels: Sequence[str],
    per_method: Mapping[str, Mapping[str, dict[str, Any]]],
    colors: Mapping[str, str],
) -> bool:
    """Grouped bars: per old-probability bin, each method's clip rate (mean over seeds of the per-run means; error
    bars min-max over seeds). Top: share of the bin's tokens clipped (up, down); bottom: where the clipped tokens
    are (the bin's share of all clipped tokens, up and down)."""

    def measured(label: str) -> bool:
        return any(
            k.startswith("bins/") and v.get("mean") is not None for k, v in per_method.get(label, {}).items()
        )

    labels = [label for label in labels if measured(label)]  # no bars of 0 for a method that logs no bins
    bins = sorted(
        {k.split("/")[-1] for label in labels for k in per_method[label] if k.startswith("bins/up/")},
        key=lambda b: float(b[1:].split("-")[0]),
    )
    if not bins:
        return False
    plt = _pyplot()
    fig, axes = plt.subplots(2, 2, figsize=(13, 8.2))
    width = 0.8 / max(1, len(labels))
    panels = (
        (axes[0][0], "up", "rate", "clipped up (r > hi, A > 0): % of the bin's tokens"),
        (axes[0][1], "down", "rate", "clipped down (r < lo, A < 0): % of the bin's tokens"),
        (axes[1][0], "up", "share", "where up-clipping happens: % of all up-clipped tokens"),
        (axes[1][1], "down", "share", "where down-clipping happens: % of all down-clipped tokens"),
    )
    for ax, side, what, title in panels:
        for i, label in enumerate(labels):
            m = per_method.get(label, {})
            rates = [m.get(f"bins/{side}/{b}", {}).get("mean") for b in bins]
            if what == "rate":
                ys = [100 * (r or 0.0) for r in rates]
                lo = [100 * (m.get(f"bins/{side}/{b}", {}).get("min") or 0.0) for b in bins]
                hi = [100 * (m.get(f"bins/{side}/{b}", {}).get("max") or 0.0) for b in bins]
                err = [[max(0.0, y - a) for y, a in zip(ys, lo)], [max(0.0, b - y) for y, b in zip(ys, hi)]]
                if not any(e > 0 for side_err in err for e in side_err):
                    err = None  # one seed: no spread to show
            else:
                shares = [m.get(f"bins/share/{b}", {}).get("mean") or 0.0 for b in bins]
                mass = [(r or 0.0) * s for r, s in zip(rates, shares)]
                total = sum(mass)
                ys = [100 * x / total if total > 0 else 0.0 for x in mass]
                err = None
            xs = [j + (i - (len(labels) - 1) / 2) * width for j in range(len(bins))]
            ax.bar(xs, ys, width=width, color=colors[label], label=label, yerr=err, capsize=2 if err else 0)
        ax.set_xticks(range(len(bins)), [f"p_old {b[1:]}" for b in bins], fontsize=8)
        ax.set(title=title, ylabel="%")
        ax.grid(axis="y", alpha=0.3)
    handles, names = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, names, loc="lower center", ncol=min(7, len(names)), fontsize=8, frameon=False)
    fig.tight_layout(rect=(0, 0.06, 1, 1))
    _save(plt, fig, path)
    return True


# --------------------------------------------------------------------------------------------------- format
def _pct(x: Any, digits: int = 1) -> str:
    return "-" if x is None else f"{100 * x:.{digits}f}"


def _fmt_stat(stat: Mapping[str, Any] | None, percent: bool, digits: int) -> str:
    if not stat or stat.get("mean") is None:
        return "-"
    scale = 100.0 if percent else 1.0
    text = f"{scale * stat['mean']:.{digits}f}"
    if stat.get("ci95") is not None:
        text += f" ± {scale * stat['ci95']:.{digits}f}"
    return text


def _fmt_value(x: Any, percent: bool, digits: int) -> str:
    if x is None:
        return "-"
    return f"{(100.0 if percent else 1.0) * float(x):.{digits}f}"


@dataclass(frozen=True)
class _Column:
    key: str
    title: str
    percent: bool
    digits: int


def _columns(k: int, ks: Sequence[int]) -> list[_Column]:
    cols = [_Column(f"mean@{k}", f"mean@{k} %", True, 1)]
    cols += [_Column(f"pass@{j}", f"pass@{j} %", True, 1) for j in ks]
    cols += [
        _Column(f"best@{k}", f"best@{k} %", True, 1),
        _Column(f"maj@{k}", f"maj@{k} %", True, 1),
        _Column("entropy", "entropy (eval, nats)", False, 3),
        _Column("train/entropy_last", "entropy (train, last)", False, 3),
        _Column("train/clip_frac", "clip %", True, 2),
        _Column("train/clip_frac_up", "clip up %", True, 2),
        _Column("train/clip_frac_down", "clip down %", True, 2),
        _Column("train/tail_share", "tail share %", True, 1),
    ]
    return cols


def _fmt_diff(c: Mapping[str, Any], percent: bool, metric: str) -> str:
    scale, unit = (100.0, " points") if percent else (1.0, "")
    text = f"{scale * c['diff']:+.{1 if percent else 3}f}{unit} {metric}"
    if c["lo"] is not None:
        d = 1 if percent else 3
        text += (
            f" (95% CI [{scale * c['lo']:+.{d}f}, {scale * c['hi']:+.{d}f}], {c['kind']} over {c['n']} seeds)"
        )
    return text


def _verdict(c: Mapping[str, Any], label: str, reference: str, n_seeds: int) -> str:
    if c["diff"] is None:
        return "no result"
    if c["significant"] is None:
        return "a single seed per method: no confidence interval, not evidence either way"
    if not c["significant"]:
        return f"not significant with {c['n']} seeds"
    better = c["diff"] > 0
    return f"{label} is significantly {'better' if better else 'worse'} than {reference} (95% CI excludes 0)"


# ---------------------------------------------------------------------------------------------------- report
def _read_json(path: Path) -> dict[str, Any] | None:
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError:
        return None


def build_report(
    output_dir: str | Path,
    *,
    reference: str | None = None,
    smooth: int = 1,
    methods: Sequence[str] | None = None,
    seeds: Sequence[int] | None = None,
    rules: Mapping[str, tuple[str, Mapping[str, Any]]] | None = None,
    report_dir: str | Path | None = None,
    figures: bool = True,
) -> Path:
    """Write the report of the compare directory ``output_dir`` (module docstring); returns the report directory.

    Args:
        reference: the method the others are compared against (default: ``compare_plan.json``'s, else ``grpo`` if
            present, else the first method).
        smooth: rolling-mean window (in logged points) of the training curves.
        methods: method labels in display order (default: the plan's, else the run specs' ``method_index``).
        seeds: the planned seeds (runs of these seeds that are missing are reported as missing).
        rules: ``label -> (clip_rule, params)`` for the bounds figure (default: from the run specs).
        report_dir: where to write (default ``<output_dir>/report``).
        figures: draw the PNGs (``False``: tables and text only, e.g. for a quick look).

    Raises:
        ValueError: no run directory in ``output_dir``.
    """
    output_dir = Path(output_dir)
    plan = _read_json(output_dir / "compare_plan.json") or {}
    runs = load_runs(output_dir)
    if not runs:
        raise ValueError(
            f"output_dir {str(output_dir)!r} has no runs (looked for runs/<label>/seed<seed>/run_spec.json)"
        )
    order = list(methods or [m["label"] for m in plan.get("methods", [])])
    for r in runs:
        if r.label not in order:
            order.append(r.label)
    labels = [label for label in order if any(r.label == label for r in runs)]
    seeds = list(seeds or plan.get("seeds") or sorted({r.seed for r in runs}))
    reference = reference or plan.get("reference") or ("grpo" if "grpo" in labels else labels[0])
    if reference not in labels:
        reference = labels[0]
    rule_of = {r.label: (r.clip_rule, r.params) for r in runs}
    if rules:
        rule_of.update({k: (v[0], dict(v[1])) for k, v in rules.items()})
    report_dir = Path(report_dir) if report_dir else output_dir / "report"
    fig_dir = report_dir / "figures"
    fig_dir.mkdir(parents=True, exist_ok=True)

    finished = [r for r in runs if r.results]
    groups = {label: [r for r in runs if r.label == label] for label in labels}
    done_groups = {label: [r for r in finished if r.label == label] for label in labels}
    summaries = {(r.label, r.seed): run_summary(r) for r in runs}
    baseline = _read_json(output_dir / "baseline" / "results.json")

    settings = next((r.results.get("settings") for r in finished if r.results.get("settings")), None)
    settings = settings or (baseline or {}).get("settings") or {}
    k = int(settings.get("k") or _guess_k(summaries))
    ks = list(settings.get("ks") or [1, k])
    columns = _columns(k, ks)
    main_key = f"mean@{k}"

    # per-method statistics over the finished seeds
    stat_keys = sorted(
        {key for r in finished for key, v in summaries[(r.label, r.seed)].items() if v is not None}
    )
    per_method: dict[str, dict[str, dict[str, Any]]] = {}
    for label in labels:
        per_method[label] = {
            key: mean_ci([summaries[(r.label, r.seed)].get(key) for r in done_groups[label]])
            for key in stat_keys
        }

    # comparisons against the reference
    def by_seed(label: str, key: str) -> dict[int, float]:
        return {
            r.seed: summaries[(r.label, r.seed)][key]
            for r in done_groups[label]
            if summaries[(r.label, r.seed)].get(key) is not None
        }

    compare_keys = [(main_key, True), (f"pass@{max(ks)}", True), ("entropy", False)]
    comparisons = []
    for label in labels:
        if label == reference:
            continue
        for key, percent in compare_keys:
            c = compare_methods(by_seed(reference, key), by_seed(label, key))
            comparisons.append(
                {"method": label, "reference": reference, "metric": key, "percent": percent, **c}
            )

    colors = _colors(labels)
    draw = figures
    figures: list[tuple[str, str]] = []  # (file, caption)
    if draw:
        _draw_figures(
            fig_dir, figures, runs, groups, baseline, main_key, colors, smooth, labels, per_method, rule_of
        )
    # ---- tables
    table_header = ["method", "seeds", *[c.title for c in columns]]
    table_rows = []
    if baseline and baseline.get("metrics"):
        b = baseline["metrics"]
        table_rows.append(
            ["starting policy", "-", *[_fmt_value(b.get(c.key), c.percent, c.digits) for c in columns]]
        )
    for label in labels:
        m = per_method[label]
        table_rows.append(
            [
                label,
                str(len(done_groups[label])),
                *[_fmt_stat(m.get(c.key), c.percent, c.digits) for c in columns],
            ]
        )
    run_keys = [c.key for c in columns] + [k2 for k2 in stat_keys if k2 not in {c.key for c in columns}]
    _write_csv(
        report_dir / "runs.csv",
        ["method", "clip_rule", "seed", *run_keys],
        [
            [r.label, r.clip_rule, r.seed, *[summaries[(r.label, r.seed)].get(key) for key in run_keys]]
            for r in finished
        ],
    )
    method_header = ["method", "clip_rule", "n_seeds"]
    for key in run_keys:
        method_header += [key, f"{key}_ci95", f"{key}_min", f"{key}_max"]
    method_rows = []
    for label in labels:
        row: list[Any] = [label, rule_of[label][0], len(done_groups[label])]
        for key in run_keys:
            s = per_method[label].get(key) or {}
            row += [s.get("mean"), s.get("ci95"), s.get("min"), s.get("max")]
        method_rows.append(row)
    _write_csv(report_dir / "results.csv", method_header, method_rows)
    md_table = _md([("table", table_header, table_rows)])
    (report_dir / "results.md").write_text(
        f"Final evaluation: {main_key} etc. in % on the held-out set (k={k} samples per problem); mean ± 95% "
        f"t-interval half-width over seeds.\n\n" + md_table
    )
    missing = [
        f"{label} seed {seed}"
        for label in labels
        for seed in seeds
        if not any(r.seed == seed for r in done_groups[label])
    ]
    json_out = {
        "k": k,
        "ks": ks,
        "reference": reference,
        "main_metric": main_key,
        "methods": {
            label: {
                "clip_rule": rule_of[label][0],
                "params": rule_of[label][1],
                "seeds": [r.seed for r in done_groups[label]],
                "metrics": per_method[label],
            }
            for label in labels
        },
        "baseline": baseline,
        "comparisons": comparisons,
        "runs": [{"method": r.label, "seed": r.seed, **summaries[(r.label, r.seed)]} for r in finished],
        "missing": missing,
    }
    (report_dir / "results.json").write_text(json.dumps(json_out, indent=2, default=str) + "\n")

    # ---- text
    blocks = _text_blocks(
        output_dir,
        plan,
        labels,
        reference,
        seeds,
        k,
        main_key,
        per_method,
        done_groups,
        comparisons,
        baseline,
        rule_of,
        missing,
        figures,
        table_header,
        table_rows,
        summaries,
        finished,
        columns,
        ks,
    )
    (report_dir / "report.md").write_text(_md(blocks))
    title = f"bandpo compare: {output_dir.name}"
    (report_dir / "report.html").write_text(_html(blocks, report_dir, title))
    return report_dir


def _draw_figures(
    fig_dir: Path,
    figures: list[tuple[str, str]],
    runs: Sequence[RunData],
    groups: Mapping[str, Sequence[RunData]],
    baseline: Mapping[str, Any] | None,
    main_key: str,
    colors: Mapping[str, str],
    smooth: int,
    labels: Sequence[str],
    per_method: Mapping[str, Mapping[str, dict[str, Any]]],
    rule_of: Mapping[str, tuple[str, Mapping[str, Any]]],
) -> None:
    """Draw every figure into ``fig_dir``, appending ``(file name, caption)`` to ``figures``."""
    curve_k_key = _heldout_key(runs)
    if curve_k_key and _plot_curves(
        fig_dir / "heldout.png",
        [(f"held-out {curve_k_key} during training", curve_k_key, "accuracy %")],
        groups,
        colors,
        1,
        source="heldout",
        scale=100.0,
    ):
        figures.append(
            (
                "heldout.png",
                f"Held-out accuracy ({curve_k_key}) against optimizer step: mean over seeds, band = min-max.",
            )
        )
    else:
        points = _final_points(groups, baseline, main_key)
        if _plot_points(
            fig_dir / "heldout.png", points, colors, f"{main_key} %", f"held-out {main_key}: start and end"
        ):
            figures.append(
                (
                    "heldout.png",
                    f"Held-out {main_key}: the starting policy (step 0) and each run's final policy (no curve was logged during training).",
                )
            )
    curve_specs = [
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
            [
                ("mean upper bound hi", "band/hi_mean", "ratio"),
                ("mean lower bound lo", "band/lo_mean", "ratio"),
            ],
            "Mean per-token ratio bounds over the response tokens (fixed rules are constant).",
        ),
    ]
    for name, panels, caption in curve_specs:
        percent = name in ("clip_fraction.png", "tail_share.png")
        if _plot_curves(fig_dir / name, panels, groups, colors, smooth, scale=100.0 if percent else 1.0):
            figures.append(
                (name, caption + (f" Rolling mean over {smooth} logged points." if smooth > 1 else ""))
            )
    if _plot_bins(fig_dir / "clip_by_prob_bin.png", labels, per_method, colors):
        figures.append(
            (
                "clip_by_prob_bin.png",
                "Clipping by old-probability bin (mean over logged steps and seeds; error bars min-max over seeds).",
            )
        )
    try:
        from bandpo.losses import CLIP_RULES, make_clip_rule
        from bandpo.plots import plot_bounds

        with_bounds = [label for label in labels if rule_of[label][0] in CLIP_RULES]  # not TRL-native methods
        if not with_bounds:
            return
        plot_bounds(
            fig_dir / "bounds.png",
            {label: make_clip_rule(rule_of[label][0], **dict(rule_of[label][1])) for label in with_bounds},
        )
        figures.append(
            (
                "bounds.png",
                "The ratio bounds of the methods compared against p_old (adaptive rules at their base radius).",
            )
        )
    except (ValueError, TypeError) as err:  # an unregistered rule in old run specs: skip the figure
        figures.append(("", f"(bounds figure skipped: {err})"))


def _guess_k(summaries: Mapping[Any, Mapping[str, Any]]) -> int:
    for s in summaries.values():
        for key in s:
            if key.startswith("mean@"):
                return int(key.split("@")[1])
    return 1


def _heldout_key(runs: Sequence[RunData]) -> str | None:
    for r in runs:
        for row in r.heldout:
            for key in row:
                if key.startswith("mean@"):
                    return key
    return None


def _final_points(
    groups: Mapping[str, Sequence[RunData]], baseline: Mapping[str, Any] | None, key: str
) -> dict[str, list[tuple[float, float]]]:
    start = (baseline or {}).get("metrics", {}).get(key)
    points: dict[str, list[tuple[float, float]]] = {}
    for label, runs in groups.items():
        ends = []
        for r in runs:
            if not r.results or r.results.get("metrics", {}).get(key) is None:
                continue
            steps = [row["step"] for row in r.metrics if row.get("step") is not None]
            ends.append((float(max(steps)) if steps else 1.0, float(r.results["metrics"][key])))
        if not ends:
            points[label] = []
            continue
        step = statistics.fmean(x for x, _ in ends)
        pts = [(0.0, float(start))] if start is not None else []
        pts.append((step, statistics.fmean(y for _, y in ends)))
        points[label] = pts
    return points


def _colors(labels: Sequence[str]) -> dict[str, str]:
    palette = [
        "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf",
    ]  # fmt: skip
    return {label: palette[i % len(palette)] for i, label in enumerate(labels)}


def _write_csv(path: Path, header: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    buf = io.StringIO()
    writer = csv.writer(buf)
    writer.writerow(header)
    for row in rows:
        writer.writerow(["" if v is None else (repr(v) if isinstance(v, float) else v) for v in row])
    path.write_text(buf.getvalue())


def _text_blocks(
    output_dir: Path,
    plan: Mapping[str, Any],
    labels: Sequence[str],
    reference: str,
    seeds: Sequence[int],
    k: int,
    main_key: str,
    per_method: Mapping[str, Mapping[str, Mapping[str, Any]]],
    done_groups: Mapping[str, Sequence[RunData]],
    comparisons: Sequence[Mapping[str, Any]],
    baseline: Mapping[str, Any] | None,
    rule_of: Mapping[str, tuple[str, Mapping[str, Any]]],
    missing: Sequence[str],
    figures: Sequence[tuple[str, str]],
    table_header: Sequence[str],
    table_rows: Sequence[Sequence[str]],
    summaries: Mapping[tuple[str, int], Mapping[str, Any]],
    finished: Sequence[RunData],
    columns: Sequence[_Column],
    ks: Sequence[int],
) -> list[Block]:
    blocks: list[Block] = [("h1", f"bandpo compare: {output_dir.name}")]
    any_run = next(iter(finished), None)
    steps = [summaries[(r.label, r.seed)].get("train/steps") for r in finished]
    steps = [s for s in steps if s is not None]
    dataset = (any_run.results or {}).get("dataset") if any_run else None
    temperature = ((any_run.results or {}).get("settings") or {}).get("temperature") if any_run else None
    setup = (
        f"{len(labels)} methods ({', '.join(labels)}) x {len(seeds)} seeds ({', '.join(map(str, seeds))}); "
        f"{max(steps) if steps else '?'} optimizer steps per run; final evaluation on {dataset or 'the held-out set'} "
        f"with k={k} samples per problem"
        + (f" at temperature {temperature:g}" if isinstance(temperature, (int, float)) else "")
        + f". Reference method: {reference}. Intervals are 95% Student-t intervals over seeds."
    )
    if plan.get("source"):
        setup += f" Config: {plan['source']}."
    walls = [summaries[(r.label, r.seed)].get("train_wall_s") for r in finished]
    walls = [w for w in walls if isinstance(w, (int, float))]
    if walls:
        setup += (
            f" Training wall time per run: {statistics.fmean(walls) / 60:.1f} min on average "
            f"({sum(walls) / 60:.0f} min over {len(walls)} runs)."
        )
    blocks += [("h2", "Setup"), ("p", setup)]

    # ---- outcome
    main = [c for c in comparisons if c["metric"] == main_key]
    items = []
    for c in main:
        if c["diff"] is None:
            items.append(f"{c['method']} vs {reference}: no finished runs to compare")
            continue
        items.append(
            f"{c['method']} vs {reference}: {_fmt_diff(c, True, main_key)}; "
            + _verdict(c, c["method"], reference, len(seeds))
        )
    blocks += [("h2", "Outcome"), ("ul", items or ["only one method: nothing to compare"])]
    summary = _outcome_summary(main, labels, reference, rule_of, main_key, per_method)
    blocks += [("p", s) for s in summary]
    if baseline and baseline.get("metrics", {}).get(main_key) is not None:
        start = baseline["metrics"][main_key]
        ref_mean = (per_method.get(reference, {}).get(main_key) or {}).get("mean")
        text = f"Starting policy: {main_key} = {_pct(start)}%."
        if ref_mean is not None:
            text += f" After training, {reference} reaches {_pct(ref_mean)}% ({100 * (ref_mean - start):+.1f} points)."
            if ref_mean <= start:
                text += (
                    f" {reference} did not improve on the starting policy here, so this budget says little about the "
                    "methods' relative merit."
                )
        blocks.append(("p", text))

    # ---- tables
    blocks += [
        ("h2", "Results"),
        (
            "p",
            f"Final evaluation in % ({main_key}, pass@j: unbiased estimator, best@{k}: the authors' bootstrap, maj@{k}: "
            "majority vote); entropy in nats per token; training clip fractions in % of response tokens. Mean ± 95% "
            "t-interval half-width over seeds (no interval with one seed).",
        ),
        ("table", table_header, table_rows),
    ]
    other = [c for c in comparisons if c["metric"] != main_key and c["diff"] is not None]
    if other:
        blocks += [
            ("h3", "Other comparisons"),
            (
                "ul",
                [
                    f"{c['method']} vs {reference}: {_fmt_diff(c, c['percent'], c['metric'])}; "
                    + _verdict(c, c["method"], reference, len(seeds))
                    for c in other
                ],
            ),
        ]

    # ---- clipping dynamics
    dyn = []
    tail = {label: (per_method[label].get(f"bins/up/{TAIL_BIN}") or {}).get("mean") for label in labels}
    if any(v is not None for v in tail.values()):
        dyn.append(
            "Tail tokens (p_old < 0.2) clipped at the upper bound (% of tail tokens, mean over steps): "
            + ", ".join(f"{label} {_pct(v, 2)}" for label, v in tail.items())
            + "."
        )
    share = {label: (per_method[label].get("train/tail_share") or {}).get("mean") for label in labels}
    if any(v is not None for v in share.values()):
        dyn.append(
            "Share of all clipping that falls on tail tokens: "
            + ", ".join(f"{label} {_pct(v)}{'' if v is None else '%'}" for label, v in share.items())
            + " (the paper: about 20% under fixed bounds)."
        )
    ref_clip = (per_method.get(reference, {}).get("train/clip_frac") or {}).get("mean")
    clip = {label: (per_method[label].get("train/clip_frac") or {}).get("mean") for label in labels}
    if ref_clip:
        dyn.append(
            f"Overall clip fraction relative to {reference} ({_pct(ref_clip, 2)}% of tokens): "
            + ", ".join(
                f"{label} {v / ref_clip:.2f}x"
                for label, v in clip.items()
                if v is not None and label != reference
            )
            + "."
        )
    ent = {label: (per_method[label].get("entropy") or {}).get("mean") for label in labels}
    if any(v is not None for v in ent.values()):
        start_ent = (baseline or {}).get("metrics", {}).get("entropy")
        dyn.append(
            "Entropy of the final policy on the held-out prompts (nats per token): "
            + ", ".join(f"{label} {v:.3f}" for label, v in ent.items() if v is not None)
            + (f"; starting policy {start_ent:.3f}." if start_ent is not None else ".")
        )
    if dyn:
        blocks += [("h2", "Clipping and entropy"), ("ul", dyn)]

    # ---- figures
    blocks.append(("h2", "Figures"))
    for name, caption in figures:
        blocks.append(("img", f"figures/{name}", caption) if name else ("p", caption))

    # ---- per run
    run_cols = [c for c in columns]
    blocks += [
        ("h2", "Per-run results"),
        (
            "table",
            ["method", "seed", *[c.title for c in run_cols]],
            [
                [
                    r.label,
                    str(r.seed),
                    *[
                        _fmt_value(summaries[(r.label, r.seed)].get(c.key), c.percent, c.digits)
                        for c in run_cols
                    ],
                ]
                for r in finished
            ],
        ),
    ]
    if missing:
        blocks += [
            ("h2", "Missing runs"),
            ("p", "Not finished (no results.json; see each run's train.log): " + ", ".join(missing) + "."),
        ]
    blocks += [
        ("h2", "Definitions"),
        (
            "ul",
            [
                f"mean@{k}: per problem the share of the {k} samples that are correct, averaged over problems; pass@j: the "
                "unbiased estimator 1 - C(n-c, j)/C(n, j); best@k: the authors' bootstrap (1000 resamples of k with "
                "replacement, max, mean), below pass@k; maj@k: accuracy of the majority answer.",
                "entropy (eval): mean entropy of the sampling distribution per generated token on the held-out prompts; "
                "entropy (train, last): the last logged policy/entropy.",
                "clip %, clip up %, clip down %: mean over logged steps of clip/frac, clip/frac_up (r > hi with A > 0), "
                "clip/frac_down (r < lo with A < 0).",
                "tail share %: share of all clipped tokens with p_old < 0.2, pooled over logged steps.",
                "-: not measured. TRL-native methods (trained by plain GRPOTrainer) log TRL's metrics, not these clip "
                "diagnostics.",
                "95% CI of a difference: paired over common seeds (t with n-1 degrees of freedom); 'not significant' "
                "means the interval contains 0.",
            ],
        ),
    ]
    return blocks


def _outcome_summary(
    main: Sequence[Mapping[str, Any]],
    labels: Sequence[str],
    reference: str,
    rule_of: Mapping[str, tuple[str, Mapping[str, Any]]],
    main_key: str,
    per_method: Mapping[str, Mapping[str, Mapping[str, Any]]],
) -> list[str]:
    out = []
    valid = [c for c in main if c["diff"] is not None]
    if not valid:
        return out
    better = [c for c in valid if c["significant"] and c["diff"] > 0]
    worse = [c for c in valid if c["significant"] and c["diff"] < 0]
    if better:
        out.append(
            f"Significantly better than {reference} on {main_key}: "
            + ", ".join(f"{c['method']} ({100 * c['diff']:+.1f})" for c in better)
            + "."
        )
    if worse:
        out.append(
            f"Significantly worse than {reference} on {main_key}: "
            + ", ".join(f"{c['method']} ({100 * c['diff']:+.1f})" for c in worse)
            + "."
        )
    if not better and not worse:
        if all(c["significant"] is None for c in valid):
            out.append(f"With one seed per method no difference on {main_key} can be called significant.")
        else:
            out.append(f"No method differs significantly from {reference} on {main_key} with these seeds.")
    band = [c for c in valid if rule_of.get(c["method"], ("",))[0] in BAND_RULES]
    if band and rule_of.get(reference, ("",))[0] not in BAND_RULES:
        winners = [c for c in band if c["significant"] and c["diff"] > 0]
        best = max(band, key=lambda c: c["diff"])
        if winners:
            out.append(
                "BandPO wins here: "
                + ", ".join(c["method"] for c in winners)
                + f" beat {reference} significantly on "
                f"{main_key}."
            )
        else:
            out.append(
                f"BandPO does not win here: no Band method is significantly better than {reference} on {main_key} "
                f"(best: {best['method']}, {100 * best['diff']:+.1f} points)."
            )
        if not any(c["diff"] >= 0.02 for c in band):
            out.append(
                f"The paper reports BandPO >= 2 points mean@32 above GRPO in every setting; no Band method reaches "
                f"+2 points over {reference} here."
            )
    return out
