"""Fixtures for the training tests: a tiny countdown warm start built once per session.

Nothing is downloaded: the countdown model is ``bandpo.tasks.tiny_model``'s character-level Qwen2, warm-started for
a few steps only (the training tests check the plumbing, not the learning).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from train_helpers import SMALL_WARM_START


@pytest.fixture(scope="session")
def countdown_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A cache directory holding the small countdown warm start (built in this process, once)."""
    from bandpo.tasks.countdown import CountdownConfig
    from bandpo.tasks.tiny_model import WarmStartConfig, warm_start

    cache = tmp_path_factory.mktemp("bandpo_cache")
    warm_start(cache, WarmStartConfig(task=CountdownConfig(), **SMALL_WARM_START), progress=False)
    return cache


@pytest.fixture(scope="session")
def countdown_model_dir(countdown_cache: Path) -> Path:
    """The directory of the small warm-started countdown model."""
    (path,) = [p for p in countdown_cache.iterdir() if p.name.startswith("countdown-warm-")]
    return path
