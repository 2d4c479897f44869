"""The evaluation's error type."""

from __future__ import annotations


class EvalError(ValueError):
    """Bad evaluation input (model directory, dataset, columns, settings), found before sampling."""
