"""Optional dependencies of the harness, imported on first use with an error that names the extra to install.

The core install (``pip install .`` in bandpo's clone: torch) is enough for the bounds, the policy loss and the
framework adapters (each with its framework: the extras ``trl``, ``verl``, ``skyrl``); figures need the extra
``plots`` (matplotlib), training and evaluation (the lab) ``lab``. Every message says how with :func:`install_hint`.
"""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Any


class MissingDependencyError(ImportError):
    """An optional dependency is not installed; the message names the extra that provides it."""


def install_hint(extra: str) -> str:
    """How to install an extra, the one spelling of every message: bandpo installs from its clone (README,
    "Install"), so ``pip install '.[extra]' in bandpo's clone``."""
    return f"pip install '.[{extra}]' in bandpo's clone"


def require(module: str, purpose: str, extra: str) -> ModuleType:
    """Import ``module`` or raise :class:`MissingDependencyError`: "``purpose`` need(s) ``module``, which is not
    installed: pip install '.[``extra``]' in bandpo's clone (or ``module``)"."""
    try:
        return importlib.import_module(module)
    except ImportError as err:
        raise MissingDependencyError(
            f"{purpose} need {module}, which is not installed: {install_hint(extra)} (or {module})"
        ) from err


def pyplot() -> Any:
    """``matplotlib.pyplot`` on the non-interactive Agg backend (figures are written to files)."""
    matplotlib = require("matplotlib", "figures", "plots")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt
