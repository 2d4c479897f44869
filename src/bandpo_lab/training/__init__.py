"""Training from a YAML recipe: the engine behind ``bandpo train`` (:func:`load_train_config`, :func:`prepare`,
:func:`train`). TRL and transformers are imported on first use, so ``import bandpo_lab.training`` is cheap."""

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
