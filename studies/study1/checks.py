"""The numbers behind the summary sentences of Studies 1, 2 and 2b (docs/results.md, docs/study.md,
docs/tiny-task.md), recomputed from the committed exports.

    python studies/study1/checks.py               # reads studies/study1/results/{grid,final}, studies/study2/results
    python studies/study1/checks.py STUDIES       # the same under another folder holding study1/ and study2/

Prints (1) the tail share of clipping under both conventions, (2) entropy ratios and paired differences, (3) the
comparisons the summaries quote that the reports do not print (a seed left out, Band-KL vs DPPO-KL, the delta
screen). Every number comes from ``bandpo_lab.experiments.report`` (``load_runs``, ``run_summary``,
``compare_methods``: the same code as the reports) applied to the per-run files. Study 3's checks are
``studies/study3/checks.py``, the probe's ``scripts/probe_checks.py`` (one script until the studies had folders).
"""

from __future__ import annotations

import functools
import statistics
import sys
from pathlib import Path

from bandpo_lab.experiments.report.runs import load_runs, run_summary
from bandpo_lab.experiments.report.stats import compare_methods

ROOT = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parents[1]
GRID = {"A": "beta 0.1", "B": "beta 0.02", "C": "beta 0", "D": "beta 0.1, lr 1e-3", "E": "beta 0.1, 8 updates",
        "F": "beta 0, lr 1e-3, 8 updates"}  # fmt: skip
STUDIES = {"study1/results/final": "study-final (beta 0)", "study2/results": "study-recipe (beta 0.1)"}


@functools.cache
def summaries(export: Path) -> list[tuple[str, int, dict]]:
    """``(label, seed, run_summary + per_step_tail)`` of every run of one export."""
    out = []
    for run in load_runs(export):
        summary = run_summary(run)
        # the per-step convention: the mean over logged steps of clip/tail_share (steps without clipping: 0)
        values = [float(r["clip/tail_share"]) for r in run.metrics if r.get("clip/tail_share") is not None]
        summary["per_step_tail"] = statistics.fmean(values) if values else None
        out.append((run.label, run.seed, summary))
    return out


def per_seed(export: Path, key: str) -> dict[str, dict[int, float]]:
    """``{label: {seed: value}}`` of one ``run_summary`` key (``per_step_tail`` for the per-step convention)."""
    out: dict[str, dict[int, float]] = {}
    for label, seed, summary in summaries(export):
        value = summary.get(key)
        if value is not None:
            out.setdefault(label, {})[seed] = value
    return out


def exports() -> dict[str, Path]:
    paths = {
        f"grid {cell} ({what})": ROOT / "study1" / "results" / "grid" / cell for cell, what in GRID.items()
    }
    paths.update({what: ROOT / folder for folder, what in STUDIES.items()})
    return paths


def diff(
    export: Path, key: str, ref: str, other: str, drop: tuple[int, ...] = (), scale: float = 100.0
) -> str:
    values = per_seed(export, key)
    a = {s: v for s, v in values[ref].items() if s not in drop}
    b = {s: v for s, v in values[other].items() if s not in drop}
    c = compare_methods(a, b)
    return f"{c['diff'] * scale:+.2f} [{c['lo'] * scale:+.2f}, {c['hi'] * scale:+.2f}] (paired, n = {c['n']})"


def tail_shares() -> None:
    print(
        "(1) Tail share of clipping (clipped tokens with p_old < 0.2 / all clipped tokens), GRPO and Band-KL,"
    )
    print(
        "    method mean over seeds [range over runs], in %; pooled = over a run's logged steps (the reports),"
    )
    print("    per-step = mean over logged steps of clip/tail_share (docs/tiny-task.md's probes)")
    for name, path in exports().items():
        cells = []
        for key, conv in (("train/tail_share", "pooled"), ("per_step_tail", "per-step")):
            values = per_seed(path, key)
            for label in ("grpo", "band-kl"):
                v = list(values[label].values())
                cells.append(
                    f"{conv} {label} {100 * statistics.fmean(v):.1f} [{100 * min(v):.1f}, {100 * max(v):.1f}]"
                )
        print(f"  {name}: " + "; ".join(cells))


def entropies() -> None:
    print("(2) Entropy, Band-KL / GRPO (ratio of method means); eval = held-out, train = last logged step")
    for name, path in exports().items():
        parts = []
        for key, what in (("train/entropy_last", "train"), ("entropy", "eval")):
            v = per_seed(path, key)
            parts.append(
                f"{what} {statistics.fmean(v['band-kl'].values()) / statistics.fmean(v['grpo'].values()):.2f}"
            )
        print(f"  {name}: " + ", ".join(parts))
    final = ROOT / "study1" / "results" / "final"
    ent = per_seed(final, "entropy")
    g, b = ent["grpo"], ent["band-kl"]
    print(
        f"  study-final eval entropy per seed, GRPO: {', '.join(f'{s}: {v:.3f}' for s, v in sorted(g.items()))}"
    )
    print(
        f"  study-final eval entropy per seed, Band-KL: {', '.join(f'{s}: {v:.3f}' for s, v in sorted(b.items()))}"
    )
    print(
        f"  study-final Band-KL - GRPO, eval entropy (nats): {diff(final, 'entropy', 'grpo', 'band-kl', scale=1)}"
    )
    print(
        f"  study-final ratio of medians: {statistics.median(b.values()) / statistics.median(g.values()):.2f}"
    )
    rec = ROOT / "study2" / "results"
    print(
        f"  study-recipe Band-KL - GRPO, eval entropy (nats): {diff(rec, 'entropy', 'grpo', 'band-kl', scale=1)}"
    )


def comparisons() -> None:
    print("(3) Differences in points (mean@32 for the studies, pass@1 for the grid), paired 95% t intervals")
    final, rec = ROOT / "study1" / "results" / "final", ROOT / "study2" / "results"
    a = ROOT / "study1" / "results" / "grid" / "A"
    acc = per_seed(final, "mean@32")["grpo"]
    print(
        f"  study-final GRPO mean@32 per seed: {', '.join(f'{s}: {100 * v:.2f}' for s, v in sorted(acc.items()))}"
    )
    for method in ("band-kl", "band-tv", "band-chi2", "dppo-kl", "clip_higher", "dcpo"):
        print(
            f"  study-final {method} - grpo: {diff(final, 'mean@32', 'grpo', method)}; without seed 100: "
            f"{diff(final, 'mean@32', 'grpo', method, drop=(100,))}"
        )
    print(f"  study-final dppo-kl - band-kl: {diff(final, 'mean@32', 'band-kl', 'dppo-kl')}")
    print(f"  study-recipe dppo-kl - band-kl: {diff(rec, 'mean@32', 'band-kl', 'dppo-kl')}")
    for method in ("band-kl-0.02", "band-kl", "band-kl-0.1"):
        print(f"  grid A (600 steps, 2 seeds) {method} - grpo, pass@1: {diff(a, 'pass@1', 'grpo', method)}")


if __name__ == "__main__":
    tail_shares()
    entropies()
    comparisons()
