"""Config values converted to the type of the dataclass field they set, with a message that names the key.

:func:`coerce_value` validates with pydantic's ``TypeAdapter`` in lax mode (``"7"`` -> ``7``, ``"yes"`` -> ``True``,
numbers to a ``str``, enum members as their values), trying a string value as a null text (``null``, ``~``,
``None``: nothing else is ``None``), as the text itself (``run_name=1.50`` stays ``"1.50"``), then read as YAML
(first where it starts with ``[`` or ``{``). Unlike pydantic, ``true`` / ``false`` never become numbers nor
numbers ``true`` / ``false``. A value no reading fits raises :class:`ConfigError` ``"KEY (WHERE) must be TYPE, got
VALUE"``, the type in words (``an integer or null``).
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import types
import typing
from collections.abc import Iterable, Iterator, Mapping
from typing import Any, Literal

from bandpo._optional import require
from bandpo_lab.config.documents import (
    NULL_TEXTS,
    OVERRIDES_LABEL,
    ConfigError,
    located,
    parse_scalar,
    unknown_key,
    where,
)


@functools.cache
def dataclass_types(cls: type) -> dict[str, Any]:
    """Init field name -> resolved type annotation of dataclass ``cls``."""
    hints = typing.get_type_hints(cls)
    return {f.name: hints[f.name] for f in dataclasses.fields(cls) if f.init}


@functools.cache
def _adapter(tp: Any) -> Any:
    pydantic = require("pydantic", "config checks", "lab")
    config = pydantic.ConfigDict(
        coerce_numbers_to_str=True, arbitrary_types_allowed=True, use_enum_values=True
    )
    return pydantic.TypeAdapter(tp, config=config)


def _readings(value: Any, name: str) -> Iterator[Any]:
    if not isinstance(value, str):
        yield value
        return
    if value in NULL_TEXTS:
        yield None
    parsed = parse_scalar(value, name)
    as_yaml = [] if parsed is None else [parsed]  # only a null text is None: ``max_samples=`` is refused
    if value.lstrip()[:1] in ("[", "{"):
        yield from (*as_yaml, value)
    else:
        yield from (value, *as_yaml)


def _kinds_agree(before: Any, after: Any) -> bool:
    """``False`` where a bool became a number or a number a bool (strings may become either)."""
    if isinstance(before, str):
        return True
    if isinstance(before, (list, tuple)) and isinstance(after, list) and len(before) == len(after):
        return all(_kinds_agree(b, a) for b, a in zip(before, after))
    if isinstance(before, dict) and isinstance(after, dict) and len(before) == len(after):
        return all(_kinds_agree(b, a) for b, a in zip(before.values(), after.values()))
    return isinstance(before, bool) == isinstance(after, bool)


def coerce_value(value: Any, tp: Any, key: str, where: str | None = None) -> Any:
    """``value`` converted to type ``tp`` (a field annotation; module docstring), or :class:`ConfigError`
    ``"{key} ({where}) must be {type in words}, got {value!r}"``."""
    if tp is Any or tp is object:
        return value
    adapter = _adapter(tp)  # first: it names the extra when pydantic is missing
    from pydantic import ValidationError

    for reading in _readings(value, located(key, where)):
        try:
            result = adapter.validate_python(reading)
        except ValidationError:
            continue
        if _kinds_agree(reading, result):
            return result
    raise ConfigError(f"{located(key, where)} must be {type_words(tp)}, got {value!r}")


def _read_override_leaves(value: Any, dotted: str, origins: Mapping[str, str], inherited: str = "") -> Any:
    """Inside a mapping, text leaves set by overrides (``reward.options.incorrect_reward=0``) read as YAML: free-form
    options have no declared type to convert them to."""
    if not isinstance(value, Mapping):
        return value
    inherited = origins.get(dotted, inherited)
    out = {}
    for key, item in value.items():
        sub = f"{dotted}.{key}"
        if isinstance(item, Mapping):
            item = _read_override_leaves(item, sub, origins, inherited)
        elif isinstance(item, str) and origins.get(sub, inherited) == OVERRIDES_LABEL:
            item = parse_scalar(item, located(sub, OVERRIDES_LABEL))
        out[key] = item
    return out


def field_value(value: Any, tp: Any, dotted: str, origins: Mapping[str, str] | None = None) -> Any:
    """:func:`coerce_value` for the field at ``dotted``, named with where it was set (``origins``)."""
    if not origins:
        return coerce_value(value, tp, dotted)
    return coerce_value(_read_override_leaves(value, dotted, origins), tp, dotted, where(origins, dotted))


def build_dataclass(
    cls: type,
    values: Mapping[str, Any] | None,
    name: str,
    origins: Mapping[str, str] | None = None,
    what: str = "config",
    suggest: Iterable[str] | None = None,
    **fixed: Any,
) -> Any:
    """``cls(**values, **fixed)`` for the section ``name`` of a config (``values`` null: the defaults), each key
    checked and each value converted to its field's type first.

    Raises:
        ConfigError: ``values`` not a mapping, an unknown key (the closest of ``suggest``, default the section's
            dotted keys; the section's keys), a value of the wrong type (where it was set, from ``origins``).
            Errors of ``cls`` propagate.
    """
    types_ = {k: tp for k, tp in dataclass_types(cls).items() if k not in fixed}
    if values is None:
        values = {}
    if not isinstance(values, Mapping):
        at = where(origins, name) if origins else None
        raise ConfigError(f"{located(name, at)} must be a mapping of {', '.join(types_)}, got {values!r}")
    kwargs = {}
    for key, value in values.items():
        dotted = f"{name}.{key}"
        if key not in types_:
            at = where(origins, dotted) if origins else ""
            valid = [f"{name}.{k}" for k in types_] if suggest is None else suggest
            raise unknown_key(dotted, valid, what, at, known=f". Keys of {name}: {', '.join(types_)}")
        kwargs[key] = field_value(value, types_[key], dotted, origins)
    return cls(**kwargs, **fixed)


_WORDS = {
    int: "an integer",
    float: "a number",
    bool: "true or false",
    str: "a string",
    list: "a list",
    dict: "a mapping",
}


def type_words(tp: Any) -> str:
    """``tp`` in words for a message: ``an integer or null``, ``one of 'a', 'b'``."""
    origin = typing.get_origin(tp)
    if tp in _WORDS or origin in _WORDS:
        return _WORDS[tp if tp in _WORDS else origin]
    if origin in (typing.Union, types.UnionType):
        return " or ".join(type_words(a) for a in typing.get_args(tp))
    if origin is Literal:
        return "one of " + ", ".join(repr(a) for a in typing.get_args(tp))
    if tp is type(None):
        return "null"
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return "one of " + ", ".join(repr(m.value) for m in tp)
    return getattr(origin or tp, "__name__", str(tp))
