"""The trainer's config fields with their types, read from its own dataclass; and the fields TRL renamed.

The top-level keys of a ``bandpo train`` config are the init fields of :class:`bandpo.integrations.trl.BandPOConfig`
(transformers' ``TrainingArguments``, TRL's ``GRPOConfig`` and the clip method's); their values are converted to these
types when the config is read. :func:`trainer_field_types` reads them from the installed dataclass
(``dataclasses.fields`` and ``typing.get_type_hints``) the first time a config is checked, so importing the lab
imports no TRL, and checking a config imports TRL and transformers once (about 1.5 s on a loaded 2-core CPU;
``bandpo train`` imports them anyway). Each type is kept as the converter needs it (:func:`yaml_type`).

:data:`RENAMED_FIELDS`: fields TRL or transformers renamed, still fields under the old name; a config that writes
the old name gets a one-line warning (it is read as the new one) or error (it no longer should) naming the new one.
That table is bandpo's own (which old names are refused): ``tests/lab/training/test_trl_fields.py`` checks it
against the deprecation notes in TRL's and transformers' field help.
"""

from __future__ import annotations

import enum
import functools
import types
import typing
from dataclasses import dataclass
from typing import Any

from bandpo_lab.config import dataclass_types

__all__ = ["RENAMED_FIELDS", "RenamedField", "config_field_types", "trainer_field_types", "yaml_type"]


@functools.cache
def trainer_field_types() -> dict[str, Any]:
    """``BandPOConfig`` init field name -> type (:func:`yaml_type`), from the installed TRL's dataclasses (imported
    here, once). A renamed field (:data:`RENAMED_FIELDS`) is known under its new name even where the installed
    transformers has only the old one (5.17 has no ``activation_checkpointing``): the config reads the same on
    either, and :meth:`~bandpo_lab.training.config.TrainConfig.trainer_kwargs` passes the installed spelling.

    Raises:
        ImportError: TRL is not installed, or not a supported version (``bandpo.integrations.trl_config``).
    """
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
    """A field's type as a YAML value is converted to: ``tp`` itself, except

    * an enum in a union with ``str`` is dropped (``str | OptimizerNames`` is ``str``: any text passes, TRL converts
      it, and a wrong value is named as "a string", not with every optimizer's name);
    * a class of another library (accelerate's ``ParallelismConfig``) is a stand-in of the same name that no YAML
      value is an instance of, so the field may only be left null (against accelerate's class pydantic built one
      from a mapping, which the config's YAML dump could not write: ``--dry-run`` and the run's copy failed).

    Enums alone (``list[DebugOption]``) stay: the converter returns their values.
    """
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
    """A field renamed by TRL or transformers, still a field under its old name.

    Attributes:
        new: the field's name now.
        renamed_in: where it was renamed (``transformers 5``).
        refused: whether a config that writes the old name is refused (an error) rather than warned (it still
            works). Warned: the names transformers 5 renamed, which it reads until v6 and TRL 1.16 itself still
            sets (``gradient_checkpointing=True`` is GRPOConfig's default); refused: TRL's renamed fields, which
            TRL warns will go in v2 and which no bandpo config has written.
    """

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
"""Old field name -> its new name (the field's help in transformers' ``TrainingArguments`` or TRL's ``GRPOConfig``
says "Deprecated ... use NEW")."""
