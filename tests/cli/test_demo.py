"""`bandpo demo` (the README's main job) end to end through subprocess, on a tiny budget, rerun into a
directory an earlier demo left."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest


@pytest.mark.slow
def test_demo_runs_end_to_end(tmp_path: Path) -> None:
    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "BANDPO_CACHE_DIR": str(tmp_path / "cache"),
        "OMP_NUM_THREADS": "1",
    }
    out_dir = tmp_path / "demo"
    old_board = out_dir / "runs" / "Jan01_00-00-00_oldhost"  # left by an earlier demo: the rerun clears it
    old_board.mkdir(parents=True)
    (old_board / "events.out.tfevents.1.oldhost.0").write_bytes(b"old curves")
    (out_dir / "checkpoint-1000").mkdir()
    args = [
        "demo", "--output-dir", str(out_dir), "--k", "2", "--eval-problems", "10",
        "max_steps=4", "logging_steps=1", "save_steps=1000", "model.warm_start.max_steps=10",
    ]  # fmt: skip
    proc = subprocess.run(
        [sys.executable, "-m", "bandpo.cli.main", *args], capture_output=True, text=True, env=env, timeout=600
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "== bandpo demo: summary ==" in proc.stdout
    assert "pass@1  before" in proc.stdout and str(out_dir / "metrics.jsonl") in proc.stdout
    summary = json.loads((out_dir / "demo_summary.json").read_text())
    assert summary["before"]["n_problems"] == summary["after"]["n_problems"] == 10
    assert "clip_frac" in summary["training"]
    rows = [json.loads(line) for line in (out_dir / "metrics.jsonl").read_text().splitlines()]
    assert any("clip/frac" in r for r in rows)
    assert not old_board.exists() and not (out_dir / "checkpoint-1000").exists()
    assert len(list(out_dir.glob("runs/*/events.out.tfevents.*"))) == 1  # this run's curves only


@pytest.mark.slow
def test_demo_on_the_real_model(tmp_path: Path, smollm2_dir: Path) -> None:
    """`bandpo demo --model smollm2-135m` on a one-step budget: the converted model from the cache, the arith task,
    evaluations before and after."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    out_dir = tmp_path / "demo-llm"
    args = [
        "demo", "--model", "smollm2-135m", "--steps", "1", "--k", "2", "--eval-problems", "2",
        "--output-dir", str(out_dir), "logging_steps=1",
    ]  # fmt: skip
    proc = subprocess.run(
        [sys.executable, "-m", "bandpo.cli.main", *args], capture_output=True, text=True, env=env, timeout=900
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "[1/4] model smollm2-135m" in proc.stdout and "== bandpo demo: summary ==" in proc.stdout
    summary = json.loads((out_dir / "demo_summary.json").read_text())
    assert summary["before"]["n_problems"] == summary["after"]["n_problems"] == 2
    config = (out_dir / "train_config.yaml").read_text()
    assert "path: smollm2-135m" in config and "task: arith" in config and "max_steps: 1" in config


def test_demo_bad_numbers_are_one_line(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "bandpo.cli.main", "demo", "--model", "smollm2-135m", "--steps", "0"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 2
    assert proc.stderr.strip() == "bandpo demo: error: --steps must be an integer >= 1, got 0"


@pytest.mark.parametrize(("flag", "value"), [("--k", "0"), ("--eval-problems", "0")])
def test_demo_zero_counts_are_refused_not_read_as_unset(
    flag: str, value: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from bandpo.cli.main import main

    assert main(["demo", flag, value, "--output-dir", str(tmp_path / "d")]) == 2
    assert capsys.readouterr().err.strip() == f"bandpo demo: error: {flag} must be an integer >= 1, got 0"
