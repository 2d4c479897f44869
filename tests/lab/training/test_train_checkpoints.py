"""Tests for ``bandpo_lab.training.checkpoints``: a checkpoint a kill left half-written is skipped, not resumed from.

The checkpoints are written by ``train_helpers.fake_checkpoint`` with the files and formats transformers writes
(safetensors weights, ``torch.save`` archives, ``trainer_state.json``); the end-to-end resume past a broken
checkpoint is in ``tests/lab/cli/test_train.py``.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import pytest
from train_helpers import fake_checkpoint, truncate

from helpers import CONFIGS

pytest.importorskip("trl")

from bandpo_lab.training.checkpoints import safetensors_problem, scan_checkpoints
from bandpo_lab.training.config import load_train_config
from bandpo_lab.training.run import last_checkpoint, prepare


def only_config_json(path: Path) -> None:  # what the issue found after SIGKILL during a save
    for child in path.iterdir():
        if child.name != "config.json":
            child.unlink()


def _torn_scaler(path: Path) -> None:  # fp16 mixed precision's grad scaler, saved beside the optimizer
    import torch

    torch.save({"scale": 65536.0}, path / "scaler.pt")
    truncate(path / "scaler.pt")


BREAKS: dict[str, tuple[Callable[[Path], None], str]] = {
    "only config.json": (only_config_json, r"no trainer_state.json"),
    "no trainer state": (lambda p: (p / "trainer_state.json").unlink(), r"no trainer_state.json"),
    "torn trainer state": (lambda p: truncate(p / "trainer_state.json"), r"trainer_state.json is truncated"),
    "truncated weights": (lambda p: truncate(p / "model.safetensors", -4), r"model.safetensors is truncated"),
    "weights cut in the header": (lambda p: truncate(p / "model.safetensors", 5), r"model.safetensors is"),
    "no weights": (lambda p: (p / "model.safetensors").unlink(), r"no model weights"),
    "truncated optimizer": (lambda p: truncate(p / "optimizer.pt"), r"optimizer.pt is truncated"),
    "no scheduler": (lambda p: (p / "scheduler.pt").unlink(), r"no scheduler state"),
    "truncated rng state": (lambda p: truncate(p / "rng_state.pth"), r"rng_state.pth is truncated"),
    "truncated grad scaler": (_torn_scaler, r"scaler.pt is truncated"),
}


def test_a_complete_checkpoint_passes(tmp_path: Path) -> None:
    path = fake_checkpoint(tmp_path, 4)
    scan = scan_checkpoints(tmp_path)
    assert (scan.latest, scan.step, scan.skipped) == (path, 4, [])
    assert safetensors_problem(path / "model.safetensors") is None


@pytest.mark.parametrize("case", list(BREAKS))
def test_resume_skips_an_incomplete_newest_checkpoint(case: str, tmp_path: Path) -> None:
    out = tmp_path / "out"
    fake_checkpoint(out, 2)
    fake_checkpoint(out, 4)
    broken = fake_checkpoint(out, 6)
    damage, reason = BREAKS[case]
    damage(broken)

    scan = scan_checkpoints(out)
    assert scan.latest == out / "checkpoint-4" and scan.step == 4 and scan.any_found
    assert [p.name for p, _ in scan.skipped] == ["checkpoint-6"]
    assert re.search(reason, scan.skipped[0][1]), scan.skipped[0][1]
    assert last_checkpoint(out) == out / "checkpoint-4"


def test_prepare_resumes_from_the_newest_complete_checkpoint(tmp_path: Path) -> None:
    out = tmp_path / "out"
    fake_checkpoint(out, 2)
    only_config_json(fake_checkpoint(out, 3))
    truncate(fake_checkpoint(out, 4) / "model.safetensors", -4)
    config = load_train_config(CONFIGS / "tiny.yaml", [f"output_dir={out}", "report_to=none"])
    prepared = prepare(config, resume=True)
    assert prepared.resume_from == out / "checkpoint-2"
    assert prepared.resume_plan is not None
    assert [p.name for p, _ in prepared.resume_plan.scan.skipped] == ["checkpoint-4", "checkpoint-3"]


def test_no_complete_checkpoint_means_a_fresh_start(tmp_path: Path) -> None:
    out = tmp_path / "out"
    only_config_json(fake_checkpoint(out, 2))
    scan = scan_checkpoints(out)
    assert scan.latest is None and scan.any_found and len(scan.skipped) == 1
    config = load_train_config(CONFIGS / "tiny.yaml", [f"output_dir={out}", "report_to=none"])
    assert prepare(config, resume=True).resume_from is None
    assert scan_checkpoints(tmp_path / "missing").latest is None


def test_safetensors_header_garbage(tmp_path: Path) -> None:
    path = tmp_path / "model.safetensors"
    path.write_bytes((4).to_bytes(8, "little") + b"{{{{")
    assert "unreadable header" in (safetensors_problem(path) or "")


def test_resume_past_garbage_weights_says_they_are_not_a_safetensors_file(tmp_path: Path) -> None:
    """``model.safetensors`` holding 8 bytes of text was "truncated (8 bytes, its header alone needs
    749118580988207471)"."""
    path = tmp_path / "model.safetensors"
    path.write_bytes(b"oarbage\n")
    assert safetensors_problem(path) == (
        "model.safetensors is not a safetensors file (8 bytes): its first 8 bytes give a header length of "
        "749118580988207471, larger than the file"
    )
    path.write_bytes((4).to_bytes(8, "little") + b"abcd")
    assert safetensors_problem(path) == (
        "model.safetensors is not a safetensors file (12 bytes): its header starts with b'a', not with the '{' of "
        "a JSON object"
    )
    path.write_bytes((40).to_bytes(8, "little") + b'{"a": ')  # a real header, cut: truncated
    assert safetensors_problem(path) == "model.safetensors is truncated (14 bytes, its header alone needs 48)"
