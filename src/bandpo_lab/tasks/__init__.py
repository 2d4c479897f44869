"""The offline default task: countdown puzzles with a verifiable reward, and a tiny model to train on them.

``bandpo_lab.tasks.countdown`` is pure Python. The tiny-model helpers (``build_tokenizer``, ``build_model``,
``warm_start``, ``WarmStartConfig``) need transformers and are imported on first access.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from bandpo_lab.tasks.countdown import CountdownConfig, countdown_reward_func, make_splits

if TYPE_CHECKING:
    from bandpo_lab.tasks.tiny_model import WarmStartConfig, build_model, build_tokenizer, warm_start

_LAZY = {"WarmStartConfig", "build_model", "build_tokenizer", "warm_start"}

__all__ = [
    "CountdownConfig",
    "WarmStartConfig",
    "build_model",
    "build_tokenizer",
    "countdown_reward_func",
    "make_splits",
    "warm_start",
]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        from bandpo_lab.tasks import tiny_model

        return getattr(tiny_model, name)
    raise AttributeError(f"module 'bandpo_lab.tasks' has no attribute {name!r}")
