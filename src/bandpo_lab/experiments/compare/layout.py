"""The files of a comparison's output directory; a run directory is a training run's
(:mod:`bandpo_lab.training.layout`) plus the files below."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from bandpo_lab._files import read_json_object

RUN_SPEC_FILE = "run_spec.json"
RESULTS_FILE = "results.json"
HELDOUT_FILE = "heldout.jsonl"
AT_STEPS_FILE = "evals_at_steps.jsonl"
TRAIN_DONE_FILE = "train_done.json"
LOG_FILE = "train.log"
PLAN_FILE = "compare_plan.json"
COMPARE_CONFIG_FILE = "compare_config.yaml"
BASELINE_DIR = "baseline"
REPORT_DIR = "report"

RUN_DIR_FILES = (RUN_SPEC_FILE, LOG_FILE, RESULTS_FILE, TRAIN_DONE_FILE, HELDOUT_FILE, AT_STEPS_FILE)
"""The comparison's own files in a run directory, beside the training run's: the run trains there among them
(:func:`bandpo_lab.training.run.prepare`'s ``caller_files``)."""

OVERWRITE_FLAG = "--overwrite"
"""The run process's option (before ``RUN_SPEC.json``) to train from scratch, discarding the earlier run in its
directory as ``bandpo train --overwrite`` does (``bandpo compare --redo``); without it, the run resumes."""


def discard_compare_files(run_dir: Path) -> list[str]:
    """Remove the comparison's own files (:data:`RUN_DIR_FILES`) of an earlier run from ``run_dir`` (``--redo``; the
    training run's own checkpoints, logs and run info go as ``bandpo train --overwrite`` discards them, in the
    run's process). Returns the names of the entries that neither the comparison nor a training run writes (a
    user's notes), left as they are."""
    from bandpo_lab.training.layout import written_by_training

    for name in RUN_DIR_FILES:
        path = run_dir / name
        if path.is_file() or path.is_symlink():
            path.unlink()
    try:
        entries = sorted(run_dir.iterdir())
    except OSError:
        return []
    return [
        p.name + ("/" if p.is_dir() else "")
        for p in entries
        if p.name not in RUN_DIR_FILES and not written_by_training(p)
    ]


def written_by_compare(folder: Path) -> bool:
    """Whether ``folder`` holds a comparison (an output_dir or an export): its plan, a ``compare_plan.json`` object
    with the ``config`` mapping that ``bandpo compare`` writes, or a ``runs/<label>/seed<seed>/run_spec.json``. A
    file merely named like the plan does not count."""
    if isinstance(read_json_object(folder / PLAN_FILE).get("config"), dict):
        return True
    return any(folder.glob(f"runs/*/seed*/{RUN_SPEC_FILE}"))


LATER_SETTINGS = {"precision": ("float32", "auto"), "at_steps": ([],)}
"""Settings added after runs were exported, by key (at any depth), with the values that reproduce what those runs
did (float32; no evaluation during training): left out of the fingerprint at these values, so exports made before
the setting existed still match."""


def without_later_settings(payload: Any) -> Any:
    if isinstance(payload, dict):
        return {
            k: without_later_settings(v)
            for k, v in payload.items()
            if not (k in LATER_SETTINGS and v in LATER_SETTINGS[k])
        }
    return payload


def fingerprint(payload: Any) -> str:
    """A short stable hash of a JSON-able payload (what a run or the baseline was made with), without the
    :data:`LATER_SETTINGS` at their earlier behaviour."""
    blob = json.dumps(without_later_settings(payload), sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]
