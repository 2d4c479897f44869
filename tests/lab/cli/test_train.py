"""``bandpo train``: errors, --dry-run and Ctrl-C in process; a tiny run through a subprocess, resumed after it
finished (nothing to do) and after a crash (past a half-written checkpoint); a real Ctrl-C; a data-parallel run
under ``accelerate launch`` with two CPU processes (slow).

The model is the countdown task's tiny Qwen2 with a warm start of a few steps (built locally, nothing
downloaded); the runs check the plumbing, not the learning.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import time
import warnings
from pathlib import Path
from typing import Any

import pytest

from helpers import CONFIGS
from helpers.launch import accelerate_launch
from helpers.tiny import SMALL_RUN, warm_start_overrides

pytest.importorskip("trl")

from bandpo.losses import CLIP_RULES
from bandpo_lab.cli.main import main
from bandpo_lab.config import ConfigWarning, shown_path
from bandpo_lab.training.callbacks import read_metrics
from bandpo_lab.training.checkpoints import scan_checkpoints
from bandpo_lab.training.lock import LOCK_FILE

TINY = CONFIGS / "tiny.yaml"
OUR_METRICS = (
    "clip/frac",
    "clip/frac_up",
    "clip/tail_share",
    "band/lo_mean",
    "band/hi_mean",
    "policy/entropy",
)


def subprocess_env(**extra: str) -> dict[str, str]:
    return {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "HF_DATASETS_OFFLINE": "1",
        "WANDB_DISABLED": "true",
        **extra,
    }


def train_command(args: list[str]) -> list[str]:
    return [sys.executable, "-m", "bandpo_lab.cli.main", "train", "--config", str(TINY), *args]


def bandpo_train(args: list[str], timeout: int = 240, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        train_command(args), env=subprocess_env(**env), capture_output=True, text=True, timeout=timeout
    )


EXPECTED_NOISE = ("is_gradient_checkpointing", "missing keys in the checkpoint")
"""Messages every run used to print although nothing was wrong (bandpo_lab.training.expected_warnings)."""


def step_rows(out: Path) -> list[dict[str, Any]]:
    return [row for row in read_metrics(out) if "loss" in row]


# ------------------------------------------------------------------------------------------------ in process
@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (
            ["learning_rat=1e-5"],
            "unknown config key 'learning_rat' (from the overrides) (did you mean 'learning_rate'?)",
        ),
        (
            ["clip_rule=bandd"],
            "unknown clip rule 'bandd' (did you mean 'band'?); valid names: grpo, clip_higher",
        ),
        (["reward.name=boxd"], "unknown reward 'boxd' (did you mean 'boxed'?); valid names:"),
        (
            ["data.task_options.n_numbers=7"],
            "data.task_options: n_numbers must be an integer in [2, 4], got 7",
        ),
        (
            ["data.path=/no/such.jsonl"],
            "model.path='tiny' means the built-in task's own model, but data.task is not",
        ),
        (["num_generations=3"], "num_generations=3 must divide the generation batch"),
        (
            ["delta=-1"],
            "delta=-1.0 (from the overrides) is TRL's two-sided clamp of the ratio (GRPOConfig.delta, INTELLECT-2's), "
            "not Band's radius: clip_rule='band' takes its radius from band_delta (or clip_rule_kwargs.delta)",
        ),
        (
            ["clip_rule_kwargs.delta=0.1"],
            "both set the clip rule's 'delta': set it once, with band_delta (e.g. band_delta=0.1)",
        ),
        (  # a value out of range names where it and the rule were set
            ["band_delta=0"],
            f"band_delta must be a finite number > 0, got 0.0 (clip_rule: in {shown_path(TINY)}:39; band_delta: from the overrides)",
        ),
        (
            ["temperature=0"],
            "temperature must be a finite number > 0 (TRL divides the logits by it), got 0.0 "
            "(temperature: from the overrides)",
        ),
        (  # band_cap=None keeps the default: the message does not offer None as "no cap"
            ["band_cap=0.5"],
            "band_cap must be a finite number >= 1 (band_cap=None keeps the rule's default; no cap: "
            "clip_rule_kwargs={'cap': None}), got 0.5",
        ),
        (
            ["vllm_importance_sampling_cap=3"],
            "vllm_importance_sampling_cap=3.0 (from the overrides) is the old name of "
            "vllm_importance_sampling_clip_max (renamed in TRL 1.6): write vllm_importance_sampling_clip_max=3.0",
        ),
    ],
)
def test_errors_exit_2_before_loading_a_model(
    overrides: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["train", "--config", str(TINY), f"output_dir={tmp_path / 'out'}", *overrides])
    err = capsys.readouterr().err
    assert code == 2
    assert err.startswith("bandpo train: error: ") and message in err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("spelling", ["$BANDPO_UNSET_VAR", "${BANDPO_UNSET_VAR}"])
def test_an_output_dir_naming_an_unset_variable_is_refused(
    spelling: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``output_dir=runs/$UNSET_VAR/x`` made a folder literally named ``$UNSET_VAR``: refused in one line naming the
    variable, before anything is created (a set variable is read as a shell would)."""
    monkeypatch.delenv("BANDPO_UNSET_VAR", raising=False)
    monkeypatch.chdir(tmp_path)
    value = f"runs/{spelling}/x"
    code = main(["train", "--config", str(TINY), "--dry-run", f"output_dir={value}"])
    assert code == 2
    assert capsys.readouterr().err == (
        f"bandpo train: error: output_dir (from the overrides) {value!r} names the environment variable "
        "$BANDPO_UNSET_VAR, which is not set: set it (export BANDPO_UNSET_VAR=...) or write the path without it\n"
    )
    assert list(tmp_path.iterdir()) == []
    monkeypatch.setenv("BANDPO_UNSET_VAR", "set")
    assert main(["train", "--config", str(TINY), "--dry-run", f"output_dir={value}"]) == 0
    assert "output_dir runs/set/x" in capsys.readouterr().out


def test_dry_run_of_config_tiny_names_the_file_read_and_prints_step_counts_as_integers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--dry-run`` did not say which file ``--config tiny`` read (a local ``tiny.yaml`` won silently) and printed
    ``logging_steps: 5.0``: its first line names the file, a shadowed recipe is a warning, step counts are integers."""
    monkeypatch.chdir(tmp_path)
    assert main(["train", "--config", "tiny", "--dry-run", f"output_dir={tmp_path / 'out'}"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == f"# config tiny: the built-in recipe 'tiny' ({TINY})"
    assert "logging_steps: 5" in lines and "save_steps: 400" in lines and "max_steps: 1600" in lines
    (tmp_path / "tiny.yaml").write_text(f"base: {TINY}\nlogging_steps: 0.5\n")
    with pytest.warns(ConfigWarning) as caught:  # printed as one line (test_main: bandpo warnings)
        assert main(["train", "--config", "tiny", "--dry-run", f"output_dir={tmp_path / 'out'}"]) == 0
    assert [str(w.message) for w in caught] == [
        f"config 'tiny' reads the file tiny.yaml, which shadows the built-in recipe 'tiny' ({TINY}): pass that path "
        "for the built-in one"
    ]
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "# config tiny: the file tiny.yaml" and "logging_steps: 0.5" in lines


def test_dry_run_prints_the_resolved_config(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    code = main(["train", "--config", str(TINY), "--dry-run", f"output_dir={out}", "clip_rule=dcpo"])
    text = capsys.readouterr().out
    assert code == 0
    assert "clip_rule: dcpo" in text and "band_delta" not in text and "# ok: 1000 prompts" in text
    assert not out.exists()


def test_dry_run_names_the_settings_a_method_switch_dropped(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    with pytest.warns(ConfigWarning) as caught:
        code = main(["train", "--config", str(TINY), "--dry-run", f"output_dir={out}", "method=grpo"])
    assert code == 0 and "clip_rule: grpo" in capsys.readouterr().out
    lines = [str(w.message) for w in caught if issubclass(w.category, ConfigWarning)]
    assert lines == [
        "method='grpo' (from the overrides) switches the method from 'band' and drops the inherited settings of the "
        f"method: band_divergence='kl', band_delta=0.05, band_cap=10.0 (in {shown_path(TINY)}); 'grpo' starts from its defaults "
        "and what the overrides set"
    ]


def test_a_range_error_in_a_file_names_its_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "my.yaml"
    config.write_text(f"base: {TINY}\nband_delta: -1\n")
    code = main(["train", "--config", str(config), "--dry-run", f"output_dir={tmp_path / 'out'}"])
    assert code == 2
    assert (
        capsys.readouterr()
        .err.rstrip()
        .endswith(f"got -1.0 (clip_rule: in {shown_path(TINY)}:39; band_delta: in {config}:2)")
    )


def test_an_unknown_clip_rule_is_refused_without_a_switch_notice(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter(
            "error", ConfigWarning
        )  # the notice would say that 'bnad' starts from its defaults
        code = main(["train", "--config", str(TINY), "--dry-run", f"output_dir={tmp_path}", "clip_rule=bnad"])
    assert code == 2 and "unknown clip rule 'bnad' (did you mean 'band'?)" in capsys.readouterr().err


def test_dry_run_warns_when_every_update_is_on_policy(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    code = main(["train", "--config", str(TINY), "--dry-run", f"output_dir={out}", "steps_per_generation=1"])
    captured = capsys.readouterr()
    assert code == 0 and "# ok: 1000 prompts" in captured.out
    assert captured.err.startswith("bandpo train: warning: Every update is on-policy (num_iterations=1, ")
    assert "never binds" in captured.err
    code = main(
        ["train", "--config", str(TINY), "--dry-run", f"output_dir={out}"]
    )  # 4 steps per round: binds
    assert code == 0 and "on-policy" not in capsys.readouterr().err


def test_dry_run_refuses_an_output_dir_that_is_a_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a_file = tmp_path / "notes.txt"
    a_file.write_text("keep me")
    code = main(["train", "--config", str(TINY), "--dry-run", f"output_dir={a_file}"])
    assert code == 2 and a_file.read_text() == "keep me"
    assert capsys.readouterr().err == (
        f"bandpo train: error: output_dir '{a_file}' is a file; it must be a directory (or not exist yet) (from the overrides)\n"
    )


def test_dry_run_of_a_trl_native_method(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    code = main(["train", "--config", str(TINY), "--dry-run", f"output_dir={out}", "method=cispo"])
    text = capsys.readouterr().out
    assert code == 0
    assert text.startswith(f"# config {TINY}: the built-in recipe 'tiny' (")
    assert (
        text.partition("\n")[2].startswith("method: cispo\n")
        and "clip_rule" not in text
        and "band_delta" not in text
    )
    assert "# ok: 1000 prompts" in text and not out.exists()


def test_trl_native_method_with_clip_rule_fields_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["train", "--config", str(TINY), f"output_dir={tmp_path}", "method=sapo", "band_cap=5"])
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err
    assert err.strip() == (
        "bandpo train: error: band_cap=5.0 (from the overrides) is a clip-rule setting, but method='sapo' is "
        "TRL-native (SAPO (Soft Adaptive Policy Optimization), trained by plain GRPOTrainer) and has no clip rule: "
        "remove band_cap, or choose a clip rule (" + ", ".join(CLIP_RULES.names()) + ")"
    )


def test_ctrl_c_names_the_checkpoint_and_the_resume_command(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"

    def interrupted(*args: Any, **kwargs: Any) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr("bandpo_lab.training.run.train", interrupted)
    monkeypatch.setattr("bandpo_lab.training.run.last_checkpoint", lambda path: Path(path) / "checkpoint-6")
    try:
        code = main(["train", "--config", str(TINY), "--resume", f"output_dir={out}", "report_to=none"])
    except KeyboardInterrupt:
        pytest.fail("Ctrl-C escaped as a KeyboardInterrupt (a traceback)")
    err = capsys.readouterr().err
    assert code == 130 and "Traceback" not in err
    assert err.strip() == (
        f"bandpo train: interrupted; last complete checkpoint {out / 'checkpoint-6'}; continue with: "
        f"bandpo train --config {TINY} output_dir={out} report_to=none --resume"
    )


def test_small_warm_start_overrides_find_the_session_warm_start(
    warm_cache: Path, warm_model_dir: Path
) -> None:
    """The overrides the runs below pass select the warm start the session fixture built (the same
    ``WarmStartConfig``, so the same cache key): each run reuses it instead of building its own."""
    from bandpo_lab.training.config import load_train_config
    from bandpo_lab.training.tasks import TASKS

    config = load_train_config(TINY, warm_start_overrides(warm_cache))
    spec = TASKS.get(config.data.task)
    cached = spec.cached_model(spec.options(config.data.task_options), config.model.warm_start, warm_cache)
    assert cached == warm_model_dir


# ------------------------------------------------------------------------------------------------ subprocess
@pytest.mark.slow
def test_train_then_resume_after_a_crash(tmp_path: Path, warm_cache: Path) -> None:
    out = tmp_path / "out"
    common = [f"output_dir={out}", *warm_start_overrides(warm_cache), *SMALL_RUN]
    first = bandpo_train([*common, "max_steps=2", "report_to=tensorboard"])
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-5000:]
    for noise in EXPECTED_NOISE:
        assert noise not in first.stderr

    rows = step_rows(out)
    assert [r["step"] for r in rows] == [1, 2]
    for row in rows:
        missing = [k for k in (*OUR_METRICS, "time", "elapsed_s") if k not in row]
        assert not missing, f"not in metrics.jsonl: {missing}"
    # The generation round's metrics come with its first step.
    assert rows[0]["rewards/countdown/failures"] == 0 and "rewards/countdown/mean" in rows[0]
    assert (out / "checkpoint-2" / "trainer_state.json").is_file()
    assert (out / "config.json").is_file() and (out / "tokenizer.json").is_file()  # the final model
    assert list(out.glob("runs/**/events.out.tfevents.*")), "no TensorBoard event file"
    assert "step 1 | loss" in first.stdout + first.stderr  # the compact progress line
    assert not (out / LOCK_FILE).exists()

    # The run is finished: resuming it trains nothing and leaves the final model as it is.
    files = {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()}
    done = bandpo_train([*common, "max_steps=2", "report_to=tensorboard", "--resume"])
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-5000:]
    assert f"{out} is complete (step 2, max_steps 2): nothing to train" in done.stdout
    assert {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()} == files
    assert [p.name for p in out.glob("checkpoint-*")] == ["checkpoint-2"]

    # A crash after step 3 was logged, during the save of its checkpoint: the resumed run skips that half-written
    # checkpoint, resumes from checkpoint-2 and logs step 3 again.
    with (out / "metrics.jsonl").open("a") as f:
        f.write(json.dumps({"step": 3, "loss": 123.0}) + "\n")
    (out / "checkpoint-3").mkdir()
    (out / "checkpoint-3" / "config.json").write_text("{}")
    second = bandpo_train([*common, "max_steps=4", "report_to=none", "--resume"])
    assert second.returncode == 0, second.stdout[-3000:] + second.stderr[-5000:]
    assert "resuming from" in second.stdout and "checkpoint-2" in second.stdout
    assert (
        "skipping incomplete checkpoint(s) (a save did not finish): checkpoint-3 (no trainer_state.json"
        in (second.stdout)
    )
    for noise in EXPECTED_NOISE:  # the tied lm_head's "missing key" on loading the checkpoint is expected
        assert noise not in second.stderr

    rows = step_rows(out)
    assert [r["step"] for r in rows] == [1, 2, 3, 4], "steps restarted or were logged twice"
    assert all(r["loss"] != 123.0 for r in rows)
    state = json.loads((out / "checkpoint-4" / "trainer_state.json").read_text())
    assert state["global_step"] == 4
    info = json.loads((out / "run_info.json").read_text())
    assert info["resumed_from"].endswith("checkpoint-2") and info["finished"]["global_step"] == 4
    assert info["config_changed_on_resume"] == {"max_steps": [2, 4], "report_to": ["tensorboard", "none"]}


@pytest.mark.slow
def test_train_a_trl_native_method_then_resume(tmp_path: Path, warm_cache: Path) -> None:
    out = tmp_path / "out"
    common = [
        f"output_dir={out}",
        *warm_start_overrides(warm_cache),
        *SMALL_RUN,
        "method=gspo",
        "report_to=none",
    ]
    first = bandpo_train([*common, "max_steps=2"])
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-5000:]
    assert "method     gspo: GSPO" in first.stdout and "plain GRPOTrainer" in first.stdout
    rows = step_rows(out)
    assert [r["step"] for r in rows] == [1, 2]
    assert "clip_ratio/region_mean" in rows[0] and "entropy" in rows[0]  # TRL's own metrics
    assert not [k for r in rows for k in r if k.startswith(("clip/", "band/"))], "BandPO's hook ran"
    assert (out / "checkpoint-2" / "trainer_state.json").is_file() and (out / "config.json").is_file()
    # the saved config resumes as the same experiment: nothing to train
    done = bandpo_train([*common, "max_steps=2", "--resume"])
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-5000:]
    assert "is complete (step 2, max_steps 2): nothing to train" in done.stdout
    changed = bandpo_train([*common, "max_steps=2", "method=cispo", "--resume"])
    assert changed.returncode == 2 and "method: 'gspo' -> 'cispo'" in changed.stderr


@pytest.mark.slow
def test_ctrl_c_exits_130_with_one_line(tmp_path: Path, warm_cache: Path) -> None:
    out = tmp_path / "out"
    args = [
        f"output_dir={out}",
        *warm_start_overrides(warm_cache),
        *SMALL_RUN,
        "max_steps=10000",
        "report_to=none",
    ]
    proc = subprocess.Popen(
        train_command(args),
        env=subprocess_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        # A suite started in the background of a non-interactive shell inherits SIGINT ignored, and Python keeps
        # an ignored SIGINT ignored: give the child the default disposition, as a terminal's Ctrl-C finds it.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        deadline = time.monotonic() + 240
        while scan_checkpoints(out).latest is None and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.5)
        assert proc.poll() is None, proc.communicate()[1][-3000:]
        proc.send_signal(signal.SIGINT)
        stderr = proc.communicate(timeout=120)[1]
    finally:
        proc.kill()
    assert proc.returncode == 130, stderr[-3000:]
    assert "Traceback" not in stderr and "KeyboardInterrupt" not in stderr
    last = scan_checkpoints(out).latest
    assert last is not None
    assert stderr.rstrip().splitlines()[-1] == (
        f"bandpo train: interrupted; last complete checkpoint {last}; continue with: "
        + shlex.join(["bandpo", "train", "--config", str(TINY), *args, "--resume"])
    )
    assert not (out / LOCK_FILE).exists()


@pytest.mark.slow
def test_two_processes_accelerate_launch(tmp_path: Path) -> None:
    """Data parallel on two CPU processes; the task model is built (in a child of the main process) while the
    other process waits."""
    out = tmp_path / "out"
    cache = tmp_path / "cache"  # empty: the main process builds the small warm start
    args = [f"output_dir={out}", *warm_start_overrides(cache), *SMALL_RUN, "max_steps=2", "report_to=none"]
    proc = accelerate_launch(
        ["-m", "bandpo_lab.cli.main", "train", "--config", str(TINY), *args], timeout=900
    )
    assert proc.returncode == 0, f"accelerate launch failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-6000:]}"

    assert json.loads((out / "run_info.json").read_text())["world_size"] == 2
    assert "2 process(es)" in proc.stdout
    # 8 completions per process per optimizer step x 2 processes x 2 steps per generation = 32 per round.
    assert "32 completions per generation round (8 prompts x 4), 16 per optimizer step" in proc.stdout
    rows = step_rows(out)
    assert [r["step"] for r in rows] == [1, 2]  # only the main process writes
    assert all(k in rows[0] for k in OUR_METRICS)
    assert (out / "checkpoint-2").is_dir() and (out / "config.json").is_file()
    assert list(cache.glob("countdown-warm-*/warm_start.json")), "the task model was not built into the cache"
