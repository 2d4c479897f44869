"""Study 4's scripts (studies/study4/) against the pilot's exports, and the numbers docs/study.md quotes from them (the
registration's power input and the pilot's token counts must be what the exports give)."""

from __future__ import annotations

import subprocess
import sys

from helpers import REPO

FOLDER = REPO / "studies" / "study4"
PILOT = FOLDER / "pilot"
STUDY = FOLDER / "results"
CONFIG = str(FOLDER / "config.yaml")
STUDY_MD = (REPO / "docs" / "study.md").read_text()


def _run(script: str, *args: str) -> str:
    out = subprocess.run(
        [sys.executable, str(FOLDER / script), *args], capture_output=True, text=True, cwd=REPO
    )
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_pilot_outcomes_give_the_spreads_the_registration_uses() -> None:
    out = _run("pilot_outcomes.py")
    assert "final: differences +3.12, -17.25, +10.56; mean -1.19, sd 14.40 points" in out
    assert "curve 120 + final: differences -5.44, -6.38, +10.28; mean -0.51, sd 9.36 points" in out
    assert "curve 120+160: differences -3.00, -4.75, +8.25; mean +0.17, sd 7.05 points" in out
    for quoted in ("standard deviation 9.36 points", "gives 7.05", "mean@8 alone 14.40", "--sd 9.36"):
        assert quoted in STUDY_MD, quoted


def test_analysis_of_the_pilot_counts_the_tokens_study_md_quotes(tmp_path) -> None:
    out = _run(
        "analysis.py",
        *(str(PILOT / p) for p in ("p4", "p5", "p6")),
        "--json",
        str(tmp_path / "a.json"),
    )
    assert "primary, late mean@8: no pairs" in out  # the pilot did not evaluate at steps 120 / 140
    assert "final mean@8: -1.19 points" in out and "sd 14.40" in out
    rows = {tuple(line.split(" | ")[:2]): line for line in out.splitlines() if line.startswith("| ")}
    for label, seed, clipped, tail in [
        ("grpo", "403", "2,089 / 30,870", "1,325"),
        ("grpo", "404", "2,127 / 32,416", "1,571"),
        ("band-kl", "403", "684 / 25,356", "147"),
        ("band-kl", "404", "777 / 26,632", "130"),
        ("grpo", "402", "1,631 / 27,470", "1,104"),
        ("band-kl", "402", "626 / 29,438", "122"),
    ]:
        row = rows[(f"| {label}", seed)]
        assert clipped in row and f"| {tail} (" in row, row
        assert clipped.replace(" / ", " of ") in STUDY_MD  # the pilot table quotes "N of M"


def _fake_run(
    root, label: str, seed: int, late: float, emulated: bool | None, during: dict[int, float] | None = None
) -> None:
    import json

    run = root / "runs" / label / f"seed{seed}"
    run.mkdir(parents=True)
    metrics = {"mean@8": late / 100, "pass@8": 0.5, "entropy": 1.0, "mean_length": 10.0}
    at_steps = [{"step": step, "mean@8": value / 100} for step, value in (during or {}).items()]
    (run / "results.json").write_text(
        json.dumps({"seed": seed, "metrics": metrics, "late": {"mean@8": late / 100}, "at_steps": at_steps})
    )
    (run / "metrics.jsonl").write_text(json.dumps({"step": 1, "policy/entropy": 1.0}) + "\n")
    if emulated is not None:
        flags = "no native bf16 (no amx_bf16, avx512_bf16): emulated" if emulated else "avx512_bf16"
        precision = {"requested": "bf16", "name": "bf16", "reason": f"asked for; this CPU has {flags}"}
        if emulated:
            precision["emulated"] = True
        (run / "run_info.json").write_text(json.dumps({"precision": precision}))


def test_analysis_splits_native_and_emulated_seeds(tmp_path) -> None:
    """The registered sensitivity check: the primary outcome over native-bf16 pairs and emulated pairs; a seed
    whose two runs differ in kind, or whose kind a run does not say (no run_info), goes to neither."""
    grpo = {1: 10.0, 2: 20.0, 3: 30.0, 4: 40.0, 5: 50.0, 6: 60.0, 7: 70.0}
    for seed, late in grpo.items():
        kind = {1: False, 2: False, 3: True, 4: True, 5: True, 6: False, 7: None}[seed]
        _fake_run(tmp_path, "grpo", seed, late, kind)
        band = late + (2.0 if seed in (1, 2) else -4.0 if seed in (3, 4) else 100.0)
        _fake_run(tmp_path, "band-kl", seed, band, {5: False, 6: True}.get(seed, kind))
    out = _run("analysis.py", str(tmp_path))
    assert "primary, late mean@8: +42.29 points" in out and "7 seeds" in out
    assert "seeds run with native bf16 +2.00 points" in out and "emulated -4.00 points" in out
    line = next(x for x in out.splitlines() if "sensitivity" in x)
    assert line.count(", 2 seeds") == 2 and "in neither (mixed or unknown): 3 seeds" in line, line


def test_analysis_draws_the_paired_differences_it_prints(tmp_path) -> None:
    """``--figure`` writes a PNG of the differences the JSON holds, per seed; a path matplotlib cannot write is
    refused before any run is read."""
    import json

    lates = {"grpo": (30.0, 40.0, 50.0), "band-kl": (31.0, 43.0, 52.0), "clip-higher": (29.0, 40.0, 54.0)}
    for label, values in lates.items():
        for seed, late in zip((410, 411, 412), values):
            _fake_run(tmp_path, label, seed, late, True)
    out = _run_all(str(tmp_path), "--json", str(tmp_path / "a.json"), "--figure", str(tmp_path / "d.png"))
    assert out.returncode == 0, out.stderr
    assert f"figure: {tmp_path / 'd.png'}" in out.stdout
    assert (tmp_path / "d.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    comparisons = json.loads((tmp_path / "a.json").read_text())["comparisons"]
    for label, expected in (("band-kl", [1.0, 3.0, 2.0]), ("clip-higher", [-1.0, 0.0, 4.0])):
        late = comparisons[label]["late_mean"]
        assert late["seeds"] == [410, 411, 412]
        assert [round(d, 9) for d in late["diffs"]] == expected
    for bad, match in (("d.txt", "must end in a figure format's suffix"), ("no/d.png", "is not a directory")):
        refused = _run_all(str(tmp_path / "missing"), "--figure", str(tmp_path / bad))
        assert refused.returncode == 2 and match in refused.stderr, refused.stderr


def _run_all(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(FOLDER / "analysis.py"), *args],
        capture_output=True,
        text=True,
        cwd=REPO,
    )


def test_analysis_names_every_seed_it_leaves_out_and_states_the_decision(tmp_path) -> None:
    """With the study's config, each planned seed outside the pairs is named with its reason; a finished run
    outside the plan is left out and reported; the registered decision is printed."""
    for seed, late in {410: 30.0, 411: 40.0, 412: 50.0}.items():
        _fake_run(tmp_path, "grpo", seed, late, True)
        _fake_run(tmp_path, "band-kl", seed, late + (1.0, 3.0, 2.0)[seed - 410], True)
    _fake_run(tmp_path, "grpo", 413, 40.0, True)
    (tmp_path / "runs" / "band-kl" / "seed413").mkdir()  # started, never finished
    _fake_run(tmp_path, "grpo", 999, 40.0, True)  # not a planned seed
    _fake_run(tmp_path, "band-kl", 999, 90.0, True)
    out = _run_all(str(tmp_path), "--config", CONFIG)
    assert out.returncode == 0, out.stderr
    text = out.stdout
    assert "primary, late mean@8: +2.00 points [-0.48, +4.48], 3 seeds" in text
    assert (
        "decision (the registered rule): no difference detected (the interval contains 0); +5 points (the size "
        "the study is powered for) excluded" in text
    )
    assert "413: band-kl not finished" in text and "414: grpo not run, band-kl not run" in text
    assert (
        "439: grpo not run, band-kl not run" in text
        and "410:" not in text.split("left out")[1].split("\n")[0]
    )
    assert "finished seeds outside the plan, left out: [999]" in text


def test_analysis_refuses_a_copy_or_a_duplicate_of_a_run(tmp_path) -> None:
    """A folder such as seed410.bak used to replace the real run silently (the last one read won)."""
    _fake_run(tmp_path, "grpo", 1, 30.0, True)
    _fake_run(tmp_path, "band-kl", 1, 40.0, True)
    copy = tmp_path / "runs" / "band-kl" / "seed1.bak"
    copy.mkdir()
    (copy / "results.json").write_text((tmp_path / "runs" / "band-kl" / "seed1" / "results.json").read_text())
    out = _run_all(str(tmp_path))
    assert out.returncode == 2 and "seed1.bak: a run folder must be named seed<seed>" in out.stderr
    (copy / "results.json").unlink()
    other = tmp_path / "other"
    _fake_run(other, "grpo", 1, 35.0, True)
    out = _run_all(str(tmp_path), str(other))
    assert out.returncode == 2 and "grpo seed 1 is in both" in out.stderr


def test_analysis_names_a_training_log_with_missing_steps(tmp_path) -> None:
    import json

    for label in ("grpo", "band-kl"):
        _fake_run(tmp_path, label, 1, 30.0, True)
    rows = [{"step": s, "policy/entropy": 1.0} for s in (1, 2, 4)]
    (tmp_path / "runs" / "grpo" / "seed1" / "metrics.jsonl").write_text(
        "".join(json.dumps(r) + "\n" for r in rows)
    )
    out = _run_all(str(tmp_path))
    assert (
        out.returncode == 0 and "grpo seed 1: training log: steps are not exactly 1..4 (3 rows)" in out.stderr
    )


def test_analysis_gives_the_primary_outcome_over_the_evaluations_during_training(tmp_path) -> None:
    """The attention sensitivity check: Band-KL - GRPO on the mean of the evaluations at steps 120 and 140 alone
    (not the late mean, which also holds the final one); a run without both of them leaves its seed out."""
    import json

    during = {
        410: ({120: 30.0, 140: 34.0}, {120: 33.0, 140: 35.0}),  # +2
        411: ({120: 40.0, 140: 40.0}, {120: 44.0, 140: 42.0}),  # +3
        412: ({120: 50.0, 140: 50.0}, {120: 51.0, 140: 50.0}),  # +0.5
        413: ({120: 50.0, 140: 50.0}, {120: 90.0}),  # Band-KL lacks step 140: left out
    }
    for seed, (grpo, band) in during.items():
        _fake_run(tmp_path, "grpo", seed, 40.0, True, grpo)
        _fake_run(tmp_path, "band-kl", seed, 41.0, True, band)
    out = _run_all(str(tmp_path), "--json", str(tmp_path / "a.json"))
    assert out.returncode == 0, out.stderr
    line = next(x for x in out.stdout.splitlines() if "evaluations during training alone" in x)
    assert "(steps 120 and 140, the training's attention): +1.83 points" in line and "3 seeds" in line, line
    during_mean = json.loads((tmp_path / "a.json").read_text())["comparisons"]["band-kl"]["during_mean"]
    assert during_mean["seeds"] == [410, 411, 412]
    assert [round(d, 9) for d in during_mean["diffs"]] == [2.0, 3.0, 0.5]
    assert "primary, late mean@8: +1.00 points" in out.stdout and "4 seeds" in out.stdout


def test_the_study_analysis_rebuilds_from_its_export_and_the_docs_quote_it(tmp_path) -> None:
    """The registered analysis of the committed export gives the committed ``analysis.json`` again, and the primary
    outcome the docs quote (README, docs/results.md, docs/study.md) is the one it computes."""
    import json

    _run(
        "analysis.py",
        str(STUDY),
        "--config",
        CONFIG,
        "--json",
        str(tmp_path / "analysis.json"),
    )
    fresh = json.loads((tmp_path / "analysis.json").read_text())
    assert fresh == json.loads((STUDY / "analysis.json").read_text())
    band = fresh["comparisons"]["band-kl"]
    primary = band["late_mean"]
    assert primary["n"] == 30 and not band["left_out"]
    quoted = f"{primary['diff']:+.1f} [{primary['lo']:+.1f}, {primary['hi']:+.1f}]"
    docs = {
        doc: " ".join((REPO / doc).read_text().split())
        for doc in ("README.md", "docs/results.md", "docs/study.md")
    }
    study = docs["docs/study.md"]  # the docs' line breaks are spaces here
    for doc, text in docs.items():
        assert quoted in text, (doc, quoted)
    assert f"sd {primary['sd']:.1f} points" in study and f"detect {primary['mdd80']:.1f} points" in study
    for key, digits in (("pass", 1), ("entropy", 2), ("entropy_area", 2), ("clip_pct", 2)):
        c = band[key]
        secondary = f"{c['diff']:+.{digits}f} [{c['lo']:+.{digits}f}, {c['hi']:+.{digits}f}]"
        assert secondary in study, (key, secondary)
    for label in ("grpo", "band-kl"):
        runs = fresh["runs"][label].values()
        clipped, tokens = sum(r["clipped"] for r in runs), sum(r["tokens"] for r in runs)
        tail = sum(r["tail_clipped"] for r in runs)
        pooled = f"{clipped:,} of {tokens:,}"
        assert pooled in study and pooled in docs["docs/results.md"], (label, pooled)
        assert f"({100 * tail / clipped:.1f}%)" in study, (label, tail, clipped)


def test_analysis_leaves_out_the_seeds_it_is_told_to(tmp_path) -> None:
    """``--exclude-seeds`` (the sensitivity check without the resumed runs' seeds): those seeds leave every method,
    each named as excluded, the decision line says it is not the registered one, and the JSON lists them; without
    the option nothing changes (no ``excluded_seeds`` key)."""
    import json

    for seed, diff in {410: 1.0, 411: 50.0, 412: 3.0, 413: -40.0}.items():
        _fake_run(tmp_path, "grpo", seed, 40.0, True)
        _fake_run(tmp_path, "band-kl", seed, 40.0 + diff, True)
    config = CONFIG
    full = _run_all(str(tmp_path), "--config", config, "--json", str(tmp_path / "all.json"))
    assert full.returncode == 0, full.stderr
    assert "primary, late mean@8: +3.50 points" in full.stdout and "4 seeds" in full.stdout
    assert "excluded_seeds" not in json.loads((tmp_path / "all.json").read_text())
    out = _run_all(
        str(tmp_path), "--config", config, "--exclude-seeds", "411", "413", "--json", str(tmp_path / "a.json")
    )
    assert out.returncode == 0, out.stderr
    text = out.stdout
    assert "excluded by --exclude-seeds, from every method: 411, 413" in text
    assert "primary, late mean@8: +2.00 points [-10.71, +14.71], 2 seeds" in text
    assert "decision (seeds excluded: a sensitivity check, not decided on; the rule's reading)" in text
    assert "411: excluded (--exclude-seeds); 413: excluded (--exclude-seeds)" in text
    summary = json.loads((tmp_path / "a.json").read_text())
    assert summary["excluded_seeds"] == [411, 413]
    assert summary["comparisons"]["band-kl"]["late_mean"]["seeds"] == [410, 412]
    assert set(summary["runs"]["grpo"]) == {"410", "412"}
