"""Fixtures of the evaluation tests: the countdown task's tokenizer and a randomly initialized tiny model saved with
it (no warm start)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")


@pytest.fixture(scope="module")
def tokenizer() -> Any:
    from bandpo_lab.tasks.tiny_model import build_tokenizer

    return build_tokenizer()


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A randomly initialized tiny character-level Qwen2 with its tokenizer."""
    from helpers.tiny import save_countdown_model_dir

    return save_countdown_model_dir(tmp_path_factory.mktemp("model"))
