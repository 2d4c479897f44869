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
    ``name`` (a name from :func:`bandpo.rewards.reward_names`), ``options``, ``failure_reward``.
``base:``
    another config file (path relative to this one) whose values this one extends; dicts merge key by key.

Overrides ``key=value`` (dotted keys for sections and dict fields: ``model.path=/m``,
``reward.options.incorrect_reward=0``, ``clip_rule_kwargs.delta=0.1``) are applied after the file. Values are
converted to the type of the field they set (``learning_rate=1e-6`` is a float, ``band_relax=[0.2,0.28]`` a list,
``max_completion_length=null`` is None), and so are the file's values (YAML reads ``1e-6`` as a string).

The method (:mod:`bandpo.training.methods`): ``clip_rule: NAME`` selects a clip rule (``BandPOTrainer``; default
``band``); ``method: NAME`` selects any method of the one registry: a clip rule (the same as ``clip_rule: NAME``)
or a TRL-native method (``cispo``, ``sapo``, ``gspo``: plain ``GRPOTrainer``, whose parameters are the
``GRPOConfig`` fields themselves, e.g. ``method: cispo`` with ``epsilon_high: 4.0``). A TRL-native method refuses
the clip-rule fields (``clip_rule``, ``clip_rule_kwargs``, ``band_*``).

Switching the method resets its parameters: when a layer (a derived file or the overrides) selects another method
(``clip_rule`` or ``method``), the keys of the inherited method and of the new one (``clip_rule_kwargs`` /
``band_*``, or the TRL fields the TRL-native method owns, such as ``loss_type``) inherited from the layers below are
dropped and only that layer's own are kept, so ``bandpo train --config configs/tiny.yaml clip_rule=grpo`` trains
GRPO with its default interval, ``clip_rule=clip_higher clip_rule_kwargs.eps_high=0.3`` sets just that, and
``method=cispo`` trains TRL's CISPO with its defaults. Likewise a layer that sets ``data.path`` drops the inherited
``data.task`` / ``data.task_options`` (and ``data.task`` drops ``data.path``).

An unknown key raises :class:`ConfigError` naming the closest valid key; every check here is on the config
alone (no file other than the config is read, nothing is imported but TRL's config class).
"""

from __future__ import annotations

import copy
import dataclasses
import enum
import functools
import math
import types
import typing
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml

from bandpo.registry import did_you_mean
from bandpo.training.methods import METHOD_KEY, METHODS, RULE_PARAM_KEYS, TRL_METHODS, switch_keys

__all__ = [
    "DTYPES",
    "RULE_PARAM_KEYS",
    "SECTIONS",
    "ConfigError",
    "DataConfig",
    "ModelConfig",
    "RewardConfig",
    "TrainConfig",
    "coerce_value",
    "dataclass_types",
    "load_train_config",
    "parse_overrides",
    "trainer_field_types",
]


class ConfigError(ValueError):
    """A problem with the training config (key, value, file, dataset or model path), found before training."""


DTYPES = ("auto", "float32", "bfloat16", "float16")
"""Allowed ``model.dtype`` values (as TRL's ``model_init_kwargs["dtype"]``)."""

DATA_FORMATS = ("auto", "jsonl", "json", "parquet")
"""Allowed ``data.format`` values; ``auto`` picks by file suffix."""

CHAT_TEMPLATE_MODES = ("auto", "always", "never")
"""``data.chat_template``: ``auto`` uses the tokenizer's template when it has one."""

REFUSED_TRAINER_KEYS = {
    "resume_from_checkpoint": "use `bandpo train --resume` (or train(config, resume=True)), which resumes from the "
    "last checkpoint in output_dir",
    "local_rank": "it is set by the launcher (accelerate launch / torchrun)",
}
"""TrainingArguments fields a config may not set, with what to do instead."""

_NULL_STRINGS = ("null", "~", "None", "NULL", "Null")
_DEFAULT_OUTPUT_ROOT = "runs"
_DEFAULT_CLIP_RULE = "band"  # BandPOConfig's default
OVERRIDES_LABEL = "from the overrides"
"""Origin label of values set by ``key=value`` overrides (error messages say where a bad value came from)."""


# --------------------------------------------------------------------------------------------------- sections
@dataclass
class ModelConfig:
    """``model:``: which causal LM to train.

    Args:
        path: a local model directory (``config.json`` + weights + tokenizer), or a Hugging Face model id (it must
            be in the local cache when ``HF_HUB_OFFLINE=1``). ``None`` or ``"tiny"`` with ``data.task``: the task's
            own model (countdown: the warm-started tiny Qwen2, built once and cached).
        dtype: weights dtype for ``from_pretrained``: one of :data:`DTYPES` (TRL's default ``float32``; use
            ``bf16: true`` for bfloat16 mixed precision on GPUs).
        attn_implementation: passed to ``from_pretrained`` (``eager``, ``sdpa``, ``flash_attention_2``);
            ``None`` keeps the model's default.
        cache_dir: where the task model is cached; ``None``: ``$BANDPO_CACHE_DIR`` or ``~/.cache/bandpo``.
        warm_start: options of the task model (countdown: fields of ``bandpo.tasks.WarmStartConfig`` but ``task``,
            e.g. ``{max_steps: 600, n_layers: 4}``); the task's puzzles come from ``data.task_options``.
    """

    path: str | None = None
    dtype: str = "float32"
    attn_implementation: str | None = None
    cache_dir: str | None = None
    warm_start: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.dtype not in DTYPES:
            raise ConfigError(f"model.dtype must be one of {', '.join(DTYPES)}, got {self.dtype!r}")
        if self.path is not None and not str(self.path).strip():
            raise ConfigError("model.path must be a model directory, a Hugging Face id or 'tiny', got ''")

    @property
    def uses_task_model(self) -> bool:
        """Whether the model is the built-in task's own (``path`` absent or ``"tiny"``)."""
        return self.path is None or self.path == "tiny"


@dataclass
class DataConfig:
    """``data:``: the training prompts, from a built-in task or from local files.

    Args:
        task: a built-in task name (``bandpo.training.tasks.TASKS``: ``countdown``); exclusive with ``path``.
        task_options: the task's options (countdown: ``bandpo.tasks.CountdownConfig`` fields, e.g.
            ``{n_numbers: 3, n_train: 1000}``).
        path: a JSONL / JSON / parquet file, a list of them, or a directory holding ``<split>.<ext>`` or
            ``<split>-*.<ext>`` files (also under ``data/``, the Hugging Face layout).
        format: one of :data:`DATA_FORMATS`; ``auto`` picks by suffix (``.jsonl``, ``.json``, ``.parquet``).
        split: which split: the task's (``train``/``test``), or the file name prefix inside a directory ``path``
            (ignored for file paths).
        prompt_column: column with the prompt: a string, or a list of chat messages ``{role, content}``.
        answer_column: column with the ground truth (dots read nested dicts: ``reward_model.ground_truth``); it
            becomes the dataset's ``answer`` column, which the ``dapo`` / ``boxed`` rewards read. Optional when
            the reward does not need it.
        keep_columns: more columns to pass to the reward function (TRL hands dataset columns to rewards by name).
        prompt_template: format string applied to string prompts, with ``{prompt}`` (e.g. an instruction).
        system_prompt: a system message (chat) or a prefix line (plain text) added to every prompt.
        chat_template: one of :data:`CHAT_TEMPLATE_MODES`: ``auto`` builds chat messages when the tokenizer has
            a chat template and plain text otherwise; ``always`` requires a template; ``never`` uses plain text.
        max_samples: keep only the first ``max_samples`` problems (``None``: all).
    """

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
        from bandpo.training.tasks import TASKS

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
        if self.prompt_template is not None:
            try:
                self.prompt_template.format(prompt="")
            except (KeyError, IndexError, ValueError) as err:
                raise ConfigError(
                    f"data.prompt_template must be a format string whose only field is {{prompt}} (write literal "
                    f"braces as {{{{ }}}}), got {self.prompt_template!r}: {err!r}"
                ) from err
            if "{prompt}" not in self.prompt_template:
                raise ConfigError(
                    f"data.prompt_template must contain {{prompt}}, got {self.prompt_template!r}"
                )
        if self.max_samples is not None and self.max_samples < 1:
            raise ConfigError(f"data.max_samples must be an integer >= 1 or null, got {self.max_samples!r}")

    @property
    def paths(self) -> list[str]:
        """``path`` as a list (empty for a task)."""
        if self.path is None:
            return []
        return [self.path] if isinstance(self.path, str) else list(self.path)


@dataclass
class RewardConfig:
    """``reward:``: the reward function, by registered name.

    Args:
        name: a name from :func:`bandpo.rewards.reward_names` (``dapo``: the last ``Answer: ...`` line, exact
            match; ``boxed``: the last ``\\boxed{}``, math-verify when installed; ``countdown``: the built-in task).
            ``None``: the task's default reward (required with ``data.path``).
        options: options of the reward (``dapo`` / ``boxed``: ``correct_reward``, ``incorrect_reward``,
            ``unparsed_reward``, ``answer_key``).
        failure_reward: reward of a completion whose scoring raised (the run goes on; failures are counted in
            the metrics ``rewards/<name>/failure_frac`` and ``rewards/<name>/failures``).
    """

    name: str | None = None
    options: dict[str, Any] = field(default_factory=dict)
    failure_reward: float = 0.0

    def __post_init__(self) -> None:
        if not math.isfinite(self.failure_reward):
            raise ConfigError(f"reward.failure_reward must be a finite number, got {self.failure_reward!r}")


SECTIONS: dict[str, type] = {"model": ModelConfig, "data": DataConfig, "reward": RewardConfig}
"""Config sections: key -> dataclass."""


# ------------------------------------------------------------------------------------------------ field types
@functools.cache
def dataclass_types(cls: type) -> dict[str, Any]:
    """Init field name -> resolved type annotation of dataclass ``cls``."""
    hints = typing.get_type_hints(cls)
    return {f.name: hints[f.name] for f in dataclasses.fields(cls) if f.init}


@functools.cache
def trainer_field_types() -> dict[str, Any]:
    """``BandPOConfig`` init field name -> type (imports TRL)."""
    from bandpo.integrations.trl import BandPOConfig

    return dataclass_types(BandPOConfig)


_SIMPLE_NAMES = {
    int: "an integer",
    float: "a number",
    bool: "true or false",
    str: "a string",
    list: "a list",
    dict: "a mapping",
}


def _type_name(tp: Any) -> str:
    origin = typing.get_origin(tp)
    if tp in _SIMPLE_NAMES:
        return _SIMPLE_NAMES[tp]
    if origin in _SIMPLE_NAMES:
        return _SIMPLE_NAMES[origin]
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_type_name(a) for a in typing.get_args(tp))
    if origin is Literal:
        return "one of " + ", ".join(repr(a) for a in typing.get_args(tp))
    if tp is type(None):
        return "null"
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return "one of " + ", ".join(repr(m.value) for m in tp)
    if origin is not None:
        return getattr(origin, "__name__", str(origin))
    return getattr(tp, "__name__", str(tp))


def parse_scalar(text: str) -> Any:
    """YAML scalar/flow parsing of a command-line string, plus numbers YAML 1.1 leaves as strings (``1e-6``)."""
    try:
        value = yaml.safe_load(text)
    except yaml.YAMLError:
        return text
    if isinstance(value, str):
        for convert in (int, float):
            try:
                return convert(value)
            except ValueError:
                pass
    return value


class _Mismatch(Exception):
    pass


def _convert(value: Any, tp: Any) -> Any:
    """``value`` as type ``tp``, or raise ``_Mismatch``."""
    if tp is Any or tp is object:
        return value
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if tp is type(None):
        if value is None or (isinstance(value, str) and value in _NULL_STRINGS):
            return None
        raise _Mismatch
    if origin in (typing.Union, types.UnionType):
        if value is None or (isinstance(value, str) and value in _NULL_STRINGS and type(None) in args):
            if type(None) in args:
                return None
            raise _Mismatch
        members = [a for a in args if a is not type(None)]
        # A value that already has one of the member types keeps it; a string that looks like a YAML list or
        # dict tries the container members first; otherwise the members are tried in declaration order.
        if isinstance(value, str) and value.lstrip()[:1] in ("[", "{"):
            members.sort(key=lambda m: (typing.get_origin(m) or m) not in (list, dict))
        else:
            for member in members:
                base = typing.get_origin(member) or member
                if isinstance(base, type) and isinstance(value, base) and not _bool_int_clash(value, base):
                    return _convert(value, member)
        for member in members:
            try:
                return _convert(value, member)
            except _Mismatch:
                continue
        raise _Mismatch
    if origin is Literal:
        for choice in args:
            if value == choice or (isinstance(value, str) and str(choice) == value):
                return choice
        raise _Mismatch
    if tp is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str):
            lowered = value.strip().lower()
            if lowered in ("true", "yes", "on", "1"):
                return True
            if lowered in ("false", "no", "off", "0"):
                return False
        raise _Mismatch
    if tp is int:
        if isinstance(value, bool):
            raise _Mismatch
        if isinstance(value, int):
            return value
        if isinstance(value, float) and value.is_integer():
            return int(value)
        if isinstance(value, str):
            try:
                return int(value.strip())
            except ValueError:
                try:
                    as_float = float(value)
                except ValueError:
                    raise _Mismatch from None
                if as_float.is_integer():
                    return int(as_float)
        raise _Mismatch
    if tp is float:
        if isinstance(value, bool):
            raise _Mismatch
        if isinstance(value, (int, float)):
            return float(value)
        if isinstance(value, str):
            try:
                return float(value.strip())
            except ValueError:
                raise _Mismatch from None
        raise _Mismatch
    if tp is str:
        if isinstance(value, str):
            return value
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return str(value)
        raise _Mismatch
    if origin in (list, tuple, Sequence) or tp in (list, tuple):
        if isinstance(value, str):
            value = parse_scalar(value)
        if not isinstance(value, (list, tuple)):
            raise _Mismatch
        item_type = args[0] if args else Any
        return [_convert(v, item_type) for v in value]
    if origin in (dict, Mapping) or tp is dict:
        if isinstance(value, str):
            value = parse_scalar(value)
        if not isinstance(value, Mapping):
            raise _Mismatch
        value_type = args[1] if len(args) == 2 else Any
        return {str(k): _convert(v, value_type) for k, v in value.items()}
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        if isinstance(value, tp):
            return value.value
        if any(value == m.value for m in tp):
            return value  # TrainingArguments converts the string itself
        raise _Mismatch
    if isinstance(tp, type) and isinstance(value, tp):
        return value
    raise _Mismatch


def _bool_int_clash(value: Any, base: type) -> bool:
    """``True`` is an ``int`` to Python, not to a config."""
    return isinstance(value, bool) and base in (int, float)


def coerce_value(value: Any, tp: Any, key: str, origin: str | None = None) -> Any:
    """``value`` converted to type ``tp`` (a field annotation); :class:`ConfigError` naming ``key`` otherwise."""
    try:
        return _convert(value, tp)
    except _Mismatch:
        where = f" ({origin})" if origin else ""
        raise ConfigError(f"{key}{where} must be {_type_name(tp)}, got {value!r}") from None


# -------------------------------------------------------------------------------------------- layers & merging
def parse_overrides(overrides: Iterable[str] | Mapping[str, Any]) -> dict[str, Any]:
    """``["a=1", "model.path=/m"]`` (or a mapping of dotted keys) -> nested dict ``{"a": "1", "model": {...}}``.

    String values stay strings here; they are converted to the field's type when the config is built.
    """
    nested: dict[str, Any] = {}
    items: Iterable[tuple[str, Any]]
    if isinstance(overrides, Mapping):
        items = overrides.items()
    else:
        pairs = []
        for item in overrides:
            if not isinstance(item, str) or "=" not in item:
                raise ConfigError(
                    f"overrides must be key=value (dotted keys for sections, e.g. model.path=/models/x), got {item!r}"
                )
            key, value = item.split("=", 1)
            pairs.append((key.strip(), value))
        items = pairs
    for key, value in items:
        parts = key.split(".")
        if not key or "" in parts:
            raise ConfigError(f"override key must be a name or a dotted path like data.path, got {key!r}")
        node = nested
        for part in parts[:-1]:
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                raise ConfigError(f"override {key!r} conflicts with another override of {part!r}")
            node = child
        node[parts[-1]] = value
    return nested


def _merge(base: dict[str, Any], layer: Mapping[str, Any], origins: dict[str, str], label: str) -> None:
    """Merge ``layer`` into ``base`` in place (dicts key by key); record each leaf's origin."""
    new = _selected_method(layer)
    old_method = _selected_method(base) or _DEFAULT_CLIP_RULE
    if new is not None and new != old_method:
        # another method: its defaults plus what this layer sets, nothing of the inherited method or the new one
        for key in switch_keys(old_method, new):
            base.pop(key, None)
            for old in [k for k in origins if k == key or k.startswith(key + ".")]:
                del origins[old]

    data_layer = layer.get("data")
    if isinstance(data_layer, Mapping) and isinstance(base.get("data"), dict):
        # Files instead of a task, or the other way round: the inherited source and its options go.
        drop = {"path": ("task", "task_options"), "task": ("path",)}
        for key, others in drop.items():
            if data_layer.get(key) not in (None, "null", "~"):
                for other in others:
                    if other not in data_layer:
                        base["data"].pop(other, None)

    def merge(dst: dict[str, Any], src: Mapping[str, Any], prefix: str) -> None:
        for key, value in src.items():
            dotted = f"{prefix}{key}"
            if isinstance(value, Mapping) and isinstance(dst.get(key), dict):
                merge(dst[key], value, dotted + ".")
            else:
                dst[key] = copy.deepcopy(dict(value)) if isinstance(value, Mapping) else copy.deepcopy(value)
                for old in [k for k in origins if k.startswith(dotted + ".")]:
                    del origins[old]
                origins[dotted] = label

    merge(base, layer, "")


def _selected_method(layer: Mapping[str, Any]) -> Any:
    """The method a layer selects: its ``method``, else its ``clip_rule``, else ``None`` (a ``null`` method
    defers to ``clip_rule``)."""
    value = layer.get(METHOD_KEY)
    if value in (None, "null", "~"):
        value = layer.get("clip_rule")
    return value


def _read_yaml(path: Path, chain: tuple[Path, ...] = ()) -> list[tuple[dict[str, Any], str]]:
    """The layers of config file ``path``: its ``base:`` chain first, then the file itself."""
    path = path.resolve()
    if path in chain:
        cycle = " -> ".join(str(p) for p in (*chain, path))
        raise ConfigError(f"config base: cycle: {cycle}")
    if not path.is_file():
        raise ConfigError(f"config file {str(path)!r} does not exist")
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as err:
        raise ConfigError(f"config file {str(path)!r} is not valid YAML: {err}") from err
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"config file {str(path)!r} must hold a mapping of keys, got {type(data).__name__}")
    layers: list[tuple[dict[str, Any], str]] = []
    base = data.pop("base", None)
    if base is not None:
        if not isinstance(base, str):
            raise ConfigError(f"base in {str(path)!r} must be a path to another config file, got {base!r}")
        layers.extend(_read_yaml(path.parent / base, (*chain, path)))
    layers.append((data, str(path)))
    return layers


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
        method: the TRL-native method (``cispo``, ``sapo``, ``gspo``; :data:`bandpo.training.methods.TRL_METHODS`)
            trained by plain ``GRPOTrainer``; ``None``: the clip rule ``trainer["clip_rule"]`` (default ``band``)
            trained by ``BandPOTrainer``.
        source: the config file, if any.
        origins: (init only) where each dotted key was set, for the messages of the checks.

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
    origins: dataclasses.InitVar[Mapping[str, str] | None] = None

    def __post_init__(self, origins: Mapping[str, str] | None) -> None:
        def where(key: str) -> str:
            return f" ({_where(origins or {}, key)})"

        if self.method is not None:
            try:
                method = METHODS.get(self.method)
            except ValueError as err:
                raise ConfigError(f"method{where(METHOD_KEY)}: {err}") from err
            if method.name not in TRL_METHODS:  # a clip rule: ``clip_rule`` holds it
                _select_clip_rule(self.trainer, method.name, where)
                self.method = None
        if self.method is not None:
            try:
                TRL_METHODS.get(self.method).check_trainer(self.trainer, where)
            except ValueError as err:
                raise ConfigError(str(err)) from err
        else:
            _check_clip_rule_fields(self.trainer, where)

    def training_method(self) -> Any:
        """The method to train with (:data:`bandpo.training.methods.METHODS`): ``config_class()``,
        ``trainer_class()``, ``describe(args)``."""
        return METHODS.get(self.method or self.trainer.get("clip_rule", _DEFAULT_CLIP_RULE))

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
            where = _where(origins, key)
            if key == METHOD_KEY:
                if value in (None, "null", "~"):
                    continue
                if not isinstance(value, str):
                    raise ConfigError(
                        f"method ({where}) must be a method name ({', '.join(METHODS.names())}), got {value!r}"
                    )
                method = value
            elif key in SECTIONS:
                if value is None:
                    value = {}
                if not isinstance(value, Mapping):
                    raise ConfigError(
                        f"{key} ({where}) must be a mapping of {', '.join(dataclass_types(SECTIONS[key]))}, "
                        f"got {value!r}"
                    )
                sections[key] = _build_section(key, value, origins)
            elif key in REFUSED_TRAINER_KEYS:
                raise ConfigError(f"{key} ({where}) cannot be set in a config: {REFUSED_TRAINER_KEYS[key]}")
            elif key in field_types:
                value = _parse_override_leaves(value, key, origins)
                trainer[key] = coerce_value(value, field_types[key], key, where)
            else:
                raise ConfigError(
                    f"unknown config key {key!r} ({where}){did_you_mean(key, _valid_keys())}. Top-level keys are "
                    "the fields of TRL's GRPOConfig / bandpo's BandPOConfig (learning_rate, num_generations, ...) "
                    f"and the sections {', '.join(SECTIONS)}"
                )
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
        return yaml.safe_dump(self.to_dict(), sort_keys=False, default_flow_style=None)

    def with_overrides(self, overrides: Iterable[str] | Mapping[str, Any]) -> TrainConfig:
        """A new config with ``overrides`` (``["key=value", ...]`` or ``{"dotted.key": value}``) applied."""
        merged = self.to_dict()
        origins: dict[str, str] = {}
        _merge(merged, parse_overrides(overrides), origins, OVERRIDES_LABEL)
        return TrainConfig.from_dict(merged, source=self.source, origins=origins)

    @property
    def output_dir(self) -> Path:
        """``output_dir``, or ``runs/<config file stem>`` when the config does not set it."""
        value = self.trainer.get("output_dir")
        if value:
            return Path(value)
        stem = Path(self.source).stem if self.source else "bandpo"
        return Path(_DEFAULT_OUTPUT_ROOT) / stem

    def trainer_kwargs(self) -> dict[str, Any]:
        """Keyword arguments of the method's config class (``BandPOConfig``, or ``GRPOConfig`` for a TRL-native
        method): the config's fields, the fields a TRL-native method sets (its ``loss_type``, ..., and the defaults
        of its parameters), bandpo's defaults (progress bar on, ``use_cpu`` when no GPU, ``output_dir``) and the
        model section's ``dtype`` / ``attn_implementation`` in ``model_init_kwargs``."""
        kwargs = copy.deepcopy(self.trainer)
        for key, value in self.training_method().defaults(self.trainer).items():
            kwargs.setdefault(key, value)
        kwargs["output_dir"] = str(self.output_dir)
        kwargs.setdefault("disable_tqdm", False)
        if "activation_checkpointing" not in kwargs:  # transformers 5's name; TRL's default (on) otherwise
            kwargs["activation_checkpointing"] = kwargs.pop("gradient_checkpointing", True)
        if "use_cpu" not in kwargs and not _accelerator_available():
            kwargs["use_cpu"] = True
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
        return kwargs


def _select_clip_rule(trainer: dict[str, Any], name: str, where: Any) -> None:
    """``method: NAME`` for a clip rule: the same as ``clip_rule: NAME``; both set to different rules is refused."""
    existing = trainer.get("clip_rule")
    if existing is not None and existing != name:
        raise ConfigError(
            f"method={name!r}{where(METHOD_KEY)} and clip_rule={existing!r}{where('clip_rule')} select different "
            "methods: set one of them"
        )
    trainer["clip_rule"] = name


def _check_clip_rule_fields(trainer: Mapping[str, Any], where: Any) -> None:
    """A clip rule's config: a registered rule, and the loss type / importance-sampling level ``BandPOTrainer``
    can bound (TRL's other values name the TRL-native method that runs them)."""
    from bandpo.integrations.trl import REFUSED_LOSS_TYPES, SUPPORTED_LOSS_TYPES

    rule = trainer.get("clip_rule")
    if rule is not None:
        if METHODS.is_trl_native(rule):
            raise ConfigError(
                f"clip_rule={rule!r}{where('clip_rule')} is TRL's {TRL_METHODS.get(rule).title}, a TRL-native method "
                f"rather than a clip rule: select it with method: {rule} (plain GRPOTrainer, without clip-rule fields)"
            )
        try:
            METHODS.clip_rule(rule)
        except ValueError as err:
            raise ConfigError(
                f"clip_rule{where('clip_rule')}: {err}; TRL-native methods (method: NAME): "
                f"{', '.join(METHODS.trl_names())}"
            ) from err

    def runs_it(key: str, value: Any) -> list[str]:
        return [n for n in METHODS.trl_names() if TRL_METHODS.get(n).fixed.get(key) == value]

    loss_type = trainer.get("loss_type")
    if loss_type is not None and loss_type not in SUPPORTED_LOSS_TYPES:
        known = [*SUPPORTED_LOSS_TYPES, *REFUSED_LOSS_TYPES]
        methods = runs_it("loss_type", loss_type)
        if methods:
            how = f"select it with method: {methods[0]} (plain GRPOTrainer) instead of a clip rule"
        elif loss_type in known:
            how = f"{REFUSED_LOSS_TYPES[loss_type]}; bandpo runs TRL's {', '.join(METHODS.trl_names())} as methods"
        else:
            raise ConfigError(
                f"unknown loss_type {loss_type!r}{where('loss_type')}{did_you_mean(loss_type, known)}; TRL 1.16 loss types: {', '.join(known)}"
            )
        raise ConfigError(
            f"loss_type={loss_type!r}{where('loss_type')} cannot be used with a clip rule: {how}. With a clip rule: "
            f"{', '.join(SUPPORTED_LOSS_TYPES)}"
        )
    level = trainer.get("importance_sampling_level")
    if level is not None and level != "token":
        methods = runs_it("importance_sampling_level", level)
        how = f"; for {methods[0].upper()} set method: {methods[0]}" if methods else ""
        raise ConfigError(
            f"importance_sampling_level={level!r}{where('importance_sampling_level')} cannot be used with a clip "
            f"rule, which bounds each token's ratio from its old probability{how}. With a clip rule: 'token'"
        )


def _parse_override_leaves(
    value: Any, dotted: str, origins: Mapping[str, str], inherited: str | None = None
) -> Any:
    """Inside a dict-valued field, overridden string leaves (``reward.options.incorrect_reward=0``) are parsed as
    YAML scalars: free-form options have no declared type to convert them to."""
    if not isinstance(value, Mapping):
        return value
    inherited = origins.get(dotted, inherited)
    out = {}
    for key, item in value.items():
        sub = f"{dotted}.{key}"
        if isinstance(item, Mapping):
            out[key] = _parse_override_leaves(item, sub, origins, inherited)
        elif isinstance(item, str) and origins.get(sub, inherited) == OVERRIDES_LABEL:
            out[key] = parse_scalar(item)
        else:
            out[key] = item
    return out


def _where(origins: Mapping[str, str], dotted: str) -> str:
    """Where ``dotted`` was set: its own origin, an enclosing key's, or those of the keys inside it."""
    parts = dotted.split(".")
    for end in range(len(parts), 0, -1):
        found = origins.get(".".join(parts[:end]))
        if found:
            return found
    inside = sorted({v for k, v in origins.items() if k.startswith(dotted + ".")})
    return ", ".join(inside) if inside else "default"


def _build_section(name: str, values: Mapping[str, Any], origins: Mapping[str, str]) -> Any:
    cls = SECTIONS[name]
    field_types = dataclass_types(cls)
    kwargs: dict[str, Any] = {}
    for key, value in values.items():
        dotted = f"{name}.{key}"
        where = _where(origins, dotted)
        if key not in field_types:
            raise ConfigError(
                f"unknown config key {dotted!r} ({where}){did_you_mean(dotted, _valid_keys())}. Keys of {name}: "
                f"{', '.join(field_types)}"
            )
        value = _parse_override_leaves(value, dotted, origins)
        kwargs[key] = coerce_value(value, field_types[key], dotted, where)
    try:
        return cls(**kwargs)
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
        path: the config file. ``None``: only the overrides (which must then include a data section).
        overrides: ``["learning_rate=1e-5", "model.path=/models/x"]`` or ``{"learning_rate": 1e-5}``.

    Raises:
        ConfigError: unreadable file, unknown key (with the closest valid key), a value of the wrong type, or a
            section value that its dataclass refuses. Paths, datasets and the reward are checked later, by
            :func:`bandpo.training.run.prepare`.
    """
    merged: dict[str, Any] = {}
    origins: dict[str, str] = {}
    source = None
    if path is not None:
        source = str(path)
        for layer, file in _read_yaml(Path(path)):
            label = f"in {file}"
            _merge(merged, layer, origins, label)
    _merge(merged, parse_overrides(overrides), origins, OVERRIDES_LABEL)
    return TrainConfig.from_dict(merged, source=source, origins=origins)
