"""The one config layer of ``bandpo train`` and ``bandpo compare``: YAML documents with their ``base:`` chain and
dotted ``key=value`` overrides, each key's origin (``in FILE:LINE``) kept for the messages
(:mod:`bandpo_lab.config.documents`), and values converted to their dataclass field's type by pydantic
(:mod:`bandpo_lab.config.coerce`). What the keys mean lives with each config (:mod:`bandpo_lab.training.config`,
:mod:`bandpo_lab.experiments.compare.config`).
"""

from bandpo_lab.config.coerce import build_dataclass, coerce_value, dataclass_types, field_value
from bandpo_lab.config.documents import (
    NULL_TEXTS,
    OVERRIDES_LABEL,
    TILDE_MARK,
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
)

__all__ = [
    "NULL_TEXTS",
    "OVERRIDES_LABEL",
    "TILDE_MARK",
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
    "unknown_key",
    "where",
]
