"""The one config layer of ``bandpo train`` and ``bandpo compare``: documents, overrides, typed values.

* :mod:`bandpo_lab.config.documents`: YAML files with their ``base:`` chain (PyYAML), ``key=value`` overrides (dotted
  keys, as OmegaConf / Hydra users write them), merging layers, and where each key was set (``in FILE:LINE`` or
  ``from the overrides``) for the messages.
* :mod:`bandpo_lab.config.coerce`: a value converted to the type of the dataclass field it sets (pydantic), or a
  :class:`ConfigError` naming the key, where it was set, the type in words and the value.

What the keys mean lives with each config: :mod:`bandpo_lab.training.config` (``TrainConfig``: TRL's fields, the
``model`` / ``data`` / ``reward`` sections, the method) and :mod:`bandpo_lab.experiments.compare.config`.
"""

from bandpo_lab.config.coerce import build_dataclass, coerce_value, dataclass_types, field_value, type_words
from bandpo_lab.config.documents import (
    NULL_TEXTS,
    OVERRIDES_LABEL,
    ConfigError,
    ConfigWarning,
    Layer,
    config_file,
    located,
    merge,
    override_layer,
    parse_scalar,
    read_layers,
    recipe_note,
    shown_path,
    split_override,
    unknown_key,
    where,
    yaml_error_line,
)

__all__ = [
    "NULL_TEXTS",
    "OVERRIDES_LABEL",
    "ConfigError",
    "ConfigWarning",
    "Layer",
    "build_dataclass",
    "coerce_value",
    "config_file",
    "dataclass_types",
    "field_value",
    "located",
    "merge",
    "override_layer",
    "parse_scalar",
    "read_layers",
    "recipe_note",
    "shown_path",
    "split_override",
    "type_words",
    "unknown_key",
    "where",
    "yaml_error_line",
]
