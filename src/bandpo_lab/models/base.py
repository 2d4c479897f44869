"""The registry of built-in models (:data:`MODELS`) and what one entry holds (:class:`BuiltinModel`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from bandpo.registry import Registry


class ModelUnavailableError(RuntimeError):
    """A built-in model's package is missing or its file does not load; the message says what to do."""


@dataclass(frozen=True)
class BuiltinModel:
    """One built-in model.

    Attributes:
        name: what ``model.path`` (or ``bandpo eval --model``) says.
        check: raises :class:`ModelUnavailableError` (one line) when the model cannot be built here; cheap.
        build: ``build(cache_dir, progress) -> directory``: converts the model into ``cache_dir`` (or reuses it).
        cached: ``cached(cache_dir) -> directory | None``: the converted directory when it is already there.
        chat_template: whether the model's tokenizer defines a chat template (what the checks before training
            format the prompts with while the model is not converted yet, so that no tokenizer is loaded).
    """

    name: str
    check: Callable[[], object]
    build: Callable[[Path, bool], Path]
    cached: Callable[[Path], Path | None]
    chat_template: bool = False


MODELS: Registry[BuiltinModel] = Registry("built-in model")
"""Built-in model name -> :class:`BuiltinModel`."""
