"""Study 4's registered analysis (docs/study.md, "Registration"), from a compare export or output directory.

    .venv/bin/python scripts/study4_analysis.py docs/results/study4            # the study
    .venv/bin/python scripts/study4_analysis.py docs/results/study4-pilot/p4 docs/results/study4-pilot/p5 \
        docs/results/study4-pilot/p6                                          # the pilot (no late mean)

Prints, for Band-KL and Clip-Higher against GRPO, paired over the seeds both finished: the primary outcome (late
mean@8, with its 95% paired t-interval, the spread of the differences and the smallest difference this many seeds
detect at 80% power at that spread), then the secondary outcomes: final mean@8, pass@8 and held-out entropy
(paired); per run the training entropy at the end (mean of the last 8 logged steps) and its area over the run
(trapezoid over the logged steps divided by their span), whether GRPO's training entropy fell by half (last 8
against first 8 logged steps), the clip fraction and the tail share of clipping (``p_old < 0.2``) pooled over steps
with the token counts behind them, and the completion length. ``--json FILE`` writes the same numbers.

The sensitivity check named in the registration's deviation for CPUs without native bf16: the primary outcome
again over the seeds whose two runs both computed with native bf16, and over those whose two runs were both
emulated (``precision`` in ``run_info.json``: ``emulated: true``, or a reason naming the CPU's native bf16 flags;
:mod:`bandpo.bf16_emulation`); a seed whose runs differ, or whose kind a run does not say, goes to neither, and
their number is printed.
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

from bandpo.experiments.report.stats import compare_methods

sys.path.insert(0, str(Path(__file__).resolve().parent))
from power import minimum_detectable

TAIL = "p0.0-0.2"
REFERENCE, OTHERS = "grpo", ("band-kl", "clip-higher")


def _rows(run_dir: Path) -> list[dict[str, Any]]:
    plain, packed = run_dir / "metrics.jsonl", run_dir / "metrics.jsonl.gz"
    text = plain.read_text() if plain.is_file() else gzip.decompress(packed.read_bytes()).decode()
    rows = []
    for line in text.splitlines():
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            continue  # a torn last line
        if "train_runtime" not in row and row.get("step") is not None:
            rows.append(row)
    return rows


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


def load(dirs: list[Path]) -> dict[str, dict[int, dict[str, Any]]]:
    """``label -> seed -> numbers`` of every finished run (a ``results.json``) in ``dirs``."""
    runs: dict[str, dict[int, dict[str, Any]]] = {}
    for root in dirs:
        for results_path in sorted(root.glob("runs/*/seed*/results.json")):
            results = json.loads(results_path.read_text())
            metrics, late = results.get("metrics") or {}, results.get("late") or {}
            numbers = {
                "late_mean": None if late.get("mean@8") is None else 100 * late["mean@8"],
                "mean": 100 * metrics["mean@8"],
                "pass": 100 * metrics["pass@8"],
                "entropy": metrics.get("entropy"),
                "length": metrics.get("mean_length"),
                **training_numbers(_rows(results_path.parent)),
                "kind": machine_kind(results_path.parent),
            }
            runs.setdefault(results_path.parent.parent.name, {})[int(results["seed"])] = numbers
    return runs


def paired(
    runs: dict[str, dict[int, dict[str, Any]]], label: str, key: str, kind: str | None = None
) -> dict[str, Any] | None:
    """``label`` minus GRPO on ``key``, paired over the seeds both have; ``kind``: only the seeds whose two runs
    were both of that machine kind (:func:`machine_kind`)."""
    ref, other = runs.get(REFERENCE, {}), runs.get(label, {})
    seeds = sorted(
        s
        for s in set(ref) & set(other)
        if ref[s].get(key) is not None
        and other[s].get(key) is not None
        and (kind is None or ref[s].get("kind") == other[s].get("kind") == kind)
    )
    if not seeds:
        return None
    out = compare_methods({s: ref[s][key] for s in seeds}, {s: other[s][key] for s in seeds})
    diffs = [other[s][key] - ref[s][key] for s in seeds]
    out["seeds"] = seeds
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("dirs", nargs="+", type=Path, help="compare exports or output directories")
    parser.add_argument("--json", type=Path, help="also write the numbers as JSON here")
    args = parser.parse_args(argv)
    runs = load(args.dirs)
    if REFERENCE not in runs:
        print(
            f"study4_analysis: error: no finished {REFERENCE} run in {', '.join(map(str, args.dirs))}",
            file=sys.stderr,
        )
        return 2
    summary: dict[str, Any] = {"runs": {label: runs[label] for label in sorted(runs)}, "comparisons": {}}
    for label in OTHERS:
        if label not in runs:
            continue
        comparison = {key: paired(runs, label, key) for key in ("late_mean", "mean", "pass", "entropy")}
        comparison.update(
            {key: paired(runs, label, key) for key in ("entropy_end", "entropy_area", "clip_frac")}
        )
        comparison["late_mean_native"] = paired(runs, label, "late_mean", kind="native")
        comparison["late_mean_emulated"] = paired(runs, label, "late_mean", kind="emulated")
        both = set(runs[REFERENCE]) & set(runs[label])
        comparison["pairs_of_neither_kind"] = sorted(
            s
            for s in both
            if runs[REFERENCE][s].get("kind") is None
            or runs[REFERENCE][s].get("kind") != runs[label][s].get("kind")
        )
        summary["comparisons"][label] = comparison
        print(f"## {label} - {REFERENCE} (paired)")
        print(f"- primary, late mean@8: {_fmt(comparison['late_mean'])}")
        print(
            f"  - sensitivity: seeds run with native bf16 {_fmt(comparison['late_mean_native'])}; "
            f"emulated {_fmt(comparison['late_mean_emulated'])}; "
            f"in neither (mixed or unknown): {len(comparison['pairs_of_neither_kind'])} seeds"
        )
        print(f"- final mean@8: {_fmt(comparison['mean'])}; pass@8: {_fmt(comparison['pass'])}")
        print(f"- held-out entropy: {_fmt(comparison['entropy'], ' nats')}")
        print(
            f"- training entropy at the end: {_fmt(comparison['entropy_end'], ' nats')}; "
            f"area: {_fmt(comparison['entropy_area'], ' nats')}"
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
    return 0


if __name__ == "__main__":
    sys.exit(main())
