"""Tests for bandpo.experiments.compare.worker's late mean (the training and evaluation it runs are exercised end to
end in tests/cli/test_compare_cli.py)."""

from __future__ import annotations

import pytest

from bandpo.experiments.compare.worker import late_metrics


def test_the_late_mean_averages_each_metric_over_the_steps_and_the_final_evaluation() -> None:
    rows = [
        {"step": 40, "time": 1.0, "mean@8": 0.2, "pass@8": 0.5, "entropy": 1.0, "note": "x"},
        {"step": 20, "time": 2.0, "mean@8": 0.1, "pass@8": 0.4, "entropy": 2.0},
        {"step": 30, "time": 3.0, "mean@8": 0.9, "pass@8": 0.9, "entropy": 0.1},  # not a registered step
    ]
    final = {"mean@8": 0.6, "pass@8": 0.9, "entropy": 0.5, "n_problems": 200, "flag": True}
    late = late_metrics([20, 40], rows, final)
    assert late is not None
    assert late["mean@8"] == pytest.approx((0.1 + 0.2 + 0.6) / 3)
    assert late["pass@8"] == pytest.approx((0.4 + 0.5 + 0.9) / 3)
    assert late["entropy"] == pytest.approx((2.0 + 1.0 + 0.5) / 3)
    # only metrics every point has, and no booleans
    assert set(late) == {"mean@8", "pass@8", "entropy"}


def test_a_missing_step_gives_no_late_mean_rather_than_one_over_fewer_points() -> None:
    final = {"mean@8": 0.6}
    assert late_metrics([20, 40], [{"step": 20, "mean@8": 0.1}], final) is None
    assert late_metrics([], [{"step": 20, "mean@8": 0.1}], final) is None
