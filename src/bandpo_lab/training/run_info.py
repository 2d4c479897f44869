"""``run_info.json`` and ``train_config.yaml`` of a training run: the one writer of both.

``run_info.json`` holds the resolved model path, the data size, the processes, the code's provenance (bandpo's
version and git commit with a dirty flag and the libraries' versions, :func:`bandpo_lab.provenance.provenance`) with
those of the earlier calls when resumed, the precision once the trainer resolved it, and ``finished`` once the
final model is saved (with whether the checkout changed during the call). Every write replaces the file
atomically.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from bandpo_lab._files import read_json_object
from bandpo_lab.provenance import code_changed, provenance
from bandpo_lab.training.config import TrainConfig
from bandpo_lab.training.layout import CONFIG_FILE, RUN_INFO_FILE

__all__ = ["mark_finished", "record_run_info", "start_run_info"]


def _write(path: Path, info: Mapping[str, Any]) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(info, indent=2) + "\n")
    os.replace(tmp, path)


def _earlier_provenance(output_dir: Path) -> list[dict[str, Any]]:
    """The code records of the earlier calls that trained this run (from the ``run_info.json`` about to be
    replaced), oldest first, each with the time it started."""
    old = read_json_object(output_dir / RUN_INFO_FILE)
    earlier = [r for r in old.get("provenance_earlier") or [] if isinstance(r, dict)]
    if isinstance(old.get("provenance"), dict):
        earlier.append({"started": old.get("started"), **old["provenance"]})
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
    """Write ``train_config.yaml`` (the config as run) and a new ``run_info.json`` when a call starts training
    (``resumed_from``: the checkpoint it resumes, whose earlier calls' provenance is kept; ``changed``: the
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
    _write(output_dir / RUN_INFO_FILE, info)


def record_run_info(output_dir: Path, **values: Any) -> None:
    """Add ``values`` to ``run_info.json``."""
    path = output_dir / RUN_INFO_FILE
    _write(path, {**read_json_object(path), **values})


def mark_finished(output_dir: Path, global_step: int, args: Any) -> None:
    """Record in ``run_info.json`` that training ended at ``global_step`` (``args``: the trainer's config, for its
    length settings) and the final model was saved."""
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
