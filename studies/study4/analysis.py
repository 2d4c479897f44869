"""Study 4's registered analysis (docs/study.md, "Registration"), from a compare export or output directory.

    .venv/bin/python studies/study4/analysis.py studies/study4/results \
        --config studies/study4/config.yaml --figure studies/study4/results/paired.png  # the study
    .venv/bin/python studies/study4/analysis.py studies/study4/pilot/p4 studies/study4/pilot/p5 \
        studies/study4/pilot/p6                                          # the pilot (no late mean)

Prints, for Band-KL and Clip-Higher against GRPO, paired over the seeds both finished: the primary outcome (late
mean@8, with its 95% paired t-interval, the spread of the differences and the smallest difference this many seeds
detect at 80% power at that spread), then the secondary outcomes: final mean@8, pass@8 and held-out entropy
(paired); per run the training entropy at the end (mean of the last 8 logged steps) and its area over the run
(trapezoid over the logged steps divided by their span), whether GRPO's training entropy fell by half (last 8
against first 8 logged steps), the clip fraction and the tail share of clipping (``p_old < 0.2``) pooled over steps
with the token counts behind them (per run, paired, and pooled per method), and the completion length. Then the
registered decision (better / worse / no difference detected, and whether the interval excludes +5 points).
``--json FILE`` writes the same numbers; ``--figure FILE.png`` draws the paired differences (:func:`figure`).

Every seed the comparison leaves out is named with its reason (no run folder, not finished, no late mean);
``--config`` (the study's compare config) gives each method's planned seeds, so that a seed that never ran is
named too, and a finished run outside them is reported and left out. A run folder must be named ``seed<seed>`` after
its ``results.json`` (a copy such as ``seed410.bak`` is refused), and a run found twice is refused. A run whose
training log does not hold every step from 1 to its last, or lacks entropy or clipping values on a step, is
named on stderr. ``--exclude-seeds S ...`` leaves those seeds out of every method (each named as left out by the
option): a sensitivity check, not the registered analysis, which uses every seed.

The sensitivity check named in the registration's deviation for CPUs without native bf16: the primary outcome
again over the seeds whose two runs both computed with native bf16, and over those whose two runs were both
emulated (``precision`` in ``run_info.json``: ``emulated: true``, or a reason naming the CPU's native bf16 flags;
:mod:`bandpo_lab.bf16_emulation`); a seed whose runs differ, or whose kind a run does not say, goes to neither, and
their number is printed.

A second sensitivity check, added on 2026-12-05 before any analysis (docs/study.md, "Disclosure: the attention of
the final evaluation"): at the study's commits the evaluations during training sample with the training's eager
attention and the final evaluation with PyTorch's fused attention (``sdpa``: the saved model is loaded without the
training's setting), so the primary outcome is also given over the two evaluations during training alone (steps
120 and 140, one attention implementation; ``during_mean``).
"""

from __future__ import annotations

import argparse
import gzip
import itertools
import json
import re
import statistics
import sys
from pathlib import Path
from typing import Any

from bandpo_lab._files import read_jsonl
from bandpo_lab.experiments.report.runs import run_folder_seed
from bandpo_lab.experiments.report.stats import compare_methods

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))
from power import minimum_detectable  # scripts/power.py

TAIL = "p0.0-0.2"
DURING_STEPS = (120, 140)
"""The optimizer steps of the registered evaluations during training (``eval.at_steps`` of the study's config)."""
REFERENCE, OTHERS = "grpo", ("band-kl", "clip-higher")


def _rows(run_dir: Path) -> tuple[list[dict[str, Any]], list[str]]:
    """The logged training rows of a run and what is wrong with its log (unreadable lines, missing steps or
    values), for stderr."""
    plain, packed = run_dir / "metrics.jsonl", run_dir / "metrics.jsonl.gz"
    text = plain.read_text() if plain.is_file() else gzip.decompress(packed.read_bytes()).decode()
    rows, problems = [], []
    lines = text.splitlines()
    for i, line in enumerate(lines):
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            if i < len(lines) - 1:  # a torn last line is what a kill leaves; anything else is reported
                problems.append(f"line {i + 1} unreadable")
            continue
        if "train_runtime" not in row and row.get("step") is not None:
            rows.append(row)
    steps = [int(r["step"]) for r in rows]
    if steps and steps != list(range(1, max(steps) + 1)):
        problems.append(f"steps are not exactly 1..{max(steps)} ({len(steps)} rows)")
    for key in ("policy/entropy", "clip/frac", "tokens/count"):
        missing = sum(r.get(key) is None for r in rows)
        if missing and any(r.get(key) is not None for r in rows):
            problems.append(f"{key} missing on {missing} steps")
    return rows, problems


def heldout_entropy(run_dir: Path) -> tuple[float, float] | None:
    """The held-out curve's sampling entropy at its first and last evaluation (``heldout.jsonl``), or ``None``."""
    values = [
        float(r["entropy"]) for r in read_jsonl(run_dir / "heldout.jsonl") if r.get("entropy") is not None
    ]
    return (values[0], values[-1]) if len(values) >= 2 else None


def during_training_mean(results: dict[str, Any], steps: tuple[int, ...] = DURING_STEPS) -> float | None:
    """The mean@8 (in points) of the registered evaluations during training, at ``steps`` (``results["at_steps"]``
    rows), averaged; ``None`` unless every one of them is there. The sensitivity check for the attention of the
    final evaluation (module docstring)."""
    by_step = {int(r["step"]): r.get("mean@8") for r in results.get("at_steps") or [] if "step" in r}
    values = [by_step.get(step) for step in steps]
    if any(not isinstance(v, (int, float)) for v in values):
        return None
    return 100 * sum(values) / len(values)


def training_numbers(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The registered training secondaries of one run from its logged rows (module docstring)."""
    ent = [
        (float(r["step"]), float(r["policy/entropy"])) for r in rows if r.get("policy/entropy") is not None
    ]
    out: dict[str, Any] = {}
    if len(ent) >= 2:
        values = [v for _, v in ent]
        area = sum((s1 - s0) * (v0 + v1) / 2 for (s0, v0), (s1, v1) in itertools.pairwise(ent))
        out["entropy_first"] = statistics.fmean(values[:8])
        out["entropy_end"] = statistics.fmean(values[-8:])
        out["entropy_area"] = area / (ent[-1][0] - ent[0][0])
        out["entropy_halved"] = out["entropy_end"] <= out["entropy_first"] / 2
    counted = [r for r in rows if r.get("clip/frac") is not None and r.get("tokens/count") is not None]
    tokens = sum(float(r["tokens/count"]) for r in counted)
    clipped = sum(float(r["clip/frac"]) * float(r["tokens/count"]) for r in counted)
    tail = sum(
        float(r[f"clip/frac/{TAIL}"]) * float(r[f"tokens/share/{TAIL}"]) * float(r["tokens/count"])
        for r in counted
        if r.get(f"clip/frac/{TAIL}") is not None and r.get(f"tokens/share/{TAIL}") is not None
    )
    out.update(tokens=round(tokens), clipped=round(clipped), tail_clipped=round(tail))
    out["clip_frac"] = clipped / tokens if tokens else None
    out["tail_share"] = tail / clipped if clipped else None
    return out


def machine_kind(run_dir: Path) -> str | None:
    """``"emulated"`` where the run's bf16 products were emulated, ``"native"`` where its CPU had native bf16 (the
    reason names ``amx_bf16`` or ``avx512_bf16`` as present), ``None`` where ``run_info.json`` does not say."""
    info_path = run_dir / "run_info.json"
    info = json.loads(info_path.read_text()) if info_path.is_file() else {}
    precision = info.get("precision") or {}
    if precision.get("emulated"):
        return "emulated"
    if re.search(r"this CPU has (amx_bf16|avx512_bf16)", str(precision.get("reason", ""))):
        return "native"
    return None


class AnalysisError(Exception):
    """Runs the analysis refuses: a misnamed or duplicated run folder."""


def load(dirs: list[Path]) -> tuple[dict[str, dict[int, dict[str, Any]]], dict[str, dict[int, str]]]:
    """``(runs, unfinished)``: ``label -> seed -> numbers`` of every finished run (a ``results.json``) in ``dirs``,
    and ``label -> seed -> "not finished"`` for run folders without one.

    Raises:
        AnalysisError: a run folder not named ``seed<seed>`` of its results, a label that is not its folder's, or
            the same run found twice.
    """
    runs: dict[str, dict[int, dict[str, Any]]] = {}
    unfinished: dict[str, dict[int, str]] = {}
    where: dict[tuple[str, int], Path] = {}
    for root in dirs:
        for run_dir in sorted(p for p in root.glob("runs/*/*") if p.is_dir()):
            label, seed = run_dir.parent.name, run_folder_seed(run_dir)
            results_path = run_dir / "results.json"
            if seed is None:
                if results_path.is_file():
                    raise AnalysisError(
                        f"{run_dir}: a run folder must be named seed<seed>; remove or rename it"
                    )
                continue
            if not results_path.is_file():
                unfinished.setdefault(label, {})[seed] = "not finished"
                continue
            results = json.loads(results_path.read_text())
            if int(results["seed"]) != seed or results.get("label", label) != label:
                raise AnalysisError(
                    f"{results_path} is the run {results.get('label', label)!r} seed {results['seed']}, not the "
                    f"one its folder names ({label!r} seed {seed})"
                )
            if (label, seed) in where:
                raise AnalysisError(f"{label} seed {seed} is in both {where[label, seed]} and {run_dir}")
            where[label, seed] = run_dir
            metrics, late = results.get("metrics") or {}, results.get("late") or {}
            rows, problems = _rows(run_dir)
            for problem in problems:
                print(
                    f"study4_analysis: warning: {label} seed {seed}: training log: {problem}", file=sys.stderr
                )
            numbers = {
                "late_mean": None if late.get("mean@8") is None else 100 * late["mean@8"],
                "during_mean": during_training_mean(results),
                "mean": 100 * metrics["mean@8"],
                "pass": 100 * metrics["pass@8"],
                "entropy": metrics.get("entropy"),
                "length": metrics.get("mean_length"),
                **training_numbers(rows),
                "heldout_entropy": heldout_entropy(run_dir),
                "clip_pct": None,
                "tail_pct": None,
                "kind": machine_kind(run_dir),
            }
            for name, key in (("clip_pct", "clip_frac"), ("tail_pct", "tail_share")):
                numbers[name] = None if numbers[key] is None else 100 * numbers[key]
            runs.setdefault(label, {})[seed] = numbers
    for label, seeds in unfinished.items():  # a seed finished in one of the dirs is finished
        for seed in [s for s in seeds if s in runs.get(label, {})]:
            del seeds[seed]
    return runs, unfinished


def planned_seeds(config_path: Path | None) -> dict[str, list[int]] | None:
    """Each method's planned seeds from the study's compare config (``None`` without one)."""
    if config_path is None:
        return None
    from bandpo_lab.experiments.compare.config import load_compare_config

    config = load_compare_config(config_path)
    return {m.label: list(config.seeds_of(m)) for m in config.methods}


def left_out(
    runs: dict[str, dict[int, dict[str, Any]]],
    unfinished: dict[str, dict[int, str]],
    planned: dict[str, list[int]] | None,
    label: str,
    key: str,
    used: list[int],
    excluded: set[int] | frozenset[int] = frozenset(),
) -> list[str]:
    """Why each seed of either side (planned, or seen) is not in the pairs ``used`` of ``label`` vs GRPO on ``key``;
    ``excluded``: the seeds ``--exclude-seeds`` took out of ``runs``."""
    sides = (REFERENCE, label)
    seeds: set[int] = set(excluded)
    for side in sides:
        seeds |= set(runs.get(side, {})) | set(unfinished.get(side, {}))
        if planned is not None:
            seeds |= set(planned.get(side, []))
    if planned is not None:  # a comparison covers the seeds both methods planned
        common = set(planned.get(REFERENCE, [])) & set(planned.get(label, []))
    else:
        common = seeds
    out = []
    for seed in sorted(seeds - set(used)):
        if seed in excluded:
            out.append(f"{seed}: excluded (--exclude-seeds)")
            continue
        if seed not in common:
            if any(seed in runs.get(side, {}) for side in sides):
                out.append(f"{seed}: not planned for both methods")
            continue
        reasons = []
        for side in sides:
            run = runs.get(side, {}).get(seed)
            if run is None:
                reasons.append(f"{side} {unfinished.get(side, {}).get(seed, 'not run')}")
            elif run.get(key) is None:
                reasons.append(f"{side} has no {key}")
        out.append(f"{seed}: {', '.join(reasons) or 'excluded'}")
    return out


def paired(
    runs: dict[str, dict[int, dict[str, Any]]],
    label: str,
    key: str,
    kind: str | None = None,
    planned: dict[str, list[int]] | None = None,
) -> dict[str, Any] | None:
    """``label`` minus GRPO on ``key``, paired over the seeds both have (and both planned, with ``planned``);
    ``kind``: only the seeds whose two runs were both of that machine kind (:func:`machine_kind`)."""
    ref, other = runs.get(REFERENCE, {}), runs.get(label, {})
    allowed = None if planned is None else set(planned.get(REFERENCE, [])) & set(planned.get(label, []))
    seeds = sorted(
        s
        for s in set(ref) & set(other)
        if (allowed is None or s in allowed)
        and ref[s].get(key) is not None
        and other[s].get(key) is not None
        and (kind is None or ref[s].get("kind") == other[s].get("kind") == kind)
    )
    if not seeds:
        return None
    out = compare_methods({s: ref[s][key] for s in seeds}, {s: other[s][key] for s in seeds})
    diffs = [other[s][key] - ref[s][key] for s in seeds]
    out["seeds"] = seeds
    out["diffs"] = diffs
    out["sd"] = statistics.stdev(diffs) if len(diffs) > 1 else None
    out["mdd80"] = minimum_detectable(out["sd"], len(diffs)) if out["sd"] and len(diffs) > 2 else None
    return out


def _fmt(c: dict[str, Any] | None, unit: str = " points") -> str:
    if c is None:
        return "no pairs"
    text = f"{c['diff']:+.2f}{unit}"
    if c.get("lo") is not None:
        text += f" [{c['lo']:+.2f}, {c['hi']:+.2f}]"
    text += f", {c['n']} seeds"
    if c.get("sd") is not None:
        text += f", sd {c['sd']:.2f}"
    if c.get("mdd80") is not None:
        text += f", detects {c['mdd80']:.1f} at 80% power"
    return text


def decision(c: dict[str, Any] | None, powered_for: float = 5.0) -> str:
    """The registered decision rule on the primary outcome's interval."""
    if c is None or c.get("lo") is None:
        return "no decision: no interval (fewer than 2 pairs)"
    if c["lo"] > 0:
        verdict = "better than GRPO (the interval lies above 0)"
    elif c["hi"] < 0:
        verdict = "worse than GRPO (the interval lies below 0)"
    else:
        verdict = "no difference detected (the interval contains 0)"
    inside = c["lo"] <= powered_for <= c["hi"]
    return f"{verdict}; +{powered_for:g} points (the size the study is powered for) {'not ' if inside else ''}excluded"


def pooled(runs: dict[int, dict[str, Any]], seeds: list[int]) -> str:
    """Clipped and tail-clipped tokens summed over the runs of ``seeds``."""
    tokens = sum(runs[s]["tokens"] for s in seeds)
    clipped = sum(runs[s]["clipped"] for s in seeds)
    tail = sum(runs[s]["tail_clipped"] for s in seeds)
    frac = f"{100 * clipped / tokens:.2f}%" if tokens else "-"
    share = f"{100 * tail / clipped:.1f}%" if clipped else "-"
    return f"{clipped:,} of {tokens:,} tokens clipped ({frac}), {tail:,} of them p_old < 0.2 ({share})"


#: The figure's panels: the comparison key and the axis label of each, the primary outcome first.
FIGURE_PANELS = (
    ("late_mean", "late mean@8 (primary), points"),
    ("entropy_end", "training entropy at the end, nats"),
)


def figure(
    comparisons: dict[str, dict[str, Any]], path: Path, powered_for: float = 5.0
) -> list[dict[str, Any]]:
    """Draw each comparison's paired differences (other method minus GRPO), one panel per :data:`FIGURE_PANELS`
    entry: a dot per seed, the mean with its 95% paired t-interval, a line at 0 and, on the primary outcome, one at
    ``+powered_for`` (the size the study is powered for). The suffix of ``path`` picks the format.

    Returns:
        What was drawn, one entry per (panel, comparison) with pairs: ``{"key", "label", "seeds", "diffs",
        "diff", "lo", "hi"}`` (``lo``/``hi`` ``None`` with fewer than 2 pairs).
    """
    from bandpo._optional import pyplot

    plt = pyplot()
    labels = [label for label in OTHERS if label in comparisons]
    fig, axes = plt.subplots(1, len(FIGURE_PANELS), figsize=(5.5 * len(FIGURE_PANELS), 4.6), squeeze=False)
    drawn = []
    for ax, (key, ylabel) in zip(axes[0], FIGURE_PANELS):
        for x, label in enumerate(labels):
            c = comparisons[label].get(key)
            if not c:
                continue
            diffs = c["diffs"]
            offsets = [
                0.18 * ((i % 7) - 3) / 3 for i in range(len(diffs))
            ]  # spread the dots, deterministically
            ax.scatter([x + o for o in offsets], diffs, s=14, alpha=0.55, color="tab:grey", zorder=2)
            if c.get("lo") is not None:
                ax.errorbar(
                    x, c["diff"], yerr=[[c["diff"] - c["lo"]], [c["hi"] - c["diff"]]], fmt="o", color="tab:blue",
                    capsize=6, markersize=7, zorder=3, label="mean, 95% paired t-interval" if x == 0 else None,
                )  # fmt: skip
            else:
                ax.plot([x], [c["diff"]], "o", color="tab:blue", markersize=7, zorder=3)
            drawn.append(
                {"key": key, "label": label, "seeds": c["seeds"], "diffs": diffs}
                | {k: c.get(k) for k in ("diff", "lo", "hi")}
            )
        ax.axhline(0.0, color="black", linewidth=0.8)
        if key == "late_mean":
            ax.axhline(powered_for, color="tab:green", linestyle=":", label=f"+{powered_for:g} (powered for)")
        ax.set_xticks(
            range(len(labels)),
            [
                f"{label} - {REFERENCE}\n({len((comparisons[label].get(key) or {}).get('seeds', []))} seeds)"
                for label in labels
            ],
        )
        ax.set_xlim(-0.6, len(labels) - 0.4)
        ax.set_ylabel(ylabel)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(loc="best", fontsize=8)
    fig.suptitle("Study 4: paired differences against GRPO, one dot per seed")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return drawn


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("dirs", nargs="+", type=Path, help="compare exports or output directories")
    parser.add_argument("--config", type=Path, help="the study's compare config: each method's planned seeds")
    parser.add_argument("--json", type=Path, help="also write the numbers as JSON here")
    parser.add_argument(
        "--figure", type=Path, help="also draw the paired differences here (.png, .pdf, .svg, ...)"
    )
    parser.add_argument(
        "--exclude-seeds",
        nargs="+",
        type=int,
        default=[],
        metavar="SEED",
        help="leave these seeds out of every method (a sensitivity check, not the registered analysis)",
    )
    args = parser.parse_args(argv)
    if args.figure is not None:
        from bandpo_lab.plots import figure_formats

        suffix = args.figure.suffix.lower().lstrip(".")
        if suffix not in figure_formats():
            parser.error(
                f"--figure {str(args.figure)!r} must end in a figure format's suffix "
                f"({', '.join('.' + f for f in figure_formats())}), got {('.' + suffix) if suffix else 'none'}"
            )
        if not args.figure.parent.is_dir():
            parser.error(f"--figure {str(args.figure)!r}: {str(args.figure.parent)!r} is not a directory")
    try:
        runs, unfinished = load(args.dirs)
    except AnalysisError as err:
        print(f"study4_analysis: error: {err}", file=sys.stderr)
        return 2
    excluded = set(args.exclude_seeds)
    if excluded:
        for seeds in (*runs.values(), *unfinished.values()):
            for seed in excluded & set(seeds):
                del seeds[seed]
        print(
            f"excluded by --exclude-seeds, from every method: {', '.join(map(str, sorted(excluded)))} "
            "(a sensitivity check: the registered analysis uses every seed)"
        )
    planned = planned_seeds(args.config)
    if REFERENCE not in runs:
        print(
            f"study4_analysis: error: no finished {REFERENCE} run in {', '.join(map(str, args.dirs))}",
            file=sys.stderr,
        )
        return 2
    if planned is not None:
        for label in sorted(runs):
            outside = sorted(set(runs[label]) - set(planned.get(label, [])))
            if outside:
                print(
                    f"study4_analysis: warning: {label}: finished seeds outside the plan, left out: {outside}"
                )
    summary: dict[str, Any] = {
        "runs": {label: runs[label] for label in sorted(runs)},
        "unfinished": unfinished,
        "comparisons": {},
    }
    if excluded:
        summary["excluded_seeds"] = sorted(excluded)
    for label in OTHERS:
        if label not in runs:
            continue
        keys = ("late_mean", "mean", "pass", "entropy", "entropy_end", "entropy_area", "clip_pct", "tail_pct")
        comparison: dict[str, Any] = {key: paired(runs, label, key, planned=planned) for key in keys}
        comparison["late_mean_native"] = paired(runs, label, "late_mean", kind="native", planned=planned)
        comparison["late_mean_emulated"] = paired(runs, label, "late_mean", kind="emulated", planned=planned)
        comparison["during_mean"] = paired(runs, label, "during_mean", planned=planned)
        primary_seeds = (comparison["late_mean"] or {}).get("seeds", [])
        comparison["left_out"] = left_out(
            runs, unfinished, planned, label, "late_mean", primary_seeds, excluded
        )
        both = set(primary_seeds)
        comparison["pairs_of_neither_kind"] = sorted(
            s
            for s in both
            if runs[REFERENCE][s].get("kind") is None
            or runs[REFERENCE][s].get("kind") != runs[label][s].get("kind")
        )
        comparison["decision"] = decision(comparison["late_mean"])
        summary["comparisons"][label] = comparison
        print(f"## {label} - {REFERENCE} (paired)")
        print(f"- primary, late mean@8: {_fmt(comparison['late_mean'])}")
        if excluded:
            rule = "seeds excluded: a sensitivity check, not decided on; the rule's reading"
        elif label == "band-kl":
            rule = "the registered rule"
        else:
            rule = "secondary: not decided on; the rule's reading"
        print(f"  - decision ({rule}): {comparison['decision']}")
        print(
            f"  - left out of the pairs: {'; '.join(comparison['left_out'])}"
            if comparison["left_out"]
            else "  - left out of the pairs: none"
        )
        print(
            f"  - sensitivity: seeds run with native bf16 {_fmt(comparison['late_mean_native'])}; "
            f"emulated {_fmt(comparison['late_mean_emulated'])}; "
            f"in neither (mixed or unknown): {len(comparison['pairs_of_neither_kind'])} seeds"
        )
        print(
            f"  - sensitivity: the evaluations during training alone (steps "
            f"{' and '.join(map(str, DURING_STEPS))}, the training's attention): {_fmt(comparison['during_mean'])}"
        )
        print(f"- final mean@8: {_fmt(comparison['mean'])}; pass@8: {_fmt(comparison['pass'])}")
        print(f"- held-out entropy: {_fmt(comparison['entropy'], ' nats')}")
        print(
            f"- training entropy at the end: {_fmt(comparison['entropy_end'], ' nats')}; "
            f"area: {_fmt(comparison['entropy_area'], ' nats')}"
        )
        print(
            f"- clip fraction: {_fmt(comparison['clip_pct'], ' points (%)')}; tail share of clipping: "
            f"{_fmt(comparison['tail_pct'], ' points (%)')} (each run's pooled over its steps)"
        )
        clip_seeds = (comparison["clip_pct"] or {}).get("seeds", [])
        for side in (REFERENCE, label):
            print(
                f"  - {side}, pooled over the {len(clip_seeds)} paired seeds: {pooled(runs[side], clip_seeds)}"
            )
    grpo = runs[REFERENCE]
    train_halved = [s for s in sorted(grpo) if grpo[s].get("entropy_halved")]
    heldout = {s: grpo[s]["heldout_entropy"] for s in sorted(grpo) if grpo[s].get("heldout_entropy")}
    heldout_halved = [s for s, (first, last) in heldout.items() if last <= first / 2]
    print(
        f"\nGRPO's entropy fell by half (requirement (b)): training entropy (last 8 vs first 8 logged steps) on "
        f"{len(train_halved)} of {len(grpo)} seeds; held-out sampling entropy (last vs first curve point) on "
        f"{len(heldout_halved)} of {len(heldout)} seeds with a curve"
    )
    print(
        "\n| method | seed | late mean@8 | mean@8 | pass@8 | entropy | train entropy first -> end | area | "
        "clipped / tokens | tail clipped | length |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for label in sorted(runs):
        for seed, n in sorted(runs[label].items()):
            late = "-" if n["late_mean"] is None else f"{n['late_mean']:.1f}"
            clip = f"{n['clipped']:,} / {n['tokens']:,} ({100 * (n['clip_frac'] or 0):.2f}%)"
            tail = "-" if n["tail_share"] is None else f"{n['tail_clipped']:,} ({100 * n['tail_share']:.1f}%)"
            halved = " (halved)" if n.get("entropy_halved") else ""
            length = "-" if n["length"] is None else f"{n['length']:.1f}"
            print(
                f"| {label} | {seed} | {late} | {n['mean']:.1f} | {n['pass']:.1f} | {n['entropy']:.3f} | "
                f"{n.get('entropy_first', float('nan')):.2f} -> {n.get('entropy_end', float('nan')):.2f}{halved} | "
                f"{n.get('entropy_area', float('nan')):.2f} | {clip} | {tail} | {length} |"
            )
    if args.json:
        args.json.write_text(json.dumps(summary, indent=2, default=str) + "\n")
    if args.figure is not None:
        figure(summary["comparisons"], args.figure)
        print(f"\nfigure: {args.figure}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
