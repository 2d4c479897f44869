"""Tests for ``bandpo_lab.training.layout``: which entries of a run's folder a training run writes
(tests/lab/training/test_train_run.py checks a real run's folder against it)."""

from __future__ import annotations

from pathlib import Path

import pytest

from bandpo_lab.training.layout import CHECKPOINT_STATE, MODEL_CARD_FILE, is_model_card, written_by_training

TRL_CARD = "---\nlibrary_name: transformers\nmodel_name: out\ntags:\n- generated_from_trainer\n- grpo\n- trl\n---\n\n# Model Card for out\n"


@pytest.mark.parametrize(
    "name",
    [
        "run_info.json",
        "metrics.jsonl",
        "train_config.yaml",
        ".bandpo-train.lock",
        "config.json",
        "model.safetensors",
        "model-00001-of-00002.safetensors",
        "pytorch_model-00002-of-00002.bin",
        "tokenizer.json",
        "generation_config.json",
        "checkpoint-40",
        "runs",
    ],
)
def test_a_training_runs_entries(name: str, tmp_path: Path) -> None:
    assert written_by_training(tmp_path / name)


@pytest.mark.parametrize(
    "name", ["my_notes.md", "checkpoint-best", "checkpoint-40.bak", "model-final.safetensors", "results.json"]
)
def test_a_users_entries_and_a_comparisons_are_not(name: str, tmp_path: Path) -> None:
    """A user's notes, a renamed checkpoint, and the comparison's own files (its layout names them) are not a
    training run's."""
    assert not written_by_training(tmp_path / name)


@pytest.mark.parametrize(
    ("text", "card"),
    [
        (TRL_CARD, True),
        ("# my notes\n\n- trl\n", False),  # a list item, not a tag of front matter
        ("---\ntitle: notes\n---\n\n- trl\n", False),
        ("---\ntags:\n- trl\n", False),  # no end to the front matter
        ("---\n---\n- trl\n---\n", False),  # empty front matter, then a user's text
        ("\ufeff" + TRL_CARD, True),  # a BOM
        (TRL_CARD.replace("\n", "\r\n"), True),  # Windows' line ends
        ("---\n" + "description: x\n" * 500 + "tags:\n- trl\n---\n", True),  # longer than 4 KiB
        ("---\n" + "x" * 1_000_000, False),  # one long line, no end: read 4 KiB at a time
        ("", False),
    ],
)
def test_a_readme_is_the_runs_only_where_it_is_trls_model_card(text: str, card: bool, tmp_path: Path) -> None:
    path = tmp_path / MODEL_CARD_FILE
    assert not written_by_training(path) and not is_model_card(path)  # absent
    path.write_bytes(text.encode())
    assert is_model_card(path) is card and written_by_training(path) is card


def test_the_state_only_a_resumed_training_reads() -> None:
    state = [
        "optimizer.pt",
        "scheduler.pt",
        "rng_state.pth",
        "rng_state_1.pth",
        "scaler.pt",
        "trainer_state.json",
    ]
    model = [
        "config.json",
        "model.safetensors",
        "tokenizer.json",
        "generation_config.json",
        "training_args.bin",
    ]
    assert [n for n in state + model if CHECKPOINT_STATE.match(n)] == state
