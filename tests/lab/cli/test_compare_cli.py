"""``bandpo compare`` through subprocess: config errors (fast) and the smallest preset end to end (slow), on a
warm start of a few seconds (the pipeline, not the learning, is under test)."""

from __future__ import annotations

import csv
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from helpers import CONFIGS
from helpers.cli import run_bandpo
from helpers.tiny import warm_start_overrides

os.environ.setdefault("HF_HUB_OFFLINE", "1")

PRESET = CONFIGS / "compare-tiny.yaml"
FULL = CONFIGS / "compare-tiny-full.yaml"


def bandpo(*args: str, timeout: int = 600) -> subprocess.CompletedProcess:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    return subprocess.run(
        [sys.executable, "-m", "bandpo_lab.cli.main", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
    )


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["seedz=[1]"], "unknown compare config key 'seedz' (from the overrides) (did you mean 'seeds'?)"),
        (
            ["methods=[{clip_rule: bnad}]"],
            "unknown clip rule 'bnad' (did you mean 'band'?); valid names: grpo",
        ),
        (["methods=[{method: sapoo}]"], "unknown method 'sapoo' (did you mean 'sapo'?); clip rules: grpo"),
        (
            ["methods=[{method: cispo, params: {delta: 0.05}}]"],
            "methods[cispo] (from the overrides): unknown parameter 'delta' for method 'cispo'",
        ),
        (
            ["methods=[{method: gspo, params: {band_delta: 0.1}}]", "reference=gspo"],
            "methods[gspo] (from the overrides): unknown parameter 'band_delta' for method 'gspo' (GSPO (Group Sequence Policy "
            "Optimization)); its parameters (GRPOConfig fields): epsilon, epsilon_high",
        ),
        # the eval data was read after training only (--dry-run passed)
        (
            ["eval.split=nosplit"],
            "eval: split must be one of train, test for task 'countdown', got 'nosplit'",
        ),
        (["eval.dataset=5"], "eval: dataset '5' does not exist"),
    ],
)
def test_compare_config_errors(
    overrides: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """In process (the command line itself is run as a subprocess by the end-to-end tests): one line, status 2."""
    argv = ["compare", "--config", str(PRESET), f"output_dir={tmp_path}", *overrides, "--dry-run"]
    code, _, err = run_bandpo(capsys, *argv)
    assert code == 2, err
    assert err.startswith("bandpo compare: error: ") and message in err and err.count("\n") == 1, err


@pytest.mark.slow  # a subprocess that validates every run with the trainer: ~10 s
def test_dry_run_refuses_runs_made_with_other_settings_unless_redo(tmp_path: Path) -> None:
    """--dry-run says what the comparison would: runs finished with other settings are refused without --redo, and
    with it they are checked as the fresh runs it makes of them (they were checked as resumes, which the trainer
    refuses for a changed learning rate, naming an option compare does not have)."""
    from bandpo_lab.experiments.compare import load_compare_config, plan_runs
    from bandpo_lab.training.config import TrainConfig

    config = load_compare_config(PRESET, [f"output_dir={tmp_path}", "seeds=[0]"])
    for p in plan_runs(config):
        p.run_dir.mkdir(parents=True)
        (p.run_dir / "run_spec.json").write_text(json.dumps(p.spec(config)))
        (p.run_dir / "results.json").write_text(json.dumps({"fingerprint": p.fingerprint}))
        (p.run_dir / "train_config.yaml").write_text(TrainConfig.from_dict(p.train_config).to_yaml())
        (p.run_dir / "config.json").write_text("{}")  # a final model, and the end of training recorded
        (p.run_dir / "run_info.json").write_text(
            json.dumps(
                {"provenance": {"bandpo": "0.0.test"}, "finished": {"global_step": 40, "max_steps": 40}}
            )
        )
    args = ("compare", "--config", str(PRESET), f"output_dir={tmp_path}", "seeds=[0]", "--dry-run")
    out = bandpo(*args, "train.overrides.learning_rate=0.5")
    assert out.returncode == 2 and "grpo seed 0 (differs in: train_config.learning_rate)" in out.stderr, (
        out.stderr
    )
    out = bandpo(*args, "train.overrides.learning_rate=0.5", "--redo")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "grpo             seed 0   stale" in out.stdout


@pytest.mark.parametrize("mode", [(), ("--dry-run",), ("--report-only",)])
def test_a_folder_of_the_users_files_named_as_a_comparisons_is_refused(
    mode: tuple[str, ...], tmp_path: Path
) -> None:
    """A comparison into a folder holding the user's report/ wrote its report over report/report.md once the runs
    finished: refused in one line before any work, in every mode. Files of other names stay beside a comparison."""
    out = tmp_path / "notes"
    (out / "report").mkdir(parents=True)
    (out / "report" / "report.md").write_text("# my report")
    result = bandpo("compare", "--config", str(PRESET), f"output_dir={out}", "seeds=[0]", *mode)
    assert result.returncode == 2
    assert result.stderr == (
        f"bandpo compare: error: output_dir '{out}' holds report/, not written by bandpo compare: a comparison "
        "writes its own compare_plan.json, compare_config.yaml, baseline, report and runs there, replacing what it "
        "finds; choose another output_dir\n"
    )
    assert (out / "report" / "report.md").read_text() == "# my report"
    assert sorted(p.name for p in out.iterdir()) == ["report"]


def test_an_output_dir_with_a_tilde_is_checked_where_the_runs_go(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``output_dir=~/cmp``: each run's training config expanded ``~`` (the models went to ``$HOME/cmp/runs``), the
    comparison did not (its plan and report went to ``./~/cmp``, and the folder it checked was that one, not
    ``$HOME/cmp``, which holds the user's report/). One path, expanded, for the check and every writer."""
    home = tmp_path / "home"
    (home / "cmp" / "report").mkdir(parents=True)
    (home / "cmp" / "report" / "report.md").write_text("# my report")
    monkeypatch.setenv("HOME", str(home))
    result = bandpo("compare", "--config", str(PRESET), "output_dir=~/cmp", "seeds=[0]", "--dry-run")
    assert result.returncode == 2, result.stdout + result.stderr
    assert result.stderr.startswith(
        f"bandpo compare: error: output_dir '{home / 'cmp'}' holds report/, not written by bandpo compare"
    )
    from bandpo_lab.experiments.compare import load_compare_config, plan_runs

    config = load_compare_config(PRESET, ["output_dir=$HOME/cmp", "seeds=[0]"])
    assert config.output_dir == str(home / "cmp")
    assert plan_runs(config)[0].run_dir == home / "cmp" / "runs" / "grpo" / "seed0"
    assert load_compare_config(PRESET, ["output_dir=runs/x/"]).output_dir == "runs/x/"  # as typed otherwise


def test_a_folder_of_other_files_or_an_earlier_comparison_is_accepted(tmp_path: Path) -> None:
    from bandpo_lab.experiments.compare.plan import output_dir_owner_problem

    out = tmp_path / "out"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    assert output_dir_owner_problem(out) is None and output_dir_owner_problem(tmp_path / "new") is None
    (out / "report").mkdir()
    assert output_dir_owner_problem(out) is not None
    (out / "compare_plan.json").write_text(json.dumps({"config": {}}))  # an earlier comparison: its report
    assert output_dir_owner_problem(out) is None


def test_export_reads_a_tilde_as_a_shell_would(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``--export '~/x'`` was checked and written at ``./~/x``; now at ``$HOME/x`` as output_dir is."""
    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / "x").write_text("a file of the user's")
    out = bandpo("compare", "--config", str(PRESET), f"output_dir={tmp_path / 'cmp'}", "--export", "~/x")
    assert out.returncode == 2 and f"--export '{tmp_path / 'x'}' is a file" in out.stderr, out.stderr


def test_an_output_dir_that_is_a_file_is_refused(tmp_path: Path) -> None:
    """``output_dir=README.md`` printed a plan under ``README.md/runs/...`` before: one line instead, whatever the
    mode, and the same for ``--export`` into a file."""
    a_file = tmp_path / "a_file"
    a_file.write_text("keep me")
    for args, message in (
        ([f"output_dir={a_file}", "--dry-run"], f"output_dir '{a_file}' is a file"),
        ([f"output_dir={a_file}", "--report-only"], f"output_dir '{a_file}' is a file"),
        ([f"output_dir={tmp_path}", "--export", str(a_file)], f"--export '{a_file}' is a file"),
    ):
        out = bandpo("compare", "--config", str(PRESET), *args)
        assert (out.returncode, out.stdout) == (2, ""), out.stdout + out.stderr
        assert out.stderr == f"bandpo compare: error: {message}; it must be a directory (or not exist yet)\n"
    assert a_file.read_text() == "keep me"


def _overrides(out_dir: Path, cache: Path) -> list[str]:
    return [
        f"output_dir={out_dir}",
        "seeds=[0]",
        "train.overrides.max_steps=2",
        "train.overrides.save_steps=2",
        "train.overrides.logging_steps=1",
        "train.overrides.per_device_train_batch_size=8",
        "train.overrides.num_generations=4",
        "train.overrides.steps_per_generation=2",
        *warm_start_overrides(cache, prefix="train.overrides."),
        "eval.k=4",
        "eval.ks=[1,4]",
        "eval.max_problems=16",
        "curves.every=1",
        "curves.k=2",
        "curves.max_problems=8",
    ]


@pytest.mark.slow  # a subprocess that validates every run with the trainer: ~9 s
def test_dry_run_lists_the_plan(tmp_path: Path, warm_cache: Path) -> None:
    out = bandpo("compare", "--config", str(PRESET), *_overrides(tmp_path / "cmp", warm_cache), "--dry-run")
    assert out.returncode == 0, out.stderr
    assert "grpo             seed 0   new" in out.stdout and "band-kl          seed 0   new" in out.stdout
    assert not (tmp_path / "cmp").exists()


@pytest.mark.slow  # a subprocess that validates every run with the trainer: ~9 s
def test_dry_run_of_the_full_preset_checks_every_method(tmp_path: Path) -> None:
    """Every run of the full preset (clip rules, DPPO, the TRL-native methods) through the trainer's checks."""
    out = bandpo("compare", "--config", str(FULL), f"output_dir={tmp_path / 'cmp'}", "--dry-run")
    assert out.returncode == 0, out.stdout + out.stderr
    lines = {tuple(line.split()[:3]): line.split() for line in out.stdout.splitlines()[1:]}
    expected = {
        "grpo": "grpo", "band-kl": "band", "dppo-tv": "dppo_tv", "dppo-kl": "dppo_kl",
        "cispo": "cispo", "sapo": "sapo", "gspo": "gspo",
    }  # fmt: skip
    for label, method in expected.items():
        assert lines[(label, "seed", "0")][3:5] == ["new", method], label
    runs = [line for line in out.stdout.splitlines() if len(line.split()) > 2 and line.split()[1] == "seed"]
    assert len(runs) == 12 * 3  # 12 methods x 3 seeds (after a header and the train.config line)
    assert not (tmp_path / "cmp").exists()


@pytest.mark.slow
def test_compare_a_trl_native_method_end_to_end(tmp_path: Path, warm_cache: Path) -> None:
    out_dir = tmp_path / "cmp"
    args = [*_overrides(out_dir, warm_cache), "methods=[{method: sapo}]", "reference=sapo", "curves.every=0"]
    args += ["train.overrides.model.attn_implementation=eager", "--no-progress"]
    out = bandpo("compare", "--config", str(PRESET), *args)
    assert out.returncode == 0, out.stdout + out.stderr
    run_dir = out_dir / "runs" / "sapo" / "seed0"
    results = json.loads((run_dir / "results.json").read_text())
    assert (results["method"], results["clip_rule"]) == ("sapo", None)
    # the final and baseline evaluations sample with the training's attention (a saved model records none)
    baseline = json.loads((out_dir / "baseline" / "results.json").read_text())
    assert (
        results["settings"]["attn_implementation"] == baseline["settings"]["attn_implementation"] == "eager"
    )
    assert "plain GRPOTrainer" in (run_dir / "train.log").read_text()
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert any("entropy" in r for r in rows) and not any(k.startswith("clip/") for r in rows for k in r)
    md = (out_dir / "report" / "results.md").read_text()
    (row,) = [line for line in md.splitlines() if line.startswith("| sapo |")]
    assert row.rstrip().endswith("| - | - | - | - |")  # clip %, up, down, tail share: not measured


@pytest.mark.slow
def test_compare_end_to_end_and_resume(tmp_path: Path, warm_cache: Path) -> None:
    out_dir = tmp_path / "cmp"
    out = bandpo("compare", "--config", str(PRESET), *_overrides(out_dir, warm_cache), "--no-progress")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "2 runs in" in out.stdout and "report in" in out.stdout

    runs: dict[str, dict[str, Any]] = {}
    for label in ("grpo", "band-kl"):
        run_dir = out_dir / "runs" / label / "seed0"
        for name in (
            "results.json",
            "metrics.jsonl",
            "heldout.jsonl",
            "run_spec.json",
            "train.log",
            "model.safetensors",
        ):
            assert (run_dir / name).is_file(), f"{label}: {name} missing"
        runs[label] = json.loads((run_dir / "results.json").read_text())
        assert runs[label]["clip_rule"] == ("grpo" if label == "grpo" else "band")
        steps = [json.loads(line)["step"] for line in (run_dir / "heldout.jsonl").read_text().splitlines()]
        assert steps == [0, 1, 2]  # step 0, then every step
    assert (out_dir / "baseline" / "results.json").is_file()

    report = out_dir / "report"
    for name in ("report.md", "report.html", "results.md", "results.csv", "results.json", "runs.csv"):
        assert (report / name).stat().st_size > 0, name
    pngs = list((report / "figures").glob("*.png"))
    assert len(pngs) >= 7 and all(p.read_bytes()[:4] == b"\x89PNG" for p in pngs)
    assert (report / "report.html").read_text().count("data:image/png;base64,") == len(pngs)

    # the tables hold the per-run results
    with (report / "runs.csv").open() as f:
        rows = {r["method"]: r for r in csv.DictReader(f)}
    assert set(rows) == {"grpo", "band-kl"}
    for label, res in runs.items():
        for key in ("mean@4", "pass@1", "pass@4", "best@4", "maj@4", "entropy"):
            assert float(rows[label][key]) == res["metrics"][key], (label, key)
    summary = json.loads((report / "results.json").read_text())
    assert summary["methods"]["band-kl"]["metrics"]["mean@4"]["mean"] == runs["band-kl"]["metrics"]["mean@4"]
    text = (report / "report.md").read_text()
    assert "band-kl vs grpo:" in text and "single seed" in text

    # a second call finds both runs finished: nothing is retrained
    logs = {label: (out_dir / "runs" / label / "seed0" / "train.log").read_text() for label in runs}
    again = bandpo("compare", "--config", str(PRESET), *_overrides(out_dir, warm_cache), "--no-progress")
    assert again.returncode == 0, again.stderr
    assert "(2 finished already, 0 to run)" in again.stdout
    for label in runs:
        assert (out_dir / "runs" / label / "seed0" / "train.log").read_text() == logs[label]

    # provenance: every call that queued runs, and the code that trained and evaluated each run
    calls = json.loads((out_dir / "compare_plan.json").read_text())["calls"]
    assert [len(c["queued"]) for c in calls] == [2, 0]
    records = [c["provenance"] for c in calls] + [res["provenance"] for res in runs.values()]
    records += [
        json.loads((out_dir / "runs" / label / "seed0" / "run_info.json").read_text())["provenance"]
        for label in runs
    ]
    for record in records:
        assert {"bandpo", "commit", "dirty", "torch", "transformers", "trl"} <= set(record)
    text = (report / "report.md").read_text()
    assert "Code of the runs: bandpo " in text and "Queued by 2 calls of bandpo compare" in text

    # another budget in the same directory is refused, naming what changed
    changed = bandpo(
        "compare", "--config", str(PRESET), *_overrides(out_dir, warm_cache), "train.overrides.max_steps=3"
    )
    assert changed.returncode == 2
    assert "with another config" in changed.stderr and "max_steps" in changed.stderr

    # the compact export rebuilds the same report without the run directories
    export = tmp_path / "export"
    out = bandpo(
        "compare", "--config", str(PRESET), *_overrides(out_dir, warm_cache), "--export", str(export)
    )
    assert out.returncode == 0, out.stderr
    assert "exported" in out.stdout and "--report-only" in out.stdout
    assert not list(export.rglob("*.safetensors")) and not list(export.rglob("checkpoint-*"))
    (export / "report").rename(tmp_path / "exported-report")
    rebuilt = bandpo(
        "compare", "--config", str(PRESET), *_overrides(export, warm_cache), "--report-only", "--no-progress"
    )
    assert rebuilt.returncode == 0, rebuilt.stdout + rebuilt.stderr
    assert (export / "report" / "results.md").read_text() == (report / "results.md").read_text()

    def provenance_section(md: str) -> str:
        return md.split("## Provenance")[1].split("## Outcome")[0]

    assert provenance_section((export / "report" / "report.md").read_text()) == provenance_section(text)


@pytest.mark.slow
def test_evaluations_at_steps_give_the_late_mean_and_leave_training_unchanged(
    tmp_path: Path, warm_cache: Path
) -> None:
    """``eval.at_steps``: the final evaluation's settings also at those steps, during training, recorded in
    ``evals_at_steps.jsonl`` and in results.json with their late mean; the report's main metric is the late mean;
    sampling forks the RNG, so the training is the same as without them."""
    args = [
        "methods=[{label: grpo, clip_rule: grpo}]",
        "curves.every=0",
        "train.overrides.max_steps=3",
        "--no-progress",
    ]
    runs = {}
    for name, extra in (("with", ["eval.at_steps=[1,2]"]), ("without", [])):
        out = bandpo(
            "compare", "--config", str(PRESET), *_overrides(tmp_path / name, warm_cache), *args, *extra
        )
        assert out.returncode == 0, out.stdout + out.stderr
        runs[name] = tmp_path / name / "runs" / "grpo" / "seed0"
    results = json.loads((runs["with"] / "results.json").read_text())
    rows = [json.loads(line) for line in (runs["with"] / "evals_at_steps.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2] and results["at_steps"] == rows
    assert all(
        r["n_problems"] == 16 and r["n_samples"] == 64 for r in rows
    )  # eval's settings: 16 problems x 4
    expected = (rows[0]["mean@4"] + rows[1]["mean@4"] + results["metrics"]["mean@4"]) / 3
    assert results["late"]["mean@4"] == pytest.approx(expected)
    assert "late" not in json.loads((runs["without"] / "results.json").read_text())

    def training(run_dir: Path) -> list[tuple]:
        lines = (run_dir / "metrics.jsonl").read_text().splitlines()
        return [(r["step"], r.get("loss"), r.get("reward")) for r in map(json.loads, lines) if "loss" in r]

    assert training(runs["with"]) == training(runs["without"]) and len(training(runs["without"])) == 3
    report = (tmp_path / "with" / "report" / "report.md").read_text()
    assert "Late mean@4: mean@4 averaged over the evaluations at steps 1, 2 and the final one" in report


@pytest.mark.slow
def test_a_run_stopped_between_a_checkpoint_and_its_evaluation_resumes_from_that_checkpoint(
    tmp_path: Path, warm_cache: Path
) -> None:
    """An ``eval.at_steps`` step that saves a checkpoint evaluates after the save, so a stop during the evaluation
    loses no training: the resumed run starts at that checkpoint, evaluates the step first (the same row, from the
    checkpoint's weights), and ends with the same results as the run that was not stopped."""
    out_dir = tmp_path / "c"
    args = [
        "compare",
        "--config",
        str(PRESET),
        *_overrides(out_dir, warm_cache),
        "methods=[{label: grpo, clip_rule: grpo}]",
        "curves.every=0",
        "train.overrides.max_steps=3",
        "train.overrides.save_total_limit=null",
        "eval.at_steps=[2]",
        "--no-progress",
    ]
    first = bandpo(*args)
    assert first.returncode == 0, first.stdout + first.stderr
    run = out_dir / "runs" / "grpo" / "seed0"
    [row] = [json.loads(line) for line in (run / "evals_at_steps.jsonl").read_text().splitlines()]
    saved = max(f.stat().st_mtime for f in (run / "checkpoint-2").rglob("*") if f.is_file())
    assert row["step"] == 2 and row["time"] >= saved - 1e-3  # after the checkpoint
    results = json.loads((run / "results.json").read_text())

    def logged(steps: range) -> list[dict[str, Any]]:
        rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
        return [r for r in rows if r["step"] in steps and "loss" in r]

    before = logged(range(1, 3))
    # the stop: checkpoint-2 written, its evaluation not (what the run wrote after it goes; its run info, written
    # when training started, without the record of the finish)
    keep = {
        "checkpoint-2",
        "train_config.yaml",
        "run_spec.json",
        "train.log",
        "metrics.jsonl",
        "run_info.json",
    }
    for path in run.iterdir():
        if path.name not in keep:
            shutil.rmtree(path) if path.is_dir() else path.unlink()
    info = json.loads((run / "run_info.json").read_text())
    assert info.pop("finished")
    (run / "run_info.json").write_text(json.dumps(info))
    second = bandpo(*args)
    assert second.returncode == 0, second.stdout + second.stderr
    assert (
        logged(range(1, 3)) == before and len(logged(range(3, 4))) == 1
    )  # resumed at step 2, with its times
    [again] = [json.loads(line) for line in (run / "evals_at_steps.jsonl").read_text().splitlines()]
    assert {k: v for k, v in again.items() if k != "time"} == {k: v for k, v in row.items() if k != "time"}
    resumed = json.loads((run / "results.json").read_text())
    assert resumed["late"] == results["late"] and resumed["metrics"] == results["metrics"]


def test_methods_naming_no_label_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from bandpo_lab.cli.main import main

    assert (
        main(["compare", "--config", str(PRESET), f"output_dir={tmp_path}", "--methods", ",", "--dry-run"])
        == 2
    )
    err = capsys.readouterr().err
    assert (
        "--methods must name at least one method label, got ','; labels: " in err and "Traceback" not in err
    )


def _refuse_work(*args: Any, **kwargs: Any) -> None:
    raise ValueError("reached the work")


@pytest.mark.parametrize("mode", [(), ("--dry-run",), ("--report-only",)])
@pytest.mark.parametrize("where", ["a-model-folder", "the-working-directory", "the-home-directory"])
def test_a_model_folder_or_the_working_or_home_directory_is_refused_as_output_dir(
    where: str,
    mode: tuple[str, ...],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``output_dir=<a model folder>``, ``output_dir=.`` and ``output_dir=~/`` were accepted: the comparison would
    write its plan, runs/ and report/ among the model's or the user's files (``bandpo train`` refuses such folders).
    Refused in one line before any work; an earlier comparison there is still taken."""
    from bandpo_lab.cli.main import main

    home, work, model = tmp_path / "home", tmp_path / "home" / "work", tmp_path / "model"
    for folder in (work, model):
        folder.mkdir(parents=True)
    (work / "notes.md").write_text("mine")
    (model / "config.json").write_text("{}")
    (model / "model.safetensors").write_bytes(b"weights")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(work)
    out, message = {
        "a-model-folder": (
            str(model),
            f"output_dir {str(model)!r} is the model folder {str(model)!r}: bandpo compare writes no file among a "
            "model's; write it elsewhere",
        ),
        "the-working-directory": (
            ".",
            f"output_dir '.' is the working directory ({str(work)!r}), which holds other files: bandpo compare "
            "would write its own among them; choose a new or empty folder for it",
        ),
        "the-home-directory": (
            "~/",  # YAML reads a bare ~ as null
            f"output_dir {str(home)!r} is the home directory, which holds other files: bandpo compare would write "
            "its own among them; choose a new or empty folder for it",
        ),
    }[where]
    for work in ("run_compare", "validate_with_trainer"):  # never reached (nor trained, were the check gone)
        monkeypatch.setattr(f"bandpo_lab.experiments.compare.{work}", _refuse_work)
    before = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    assert main(["compare", "--config", str(PRESET), f"output_dir={out}", "seeds=[0]", *mode]) == 2
    assert capsys.readouterr().err == f"bandpo compare: error: {message}\n"
    assert {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()} == before
    from bandpo_lab.experiments.compare.plan import output_dir_owner_problem

    if where != "a-model-folder":  # an earlier comparison's folder
        (Path(out).expanduser() / "compare_plan.json").write_text(json.dumps({"config": {}}))
        assert output_dir_owner_problem(Path(out).expanduser()) is None
