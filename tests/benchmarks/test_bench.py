"""Tests for the benchmarks of ``benchmarks/`` (bench_timing.py, bench_loss.py, bench_train.py) and its entry script
``benchmarks/bench.py``: the timing (torch.utils.benchmark's Timer, cases in turn), the loss against verl's own
(``bench_loss_vs_verl``: the rows and their ratios, the one-line reason when verl is missing), the training step
(``bench_train_step``: its recipe, what it times and its checks), and the script's checks before any timing and its
output, through subprocess as a developer runs it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import bench_train
import pytest
import torch
from bench_loss import VERL_COMPARED_RULES, bench_loss_vs_verl
from bench_timing import best, measure, measure_clocks, progress_bar
from bench_train import TINY_RECIPE, bench_train_step, step_seconds

from helpers import REPO
from helpers import load_script as _load

BENCH = REPO / "benchmarks" / "bench.py"


def _bench(*args: str) -> subprocess.CompletedProcess[str]:
    """``python benchmarks/bench.py ARGS`` as a developer runs it, from the repository root."""
    return subprocess.run(
        [sys.executable, str(BENCH), *args],
        capture_output=True,
        text=True,
        cwd=REPO,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
        timeout=900,
    )


def _error(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    """The last stderr line of ``bench.py ARGV`` in process, which must exit with status 2 before any timing."""
    with pytest.raises(SystemExit) as exc:
        _load("benchmarks/bench.py").main(argv)
    assert exc.value.code == 2
    return capsys.readouterr().err.strip().splitlines()[-1]


def test_without_verl_the_comparison_is_skipped_with_a_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in [m for m in sys.modules if m == "verl" or m.startswith("verl.")] or ["verl"]:
        monkeypatch.setitem(sys.modules, name, None)  # import verl... raises ImportError
    rows, reason = bench_loss_vs_verl(2, 8, rounds=1)
    assert rows == [] and reason is not None
    assert reason.startswith("verl is not installed") and "pip install '.[verl]' in bandpo's clone" in reason


def test_the_cases_are_measured_in_turn_round_after_round() -> None:
    """Each round runs every case's blocked_autorange (untimed warm-up calls, then timed blocks), the cases in turn:
    a noisy stretch hits every case alike. A call longer than min_run_time: one untimed and one timed per round."""
    import itertools
    import time

    calls: list[str] = []

    def case(name: str) -> None:
        calls.append(name)
        time.sleep(0.001)

    found = measure({"a": lambda: case("a"), "b": lambda: case("b")}, rounds=3, min_run_time=0)
    runs = [(name, len(list(group))) for name, group in itertools.groupby(calls)]
    assert runs == [("a", 2), ("b", 2)] * 3  # a round: each case's warm-up call and timed call, in turn
    for m in found.values():
        assert m.metadata["calls"] == 3 and len(m.times) == 3  # one timed block of one call per round
        assert all(t >= 0.001 for t in m.times)  # seconds per call: each sleeps 1 ms
        assert best(m) == min(m.times) and best(m) <= m.median


def test_each_clock_times_the_same_cases() -> None:
    """The CPU clock (this process's CPU time) and the wall clock: a sleep costs wall time, not CPU time."""
    import time

    found = measure_clocks({"sleep": lambda: time.sleep(0.01)}, rounds=2, min_run_time=0)
    assert set(found) == {"wall", "cpu"}
    assert best(found["wall"]["sleep"]) >= 0.009
    assert best(found["cpu"]["sleep"]) < 0.005


def test_ratios_of_a_known_cost_are_its_ratio() -> None:
    """Timer's figures against a known cost: 4 sleeps of 20 ms against 1 give about 4x (the wall clock). Each sleep
    overshoots by up to a few ms on a loaded machine (5 ms sleeps gave 5.6x beside two training runs): 20 ms keeps
    that within the tolerance, and the best of 5 rounds drops the worst."""
    import time

    found = measure(
        {"one": lambda: time.sleep(0.02), "four": lambda: [time.sleep(0.02) for _ in range(4)]},
        rounds=5,
        min_run_time=0,
    )
    assert best(found["four"]) / best(found["one"]) == pytest.approx(4.0, rel=0.3)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"rounds": 0}, "rounds must be an integer >= 1, got 0"),
        ({"rounds": 1, "clocks": ("gpu",)}, "clocks must be one or more of wall, cpu, got ('gpu',)"),
        ({"rounds": 1, "clocks": ()}, "clocks must be one or more of wall, cpu, got ()"),
        ({"rounds": 1, "min_run_time": -1.0}, "min_run_time must be a number >= 0 (seconds), got -1.0"),
    ],
)
def test_measure_refuses_bad_settings(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError) as err:
        measure_clocks({"a": lambda: None}, **kwargs)
    assert str(err.value) == message


@pytest.mark.slow  # imports verl (seconds; minutes on a loaded machine)
def test_rows_against_verl() -> None:
    pytest.importorskip("verl", reason="verl is not installed (pip install '.[verl]' in bandpo's clone)")
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
    """bench.py prints "p in [1e-30, 1 - 1e-30]": the sample held p = 0 (8.5% below 1e-30) before."""
    from bench_loss import _accuracy_logp

    p = torch.exp(_accuracy_logp(100_000))
    assert p.min() >= 1e-30 * (1 - 1e-9) and p.min() < 1e-29  # both tails reached
    assert (-_accuracy_logp(100_000)).min() < 1e-29  # and p near 1 - 1e-30


def test_a_labelled_timing_shows_a_bar_over_every_block_on_stderr(capsys: pytest.CaptureFixture[str]) -> None:
    """The bar counts the rounds of each case (2 cases x 3 rounds = 6; with both clocks 12) and goes to stderr, the tables'
    stdout stays empty; unlabelled, nothing is shown."""
    measure({"a": lambda: None, "b": lambda: None}, rounds=3, min_run_time=0, progress="loss, every rule")
    out = capsys.readouterr()
    assert out.out == "" and "loss, every rule:" in out.err and "/6 [" in out.err
    measure_clocks({"a": lambda: None, "b": lambda: None}, rounds=3, min_run_time=0, progress="diagnostics")
    out = capsys.readouterr()
    assert out.out == "" and "diagnostics:" in out.err and "/12 [" in out.err
    measure({"a": lambda: None}, rounds=2, min_run_time=0)
    assert capsys.readouterr() == ("", "")


def test_without_tqdm_the_timing_runs_without_a_bar(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Without tqdm the benchmarks run and show nothing."""
    monkeypatch.setitem(sys.modules, "tqdm.auto", None)  # import tqdm.auto raises ImportError
    found = measure({"a": lambda: None}, rounds=2, min_run_time=0, progress="diagnostics")
    assert len(found["a"].times) >= 2
    with progress_bar("x", 3) as bar:
        bar.update()
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


# benchmarks/bench.py: the entry script


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--repeats", "0"], "--repeats must be an integer >= 1, got 0"),
        (["--accuracy-points", "0"], "--accuracy-points must be an integer >= 1, got 0"),
        (["--sizes", "4096,-5"], "--sizes must be an integer >= 1, got -5"),
        (["--loss-shape", "4,0"], "--loss-shape T must be an integer >= 1, got 0"),
        (["--verl-shape", "0,8"], "--verl-shape B must be an integer >= 1, got 0"),
        (["--loss-shape", "4,64,2"], "argument --loss-shape: takes 2 comma-separated values, got '4,64,2'"),
        (["--device", "tpu"], "--device: device must be auto, cpu, cuda or cuda:N, got 'tpu'"),
        (["--output", "{tmp}"], "--output '{tmp}' is a directory; it must be a file path"),
        (["--output", "{file}/b.json"], "--output '{file}/b.json' is inside '{file}', which is a file"),
    ],
)
def test_bench_refuses_a_bad_value_before_timing(
    args: list[str],
    message: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Refused in one line (starting with ``message``) after the usage, exit 2, before the minutes of timing (``--repeats 0`` used to fail at
    the end of the first section, in ``min()`` of nothing); also with ``--dry-run``; nothing is written."""
    import bench_loss

    def fail(*args: object, **kwargs: object) -> None:
        pytest.fail("timed before the values were checked")

    monkeypatch.setattr(bench_loss, "bench_bounds", fail)
    file = tmp_path / "a_file"
    file.write_text("x")
    argv = [a.format(tmp=tmp_path, file=file) for a in args]
    want = f"bench.py: error: {message.format(tmp=tmp_path, file=file)}"
    assert _error(argv, capsys).startswith(want)
    assert _error([*argv, "--dry-run"], capsys).startswith(want)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a_file"]


def test_bench_without_the_training_recipe_says_so_before_timing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """An install without its recipes: the training-step section is refused up front with the way round it
    (it used to fail after minutes of timing, with nothing written); --skip-train passes the check."""
    bench = _load("benchmarks/bench.py")
    missing = tmp_path / "configs" / "tiny.yaml"
    monkeypatch.setattr(bench_train, "TINY_RECIPE", missing)
    assert _error([], capsys) == (
        f"bench.py: error: the training-step benchmark needs {missing}, which this install of bandpo lacks; "
        "pass --skip-train"
    )
    parser = bench.build_parser()
    assert bench._argument_problem(parser.parse_args(["--skip-train"])) is None
    assert bench._argument_problem(parser.parse_args(["--real-model"])) is None


def test_bench_options_keep_their_spellings(capsys: pytest.CaptureFixture[str]) -> None:
    """The options of the former ``bandpo bench``: ``-o`` is ``--output``, ``--json`` still works and says once
    what it is now, shapes take commas (and the old spaces)."""
    parser = _load("benchmarks/bench.py").build_parser()
    assert str(parser.parse_args(["-o", "out/x.json"]).output) == "out/x.json"
    assert parser.parse_args([]).output is None
    assert capsys.readouterr().err == ""
    assert str(parser.parse_args(["--json", "x/y"]).output) == "x/y"
    assert capsys.readouterr().err == "bench.py: --json is now --output\n"
    args = parser.parse_args(["--loss-shape", "4,64", "--verl-shape", "2", "8", "--sizes", "64,128"])
    assert (args.loss_shape, args.verl_shape, args.sizes) == ([4, 64], [2, 8], [64, 128])


def test_bench_dry_run_prints_the_plan_and_times_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import bench_llm
    import bench_loss

    def fail(*args: object, **kwargs: object) -> None:
        pytest.fail("a dry run timed")

    monkeypatch.setattr(bench_loss, "bench_bounds", fail)
    monkeypatch.setattr(bench_llm, "bench_real_step", fail)
    main = _load("benchmarks/bench.py").main
    assert (
        main(["--sizes", "1024", "--skip-train", "-o", f"{tmp_path}/b.json", "--dry-run", "--no-progress"])
        == 0
    )
    printed = capsys.readouterr().out
    assert printed.startswith("bench.py: dry run: the plan (nothing timed or written)\n")
    for text in (
        "bound solvers at 1024 tokens, 5 rounds per case",
        "skipped (--skip-train)",
        f"output {tmp_path}/b.json",
    ):
        assert text in printed, printed
    assert main(["--real-model", "--dry-run"]) == 0
    assert "the real-model section alone" in capsys.readouterr().out
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("flags", [[], ["--no-progress"]])
def test_bench_shows_progress_on_stderr_unless_told_not_to(
    flags: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    """Each timed section draws a bar (count, ETA) on stderr, which stays clear of the tables on stdout."""
    main = _load("benchmarks/bench.py").main
    skips = ["--skip-loss", "--skip-schedule", "--skip-verl", "--skip-train"]
    assert main(["--sizes", "64", "--repeats", "1", "--accuracy-points", "10", *skips, *flags]) == 0
    out = capsys.readouterr()
    assert "band kl" in out.out and "bounds, 64 tokens" not in out.out
    assert ("bounds, 64 tokens:" in out.err) is not bool(flags), out.err


@pytest.mark.slow
def test_bench_smoke(tmp_path: Path) -> None:
    """Every section but the training step, small, through subprocess: the JSON holds each figure with its ratio
    to the baseline measured in the same run."""
    out = _bench(
        "--sizes", "4096", "--repeats", "1", "--accuracy-points", "2000", "--loss-shape", "4,64",
        "--verl-shape", "4,32", "--skip-train", "--output", str(tmp_path / "b.json"),
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert all(
        f"{section}:" in out.stderr for section in ("bounds, 4,096 tokens", "loss, every rule", "diagnostics")
    )
    data = json.loads((tmp_path / "b.json").read_text())
    bounds = {r["case"]: r for r in data["bounds"]}
    assert {"band kl", "band tv", "fixed clip (eps 0.2)", "authors' bisection (kl, 50 it/side)"} <= set(
        bounds
    )
    assert all(r["ms"] > 0 and r["calls"] >= 1 for r in bounds.values())
    assert bounds["band tv"]["x_tv"] == 1.0
    bisection = bounds["authors' bisection (kl, 50 it/side)"]["ms"]
    # every ratio is its time over the baseline's (or the baseline's over it), not inverted
    for r in bounds.values():
        assert r["x_tv"] == pytest.approx(r["ms"] / bounds["band tv"]["ms"])
        assert r["speedup_vs_bisection"] == pytest.approx(bisection / r["ms"])
    assert data["kl_accuracy"]["table/float64"] <= 1e-6 and data["kl_accuracy"]["newton/float32"] <= 1e-4
    loss = {r["case"]: r for r in data["loss"]}
    assert loss["loss fwd+bwd grpo"]["x_grpo"] == 1.0
    assert all(r["x_grpo"] == pytest.approx(r["ms"] / loss["loss fwd+bwd grpo"]["ms"]) for r in loss.values())
    schedule = {r["case"]: r for r in data["schedule"]}
    assert schedule["loss band kl, radius constant"]["x_constant"] == 1.0
    assert schedule["bounds band kl, radius scheduled"]["ms"] > 0
    for case, r in schedule.items():
        constant = schedule[f"{case.split()[0]} band kl, radius constant"]["ms"]
        assert r["x_constant"] == pytest.approx(r["ms"] / constant)
    assert data["provenance"]["bandpo"] and "commit" in data["provenance"] and "verl" in data["provenance"]
    diagnostics = {r["case"]: r for r in data["diagnostics"]}
    assert set(diagnostics) == {"diagnostics grpo", "diagnostics band", "diagnostics dppo_kl"}
    assert all(
        r["cpu_x_naive"] == pytest.approx(r["cpu_ms"] / r["cpu_naive_ms"]) for r in diagnostics.values()
    )
    assert data["train"] == []
    if data["provenance"]["verl"] == "not installed":
        assert data["loss_vs_verl"] == [] and "verl is not installed" in data["loss_vs_verl_skipped"]
        assert "loss vs verl: skipped: verl is not installed" in out.stdout
    else:
        verl = {r["case"]: r for r in data["loss_vs_verl"]}
        ours = {f"bandpo {n}{lv}" for n in ("grpo", "band", "dppo_kl") for lv in ("", " (basic)", " (none)")}
        assert set(verl) == {"verl vanilla", "verl dppo_kl", *ours}
        assert verl["verl vanilla"]["cpu_x_verl"] == 1.0 and verl["bandpo band"]["cpu_x_verl"] > 0
        vanilla = verl["verl vanilla"]
        for r in verl.values():
            for clock in ("wall", "cpu"):
                assert r[f"{clock}_x_verl"] == pytest.approx(r[f"{clock}_ms"] / vanilla[f"{clock}_ms"])
                assert r[f"{clock}_x_verl_median"] == pytest.approx(
                    r[f"{clock}_ms_median"] / vanilla[f"{clock}_ms_median"]
                )
        assert "bandpo dppo_kl / verl dppo_kl:" in out.stdout
        assert "bandpo grpo (basic) " in out.stdout and "bandpo dppo_kl (none) / verl dppo_kl:" in out.stdout


def test_kl_accuracy_counts_a_nan_bound_as_an_infinite_error(monkeypatch: pytest.MonkeyPatch) -> None:
    """It kept only the p where both the reference and the bound were finite, so a solver returning NaN for some
    tokens still reported a small error."""
    import bench_loss

    real = bench_loss.band_bounds

    def newton_nan_at_one(logp, delta, *args, method, **kwargs):  # type: ignore[no-untyped-def]
        lo, hi = real(logp, delta, *args, method=method, **kwargs)
        if method == "newton":
            hi = hi.clone()
            hi[3] = float("nan")
        return lo, hi

    monkeypatch.setattr(bench_loss, "band_bounds", newton_nan_at_one)
    errors = bench_loss.kl_accuracy(n=64)
    assert errors["newton/float64"] == float("inf") and errors["newton/float32"] == float("inf")
    assert errors["table/float64"] <= 1e-6
