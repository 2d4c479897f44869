"""Built-in pretrained models: names that ``model.path`` and ``bandpo eval --model`` accept instead of a directory.

A built-in model comes inside a package from the Python package registry and is converted once into a normal
transformers directory in the cache (``$BANDPO_CACHE_DIR`` or ``~/.cache/bandpo``). Registered: ``smollm2-135m``
(:mod:`bandpo_lab.models.smollm2`).
"""

from __future__ import annotations

from pathlib import Path

from bandpo_lab.models import smollm2 as _smollm2  # registers smollm2-135m
from bandpo_lab.models.base import MODELS, ModelUnavailableError

__all__ = [
    "MODELS",
    "ModelUnavailableError",
    "builtin_model_dir",
    "is_builtin_model",
]
del _smollm2


def is_builtin_model(path: object) -> bool:
    """Whether ``path`` names a built-in model rather than a directory (an existing directory of that name wins)."""
    return isinstance(path, str) and path in MODELS and not Path(path).exists()


def builtin_model_dir(name: str, cache_dir: str | Path, progress: bool = True) -> Path:
    """The converted directory of built-in model ``name``: the cached one, or one built now.

    Raises:
        ValueError: unknown name (listing the valid ones).
        ModelUnavailableError: the package is missing or its file does not load (one line).
    """
    model = MODELS.get(name)
    cached = model.cached(Path(cache_dir))
    if cached is not None:
        return cached
    model.check()
    return model.build(Path(cache_dir), progress)
