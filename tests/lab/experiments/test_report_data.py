"""Tests for bandpo_lab.experiments.report.data.ReportData: every number the views show, against values recomputed here
from the synthetic run files (synthetic_runs.py)."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest
from synthetic_runs import BAND_KL, BINS, GRPO, make_run, metrics_rows

from bandpo_lab.experiments.report import ReportData, build_report

SHIFTS = {
    "grpo": (0.0, 0.01, 0.02),
    "band-kl": (0.02, 0.03, 0.04),
    "band-tv": (0.0, 0.03, 0.06),
}  # conftest's


def _rows(shift: float) -> list[dict]:
    return metrics_rows(shift)[:-1]  # without the end-of-training summary row


def test_report_data_of_the_shared_directory(compare_dir: Path) -> None:
    data = ReportData.load(compare_dir, reference="grpo", smooth=2)
    assert data.labels == ["grpo", "band-kl", "band-tv"] and data.reference == "grpo"
    assert (data.k, data.ks, data.main_key) == (8, [1, 4, 8], "mean@8")
    assert data.seeds == [0, 1, 2] and data.missing == []
    assert (data.max_steps, data.dataset, data.temperature) == (20, "countdown/test", 1.0)
    assert data.train_walls == [30.0, 31.0, 32.0] * 3 and data.train_wall_mean == 31.0
    assert data.heldout_key == "mean@4"
    assert data.title == "bandpo compare: cmp"

    (main,) = [c for c in data.comparisons if c["method"] == "band-kl" and c["metric"] == "mean@8"]
    assert main["diff"] == pytest.approx(statistics.fmean(BAND_KL[s] - GRPO[s] for s in GRPO))
    assert [c["metric"] for c in data.comparisons if c["method"] == "band-tv"] == [
        "mean@8",
        "pass@8",
        "entropy",
    ]
    outcome = data.outcome
    assert [c["method"] for c in outcome.better] == ["band-kl"] and outcome.worse == []
    assert [c["method"] for c in outcome.band_winners] == ["band-kl"]
    assert outcome.band_best is main and outcome.band_reaches_paper_gain and not outcome.single_seed

    # the held-out end points: the baseline at step 0, the mean final accuracy at the last step
    assert data.final_points["grpo"] == [(0.0, 0.09), (20.0, pytest.approx(statistics.fmean(GRPO.values())))]

    clip = {
        label: statistics.fmean(statistics.fmean(r["clip/frac"] for r in _rows(s)) for s in shifts)
        for label, shifts in SHIFTS.items()
    }
    ratios = data.clip_ratios()
    assert list(ratios) == ["band-kl", "band-tv"]
    assert ratios["band-kl"] == pytest.approx(clip["band-kl"] / clip["grpo"], rel=1e-12)


def test_curves_are_means_over_seeds_of_the_smoothed_series(compare_dir: Path) -> None:
    data = ReportData.load(compare_dir, reference="grpo")
    steps, mean, lo, hi = data.curve("band-kl", "reward")
    series = [[r["reward"] for r in _rows(s)] for s in SHIFTS["band-kl"]]
    assert steps == [2.0 * i for i in range(1, 11)]
    assert mean == pytest.approx([statistics.fmean(ys) for ys in zip(*series)], rel=1e-12)
    assert lo == [min(ys) for ys in zip(*series)] and hi == [max(ys) for ys in zip(*series)]
    _, smoothed, _, _ = data.curve("band-kl", "reward", smooth=2)
    assert smoothed[0] == pytest.approx(mean[0]) and smoothed[3] == pytest.approx((mean[2] + mean[3]) / 2)
    steps, mean, _, _ = data.curve("grpo", "mean@4", heldout=True)
    assert steps == [0.0, 10.0, 20.0]  # the torn last line is skipped
    assert mean[-1] == pytest.approx(statistics.fmean(GRPO.values()) + 0.05)
    assert data.curve("grpo", "no/such/key") is None


def test_clip_bins_are_rates_and_shares_in_percent(compare_dir: Path) -> None:
    data = ReportData.load(compare_dir, reference="grpo")
    bars = data.clip_bins()
    assert bars is not None and bars.bins == BINS and bars.labels == data.labels
    per_seed = [statistics.fmean(r[f"clip/frac_up/{BINS[0]}"] for r in _rows(s)) for s in SHIFTS["grpo"]]
    assert bars.rate[("up", "grpo")][0] == pytest.approx(100 * statistics.fmean(per_seed), rel=1e-12)
    low, high = bars.rate_err[("up", "grpo")]
    assert low[0] == pytest.approx(100 * (statistics.fmean(per_seed) - min(per_seed)), rel=1e-9)
    assert high[0] == pytest.approx(100 * (max(per_seed) - statistics.fmean(per_seed)), rel=1e-9)
    for side in ("up", "down"):
        for label in data.labels:
            assert sum(bars.where[(side, label)]) == pytest.approx(100.0)


def test_a_band_reference_gets_no_bandpo_statement_and_one_seed_no_interval(tmp_path: Path) -> None:
    root = tmp_path / "cmp"
    make_run(root, "band-kl", "band", {"divergence": "kl"}, 0, 0, 0.2, 0.0, heldout=False)
    make_run(root, "band-tv", "band", {"divergence": "tv"}, 0, 1, 0.3, 0.01, heldout=False)
    data = ReportData.load(root)
    assert data.reference == "band-kl"  # no grpo: the first method
    assert data.outcome.band == [] and data.outcome.band_best is None
    assert data.outcome.single_seed and data.heldout_key is None
    assert data.baseline is None and data.final_points["band-tv"] == [(20.0, 0.3)]


def test_a_missing_baseline_is_null_in_results_json(tmp_path: Path) -> None:
    root = tmp_path / "cmp"
    make_run(root, "grpo", "grpo", {}, 0, 0, 0.1, 0.0, heldout=False)
    report = build_report(root, figures=False)
    assert json.loads((report / "results.json").read_text())["baseline"] is None
    (root / "baseline").mkdir()
    (root / "baseline" / "results.json").write_text('{"metrics": {"mean@8": 0.0')  # torn: no baseline either
    report = build_report(root, figures=False)
    assert json.loads((report / "results.json").read_text())["baseline"] is None
    assert "Starting policy" not in (report / "report.md").read_text()


def test_evaluations_at_steps_make_the_late_mean_the_main_metric(tmp_path: Path) -> None:
    """Runs that evaluated at ``eval.at_steps`` carry ``late`` in results.json: the report compares on
    ``late/mean@8`` (the outcome), still compares the final ``mean@8``, and the starting policy's late mean is its
    one evaluation."""
    root = tmp_path / "cmp"
    late = {"grpo": (0.10, 0.14, 0.12), "band-kl": (0.20, 0.21, 0.25)}
    for index, label in enumerate(late):
        for seed in range(3):
            run_dir = make_run(root, label, "grpo" if label == "grpo" else "band", {}, seed, index, 0.3, 0.0)
            results = json.loads((run_dir / "results.json").read_text())
            results["at_steps"] = [{"step": 10, "mean@8": 0.0}, {"step": 15, "mean@8": 0.0}]
            results["late"] = {"mean@8": late[label][seed], "entropy": 0.4}
            (run_dir / "results.json").write_text(json.dumps(results))
    (root / "baseline").mkdir()
    (root / "baseline" / "results.json").write_text(json.dumps({"metrics": {"mean@8": 0.05}}))
    data = ReportData.load(root)
    assert (data.main_key, data.final_key, data.late_steps) == ("late/mean@8", "mean@8", [10, 15])
    assert data.summaries[("band-kl", 2)]["late/mean@8"] == 0.25
    assert data.columns[0].key == "late/mean@8" and data.columns[1].key == "mean@8"
    (main,) = data.outcome.main
    diffs = [a - b for a, b in zip(late["band-kl"], late["grpo"], strict=True)]
    assert main["diff"] == pytest.approx(statistics.fmean(diffs))
    assert {c["metric"] for c in data.comparisons} == {"late/mean@8", "mean@8", "pass@8", "entropy"}
    final = next(c for c in data.comparisons if c["metric"] == "mean@8")
    assert final["diff"] == pytest.approx(0.0)  # make_run's final mean@8 is 0.3 for every run
    assert data.baseline_metric(data.main_key) == 0.05
    report = build_report(root, figures=False)
    assert (
        "Late mean@8: mean@8 averaged over the evaluations at steps 10, 15"
        in (report / "report.md").read_text()
    )
    assert "late mean@8 %" in (report / "results.md").read_text()


def test_a_method_planned_on_fewer_seeds_is_not_missing_the_others(tmp_path: Path) -> None:
    root = tmp_path / "cmp"
    for seed in (0, 1, 2):
        make_run(root, "grpo", "grpo", {}, seed, 0, 0.1, 0.0, heldout=False)
    make_run(root, "ch", "clip_higher", {}, 0, 1, 0.1, 0.0, heldout=False)
    data = ReportData.load(root, seeds=[0, 1, 2], method_seeds={"ch": [0, 1]})
    assert data.missing == ["ch seed 1"]
    assert ReportData.load(root, seeds=[0, 1, 2]).missing == ["ch seed 1", "ch seed 2"]
    (root / "compare_plan.json").write_text(
        json.dumps({"methods": [{"label": "ch", "seeds": [0]}], "seeds": [0, 1, 2]})
    )
    assert ReportData.load(root).missing == []  # the plan's seeds of the method


def test_a_planned_method_without_runs_is_missing_and_a_reference_without_runs_is_named(
    tmp_path: Path,
) -> None:
    """A method with no run folder dropped out of ``missing`` (computed over the folders on disk), and a reference
    without runs was replaced by another method without a word."""
    root = tmp_path / "cmp"
    for seed in (0, 1):
        make_run(root, "grpo", "grpo", {}, seed, 0, 0.1, 0.0, heldout=False)
    data = ReportData.load(root, methods=["grpo", "band-kl"], seeds=[0, 1], reference="grpo")
    assert data.labels == ["grpo"] and data.missing == ["band-kl seed 0", "band-kl seed 1"]
    assert data.reference_missing is None
    (root / "compare_plan.json").write_text(
        json.dumps(
            {"methods": [{"label": "band-kl"}, {"label": "grpo"}], "seeds": [0, 1], "reference": "band-kl"}
        )
    )
    data = ReportData.load(root)  # the plan's methods, seeds and reference
    assert data.missing == ["band-kl seed 0", "band-kl seed 1"]
    assert (data.reference, data.reference_missing) == ("grpo", "band-kl")
    with pytest.raises(
        ValueError, match=r"reference must be one of the methods of .* \(band-kl, grpo\), got 'gpro'"
    ):
        ReportData.load(root, reference="gpro")


def test_the_planned_seeds_of_each_method(tmp_path: Path) -> None:
    root = tmp_path / "cmp"
    for seed in (0, 1, 2):
        make_run(root, "grpo", "grpo", {}, seed, 0, 0.1, 0.0, heldout=False)
    make_run(root, "band-kl", "band", {}, 0, 1, 0.1, 0.0, heldout=False)
    data = ReportData.load(root, seeds=[0, 1, 2], method_seeds={"band-kl": [0]})
    assert data.planned == {"grpo": [0, 1, 2], "band-kl": [0]} and data.missing == []
