"""Study 5's reuse check: does the code at this commit reproduce Study 4's GRPO and Band-KL runs bit for bit?

Study 5 reuses Study 4's GRPO and Band-KL runs only if the registration's commit reproduces their first steps on
the same kind of machine (docs/study.md, Study 5). For each (method, seed) this starts the study's run afresh
(``bandpo compare --config studies/study4/config.yaml --methods METHOD seeds=[SEED] baseline=false``, one thread),
waits until its training log holds ``--steps`` rows, stops it, and compares every logged value of those rows with
the same rows of Study 4's export (``studies/study4/results/runs/METHOD/seedSEED/metrics.jsonl.gz``), leaving out
timings (keys ending in ``time``, ``runtime``, ``per_second``, ``_s``) and the keys this commit adds
(``side/...``), and the step-0 row of the held-out curve (``heldout.jsonl``). Two runs side by side.

    .venv/bin/python studies/study5/reproduce.py --pairs grpo:429 band-kl:429 grpo:410 band-kl:410 \\
        --steps 32 --json studies/study5/reproduce.json

Exit status 0 when every compared value is identical; 1 otherwise (the differing keys are printed).
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import platform
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
# Study 4's export and config: in its folder here, where the study's own commits (083dcc6) keep them otherwise
EXPORT = next(
    (
        p
        for p in (ROOT / "studies" / "study4" / "results", ROOT / "docs" / "results" / "study4")
        if p.is_dir()
    ),
    ROOT / "studies" / "study4" / "results",
)
CONFIG = next(
    (
        p
        for p in (ROOT / "studies" / "study4" / "config.yaml", ROOT / "configs" / "study" / "study4.yaml")
        if p.is_file()
    ),
    ROOT / "studies" / "study4" / "config.yaml",
)
TIMING_ENDINGS = ("time", "runtime", "per_second", "_s")
NEW_PREFIXES = ("side/",)


def comparable(row: dict[str, Any]) -> dict[str, Any]:
    """A logged row without timings and without the keys this commit adds."""
    return {
        k: v
        for k, v in row.items()
        if not (k.endswith(TIMING_ENDINGS) or "wall" in k or k.startswith(NEW_PREFIXES))
    }


def read_rows(path: Path) -> list[dict[str, Any]]:
    text = gzip.decompress(path.read_bytes()).decode() if path.suffix == ".gz" else path.read_text()
    rows = []
    for line in text.splitlines():
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:  # a torn last line of a stopped run
            continue
    return [r for r in rows if "train_runtime" not in r and r.get("step") is not None]


def differences(got: list[dict[str, Any]], want: list[dict[str, Any]]) -> list[str]:
    """Every (step, key) whose value differs, or that one side lacks, over the rows of ``got``."""
    out = []
    by_step = {int(r["step"]): comparable(r) for r in want}
    for row in got:
        step, mine = int(row["step"]), comparable(row)
        theirs = by_step.get(step)
        if theirs is None:
            out.append(f"step {step}: not in the export")
            continue
        for key in sorted(set(mine) | set(theirs)):
            if mine.get(key, "<absent>") != theirs.get(key, "<absent>"):
                out.append(
                    f"step {step} {key}: now {mine.get(key, '<absent>')!r}, export {theirs.get(key, '<absent>')!r}"
                )
    return out


def start(method: str, seed: int, out: Path) -> subprocess.Popen:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT / "src")}
    cmd = [sys.executable, "-m", "bandpo_lab.cli.main", "compare", "--config", str(CONFIG), "--methods", method,
           "--no-progress", f"output_dir={out}", f"seeds=[{seed}]", "baseline=false"]  # fmt: skip
    log = (out.parent / f"{method}-{seed}.log").open("w")
    return subprocess.Popen(
        cmd, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
    )


def wait_for(proc: subprocess.Popen, log: Path, steps: int, timeout: float) -> list[dict[str, Any]]:
    """The first ``steps`` rows of the run's training log, then the run is stopped (its process group)."""
    deadline = time.monotonic() + timeout
    rows: list[dict[str, Any]] = []
    try:
        while time.monotonic() < deadline and proc.poll() is None:
            if log.is_file():
                rows = read_rows(log)
                if len(rows) >= steps:
                    break
            time.sleep(5)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=60)
    return rows[:steps]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--pairs", nargs="+", required=True, help="METHOD:SEED, e.g. grpo:429 (two run at once)"
    )
    parser.add_argument(
        "--steps", type=int, default=32, help="training steps compared (default 32: two rounds)"
    )
    parser.add_argument(
        "--timeout", type=float, default=1800, help="seconds a run may take to log --steps rows"
    )
    parser.add_argument("--json", type=Path, help="write the outcome here")
    args = parser.parse_args(argv)
    pairs = [(p.split(":")[0], int(p.split(":")[1])) for p in args.pairs]
    results = []
    with tempfile.TemporaryDirectory(prefix="study5-reproduce-") as tmp:
        for i in range(0, len(pairs), 2):
            batch = pairs[i : i + 2]
            procs = []
            for method, seed in batch:
                out = Path(tmp) / f"{method}-{seed}" / "out"
                out.parent.mkdir(parents=True)
                procs.append((method, seed, out, start(method, seed, out)))
            for method, seed, out, proc in procs:
                log = out / "runs" / method / f"seed{seed}" / "metrics.jsonl"
                rows = wait_for(proc, log, args.steps, args.timeout)
                export = EXPORT / "runs" / method / f"seed{seed}"
                diffs = differences(rows, read_rows(export / "metrics.jsonl.gz"))
                if len(rows) < args.steps:
                    diffs.insert(0, f"only {len(rows)} of {args.steps} rows were logged")
                held_now = out / "runs" / method / f"seed{seed}" / "heldout.jsonl"
                if held_now.is_file():
                    first = [comparable(json.loads(x)) for x in held_now.read_text().splitlines()[:1]]
                    want = [
                        comparable(json.loads(x))
                        for x in (export / "heldout.jsonl").read_text().splitlines()[:1]
                    ]
                    if first != want:
                        diffs.append(f"heldout step 0: now {first}, export {want}")
                else:
                    diffs.append("no held-out row at step 0")
                n_values = sum(len(comparable(r)) for r in rows)
                results.append({"method": method, "seed": seed, "steps": len(rows), "values": n_values,
                                "differences": diffs})  # fmt: skip
                status = "identical" if not diffs else f"{len(diffs)} difference(s)"
                print(f"{method} seed {seed}: {len(rows)} steps, {n_values} values compared: {status}")
                for d in diffs[:20]:
                    print("   ", d)
    outcome = {
        "results": results,
        "machine": platform.processor() or platform.machine(),
        "cpu_flags": sorted({f for f in Path("/proc/cpuinfo").read_text().split() if "bf16" in f})
        if Path("/proc/cpuinfo").is_file()
        else [],
        "identical": all(not r["differences"] for r in results),
    }
    if args.json:
        args.json.write_text(json.dumps(outcome, indent=1) + "\n")
    return 0 if outcome["identical"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
