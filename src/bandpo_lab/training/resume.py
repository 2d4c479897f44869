"""What ``bandpo train --resume`` continues: the checkpoint, whether the run already finished, and whether the
config still describes the same experiment (which changes are allowed: docs/trl.md, "Troubleshooting runs").
"""

from __future__ import annotations

import copy
import dataclasses
import functools
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from bandpo_lab._files import read_json_object
from bandpo_lab.training.checkpoints import CheckpointScan, scan_checkpoints
from bandpo_lab.training.config import ConfigError, TrainConfig
from bandpo_lab.training.layout import CONFIG_FILE, MODEL_CONFIG_FILE, RUN_INFO_FILE

HARMLESS_KEYS = frozenset(
    {
        "output_dir",
        "logging_steps",
        "logging_first_step",
        "logging_strategy",
        "logging_nan_inf_filter",
        "log_level",
        "log_level_replica",
        "log_on_each_node",
        "log_completions",
        "log_completions_hub_repo",
        "log_unique_prompts",
        "num_completions_to_print",
        "disable_tqdm",
        "report_to",
        "run_name",
        "project",
        "trackio_space_id",
        "save_steps",
        "save_strategy",
        "save_total_limit",
        "save_on_each_node",
        "save_only_model",
        "push_to_hub",
        "hub_model_id",
        "hub_strategy",
        "hub_token",
        "hub_private_repo",
        "hub_always_push",
        "hub_revision",
        "dataloader_num_workers",
        "dataloader_pin_memory",
        "dataloader_persistent_workers",
        "dataloader_prefetch_factor",
        "activation_checkpointing",
        "activation_checkpointing_kwargs",
        "gradient_checkpointing",
        "gradient_checkpointing_kwargs",
        "torch_empty_cache_steps",
        "model.cache_dir",
    }
)
"""Config keys (dotted for sections) that may change on resume: they do not change what is computed."""

LENGTH_KEYS = ("max_steps", "num_train_epochs")
"""Keys that set the run's length: harmless on resume when the learning-rate schedule does not depend on it."""

_UNSET = "(unset)"


@functools.cache
def _trainer_defaults() -> dict[str, Any]:
    from bandpo.integrations.trl import BandPOConfig

    out = {}
    for f in dataclasses.fields(BandPOConfig):
        if f.default is not dataclasses.MISSING:
            value = f.default
        elif f.default_factory is not dataclasses.MISSING:
            value = f.default_factory()
        else:
            continue
        out[f.name] = getattr(value, "value", value)  # enums compare as their config strings
    return out


def trainer_default(name: str) -> Any:
    """The ``BandPOConfig`` default of field ``name``."""
    return copy.deepcopy(_trainer_defaults()[name])


def _flatten(data: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in data.items():
        dotted = f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            out.update(_flatten(value, dotted + "."))
        else:
            out[dotted] = value
    return out


def _effective(flat: Mapping[str, Any], key: str) -> Any:
    """The value of dotted ``key`` in a flattened config: its own, a top-level field's default, or unset."""
    if key in flat:
        return flat[key]
    if key in _trainer_defaults():
        return trainer_default(key)
    return _UNSET


@dataclass
class ConfigChanges:
    """Differences between the config a run started with and the current one: ``key -> (before, now)``."""

    altering: dict[str, tuple[Any, Any]] = field(default_factory=dict)
    harmless: dict[str, tuple[Any, Any]] = field(default_factory=dict)

    @staticmethod
    def describe(changes: Mapping[str, tuple[Any, Any]]) -> str:
        return ", ".join(f"{key}: {before!r} -> {now!r}" for key, (before, now) in changes.items())


def _length_independent_schedule(flat: Mapping[str, Any]) -> bool:
    if _effective(flat, "band_delta_schedule") not in (None, "constant"):
        return False  # the radius of a step depends on max_steps
    schedule = _effective(flat, "lr_scheduler_type")
    warmup = _effective(flat, "warmup_steps")
    if schedule == "constant":
        return True
    return schedule == "constant_with_warmup" and (
        warmup == 0 or (isinstance(warmup, (int, float)) and warmup >= 1)
    )


def config_changes(saved: Mapping[str, Any], current: Mapping[str, Any]) -> ConfigChanges:
    """Compare two configs as ``TrainConfig.to_dict()`` writes them (an absent top-level key is the default) and
    sort each difference into altering or harmless."""
    before, now = _flatten(saved), _flatten(current)
    changes = ConfigChanges()
    length_ok = _length_independent_schedule(now) and _effective(before, "lr_scheduler_type") == _effective(
        now, "lr_scheduler_type"
    )
    for key in sorted(set(before) | set(now)):
        old, new = _effective(before, key), _effective(now, key)
        if old == new:
            continue
        # a mapping's entries are flattened (activation_checkpointing_kwargs.use_reentrant): its key decides
        harmless = (
            key.split(".")[0] in HARMLESS_KEYS or key in HARMLESS_KEYS or (key in LENGTH_KEYS and length_ok)
        )
        (changes.harmless if harmless else changes.altering)[key] = (old, new)
    return changes


def _finished_at(output_dir: Path, args: Any) -> int | None:
    """The step the recorded end of training reached, if it covers the current length settings (the final model
    saved)."""
    record = read_json_object(output_dir / RUN_INFO_FILE).get("finished")
    if not isinstance(record, dict) or not (output_dir / MODEL_CONFIG_FILE).is_file():
        return None
    step = record.get("global_step")
    if not isinstance(step, int):
        return None
    if args.max_steps > 0:
        return step if step >= args.max_steps else None
    ran_epochs = (
        record.get("max_steps", 0) <= 0 and record.get("num_train_epochs", 0) >= args.num_train_epochs
    )
    return step if ran_epochs else None


@dataclass
class ResumePlan:
    """What a resume does: ``scan.latest`` is the checkpoint to resume from; ``complete_at``, the step the run
    already finished at (``None``: train), maybe with the final model to copy from ``scan.latest``
    (``final_from_checkpoint``); ``changes`` against the config the run started with; ``foreign``: the folder is
    another trainer's (nothing copied over its files)."""

    scan: CheckpointScan
    complete_at: int | None = None
    final_from_checkpoint: bool = False
    changes: ConfigChanges | None = None
    foreign: bool = False


def plan_resume(
    output_dir: Path, config: TrainConfig, args: Any, allow_config_change: bool = False
) -> ResumePlan:
    """Inspect ``output_dir`` for a resume of ``config`` (``args``: its trainer config); ``ConfigError`` when the
    config changes the experiment (listing the keys) without ``allow_config_change``."""
    plan = ResumePlan(scan=scan_checkpoints(output_dir))
    plan.complete_at = _finished_at(output_dir, args)
    if plan.complete_at is None and args.max_steps > 0 and (plan.scan.step or 0) >= args.max_steps:
        plan.complete_at, plan.final_from_checkpoint = plan.scan.step, True
    if plan.complete_at is None and plan.scan.only_model_saves:
        raise ConfigError(
            f"--resume: the checkpoints in {output_dir} hold a model but no optimizer or scheduler state "
            f"({plan.scan.describe_skipped()}; saved with save_only_model=true), so no training can continue "
            "from them: train with --overwrite to start again (set save_only_model=false to make resumable "
            "checkpoints), or choose another output_dir"
        )
    saved_file = output_dir / CONFIG_FILE
    if (plan.scan.latest is None and plan.complete_at is None) or not saved_file.is_file():
        return plan  # nothing to continue (a fresh start), or nothing to compare with
    try:
        saved = yaml.safe_load(saved_file.read_text()) or {}
    except yaml.YAMLError:
        saved = None
    if not isinstance(saved, dict):
        if allow_config_change:
            return plan
        raise ConfigError(
            f"{saved_file} is unreadable, so the config the run started with is unknown: restore it, or resume "
            "with --allow-config-change"
        )
    plan.changes = config_changes(saved, yaml.safe_load(config.to_yaml()))
    if plan.changes.altering and not allow_config_change:
        raise ConfigError(
            f"--resume with a config that changes the experiment in {output_dir}: "
            f"{ConfigChanges.describe(plan.changes.altering)} (the run started with {saved_file}). Resume with "
            "the same settings, pass --allow-config-change to continue with the new ones anyway, or choose "
            "another output_dir"
        )
    return plan
