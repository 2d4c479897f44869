"""Tests for bandpo_lab.experiments.report (statistics, run summaries, tables, figures, report text) on synthetic run
directories."""

from __future__ import annotations

import base64
import csv
import json
import math
import re
import statistics
from pathlib import Path
from typing import Any

import pytest
from synthetic_runs import BAND_KL, BAND_TV, BINS, GRPO, make_run, metrics_rows, results_payload, trl_rows

from bandpo_lab.experiments.compare import (
    RESULTS_FILE,
)
from bandpo_lab.experiments.report import (
    build_report,
    compare_methods,
    load_runs,
    mean_ci,
    run_summary,
    t_quantile,
)


# ----------------------------------------------------------------------------------------------- statistics
def _t_quantile_reference(df: float, p: float = 0.975) -> float:
    """The ``p`` quantile of Student's t in 30-digit arithmetic (mpmath), from its tail: P(T > t) =
    I_{df / (df + t^2)}(df / 2, 1 / 2) / 2 (the regularized incomplete beta), solved for t."""
    mp = pytest.importorskip("mpmath").mp
    mp.dps = 30
    df_ = mp.mpf(df)

    def excess_tail(t: Any) -> Any:
        tail = mp.betainc(df_ / 2, mp.mpf(1) / 2, 0, df_ / (df_ + t * t), regularized=True) / 2
        return tail - (1 - mp.mpf(p))

    return float(mp.findroot(excess_tail, (mp.mpf(1), mp.mpf(200)), solver="ridder"))


@pytest.mark.parametrize("df", [1, 1.5, 2, 2.7, 3, 4, 5, 7.25, 10, 29, 30, 31, 45, 100, 1000])
def test_t_quantile_equals_a_30_digit_reference(df: float) -> None:
    assert t_quantile(df) == pytest.approx(_t_quantile_reference(df), rel=1e-12)


def test_t_quantile_closed_forms_and_errors() -> None:
    assert t_quantile(1) == pytest.approx(math.tan(math.pi * 0.475), rel=1e-14)  # Cauchy
    # df = 2: t = (2p - 1) sqrt(2 / (1 - (2p - 1)^2))
    assert t_quantile(2) == pytest.approx(0.95 * math.sqrt(2 / (1 - 0.95**2)), rel=1e-14)
    assert t_quantile(math.inf) == pytest.approx(1.959963984540054, rel=1e-14)  # the normal quantile
    assert t_quantile(2.7) < t_quantile(2)  # a fractional df is used as it is, no longer rounded down
    for bad in (0, -1, 0.0, math.nan, "3", None, True):
        with pytest.raises(ValueError, match=rf"^df must be a number > 0, got {re.escape(repr(bad))}$"):
            t_quantile(bad)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("reference", "other"),
    [
        ([0.1, 0.2], [0.3, 0.5]),
        ([0.31, 0.35, 0.29, 0.40], [0.52, 0.47, 0.61]),
        ([12.0, 15.5, 9.25, 14.0, 11.0], [13.0, 13.5]),
        ([0.5, 0.5, 0.5], [0.1, 0.9]),  # one constant side: Welch's df is the other side's n - 1
    ],
)
@pytest.mark.filterwarnings("error")  # scipy's precision warning for a constant side is not the report's
def test_welch_interval_equals_the_formula_in_float64(reference: list[float], other: list[float]) -> None:
    """Welch's interval diff +- t_{0.975, df} * se, with Satterthwaite's df = (va + vb)^2 / (va^2 / (na - 1) +
    vb^2 / (nb - 1)), va = var(a) / na, from exact variances and the 30-digit quantile."""
    welch = compare_methods(dict(enumerate(reference)), {10 + i: v for i, v in enumerate(other)})
    va, vb = statistics.variance(reference) / len(reference), statistics.variance(other) / len(other)
    df = (va + vb) ** 2 / (va**2 / (len(reference) - 1) + vb**2 / (len(other) - 1))
    half = _t_quantile_reference(df) * math.sqrt(va + vb)
    diff = statistics.fmean(other) - statistics.fmean(reference)
    assert welch["kind"] == "welch" and welch["diff"] == diff
    assert (welch["lo"], welch["hi"]) == pytest.approx((diff - half, diff + half), rel=1e-12, abs=1e-15)
    assert welch["significant"] is bool(diff - half > 0 or diff + half < 0)


def test_welch_interval_of_two_constant_sides_is_the_difference() -> None:
    welch = compare_methods({0: 0.1, 1: 0.1, 2: 0.1}, {5: 0.3, 6: 0.3})
    assert welch["kind"] == "welch" and welch["lo"] == welch["hi"] == welch["diff"] == pytest.approx(0.2)
    assert welch["significant"] is True


def test_mean_ci() -> None:
    ci = mean_ci([0.1, 0.2, 0.3])
    assert ci["mean"] == pytest.approx(0.2)
    assert ci["ci95"] == pytest.approx(4.3027 * 0.1 / math.sqrt(3), rel=1e-4)
    assert (ci["n"], ci["min"], ci["max"]) == (3, 0.1, 0.3)
    single = mean_ci([0.5, None])
    assert single["mean"] == 0.5 and single["ci95"] is None and single["n"] == 1
    assert mean_ci([])["mean"] is None


def test_compare_methods_paired_welch_single() -> None:
    paired = compare_methods(GRPO, BAND_KL)
    diffs = [BAND_KL[s] - GRPO[s] for s in GRPO]
    assert paired["kind"] == "paired" and paired["n"] == 3
    assert paired["diff"] == pytest.approx(statistics.fmean(diffs))
    half = t_quantile(2) * statistics.stdev(diffs) / math.sqrt(3)
    assert (paired["lo"], paired["hi"]) == pytest.approx((paired["diff"] - half, paired["diff"] + half))
    assert paired["significant"] is True
    assert compare_methods(GRPO, BAND_TV)["significant"] is False
    welch = compare_methods({0: 0.1, 1: 0.2}, {5: 0.3, 6: 0.5})
    assert welch["kind"] == "welch" and welch["diff"] == pytest.approx(0.25)
    single = compare_methods({0: 0.1}, {0: 0.3})
    assert (
        single["kind"] == "single" and single["diff"] == pytest.approx(0.2) and single["significant"] is None
    )
    # NaN or inf on one side is a missing value: the pair is left out and n counts what was used
    with_nan = compare_methods({1: 1.0, 2: 2.0, 3: 3.0, 4: 4.0}, {1: 2.0, 2: math.nan, 3: 5.0, 4: math.inf})
    assert with_nan["kind"] == "paired" and with_nan["n"] == 2 and with_nan["diff"] == pytest.approx(1.5)
    one_left = compare_methods({1: 1.0, 2: 2.0}, {1: 2.0, 2: math.nan})
    assert (
        one_left["kind"] == "single" and one_left["n"] == 1 and one_left["diff"] == pytest.approx(2.0 - 1.5)
    )


# ---------------------------------------------------------------------------------------------- run summary
def test_run_summary_holds_exactly_the_metrics_file_numbers(compare_dir: Path) -> None:
    run = next(r for r in load_runs(compare_dir) if r.label == "band-kl" and r.seed == 1)
    rows = [r for r in metrics_rows(0.03)[:-1]]
    s = run_summary(run)
    assert s["train/steps"] == 20
    assert s["train/entropy_last"] == rows[-1]["policy/entropy"]
    assert s["train/reward_last"] == rows[-1]["reward"]
    assert s["train/clip_frac"] == statistics.fmean(r["clip/frac"] for r in rows)
    assert s["train/clip_frac_up"] == statistics.fmean(r["clip/frac_up"] for r in rows)
    assert s["train/clip_frac_down"] == statistics.fmean(r["clip/frac_down"] for r in rows)
    assert s["train/tail_up_rate"] == statistics.fmean(r["clip/frac_up/p0.0-0.2"] for r in rows)
    assert s["train/hi_mean"] == statistics.fmean(r["band/hi_mean"] for r in rows)
    tail = sum(r["clip/frac/p0.0-0.2"] * r["tokens/share/p0.0-0.2"] for r in rows) / sum(
        r["clip/frac"] for r in rows
    )
    assert s["train/tail_share"] == pytest.approx(tail, rel=1e-12)
    for b in BINS:
        assert s[f"bins/up/{b}"] == statistics.fmean(r[f"clip/frac_up/{b}"] for r in rows)
        assert s[f"bins/share/{b}"] == statistics.fmean(r[f"tokens/share/{b}"] for r in rows)
        for side in ("up", "down"):
            mass = statistics.fmean(r[f"clip/frac_{side}/{b}"] * r[f"tokens/share/{b}"] for r in rows)
            assert s[f"bins/mass/{side}/{b}"] == pytest.approx(mass, rel=1e-12)
    assert s["mean@8"] == BAND_KL[1]
    assert s["entropy"] == 0.5 - 0.03
    assert len(run.heldout) == 3  # the torn last line is skipped


def test_where_clipping_happens_weighs_each_step_by_its_own_share() -> None:
    """The "where" bars (each bin's share of all up-clipped tokens) multiplied the rate and the token share each
    averaged over steps: with a tail that clips often in the step where it holds few tokens, that read 71.4%
    in the tail where the tokens clipped there are 60.6% (per step rate x share, summed)."""
    from bandpo_lab.experiments.report.series import clip_bin_bars

    tail, rest = BINS[0], BINS[-1]
    steps = [
        {f"clip/frac_up/{tail}": 0.5, f"tokens/share/{tail}": 0.1, f"clip/frac_up/{rest}": 0.05,
         f"tokens/share/{rest}": 0.9},
        {f"clip/frac_up/{tail}": 0.1, f"tokens/share/{tail}": 0.3, f"clip/frac_up/{rest}": 0.01,
         f"tokens/share/{rest}": 0.7},
    ]  # fmt: skip
    mass = {b: [r[f"clip/frac_up/{b}"] * r[f"tokens/share/{b}"] for r in steps] for b in (tail, rest)}
    expected = 100 * sum(mass[tail]) / (sum(mass[tail]) + sum(mass[rest]))
    summary = {f"bins/{kind}/{b}": statistics.fmean(r[f"{key}/{b}"] for r in steps)
               for kind, key in (("up", "clip/frac_up"), ("share", "tokens/share")) for b in (tail, rest)}  # fmt: skip
    summary |= {f"bins/mass/up/{b}": statistics.fmean(mass[b]) for b in (tail, rest)}
    bars = clip_bin_bars(["m"], {"m": {k: mean_ci([v]) for k, v in summary.items()}})
    where = dict(zip(bars.bins, bars.where[("up", "m")]))
    assert where[tail] == pytest.approx(expected) and round(expected, 1) == 60.6
    assert where[rest] == pytest.approx(100 - expected)


def test_a_run_that_clipped_nothing_has_no_tail_share(compare_dir: Path) -> None:
    """0 of 0 clipped tokens is no share (it read 0% and pulled the method's mean down); nor is a non-finite log."""
    import dataclasses

    run = next(r for r in load_runs(compare_dir) if r.label == "band-kl" and r.seed == 1)
    zero = [{**r, "clip/frac": 0.0, "clip/frac/p0.0-0.2": 0.0} for r in run.metrics]
    assert run_summary(dataclasses.replace(run, metrics=zero))["train/tail_share"] is None
    broken = [{**r, "clip/frac/p0.0-0.2": math.nan} for r in run.metrics]
    assert run_summary(dataclasses.replace(run, metrics=broken))["train/tail_share"] is None
    assert run_summary(run)["train/tail_share"] > 0


# ---------------------------------------------------------------------------------------------- the report
def test_report_tables_match_the_run_files(compare_dir: Path, report: Path) -> None:
    data = json.loads((report / "results.json").read_text())
    assert data["k"] == 8 and data["reference"] == "grpo"
    assert list(data["methods"]) == ["grpo", "band-kl", "band-tv"]  # method_index order
    for label, values in (("grpo", GRPO), ("band-kl", BAND_KL), ("band-tv", BAND_TV)):
        stat = data["methods"][label]["metrics"]["mean@8"]
        assert stat["values"] == [values[s] for s in (0, 1, 2)]
        assert stat["mean"] == statistics.fmean(values.values())
        assert stat["ci95"] == pytest.approx(t_quantile(2) * statistics.stdev(values.values()) / math.sqrt(3))
        runs = [r for r in load_runs(compare_dir) if r.label == label]
        clip = [run_summary(r)["train/clip_frac"] for r in runs]
        assert data["methods"][label]["metrics"]["train/clip_frac"]["values"] == clip

    # runs.csv: every finished run, the exact numbers of its results.json and metrics.jsonl
    with (report / "runs.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 9
    for row in rows:
        run_dir = compare_dir / "runs" / row["method"] / f"seed{row['seed']}"
        results = json.loads((run_dir / RESULTS_FILE).read_text())["metrics"]
        for key in ("mean@8", "pass@1", "pass@4", "pass@8", "best@8", "maj@8", "entropy"):
            assert float(row[key]) == results[key]
        (run,) = [r for r in load_runs(compare_dir) if r.run_dir == run_dir]
        assert float(row["train/clip_frac"]) == run_summary(run)["train/clip_frac"]
        assert float(row["train/tail_share"]) == run_summary(run)["train/tail_share"]

    # results.csv: the method means
    with (report / "results.csv").open() as f:
        methods = {r["method"]: r for r in csv.DictReader(f)}
    assert float(methods["band-kl"]["mean@8"]) == statistics.fmean(BAND_KL.values())
    assert methods["band-kl"]["n_seeds"] == "3" and methods["band-kl"]["clip_rule"] == "band"

    # the markdown table shows the same numbers, in percent, mean +/- half-width
    md = (report / "results.md").read_text()
    kl = data["methods"]["band-kl"]["metrics"]["mean@8"]
    assert f"| band-kl | 3 | {100 * kl['mean']:.1f} ± {100 * kl['ci95']:.1f} |" in md
    assert "| starting policy | - | 9.0 |" in md
    assert (report / "results.md").read_text().split("\n\n", 1)[1] in (report / "report.md").read_text()


def test_report_states_the_outcome_plainly(report: Path) -> None:
    text = (report / "report.md").read_text()
    diff_kl = 100 * statistics.fmean(BAND_KL[s] - GRPO[s] for s in GRPO)
    assert f"band-kl vs grpo: {diff_kl:+.1f} points mean@8 (95% CI [" in text
    assert "band-kl is significantly better than grpo" in text
    assert re.search(
        r"band-tv vs grpo: [+-]\d+\.\d points mean@8 \(95% CI \[.*\], paired over 3 seeds\); not significant with 3 seeds",
        text,
    )
    assert "BandPO wins here: band-kl" in text
    assert "Starting policy: mean@8 = 9.0%" in text


def test_report_says_when_band_does_not_win(tmp_path: Path) -> None:
    root = tmp_path / "cmp"
    for seed in (0, 1):
        make_run(root, "grpo", "grpo", {}, seed, 0, 0.2 + 0.01 * seed, 0.0)
        make_run(root, "band-kl", "band", {"divergence": "kl"}, seed, 1, 0.19 + 0.03 * seed, 0.01)
    report = build_report(root, figures=False)
    assert not list((report / "figures").glob("*.png"))
    text = (report / "report.md").read_text()
    assert "not significant with 2 seeds" in text
    assert "BandPO does not win here: no Band method is significantly better than grpo on mean@8" in text
    assert "no Band method reaches +2 points" in text


def test_figures_are_pngs_and_the_html_embeds_them(report: Path) -> None:
    figures = sorted((report / "figures").glob("*.png"))
    names = {f.name for f in figures}
    assert {
        "heldout.png", "entropy.png", "clip_fraction.png", "tail_share.png", "band_bounds.png",
        "clip_by_prob_bin.png", "bounds.png", "reward.png",
    } <= names  # fmt: skip
    for f in figures:
        data = f.read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5000
    html = (report / "report.html").read_text()
    embedded = re.findall(r"src='data:image/png;base64,([A-Za-z0-9+/=]+)'", html)
    assert len(embedded) == len(figures)
    assert base64.b64encode((report / "figures" / "bounds.png").read_bytes()).decode() in embedded
    md = (report / "report.md").read_text()
    assert all(f"(figures/{f.name})" in md for f in figures)
    assert "<table>" in html and "band-kl" in html


def test_missing_runs_and_no_heldout_curve(tmp_path: Path) -> None:
    root = tmp_path / "cmp"
    make_run(root, "grpo", "grpo", {}, 0, 0, 0.1, 0.0, heldout=False)
    make_run(root, "band-kl", "band", {}, 0, 1, 0.12, 0.01, heldout=False)
    make_run(root, "band-kl", "band", {}, 1, 1, 0.0, 0.01, finished=False, heldout=False)
    report = build_report(root, seeds=[0, 1])
    text = (report / "report.md").read_text()
    assert "band-kl seed 1" in text.split("## Missing runs")[1]
    assert "grpo seed 1" in text.split("## Missing runs")[1]
    assert "a single seed on a side and not 2 in common: no confidence interval" in text
    assert (report / "figures" / "heldout.png").stat().st_size > 1000  # start / end points instead of a curve
    data = json.loads((report / "results.json").read_text())
    assert data["methods"]["band-kl"]["seeds"] == [0]
    assert sorted(data["missing"]) == ["band-kl seed 1", "grpo seed 1"]


def test_the_setup_counts_the_runs_of_methods_on_their_own_seeds_and_names_a_reference_without_runs(
    tmp_path: Path,
) -> None:
    """The Setup said "2 methods x 3 seeds" of grpo on seeds 0-2 and band-kl on seed 0 (4 runs), and named the
    method compared against when the planned reference had no runs, as if it were the reference."""
    root = tmp_path / "cmp"
    for seed in (0, 1, 2):
        make_run(root, "grpo", "grpo", {}, seed, 0, 0.1, 0.0, heldout=False)
    make_run(root, "band-kl", "band", {}, 0, 1, 0.12, 0.01, heldout=False)
    report = build_report(root, seeds=[0, 1, 2], method_seeds={"band-kl": [0]}, figures=False)
    setup = (report / "report.md").read_text().split("## Setup")[1].split("##")[0]
    assert "2 methods (grpo, band-kl) x 3 seeds (0, 1, 2), band-kl on 1 seed (0): 4 runs; " in setup
    assert "Reference method: grpo." in setup
    report = build_report(
        root, methods=["ref", "grpo", "band-kl"], seeds=[0, 1, 2], reference="ref", figures=False
    )
    text = (report / "report.md").read_text()
    assert "2 methods (grpo, band-kl) x 3 seeds (0, 1, 2); " in text  # no method on its own seeds
    assert "Reference method: ref, which has no runs, so the others are compared against grpo." in text
    assert "ref seed 0, ref seed 1, ref seed 2" in text.split("## Missing runs")[1]


def test_report_of_an_empty_directory_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="has no runs"):
        build_report(tmp_path)


def test_report_shows_dash_for_clip_metrics_a_method_does_not_log(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import matplotlib.axes

    root = tmp_path / "cmp"
    for seed in (0, 1):
        make_run(root, "grpo", "grpo", {}, seed, 0, 0.10 + 0.01 * seed, 0.01 * seed)
        run_dir = root / "runs" / "cispo" / f"seed{seed}"
        run_dir.mkdir(parents=True)
        spec = {
            "label": "cispo",
            "method": "cispo",
            "clip_rule": None,
            "params": {},
            "seed": seed,
            "method_index": 1,
        }
        (run_dir / "run_spec.json").write_text(json.dumps(spec))
        (run_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in trl_rows()))
        (run_dir / RESULTS_FILE).write_text(json.dumps(results_payload("cispo", "cispo", seed, 0.12, 0.45)))
    bars: list[str] = []
    real_bar = matplotlib.axes.Axes.bar

    def bar(self: Any, *args: Any, **kwargs: Any) -> Any:
        bars.append(kwargs.get("label"))
        return real_bar(self, *args, **kwargs)

    monkeypatch.setattr(matplotlib.axes.Axes, "bar", bar)
    report = build_report(root, reference="grpo")

    md = (report / "results.md").read_text()
    header = next(line for line in md.splitlines() if line.startswith("| method"))
    (row,) = [line for line in md.splitlines() if line.startswith("| cispo |")]
    cells = dict(zip([c.strip() for c in header.split("|")], [c.strip() for c in row.split("|")]))
    for column in ("clip %", "clip up %", "clip down %", "tail share %"):
        assert cells[column] == "-", column  # not measured: a dash, not 0.00
    assert cells["mean@8 %"] == "12.0 ± 0.0"
    assert cells["entropy (train, last)"] == "0.600 ± 0.000"  # TRL's entropy
    grpo_row = next(line for line in md.splitlines() if line.startswith("| grpo |"))
    assert "| - |" not in grpo_row.split("|", 3)[3]  # grpo's clip columns are measured
    with (report / "runs.csv").open() as f:
        cispo_rows = [r for r in csv.DictReader(f) if r["method"] == "cispo"]
    assert len(cispo_rows) == 2 and all(r["train/clip_frac"] == "" for r in cispo_rows)
    assert cispo_rows[0]["clip_rule"] == "cispo"
    # the figures leave it out rather than drawing zeros: no cispo bars, bounds of the clip rules only
    assert bars and "cispo" not in bars and "grpo" in bars
    text = (report / "report.md").read_text()
    assert "(figures/bounds.png)" in text and "bounds figure skipped" not in text
    assert "-: not measured" in text
    assert "cispo - (the paper" in text and "cispo -%" not in text  # the tail share: a dash, not "-%"


def test_load_runs_ignores_a_copied_run_folder_and_refuses_a_misfiled_one(
    compare_dir: Path, tmp_path: Path
) -> None:
    """A copy such as ``seed1.bak`` used to be read as a second run of seed 1 (and could replace the real one in
    the pairs); a folder holding another seed's run is refused."""
    import shutil

    root = Path(shutil.copytree(compare_dir, tmp_path / "cmp"))
    before = [(r.label, r.seed) for r in load_runs(root)]
    shutil.copytree(root / "runs" / "band-kl" / "seed1", root / "runs" / "band-kl" / "seed1.bak")
    assert [(r.label, r.seed) for r in load_runs(root)] == before
    shutil.move(root / "runs" / "band-kl" / "seed1.bak", root / "runs" / "band-kl" / "seed7")
    with pytest.raises(
        ValueError, match=r"seed7/run_spec.json is the run 'band-kl' seed 1, not the one its folder"
    ):
        load_runs(root)
