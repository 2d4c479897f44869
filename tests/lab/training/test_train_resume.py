"""Tests for ``bandpo_lab.training.resume``: a finished run is not trained further, and a resume with a config that
changes the experiment is refused (showing the keys) unless allowed. No model is loaded: the checkpoints are
``train_helpers.fake_checkpoint``; the end-to-end resume of a finished run is in ``tests/lab/cli/test_train.py``."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import pytest
from train_helpers import BANDPO_RUN_INFO, fake_checkpoint

from helpers import CONFIGS

pytest.importorskip("trl")

from bandpo.integrations.trl import BandPOConfig
from bandpo_lab.cli.main import main
from bandpo_lab.training.config import SECTIONS, ConfigError, dataclass_types, load_train_config
from bandpo_lab.training.resume import CONFIG_FILE, HARMLESS_KEYS, RUN_INFO_FILE, config_changes
from bandpo_lab.training.run import prepare, train

TINY = CONFIGS / "tiny.yaml"


def started_run(out: Path, *overrides: str, step: int = 4) -> list[str]:
    """``out`` as a run of tiny.yaml + ``overrides`` that saved ``checkpoint-<step>``; returns its overrides."""
    base = [f"output_dir={out}", "report_to=none", "max_steps=8", *overrides]
    out.mkdir(parents=True)
    (out / CONFIG_FILE).write_text(load_train_config(TINY, base).to_yaml())
    fake_checkpoint(out, step)
    return base


def test_harmless_keys_are_config_keys() -> None:
    fields = {f.name for f in dataclasses.fields(BandPOConfig)}
    sections = {f"{name}.{key}" for name, cls in SECTIONS.items() for key in dataclass_types(cls)}
    assert not HARMLESS_KEYS - fields - sections


def test_config_changes_sort_altering_from_harmless() -> None:
    def changes(*overrides: str) -> tuple[set[str], set[str]]:
        before = load_train_config(TINY).to_dict()
        found = config_changes(before, load_train_config(TINY, list(overrides)).to_dict())
        return set(found.altering), set(found.harmless)

    assert changes() == (set(), set())
    altering, _ = changes("clip_rule=grpo")
    assert {"clip_rule", "band_cap"} <= altering
    assert changes("logging_steps=1", "save_steps=7", "report_to=none", "output_dir=x") == (
        set(),
        {"logging_steps", "save_steps", "report_to", "output_dir"},
    )
    assert changes("max_steps=3200") == (set(), {"max_steps"})  # tiny.yaml's schedule is constant
    assert changes("max_steps=3200", "lr_scheduler_type=linear") == (
        {"max_steps", "lr_scheduler_type"},
        set(),
    )
    assert changes("learning_rate=1e-3", "seed=1", "data.task_options.n_train=500")[0] == {
        "learning_rate",
        "seed",
        "data.task_options.n_train",
    }
    assert changes("beta=0.1") == (set(), set())  # tiny.yaml's own value, set again
    # a mapping is flattened to its entries; activation checkpointing's settings change no result (docs/trl.md)
    kwargs = "activation_checkpointing_kwargs.use_reentrant"
    assert changes("activation_checkpointing_kwargs={use_reentrant: false}") == (set(), {kwargs})
    altering, harmless = changes("model.warm_start={n_layers: 2}")
    assert "model.warm_start.n_layers" in altering and not harmless


def test_resume_with_another_clip_rule_is_refused_unless_allowed(tmp_path: Path) -> None:
    out = tmp_path / "out"
    base = started_run(out)
    changed = load_train_config(TINY, [*base, "clip_rule=grpo", "logging_steps=1"])
    with pytest.raises(ConfigError, match=r"changes the experiment .*clip_rule: 'band' -> 'grpo'") as err:
        prepare(changed, resume=True)
    assert "--allow-config-change" in str(err.value) and "logging_steps" not in str(err.value)

    prepared = prepare(changed, resume=True, allow_config_change=True)
    assert prepared.resume_from == out / "checkpoint-4"
    assert prepared.resume_plan is not None and prepared.resume_plan.changes is not None
    assert "clip_rule" in prepared.resume_plan.changes.altering
    assert "logging_steps" in prepared.resume_plan.changes.harmless
    # harmless differences alone need no flag
    assert prepare(load_train_config(TINY, [*base, "logging_steps=1"]), resume=True).resume_from is not None
    with pytest.raises(ConfigError, match=r"allow_config_change applies to a resume only"):
        prepare(changed, allow_config_change=True)


def test_cli_shows_the_differing_keys(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    base = started_run(tmp_path / "out")
    code = main(["train", "--config", str(TINY), "--resume", *base, "clip_rule=grpo"])
    err = capsys.readouterr().err
    assert code == 2 and "clip_rule: 'band' -> 'grpo'" in err and "Traceback" not in err
    code = main(["train", "--config", str(TINY), "--resume", "--allow-config-change", "--dry-run", *base])
    assert code == 0 and "would resume from" in capsys.readouterr().out


def test_a_run_at_max_steps_is_complete_and_its_final_model_is_written_once(tmp_path: Path) -> None:
    """Killed after its last checkpoint but before the final save: resuming copies the model, trains nothing."""
    out = tmp_path / "out"
    base = started_run(out, step=8)
    config = load_train_config(TINY, base)
    prepared = prepare(config, resume=True)
    assert prepared.resume_plan is not None and prepared.resume_plan.complete_at == 8
    assert prepared.resume_from is None
    assert train(config, resume=True, prepared=prepared) == out  # no model loads: the test has none to load
    assert (out / "model.safetensors").read_bytes() == (
        out / "checkpoint-8" / "model.safetensors"
    ).read_bytes()
    assert not (out / "optimizer.pt").exists()
    assert json.loads((out / RUN_INFO_FILE).read_text())["finished"]["global_step"] == 8


def test_a_finished_run_is_left_untouched(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    base = started_run(out, step=6)  # max_steps 8, saved every 6: the run ended at 8 with no checkpoint there
    (out / "config.json").write_text("{}")
    (out / "model.safetensors").write_bytes(b"final")
    (out / RUN_INFO_FILE).write_text(
        json.dumps({**BANDPO_RUN_INFO, "finished": {"global_step": 8, "max_steps": 8}})
    )
    before = {p.name: p.stat().st_mtime_ns for p in out.iterdir()}

    code = main(["train", "--config", str(TINY), "--resume", *base])
    text = capsys.readouterr().out
    assert code == 0 and f"{out} is complete (step 8, max_steps 8): nothing to train" in text
    assert {p.name: p.stat().st_mtime_ns for p in out.iterdir()} == before
    assert (out / "model.safetensors").read_bytes() == b"final"

    # a longer budget continues from the last checkpoint
    longer = prepare(load_train_config(TINY, [*base, "max_steps=12"]), resume=True)
    assert longer.resume_plan is not None and longer.resume_plan.complete_at is None
    assert longer.resume_from == out / "checkpoint-6"


def test_resume_from_checkpoints_saved_without_training_state_is_refused(tmp_path: Path) -> None:
    """``save_only_model=true`` checkpoints hold no optimizer state: a resume must not start again over them
    (truncating metrics.jsonl and overwriting the checkpoints) as if they were unfinished saves."""
    out = tmp_path / "out"
    base = started_run(out, "save_only_model=true")
    fake_checkpoint(out, 6)
    for step in (4, 6):
        (out / f"checkpoint-{step}" / "optimizer.pt").unlink()
        (out / f"checkpoint-{step}" / "scheduler.pt").unlink()
    config = load_train_config(TINY, base)
    with pytest.raises(
        ConfigError, match=r"no optimizer or scheduler state .*checkpoint-6 .*save_only_model"
    ):
        prepare(config, resume=True)
    assert prepare(config, overwrite=True).resume_from is None  # starting again is one flag away

    # the newest save unfinished (no trainer_state.json), the older one model-only: still refused
    (out / "checkpoint-6" / "trainer_state.json").unlink()
    with pytest.raises(ConfigError, match=r"checkpoint-4 \(saved without training state"):
        prepare(config, resume=True)
    # only an unfinished first save: nothing was kept, so a resume starts from scratch (documented)
    for name in ("model.safetensors", "trainer_state.json"):
        (out / "checkpoint-4" / name).unlink()
    assert prepare(config, resume=True).resume_from is None


def test_resume_in_another_trainers_folder_at_max_steps_copies_nothing_over_its_files(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A TRL run's folder whose last checkpoint reaches max_steps: bandpo trains nothing and copies no model over
    the folder's own top-level files (it replaced a user's config.json and weights with the checkpoint's and wrote a
    run_info.json saying a run finished)."""
    out = tmp_path / "trlrun"
    fake_checkpoint(out, 8, bandpo_run=False)
    (out / "config.json").write_text('{"mine": true}')
    (out / "model.safetensors").write_bytes(b"my weights")
    before = {p.name: p.stat().st_mtime_ns for p in out.iterdir()}
    base = [f"output_dir={out}", "report_to=none", "max_steps=8"]
    code = main(["train", "--config", str(TINY), "--resume", *base])
    text = capsys.readouterr().out
    assert code == 0 and "nothing to train; another trainer's folder, left as it is" in text
    assert f"the model of step 8 is {out / 'checkpoint-8'}" in text
    assert {p.name: p.stat().st_mtime_ns for p in out.iterdir()} == before
    assert (out / "model.safetensors").read_bytes() == b"my weights"


@pytest.mark.parametrize("name", ["run_info.json", "metrics.jsonl", "train_config.yaml"])
def test_resume_in_another_trainers_folder_holding_files_named_like_a_runs_is_refused(
    tmp_path: Path, name: str
) -> None:
    """Another trainer's folder with a complete checkpoint and the user's own file named like one a bandpo run
    writes: --resume replaced the run_info.json, cut the metrics.jsonl to the checkpoint's step (the user's rows and
    comments gone) and read a train_config.yaml as the run's config; refused before anything is written."""
    out = tmp_path / "trlrun"
    fake_checkpoint(out, 2, bandpo_run=False)
    (out / name).write_text('{"step": 1}\n# mine\n{"step": 99}\n')
    before = {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()}
    config = load_train_config(TINY, [f"output_dir={out}", "report_to=none", "max_steps=4"])
    match = (
        rf"^--resume: output_dir '{out}' is not a bandpo run \(checkpoint-2/, {re.escape(name)}\) and holds "
        rf"{re.escape(name)}, which a bandpo run writes in its folder .*: resuming there would replace them"
    )
    with pytest.raises(ConfigError, match=match):
        prepare(config, resume=True)
    assert {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()} == before
    (out / name).unlink()
    assert prepare(config, resume=True).resume_from == out / "checkpoint-2"


def test_resume_in_another_trainers_folder_without_a_complete_checkpoint_is_refused(tmp_path: Path) -> None:
    """An empty (or unfinished) checkpoint-N in a folder of the user's own files: --resume would start from
    scratch there and write its model over them; refused before anything is written."""
    out = tmp_path / "userfolder"
    (out / "checkpoint-1").mkdir(parents=True)
    (out / "README.md").write_text("# mine")
    config = load_train_config(TINY, [f"output_dir={out}", "report_to=none"])
    match = (
        rf"^--resume: output_dir '{out}' is not a bandpo run \(README.md, checkpoint-1/\) and holds no complete "
        r"checkpoint to continue \(.*checkpoint-1.*\): a run from scratch would write its model over those files"
    )
    with pytest.raises(ConfigError, match=match):
        prepare(config, resume=True)
    assert sorted(p.name for p in out.iterdir()) == ["README.md", "checkpoint-1"]
