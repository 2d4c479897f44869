"""The numbers behind the README's and docs/study.md's summary sentences, recomputed from the committed exports.

    python scripts/study_checks.py                    # reads docs/results/study-{grid,final,recipe,smollm2}

Prints (1) the tail share of clipping under both conventions, (2) entropy ratios and paired differences, (3) the
comparisons the summaries quote that the reports do not print (a seed left out, Band-KL vs DPPO-KL, the delta
screen), (4) Study 3's per-seed outcomes and paired differences. Every number comes from ``bandpo.experiments.report`` (``load_runs``, ``run_summary``, ``compare_methods``:
the same code as the reports) applied to the per-run files.
"""

from __future__ import annotations

import functools
import statistics
import sys
from pathlib import Path

from bandpo.experiments.report.runs import load_runs, run_summary
from bandpo.experiments.report.stats import compare_methods

ROOT = Path(sys.argv[1] if len(sys.argv) > 1 else "docs/results")
GRID = {"A": "beta 0.1", "B": "beta 0.02", "C": "beta 0", "D": "beta 0.1, lr 1e-3", "E": "beta 0.1, 8 updates",
        "F": "beta 0, lr 1e-3, 8 updates"}  # fmt: skip
STUDIES = {"final": "study-final (beta 0)", "recipe": "study-recipe (beta 0.1)"}


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
    paths = {f"grid {cell} ({what})": ROOT / "study-grid" / cell for cell, what in GRID.items()}
    paths.update({what: ROOT / f"study-{name}" for name, what in STUDIES.items()})
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
    final = ROOT / "study-final"
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
    rec = ROOT / "study-recipe"
    print(
        f"  study-recipe Band-KL - GRPO, eval entropy (nats): {diff(rec, 'entropy', 'grpo', 'band-kl', scale=1)}"
    )


def comparisons() -> None:
    print("(3) Differences in points (mean@32 for the studies, pass@1 for the grid), paired 95% t intervals")
    final, rec, a = ROOT / "study-final", ROOT / "study-recipe", ROOT / "study-grid" / "A"
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


def smollm2() -> None:
    """Study 3 (SmolLM2-135M-Instruct): per-seed outcomes and the registered paired differences."""
    path = ROOT / "study-smollm2"
    if not path.is_dir():
        print("(4) Study 3: no export at", path)
        return
    print("(4) Study 3 (SmolLM2-135M-Instruct, arith): per seed, and Band-KL - GRPO paired 95% t intervals")
    keys = {
        "mean@8": 100.0,
        "pass@8": 100.0,
        "entropy": 1.0,
        "train/tail_share": 100.0,
        "train/clip_frac": 100.0,
    }
    for key, scale in keys.items():
        values = per_seed(path, key)
        for label in ("grpo", "band-kl"):
            digits = 3 if scale == 1.0 else 2
            row = ", ".join(f"{s}: {v * scale:.{digits}f}" for s, v in sorted(values.get(label, {}).items()))
            print(f"  {key} {label}: {row}")
        if len(values.get("grpo", {})) >= 2 and len(values.get("band-kl", {})) >= 2:
            print(f"  {key} band-kl - grpo: {diff(path, key, 'grpo', 'band-kl', scale=scale)}")


if __name__ == "__main__":
    tail_shares()
    entropies()
    comparisons()
    smollm2()
