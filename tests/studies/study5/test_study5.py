"""Study 5's scripts (studies/study5/): the registered analysis's intervals and decisions, the machine kinds of the
bookkeeping, and the reuse check's comparison of logged rows."""

from __future__ import annotations

import importlib.util
import json
import math
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[3]


def _load(name: str) -> ModuleType:
    path = ROOT / "studies" / "study5" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"study5_{name}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_paired_interval_is_the_t_interval_at_its_level() -> None:
    """By hand: differences -0.5, -0.3, -0.1 have mean -0.3 and sd 0.2; t_{0.9875, 2} = 6.2053 (97.5% two-sided)."""
    analysis = _load("analysis")
    ref = {1: 1.0, 2: 1.0, 3: 1.0, 4: 5.0}
    other = {1: 0.5, 2: 0.7, 3: 0.9}
    c = analysis.paired_interval(ref, other, 0.025)
    assert c["n"] == 3 and c["seeds"] == [1, 2, 3] and c["diff"] == pytest.approx(-0.3)
    half = 6.2053 * 0.2 / math.sqrt(3)
    assert c["lo"] == pytest.approx(-0.3 - half, rel=1e-3) and c["hi"] == pytest.approx(-0.3 + half, rel=1e-3)
    assert analysis.paired_interval(ref, {1: 0.0}, 0.025).get("lo") is None  # one pair: no interval


@pytest.mark.parametrize(
    ("lo", "hi", "words"),
    [
        (-0.6, -0.1, ["lowers the training entropy", "excludes neither", "contains -0.32, -0.16"]),
        (-0.1, 0.2, ["no effect", "excludes -0.32, -0.16"]),
        (0.1, 0.3, ["raises the training entropy", "excludes -0.32, -0.16"]),
        (-0.4, -0.2, ["lowers", "excludes -0.16", "contains -0.32"]),
    ],
)
def test_decision_reads_the_interval_as_registered(lo: float, hi: float, words: list[str]) -> None:
    analysis = _load("analysis")
    text = analysis.decision(
        {"diff": (lo + hi) / 2, "lo": lo, "hi": hi, "n": 18, "level": 0.975}, "the upper side"
    )
    assert text.startswith("the upper side ")
    for word in words:
        assert word in text


def _run(tmp: Path, label: str, seed: int, entropies: list[float], reason: str, late: float) -> None:
    run = tmp / "runs" / label / f"seed{seed}"
    run.mkdir(parents=True)
    rows = [
        {"step": i + 1, "policy/entropy": e, "clip/frac": 0.1, "tokens/count": 100.0,
         "clip/frac/p0.0-0.2": 0.2, "tokens/share/p0.0-0.2": 0.5,
         **({"side/up_through": 0.01, "side/down_through": 0.02, "side/up_through_tail": 0.01,
             "side/down_through_tail": 0.0, "side/up_held": 0.0, "side/down_held": 0.03} if "band" in label else {})}
        for i, e in enumerate(entropies)
    ]  # fmt: skip
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    results = {
        "seed": seed,
        "label": label,
        "metrics": {"mean@8": late / 100, "pass@8": 0.5},
        "late": {"mean@8": late / 100},
    }
    (run / "results.json").write_text(json.dumps(results))
    (run / "run_info.json").write_text(json.dumps({"precision": {"reason": reason}}))


def test_analysis_of_made_up_runs(tmp_path: Path) -> None:
    """Four rules on three seeds: the areas are the entropies' trapezoids (constant logs: the constant), the
    contrasts their differences, the per-side counts the shares times the tokens, summed."""
    analysis = _load("analysis")
    amx = "asked for; this CPU has amx_bf16, avx512_bf16"
    for seed, shift in ((1, 0.0), (2, 0.1), (3, -0.1)):
        _run(tmp_path, "grpo", seed, [1.0 + shift] * 4, amx, 40)
        _run(tmp_path, "band-kl", seed, [0.7 + shift] * 4, amx, 20)
        _run(tmp_path, "band-upper", seed, [0.95 + shift + 0.01 * seed] * 4, amx, 45)
        _run(tmp_path, "band-lower", seed, [0.75 + shift] * 4, amx, 30)
    result = analysis.analyse([tmp_path], None)
    lower = result["primary"]["band-lower"]
    assert lower["diff"] == pytest.approx(-0.25) and lower["sd"] == pytest.approx(0.0, abs=1e-12)
    assert "the lower side lowers the training entropy" in result["decisions"]["band-lower"]
    assert result["primary"]["band-upper"]["diff"] == pytest.approx(-0.03)
    inter = result["secondary"]["interaction entropy_area"]
    assert inter["diff"] == pytest.approx(0.7 - (0.95 + 0.02) - 0.75 + 1.0)
    band = result["methods"]["band-kl"]
    assert band["no_take_off"] == 3 and band["with_late_mean"] == 3
    assert band["side"]["side/down_held"] == 3 * 4 * 3 and band["side"]["tokens"] == 3 * 400
    assert result["methods"]["grpo"]["side"] is None and result["methods"]["grpo"]["clipped"] == 3 * 40


def test_machine_kinds_of_the_registration(tmp_path: Path) -> None:
    session = _load("session")
    flags = "flags\t\t: fpu sse avx2 {}\n"
    assert session.this_machine_kind(flags.format("avx512_bf16 amx_bf16")) == "amx"
    assert session.this_machine_kind(flags.format("avx512_bf16")) == "avx512_bf16"
    assert session.this_machine_kind(flags.format("")) == "emulated"
    for reason, kind in (("asked for; this CPU has amx_bf16, avx512_bf16", "amx"),
                         ("asked for; this CPU has avx512_bf16", "avx512_bf16")):  # fmt: skip
        run = tmp_path / kind
        run.mkdir()
        (run / "run_info.json").write_text(json.dumps({"precision": {"reason": reason}}))
        assert session.machine_kind(run) == kind
    assert session.COMMIT is None or len(session.COMMIT) == 40  # the registration commit, once named


def test_reuse_check_compares_every_value_but_timings_and_the_new_keys() -> None:
    reproduce = _load("reproduce")
    want = [{"step": 1, "loss": 0.5, "step_time": 3.0, "entropy": 1.0}]
    same = [{"step": 1, "loss": 0.5, "step_time": 9.0, "entropy": 1.0, "side/up_through": 0.1}]
    assert reproduce.differences(same, want) == []
    other = [{"step": 1, "loss": 0.5000001, "entropy": 1.0}, {"step": 2, "loss": 0.1}]
    assert reproduce.differences(other, want) == [
        "step 1 loss: now 0.5000001, export 0.5",
        "step 2: not in the export",
    ]


def test_the_worktree_gets_an_environment_of_its_own(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A worktree whose .venv links the main checkout's environment is relinked to its own, built once by its own
    ``make setup`` (a stand-in here), so that main's layout cannot reach the study's runs."""
    session = _load("session")
    worktree, main_venv = tmp_path / "study5", tmp_path / "main" / ".venv"
    worktree.mkdir()
    main_venv.mkdir(parents=True)
    (worktree / ".venv").symlink_to(main_venv)
    calls = []

    def fake_call(cmd: list[str], cwd: Path, pythonpath: Path | None = None) -> None:
        calls.append((cmd, cwd))
        venv = Path(cmd[-1].partition("=")[2])
        venv.mkdir()
        (venv / ".installed").touch()

    monkeypatch.setattr(session.s4, "_call", fake_call)
    venv = session.own_environment(worktree)
    assert venv == tmp_path / "study5-venv" and (worktree / ".venv").resolve() == venv.resolve()
    assert calls == [(["make", "setup", f"VENV={venv}"], worktree)]
    session.own_environment(worktree)  # built and linked: nothing to do
    assert len(calls) == 1


def test_export_prunes_only_checkpoints_of_finished_runs_the_export_holds(tmp_path: Path) -> None:
    """The checkpoints of a finished run whose results.json the export holds byte for byte go; a finished run not
    exported (or exported with other results), an unfinished run, and every other file stay."""
    session = _load("session")
    session.configure()
    worktree, export = tmp_path / "study5", tmp_path / "results"

    def run(label: str, seed: int, finished: bool, exported: bytes | None) -> Path:
        folder = worktree / session.s4.OUT / "runs" / label / f"seed{seed}"
        (folder / "checkpoint-160").mkdir(parents=True)
        (folder / "checkpoint-160" / "optimizer.pt").write_bytes(b"x")
        (folder / "model.safetensors").write_bytes(b"w")
        if finished:
            (folder / "results.json").write_bytes(b'{"seed": %d}' % seed)
            (folder / "train_done.json").write_text("{}")
        if exported is not None:
            (export / "runs" / label / f"seed{seed}").mkdir(parents=True)
            (export / "runs" / label / f"seed{seed}" / "results.json").write_bytes(exported)
        return folder

    done = run("grpo", 410, True, b'{"seed": 410}')
    other = run("grpo", 411, True, b'{"seed": 411, "rerun": true}')
    not_exported = run("band-kl", 410, True, None)
    unfinished = run("band-kl", 411, False, b'{"seed": 411}')
    removed = session.prune_checkpoints(worktree, export)
    assert removed == [done / "checkpoint-160"] and not removed[0].exists()
    assert (done / "model.safetensors").is_file() and (done / "results.json").is_file()
    for kept in (other, not_exported, unfinished):
        assert (kept / "checkpoint-160" / "optimizer.pt").is_file()


def test_regime_table_pools_each_pass_over_the_batches(tmp_path: Path) -> None:
    """Two passes of two mini-batches (K=4): the first pools updates 1-2, the second 3-4; shares carry their counts;
    a one-pass run (K=M) has no second row."""
    regime = _load("regime_table")

    def row(update: int, live: int, clipped: int, tail: int = 0, up: int = 0, down: int = 0) -> dict:
        return {"update": update, "n_live": live, "n_clipped": clipped, "n_tail_clipped": tail,
                "n_up_through": up, "n_down_through": down}  # fmt: skip

    by = {
        "grpo": [row(1, 10, 0), row(2, 10, 1, 1), row(3, 10, 4, 3), row(4, 10, 6, 3)],
        "band": [row(1, 10, 0), row(2, 10, 0, 0, 1, 2), row(3, 10, 1, 0, 2, 5), row(4, 10, 1, 0, 0, 3)],
    }
    for name, k in (("study4-lr1e-5", 4), ("paper-lr1e-5", 2)):
        (tmp_path / name).mkdir()
        data = {"config": {"minibatches": 2, "updates": k}, "summary": {"by_update": by}}
        (tmp_path / name / "results.json").write_text(json.dumps(data))
    lines = regime.table(tmp_path).splitlines()
    assert len(lines) == 2 + 1 + 2
    paper = lines[2].split(" | ")
    assert paper[3:] == ["5.0% (1/20)", "100.0% (1/1)", "0.0% (0/20)", "1", "2 |"]
    second = lines[4].split(" | ")
    assert second[2] == "2nd (updates 3-4)"
    assert second[3:] == ["50.0% (10/20)", "60.0% (6/10)", "10.0% (2/20)", "2", "8 |"]


def _rounds_log(run: Path, sampled: list[int], resumed_at: int | None = None) -> None:
    """Give a made-up run's log the rounds of a real one: ``completions/...`` on the steps that sampled a round,
    ``elapsed_s`` counting from each call's start (it drops where a call resumed)."""
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    for row in rows:
        step = row["step"]
        row["elapsed_s"] = float(step if resumed_at is None or step < resumed_at else step - resumed_at + 1)
        if step in sampled:
            row["completions/mean_length"] = 12.0
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_sensitivity_leaves_out_the_seeds_of_runs_resumed_inside_a_round(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """48 steps, a round every 16: band-upper seed 2 resumed at step 41 (checkpoint-40, inside the third round)
    sampled 4 rounds, one short; band-lower seed 3 resumed at step 33 (a round's start) kept the 3 rounds. Only
    seed 2 is left out, every rule's run of it; the primary contrasts are then over seeds 1 and 3."""
    sensitivity = _load("sensitivity")
    amx = "asked for; this CPU has amx_bf16, avx512_bf16"
    results = tmp_path / "results"
    for seed, shift in ((1, 0.0), (2, 0.5), (3, -0.1)):
        for label, base in (("grpo", 1.0), ("band-kl", 0.7), ("band-upper", 0.95), ("band-lower", 0.75)):
            _run(results, label, seed, [base + shift + 0.01 * seed * (label == "band-upper")] * 48, amx, 40)
            run = results / "runs" / label / f"seed{seed}"
            if (label, seed) == ("band-upper", 2):
                _rounds_log(run, [1, 17, 33, 41], resumed_at=41)
                (run / "run_info.json").write_text(
                    json.dumps({"resumed_from": "x/checkpoint-40", "provenance_earlier": [{}]})
                )
            else:
                _rounds_log(run, [1, 17, 33], resumed_at=33 if (label, seed) == ("band-lower", 3) else None)
    assert sensitivity.main([str(results), "--list"]) == 0
    listed = capsys.readouterr().out
    assert listed == (
        "band-upper seed 2: 4 rounds sampled at steps [1, 17, 33, 41]; resumed at step(s) [41] (2 calls; "
        "run_info's resumed_from: x/checkpoint-40)\n1 runs resumed inside a round; seeds [2]\n"
    )
    out = tmp_path / "sensitivity.json"
    assert sensitivity.main([str(results), "--json", str(out)]) == 0
    result = json.loads(out.read_text())
    assert result["seeds_left_out"] == [2]
    upper = result["primary"]["band-upper"]
    assert upper["seeds"] == [1, 3] and upper["diff"] == pytest.approx(-0.05 + 0.02)
    assert result["primary"]["band-lower"]["seeds"] == [1, 3]
    assert "without seeds [2]" in capsys.readouterr().out
    assert sorted(p.name for p in (results / "runs" / "grpo").iterdir()) == [
        "seed1",
        "seed2",
        "seed3",
    ]  # untouched
