"""Tests for bandpo.experiments.compare (config, plan, resumability) and bandpo.experiments.report (statistics, tables, figures,
report text) on synthetic run directories: fake ``metrics.jsonl`` / ``heldout.jsonl`` / ``results.json`` files, no
training."""

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

from bandpo.experiments.compare import (
    DEFAULT_METHODS,
    RESULTS_FILE,
    CompareError,
    load_compare_config,
    plan_runs,
)
from bandpo.experiments.compare.plan import check_plans
from bandpo.experiments.report import (
    build_report,
    compare_methods,
    load_runs,
    mean_ci,
    run_summary,
    t_quantile,
)

REPO = Path(__file__).resolve().parents[2]
CONFIGS = REPO / "configs"
BINS = ["p0.0-0.2", "p0.2-0.4", "p0.4-0.6", "p0.6-0.8", "p0.8-1.0"]


# ------------------------------------------------------------------------------------------ synthetic runs
def _metrics_rows(shift: float, n_steps: int = 10) -> list[dict[str, Any]]:
    """Training log rows of a fake run: deterministic, distinct per ``shift``."""
    rows = []
    for i in range(1, n_steps + 1):
        row: dict[str, Any] = {
            "step": 2 * i,
            "loss": 0.01 * i,
            "reward": 0.1 + 0.01 * i + shift,
            "policy/entropy": 0.7 - 0.03 * i - shift,
            "clip/frac": 0.02 + 0.001 * i + shift / 10,
            "clip/frac_up": 0.005 + 0.0005 * i,
            "clip/frac_down": 0.015 + 0.0005 * i + shift / 10,
            "clip/tail_share": 0.1 * (i % 3),
            "band/hi_mean": 1.3 + shift,
            "band/lo_mean": 0.7 - shift,
        }
        for j, b in enumerate(BINS):
            row[f"clip/frac_up/{b}"] = 0.001 * (j + 1) * i + shift / 100
            row[f"clip/frac_down/{b}"] = 0.002 * (j + 1) + shift / 100
            row[f"clip/frac/{b}"] = row[f"clip/frac_up/{b}"] + row[f"clip/frac_down/{b}"]
            row[f"tokens/share/{b}"] = [0.05, 0.35, 0.2, 0.05, 0.35][j]
        rows.append(row)
    rows.append({"step": 2 * n_steps, "train_runtime": 12.5, "train_loss": 0.1})  # end-of-training summary
    return rows


def _results(label: str, rule: str, seed: int, mean: float, entropy: float) -> dict[str, Any]:
    return {
        "label": label,
        "clip_rule": rule,
        "seed": seed,
        "dataset": "countdown/test",
        "settings": {"k": 8, "ks": [1, 4, 8], "temperature": 1.0},
        "metrics": {
            "n_problems": 200,
            "n_samples": 1600,
            "mean@8": mean,
            "pass@1": mean,
            "pass@4": min(1.0, 3 * mean),
            "pass@8": min(1.0, 4.5 * mean),
            "best@8": min(1.0, 3.5 * mean),
            "maj@8": mean * 0.9,
            "n_unparsed": seed,
            "n_unparsed_ground_truth": 0,
            "entropy": entropy,
        },
        "train_wall_s": 30.0 + seed,
        "eval_wall_s": 3.0,
    }


def make_run(
    root: Path,
    label: str,
    rule: str,
    params: dict[str, Any],
    seed: int,
    index: int,
    mean: float,
    shift: float,
    finished: bool = True,
    heldout: bool = True,
) -> Path:
    run_dir = root / "runs" / label / f"seed{seed}"
    run_dir.mkdir(parents=True)
    spec = {"label": label, "clip_rule": rule, "params": params, "seed": seed, "method_index": index}
    (run_dir / "run_spec.json").write_text(json.dumps(spec))
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in _metrics_rows(shift)))
    if heldout:
        rows = [{"step": s, "mean@4": mean * s / 20 + 0.05, "pass@1": mean} for s in (0, 10, 20)]
        (run_dir / "heldout.jsonl").write_text(
            "".join(json.dumps(r) + "\n" for r in rows) + '{"step": 3'
        )  # torn
    if finished:
        (run_dir / RESULTS_FILE).write_text(json.dumps(_results(label, rule, seed, mean, 0.5 - shift)))
    return run_dir


# mean@8 per seed: band-kl is better than grpo by 0.05 +/- 0.002 on every seed (significant); band-tv is the same
# as grpo up to noise (not significant).
GRPO = {0: 0.10, 1: 0.12, 2: 0.11}
BAND_KL = {0: 0.152, 1: 0.168, 2: 0.161}
BAND_TV = {0: 0.13, 1: 0.10, 2: 0.115}


@pytest.fixture(scope="module")
def compare_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("compare") / "cmp"
    for seed in (0, 1, 2):
        make_run(root, "grpo", "grpo", {"eps_low": 0.2, "eps_high": 0.2}, seed, 0, GRPO[seed], 0.01 * seed)
        make_run(
            root,
            "band-kl",
            "band",
            {"divergence": "kl", "delta": 0.05},
            seed,
            1,
            BAND_KL[seed],
            0.02 + 0.01 * seed,
        )
        make_run(
            root, "band-tv", "band", {"divergence": "tv", "delta": 0.05}, seed, 2, BAND_TV[seed], 0.03 * seed
        )
    baseline = {
        "label": "baseline",
        "metrics": {"mean@8": 0.09, "pass@1": 0.09, "pass@8": 0.4, "entropy": 0.64},
    }
    (root / "baseline").mkdir()
    (root / "baseline" / "results.json").write_text(json.dumps(baseline))
    return root


@pytest.fixture(scope="module")
def report(compare_dir: Path) -> Path:
    """The report of ``compare_dir``, built once for the module (figures take seconds on a busy machine)."""
    return build_report(compare_dir, reference="grpo", smooth=2)


# ----------------------------------------------------------------------------------------------- statistics
def test_t_quantile_table_and_expansion() -> None:
    assert t_quantile(1) == pytest.approx(12.7062, abs=1e-4)
    assert t_quantile(2) == pytest.approx(4.3027, abs=1e-4)
    assert t_quantile(30) == pytest.approx(2.0423, abs=1e-4)
    assert t_quantile(2.7) == t_quantile(2)  # conservative: rounds df down
    scipy_stats = pytest.importorskip("scipy.stats")
    for df in (1, 2, 3, 5, 10, 29, 30, 31, 45, 100, 1000):
        assert t_quantile(df) == pytest.approx(scipy_stats.t.ppf(0.975, df), abs=2e-4)
    with pytest.raises(ValueError, match="df must be a number >= 1"):
        t_quantile(0.5)


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


# ---------------------------------------------------------------------------------------------- run summary
def test_run_summary_holds_exactly_the_metrics_file_numbers(compare_dir: Path) -> None:
    run = next(r for r in load_runs(compare_dir) if r.label == "band-kl" and r.seed == 1)
    rows = [r for r in _metrics_rows(0.03)[:-1]]
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
    assert s["mean@8"] == BAND_KL[1]
    assert s["entropy"] == 0.5 - 0.03
    assert len(run.heldout) == 3  # the torn last line is skipped


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
    assert "a single seed per method: no confidence interval" in text
    assert (report / "figures" / "heldout.png").stat().st_size > 1000  # start / end points instead of a curve
    data = json.loads((report / "results.json").read_text())
    assert data["methods"]["band-kl"]["seeds"] == [0]
    assert sorted(data["missing"]) == ["band-kl seed 1", "grpo seed 1"]


def test_report_of_an_empty_directory_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="has no runs"):
        build_report(tmp_path)


# ---------------------------------------------------------------------------------------------- the config
def test_presets_load_and_default_methods() -> None:
    tiny = load_compare_config(CONFIGS / "compare-tiny.yaml")
    assert [m.label for m in tiny.methods] == ["grpo", "band-kl"]
    assert tiny.reference == "grpo" and tiny.train_config == str((CONFIGS / "tiny.yaml").resolve())
    full = load_compare_config(CONFIGS / "compare-tiny-full.yaml")
    assert {m.method for m in full.methods} == {
        "grpo", "clip_higher", "dcpo", "band", "adaptive_band", "dppo_tv", "dppo_kl", "cispo", "sapo", "gspo",
    }  # fmt: skip
    assert {m.label for m in full.methods} >= {"dppo-tv", "dppo-kl", "cispo", "sapo", "gspo"}
    assert {m.params.get("divergence") for m in full.methods if m.clip_rule == "band"} == {"kl", "tv", "chi2"}
    assert {m.label for m in full.methods if m.clip_rule is None} == {"cispo", "sapo", "gspo"}  # TRL-native
    assert len(full.seeds) == 3
    default = load_compare_config(None, {"output_dir": "x"})
    assert [m.label for m in default.methods] == [label for label, _, _ in DEFAULT_METHODS]
    for m in default.methods:
        m.rule()  # every default rule builds


def test_overrides() -> None:
    cfg = load_compare_config(
        CONFIGS / "compare-tiny.yaml",
        [
            "seeds=[3]",
            "eval.k=4",
            "eval.ks=[1,4]",
            "train.overrides.max_steps=2",
            "train.overrides.model.cache_dir=/c",
        ],
    )
    assert cfg.seeds == [3] and cfg.eval.k == 4 and cfg.eval.ks == [1, 4]
    assert cfg.train_overrides["max_steps"] == 2 and cfg.train_overrides["model.cache_dir"] == "/c"


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["seedz=[1]"], r"unknown compare config key 'seedz' \(did you mean 'seeds'\?\)"),
        (["eval.kk=3"], r"unknown compare config key eval.kk \(did you mean 'k'\?\)"),
        (
            ["methods=[{clip_rule: bnad}]"],
            r"unknown clip rule 'bnad' \(did you mean 'band'\?\); valid names: grpo",
        ),
        (["methods=[{clip_rule: band, params: {delta: -1}}]"], r"methods\[band\]: delta must be"),
        (["methods=[grpo, grpo]"], r"labels must be unique, got grpo"),
        (["reference=dcpo"], r"reference must be one of the method labels \(grpo, band-kl\), got 'dcpo'"),
        (["eval.ks=[1,16]"], r"eval: ks entry 16 is larger than k=8"),
        (["seeds=[]"], r"seeds must be a non-empty list"),
        (["train.config=nope.yaml"], r"train.config 'nope.yaml' does not exist"),
        (["methods=[{label: 'a b', clip_rule: grpo}]"], r"label must be letters"),
    ],
)
def test_config_errors_name_the_key_and_value(overrides: list[str], message: str) -> None:
    with pytest.raises(CompareError, match=message):
        load_compare_config(CONFIGS / "compare-tiny.yaml", overrides)


def test_training_config_errors_are_found_when_planning(tmp_path: Path) -> None:
    cfg = load_compare_config(
        CONFIGS / "compare-tiny.yaml", [f"output_dir={tmp_path}", "train.overrides.learning_rat=0.1"]
    )
    with pytest.raises(
        CompareError, match=r"train: unknown config key 'learning_rat' .*\(did you mean 'learning_rate'\?\)"
    ):
        plan_runs(cfg)


def test_plan_statuses_and_stale_runs(tmp_path: Path) -> None:
    cfg = load_compare_config(CONFIGS / "compare-tiny.yaml", [f"output_dir={tmp_path / 'out'}", "seeds=[0]"])
    plans = plan_runs(cfg)
    assert [(p.method.label, p.seed, p.status) for p in plans] == [("grpo", 0, "new"), ("band-kl", 0, "new")]
    grpo, band = plans
    assert grpo.train_config["clip_rule"] == "grpo" and grpo.train_config["clip_rule_kwargs"] == {
        "eps_low": 0.2,
        "eps_high": 0.2,
    }
    assert "band_divergence" not in grpo.train_config  # the base recipe's Band settings are dropped
    assert band.train_config["clip_rule_kwargs"] == {"divergence": "kl", "delta": 0.05}
    assert grpo.train_config["output_dir"] == str(tmp_path / "out" / "runs" / "grpo" / "seed0")
    assert grpo.train_config["max_steps"] == 40 and grpo.train_config["seed"] == 0

    # a finished run with this config is done; one with another config is stale and refused
    for p in plans:
        p.run_dir.mkdir(parents=True)
        (p.run_dir / "run_spec.json").write_text(json.dumps(p.spec(cfg)))
        (p.run_dir / RESULTS_FILE).write_text(json.dumps({"fingerprint": p.fingerprint, "metrics": {}}))
    assert [p.status for p in plan_runs(cfg)] == ["done", "done"]
    changed = load_compare_config(
        CONFIGS / "compare-tiny.yaml",
        [f"output_dir={tmp_path / 'out'}", "seeds=[0]", "train.overrides.max_steps=41"],
    )
    plans = plan_runs(changed)
    assert [p.status for p in plans] == ["stale", "stale"]
    with pytest.raises(
        CompareError,
        match=r"were made \(or started\) with another config.*differs in: train_config.max_steps.*--redo",
    ):
        check_plans(changed, plans)
    check_plans(changed, plans, redo=True)  # allowed with redo


def test_export_keeps_what_the_report_needs_and_no_model(compare_dir: Path, tmp_path: Path) -> None:
    """The exported copy holds no weights or checkpoints, its training logs are gzipped, and the report built
    from it has the same tables as the one built from the run directories."""
    import shutil

    from bandpo.experiments.compare import export_results

    compare_dir = Path(shutil.copytree(compare_dir, tmp_path / "cmp"))
    run = compare_dir / "runs" / "grpo" / "seed0"
    (run / "checkpoint-20").mkdir(exist_ok=True)
    (run / "checkpoint-20" / "optimizer.pt").write_bytes(b"x" * 100)
    (run / "model.safetensors").write_bytes(b"x" * 100)
    written = export_results(compare_dir, tmp_path / "export")
    names = {p.name for p in written}
    assert "model.safetensors" not in names and "optimizer.pt" not in names
    assert not (tmp_path / "export" / "runs" / "grpo" / "seed0" / "metrics.jsonl").exists()
    assert (tmp_path / "export" / "runs" / "grpo" / "seed0" / "metrics.jsonl.gz").is_file()
    assert load_runs(tmp_path / "export")[0].metrics == load_runs(compare_dir)[0].metrics
    ours = build_report(tmp_path / "export", reference="grpo", smooth=2, figures=False)
    theirs = build_report(compare_dir, reference="grpo", smooth=2, figures=False)
    assert (ours / "results.md").read_text() == (theirs / "results.md").read_text()
    # byte-for-byte reproducible: a second export writes the same gzip bytes
    again = export_results(compare_dir, tmp_path / "again")
    gz = next(p for p in again if p.name == "metrics.jsonl.gz")
    assert gz.read_bytes() == (tmp_path / "export" / gz.relative_to(tmp_path / "again")).read_bytes()
    with pytest.raises(CompareError, match="outside"):
        export_results(compare_dir, compare_dir / "inside")
    with pytest.raises(CompareError, match="nothing to export"):
        export_results(tmp_path / "empty", tmp_path / "x")


# ------------------------------------------------------------------------------------- TRL-native methods
def _trl_rows(n_steps: int = 10) -> list[dict[str, Any]]:
    """Training log rows of a TRL-native run (plain GRPOTrainer): TRL's metrics, none of our clip diagnostics."""
    rows = [
        {"step": 2 * i, "loss": 0.01 * i, "reward": 0.1 + 0.01 * i, "entropy": 0.6, "cispo_clip_ratio": 0.0}
        for i in range(1, n_steps + 1)
    ]
    return [*rows, {"step": 2 * n_steps, "train_runtime": 12.5, "train_loss": 0.1}]


def test_compare_config_takes_trl_native_methods(tmp_path: Path) -> None:
    methods = (
        "methods=[{clip_rule: grpo, params: {eps_low: 0.2, eps_high: 0.2}}, "
        "{label: cispo-4, method: cispo, params: {epsilon_high: 4.0}}, {method: gspo}, "
        "{label: kl, method: band, params: {divergence: kl}}]"
    )
    cfg = load_compare_config(CONFIGS / "compare-tiny.yaml", [f"output_dir={tmp_path}", "seeds=[0]", methods])
    assert [(m.label, m.method, m.clip_rule) for m in cfg.methods] == [
        ("grpo", "grpo", "grpo"),
        ("cispo-4", "cispo", None),
        ("gspo", "gspo", None),
        ("kl", "band", "band"),
    ]
    grpo, cispo, gspo, kl = plan_runs(cfg)
    t = cispo.train_config
    assert t["method"] == "cispo" and t["epsilon_high"] == 4.0
    for key in ("clip_rule", "clip_rule_kwargs", "band_divergence", "band_delta", "loss_type"):
        assert key not in t, key  # the recipe's clip rule and the field CISPO sets
    assert t["beta"] == 0.1 and t["max_steps"] == 40  # the same recipe as the clip rules
    assert gspo.train_config["method"] == "gspo" and "epsilon" not in gspo.train_config  # its defaults
    assert "method" not in grpo.train_config and grpo.train_config["loss_type"] == "grpo"
    assert kl.train_config["clip_rule"] == "band" and kl.train_config["clip_rule_kwargs"] == {
        "divergence": "kl"
    }
    spec = cispo.spec(cfg)
    assert (spec["method"], spec["clip_rule"], spec["params"]) == ("cispo", None, {"epsilon_high": 4.0})
    listed = cfg.to_dict()["methods"]
    assert listed[1] == {"label": "cispo-4", "method": "cispo", "params": {"epsilon_high": 4.0}}
    assert listed[0] == {"label": "grpo", "clip_rule": "grpo", "params": {"eps_low": 0.2, "eps_high": 0.2}}
    # the same method from the same recipe plans the same run whatever the other methods are
    alone = load_compare_config(CONFIGS / "compare-tiny.yaml", [f"output_dir={tmp_path}", "seeds=[0]"])
    assert plan_runs(alone)[0].fingerprint == grpo.fingerprint


@pytest.mark.parametrize(
    ("methods", "message"),
    [
        ("[{method: cipso}]", r"unknown method 'cipso' \(did you mean 'cispo'\?\); clip rules: grpo"),
        (
            "[{clip_rule: cispo}]",
            r"methods\[cispo\]: clip_rule='cispo' is a TRL-native method.*method: cispo",
        ),
        (
            "[{clip_rule: bnad}]",
            r"unknown clip rule 'bnad'.*TRL-native methods \(method: NAME\): cispo, sapo",
        ),
        (
            "[{method: cispo, params: {band_delta: 0.1}}]",
            r"methods\[cispo\]: unknown parameter 'band_delta' for method 'cispo'.*its parameters .*: epsilon_high",
        ),
        ("[{method: sapo, params: {loss_type: dapo}}]", r"unknown parameter 'loss_type' for method 'sapo'"),
        (
            "[{method: cispo, params: {epsilon_high: 0.5}}]",
            r"epsilon_high must be a finite number >= 1 for method 'cispo'.*got 0.5",
        ),
        ("[{method: gspo, params: {epsilon: 0}}]", r"epsilon must be a finite number in \(0, 1\)"),
        ("[{method: grpo, clip_rule: band}]", r"method='grpo' and clip_rule='band' name different methods"),
        ("[{label: x}]", r"methods\[0\] needs method \(a method name: grpo, .*cispo, sapo, gspo\)"),
        ("[{metod: cispo}]", r"unknown key\(s\) metod \(did you mean 'method'\?\)"),
    ],
)
def test_method_errors_name_the_value_and_what_is_allowed(methods: str, message: str) -> None:
    with pytest.raises(CompareError, match=message):
        load_compare_config(CONFIGS / "compare-tiny.yaml", [f"methods={methods}"])


def test_full_preset_plans_every_method() -> None:
    cfg = load_compare_config(CONFIGS / "compare-tiny-full.yaml", ["seeds=[0]", "output_dir=/nonexistent/x"])
    plans = plan_runs(cfg)
    assert [p.method.label for p in plans] == [m.label for m in cfg.methods]
    by_label = {p.method.label: p.train_config for p in plans}
    assert by_label["dppo-kl"]["clip_rule"] == "dppo_kl" and by_label["dppo-tv"]["clip_rule"] == "dppo_tv"
    assert {label: by_label[label].get("method") for label in ("cispo", "sapo", "gspo")} == {
        "cispo": "cispo",
        "sapo": "sapo",
        "gspo": "gspo",
    }


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
        (run_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in _trl_rows()))
        (run_dir / RESULTS_FILE).write_text(json.dumps(_results("cispo", "cispo", seed, 0.12, 0.45)))
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
