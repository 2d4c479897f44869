"""Tests for ``bandpo_lab.plots``: the mark every figure carries where its format keeps it."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("matplotlib")

from bandpo._optional import pyplot
from bandpo_lab.plots import MARKED_FORMATS, is_bandpo_figure, save_figure


@pytest.mark.parametrize("fmt", [*MARKED_FORMATS, "jpg"])
def test_a_saved_figure_is_recognised_where_its_format_keeps_the_mark(tmp_path: Path, fmt: str) -> None:
    path = tmp_path / f"fig.{fmt}"
    save_figure(pyplot().figure(figsize=(1, 1)), path, dpi=20)
    assert path.stat().st_size > 0
    assert is_bandpo_figure(path) == (fmt in MARKED_FORMATS)  # jpg keeps no metadata: never replaced


def test_other_files_are_not_bandpo_figures(tmp_path: Path) -> None:
    (tmp_path / "notes.png").write_bytes(b"\x89PNG\r\n\x1a\n a user's picture")
    assert not is_bandpo_figure(tmp_path / "notes.png")
    assert not is_bandpo_figure(tmp_path / "missing.png")
