"""A short training run with and without eager attention's float32 cache copies (``bandpo_lab.bf16_attention``): the same
run, bit for bit?

Runs ``bandpo train`` twice, each in a fresh process at one thread, with the given config and overrides (the copies
are installed where bf16 is emulated, during the rollouts' sampling and any evaluation; the first run removes them,
as the code was before them), then compares the two training logs row by row (every value but the timings) and the
saved weights byte for byte. Prints how many attention calls each run computed from the copies (none without
them) and what differs; exit 1 if anything does, 0 if the two runs are the same. Where
this CPU has native bf16 nothing is emulated and there is nothing to compare (exit 0 with a line that says so).

    # Study 4's training section (its config and overrides), 2 optimizer steps: one generation round of 64
    .venv/bin/python studies/study4/train_attention_check.py --out runs/attention-check \\
        --compare-config studies/study4/config.yaml -- max_steps=2 save_steps=40

``--compare-config`` takes the ``train`` section of a ``bandpo compare`` config (its ``config`` and ``overrides``)
and the arguments after ``--`` are added to it; without it, the arguments after ``--`` are ``bandpo train``'s
(``--config ...`` and overrides). With ``PYTHONPATH=<a checkout>/src`` it checks that checkout's code (Study 4's:
docs/study.md).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

CHILD = """
import contextlib, json, sys
from unittest import mock
from bandpo_lab.bf16_attention import EagerAttentionCopies
from bandpo_lab.cli.main import main
from bandpo_lab.runtime import Precision
if sys.argv[1] == "off":  # Precision.sampling as before bandpo_lab.bf16_attention
    mock.patch.object(Precision, "_attention", lambda self: contextlib.nullcontext()).start()
made = []
init = EagerAttentionCopies.__init__
def counted(self):
    init(self)
    made.append(self)
EagerAttentionCopies.__init__ = counted
code = main(sys.argv[2:])
counts = {"calls": sum(m.calls for m in made), "fallbacks": sum(m.fallbacks for m in made)}
with open(sys.argv[-1].split("=", 1)[1] + "/attention_copies.json", "w") as f:
    json.dump(counts, f)
sys.exit(code)
"""
TIMING_ENDINGS = ("time", "runtime", "per_second", "_s")
"""Endings of the keys that hold timings (``time``, ``step_time``, ``train_runtime``, ``train_samples_per_second``,
``elapsed_s``), left out of the comparison with any key containing ``wall``; endings, not substrings, so that
``reward_std`` and ``clip/tail_share`` are compared."""


def is_timing(key: str) -> bool:
    return key.endswith(TIMING_ENDINGS) or "wall" in key


def _rows(path: Path) -> list[dict[str, Any]]:
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return [{k: v for k, v in row.items() if not is_timing(k)} for row in rows]


def _weights(run: Path) -> dict[str, str]:
    return {
        str(p.relative_to(run)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(run.rglob("*.safetensors"))
        if "checkpoint-" not in str(p)
    }


def compare_train_args(path: Path) -> list[str]:
    """``bandpo train`` arguments for the ``train`` section of the compare config ``path``: ``--config`` (relative
    to ``path``'s folder) and one ``key=value`` per override (strings as they are, other values in YAML's flow style)."""
    import yaml

    train = (yaml.safe_load(path.read_text()) or {}).get("train") or {}
    if "config" not in train:
        raise ValueError(f"{path}: no train.config")
    config = (path.parent / train["config"]).resolve()
    overrides = [
        f"{key}={value if isinstance(value, str) else json.dumps(value)}"
        for key, value in (train.get("overrides") or {}).items()
    ]
    return ["--config", str(config), *overrides]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="a new folder for the two runs")
    parser.add_argument(
        "--compare-config", type=Path, help="train with the train section of this bandpo compare config"
    )
    parser.add_argument(
        "train_args", nargs=argparse.REMAINDER, help="-- then bandpo train's arguments (or more overrides)"
    )
    args = parser.parse_args(argv)
    train_args = args.train_args[1:] if args.train_args[:1] == ["--"] else args.train_args
    if args.compare_config is not None:
        if not args.compare_config.is_file():
            parser.error(f"--compare-config {str(args.compare_config)!r} is not a file")
        try:
            train_args = compare_train_args(args.compare_config) + train_args
        except ValueError as err:
            parser.error(f"--compare-config: {err}")
    if not train_args:
        parser.error(
            "give the arguments of bandpo train after --, e.g. -- --config configs/smollm2-arith.yaml"
        )
    if args.out.exists():
        parser.error(f"--out {str(args.out)!r} exists: give a new folder")

    from bandpo_lab.runtime import resolve_precision

    precision = resolve_precision("bf16")
    if not precision.emulated:
        print(f"bf16 is not emulated on this CPU ({precision.reason}): no copies to compare")
        return 0
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    for variant in ("off", "on"):
        run = args.out / variant
        print(f"training with the copies {variant} -> {run}", file=sys.stderr, flush=True)
        cmd = [sys.executable, "-c", CHILD, variant, "train", *train_args, f"output_dir={run}"]
        done = subprocess.run(cmd, env=env, check=False)
        if done.returncode != 0:
            print(f"train_attention_check: error: the run with the copies {variant} exited {done.returncode}")
            return 2
    off, on = (args.out / v for v in ("off", "on"))
    logs = sorted(p.relative_to(off) for p in off.rglob("metrics.jsonl"))
    if not logs:
        print(f"train_attention_check: error: no metrics.jsonl under {off}")
        return 2
    counts = {v: json.loads((args.out / v / "attention_copies.json").read_text()) for v in ("off", "on")}
    for variant, c in counts.items():
        print(
            f"copies {variant}: {c['calls']} attention calls computed from them, {c['fallbacks']} handed back"
        )
    same = counts["on"]["calls"] > 0 and counts["off"]["calls"] == 0  # else the comparison shows nothing
    for log in logs:
        a, b = _rows(off / log), _rows(on / log)
        differ = [i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y]
        ok = len(a) == len(b) and not differ
        same = same and ok
        print(f"{log}: {len(a)} and {len(b)} rows; rows that differ (timings left out): {differ or 'none'}")
    wa, wb = _weights(off), _weights(on)
    same = same and wa == wb and bool(wa)
    print(f"saved weights ({len(wa)} files): {'identical' if wa == wb else 'DIFFERENT'}")
    print(f"the two runs are the same: {same}")
    return 0 if same else 1


if __name__ == "__main__":
    raise SystemExit(main())
