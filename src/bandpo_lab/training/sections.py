"""The ``model:``, ``data:`` and ``reward:`` sections of a training config, each a dataclass that checks its own
values (:mod:`bandpo_lab.training.config` reads them)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from bandpo.validation import check_int_in
from bandpo_lab.config import ConfigError
from bandpo_lab.runtime import check_precision

DTYPES = ("auto", "float32", "bfloat16", "float16")
"""Allowed ``model.dtype`` values (as TRL's ``model_init_kwargs["dtype"]``)."""

DATA_FORMATS = ("auto", "jsonl", "json", "parquet")
"""Allowed ``data.format`` values; ``auto`` picks by file suffix."""

CHAT_TEMPLATE_MODES = ("auto", "always", "never")
"""``data.chat_template``: ``auto`` uses the tokenizer's template when it has one."""


def prompt_template_problem(template: str | None, name: str) -> str | None:
    """Why ``template`` cannot format a prompt, or ``None``: it must be a format string whose only field is
    ``{prompt}``, and hold it. ``name``: the setting."""
    if template is None:
        return None
    try:
        template.format(prompt="")
    except (KeyError, IndexError, ValueError, AttributeError, TypeError) as err:
        return (
            f"{name} must be a format string whose only field is {{prompt}} (write literal braces as {{{{ }}}}), "
            f"got {template!r}: {err!r}"
        )
    if "{prompt}" not in template:
        return f"{name} must contain {{prompt}}, got {template!r}"
    return None


@dataclass
class ModelConfig:
    """``model:``: which causal LM to train (fields: docs/trl.md, "The sections' fields")."""

    path: str | None = None
    dtype: str = "float32"
    precision: str = "auto"
    attn_implementation: str | None = None
    cache_dir: str | None = None
    warm_start: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.dtype not in DTYPES:
            raise ConfigError(f"model.dtype must be one of {', '.join(DTYPES)}, got {self.dtype!r}")
        try:
            self.precision = check_precision(self.precision, "model.precision")
        except ValueError as err:
            raise ConfigError(str(err)) from None
        if self.path is not None and not str(self.path).strip():
            raise ConfigError("model.path must be a model directory, a Hugging Face id or 'tiny', got ''")

    @property
    def uses_task_model(self) -> bool:
        """Whether the model is the built-in task's own (``path`` absent or ``"tiny"``)."""
        return self.path is None or self.path == "tiny"


@dataclass
class DataConfig:
    """``data:``: the training prompts, from a built-in task or local files (fields: docs/trl.md)."""

    task: str | None = None
    task_options: dict[str, Any] = field(default_factory=dict)
    path: str | list[str] | None = None
    format: str = "auto"
    split: str = "train"
    prompt_column: str = "prompt"
    answer_column: str = "answer"
    keep_columns: list[str] = field(default_factory=list)
    prompt_template: str | None = None
    system_prompt: str | None = None
    chat_template: str = "auto"
    max_samples: int | None = None

    def __post_init__(self) -> None:
        from bandpo_lab.training.tasks import TASKS

        if self.task is None and self.path is None:
            raise ConfigError(
                "data needs either data.task (a built-in task: "
                f"{', '.join(TASKS.names())}) or data.path (JSONL / JSON / parquet files)"
            )
        if self.task is not None and self.path is not None:
            raise ConfigError(
                f"data.task={self.task!r} and data.path={self.path!r} are exclusive: set one of them"
            )
        if self.task is not None:
            try:
                spec = TASKS.get(self.task)
            except ValueError as err:
                raise ConfigError(f"data.task: {err}") from err
            try:
                spec.options(self.task_options)
            except (TypeError, ValueError) as err:
                text = str(err)
                raise ConfigError(
                    text if "data.task_options" in text else f"data.task_options: {text}"
                ) from err
            if self.split not in spec.splits:
                raise ConfigError(
                    f"data.split must be one of {', '.join(spec.splits)} for task {self.task!r}, got {self.split!r}"
                )
        elif self.task_options:
            raise ConfigError(
                f"data.task_options={self.task_options!r} is set but data.task is not; task options apply to a "
                "built-in task only"
            )
        if isinstance(self.path, list) and not self.path:
            raise ConfigError("data.path must be a file, a directory or a non-empty list of files, got []")
        if self.format not in DATA_FORMATS:
            raise ConfigError(f"data.format must be one of {', '.join(DATA_FORMATS)}, got {self.format!r}")
        if self.chat_template not in CHAT_TEMPLATE_MODES:
            raise ConfigError(
                f"data.chat_template must be one of {', '.join(CHAT_TEMPLATE_MODES)}, got {self.chat_template!r}"
            )
        for key in ("prompt_column", "answer_column", "split"):
            value = getattr(self, key)
            if not value or "" in value.split("."):
                raise ConfigError(f"data.{key} must be a column name (dots for nested keys), got {value!r}")
        problem = prompt_template_problem(self.prompt_template, "data.prompt_template")
        if problem is not None:
            raise ConfigError(problem)
        if self.max_samples is not None:
            check_int_in("data.max_samples", self.max_samples, 1, note=" or null", error=ConfigError)

    @property
    def paths(self) -> list[str]:
        """``path`` as a list (empty for a task)."""
        if self.path is None:
            return []
        return [self.path] if isinstance(self.path, str) else list(self.path)


@dataclass
class RewardConfig:
    """``reward:``: the reward function(s) (fields: docs/trl.md; :mod:`bandpo_lab.training.rewards`)."""

    name: str | list[str] | None = None
    options: dict[str, Any] = field(default_factory=dict)
    failure_reward: float = 0.0

    def __post_init__(self) -> None:
        if not math.isfinite(self.failure_reward):
            raise ConfigError(f"reward.failure_reward must be a finite number, got {self.failure_reward!r}")


SECTIONS: dict[str, type] = {"model": ModelConfig, "data": DataConfig, "reward": RewardConfig}
"""Config sections: key -> dataclass."""
