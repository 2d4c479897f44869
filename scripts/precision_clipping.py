"""Clipping in float32 and in bf16, side by side, over the recipe's first optimizer steps (docs/smollm2.md).

Trains configs/smollm2-arith.yaml for --steps optimizer steps with GRPO (0.2/0.2) and Band-KL (delta 0.05), each in
float32 and in bf16 (bandpo_lab.runtime), two runs at a time at one thread each, then prints per rule and precision:
the share of tokens outside their bounds (``clip/frac_out``), the clip fraction (``clip/frac``: clipped tokens with
a non-zero advantage), pooled over the off-policy steps (every second step: the first of each round has ratio
exactly 1) with the token counts behind each share, and the mean seconds per step.

    .venv/bin/python scripts/precision_clipping.py [--steps 24] [--out runs/precision-clipping]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

RULES = {"grpo": ["clip_rule=grpo"], "band-kl": ["clip_rule=band"]}
PRECISIONS = ("float32", "bf16")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=24)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=Path("runs/precision-clipping"))
    parser.add_argument("--table-only", action="store_true", help="tabulate existing runs")
    args = parser.parse_args(argv)
    if args.steps < 2:  # the off-policy steps are the 2nd of each round: 1 step has none to pool
        parser.error(
            f"--steps must be an integer >= 2 (the first off-policy step is step 2), got {args.steps}"
        )
    bandpo = str(Path(sys.executable).with_name("bandpo"))
    jobs = [(rule, precision) for rule in RULES for precision in PRECISIONS]
    if not args.table_only:
        env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
        for i in range(0, len(jobs), 2):
            procs = []
            for rule, precision in jobs[i : i + 2]:
                out = args.out / f"{rule}-{precision}"
                cmd = [
                    bandpo, "train", "--config", "configs/smollm2-arith.yaml", "--overwrite",
                    *RULES[rule], f"model.precision={precision}", f"max_steps={args.steps}", f"seed={args.seed}",
                    f"save_steps={10 * args.steps}", f"output_dir={out}", "disable_tqdm=true",
                ]  # fmt: skip
                out.mkdir(parents=True, exist_ok=True)
                log = (args.out / f"{rule}-{precision}.log").open("w")
                procs.append(subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env))
            for p in procs:
                if p.wait() != 0:
                    sys.exit(f"a run failed (exit {p.returncode}); see the logs in {args.out}")
    print(
        f"{args.steps} steps, seed {args.seed}; the off-policy steps (2nd of each round) pooled; tokens: about "
        "16 completions x the round's mean completion length per step; shares are means over those steps"
    )
    print(
        f"{'rule':<8} {'precision':<9} {'steps':>5} {'~tokens':>8} {'out of bounds':>14} {'clipped':>8} {'s/step':>7}"
    )
    for rule, precision in jobs:
        rows = [json.loads(line) for line in (args.out / f"{rule}-{precision}" / "metrics.jsonl").open()]
        steps = [r for r in rows if "clip/frac" in r and "step_time" in r]
        off = [r for r in steps if r["step"] % 2 == 0]
        if not off:  # --table-only on runs shorter than 2 steps
            sys.exit(
                f"{args.out / f'{rule}-{precision}'}: no off-policy step (2, 4, ...) logged: train >= 2 steps"
            )
        # a round's mean completion length is logged on its first step; the second step uses the same round
        length = {r["step"]: r.get("completions/mean_length") for r in steps}
        tokens = sum(16 * (length.get(r["step"] - 1) or 0) for r in off)
        frac_out = sum(r["clip/frac_out"] for r in off) / len(off)
        frac = sum(r["clip/frac"] for r in off) / len(off)
        later = steps[2:] or steps
        secs = sum(r["step_time"] for r in later) / len(later)
        print(
            f"{rule:<8} {precision:<9} {len(off):>5} {tokens:>8.0f} {100 * frac_out:>13.2f}% {100 * frac:>7.2f}% "
            f"{secs:>7.1f}"
        )


if __name__ == "__main__":
    main()
