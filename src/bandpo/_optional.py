"""Optional dependencies of the harness, imported on first use with an error that names the extra to install.

The core install (``pip install bandpo``: torch) is enough for the bounds, the policy loss and the framework
adapters (each with its framework: ``bandpo[trl]``, ``bandpo[verl]``, ``bandpo[skyrl]``); figures need
``bandpo[plots]`` (matplotlib), training and evaluation (the lab) ``bandpo[lab]``.
"""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Any


class MissingDependencyError(ImportError):
    """An optional dependency is not installed; the message names the extra that provides it."""


def require(module: str, purpose: str, extra: str) -> ModuleType:
    """Import ``module`` or raise :class:`MissingDependencyError`: "``purpose`` need(s) ``module``, which is not
    installed: pip install 'bandpo[``extra``]' (or ``module``)"."""
    try:
        return importlib.import_module(module)
    except ImportError as err:
        raise MissingDependencyError(
            f"{purpose} need {module}, which is not installed: pip install 'bandpo[{extra}]' (or {module})"
        ) from err


def pyplot() -> Any:
    """``matplotlib.pyplot`` on the non-interactive Agg backend (figures are written to files)."""
    matplotlib = require("matplotlib", "figures", "plots")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt
