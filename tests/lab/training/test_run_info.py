"""Tests for bandpo_lab.training.run_info, the one writer of run_info.json (no model is loaded; the resumed-run history
is tested through bandpo_lab.training.run in test_train_run.py)."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

from bandpo_lab.training.layout import RUN_INFO_FILE
from bandpo_lab.training.run_info import mark_finished, record_run_info


def test_records_add_keys_and_mark_finished_keeps_the_rest(tmp_path: Path) -> None:
    path = tmp_path / RUN_INFO_FILE
    path.write_text(json.dumps({"model_path": "m", "provenance": {"commit": "a" * 40, "dirty": False}}))
    record_run_info(tmp_path, precision={"name": "bf16"})
    mark_finished(tmp_path, 12, SimpleNamespace(max_steps=12, num_train_epochs=3.0))
    info = json.loads(path.read_text())
    assert info["model_path"] == "m" and info["precision"] == {"name": "bf16"}
    finished = info["finished"]
    assert (finished["global_step"], finished["max_steps"], finished["num_train_epochs"]) == (12, 12, 3.0)
    assert "checkout_changed_during_run" in finished  # compared with the code recorded at the start
    assert not list(tmp_path.glob("*.tmp"))  # written through a temporary file, replaced atomically


def test_a_missing_or_torn_file_starts_a_new_record(tmp_path: Path) -> None:
    record_run_info(tmp_path, precision="float32")
    assert json.loads((tmp_path / RUN_INFO_FILE).read_text()) == {"precision": "float32"}
    (tmp_path / RUN_INFO_FILE).write_text('{"precision": ')
    mark_finished(tmp_path, 3, SimpleNamespace(max_steps=3, num_train_epochs=1.0))
    info = json.loads((tmp_path / RUN_INFO_FILE).read_text())
    assert set(info) == {"finished"} and "checkout_changed_during_run" not in info["finished"]
