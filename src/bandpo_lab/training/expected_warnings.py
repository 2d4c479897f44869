"""Silence the two messages every ``bandpo train`` printed although nothing is wrong, and nothing else:
transformers 5's ``FutureWarning`` about the old gradient-checkpointing names TRL 1.16 still uses, and, on resume,
``There were missing keys in the checkpoint model loaded: ['lm_head.weight']`` when every listed key is tied to
another weight of the model being trained (the checkpoint stores the shared tensor once).
"""

from __future__ import annotations

import ast
import contextlib
import logging
import re
from collections.abc import Collection, Iterator
from typing import Any

from bandpo.integrations.trl_spec import silence_old_checkpointing_names

_MISSING_KEYS = re.compile(r"There were missing keys in the checkpoint model loaded: (\[.*\])\.?")
_TRAINER_LOGGER = "transformers.trainer"


def tied_weight_keys(model: Any) -> set[str]:
    """Names of ``model``'s parameters tied to another one (``lm_head.weight``) when the output and input
    embeddings are one tensor; otherwise an empty set."""
    try:
        tied = model.get_output_embeddings().weight is model.get_input_embeddings().weight
    except AttributeError:
        return set()
    if not tied:
        return set()
    keys = getattr(model, "all_tied_weights_keys", None) or getattr(model, "_tied_weights_keys", None) or ()
    return set(keys)


class TiedKeysFilter(logging.Filter):
    """Drops transformers' missing-keys message when all the keys it lists are in ``tied``."""

    def __init__(self, tied: Collection[str]) -> None:
        super().__init__()
        self.tied = set(tied)

    def filter(self, record: logging.LogRecord) -> bool:
        match = _MISSING_KEYS.fullmatch(record.getMessage())
        if match is None or not self.tied:
            return True
        try:
            keys = ast.literal_eval(match.group(1))
        except (ValueError, SyntaxError):
            return True
        return not (isinstance(keys, list) and keys and set(keys) <= self.tied)


@contextlib.contextmanager
def silence_expected_warnings(tied: Collection[str] = ()) -> Iterator[None]:
    """Within the block, hide the two expected messages; ``tied``: :func:`tied_weight_keys` of the model."""
    logger = logging.getLogger(_TRAINER_LOGGER)
    keys_filter = TiedKeysFilter(tied)
    logger.addFilter(keys_filter)
    try:
        with silence_old_checkpointing_names():
            yield
    finally:
        logger.removeFilter(keys_filter)
