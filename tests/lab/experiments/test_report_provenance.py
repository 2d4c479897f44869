"""Tests for bandpo_lab.experiments.report.provenance and the report's Provenance section: the code records of runs
(training calls, resumed ones, evaluation) and of the plan's calls, counted and worded; files without any record
(every committed study export before provenance was recorded) read "not recorded"."""

from __future__ import annotations

import json
from pathlib import Path

from synthetic_runs import make_run

from bandpo_lab.experiments.report import ReportData, build_report


def code(commit: str, dirty: bool | str, torch: str = "2.0") -> dict:
    record = {"bandpo": "0.1.0", "commit": commit * 40, "dirty": dirty, "python": "3.11.7", "torch": torch}
    if dirty is True:  # what a dirty checkout records beside (no library)
        record.update(dirty_count=1, dirty_files=[".venv"], dirty_sha256="e3" * 32)
    return record


A, B = code("a", False), code("b", True)


def _write(path: Path, key: str, value: object) -> None:
    data = json.loads(path.read_text()) if path.is_file() else {}
    data[key] = value
    path.write_text(json.dumps(data))


def mixed_dir(root: Path) -> Path:
    """Four runs: trained and evaluated at A; resumed from A to B (dirty) and evaluated at B; no record; evaluated
    at B with another torch. A plan with an old call (nothing recorded) and one call at A."""
    g0 = make_run(root, "grpo", "grpo", {}, 0, 0, 0.1, 0.0)
    _write(g0 / "run_info.json", "provenance", A)
    _write(g0 / "results.json", "provenance", A)
    g1 = make_run(root, "grpo", "grpo", {}, 1, 0, 0.12, 0.01)
    _write(g1 / "run_info.json", "provenance", B)
    precision = {"requested": "auto", "name": "bf16", "reason": "auto: this CPU has amx_bf16"}
    _write(g1 / "run_info.json", "provenance_earlier", [{"started": "then", **A, "precision": precision}])
    _write(g1 / "results.json", "provenance", B)
    make_run(root, "band-kl", "band", {"divergence": "kl"}, 0, 1, 0.15, 0.02)
    b1 = make_run(root, "band-kl", "band", {"divergence": "kl"}, 1, 1, 0.16, 0.03)
    _write(b1 / "results.json", "provenance", code("b", True, torch="2.1"))
    calls = [
        {"time": None, "argv": None, "provenance": None, "config": {}, "queued": None},
        {
            "time": "2026-01-02T03:04:05+0000",
            "argv": ["bandpo"],
            "provenance": A,
            "config": {},
            "queued": ["x"] * 4,
        },
    ]
    (root / "compare_plan.json").write_text(json.dumps({"calls": calls}))
    return root


def test_records_are_counted_per_run_and_per_code(tmp_path: Path) -> None:
    p = ReportData.load(mixed_dir(tmp_path / "cmp")).provenance
    assert p.n_runs == 4 and p.recorded
    a, b = ("0.1.0", "a" * 40, False), ("0.1.0", "b" * 40, True)
    assert p.codes == [(a, 2), (b, 2)]  # the resumed run counts under both
    assert p.unrecorded == ["band-kl seed 0"]
    # an earlier call's precision (a dict in its record) is no library version
    assert p.versions == {"python": ["3.11.7"], "torch": ["2.0", "2.1"]}
    assert [(c.time, c.code, c.queued) for c in p.calls] == [
        (None, None, None),
        ("2026-01-02T03:04:05+0000", a, 4),
    ]


def test_the_report_words_the_provenance(tmp_path: Path) -> None:
    report = build_report(mixed_dir(tmp_path / "cmp"), figures=False)
    section = (report / "report.md").read_text().split("## Provenance")[1].split("## Outcome")[0]
    assert (
        "Code of the runs: bandpo 0.1.0 at commit aaaaaaaaaa (clean): 2 runs; bandpo 0.1.0 at commit bbbbbbbbbb "
        "(with uncommitted changes): 2 runs (a run trained, resumed or evaluated under several of these counts "
        "under each); not recorded for 1 of 4 runs." in section
    )
    assert "Libraries: python 3.11.7, torch 2.0 / 2.1." in section
    assert (
        "Queued by 2 calls of bandpo compare: time not recorded, code not recorded; 2026-01-02T03:04:05+0000 "
        "(4 runs to run), bandpo 0.1.0 at commit aaaaaaaaaa (clean)." in section
    )
    assert "Provenance" in (report / "report.html").read_text()


def test_an_unknown_commit_and_a_plan_without_calls(tmp_path: Path) -> None:
    root = tmp_path / "cmp"
    run = make_run(root, "grpo", "grpo", {}, 0, 0, 0.1, 0.0)
    _write(run / "results.json", "provenance", {"bandpo": "0.1.0", "commit": "unknown", "dirty": "unknown"})
    (root / "compare_plan.json").write_text(json.dumps({"seeds": [0]}))
    text = (build_report(root, figures=False) / "report.md").read_text()
    assert "Code of the runs: bandpo 0.1.0, commit unknown (not run from a git checkout): 1 run." in text
    assert "Calls of bandpo compare that queued the runs: not recorded." in text


def test_files_without_any_record_read_not_recorded(report: Path) -> None:
    """The shared synthetic directory has no provenance, like the study exports made before it was recorded."""
    section = (report / "report.md").read_text().split("## Provenance")[1].split("## Outcome")[0]
    assert section.strip() == (
        "- Not recorded: these files hold no record of the code the runs ran (bandpo version, git commit, "
        "uncommitted changes) or of the library versions."
    )


def test_many_calls_are_counted_by_code_not_listed() -> None:
    """A study resumed over many sessions by two queues made 124 calls: listing each made one line of 20,000
    characters; past LISTED_CALLS they are counted (span, work, code), and compare_plan.json holds each."""
    from bandpo_lab.experiments.report.document import LISTED_CALLS, _calls_summary
    from bandpo_lab.experiments.report.provenance import Call

    a, b = ("0.1.0", "a" * 40, False), ("0.1.0", "b" * 40, True)
    calls = [Call(f"2026-01-0{1 + i // 4}T00:00:0{i % 4}+0000", a if i < 5 else b, i % 2) for i in range(8)]
    calls.append(Call(None, None, None))
    assert len(calls) > LISTED_CALLS
    assert _calls_summary(calls) == (
        "Queued by 9 calls of bandpo compare, 2026-01-01T00:00:00+0000 to 2026-01-02T00:00:03+0000; 4 queued runs "
        "to train or resume (4 in all), 4 found nothing left to run, 1 did not record it: 5 calls with bandpo 0.1.0 "
        "at commit aaaaaaaaaa (clean); 3 calls with bandpo 0.1.0 at commit bbbbbbbbbb (with uncommitted changes); "
        "1 call with code not recorded (each call, its arguments and its code: compare_plan.json)."
    )
