"""Tests for ``bandpo_lab.training.expected_warnings``: exactly the two expected messages are hidden, nothing else.
The real messages of a real run (and their absence) are checked in ``tests/lab/cli/test_train.py``."""

from __future__ import annotations

import logging
import warnings
from pathlib import Path

import pytest

from helpers.tiny import save_countdown_model_dir

pytest.importorskip("transformers")

from bandpo_lab.training.expected_warnings import TiedKeysFilter, silence_expected_warnings, tied_weight_keys

MISSING = "There were missing keys in the checkpoint model loaded: {}."


def test_only_the_gradient_checkpointing_future_warning_is_hidden() -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with silence_expected_warnings():
            warnings.warn(
                "`is_gradient_checkpointing` is deprecated and will be removed in v6. Use "
                "`is_activation_checkpointing` instead.",
                FutureWarning,
                stacklevel=1,
            )
            warnings.warn("`something_else` is deprecated", FutureWarning, stacklevel=1)
            warnings.warn("`is_gradient_checkpointing` is deprecated", UserWarning, stacklevel=1)
        warnings.warn(
            "`is_gradient_checkpointing` is deprecated", FutureWarning, stacklevel=1
        )  # after: shown
    assert [(w.category, str(w.message)) for w in caught] == [
        (FutureWarning, "`something_else` is deprecated"),
        (UserWarning, "`is_gradient_checkpointing` is deprecated"),
        (FutureWarning, "`is_gradient_checkpointing` is deprecated"),
    ]


class ListHandler(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


def test_only_tied_missing_keys_are_hidden() -> None:
    logger = logging.getLogger("transformers.trainer")
    handler = ListHandler()
    logger.addHandler(handler)
    try:
        with silence_expected_warnings({"lm_head.weight"}):
            logger.warning(MISSING.format(["lm_head.weight"]))  # hidden
            logger.warning(MISSING.format(["lm_head.weight", "model.norm.weight"]))  # a real gap: shown
            logger.warning("Checkpoint included callbacks not included in current configuration.")
        logger.warning(MISSING.format(["lm_head.weight"]))  # outside the block: shown
    finally:
        logger.removeHandler(handler)
    assert handler.messages == [
        MISSING.format(["lm_head.weight", "model.norm.weight"]),
        "Checkpoint included callbacks not included in current configuration.",
        MISSING.format(["lm_head.weight"]),
    ]
    message = MISSING.format(["lm_head.weight"])
    record = logging.LogRecord("transformers.trainer", logging.WARNING, "", 0, message, (), None)
    assert TiedKeysFilter(set()).filter(record)  # a model without tied weights: shown


def test_tied_weight_keys_of_the_tiny_model(tmp_path: Path) -> None:
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(save_countdown_model_dir(tmp_path / "model"))
    assert tied_weight_keys(model) == {"lm_head.weight"}
    model.lm_head.weight = type(model.lm_head.weight)(model.lm_head.weight.detach().clone())  # untie
    assert tied_weight_keys(model) == set()
