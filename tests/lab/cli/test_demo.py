"""`bandpo demo` (the README's main job) end to end through subprocess, on a tiny budget, rerun into a
directory an earlier demo left."""

from __future__ import annotations

import json
import math
import os
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from helpers.cli import exit_status


@pytest.mark.slow
def test_demo_runs_end_to_end(tmp_path: Path) -> None:
    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "BANDPO_CACHE_DIR": str(tmp_path / "cache"),
        "OMP_NUM_THREADS": "1",
    }
    out_dir = tmp_path / "demo"
    old_board = out_dir / "runs" / "Jan01_00-00-00_oldhost"  # left by an earlier demo: the rerun clears it
    old_board.mkdir(parents=True)
    (old_board / "events.out.tfevents.1.oldhost.0").write_bytes(b"old curves")
    (out_dir / "checkpoint-1000").mkdir()
    earlier = {"argv": ["/venv/bin/bandpo", "demo"], "provenance": {"bandpo": "0.0.test"}}
    (out_dir / "run_info.json").write_text(json.dumps(earlier))
    args = [
        "demo", "--output-dir", str(out_dir), "--k", "2", "--eval-problems", "10",
        "max_steps=4", "logging_steps=1", "save_steps=1000", "model.warm_start.max_steps=10",
    ]  # fmt: skip
    proc = subprocess.run(
        [sys.executable, "-m", "bandpo_lab.cli.main", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "== bandpo demo: summary ==" in proc.stdout
    assert "pass@1  before" in proc.stdout and str(out_dir / "metrics.jsonl") in proc.stdout
    summary = json.loads((out_dir / "demo_summary.json").read_text())
    assert summary["before"]["n_problems"] == summary["after"]["n_problems"] == 10
    assert "clip_frac" in summary["training"]
    rows = [json.loads(line) for line in (out_dir / "metrics.jsonl").read_text().splitlines()]
    assert any("clip/frac" in r for r in rows)
    assert not old_board.exists() and not (out_dir / "checkpoint-1000").exists()
    assert len(list(out_dir.glob("runs/*/events.out.tfevents.*"))) == 1  # this run's curves only


@pytest.mark.slow
def test_demo_on_the_real_model(tmp_path: Path, smollm2_dir: Path) -> None:
    """`bandpo demo --model smollm2-135m` on a one-step budget: the converted model from the cache, the arith task,
    evaluations before and after."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    out_dir = tmp_path / "demo-llm"
    args = [
        "demo", "--model", "smollm2-135m", "--steps", "1", "--k", "2", "--eval-problems", "2",
        "--output-dir", str(out_dir), "logging_steps=1",
    ]  # fmt: skip
    proc = subprocess.run(
        [sys.executable, "-m", "bandpo_lab.cli.main", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "[1/4] model smollm2-135m" in proc.stdout and "== bandpo demo: summary ==" in proc.stdout
    summary = json.loads((out_dir / "demo_summary.json").read_text())
    assert summary["before"]["n_problems"] == summary["after"]["n_problems"] == 2
    config = (out_dir / "train_config.yaml").read_text()
    assert "path: smollm2-135m" in config and "task: arith" in config and "max_steps: 1" in config


def test_demo_bad_numbers_are_one_line(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "bandpo_lab.cli.main", "demo", "--model", "smollm2-135m", "--steps", "0"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 2
    assert proc.stderr.strip() == "bandpo demo: error: --steps must be an integer >= 1, got 0"


@pytest.mark.parametrize(("flag", "value"), [("--k", "0"), ("--eval-problems", "0")])
def test_demo_zero_counts_are_refused_not_read_as_unset(
    flag: str, value: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from bandpo_lab.cli.main import main

    with pytest.raises(SystemExit) as exc:
        main(["demo", flag, value, "--output-dir", str(tmp_path / "d")])
    assert exc.value.code == 2
    assert capsys.readouterr().err == f"bandpo demo: error: {flag} must be an integer >= 1, got 0\n"


TAIL_ONLY_THEN_NOTHING = [  # one step clips only tail tokens (p_old < 0.2), the next clips nothing
    {"step": 1, "clip/frac": 0.1, "clip/frac_up": 0.1, "clip/frac_down": 0.0, "clip/tail_share": 1.0,
     "clip/frac/p0.0-0.2": 0.5, "tokens/share/p0.0-0.2": 0.2, "policy/entropy": 0.9},
    {"step": 2, "clip/frac": 0.0, "clip/frac_up": 0.0, "clip/frac_down": 0.0, "clip/tail_share": 0.0,
     "clip/frac/p0.0-0.2": 0.0, "tokens/share/p0.0-0.2": 0.2, "policy/entropy": 0.7},
    {"step": 2, "train_runtime": 1.0},
]  # fmt: skip


def test_demo_tail_share_is_pooled_as_in_the_reports(tmp_path: Path) -> None:
    """The demo's training numbers are ``run_summary``'s (what ``bandpo compare`` prints): the tail share pools
    the clipped tokens over steps, so a step that clipped nothing does not count as "0% tail" (the per-step mean
    gave 50% here)."""
    from bandpo_lab.cli.demo import _metrics_summary
    from bandpo_lab.training.layout import METRICS_FILE

    path = tmp_path / METRICS_FILE
    path.write_text("".join(json.dumps(r) + "\n" for r in TAIL_ONLY_THEN_NOTHING))
    stats = _metrics_summary(path)
    assert stats["tail_share"] == pytest.approx(1.0)
    assert stats["clip_frac"] == pytest.approx(0.05) and stats["clip_frac_up"] == pytest.approx(0.05)
    assert (stats["entropy_first"], stats["entropy_last"], stats["steps"]) == (0.9, 0.7, 2.0)
    assert math.isnan(stats["hi_mean"])  # no Band bounds logged (e.g. GRPO): NaN, as before, not None
    path.write_text(json.dumps({"step": 1, "loss": 0.1}) + "\n")
    assert _metrics_summary(path) == {}  # no clipping statistics logged


@pytest.fixture
def fake_work(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """``bandpo demo`` with its work replaced: no model, no dataset, a fixed evaluation, and a "training" that
    only writes :data:`TAIL_ONLY_THEN_NOTHING` as its metrics."""
    from bandpo_lab.training.layout import METRICS_FILE

    def train(config: Any, overwrite: bool, prepared: Any) -> Path:
        out = Path(config.output_dir)
        out.mkdir(parents=True, exist_ok=True)
        (out / METRICS_FILE).write_text("".join(json.dumps(r) + "\n" for r in TAIL_ONLY_THEN_NOTHING))
        return out

    scores = {"pass@1": 0.1, "pass@4": 0.2, "pass@8": 0.3, "n_problems": 3}
    monkeypatch.setattr("bandpo_lab.training.run.prepare", lambda config, overwrite: None)
    monkeypatch.setattr("bandpo_lab.training.run.train", train)
    monkeypatch.setattr("bandpo_lab.training.tasks.build_task_model", lambda *args, **kw: tmp_path / "model")
    monkeypatch.setattr("bandpo_lab.eval.models.resolve_model_dir", lambda model, **kw: tmp_path / "model")
    monkeypatch.setattr("bandpo_lab.eval.datasets.load_eval_dataset", lambda *args, **kwargs: None)
    monkeypatch.setattr("bandpo_lab.cli.demo._evaluate", lambda *args: scores)


@pytest.mark.parametrize(
    ("argv", "settings"),
    [
        (["--model", "smollm2-135m"], ["model.path=smollm2-135m", "max_steps=24", "save_steps=1000"]),
        (["--steps", "7", "lr_scheduler_type=cosine"], ["max_steps=7", "lr_scheduler_type=cosine"]),
        (
            ["--model", "my model", "warmup_steps=3"],
            ["'model.path=my model'", "max_steps=24", "save_steps=1000", "warmup_steps=3"],
        ),
        # the baseline sets the method itself
        (["--steps", "7", "method=dcpo", "seed=3"], ["max_steps=7", "seed=3"]),
        # Band's settings do not apply to GRPO (train refused the printed command); the diagnostics level does
        (
            ["--steps", "7", "band_delta=0.1", "band_cap=5", "diagnostics=full", "seed=3"],
            ["max_steps=7", "diagnostics=full", "seed=3"],
        ),
        (
            [
                "band_delta_schedule=linear",
                "band_delta_end=0.01",
                "band_delta_hold_frac=0.1",
                "clip_rule=band",
            ],
            [],
        ),
        (["clip_rule_kwargs.relax=[0.5, 0.5]", "band_divergence=tv"], []),
    ],
    ids=[
        "llm-defaults",
        "tiny-steps-and-override",
        "quoted",
        "other-method",
        "band",
        "schedule",
        "rule-kwargs",
    ],
)
@pytest.mark.usefixtures("fake_work")
def test_demo_grpo_command_repeats_the_runs_settings(
    argv: list[str],
    settings: list[str],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The printed GRPO baseline is the demo's own run (model, steps and the user's overrides) with the clip
    method at GRPO's defaults and its own output directory, quoted for the shell; it used to drop all of them (100
    steps of the recipe against the demo's 24), then kept Band's settings, which ``bandpo train`` refuses next to
    ``clip_rule=grpo``. On the tiny recipe the printed command passes ``prepare`` (``bandpo train --dry-run``).
    The printed tail share is the pooled one."""
    from bandpo_lab.cli.main import main
    from bandpo_lab.training.layout import METRICS_FILE

    out = tmp_path / "demo"
    assert main(["demo", *argv, "--output-dir", str(out)]) == 0
    stdout = capsys.readouterr().out
    config = "smollm2-arith.yaml" if "--model" in argv else "tiny.yaml"
    command = next(line for line in stdout.splitlines() if line.startswith("compare with GRPO: "))
    words = command.removeprefix("compare with GRPO: ").split(" ")
    assert words[:3] == ["bandpo", "train", "--config"] and words[3].endswith(f"configs/{config}")
    expected = [*settings, "clip_rule=grpo", f"output_dir={out}-grpo"]
    assert " ".join(words[4:]) == " ".join(expected)
    if "--model" not in argv:  # what train --dry-run checks, with the real prepare
        from bandpo_lab.training.config import load_train_config

        monkeypatch.undo()
        from bandpo_lab.training.run import prepare

        prepare(load_train_config(words[3], shlex.split(" ".join(words[4:]))))
    assert f"metrics: {out / METRICS_FILE} " in stdout
    assert f"figure: {out / 'training.png'}\n" in stdout
    assert (out / "training.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "tail share 100.0% " in stdout
    assert json.loads((out / "demo_summary.json").read_text())["training"]["tail_share"] == 1.0


def test_demo_model_error_names_the_model_flag(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The config's ``model.path`` was renamed ``--model`` only in messages that also named ``output_dir``."""
    status = exit_status(["demo", "--dry-run", "--model", "nope", "--output-dir", str(tmp_path / "d")])
    assert status == 2
    err = capsys.readouterr().err
    assert err.startswith("bandpo demo: error: --model 'nope' does not exist ") and "model.path" not in err


@pytest.mark.usefixtures("fake_work")
@pytest.mark.parametrize("argv", [[], ["--model", "smollm2-135m"]], ids=["tiny", "builtin"])
def test_demo_takes_its_model_from_model_cache_dir(
    argv: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The evaluation before RL took its model from the default cache while the training read ``model.cache_dir``:
    a second build of the warm start, written where the user had sent nothing. Both now read train's cache."""
    from bandpo_lab.cli.main import main

    seen: list[Path] = []
    model = tmp_path / "model"
    monkeypatch.setattr(
        "bandpo_lab.training.tasks.build_task_model", lambda *a, **kw: seen.append(a[3]) or model
    )
    monkeypatch.setattr(
        "bandpo_lab.eval.models.resolve_model_dir", lambda name, **kw: seen.append(kw["cache_dir"]) or model
    )
    monkeypatch.setenv("BANDPO_CACHE_DIR", str(tmp_path / "default-cache"))
    mine = tmp_path / "mine"
    assert main(["demo", *argv, "--output-dir", str(tmp_path / "demo"), f"model.cache_dir={mine}"]) == 0
    assert seen == [mine]


@pytest.mark.usefixtures("fake_work")
@pytest.mark.parametrize("override", ["output_dir=elsewhere", " output_dir = elsewhere"])
def test_demo_output_dir_override_is_refused(
    override: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An ``output_dir=`` override was silently replaced by the demo's own directory (runs/demo, whose earlier run
    the demo then discarded); it is refused in one line naming --output-dir, before any work."""
    from bandpo_lab.cli.main import main

    with pytest.raises(SystemExit) as exc:
        main(["demo", "--output-dir", str(tmp_path / "d"), override])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith(f"bandpo demo: error: override {override!r} is not taken: ")
    assert "--output-dir" in err and err.count("\n") == 1
    assert not (tmp_path / "d").exists() and not (tmp_path / "elsewhere").exists()


@pytest.mark.parametrize(("model", "name"), [(None, "DEFAULT_CONFIG"), ("smollm2-135m", "LLM_CONFIG")])
def test_demo_without_its_recipe_says_where_it_comes_from(
    model: str | None,
    name: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """An install that lost its recipes (a wheel has them since setup.py copies configs/: tests/test_packaging.py):
    the demo says so in one line, before any work; with --config it needs none."""
    import bandpo_lab.cli.demo as demo
    from bandpo_lab.cli.main import main

    missing = tmp_path / "configs" / "recipe.yaml"
    monkeypatch.setattr(demo, name, missing)
    model_args = [] if model is None else ["--model", model]
    with pytest.raises(SystemExit) as exc:
        main(["demo", *model_args, "--output-dir", str(tmp_path / "d")])
    assert exc.value.code == 2
    assert capsys.readouterr().err == (
        f"bandpo demo: error: the demo's recipe {missing} is missing from this install of bandpo (a clone's "
        "configs/, a wheel's bandpo_lab/recipes/): reinstall bandpo, or pass --config FILE\n"
    )
    assert not (tmp_path / "d").exists()


@pytest.mark.usefixtures("fake_work")
def test_demo_config_without_a_task_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A recipe without ``data.task`` is refused in one line naming ``--config`` and the tasks the demo takes
    (through ``cli.bounds.usage_error``, as ``bandpo probe``: exit status 2)."""
    from bandpo_lab.cli.main import main

    recipe = tmp_path / "no-task.yaml"
    recipe.write_text("model: {path: some/model}\ndata: {path: data/train.jsonl}\nreward: {name: dapo}\n")
    with pytest.raises(SystemExit) as exc:
        main(["demo", "--config", str(recipe), "--output-dir", str(tmp_path / "d")])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith(f"bandpo demo: error: --config {recipe} names no data.task; the demo needs one of ")
    assert "countdown" in err and "arith" in err and err.count("\n") == 1


def test_demo_figure_without_matplotlib_says_why(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The demo's numbers stand without matplotlib (an optional extra): the figure line says why there is none."""
    import sys

    from bandpo_lab.cli.demo import _training_figure
    from bandpo_lab.training.layout import METRICS_FILE

    (tmp_path / METRICS_FILE).write_text(json.dumps({"step": 1, "loss": 0.1}) + "\n")
    assert _training_figure(tmp_path, "t") == "none (the run logged no reward, entropy or clipping)"
    (tmp_path / METRICS_FILE).write_text("".join(json.dumps(r) + "\n" for r in TAIL_ONLY_THEN_NOTHING))
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    message = _training_figure(tmp_path, "t")
    assert message.startswith("none (") and "matplotlib" in message
    assert not (tmp_path / "training.png").exists()


def test_demo_dry_run_prints_the_plan_and_builds_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``bandpo demo --dry-run`` was refused: it checks the run as train --dry-run does, prints the four steps and
    exits 0 without a warm start, an evaluation or a run directory."""
    from bandpo_lab.cli.main import main
    from helpers import CONFIGS

    monkeypatch.setenv("BANDPO_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.chdir(tmp_path)  # the recipe is named by its full path
    out = tmp_path / "demo"
    assert main(["demo", "--dry-run", "--no-progress", "--output-dir", str(out), "--steps", "7"]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "bandpo demo: dry run: the plan (nothing built, evaluated or trained)",
        f"recipe: the built-in recipe 'tiny' ({CONFIGS / 'tiny.yaml'})",
        "[1/4] model the tiny model of task 'countdown'",
        "[2/4] held-out evaluation before RL: 200 problems of countdown/test, 8 samples each, up to 8 new tokens",
        f"[3/4] RL with clip rule 'band' for 7 steps in {out} (1000 prompts; an earlier demo run there is replaced)",
        "[4/4] held-out evaluation after RL",
    ]
    assert list(tmp_path.iterdir()) == []


def test_train_and_demo_take_no_progress(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``--no-progress`` was missing on train and demo: it sets transformers' disable_tqdm (the training bar; the
    model building follows it), which the dry run shows; the resume command repeats it."""
    import argparse

    from bandpo_lab.cli.main import main
    from bandpo_lab.cli.train import resume_command
    from helpers import CONFIGS

    tiny = str(CONFIGS / "tiny.yaml")
    assert (
        main(["train", "--config", tiny, "--dry-run", "--no-progress", f"output_dir={tmp_path / 'o'}"]) == 0
    )
    assert "disable_tqdm: true" in capsys.readouterr().out.splitlines()
    assert main(["train", "--config", tiny, "--dry-run", f"output_dir={tmp_path / 'o'}"]) == 0
    assert "disable_tqdm" not in capsys.readouterr().out
    args = argparse.Namespace(config="tiny", overrides=[], allow_config_change=False, no_progress=True)
    assert resume_command(args) == "bandpo train --config tiny --resume --no-progress"


@pytest.mark.parametrize(
    ("argv", "refused"),
    [
        (["/venv/bin/bandpo", "train", "--config", "tiny"], True),
        (["/x/worker.py", "/runs/cmp/runs/grpo/seed0/run_spec.json"], True),  # a comparison's run
        (["/venv/bin/bandpo", "demo", "--steps", "7"], False),  # an earlier demo: replaced
    ],
)
def test_demo_does_not_discard_another_commands_run(
    argv: list[str], refused: bool, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The demo trains with overwrite: ``--output-dir`` naming a ``bandpo train`` run silently discarded its
    checkpoints and replaced its model. It replaces only an earlier demo's run (run_info.json's command line),
    refusing another in one line before any work."""
    from bandpo_lab.cli.main import main
    from bandpo_lab.training.layout import RUN_INFO_FILE

    out = tmp_path / "run"
    (out / "checkpoint-400").mkdir(parents=True)
    (out / RUN_INFO_FILE).write_text(json.dumps({"argv": argv, "provenance": {"bandpo": "0.0.test"}}))
    if not refused:
        assert main(["demo", "--dry-run", "--output-dir", str(out)]) == 0
        return
    with pytest.raises(SystemExit) as exc:
        main(["demo", "--dry-run", "--output-dir", str(out)])
    assert exc.value.code == 2
    command = shlex.join([Path(argv[0]).name, *argv[1:]])
    assert capsys.readouterr().err == (
        f"bandpo demo: error: --output-dir {str(out)!r} holds a run of another command ({command}): the demo "
        "replaces only an earlier demo's run; choose another --output-dir\n"
    )
    assert (out / "checkpoint-400").is_dir()


def test_demo_into_a_folder_of_other_files_names_its_own_flag(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``bandpo demo --output-dir notes`` (a folder of the user's files) was refused in train's words: "output_dir
    ... an earlier bandpo training run's folder (with --overwrite or --resume); choose another output_dir", flags
    the demo has not. The refusal names --output-dir and what the demo writes into."""
    from bandpo_lab.cli.main import main

    out = tmp_path / "notes"
    out.mkdir()
    (out / "README.md").write_text("mine")
    with pytest.raises(SystemExit) as exc:
        main(["demo", "--dry-run", "--output-dir", str(out)])
    assert exc.value.code == 2
    assert capsys.readouterr().err == (
        f"bandpo demo: error: --output-dir {str(out)!r} holds files bandpo did not write (README.md): the demo "
        "writes only into a new or empty folder or an earlier demo's run; choose another --output-dir\n"
    )
    assert sorted(p.name for p in out.iterdir()) == ["README.md"]


@pytest.mark.parametrize(
    ("where", "message"),
    [
        ("notes.txt", "--output-dir {out!r} is a file; it must be a directory (or not exist yet)"),
        ("", "--output-dir must be a directory path, got ''"),
        (
            "model/sub",
            "--output-dir {out!r} is inside the model folder --model {model!r}: the run would write over the model it "
            "trains; choose an --output-dir outside the model folder that does not hold it",
        ),
    ],
    ids=["a-file", "empty", "inside-the-model"],
)
def test_demo_output_dir_problems_name_the_flag(
    where: str, message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--output-dir notes.txt`` was refused as "output_dir ... (from the overrides)", a key and an override the
    user never wrote; an empty one silently became runs/demo."""
    from bandpo_lab.cli.main import main

    (tmp_path / "notes.txt").write_text("mine")
    (tmp_path / "model").mkdir()
    out = str(tmp_path / where) if where else ""
    model_args = ["--model", str(tmp_path / "model")] if where.startswith("model") else []
    with pytest.raises(SystemExit) as exc:
        main(["demo", "--dry-run", *model_args, "--output-dir", out])
    assert exc.value.code == 2
    expected = message.format(out=out, model=str(tmp_path / "model"))
    assert capsys.readouterr().err == f"bandpo demo: error: {expected}\n"
    assert (tmp_path / "notes.txt").read_text() == "mine"
