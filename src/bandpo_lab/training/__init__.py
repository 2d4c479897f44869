"""Training from a YAML recipe: the engine behind ``bandpo train``.

* :mod:`bandpo_lab.training.config`: :class:`TrainConfig` (TRL's ``GRPOConfig`` / ``BandPOConfig`` fields plus the
  ``model:``, ``data:`` and ``reward:`` sections), :func:`load_train_config` (on the config layer
  :mod:`bandpo_lab.config`: YAML file, ``base:`` inheritance, ``key=value`` overrides, typo suggestions, file:line).
* :mod:`bandpo_lab.training.methods`: the one registry of methods (clip rules and TRL-native methods).
* :mod:`bandpo_lab.training.tasks`: the registry of built-in tasks (``countdown``: puzzles + tiny warm-started model).
* :mod:`bandpo_lab.training.data`: local JSONL / JSON / parquet prompt datasets and prompt formatting (chat templates).
* :mod:`bandpo_lab.training.callbacks`: the ``metrics.jsonl`` writer.
* :mod:`bandpo_lab.training.trainer_checks`: TRL / transformers settings those libraries refuse only once the models
  are loaded, and runs that would train no step.
* :mod:`bandpo_lab.training.checkpoints`: which checkpoints are complete (a kill during a save leaves one that is not).
* :mod:`bandpo_lab.training.resume`: what ``--resume`` continues; a finished run; config changes on resume.
* :mod:`bandpo_lab.training.lock`: one run per ``output_dir``.
* :mod:`bandpo_lab.training.layout`: the names of the files in a run's ``output_dir``.
* :mod:`bandpo_lab.training.expected_warnings`: silences the two messages every run printed for nothing.
* :mod:`bandpo_lab.training.run`: :func:`prepare` (every check, no model loaded) and :func:`train`.

The heavy modules (TRL, transformers) are imported on first use, so ``import bandpo_lab.training`` is cheap.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from bandpo_lab.training.config import ConfigError, TrainConfig, load_train_config
    from bandpo_lab.training.run import PreparedRun, prepare, train

_LAZY = {
    "ConfigError": "bandpo_lab.training.config",
    "TrainConfig": "bandpo_lab.training.config",
    "load_train_config": "bandpo_lab.training.config",
    "PreparedRun": "bandpo_lab.training.run",
    "prepare": "bandpo_lab.training.run",
    "train": "bandpo_lab.training.run",
}

__all__ = ["ConfigError", "PreparedRun", "TrainConfig", "load_train_config", "prepare", "train"]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'bandpo_lab.training' has no attribute {name!r}")
