"""Tests for ``bandpo._files``: the atomic JSON writer and the tolerant readers."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from bandpo._files import read_json_object, write_json


def test_write_json_replaces_the_file_in_one_step(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A failure before the rename leaves the earlier file whole: the data goes to ``<name>.tmp`` first."""
    path = tmp_path / "results.json"
    write_json(path, {"a": 1, "path": tmp_path})  # default=str: a Path is written as its text
    assert json.loads(path.read_text()) == {"a": 1, "path": str(tmp_path)}

    def killed(src: str, dst: str) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(os, "replace", killed)
    with pytest.raises(KeyboardInterrupt):
        write_json(path, {"a": 2})
    assert read_json_object(path) == {"a": 1, "path": str(tmp_path)}
    assert json.loads((tmp_path / "results.json.tmp").read_text()) == {"a": 2}
