"""Fixtures for the TRL integration tests: a tiny local model, its tokenizer and a prompt dataset.

Nothing is downloaded: the model and tokenizer are ``helpers.tiny.build_tiny_model_dir``'s (a character-level
tokenizer and a random two-layer Qwen2).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from helpers.tiny import build_tiny_model_dir

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")
os.environ.setdefault("WANDB_DISABLED", "true")


def tiny_prompt_dataset(n: int = 8):
    """A ``datasets.Dataset`` with a text ``prompt`` column of ``n`` short arithmetic prompts."""
    from datasets import Dataset

    return Dataset.from_dict({"prompt": [f"{i}+{i + 1}=" for i in range(n)]})


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Directory holding the tiny model and tokenizer (built once per session)."""
    return build_tiny_model_dir(tmp_path_factory.mktemp("tiny_qwen2"))


@pytest.fixture
def tiny_model(tiny_model_dir: Path):
    """A fresh float32 copy of the tiny model (TRL patches the model's forward, so never share one)."""
    import torch
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)


@pytest.fixture
def tiny_tokenizer(tiny_model_dir: Path):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_model_dir)


@pytest.fixture
def tiny_dataset():
    return tiny_prompt_dataset()
