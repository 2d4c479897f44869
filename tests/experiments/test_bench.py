"""Tests for bandpo.experiments.bench's loss against verl's own (``bench_loss_vs_verl``): the rows and their ratios,
and the one-line reason when verl is missing. (The other benchmarks run in tests/cli/test_bounds_cli.py.)"""

from __future__ import annotations

import sys

import pytest

from bandpo.experiments.bench import VERL_COMPARED_RULES, bench_loss_vs_verl, time_interleaved_samples


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
