"""The top-level keys of a training config with their types, read from the installed ``BandPOConfig`` the first
time a config is checked (importing the lab imports no TRL); and :data:`RENAMED_FIELDS`, the old names of renamed
fields (docs/architecture.md, "Hand-written pieces kept").
"""

from __future__ import annotations

import enum
import functools
import types
import typing
from dataclasses import dataclass
from typing import Any

from bandpo_lab.config import dataclass_types


@functools.cache
def trainer_field_types() -> dict[str, Any]:
    """``BandPOConfig`` init field name -> type (:func:`yaml_type`), a renamed field under its new name too
    (``ImportError`` without a supported TRL)."""
    from bandpo.integrations.trl_config import BandPOConfig  # TRL and transformers: about 1.5 s, once

    return config_field_types(BandPOConfig)


def config_field_types(cls: type) -> dict[str, Any]:
    """:func:`trainer_field_types` of the dataclass ``cls``."""
    fields = {name: yaml_type(tp) for name, tp in dataclass_types(cls).items()}
    for old, renamed in RENAMED_FIELDS.items():
        if old in fields:
            fields.setdefault(renamed.new, fields[old])
    return fields


def yaml_type(tp: Any) -> Any:
    """A field's type as a YAML value is converted to: ``tp`` itself, except that an enum in a union with ``str``
    is dropped (TRL converts the text) and a class of another library (accelerate's ``ParallelismConfig``, which
    has no YAML form) becomes a stand-in no value is an instance of, so the field may only be null."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        if str in args:
            args = tuple(a for a in args if not (isinstance(a, type) and issubclass(a, enum.Enum)))
        return typing.Union[tuple(yaml_type(a) for a in args)]  # noqa: UP007 - members are built at run time
    if origin in (list, dict):
        return origin[tuple(yaml_type(a) for a in args)]
    # typing.Any is a class since Python 3.11
    foreign = isinstance(tp, type) and tp.__module__ != "builtins" and tp is not Any
    if foreign and not issubclass(tp, enum.Enum):
        return _stand_in(tp)
    return tp


@functools.cache
def _stand_in(cls: type) -> type:
    doc = f"Stand-in for {cls.__module__}.{cls.__qualname__}: no YAML value is one; a config leaves it null."
    return type(cls.__name__, (), {"__doc__": doc, "__module__": __name__})


@dataclass(frozen=True)
class RenamedField:
    """A field renamed by TRL or transformers (``renamed_in``), still a field under its old name; ``refused``: a
    config writing the old name is an error (TRL's renames) rather than a warning (transformers 5's, which TRL
    1.16 itself still sets)."""

    new: str
    renamed_in: str
    refused: bool


RENAMED_FIELDS: dict[str, RenamedField] = {
    "gradient_checkpointing": RenamedField("activation_checkpointing", "transformers 5", refused=False),
    "gradient_checkpointing_kwargs": RenamedField(
        "activation_checkpointing_kwargs", "transformers 5", refused=False
    ),
    "use_transformers_paged": RenamedField("use_transformers_continuous_batching", "TRL 1.2", refused=True),
    "vllm_importance_sampling_cap": RenamedField(
        "vllm_importance_sampling_clip_max", "TRL 1.6", refused=True
    ),
}
"""Old field name -> its new name (as the field's help in transformers or TRL says "Deprecated ... use NEW")."""
