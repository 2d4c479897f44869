"""Tests for bandpo_lab.experiments.bench's loss against verl's own (``bench_loss_vs_verl``): the rows and their ratios,
and the one-line reason when verl is missing; and the training-step benchmark (``bench_train_step``): its recipe,
what it times and its checks. (The other benchmarks run in tests/lab/cli/test_bounds_cli.py.)"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from bandpo_lab.experiments.bench import (
    TINY_RECIPE,
    VERL_COMPARED_RULES,
    bench_loss_vs_verl,
    bench_train_step,
    step_seconds,
    time_interleaved_samples,
)


def test_without_verl_the_comparison_is_skipped_with_a_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in [m for m in sys.modules if m == "verl" or m.startswith("verl.")] or ["verl"]:
        monkeypatch.setitem(sys.modules, name, None)  # import verl... raises ImportError
    rows, reason = bench_loss_vs_verl(2, 8, rounds=1)
    assert rows == [] and reason is not None
    assert reason.startswith("verl is not installed") and "pip install 'bandpo[verl]'" in reason


def test_interleaved_samples_time_every_case_every_round() -> None:
    calls: list[str] = []
    times = time_interleaved_samples(
        {"a": lambda: calls.append("a"), "b": lambda: calls.append("b")}, rounds=3
    )
    assert calls == ["a", "b"] + ["a", "b"] * 3  # one warm-up each, then interleaved
    assert all(len(t) == 3 and all(wall >= 0 and cpu >= 0 for wall, cpu in t) for t in times.values())


@pytest.mark.slow  # imports verl (seconds; minutes on a loaded machine)
def test_rows_against_verl() -> None:
    pytest.importorskip("verl", reason="verl is not installed (pip install 'bandpo[verl]')")
    rows, reason = bench_loss_vs_verl(4, 32, rounds=2)
    assert reason is None
    by_case = {r["case"]: r for r in rows}
    levels = ("", " (basic)", " (none)")
    want = [f"bandpo {n}{level}" for n in VERL_COMPARED_RULES for level in levels]
    assert list(by_case) == ["verl vanilla", "verl dppo_kl", *want]
    assert [(r["rule"], r["level"]) for r in rows[2:]] == [
        (n, lv) for n in VERL_COMPARED_RULES for lv in ("full", "basic", "none")
    ]
    for clock in ("wall", "cpu"):
        assert by_case["verl vanilla"][f"{clock}_x_verl"] == 1.0
        for r in rows:
            assert r[f"{clock}_ms"] > 0 and r[f"{clock}_ms_median"] >= r[f"{clock}_ms"]
            assert r[f"{clock}_x_verl"] == pytest.approx(
                r[f"{clock}_ms"] / by_case["verl vanilla"][f"{clock}_ms"]
            )
        for level in levels:
            dppo = by_case[f"bandpo dppo_kl{level}"]
            assert dppo[f"{clock}_x_verl_dppo"] == pytest.approx(
                dppo[f"{clock}_ms"] / by_case["verl dppo_kl"][f"{clock}_ms"]
            )


def test_the_training_step_recipe_exists() -> None:
    assert (
        TINY_RECIPE.is_file()
    )  # it once resolved one folder too shallow (src/configs/) and bench crashed at the end


def _write_log(path: Path, elapsed: dict[int, float]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    rows = [{"step": s, "elapsed_s": t, "loss": 0.0} for s, t in elapsed.items()]
    rows.append(
        {"step": max(elapsed), "elapsed_s": 999.0, "train_runtime": 1.0}
    )  # the end-of-run row: ignored
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_step_seconds_reads_the_steps_between_two_logged_ends(tmp_path: Path) -> None:
    log = tmp_path / "metrics.jsonl"
    _write_log(log, {1: 10.0, 4: 40.0, 8: 48.0})
    assert step_seconds(log, 4, 8) == pytest.approx(2.0)
    with pytest.raises(ValueError, match="no logged step 6"):
        step_seconds(log, 4, 6)


def test_the_training_step_times_steps_not_setup(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A fake run with 100 s of setup and band's steps twice grpo's: x grpo is 2, not the (100 + ...) dilution of
    dividing the whole run by its steps; the work folder is removed."""
    import bandpo_lab.training.run as run

    per_step = {"band": 0.02, "grpo": 0.01}

    def fake_train(config, overwrite: bool = False) -> None:
        rule, out = config.trainer["clip_rule"], Path(config.trainer["output_dir"])
        steps = config.trainer["max_steps"]
        _write_log(out / "metrics.jsonl", {s: 100.0 + s * per_step[rule] for s in range(1, steps + 1)})

    monkeypatch.setattr(run, "train", fake_train)
    rows = bench_train_step(steps=8, rounds=2, workdir=str(tmp_path))
    by_case = {r["case"]: r for r in rows}
    assert by_case["train step band"]["x_grpo"] == pytest.approx(2.0)
    assert by_case["train step grpo"]["ms"] == pytest.approx(10.0)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("steps", [4, 6, 9, 0, True, 8.0])
def test_the_training_step_wants_whole_rounds(steps: object) -> None:
    with pytest.raises(
        ValueError, match=r"steps must be an integer >= 8 and a multiple of steps_per_generation \(4\)"
    ):
        bench_train_step(steps=steps)  # type: ignore[arg-type]


def test_the_training_step_runs_on_the_tiny_recipe(tmp_path: Path) -> None:
    rows = bench_train_step(steps=8, rounds=1, workdir=str(tmp_path))
    assert [r["case"] for r in rows] == ["train step band", "train step grpo"]
    assert all(r["ms"] > 0 for r in rows) and rows[1]["x_grpo"] == 1.0
    assert list(tmp_path.iterdir()) == []


def test_the_accuracy_sample_spans_the_stated_range() -> None:
    """`bandpo bench` prints "p in [1e-30, 1 - 1e-30]": the sample held p = 0 (8.5% below 1e-30) before."""
    import torch

    from bandpo_lab.experiments.bench import _accuracy_logp

    p = torch.exp(_accuracy_logp(100_000))
    assert p.min() >= 1e-30 * (1 - 1e-9) and p.min() < 1e-29  # both tails reached
    assert (-_accuracy_logp(100_000)).min() < 1e-29  # and p near 1 - 1e-30


def test_interleaved_timing_wants_a_round() -> None:
    with pytest.raises(ValueError, match="rounds must be an integer >= 1, got 0"):
        time_interleaved_samples({"a": lambda: None}, rounds=0)


def test_a_labelled_timing_shows_a_bar_over_every_call_on_stderr(capsys: pytest.CaptureFixture[str]) -> None:
    """The bar counts the warm-ups too (2 cases x (3 rounds + 1) = 8 calls) and goes to stderr, the tables'
    stdout stays empty; unlabelled, nothing is shown."""
    from bandpo_lab.experiments.bench import time_call

    time_interleaved_samples({"a": lambda: None, "b": lambda: None}, rounds=3, progress="loss, every rule")
    out = capsys.readouterr()
    assert out.out == "" and "loss, every rule:" in out.err and "/8 [" in out.err
    time_call(lambda: None, repeats=4, progress="bf16: optimizer")
    out = capsys.readouterr()
    assert out.out == "" and "bf16: optimizer:" in out.err and "/5 [" in out.err
    time_interleaved_samples({"a": lambda: None}, rounds=2)
    time_call(lambda: None, repeats=2)
    assert capsys.readouterr() == ("", "")


def test_without_tqdm_the_timing_runs_without_a_bar(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A core install (torch, numpy, pyyaml) has no tqdm: the benchmarks run and show nothing."""
    monkeypatch.setitem(sys.modules, "tqdm.auto", None)  # import tqdm.auto raises ImportError
    calls: list[str] = []
    times = time_interleaved_samples({"a": lambda: calls.append("a")}, rounds=2, progress="diagnostics")
    assert calls == ["a"] * 3 and len(times["a"]) == 2
    assert capsys.readouterr() == ("", "")


def test_the_training_step_bar_counts_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import bandpo_lab.training.run as run

    def fake_train(config, overwrite: bool = False) -> None:
        out, steps = Path(config.trainer["output_dir"]), config.trainer["max_steps"]
        _write_log(out / "metrics.jsonl", {s: 0.01 * s for s in range(1, steps + 1)})

    monkeypatch.setattr(run, "train", fake_train)
    bench_train_step(steps=8, rounds=2, workdir=str(tmp_path), progress=True)
    err = capsys.readouterr().err
    assert "training step (TRL):" in err and "/4 [" in err
