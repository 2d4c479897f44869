"""Study 5's sensitivity check for runs resumed inside a generation round (README, "Addition"), after the 72nd run:

    .venv/bin/python studies/study5/sensitivity.py studies/study5/results --config studies/study5/config.yaml \\
        --json studies/study5/results/sensitivity.json
    .venv/bin/python studies/study5/sensitivity.py studies/study5/results --list   # the runs alone, no metric

A run samples a round of completions every :data:`ROUND` optimizer steps (steps 1, 17, ..., 145: ten rounds). A run
resumed from a checkpoint inside a round (checkpoint-40 or checkpoint-120) samples a fresh round there and has 11
rounds, two of them short. Each run's rounds are read from its training log (a logged step with
``completions/mean_length`` sampled a round; a drop of ``elapsed_s`` is where a call resumed), beside
``run_info.json``'s ``resumed_from`` (the last resume's checkpoint) and its number of earlier calls. A run whose
rounds are not the uninterrupted ones is listed; the two primary contrasts are then repeated by the registered
:func:`analysis.analyse` on a copy of the results without those runs' seeds (every rule's run of such a seed: the
contrasts are paired). ``--list`` prints the runs and their rounds only, no outcome: it may run while the study
does. The registered contrasts stay the primary result; this is a check of them.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

from bandpo_lab._files import read_json_object, read_jsonl
from bandpo_lab.experiments.report.runs import run_folder_seed

_spec = importlib.util.spec_from_file_location(
    "study5_analysis", Path(__file__).resolve().parent / "analysis.py"
)
assert _spec is not None and _spec.loader is not None
_analysis = importlib.util.module_from_spec(_spec)
sys.modules["study5_analysis"] = _analysis
_spec.loader.exec_module(_analysis)
PRIMARY, analyse, run_dirs = _analysis.PRIMARY, _analysis.analyse, _analysis.run_dirs

ROUND = 16
"""Optimizer steps per generation round in Study 5's config: ``steps_per_generation`` 8 times
``num_iterations`` 2 (each round's completions used twice)."""


def rounds(run_dir: Path) -> dict[str, Any]:
    """The generation rounds of one run from its training log: ``sampled`` (the steps that sampled a round),
    ``resumed_at`` (the first step of each later call, where ``elapsed_s`` drops), ``last_step``, and from
    ``run_info.json`` ``resumed_from`` and ``calls`` (how many calls trained it)."""
    rows = [
        r
        for r in read_jsonl(run_dir / "metrics.jsonl")
        if r.get("step") is not None and "train_runtime" not in r
    ]
    sampled = [int(r["step"]) for r in rows if "completions/mean_length" in r]
    resumed_at = [
        int(rows[i]["step"])
        for i in range(1, len(rows))
        if float(rows[i].get("elapsed_s", 0.0)) < float(rows[i - 1].get("elapsed_s", 0.0))
    ]
    info = read_json_object(run_dir / "run_info.json")
    last = max((int(r["step"]) for r in rows), default=0)
    return {
        "sampled": sampled,
        "resumed_at": resumed_at,
        "last_step": last,
        "resumed_from": info.get("resumed_from"),
        "calls": 1 + len(info.get("provenance_earlier") or []),
        "off_grid": sampled != list(range(1, last + 1, ROUND)),
    }


def resumed_inside_a_round(results: Path) -> dict[tuple[str, int], dict[str, Any]]:
    """Every finished run of ``results`` whose rounds are not the uninterrupted ones, with its :func:`rounds`."""
    out = {}
    for key, run_dir in sorted(run_dirs([results]).items()):
        r = rounds(run_dir)
        if r["off_grid"]:
            out[key] = r
    return out


def without_seeds(results: Path, seeds: set[int], dest: Path) -> Path:
    """A copy of ``results`` (an export or output directory) in ``dest`` without the run folders of ``seeds``, every
    rule's (models, if any, are not copied)."""

    def ignore(folder: str, names: list[str]) -> set[str]:
        here = Path(folder)
        dropped = {n for n in names if here.parent.name == "runs" and run_folder_seed(here / n) in seeds}
        return dropped | {n for n in names if n.endswith(".safetensors") or n.startswith("checkpoint-")}

    shutil.copytree(results, dest, ignore=ignore)
    return dest


def check(results: Path, config: Path | None) -> dict[str, Any]:
    """The listed runs, the seeds left out, and :func:`analysis.analyse` of the rest (its ``primary`` and
    ``decisions`` are the sensitivity check)."""
    listed = resumed_inside_a_round(results)
    seeds = {seed for _, seed in listed}
    with tempfile.TemporaryDirectory() as tmp:
        result = analyse([without_seeds(results, seeds, Path(tmp) / "results")], config)
    return {
        "runs": [{"label": label, "seed": seed, **r} for (label, seed), r in listed.items()],
        "seeds_left_out": sorted(seeds),
        "primary": result["primary"],
        "decisions": result["decisions"],
    }


def _describe(label: str, seed: int, r: dict[str, Any]) -> str:
    return (
        f"{label} seed {seed}: {len(r['sampled'])} rounds sampled at steps {r['sampled']}; resumed at step(s) "
        f"{r['resumed_at'] or 'none'} ({r['calls']} calls; run_info's resumed_from: {r['resumed_from']})"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("results", type=Path, help="the study's export or output directory")
    parser.add_argument("--config", type=Path, help="the study's compare config (its methods and seeds)")
    parser.add_argument("--json", type=Path, help="also write the numbers as JSON here")
    parser.add_argument(
        "--list", action="store_true", help="list the runs resumed inside a round; no outcome"
    )
    args = parser.parse_args(argv)
    if not (args.results / "runs").is_dir():
        print(f"study5_sensitivity: error: {args.results} holds no runs/ folder", file=sys.stderr)
        return 2
    if args.list:
        listed = resumed_inside_a_round(args.results)
        for (label, seed), r in listed.items():
            print(_describe(label, seed, r))
        print(f"{len(listed)} runs resumed inside a round; seeds {sorted({s for _, s in listed})}")
        return 0
    result = check(args.results, args.config)
    for r in result["runs"]:
        print(_describe(r["label"], r["seed"], r))
    print(f"without seeds {result['seeds_left_out']} (every rule's run of each):")
    for label in PRIMARY:
        print("  " + result["decisions"][label])
    if args.json:
        args.json.write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
