"""The comparison's starting policy (bandpo.experiments.compare.baseline): a built-in model name resolves to its
converted directory, so ``bandpo compare`` evaluates the real model's starting policy (it was skipped before: the
name is not a directory)."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("trl")

from bandpo.experiments.compare.baseline import _starting_model
from bandpo.training.config import load_train_config
from helpers import CONFIGS


def test_built_in_model_is_the_converted_directory(smollm2_dir: Path) -> None:
    config = load_train_config(CONFIGS / "smollm2-arith.yaml")
    assert _starting_model(config) == smollm2_dir


def test_a_model_directory_is_itself(tmp_path: Path) -> None:
    config = load_train_config(CONFIGS / "smollm2-arith.yaml", [f"model.path={tmp_path}"])
    assert _starting_model(config) == tmp_path
