"""The evaluation's error type."""

from __future__ import annotations

__all__ = ["EvalError"]


class EvalError(ValueError):
    """Bad evaluation input (model directory, dataset, columns, settings), found before sampling."""
