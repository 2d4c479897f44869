"""Tests for ``bandpo_lab.training.callbacks``: the metrics.jsonl writer (fresh run, resume truncation, values) and
the compact progress line."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

pytest.importorskip("transformers")

from transformers import TrainerControl, TrainerState, TrainingArguments

from bandpo.integrations.trl_progress import CompactProgressCallback
from bandpo_lab.training.callbacks import MetricsJSONLCallback, read_metrics


def state(step: int, main: bool = True) -> TrainerState:
    s = TrainerState(global_step=step)
    s.is_world_process_zero = main
    return s


def log_steps(cb: MetricsJSONLCallback, args: TrainingArguments, steps: range) -> None:
    for step in steps:
        cb.on_log(args, state(step), TrainerControl(), logs={"loss": float(step), "clip/frac": 0.0})


def test_fresh_run_then_resume_keeps_each_step_once(tmp_path: Path) -> None:
    args = TrainingArguments(output_dir=str(tmp_path), report_to="none", use_cpu=True)
    path = tmp_path / "metrics.jsonl"
    path.write_text('{"step": 9, "loss": 1.0}\n')  # an earlier, unrelated run
    cb = MetricsJSONLCallback(path)
    cb.on_train_begin(args, state(0), TrainerControl())
    log_steps(cb, args, range(1, 6))  # crash after logging step 5; the last checkpoint is step 4
    with path.open("a") as f:
        f.write('{"step": 6, "lo')  # torn line of a killed process
    assert [r["step"] for r in read_metrics(path)] == [1, 2, 3, 4, 5]

    resumed = MetricsJSONLCallback(path)
    resumed.on_train_begin(args, state(4), TrainerControl())
    assert [r["step"] for r in read_metrics(tmp_path)] == [1, 2, 3, 4]
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.endswith("jsonl") or "tmp" in p.name) == [
        "metrics.jsonl"
    ]  # rewritten atomically, no temporary file left
    (tmp_path / "plain.txt").write_text("")
    assert (
        path.stat().st_mode & 0o777 == (tmp_path / "plain.txt").stat().st_mode & 0o777
    )  # not mkstemp's 0600
    log_steps(resumed, args, range(5, 8))
    rows = read_metrics(path)
    assert [r["step"] for r in rows] == [1, 2, 3, 4, 5, 6, 7]
    assert all(r["loss"] == r["step"] and "time" in r and "elapsed_s" in r for r in rows)


def test_values_are_plain_json_and_only_the_main_process_writes(tmp_path: Path) -> None:
    import torch

    args = TrainingArguments(output_dir=str(tmp_path), report_to="none", use_cpu=True)
    path = tmp_path / "m.jsonl"
    cb = MetricsJSONLCallback(path)
    cb.on_train_begin(args, state(0), TrainerControl())
    cb.on_log(
        args, state(1), TrainerControl(), logs={"a": math.nan, "b": torch.tensor(2.5), "c": None, "d": "x"}
    )
    cb.on_log(args, state(2, main=False), TrainerControl(), logs={"a": 1.0})
    lines = path.read_text().splitlines()
    assert len(lines) == 1
    row = json.loads(lines[0])  # strict JSON: no NaN
    assert (row["a"], row["b"], row["c"], row["d"], row["step"]) == (None, 2.5, None, "x", 1)


def test_compact_progress_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = TrainingArguments(output_dir=str(tmp_path), report_to="none", use_cpu=True)
    cb = CompactProgressCallback()
    s = state(0)
    s.max_steps = 10
    cb.on_train_begin(args, s, TrainerControl())
    logs = {
        "loss": 0.123456,
        "reward": 0.5,
        "clip/frac": 0.01,
        "band/hi_mean": 2.0,
        "rewards/x/failures": 3.0,
    }
    cb.on_log(args, state(3), TrainerControl(), logs=logs)
    # an evaluation's log (eval_strategy): transformers' bar printed it, the compact line had dropped it
    cb.on_log(
        args,
        state(4),
        TrainerControl(),
        logs={"eval_loss": 0.25, "eval_reward": 0.75, "eval_band/hi_mean": 2},
    )
    cb.on_train_end(args, s, TrainerControl())
    out = capsys.readouterr()
    text = out.out + out.err
    assert "step 3 | loss 0.1235 | reward 0.5 | clip/frac 0.01 | rewards/x/failures 3" in text
    assert "eval at step 4 | eval_loss 0.25 | eval_reward 0.75" in text
    assert "band/hi_mean" not in text
