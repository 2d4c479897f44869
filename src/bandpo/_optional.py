"""Optional dependencies of the harness, imported on first use with an error that names the extra to install.

The core install (``pip install bandpo``: torch, numpy, pyyaml) is enough for the bounds, the policy loss and
the framework adapters; figures need ``bandpo[plots]`` (matplotlib), training and evaluation ``bandpo[trl]``.
"""

from __future__ import annotations

from typing import Any


class MissingDependencyError(ImportError):
    """An optional dependency is not installed; the message names the extra that provides it."""


def pyplot() -> Any:
    """``matplotlib.pyplot`` on the non-interactive Agg backend (figures are written to files)."""
    try:
        import matplotlib
    except ImportError as err:
        raise MissingDependencyError(
            "figures need matplotlib, which is not installed: pip install 'bandpo[plots]' (or matplotlib)"
        ) from err
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt
