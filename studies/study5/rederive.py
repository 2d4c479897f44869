"""Study 5, re-derived: the registered primary and main secondary numbers computed from the run folders alone, by
code written from the registration's text (studies/study5/README.md, "Registration") without reading the
registered ``analysis.py``, so that its numbers can be checked against these.

    .venv/bin/python studies/study5/rederive.py studies/study5/results [--json OUT]

``RESULTS_DIR`` holds ``runs/<label>/seed<seed>/`` (``bandpo compare``'s output_dir or its export). Of each run
folder it reads:

* ``metrics.jsonl`` (a run in progress) or else ``metrics.jsonl.gz`` (an export): one JSON object a line, one per
  optimizer step (``step``, ``policy/entropy``, ``tokens/count``, ``clip/frac``, ``clip/frac/p0.0-0.2``,
  ``tokens/share/p0.0-0.2``, ``side/...``); a row holding ``train_runtime`` closes training and is not a step; a
  line that does not parse (a torn last line) is skipped and counted;
* ``results.json``: the final evaluation (``metrics``: ``mean@8``, ``pass@8`` as fractions, ``entropy`` in nats),
  ``late`` (the late means as the worker recorded them) and ``at_steps``; a run without it is unfinished;
* ``evals_at_steps.jsonl``: the evaluations during training (``step`` and the same metrics), at steps 120 and 140;
* ``heldout.jsonl``: the held-out curve (100 problems x 2 samples at steps 0, 40, ..., 160); its last row's
  ``entropy`` is a second reading of the final held-out entropy (see ``curve_entropy``);
* ``run_info.json``: ``resumed_from`` (listed, not used).

Nothing here reads the config: the labels and planned seeds are those of ``studies/study5/config.yaml``, written
below as constants, and used only to list the runs that are missing.
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
import re
import sys
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from itertools import pairwise
from pathlib import Path
from typing import Any

from scipy import optimize, stats

REFERENCE = "grpo"
LABELS = ("grpo", "band-kl", "band-upper", "band-lower")
"""The four rules' labels (``methods`` of studies/study5/config.yaml)."""
PLANNED_SEEDS = tuple(range(410, 428))
"""Seeds 410-427 (``seeds`` of studies/study5/config.yaml): only to name the runs that are missing."""
MAX_STEPS = 160
"""``max_steps``: a finished run's log whose entropy rows do not run from step 1 to this is named."""
AT_STEPS = (120, 140)
"""``eval.at_steps``: with the final evaluation (step 160) the three points of the late mean."""
PRIMARY = ("band-upper", "band-lower")
"""The two primary contrasts are ``<label> - grpo`` on the training-entropy area."""
PRIMARY_LEVEL = 0.975
"""Two-sided level of each primary interval (Bonferroni for two contrasts)."""
SECONDARY_LEVEL = 0.95
BENCHMARKS = (-0.32, -0.16)
"""Study 4's whole Band-KL effect on the area (nats) and half of it: does each primary interval exclude them?"""
TAKE_OFF_POINTS = 25.0
"""A run with a late mean@8 below this (points) never took off."""
POWER = 0.8
"""The power at which the detectable difference of a primary contrast is stated (two-sided, alpha 0.025)."""
TAIL_BIN = "p0.0-0.2"
SIDE_KEYS = (
    "side/up_through",
    "side/down_through",
    "side/up_through_tail",
    "side/down_through_tail",
    "side/up_held",
    "side/down_held",
)
"""The per-side diagnostics, each a share of the step's real tokens (``tokens/count``)."""


# ------------------------------------------------------------------------------------------------ reading
def _number(value: Any) -> float | None:
    """``value`` as a finite float, or ``None`` (missing, ``null``, a bool, a string, NaN)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    value = float(value)
    return value if math.isfinite(value) else None


def read_lines(path: Path) -> tuple[list[dict[str, Any]], int, str | None]:
    """The JSON-object rows of ``path`` or, when it is absent, of ``<path>.gz``; the number of non-blank lines that
    were not JSON objects (a torn last line); and the file read (``None`` when neither exists). A gzip stream cut
    short yields what it holds."""
    gz = path.with_name(path.name + ".gz")
    if path.is_file():
        text, used = path.read_text(errors="replace"), path.name
    elif gz.is_file():
        raw = gz.read_bytes()
        try:
            data = gzip.decompress(raw)
        except (EOFError, OSError, zlib.error):
            data = zlib.decompressobj(wbits=31).decompress(raw)  # a truncated stream: what it decodes
        text, used = data.decode(errors="replace"), gz.name
    else:
        return [], 0, None
    rows, bad = [], 0
    for line in text.splitlines():
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except ValueError:
            bad += 1
            continue
        if isinstance(row, dict):
            rows.append(row)
        else:
            bad += 1
    return rows, bad, used


def read_object(path: Path) -> dict[str, Any] | None:
    """The JSON object in ``path``, or ``None`` (missing, torn, not an object)."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def by_step(rows: Sequence[Mapping[str, Any]]) -> dict[int, Mapping[str, Any]]:
    """The step rows of a log keyed by their integer ``step``: rows without one, and a row holding
    ``train_runtime`` (the end of training, not a step), are left out; a step written twice keeps its last row."""
    out: dict[int, Mapping[str, Any]] = {}
    for row in rows:
        step = row.get("step")
        if isinstance(step, bool) or not isinstance(step, int) or "train_runtime" in row:
            continue
        out[step] = row
    return dict(sorted(out.items()))


# ------------------------------------------------------------------------------------------------ one run
@dataclass
class Run:
    """One run folder's numbers. Accuracies in points (fraction x 100), entropies in nats; token counts are sums
    over the run's steps of a logged share times ``tokens/count`` (floats: rounded only where printed)."""

    label: str
    seed: int
    finished: bool
    """``results.json`` is there (the final evaluation was written)."""
    log_file: str | None = None
    torn_lines: int = 0
    """Lines of the training log that did not parse (skipped)."""
    steps: int = 0
    """Logged steps with a ``policy/entropy``."""
    first_step: int | None = None
    last_step: int | None = None
    missing_steps: list[int] = field(default_factory=list)
    """Steps between the first and last logged with no ``policy/entropy`` row."""
    area: float | None = None
    """Training-entropy area: trapezoid of ``policy/entropy`` over the logged steps / (last step - first step)."""
    late_mean8: float | None = None
    """Mean of held-out mean@8 at steps 120, 140 (``evals_at_steps.jsonl``) and the final evaluation (points)."""
    late_mean8_recorded: float | None = None
    """``results.json``'s ``late.mean@8`` x 100, as the worker wrote it (a cross-check of ``late_mean8``)."""
    final_mean8: float | None = None
    final_pass8: float | None = None
    """Final evaluation's pass@8 (points)."""
    final_entropy: float | None = None
    """Final evaluation's held-out sampling entropy (``results.json`` ``metrics.entropy``, nats)."""
    curve_entropy: float | None = None
    """The held-out curve's sampling entropy at its last evaluation (``heldout.jsonl``, nats; ``None`` with fewer
    than two evaluations). The registration's
    "final held-out sampling entropy" reads either way; run on Study 4's exports, this script (``final_entropy``,
    200 problems x 8) and the registered analysis differed (-0.231 against -0.235 nats for Band-KL - GRPO), as the
    registered analysis reads the curve; both are reported so that the cross-check compares like with like. Added
    after that comparison, before any analysis of Study 5."""
    tokens: float = 0.0
    """Sum over the clip steps of ``tokens/count`` (the real completion tokens of each update)."""
    clipped: float = 0.0
    """Sum over the clip steps of ``clip/frac * tokens/count``."""
    tail_clipped: float = 0.0
    """Sum over the clip steps of ``clip/frac/p0.0-0.2 * tokens/share/p0.0-0.2 * tokens/count`` (clipped tokens
    with ``p_old < 0.2``)."""
    clip_steps: int = 0
    """Steps with all four keys above (the only ones pooled)."""
    side_tokens: dict[str, float] = field(default_factory=dict)
    """Per ``side/...`` key: sum over steps of its value times ``tokens/count``."""
    worst_rounding: float = 0.0
    """Largest distance of a per-step count above from an integer (a share times its count is a whole count)."""
    resumed_from: str | None = None
    notes: list[str] = field(default_factory=list)


def entropy_area(points: Sequence[tuple[int, float]]) -> float | None:
    """Trapezoid of the values over their steps divided by the span (last step - first step); ``None`` with fewer
    than two steps. ``points`` are ``(step, value)`` in increasing step order."""
    if len(points) < 2:
        return None
    total = sum((s1 - s0) * (v0 + v1) / 2 for (s0, v0), (s1, v1) in pairwise(points))
    return total / (points[-1][0] - points[0][0])


def _late_mean(
    folder: Path, results: Mapping[str, Any], final: float | None
) -> tuple[float | None, str | None]:
    """The late mean@8 in points and, when there is none, why."""
    rows, _, used = read_lines(folder / "evals_at_steps.jsonl")
    if used is None:
        rows = [r for r in results.get("at_steps") or [] if isinstance(r, dict)]
    steps = by_step(rows)
    values = [_number(steps[s].get("mean@8")) if s in steps else None for s in AT_STEPS]
    if final is None or any(v is None for v in values):
        missing = [s for s, v in zip(AT_STEPS, values) if v is None] + ([160] if final is None else [])
        return None, f"no late mean: no mean@8 at step(s) {missing}"
    return 100 * (sum(v for v in values if v is not None) + final) / (len(AT_STEPS) + 1), None


def read_run(folder: Path, label: str, seed: int) -> Run:
    """The numbers of the run in ``folder`` (``runs/<label>/seed<seed>``)."""
    results = read_object(folder / "results.json")
    run = Run(label=label, seed=seed, finished=results is not None)
    info = read_object(folder / "run_info.json") or {}
    run.resumed_from = info.get("resumed_from") if isinstance(info.get("resumed_from"), str) else None

    rows, run.torn_lines, run.log_file = read_lines(folder / "metrics.jsonl")
    if run.torn_lines:
        run.notes.append(f"{run.torn_lines} line(s) of {run.log_file} did not parse and were skipped")
    steps = by_step(rows)
    points = [(s, v) for s, r in steps.items() if (v := _number(r.get("policy/entropy"))) is not None]
    run.steps = len(points)
    if points:
        run.first_step, run.last_step = points[0][0], points[-1][0]
        have = {s for s, _ in points}
        run.missing_steps = [s for s in range(points[0][0], points[-1][0] + 1) if s not in have]
    run.area = entropy_area(points)
    if run.finished and (run.first_step, run.last_step) != (1, MAX_STEPS):
        run.notes.append(
            f"entropy logged from step {run.first_step} to {run.last_step}, not 1 to {MAX_STEPS}"
        )

    for row in steps.values():
        count = _number(row.get("tokens/count"))
        if count is None:
            continue
        frac = _number(row.get("clip/frac"))
        tail_rate = _number(row.get(f"clip/frac/{TAIL_BIN}"))
        tail_share = _number(row.get(f"tokens/share/{TAIL_BIN}"))
        counts = []
        if frac is not None and tail_rate is not None and tail_share is not None:
            run.clip_steps += 1
            run.tokens += count
            run.clipped += frac * count
            run.tail_clipped += tail_rate * tail_share * count
            counts += [frac * count, tail_rate * tail_share * count]
        for key in SIDE_KEYS:
            value = _number(row.get(key))
            if value is not None:
                run.side_tokens[key] = run.side_tokens.get(key, 0.0) + value * count
                counts.append(value * count)
        run.worst_rounding = max([run.worst_rounding, *(abs(c - round(c)) for c in counts)])

    if results is not None:
        metrics = results.get("metrics") if isinstance(results.get("metrics"), dict) else {}
        final8 = _number(metrics.get("mean@8"))
        run.final_mean8 = None if final8 is None else 100 * final8
        pass8 = _number(metrics.get("pass@8"))
        run.final_pass8 = None if pass8 is None else 100 * pass8
        run.final_entropy = _number(metrics.get("entropy"))
        curve = [
            e for r in read_lines(folder / "heldout.jsonl")[0] if (e := _number(r.get("entropy"))) is not None
        ]
        run.curve_entropy = curve[-1] if len(curve) >= 2 else None
        run.late_mean8, why = _late_mean(folder, results, final8)
        if why:
            run.notes.append(why)
        late = results.get("late") if isinstance(results.get("late"), dict) else {}
        recorded = _number(late.get("mean@8"))
        run.late_mean8_recorded = None if recorded is None else 100 * recorded
        if (run.late_mean8 is None) != (recorded is None) or (
            run.late_mean8 is not None
            and run.late_mean8_recorded is not None
            and abs(run.late_mean8 - run.late_mean8_recorded) > 1e-9
        ):
            run.notes.append(
                f"late mean@8 recomputed {run.late_mean8} differs from results.json's {run.late_mean8_recorded}"
            )
        for key, want in (("label", label), ("seed", seed)):
            if key in results and results[key] != want:
                run.notes.append(f"results.json says {key} {results[key]!r}, the folder {want!r}")
    return run


def find_runs(results_dir: Path) -> dict[tuple[str, int], Run]:
    """Every ``runs/<label>/seed<seed>/`` folder of ``results_dir``, read, keyed by ``(label, seed)``."""
    out = {}
    for folder in sorted((results_dir / "runs").glob("*/seed*")):
        match = re.fullmatch(r"seed(\d+)", folder.name)
        if folder.is_dir() and match:
            out[(folder.parent.name, int(match.group(1)))] = read_run(
                folder, folder.parent.name, int(match[1])
            )
    return out


# ------------------------------------------------------------------------------------------------ statistics
def t_interval(values: Sequence[float], level: float) -> dict[str, Any]:
    """The two-sided t-interval at ``level`` of the mean of ``values`` (the per-seed paired differences): ``n``,
    ``mean``, ``sd`` (n - 1 in the denominator), ``se`` = sd / sqrt(n), ``t`` = the t quantile at (1 + level) / 2
    with n - 1 degrees of freedom, ``lo`` / ``hi`` = mean -/+ t * se; no interval (``None``) below two values."""
    n = len(values)
    out: dict[str, Any] = {"n": n, "level": level, "mean": None, "sd": None, "se": None, "t": None}
    out.update(lo=None, hi=None)
    if n == 0:
        return out
    mean = sum(values) / n
    out["mean"] = mean
    if n < 2:
        return out
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))
    se = sd / math.sqrt(n)
    t = float(stats.t.ppf((1 + level) / 2, n - 1))
    out.update(sd=sd, se=se, t=t, lo=mean - t * se, hi=mean + t * se)
    return out


def detectable(sd: float, n: int, alpha: float, power: float = POWER) -> float | None:
    """The smallest true mean difference that a two-sided paired t test at ``alpha`` with ``n`` seeds detects with
    probability ``power`` when the differences have standard deviation ``sd`` (noncentral t, df = n - 1,
    noncentrality d / (sd / sqrt(n))); ``None`` for ``n`` < 2 or ``sd`` 0."""
    if n < 2 or not sd > 0:
        return None
    df, crit = n - 1, float(stats.t.ppf(1 - alpha / 2, n - 1))

    def gap(d: float) -> float:
        nc = d * math.sqrt(n)  # d in sd units
        return float(stats.nct.sf(crit, df, nc) + stats.nct.sf(crit, df, -nc)) - power

    hi = 20.0
    while gap(hi) < 0:
        hi *= 2
    return sd * float(optimize.brentq(gap, 1e-9, hi, xtol=1e-12))


def side_of(lo: float | None, hi: float | None, value: float) -> str | None:
    """Where an interval lies against ``value``: ``below`` (hi < value), ``above`` (lo > value), else
    ``contains``; ``None`` without an interval."""
    if lo is None or hi is None:
        return None
    return "below" if hi < value else "above" if lo > value else "contains"


def contrast(
    runs: Mapping[tuple[str, int], Run], weights: Mapping[str, int], attr: str, level: float
) -> dict[str, Any]:
    """``sum(weight * run.<attr>)`` per seed over the seeds where every label in ``weights`` has a finished run
    with that number, and its t-interval at ``level``; the seeds of any of those labels left out, with why."""
    seeds = sorted({seed for (label, seed) in runs if label in weights})
    per_seed: dict[int, float] = {}
    left_out: dict[int, str] = {}
    for seed in seeds:
        why, total = [], 0.0
        for label, weight in weights.items():
            run = runs.get((label, seed))
            value = getattr(run, attr) if run is not None and run.finished else None
            if run is None:
                why.append(f"{label} has no run")
            elif not run.finished:
                why.append(f"{label} is unfinished (no results.json)")
            elif value is None:
                why.append(f"{label} has no {attr}")
            else:
                total += weight * value
        if why:
            left_out[seed] = "; ".join(why)
        else:
            per_seed[seed] = total
    out = t_interval(list(per_seed.values()), level)
    out.update(per_seed=per_seed, left_out=left_out)
    return out


def pair(label: str) -> tuple[str, dict[str, int]]:
    """The name and weights of ``label - grpo``."""
    return f"{label} - {REFERENCE}", {label: 1, REFERENCE: -1}


# ------------------------------------------------------------------------------------------------ the analysis
def analyse(results_dir: Path, planned_seeds: Sequence[int] | None = None) -> dict[str, Any]:
    """Every number this script prints, as one JSON-able mapping (see the module's docstring);
    ``planned_seeds`` (default :data:`PLANNED_SEEDS`) only names the missing runs."""
    planned_seeds = PLANNED_SEEDS if planned_seeds is None else planned_seeds
    runs = find_runs(results_dir)
    out: dict[str, Any] = {"results_dir": str(results_dir)}
    out["runs"] = [asdict(run) for run in runs.values()]
    out["unfinished"] = [f"{label} seed {seed}" for (label, seed), run in runs.items() if not run.finished]
    out["missing"] = {
        label: [s for s in planned_seeds if (label, s) not in runs]
        for label in LABELS
        if any((label, s) not in runs for s in planned_seeds)
    }
    out["unplanned_labels"] = sorted({label for label, _ in runs} - set(LABELS))

    primary = {}
    for label in PRIMARY:
        name, weights = pair(label)
        result = contrast(runs, weights, "area", PRIMARY_LEVEL)
        where = side_of(result["lo"], result["hi"], 0.0)
        result["verdict"] = {
            "below": "interval below 0: lowers the entropy",
            "above": "interval above 0: raises the entropy",
            "contains": "interval contains 0: no effect detected",
            None: "no interval (fewer than two pairs)",
        }[where]
        result["interval_vs_0"] = where
        for value in BENCHMARKS:
            position = side_of(result["lo"], result["hi"], value)
            result[f"vs {value:+.2f}"] = {
                "interval_is": position,
                "excluded": None if position is None else position != "contains",
            }
        result["detectable_at_80pct"] = (
            detectable(result["sd"], result["n"], 1 - PRIMARY_LEVEL) if result["sd"] is not None else None
        )
        primary[name] = result
    both = all(r["interval_vs_0"] == "below" for r in primary.values())
    out["primary"] = primary
    out["primary_both_below_0"] = both

    secondary: dict[str, Any] = {}
    name, weights = pair("band-kl")
    secondary["area"] = {name: contrast(runs, weights, "area", SECONDARY_LEVEL)}
    interaction = {"band-kl": 1, "band-upper": -1, "band-lower": -1, REFERENCE: 1}
    secondary["interaction_area"] = contrast(runs, interaction, "area", SECONDARY_LEVEL)
    for attr in ("late_mean8", "final_pass8", "final_entropy", "curve_entropy"):
        secondary[attr] = {}
        for label in LABELS:
            if label != REFERENCE:
                name, weights = pair(label)
                secondary[attr][name] = contrast(runs, weights, attr, SECONDARY_LEVEL)

    clipping, sides, take_off = {}, {}, {}
    for label in LABELS:
        done = [run for (lab, _), run in runs.items() if lab == label and run.finished]
        tokens = sum(r.tokens for r in done)
        clipped = sum(r.clipped for r in done)
        tail = sum(r.tail_clipped for r in done)
        clipping[label] = {
            "runs": len(done),
            "steps": sum(r.clip_steps for r in done),
            "tokens": round(tokens),
            "clipped": round(clipped),
            "tail_clipped": round(tail),
            "clip_frac": clipped / tokens if tokens else None,
            "tail_share": tail / clipped if clipped else None,
            "worst_rounding": max((r.worst_rounding for r in done), default=0.0),
        }
        summed = {key: sum(r.side_tokens.get(key, 0.0) for r in done) for key in SIDE_KEYS}
        side = {key.removeprefix("side/"): round(value) for key, value in summed.items()}
        side["through"] = round(summed["side/up_through"] + summed["side/down_through"])
        side["through_tail"] = round(summed["side/up_through_tail"] + summed["side/down_through_tail"])
        side["held"] = round(summed["side/up_held"] + summed["side/down_held"])
        side["runs_without_side_keys"] = sum(1 for r in done if not r.side_tokens)
        sides[label] = side
        lates = {r.seed: r.late_mean8 for r in done if r.late_mean8 is not None}
        low = sorted(seed for seed, v in lates.items() if v < TAKE_OFF_POINTS)
        take_off[label] = {"never_took_off": len(low), "of": len(lates), "seeds": low}
    take_off["all"] = {
        "never_took_off": sum(v["never_took_off"] for v in take_off.values()),
        "of": sum(v["of"] for v in take_off.values()),
    }
    secondary["clipping"] = clipping
    secondary["side_tokens"] = sides
    secondary["never_took_off"] = take_off

    per_rule = {}
    for label in LABELS:
        done = [run for (lab, _), run in runs.items() if lab == label and run.finished]
        per_rule[label] = {
            attr: t_interval([v for r in done if (v := getattr(r, attr)) is not None], SECONDARY_LEVEL)
            for attr in ("area", "late_mean8", "final_mean8", "final_pass8", "final_entropy")
        }
    out["secondary"] = secondary
    out["per_rule"] = per_rule
    return out


# ------------------------------------------------------------------------------------------------ printing
def _f(value: float | None, digits: int = 3, sign: bool = False) -> str:
    if value is None:
        return "-"
    return f"{value:+.{digits}f}" if sign else f"{value:.{digits}f}"


def _interval_line(name: str, r: Mapping[str, Any], digits: int = 3) -> str:
    level = f"{100 * r['level']:g}%"
    text = f"{name}: {_f(r['mean'], digits, True)} [{_f(r['lo'], digits, True)}, {_f(r['hi'], digits, True)}]"
    return f"{text} ({level}, n = {r['n']}, sd {_f(r['sd'], digits)}, t {_f(r['t'], 4)})"


def _left_out(r: Mapping[str, Any]) -> list[str]:
    return [f"    left out: seed {seed}: {why}" for seed, why in r["left_out"].items()]


def render(result: Mapping[str, Any]) -> str:
    """The text ``main`` prints."""
    lines = [
        f"Study 5 re-derived from {result['results_dir']}",
        "",
        "Per run (area nats; accuracies points):",
    ]
    lines.append(
        f"  {'label':<11} {'seed':>4} {'steps':>5} {'area':>7} {'late@8':>7} {'mean@8':>7} {'pass@8':>7} "
        f"{'H eval':>7}  notes"
    )
    for run in result["runs"]:
        notes = list(run["notes"])
        if not run["finished"]:
            notes.insert(0, "unfinished")
        if run["missing_steps"]:
            notes.append(f"{len(run['missing_steps'])} step(s) missing between first and last")
        if run["resumed_from"]:
            notes.append(f"resumed from {Path(run['resumed_from']).name}")
        lines.append(
            f"  {run['label']:<11} {run['seed']:>4} {run['steps']:>5} {_f(run['area']):>7} "
            f"{_f(run['late_mean8'], 2):>7} {_f(run['final_mean8'], 2):>7} {_f(run['final_pass8'], 2):>7} "
            f"{_f(run['final_entropy']):>7}  {'; '.join(notes)}"
        )
    if result["missing"]:
        lines.append(
            "Missing runs (no folder): " + "; ".join(f"{k} {v}" for k, v in result["missing"].items())
        )
    if result["unfinished"]:
        lines.append("Unfinished runs (no results.json, left out): " + ", ".join(result["unfinished"]))

    lines += ["", "Primary: training-entropy area (nats), paired by seed, two-sided 97.5% t-interval"]
    for name, r in result["primary"].items():
        lines.append("  " + _interval_line(name, r))
        lines.append(f"    verdict: {r['verdict']}")
        for value in BENCHMARKS:
            v = r[f"vs {value:+.2f}"]
            lines.append(f"    excludes {value:+.2f}: {v['excluded']} (interval {v['interval_is']} it)")
        lines.append(
            f"    detectable at 80% power (alpha 0.025, this sd and n): {_f(r['detectable_at_80pct'])}"
        )
        lines += _left_out(r)
    if result["primary_both_below_0"]:
        lines.append("  both sides below 0: each side lowers the entropy")

    sec = result["secondary"]
    lines += ["", "Secondary (95% t-intervals, described, not decided on)"]
    for name, r in sec["area"].items():
        lines.append("  area " + _interval_line(name, r))
        lines += _left_out(r)
    r = sec["interaction_area"]
    lines.append("  area " + _interval_line("interaction band-kl - band-upper - band-lower + grpo", r))
    lines.append("    per seed: " + ", ".join(f"{s}: {v:+.4f}" for s, v in r["per_seed"].items()))
    lines += _left_out(r)
    for attr, unit, digits in (
        ("late_mean8", "points", 2),
        ("final_pass8", "points", 2),
        ("final_entropy", "nats", 3),
        ("curve_entropy", "nats", 3),
    ):
        for name, r in sec[attr].items():
            lines.append(f"  {attr} ({unit}) " + _interval_line(name, r, digits))
            lines += _left_out(r)
    lines.append("  clipping, pooled over each rule's steps and finished runs:")
    for label, c in sec["clipping"].items():
        frac = "-" if c["clip_frac"] is None else f"{100 * c['clip_frac']:.3f}%"
        share = "-" if c["tail_share"] is None else f"{100 * c['tail_share']:.2f}%"
        lines.append(
            f"    {label:<11} clip {frac} ({c['clipped']:,} of {c['tokens']:,} tokens), tail share {share} "
            f"({c['tail_clipped']:,} of {c['clipped']:,}); {c['runs']} runs, {c['steps']} steps"
        )
    lines.append("  per-side token counts (side/... x tokens/count, summed over steps and finished runs):")
    for label, s in sec["side_tokens"].items():
        parts = ", ".join(f"{k} {v:,}" for k, v in s.items() if k != "runs_without_side_keys")
        lines.append(f"    {label:<11} {parts}")
    lines.append(f"  never took off (late mean@8 < {TAKE_OFF_POINTS:g} points):")
    for label, t in sec["never_took_off"].items():
        seeds = f" (seeds {t['seeds']})" if t.get("seeds") else ""
        lines.append(f"    {label:<11} {t['never_took_off']} of {t['of']}{seeds}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Print the numbers of ``RESULTS_DIR`` (and write them as JSON with ``--json``); 2 when it holds no runs."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results_dir", type=Path)
    parser.add_argument("--json", type=Path, default=None, help="also write every number here")
    args = parser.parse_args(argv)
    if not (args.results_dir / "runs").is_dir():
        print(f"no runs/ folder in {str(args.results_dir)!r}", file=sys.stderr)
        return 2
    result = analyse(args.results_dir)
    print(render(result))
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=2, default=str) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
