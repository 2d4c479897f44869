"""The training config: TRL's own ``GRPOConfig`` / ``BandPOConfig`` fields plus three bandpo sections.

A config file is YAML. Its top-level keys are the fields of :class:`bandpo.integrations.trl.BandPOConfig` under
TRL's names (``learning_rate``, ``num_generations``, ``per_device_train_batch_size``, ``steps_per_generation``,
``beta``, ``loss_type``, ``max_completion_length``, ``report_to``, ``save_steps``, ``clip_rule``, ``band_delta``,
...), plus:

``model:`` (:class:`ModelConfig`)
    ``path`` (a local model directory or a Hugging Face id; absent or ``tiny`` with ``data.task``: the task's
    own model), ``dtype``, ``attn_implementation``, ``cache_dir``, ``warm_start`` (options of the task model).
``data:`` (:class:`DataConfig`)
    ``task`` (a built-in task, e.g. ``countdown``) with ``task_options``, or ``path`` (JSONL / JSON / parquet files
    or a directory of them) with ``format``, ``split``, ``prompt_column``, ``answer_column``, ``keep_columns``,
    ``prompt_template``, ``system_prompt``, ``chat_template``, ``max_samples``.
``reward:`` (:class:`RewardConfig`)
    ``name`` (a name from :func:`bandpo_lab.rewards.reward_names`), ``options``, ``failure_reward``.
``base:``
    another config file (path relative to this one) whose values this one extends; dicts merge key by key.

Overrides ``key=value`` (dotted keys for sections and dict fields: ``model.path=/m``,
``reward.options.incorrect_reward=0``, ``clip_rule_kwargs.delta=0.1``) are applied after the file. Values are
converted to the type of the field they set (``learning_rate=1e-6`` is a float, ``band_relax=[0.2,0.28]`` a list,
``max_completion_length=null`` is None), and so are the file's values (YAML reads ``1e-6`` as a string).

The method (:mod:`bandpo_lab.training.methods`): ``clip_rule: NAME`` selects a clip rule (``BandPOTrainer``; default
``band``); ``method: NAME`` selects any method of the one registry: a clip rule (the same as ``clip_rule: NAME``)
or a TRL-native method (``cispo``, ``sapo``, ``gspo``: plain ``GRPOTrainer``, whose parameters are the
``GRPOConfig`` fields themselves, e.g. ``method: cispo`` with ``epsilon_high: 4.0``). A TRL-native method refuses
the clip-rule fields (``clip_rule``, ``clip_rule_kwargs``, ``band_*``).

Switching the method resets its parameters: when a layer (a derived file or the overrides) selects another method
(``clip_rule`` or ``method``), the keys of the inherited method and of the new one (``clip_rule_kwargs`` /
``band_*``, or the TRL fields the TRL-native method owns, such as ``loss_type``) inherited from the layers below are
dropped and only that layer's own are kept, so ``bandpo train --config configs/tiny.yaml clip_rule=grpo`` trains
GRPO with its default interval, ``clip_rule=clip_higher clip_rule_kwargs.eps_high=0.3`` sets just that, and
``method=cispo`` trains TRL's CISPO with its defaults. When the overrides switch method and so drop settings a file
gave the method, a :class:`ConfigWarning` names them in one line (``method='grpo' (from the overrides) switches the
method from 'band' and drops the inherited settings of the method: band_delta=0.05, ...``); a derived file that
switches (``configs/tiny-grpo.yaml``) does so silently, by its writer's choice. Likewise a layer that sets
``data.path`` drops the inherited ``data.task`` / ``data.task_options`` (and ``data.task`` drops ``data.path``).

Renamed fields (:data:`bandpo_lab.training.trl_fields.RENAMED_FIELDS`): the old name of a field transformers 5 renamed
(``gradient_checkpointing``) still works, with a one-line :class:`ConfigWarning` naming the new one (and saying the
old one has no effect when the config sets the new one too); the old name of a field TRL renamed
(``vllm_importance_sampling_cap``) is a :class:`ConfigError` naming the new one.

A clip rule's parameters are set once: a ``band_*`` shortcut and the ``clip_rule_kwargs`` entry it sets are refused
together (``configs/tiny.yaml`` sets ``band_delta``, so its radius is overridden with ``band_delta=0.1``), and TRL's
own ``delta`` (GRPOConfig's two-sided clamp of the ratio, INTELLECT-2's) at or below 1 is refused with every method
(TRL does not check it); next to a rule with a radius ``delta`` (``band``, ``adaptive_band``) the message names
``band_delta``, since such a value is a radius set under TRL's name (``delta: 10``, an upper clamp as verl's dual
clip, stays allowed).

An unknown key raises :class:`ConfigError` naming the closest valid key; every check here is on the config
alone (no file other than the config is read; ``output_dir`` and a local ``model.path`` are only looked at:
``output_dir`` must be a directory or not exist yet, and be neither the model folder, nor inside it, nor hold it).
Reading and checking a config imports no TRL: the fields' types come from the checked-in table
:mod:`bandpo_lab.training.trl_fields`, TRL's spellings from :mod:`bandpo.losses.method` and its loss types from
:mod:`bandpo.integrations.trl_spec`; TRL is imported when the method's config class is built
(:meth:`TrainConfig.training_method` ``.config_class()``).
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
    OVERRIDES_LABEL,
    ConfigError,
    ConfigWarning,
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
from bandpo_lab.training.config_method import DEFAULT_CLIP_RULE, check_clip_rule_fields, select_clip_rule
from bandpo_lab.training.methods import METHOD_KEY, METHODS, RULE_PARAM_KEYS, TRL_METHODS
from bandpo_lab.training.sections import (
    DTYPES,
    SECTIONS,
    DataConfig,
    ModelConfig,
    RewardConfig,
)
from bandpo_lab.training.trl_fields import RENAMED_FIELDS, TRAINER_FIELDS

__all__ = [
    "DTYPES",
    "OVERRIDES_LABEL",
    "RULE_PARAM_KEYS",
    "SECTIONS",
    "ConfigError",
    "ConfigWarning",
    "DataConfig",
    "ModelConfig",
    "RewardConfig",
    "TrainConfig",
    "dataclass_types",
    "load_train_config",
    "trainer_field_types",
]

REFUSED_TRAINER_KEYS = {
    "resume_from_checkpoint": "use `bandpo train --resume` (or train(config, resume=True)), which resumes from the "
    "last checkpoint in output_dir",
    "local_rank": "it is set by the launcher (accelerate launch / torchrun)",
}
"""TrainingArguments fields a config may not set, with what to do instead."""

STEP_COUNT_FIELDS = ("logging_steps", "save_steps", "eval_steps", "warmup_steps")
"""transformers' fields typed ``float`` because a value below 1 is a fraction of the run; a whole number is a count
of steps, written as an integer (``logging_steps: 5``, not ``5.0``) by :meth:`TrainConfig.to_yaml`."""

_DEFAULT_OUTPUT_ROOT = "runs"


# ------------------------------------------------------------------------------------------------ field types
def trainer_field_types() -> dict[str, Any]:
    """``BandPOConfig`` init field name -> type, from the checked-in table :data:`bandpo_lab.training.trl_fields.TRAINER_FIELDS`
    (no TRL import; ``tests/lab/training/test_trl_fields.py`` keeps it equal to TRL's dataclasses)."""
    return TRAINER_FIELDS


def _valid_keys() -> list[str]:
    keys = [*trainer_field_types(), METHOD_KEY]
    for name, cls in SECTIONS.items():
        keys.append(name)
        keys.extend(f"{name}.{f}" for f in dataclass_types(cls))
    return keys


# ---------------------------------------------------------------------------------------------- the config
@dataclass
class TrainConfig:
    """A complete training config (module docstring).

    Build it with :func:`load_train_config` (a file and overrides) or :meth:`from_dict`; change it with
    :meth:`with_overrides`.

    Attributes:
        trainer: the ``BandPOConfig`` / ``GRPOConfig`` fields the config sets (TRL's names).
        model, data, reward: the sections.
        method: the TRL-native method (``cispo``, ``sapo``, ``gspo``; :data:`bandpo_lab.training.methods.TRL_METHODS`)
            trained by plain ``GRPOTrainer``; ``None``: the clip rule ``trainer["clip_rule"]`` (default ``band``)
            trained by ``BandPOTrainer``.
        source: the config file, if any.
        origins: where each dotted key was set (``in <file>:<line>``, ``from the overrides``), for the messages
            of the checks; not compared.

    Raises:
        ConfigError: an unknown method or clip rule (with the closest name), a TRL-native method with clip-rule
            fields or with a TRL field it sets to another value or ignores, a parameter out of range; a clip rule
            with a loss type or importance-sampling level that only a TRL-native method runs (naming it).
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
            if method.name not in TRL_METHODS:  # a clip rule: ``clip_rule`` holds it
                select_clip_rule(self.trainer, method.name, at)
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
        """Why ``output_dir`` cannot hold this run for the model it trains, or ``None``: it is the local model folder
        ``model.path``, inside it, or holds it (after ``~``, ``$VAR``, symlinks and ``..``), so the run's final model
        (or ``--overwrite``'s discard) would write over the model it starts from."""
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
        """The method to train with (:data:`bandpo_lab.training.methods.METHODS`): ``config_class()``,
        ``trainer_class()``, ``describe(args)``."""
        return METHODS.get(self.method or self.trainer.get("clip_rule", DEFAULT_CLIP_RULE))

    @classmethod
    def from_dict(
        cls, data: Mapping[str, Any], source: str | None = None, origins: Mapping[str, str] | None = None
    ) -> TrainConfig:
        """Validate keys and convert values. ``origins`` maps dotted keys to where they were set (for errors)."""
        origins = origins or {}
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
                if value is None:
                    value = {}
                if not isinstance(value, Mapping):
                    raise ConfigError(
                        f"{key} ({here}) must be a mapping of {', '.join(dataclass_types(SECTIONS[key]))}, "
                        f"got {value!r}"
                    )
                sections[key] = _build_section(key, value, origins)
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
        if "model" not in sections:
            sections["model"] = ModelConfig()
        if "reward" not in sections:
            sections["reward"] = RewardConfig()
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
        """The config as YAML (what ``--dry-run`` prints and a run saves), a step count as an integer
        (:data:`STEP_COUNT_FIELDS`); TRL's own ``delta``, when set, carries a comment saying it is not Band's
        radius."""
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
        """``output_dir`` with ``~`` and ``$VAR`` expanded (:func:`bandpo_lab._files.expand_path`, which refuses an unset
        variable: the lock, resume, the
        refusal of an earlier run's directory and the trainer all use this one path), or ``runs/<config file stem>``
        when the config does not set it."""
        value = self.trainer.get("output_dir")
        if value:
            return expand_path(value, located("output_dir", self.where("output_dir")), ConfigError)
        stem = Path(self.source).stem if self.source else "bandpo"
        return Path(_DEFAULT_OUTPUT_ROOT) / stem

    def trainer_kwargs(self) -> dict[str, Any]:
        """Keyword arguments of the method's config class (``BandPOConfig``, or ``GRPOConfig`` for a TRL-native
        method): the config's fields, the fields a TRL-native method sets (its ``loss_type``, ..., and the defaults
        of its parameters), bandpo's defaults (progress bar on, ``use_cpu`` when no GPU, ``output_dir``; on a CPU
        ``bf16`` off, since ``model.precision`` decides there, and torch's fused AdamW unless ``optim`` is set) and the
        model section's ``dtype`` / ``attn_implementation`` in ``model_init_kwargs``."""
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
    class has only the old one: transformers 5.17's TrainingArguments knows ``gradient_checkpointing`` but not
    bandpo's ``activation_checkpointing`` (5.25 has both, the old one deprecated). ``config_class``: a callable
    returning the config class (imports TRL); without TRL the names stay as they are."""
    try:
        fields = {f.name for f in dataclasses.fields(config_class())}
    except ImportError:
        return kwargs
    for old, renamed in RENAMED_FIELDS.items():
        if renamed.new in kwargs and renamed.new not in fields and old in fields:
            kwargs[old] = kwargs.pop(renamed.new)
    return kwargs


def _build_section(name: str, values: Mapping[str, Any], origins: Mapping[str, str]) -> Any:
    try:
        return build_dataclass(SECTIONS[name], values, name, origins, suggest=_valid_keys())
    except ConfigError:
        raise
    except (TypeError, ValueError) as err:
        raise ConfigError(f"{name}: {err}") from err


def _accelerator_available() -> bool:
    try:
        import torch
    except ImportError:  # pragma: no cover - torch is a dependency
        return False
    if torch.cuda.is_available():
        return True
    xpu = getattr(torch, "xpu", None)
    return bool(xpu is not None and xpu.is_available())


def load_train_config(
    path: str | Path | None = None, overrides: Iterable[str] | Mapping[str, Any] = ()
) -> TrainConfig:
    """Read a YAML config (with its ``base:`` chain), apply ``key=value`` overrides, validate keys and types.

    Args:
        path: the config file, or a built-in recipe's name (``tiny``: :func:`bandpo_lab.config.config_file`). ``None``:
            only the overrides (which must then include a data section).
        overrides: ``["learning_rate=1e-5", "model.path=/models/x"]`` or ``{"learning_rate": 1e-5}``.

    Raises:
        ConfigError: unreadable file, unknown key (with the closest valid key), a value of the wrong type, or a
            section value that its dataclass refuses. Paths, datasets and the reward are checked later, by
            :func:`bandpo_lab.training.run.prepare`.
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
