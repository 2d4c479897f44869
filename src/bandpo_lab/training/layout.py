"""The names of the files in a training run's ``output_dir``: bandpo's own, and those transformers and TRL write
there (the final model, checkpoints, TensorBoard's folder, TRL's model card): :func:`written_by_training`."""

from __future__ import annotations

import re
from pathlib import Path

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

CHECKPOINT_PATTERN = re.compile(r"^checkpoint-(\d+)$")
"""Names of the checkpoint directories transformers writes (``checkpoint-<global step>``)."""

CHECKPOINT_STATE = re.compile(
    rf"^(optimizer|scheduler|scaler|rng_state.*)\.(pt|pth|bin)$|^{re.escape(TRAINER_STATE)}$"
)
"""The files of a checkpoint that only a resumed training reads (optimizer, scheduler, scaler, RNG and trainer
state); the rest of it is what ``Trainer.save_model`` writes."""

OWN_FILES = (RUN_INFO_FILE, METRICS_FILE, CONFIG_FILE)
"""The files bandpo writes at the top of a run's folder (its run info, logs and config as run)."""

SAVED_MODEL_FILES = frozenset(
    {
        "generation_config.json",
        "special_tokens_map.json",
        "added_tokens.json",
        "merges.txt",
        "chat_template.jinja",
        "training_args.bin",
    }
)
"""What ``Trainer.save_model`` writes beside the model config, the weights and the tokenizer files."""

WEIGHT_SHARD = re.compile(r"^(model|pytorch_model)-\d+-of-\d+\.(safetensors|bin)$")
"""A shard of sharded weights, beside their index."""

TENSORBOARD_DIR = "runs"
"""The folder TensorBoard's writer makes in ``output_dir`` (``runs/<date>_<host>/``)."""


MODEL_CARD_FILE = "README.md"
"""The model card TRL's trainer writes in ``output_dir`` with each checkpoint (``create_model_card``); a run
leaves a ``README.md`` that is not one as it is (:func:`is_model_card`)."""

_RUN_FILES = frozenset(
    {
        *OWN_FILES,
        LOCK_FILE,
        MODEL_CONFIG_FILE,
        *TOKENIZER_FILES,
        *_files.WEIGHT_FILES,
        *SAVED_MODEL_FILES,
        TENSORBOARD_DIR,
    }
)


def is_model_card(path: Path) -> bool:
    """Whether the file ``path`` is a model card TRL wrote: it opens with YAML front matter (a ``---`` line, then
    the lines up to the next ``---`` line) whose tags list ``trl``. A user's ``README.md`` is not one (but notes
    added below TRL's own front matter are: TRL writes its card over them with the next checkpoint)."""
    try:
        with open(path, encoding="utf-8-sig", errors="replace") as f:  # a BOM, CRLF or CR read alike
            if f.readline(64).rstrip("\n") != "---":
                return False
            tagged = False
            # the front matter's lines, up to its closing --- (4 KiB of a line at most: a file of one long line)
            for _ in range(10_000):
                line = f.readline(4096)
                if not line:  # the end of the file
                    break
                if line.rstrip("\n") == "---":
                    return tagged
                tagged = tagged or line.rstrip("\n") == "- trl"
    except OSError:
        pass
    return False  # no closing line: no front matter


def written_by_training(entry: Path) -> bool:
    """Whether ``entry``, at the top of a run's ``output_dir``, is one a training run writes there: bandpo's own
    files and lock, the final model (config, weights and their shards, tokenizer, what ``save_model`` writes
    beside them), checkpoints, TensorBoard's folder and TRL's model card (a ``README.md`` that is one). A
    comparison's ``--redo`` names the other entries as a user's (left as they are)."""
    name = entry.name
    if name == MODEL_CARD_FILE:
        return is_model_card(entry)
    return name in _RUN_FILES or bool(WEIGHT_SHARD.match(name) or CHECKPOINT_PATTERN.match(name))
