"""``run_info.json`` and ``train_config.yaml`` of a training run: the one writer of both. ``run_info.json`` holds
the resolved model path, the data size, the processes, the code's provenance (with the earlier calls' when
resumed), the precision, and ``finished`` once the final model is saved; every write replaces it atomically.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from bandpo_lab._files import read_json_object, write_json
from bandpo_lab.provenance import code_changed, provenance
from bandpo_lab.training.config import TrainConfig
from bandpo_lab.training.layout import CONFIG_FILE, RUN_INFO_FILE


def _earlier_provenance(output_dir: Path) -> list[dict[str, Any]]:
    """The code records of the earlier calls that trained this run, oldest first, each with its start time and,
    where that call recorded it, its precision (a run resumed on another machine may have computed otherwise)."""
    old = read_json_object(output_dir / RUN_INFO_FILE)
    earlier = [r for r in old.get("provenance_earlier") or [] if isinstance(r, dict)]
    if isinstance(old.get("provenance"), dict):
        record = {"started": old.get("started"), **old["provenance"]}
        if isinstance(old.get("precision"), dict):
            record["precision"] = old["precision"]
        earlier.append(record)
    return earlier


def start_run_info(
    output_dir: Path,
    config: TrainConfig,
    *,
    model_path: str,
    n_prompts: int,
    world_size: int,
    resumed_from: Path | None,
    changed: Mapping[str, Any],
) -> None:
    """Write ``train_config.yaml`` and a new ``run_info.json`` when a call starts training (``changed``: the
    settings changed since the run started, ``{key: (old, new)}``)."""
    output_dir.mkdir(parents=True, exist_ok=True)
    (output_dir / CONFIG_FILE).write_text(config.to_yaml())
    info = {
        "model_path": model_path,
        "config_source": config.source,
        "n_prompts": n_prompts,
        "world_size": world_size,
        "resumed_from": str(resumed_from) if resumed_from else None,
        "config_changed_on_resume": {k: list(v) for k, v in changed.items()} or None,
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "argv": sys.argv,
        "provenance": provenance(),
        "provenance_earlier": _earlier_provenance(output_dir) if resumed_from is not None else [],
    }
    write_json(output_dir / RUN_INFO_FILE, info)


def record_run_info(output_dir: Path, **values: Any) -> None:
    """Add ``values`` to ``run_info.json``."""
    path = output_dir / RUN_INFO_FILE
    write_json(path, {**read_json_object(path), **values})


def mark_finished(output_dir: Path, global_step: int, args: Any) -> None:
    """Record in ``run_info.json`` that training ended at ``global_step`` with ``args``' length settings."""
    info = read_json_object(output_dir / RUN_INFO_FILE)
    finished: dict[str, Any] = {
        "global_step": global_step,
        "max_steps": args.max_steps,
        "num_train_epochs": args.num_train_epochs,
        "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    if isinstance(info.get("provenance"), dict):  # the code recorded when this call started training
        finished["checkout_changed_during_run"] = code_changed(info["provenance"], provenance())
    record_run_info(output_dir, finished=finished)
