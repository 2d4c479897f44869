"""The names of the files bandpo writes in a training run's ``output_dir``, beside transformers' own."""

from __future__ import annotations

from bandpo_lab import _files

CONFIG_FILE = "train_config.yaml"
"""The config as run (``bandpo train --config`` takes it back; ``--resume`` compares against it)."""

RUN_INFO_FILE = "run_info.json"
"""Versions, command, and the ``finished`` record of a completed run."""

METRICS_FILE = "metrics.jsonl"
"""The training logs, one JSON object per logging step."""

LOCK_FILE = ".bandpo-train.lock"
"""The OS file lock a training process holds on its output directory (:mod:`bandpo_lab.training.lock`)."""

TRAINER_STATE = "trainer_state.json"
"""Written last into each ``checkpoint-<step>/`` by transformers (its absence marks an unfinished save)."""

MODEL_CONFIG_FILE = _files.MODEL_CONFIG_FILE
"""The saved model's config (transformers' ``CONFIG_NAME``): present once the final model is saved."""

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json")
"""The files of a saved tokenizer, one of which a model folder holds (``AutoTokenizer.from_pretrained`` reads it)."""
