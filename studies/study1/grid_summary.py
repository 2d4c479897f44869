"""Summarise the regime grid of docs/study.md and apply its pre-registered decision rule.

    python studies/study1/grid_summary.py studies/study1/results/grid      # one sub-directory per cell (A-F)

Reads each cell's ``report/results.json`` (written by ``bandpo compare``; also in the exported copies) and prints
one Markdown table (method means over seeds) and the decision, step by step as docs/study.md states it.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

CELLS = {  # cell: (beta, learning rate, optimizer steps per generation), as in docs/study.md
    "A": (0.1, 5e-4, 4),
    "B": (0.02, 5e-4, 4),
    "C": (0.0, 5e-4, 4),
    "D": (0.1, 1e-3, 4),
    "E": (0.1, 5e-4, 8),
    "F": (0.0, 1e-3, 8),
}
WORKING_GAIN = 0.05  # rule 1: a method beats the warm start by 5 points of held-out pass@1
SEPARATION = 0.04  # rule 2: |Band-KL(0.05) - GRPO| >= 4 points, or an entropy ratio >= 1.5 (<= 1/1.5)
ENTROPY_RATIO = 1.5


def _mean(metrics: dict, key: str) -> float | None:
    stat = metrics.get(key)
    return None if stat is None else stat["mean"]


def _fmt(x: float | None, scale: float = 100.0, digits: int = 1) -> str:
    return "-" if x is None else f"{x * scale:.{digits}f}"


def main(root: Path) -> int:
    """Print the tables and the decision; 0, or 1 (with a line on stderr) where no cell is working, 2 where
    ``root`` is not a directory."""
    if not root.is_dir():
        print(
            f"grid_summary.py: error: ROOT must be a directory (one per cell, A-F), got {str(root)!r}",
            file=sys.stderr,
        )
        return 2
    rows, decision = [], []
    for cell, (beta, lr, spg) in CELLS.items():
        path = root / cell / "report" / "results.json"
        if not path.is_file():
            rows.append(f"| {cell} | {beta} | {lr:g} | {spg} | (not run yet) | | | | | | | |")
            continue
        res = json.loads(path.read_text())
        base = res["baseline"]["metrics"]["pass@1"] if res.get("baseline") else None
        methods = res["methods"]
        best_gain = -1.0
        for label, m in methods.items():
            mm = m["metrics"]
            p1 = _mean(mm, "pass@1")
            if p1 is not None and base is not None:
                best_gain = max(best_gain, p1 - base)
            rows.append(
                f"| {cell} | {beta} | {lr:g} | {spg} | {label} | {len(m['seeds'])} | {_fmt(p1)} | "
                f"{_fmt(_mean(mm, 'pass@8'))} | {_fmt(_mean(mm, 'entropy'), 1, 3)} | "
                f"{_fmt(_mean(mm, 'train/entropy_last'), 1, 3)} | {_fmt(_mean(mm, 'train/clip_frac'), 100, 2)} | "
                f"{_fmt(_mean(mm, 'train/tail_share'))} |"
            )
        working = best_gain >= WORKING_GAIN
        g, b = methods.get("grpo"), methods.get("band-kl")
        if g is None or b is None:
            continue
        diff = _mean(b["metrics"], "pass@1") - _mean(g["metrics"], "pass@1")
        ratio = _mean(b["metrics"], "train/entropy_last") / _mean(g["metrics"], "train/entropy_last")
        separates = working and (abs(diff) >= SEPARATION or not (1 / ENTROPY_RATIO < ratio < ENTROPY_RATIO))
        clip = _mean(g["metrics"], "train/clip_frac")
        decision.append((cell, working, separates, diff, ratio, clip, best_gain))
    print(
        "| cell | beta | lr | steps/gen | method | seeds | pass@1 % | pass@8 % | entropy (eval) | "
        "entropy (train, last) | clip % | tail share % |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    print("\n".join(rows))
    print(
        "\n| cell | best gain over warm start (points) | working | Band-KL - GRPO pass@1 (points) | "
        "entropy ratio Band/GRPO | GRPO clip % | separates |"
    )
    print("|---|---|---|---|---|---|---|")
    for cell, working, separates, diff, ratio, clip, gain in decision:
        print(
            f"| {cell} | {gain * 100:+.1f} | {'yes' if working else 'no'} | {diff * 100:+.1f} | {ratio:.2f} | "
            f"{clip * 100:.2f} | {'yes' if separates else 'no'} |"
        )
    sep = [d for d in decision if d[2]]
    if sep:
        on_acc = [d for d in sep if abs(d[3]) >= SEPARATION]
        chosen = (
            max(on_acc, key=lambda d: abs(d[3])) if on_acc else max(sep, key=lambda d: max(d[4], 1 / d[4]))
        )
        why = "separating cell with the largest |pass@1 difference|" if on_acc else "largest entropy ratio"
    else:
        working = [d for d in decision if d[1]]
        if not working:
            print(
                f"grid_summary.py: no working cell under {root} (rule 1: a method {100 * WORKING_GAIN:g} points of "
                "pass@1 above the warm start, in a cell where GRPO and Band-KL both ran): no decision",
                file=sys.stderr,
            )
            return 1
        chosen = max(working, key=lambda d: d[5])
        why = "no cell separates: the working cell with the highest GRPO clip rate"
    print(f"\ndecision: cell {chosen[0]} ({why})")
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1] if len(sys.argv) > 1 else "studies/study1/results/grid")))
