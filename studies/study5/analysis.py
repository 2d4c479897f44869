"""Study 5's registered analysis (studies/study5/README.md, "Registration"), from compare exports.

    .venv/bin/python studies/study5/analysis.py studies/study5/results \\
        --config studies/study5/config.yaml --json studies/study5/results/analysis.json \\
        --figure studies/study5/results/paired.png

Per run (``load`` of scripts/study4_analysis.py: each finished run folder ``runs/<label>/seed<seed>``), the primary
outcome: the training-entropy area, the trapezoid of the logged ``policy/entropy`` over the logged steps divided by
their span (nats). The two primary contrasts, paired over seeds, each with a two-sided paired t-interval at level
1 - 0.05 / 2 (Bonferroni for two): ``band-upper - grpo`` (hypothesis "the upper side") and ``band-lower - grpo``
(hypothesis "the lower side"). The registered decision for each: the side lowers the entropy if its interval lies
below 0, raises it if above 0, otherwise no effect is detected, with whether the interval excludes -0.32 nats
(Study 4's Band-KL - GRPO difference) and -0.16 (half of it).

Secondary, described with 95% paired intervals or with counts, not decided on: ``band-kl - grpo`` (the entropy
finding of Study 4, again), the interaction ``band-kl - band-upper - band-lower + grpo``; late mean@8, final pass@8
and held-out entropy of each rule against GRPO; the clip fraction and the tail share of clipping (p_old < 0.2)
pooled over each method's runs with the token counts behind them; the per-side counts (``side/...`` of
``bandpo.losses.diagnostics.side_metrics`` times ``tokens/count``, summed over each method's steps and runs:
tokens let through beyond GRPO's [0.8, 1.2] on each side, their tail part, and the tokens held inside it); the
share of runs that never take off (late mean@8 below 25 points), with the counts.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from pathlib import Path
from typing import Any

from scipy import stats

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))
from study4_analysis import AnalysisError, _rows, load, planned_seeds  # noqa: E402

REFERENCE = "grpo"
PRIMARY = {"band-upper": "the upper side", "band-lower": "the lower side"}
ALPHA_PRIMARY = 0.05 / 2
STUDY4_EFFECT = -0.32
"""Study 4's Band-KL - GRPO training-entropy area (nats, 30 pairs): the size a side that carries all of it has."""
NO_TAKE_OFF = 25.0
"""Late mean@8 (points) below which a run is counted as one that never took off."""
SIDE_KEYS = (
    "side/up_through",
    "side/down_through",
    "side/up_through_tail",
    "side/down_through_tail",
    "side/up_held",
    "side/down_held",
)


def paired_interval(ref: dict[int, float], other: dict[int, float], alpha: float) -> dict[str, Any] | None:
    """``other - ref`` paired over the seeds both have: mean, the two-sided t-interval at level ``1 - alpha``,
    sd, n, the per-seed differences; ``None`` without a pair (no interval with one)."""
    seeds = sorted(set(ref) & set(other))
    if not seeds:
        return None
    diffs = [other[s] - ref[s] for s in seeds]
    out: dict[str, Any] = {"n": len(diffs), "seeds": seeds, "diffs": diffs, "diff": statistics.fmean(diffs)}
    out["level"] = 1 - alpha
    if len(diffs) >= 2:
        sd = statistics.stdev(diffs)
        half = stats.t.ppf(1 - alpha / 2, len(diffs) - 1) * sd / math.sqrt(len(diffs))
        out.update(sd=sd, lo=out["diff"] - half, hi=out["diff"] + half)
    return out


def decision(c: dict[str, Any] | None, side: str) -> str:
    """The registered decision for one side's hypothesis from its primary interval."""
    if c is None or c.get("lo") is None:
        return f"{side}: no decision (fewer than 2 pairs)"
    if c["hi"] < 0:
        verdict = "lowers the training entropy (the interval lies below 0)"
    elif c["lo"] > 0:
        verdict = "raises the training entropy (the interval lies above 0)"
    else:
        verdict = "no effect on the training entropy detected (the interval contains 0)"
    excl = [f"{v:+.2f}" for v in (STUDY4_EFFECT, STUDY4_EFFECT / 2) if not c["lo"] <= v <= c["hi"]]
    kept = [f"{v:+.2f}" for v in (STUDY4_EFFECT, STUDY4_EFFECT / 2) if c["lo"] <= v <= c["hi"]]
    return (
        f"{side} {verdict}: {c['diff']:+.3f} [{c['lo']:+.3f}, {c['hi']:+.3f}] nats over {c['n']} seeds "
        f"({100 * c['level']:.1f}% interval); excludes {', '.join(excl) or 'neither'} of Study 4's effect and its "
        f"half{'; contains ' + ', '.join(kept) if kept else ''}"
    )


def side_counts(run_dir: Path) -> dict[str, int] | None:
    """The per-side token counts of one run, summed over its logged steps; ``None`` for a run that logged none."""
    rows, _ = _rows(run_dir)
    rows = [r for r in rows if r.get("tokens/count") is not None and r.get(SIDE_KEYS[0]) is not None]
    if not rows:
        return None
    out = {key: round(sum(float(r[key]) * float(r["tokens/count"]) for r in rows)) for key in SIDE_KEYS}
    out["tokens"] = round(sum(float(r["tokens/count"]) for r in rows))
    return out


def run_dirs(dirs: list[Path]) -> dict[tuple[str, int], Path]:
    out = {}
    for root in dirs:
        for run_dir in root.glob("runs/*/seed*"):
            if (run_dir / "results.json").is_file() and run_dir.name[4:].isdigit():
                out[run_dir.parent.name, int(run_dir.name[4:])] = run_dir
    return out


def analyse(dirs: list[Path], config: Path | None) -> dict[str, Any]:
    runs, unfinished = load(dirs)
    planned = planned_seeds(config)
    if planned is not None:  # only the study's methods and seeds
        runs = {m: {s: v for s, v in runs.get(m, {}).items() if s in planned[m]} for m in planned}
    value = {m: {s: r["entropy_area"] for s, r in by_seed.items() if r.get("entropy_area") is not None}
             for m, by_seed in runs.items()}  # fmt: skip
    out: dict[str, Any] = {"primary": {}, "secondary": {}, "unfinished": unfinished}
    for label, side in PRIMARY.items():
        c = paired_interval(value.get(REFERENCE, {}), value.get(label, {}), ALPHA_PRIMARY)
        out["primary"][label] = c
        out.setdefault("decisions", {})[label] = decision(c, side)
    sec: dict[str, Any] = {}
    sec["band-kl entropy_area"] = paired_interval(value.get(REFERENCE, {}), value.get("band-kl", {}), 0.05)
    common = set.intersection(
        *(set(value.get(m, {})) for m in ("grpo", "band-kl", "band-upper", "band-lower"))
    )
    if common:
        inter = {s: value["band-kl"][s] - value["band-upper"][s] - value["band-lower"][s] + value["grpo"][s]
                 for s in common}  # fmt: skip
        sec["interaction entropy_area"] = paired_interval(dict.fromkeys(common, 0.0), inter, 0.05)
    for label in ("band-kl", *PRIMARY):
        for key in ("late_mean", "pass", "heldout_entropy_end"):
            ref = {
                s: _value(r, key) for s, r in runs.get(REFERENCE, {}).items() if _value(r, key) is not None
            }
            oth = {s: _value(r, key) for s, r in runs.get(label, {}).items() if _value(r, key) is not None}
            sec[f"{label} {key}"] = paired_interval(ref, oth, 0.05)
    where = run_dirs(dirs)
    methods: dict[str, Any] = {}
    for label, by_seed in runs.items():
        seeds = sorted(by_seed)
        tokens = sum(by_seed[s]["tokens"] for s in seeds)
        clipped = sum(by_seed[s]["clipped"] for s in seeds)
        tail = sum(by_seed[s]["tail_clipped"] for s in seeds)
        late = [by_seed[s]["late_mean"] for s in seeds if by_seed[s].get("late_mean") is not None]
        sides = [c for s in seeds if (c := side_counts(where[label, s])) is not None]
        methods[label] = {
            "runs": len(seeds),
            "tokens": tokens,
            "clipped": clipped,
            "tail_clipped": tail,
            "clip_pct": 100 * clipped / tokens if tokens else None,
            "tail_pct": 100 * tail / clipped if clipped else None,
            "no_take_off": sum(v < NO_TAKE_OFF for v in late),
            "with_late_mean": len(late),
            "side_runs": len(sides),
            "side": {k: sum(c[k] for c in sides) for k in (*SIDE_KEYS, "tokens")} if sides else None,
            "entropy_area": _mean_sd(
                [by_seed[s]["entropy_area"] for s in seeds if by_seed[s].get("entropy_area")]
            ),
            "late_mean": _mean_sd(late),
        }
    out["methods"] = methods
    out["secondary"] = sec
    return out


def _value(run: dict[str, Any], key: str) -> float | None:
    if key == "heldout_entropy_end":
        held = run.get("heldout_entropy")
        return None if held is None else held[1]
    return run.get(key)


def _mean_sd(values: list[float]) -> dict[str, Any] | None:
    if not values:
        return None
    sd = statistics.stdev(values) if len(values) > 1 else None
    return {"mean": statistics.fmean(values), "sd": sd, "n": len(values)}


def figure(result: dict[str, Any], path: Path) -> None:
    """One dot per seed: each rule's training-entropy area minus GRPO's, with the mean and its interval."""
    from bandpo._optional import pyplot

    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7, 4))
    rows = [("band-kl", result["secondary"].get("band-kl entropy_area")),
            *((label, result["primary"].get(label)) for label in PRIMARY)]  # fmt: skip
    for i, (_label, c) in enumerate(rows):
        if not c:
            continue
        ax.scatter([i] * len(c["diffs"]), c["diffs"], color="0.5", s=12)
        if c.get("lo") is not None:
            ax.errorbar([i + 0.15], [c["diff"]], yerr=[[c["diff"] - c["lo"]], [c["hi"] - c["diff"]]], fmt="o",
                        color="k", capsize=4)  # fmt: skip
    ax.axhline(0, color="k", lw=0.8)
    ax.axhline(STUDY4_EFFECT, color="tab:red", lw=0.8, ls=":", label="Study 4: Band-KL - GRPO")
    ax.set_xticks(range(len(rows)), [f"{label} - grpo" for label, _ in rows])
    ax.set_ylabel("training-entropy area difference (nats)")
    ax.set_title("Study 5: per seed (grey) and mean with its interval (black)")
    ax.legend(loc="lower left", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("dirs", nargs="+", type=Path, help="compare exports or output directories")
    parser.add_argument("--config", type=Path, help="the study's compare config (its methods and seeds)")
    parser.add_argument("--json", type=Path, help="also write the numbers as JSON here")
    parser.add_argument("--figure", type=Path, help="also draw the paired differences here (.png)")
    args = parser.parse_args(argv)
    try:
        result = analyse(args.dirs, args.config)
    except AnalysisError as err:
        print(f"study5_analysis: error: {err}", file=sys.stderr)
        return 2
    for line in result["decisions"].values():
        print(line)
    for name, c in result["secondary"].items():
        if c and c.get("lo") is not None:
            print(f"{name}: {c['diff']:+.3f} [{c['lo']:+.3f}, {c['hi']:+.3f}] over {c['n']} seeds (95%)")
    for label, m in result["methods"].items():
        clip = f"{m['clipped']:,} of {m['tokens']:,} tokens clipped, {m['tail_clipped']:,} in the tail"
        print(
            f"{label}: {m['runs']} runs; {clip}; never took off {m['no_take_off']} of {m['with_late_mean']}"
        )
        if m["side"]:
            s = m["side"]
            print(f"    through up {s['side/up_through']:,} (tail {s['side/up_through_tail']:,}), through down "
                  f"{s['side/down_through']:,} (tail {s['side/down_through_tail']:,}), held up "
                  f"{s['side/up_held']:,}, held down {s['side/down_held']:,}, of {s['tokens']:,} tokens")  # fmt: skip
    if args.json:
        args.json.write_text(json.dumps(result, indent=1) + "\n")
    if args.figure:
        figure(result, args.figure)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
