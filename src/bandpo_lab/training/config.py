"""The training config: TRL's own ``GRPOConfig`` / ``BandPOConfig`` fields at the top level plus the ``model:``,
``data:`` and ``reward:`` sections (:mod:`bandpo_lab.training.sections`), a ``method:`` key and ``base:``
inheritance; ``key=value`` overrides apply after the file. The rules (method switches, renamed fields, a clip
rule's parameters set once): docs/trl.md, ``bandpo train``. Every check here is on the config alone; importing
this module imports no TRL (checking a config does, once: :mod:`bandpo_lab.training.trl_fields`).
"""

from __future__ import annotations

import copy
import dataclasses
import re
import warnings
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from bandpo.integrations.trl_spec import check_trl_delta
from bandpo_lab._files import COMPARE_KEYS, expand_path, output_dir_problem, recipe_kind, same_or_inside
from bandpo_lab.config import (
    NULL_TEXTS,
    TILDE_MARK,
    ConfigError,
    build_dataclass,
    config_file,
    dataclass_types,
    field_value,
    located,
    override_layer,
    read_layers,
    shown_path,
    unknown_key,
    where,
)
from bandpo_lab.training.config_layers import check_renamed, merge_layer, merge_overrides
from bandpo_lab.training.config_method import DEFAULT_CLIP_RULE, check_clip_rule_fields
from bandpo_lab.training.methods import METHOD_KEY, METHODS, TRL_METHODS
from bandpo_lab.training.sections import SECTIONS, DataConfig, ModelConfig, RewardConfig
from bandpo_lab.training.trl_fields import RENAMED_FIELDS, trainer_field_types

REFUSED_TRAINER_KEYS = {
    "resume_from_checkpoint": "use `bandpo train --resume` (or train(config, resume=True)), which resumes from the "
    "last checkpoint in output_dir",
    "local_rank": "it is set by the launcher (accelerate launch / torchrun)",
}
"""TrainingArguments fields a config may not set, with what to do instead."""

STEP_COUNT_FIELDS = ("logging_steps", "save_steps", "eval_steps", "warmup_steps")
"""transformers' ``float`` fields (below 1: a fraction of the run) that :meth:`TrainConfig.to_yaml` writes as an
integer when whole."""

_DEFAULT_OUTPUT_ROOT = "runs"


def _valid_keys() -> list[str]:
    keys = [*trainer_field_types(), METHOD_KEY]
    for name, cls in SECTIONS.items():
        keys.append(name)
        keys.extend(f"{name}.{f}" for f in dataclass_types(cls))
    return keys


def _check_not_null(data: Mapping[str, Any], origins: Mapping[str, str], source: str | None) -> None:
    """``ConfigError`` for a path a file or override sets to null where null is not a meaningful value: YAML reads
    ``~`` as null, not as the home folder, and null would silently stand for the default. ``output_dir``: any null;
    ``model.cache_dir``: a null written ``~`` (a run's saved ``train_config.yaml`` writes ``cache_dir: null``,
    which stays the default cache)."""
    model = data.get("model")
    for key, value in (
        ("output_dir", data.get("output_dir", "")),
        ("model.cache_dir", model.get("cache_dir", "") if isinstance(model, Mapping) else ""),
    ):
        if key not in origins or not (value is None or value in NULL_TEXTS):
            continue
        if key == "model.cache_dir" and not (value == "~" or origins[key].endswith(TILDE_MARK)):
            continue  # null spelled out: the default cache, as a saved run config writes it
        if key == "output_dir":
            default = str(_default_output_dir(source))
        else:
            from bandpo_lab.training.tasks import default_cache_dir

            default = str(default_cache_dir())
        shown = "null" if value is None else repr(value)
        raise ConfigError(
            f"{key} ({origins[key]}) must be a directory path, got {shown} (YAML reads ~ as null, not as your home "
            f"folder): quote a path ('~/runs/x'), or leave {key} out for its default ({default})"
        )


def _default_output_dir(source: str | None) -> Path:
    """``runs/<config file stem>`` (``runs/bandpo`` without a file): where a run goes without ``output_dir``."""
    return Path(_DEFAULT_OUTPUT_ROOT) / (Path(source).stem if source else "bandpo")


@dataclass
class TrainConfig:
    """A complete training config: build it with :func:`load_train_config` or :meth:`from_dict`.

    Attributes:
        trainer: the ``BandPOConfig`` / ``GRPOConfig`` fields the config sets (TRL's names).
        method: the TRL-native method (:data:`~bandpo_lab.training.methods.TRL_METHODS`); ``None``: the clip rule
            ``trainer["clip_rule"]`` (default ``band``).
        origins: where each dotted key was set (``in <file>:<line>``, ``from the overrides``), for messages.

    Raises:
        ConfigError: a method, clip rule or method parameter the checks refuse (naming the closest name or what
            is allowed).
    """

    trainer: dict[str, Any] = field(default_factory=dict)
    model: ModelConfig = field(default_factory=ModelConfig)
    data: DataConfig = field(default_factory=lambda: DataConfig(task="countdown"))
    reward: RewardConfig = field(default_factory=RewardConfig)
    method: str | None = None
    source: str | None = None
    origins: Mapping[str, str] = field(default_factory=dict, repr=False, compare=False)

    def __post_init__(self) -> None:
        self.origins = dict(self.origins or {})

        def at(key: str) -> str:
            return f" ({self.where(key)})"

        if self.method is not None:
            try:
                method = METHODS.get(self.method)
            except ValueError as err:
                raise ConfigError(f"method{at(METHOD_KEY)}: {err}") from err
            if method.name not in TRL_METHODS:  # a clip rule: the same as ``clip_rule: NAME``
                existing = self.trainer.get("clip_rule")
                if existing not in (None, method.name):
                    raise ConfigError(
                        f"method={method.name!r}{at(METHOD_KEY)} and clip_rule={existing!r}{at('clip_rule')} select "
                        "different methods: set one of them"
                    )
                self.trainer["clip_rule"] = method.name
                self.method = None
        if self.method is not None:
            try:
                TRL_METHODS.get(self.method).check_trainer(self.trainer, at)
                check_trl_delta(self.trainer.get("delta"), None, at("delta"))
            except ValueError as err:
                raise ConfigError(str(err)) from err
        else:
            check_clip_rule_fields(self.trainer, at)
        given = self.trainer.get("output_dir")
        if isinstance(given, str) and not given.strip():  # e.g. output_dir=$OUT with OUT unset
            raise ConfigError(
                f"output_dir{at('output_dir')} must be a directory path, got {given!r}; leave it out for "
                f"{self.output_dir}"
            )
        problem = output_dir_problem(self.output_dir) or self._model_dir_problem()
        if problem is not None:
            raise ConfigError(f"{problem}{at('output_dir')}" if "output_dir" in self.trainer else problem)

    def _model_dir_problem(self) -> str | None:
        """Why ``output_dir`` cannot hold this run, or ``None``: it is, is inside or holds the local model folder."""
        if self.model.uses_task_model:
            return None
        model_dir = expand_path(
            str(self.model.path), located("model.path", self.where("model.path")), ConfigError
        )
        if not model_dir.is_dir():  # a Hugging Face id or a built-in model: nothing of the user's here
            return None
        out = self.output_dir
        if same_or_inside(out, model_dir):
            how = "is" if same_or_inside(model_dir, out) else "is inside"
        elif same_or_inside(model_dir, out):
            how = "holds"
        else:
            return None
        return (
            f"output_dir {str(out)!r} {how} the model folder model.path {str(self.model.path)!r}: the run would "
            "write over the model it trains; choose an output_dir outside the model folder that does not hold it"
        )

    def where(self, key: str) -> str:
        """Where the dotted ``key`` was set (``in configs/my.yaml:12``, ``from the overrides``, ``default``)."""
        return where(self.origins, key)

    def locate(self, message: str) -> str:
        """``message`` with where each top-level key it names was set, e.g. ``band_delta must be a finite number
        > 0, got 0.0 (band_delta: from the overrides)``; keys the config does not set are not named."""
        named = [
            k
            for k in self.trainer
            if k in self.origins and re.search(rf"(?<![\w.]){re.escape(k)}(?!\w)", message)
        ]
        if not named:
            return message
        return f"{message} ({'; '.join(f'{k}: {self.origins[k]}' for k in named)})"

    def training_method(self) -> Any:
        """The method to train with (:data:`bandpo_lab.training.methods.METHODS`)."""
        return METHODS.get(self.method or self.trainer.get("clip_rule", DEFAULT_CLIP_RULE))

    @classmethod
    def from_dict(
        cls, data: Mapping[str, Any], source: str | None = None, origins: Mapping[str, str] | None = None
    ) -> TrainConfig:
        """Validate keys and convert values. ``origins`` maps dotted keys to where they were set (for errors)."""
        origins = origins or {}
        _check_not_null(data, origins, source)
        field_types = trainer_field_types()
        trainer: dict[str, Any] = {}
        sections: dict[str, Any] = {}
        method = None
        for key, value in data.items():
            here = where(origins, key)
            if key == METHOD_KEY:
                if value in (None, *NULL_TEXTS):
                    continue
                if not isinstance(value, str):
                    raise ConfigError(
                        f"method ({here}) must be a method name ({', '.join(METHODS.names())}), got {value!r}"
                    )
                method = value
            elif key in SECTIONS:
                sections[key] = build_dataclass(SECTIONS[key], value, key, origins, suggest=_valid_keys())
            elif key in REFUSED_TRAINER_KEYS:
                raise ConfigError(f"{key} ({here}) cannot be set in a config: {REFUSED_TRAINER_KEYS[key]}")
            elif key in field_types:
                trainer[key] = field_value(value, field_types[key], key, origins)
            else:
                known = (
                    ". Top-level keys are the fields of TRL's GRPOConfig / bandpo's BandPOConfig (learning_rate, "
                    f"num_generations, ...) and the sections {', '.join(SECTIONS)}"
                )
                raise unknown_key(key, _valid_keys(), at=here, known=known)
        check_renamed(trainer, origins)
        sections.setdefault("model", ModelConfig())
        sections.setdefault("reward", RewardConfig())
        if "data" not in sections:
            raise ConfigError(
                "the config has no data section: set data.task (a built-in task) or data.path (local files)"
            )
        return cls(trainer=trainer, method=method, source=source, origins=origins, **sections)

    def to_dict(self) -> dict[str, Any]:
        """The config as the nested dict a YAML file holds (``method`` if set, then the trainer fields at the top
        level, then the sections)."""
        out: dict[str, Any] = {METHOD_KEY: self.method} if self.method is not None else {}
        out.update(copy.deepcopy(self.trainer))
        for name in SECTIONS:
            out[name] = dataclasses.asdict(getattr(self, name))
        return out

    def to_yaml(self) -> str:
        """The config as YAML (what ``--dry-run`` prints and a run saves); TRL's ``delta`` carries a comment saying
        it is not Band's radius."""
        values = self.to_dict()
        for key in STEP_COUNT_FIELDS:
            value = values.get(key)
            if isinstance(value, float) and value >= 1 and value.is_integer():
                values[key] = int(value)
        text = yaml.safe_dump(values, sort_keys=False, default_flow_style=None)
        return re.sub(
            r"^(delta: .*)$",
            r"\1  # TRL's two-sided clamp of the ratio; Band's radius is band_delta",
            text,
            flags=re.M,
        )

    def with_overrides(self, overrides: Iterable[str] | Mapping[str, Any]) -> TrainConfig:
        """A new config with ``overrides`` (``["key=value", ...]`` or ``{"dotted.key": value}``) applied."""
        merged = self.to_dict()
        origins = dict(self.origins)
        merge_overrides(merged, origins, override_layer(overrides))
        return TrainConfig.from_dict(merged, source=self.source, origins=origins)

    @property
    def output_dir(self) -> Path:
        """``output_dir`` with ``~`` and ``$VAR`` expanded (:func:`bandpo_lab._files.expand_path`), or
        ``runs/<config file stem>`` when the config does not set it: the one path every check and writer uses."""
        value = self.trainer.get("output_dir")
        if value:
            return expand_path(value, located("output_dir", self.where("output_dir")), ConfigError)
        return _default_output_dir(self.source)

    def trainer_kwargs(self) -> dict[str, Any]:
        """Keyword arguments of the method's config class: the config's fields, the method's own, bandpo's defaults
        (``use_cpu`` without a GPU, and then ``bf16`` off and torch's fused AdamW) and the model section's ``dtype``
        / ``attn_implementation`` in ``model_init_kwargs``."""
        kwargs = copy.deepcopy(self.trainer)
        for key, value in self.training_method().defaults(self.trainer).items():
            kwargs.setdefault(key, value)
        kwargs["output_dir"] = str(self.output_dir)
        kwargs.setdefault("disable_tqdm", False)
        if "activation_checkpointing" not in kwargs:  # transformers 5's name; TRL's default (on) otherwise
            kwargs["activation_checkpointing"] = kwargs.pop("gradient_checkpointing", True)
        asked_cpu = bool(kwargs.get("use_cpu"))
        if "use_cpu" not in kwargs and not _accelerator_available():
            kwargs["use_cpu"] = True
        if kwargs.get("use_cpu"):
            if kwargs.get("bf16") and asked_cpu:
                raise ConfigError(
                    "bf16: true with use_cpu: true is TRL's bfloat16 autocast of every forward pass on a CPU, which "
                    "rounds the log-probs of the ratio and clips tokens the update did not move; set "
                    "model.precision: bf16 (bfloat16 sampling and backward pass, float32 ratio) and bf16: false"
                )
            if kwargs.get("bf16"):  # a GPU recipe on a machine without a GPU (e.g. checked with --dry-run)
                warnings.warn(
                    "bf16: true is TRL's mixed precision for GPUs; this machine has none, so it is off here and "
                    f"model.precision ({self.model.precision}) decides how the CPU computes",
                    stacklevel=2,
                )
            kwargs["bf16"] = False  # the CPU's precision is model.precision's (bandpo_lab.runtime)
            # torch's fused AdamW on a CPU: 0.18 s against 0.80 s (foreach) per step of SmolLM2-135M, measured
            kwargs.setdefault("optim", "adamw_torch_fused")
        init_kwargs = dict(kwargs.get("model_init_kwargs") or {})
        for key, value in (
            ("dtype", self.model.dtype),
            ("attn_implementation", self.model.attn_implementation),
        ):
            if value is None:
                continue
            if key in init_kwargs and init_kwargs[key] != value:
                raise ConfigError(
                    f"model.{key}={value!r} and model_init_kwargs[{key!r}]={init_kwargs[key]!r} disagree; set it "
                    f"once (model.{key})"
                )
            init_kwargs[key] = value
        kwargs["model_init_kwargs"] = init_kwargs
        return _installed_spelling(kwargs, self.training_method().config_class)


def _installed_spelling(kwargs: dict[str, Any], config_class: Any) -> dict[str, Any]:
    """``kwargs`` with each renamed field (:data:`RENAMED_FIELDS`) under its old name where the installed config
    class (``config_class()``) has only the old one (transformers 5.17 has no ``activation_checkpointing``)."""
    try:
        fields = {f.name for f in dataclasses.fields(config_class())}
    except ImportError:
        return kwargs
    for old, renamed in RENAMED_FIELDS.items():
        if renamed.new in kwargs and renamed.new not in fields and old in fields:
            kwargs[old] = kwargs.pop(renamed.new)
    return kwargs


def _accelerator_available() -> bool:
    import torch

    return torch.cuda.is_available() or torch.xpu.is_available()


def load_train_config(
    path: str | Path | None = None, overrides: Iterable[str] | Mapping[str, Any] = ()
) -> TrainConfig:
    """Read a YAML config (with its ``base:`` chain), apply ``key=value`` overrides, validate keys and types.

    Args:
        path: the config file, or a built-in recipe's name (``tiny``); ``None``: only the overrides.
        overrides: ``["learning_rate=1e-5", "model.path=/models/x"]`` or ``{"learning_rate": 1e-5}``.

    Raises:
        ConfigError: unreadable file, unknown key (with the closest valid key), a value of the wrong type or one its
            section refuses. Paths, data and rewards are checked by :func:`bandpo_lab.training.run.prepare`.
    """
    values: dict[str, Any] = {}
    origins: dict[str, str] = {}
    if path is not None:
        path = config_file(path)  # a built-in recipe's name: its file is the source the run records
    layers = read_layers(path, kind="train") if path is not None else []
    if path is not None and recipe_kind(k for layer in layers for k in layer.values) == "compare":
        shown = shown_path(Path(path))
        raise ConfigError(
            f"config file {shown} is a compare config (it sets {' or '.join(COMPARE_KEYS)}): run it with bandpo "
            f"compare --config {shown}"
        )
    for layer in layers:
        merge_layer(values, origins, layer)
    merge_overrides(values, origins, override_layer(overrides))
    return TrainConfig.from_dict(values, source=None if path is None else str(path), origins=origins)
