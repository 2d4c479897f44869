"""studies/study4/session.py: which runs it restarts, copies back and drops, and that its status shows no metric."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from helpers import load_script

session = load_script("studies/study4/session.py")

EMULATED = {"requested": "bf16", "name": "bf16", "emulated": True,
            "reason": "asked for; this CPU has no native bf16 (no amx_bf16, avx512_bf16): emulated"}  # fmt: skip
NATIVE = {"requested": "bf16", "name": "bf16", "reason": "asked for; this CPU has avx512_bf16"}
ENTROPY = 1.234567  # a metric value that status must never print


def _run(
    root: Path, label: str, seed: int, *, finished: bool, precision: dict | None, steps: int = 0
) -> Path:
    run = root / "runs" / label / f"seed{seed}"
    run.mkdir(parents=True)
    if precision is not None:
        (run / "run_info.json").write_text(json.dumps({"precision": precision}))
    rows = [
        json.dumps({"step": s, "policy/entropy": ENTROPY, "clip/frac": 0.25}) for s in range(1, steps + 1)
    ]
    (run / "metrics.jsonl").write_text("\n".join(rows) + ('\n{"step": 9' if steps else ""))  # a cut last line
    for ckpt in range(40, steps + 1, 40):
        (run / f"checkpoint-{ckpt}").mkdir()
    if finished:
        (run / "results.json").write_text(json.dumps({"train_wall_s": 6674.62, "eval_wall_s": 803.1}))
        (run / "train_done.json").write_text(json.dumps({"finished": 1796387379.7}))
    return run


def test_machine_kind_from_cpu_flags() -> None:
    assert session.this_machine_kind("flags\t\t: fpu avx2 avx512f avx512_bf16\n") == "native"
    assert session.this_machine_kind("flags\t\t: fpu avx2 amx_bf16\n") == "native"
    assert session.this_machine_kind("flags\t\t: fpu avx2 avx512f\n") == "emulated"


@pytest.mark.parametrize("kind", ["native", "emulated"])
def test_only_unfinished_runs_of_the_other_kind_restart(tmp_path, kind) -> None:
    other, same = (EMULATED, NATIVE) if kind == "native" else (NATIVE, EMULATED)
    restart = _run(tmp_path, "grpo", 421, finished=False, precision=other, steps=50)
    _run(tmp_path, "band-kl", 421, finished=False, precision=same, steps=50)  # resumes here
    _run(tmp_path, "grpo", 420, finished=True, precision=other, steps=160)  # finished: kept whatever its kind
    _run(tmp_path, "clip-higher", 410, finished=False, precision=None)  # nothing computed yet
    assert session.to_restart(tmp_path, kind) == [restart]


def test_progress_reads_steps_and_checkpoints_only(tmp_path, capsys, monkeypatch) -> None:
    run = _run(tmp_path / session.OUT, "grpo", 421, finished=False, precision=EMULATED, steps=87)
    _run(tmp_path / session.OUT, "grpo", 420, finished=True, precision=EMULATED, steps=160)
    _run(tmp_path / session.OUT, "band-kl", 421, finished=False, precision=None)
    p = session.progress(run)
    assert (p["run"], p["finished"], p["step"], p["checkpoint"], p["kind"]) == (
        "grpo/seed421",
        False,
        87,
        80,
        "emulated",
    )
    monkeypatch.setattr(session, "queue_running", lambda: False)
    monkeypatch.setattr(session, "running_workers", lambda: {"grpo/seed421"})
    assert session.status(tmp_path) == 0
    out = capsys.readouterr().out
    assert f"1 of {session.PLANNED_RUNS} runs finished" in out
    assert "grpo/seed421: step 87, checkpoint at step 80, emulated bf16" in out
    lines = {line.split(":")[0].strip(): line for line in out.splitlines() if "/seed" in line}
    assert lines["grpo/seed421"].endswith(", worker running")
    assert lines["band-kl/seed421"].endswith(", no worker")
    assert "band-kl/seed421: step 0, no checkpoint, unknown bf16" in out
    assert "grpo/seed420" not in out  # finished runs are counted, not listed
    assert "1.23" not in out and "0.25" not in out and "entropy" not in out


def test_export_keeps_only_finished_runs_and_reports_their_times(tmp_path) -> None:
    kept = _run(tmp_path, "grpo", 420, finished=True, precision=EMULATED, steps=3)
    dropped = _run(tmp_path, "grpo", 421, finished=False, precision=EMULATED, steps=3)
    assert session.drop_unfinished(tmp_path) == [dropped]
    assert kept.is_dir() and not dropped.exists()
    rows = session.finished_rows(tmp_path)
    assert rows == [
        "grpo/seed420: results at 2026-12-04 12:43 UTC, 6,675 + 803 s of training + final evaluation"
    ]


def test_runs_are_copied_back_only_when_gone(tmp_path) -> None:
    main, worktree = tmp_path / "main", tmp_path / "study4"
    _run(main / session.EXPORT, "grpo", 420, finished=True, precision=EMULATED, steps=2)
    assert session.ensure_runs(worktree, main) is True
    assert session.is_finished(worktree / session.OUT / "runs" / "grpo" / "seed420")
    _run(main / session.EXPORT, "grpo", 421, finished=True, precision=EMULATED, steps=2)
    assert session.ensure_runs(worktree, main) is False  # present: left as it is
    assert not (worktree / session.OUT / "runs" / "grpo" / "seed421").exists()


def test_nothing_is_copied_back_before_a_study_has_an_export(tmp_path) -> None:
    """A study with no finished run has no export yet (Study 5's first session): resume goes on without one."""
    main, worktree = tmp_path / "main", tmp_path / "study5"
    assert session.ensure_runs(worktree, main) is False
    assert not (worktree / session.OUT).exists()


def test_status_without_runs_counts_none(tmp_path, capsys, monkeypatch) -> None:
    monkeypatch.setattr(session, "queue_running", lambda: True)
    assert session.main(["status", "--worktree", str(tmp_path)]) == 0
    assert f"0 of {session.PLANNED_RUNS} runs finished" in capsys.readouterr().out


def test_workers_are_read_from_the_process_list() -> None:
    """A run's worker, seen in ``pgrep -af compare.worker``'s output: the session sees that a run is going without
    reading the queue logs, which print each finished run's result."""
    listing = (
        "7282 /work/main/.venv/bin/python -m bandpo_lab.experiments.compare.worker "
        "runs/study/study4/runs/band-kl/seed423/run_spec.json\n"
        "7350 python -m bandpo_lab.experiments.compare.worker /abs/runs/study/study4/runs/grpo/seed7/run_spec.json\n"
        "9999 grep compare.worker\n"
    )
    assert session.parse_workers(listing) == {"band-kl/seed423", "grpo/seed7"}
    assert session.parse_workers("") == set()


def test_the_worktree_moves_from_an_earlier_study_commit_only_with_no_run_in_flight() -> None:
    """The study's commit changed between seeds (5b5c294 -> 59e12d9 -> 083dcc6, changes that alter no number): a
    worktree left at an earlier one moves when nothing runs; runs in flight finish first, and without their queue
    no new queue starts beside them."""
    now = session.COMMIT
    assert [c[:7] for c in session.EARLIER] == ["5b5c294", "59e12d9"] and now.startswith("083dcc6")
    assert session.worktree_problem(now, set(), queue=False) is None
    for earlier in session.EARLIER:
        assert session.worktree_problem(earlier, set(), queue=False) is None  # resume moves it
        assert f"earlier {earlier[:7]} with runs in flight" in session.worktree_problem(
            earlier, {"grpo/seed424"}, queue=True
        )
    assert "runs in flight without their queue (band-kl/seed424, grpo/seed424)" in session.worktree_problem(
        now, {"grpo/seed424", "band-kl/seed424"}, queue=False
    )
    assert session.worktree_problem(now, {"grpo/seed425"}, queue=True) is None  # the queue is running: fine
    assert "not the study's" in session.worktree_problem("f788fc1" + "0" * 33, set(), queue=False)
