"""Study 4's pilot (P4-P6, docs/study.md): the paired differences Band-KL - GRPO of candidate primary outcomes,
read from the pilot's exports, with their standard deviation (the input of scripts/power.py).

    .venv/bin/python studies/study4/pilot_outcomes.py

Outcomes: ``final`` the final held-out mean@8 (200 problems x 8); ``curve 120+160`` the mean of the held-out curve's
mean@2 (100 problems x 2) at steps 120 and 160; ``curve 120 + final`` the mean of the curve at step 120 and the
final mean@8: the nearest the pilot has to the registered late mean (evaluations at steps 120, 140 and the final
one, each 200 problems x 8), which it did not measure.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

ROOT = Path(__file__).resolve().parent / "pilot"
PILOTS = {"p4": 402, "p5": 403, "p6": 404}


def run(pilot: str, label: str, seed: int) -> tuple[dict[int, float], float]:
    run_dir = ROOT / pilot / "runs" / label / f"seed{seed}"
    curve = {}
    for line in (run_dir / "heldout.jsonl").read_text().splitlines():
        row = json.loads(line)
        curve[int(row["step"])] = 100 * row["mean@2"]
    final = 100 * json.loads((run_dir / "results.json").read_text())["metrics"]["mean@8"]
    return curve, final


def outcomes(pilot: str, seed: int, label: str) -> dict[str, float]:
    curve, final = run(pilot, label, seed)
    return {
        "final": final,
        "curve 120+160": (curve[120] + curve[160]) / 2,
        "curve 120 + final": (curve[120] + final) / 2,
    }


def main() -> None:
    diffs: dict[str, list[float]] = {}
    for pilot, seed in PILOTS.items():
        grpo, band = outcomes(pilot, seed, "grpo"), outcomes(pilot, seed, "band-kl")
        cells = []
        for key in grpo:
            d = band[key] - grpo[key]
            diffs.setdefault(key, []).append(d)
            cells.append(f"{key}: {grpo[key]:.2f} / {band[key]:.2f} ({d:+.2f})")
        print(f"{pilot} seed {seed} (GRPO / Band-KL): " + "; ".join(cells))
    for key, values in diffs.items():
        print(
            f"{key}: differences {', '.join(f'{d:+.2f}' for d in values)}; mean {statistics.fmean(values):+.2f}, "
            f"sd {statistics.stdev(values):.2f} points ({len(values) - 1} degrees of freedom)"
        )


if __name__ == "__main__":
    main()
