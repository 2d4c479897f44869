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
    from bandpo.tasks.tiny_model import build_tokenizer

    return build_tokenizer()


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory, tokenizer: Any) -> Path:
    """A randomly initialized tiny character-level Qwen2 with its tokenizer."""
    from bandpo.tasks.tiny_model import WarmStartConfig, build_model

    path = tmp_path_factory.mktemp("model")
    model = build_model(
        tokenizer, WarmStartConfig(n_layers=1, hidden_size=16, n_heads=2, intermediate_size=32)
    )
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path
