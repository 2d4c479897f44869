"""studies/study1/grid_summary.py: the grid's tables and the registered decision rule; its checks of its input."""

from __future__ import annotations

import json

from helpers import load_script as _load


def test_grid_summary_without_a_working_cell_says_so(tmp_path, capsys) -> None:
    """max() of no working cell raised ValueError; a root that is not a directory printed empty tables first."""
    grid = _load("studies/study1/grid_summary.py")
    assert grid.main(tmp_path) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"grid_summary.py: no working cell under {tmp_path} ") and err.count("\n") == 1
    # a cell where GRPO and Band-KL ran but neither beat the warm start by 5 points: still no decision
    report = tmp_path / "A" / "report"
    report.mkdir(parents=True)
    metrics = {
        "pass@1": {"mean": 0.31},
        "train/entropy_last": {"mean": 1.0},
        "train/clip_frac": {"mean": 0.01},
    }
    methods = {label: {"seeds": [1], "metrics": metrics} for label in ("grpo", "band-kl")}
    (report / "results.json").write_text(
        json.dumps({"baseline": {"metrics": {"pass@1": 0.30}}, "methods": methods})
    )
    assert grid.main(tmp_path) == 1
    out = capsys.readouterr()
    assert "| A | +1.0 | no |" in out.out and "no working cell" in out.err
    assert grid.main(tmp_path / "missing") == 2
    assert capsys.readouterr().err == (
        f"grid_summary.py: error: ROOT must be a directory (one per cell, A-F), got '{tmp_path / 'missing'}'\n"
    )
