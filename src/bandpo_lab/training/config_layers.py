"""How the layers of a training config merge (the files of a ``base:`` chain, then the overrides): method switches,
``data.path`` against ``data.task``, and the old names of renamed fields (the rules: docs/trl.md, ``bandpo
train``)."""

from __future__ import annotations

import re
import sys
import warnings
from collections.abc import Mapping
from typing import Any

from bandpo_lab.config import NULL_TEXTS, TILDE_MARK, ConfigError, ConfigWarning, Layer, merge, where
from bandpo_lab.training.config_method import DEFAULT_CLIP_RULE
from bandpo_lab.training.methods import METHOD_KEY, METHODS, switch_keys
from bandpo_lab.training.trl_fields import RENAMED_FIELDS

_CONFIG_MODULES = ("bandpo_lab.training.config", __name__)
"""The modules a :class:`ConfigWarning` is not attributed to: it names the first caller outside them."""


def _selected_method(values: Mapping[str, Any]) -> Any:
    """The method a layer selects: its ``method`` (unless null), else its ``clip_rule``, else ``None``."""
    value = values.get(METHOD_KEY)
    if value in NULL_TEXTS:
        value = None
    return value if value is not None else values.get("clip_rule")


def merge_layer(values: dict[str, Any], origins: dict[str, str], layer: Layer) -> dict[str, tuple[Any, str]]:
    """Merge ``layer`` into ``values`` after dropping what it switches away from; returns the inherited settings
    of the method a switch dropped and the layer does not set itself: key -> (value, where it was set)."""
    new = _selected_method(layer.values)
    old = _selected_method(values) or DEFAULT_CLIP_RULE
    dropped: dict[str, tuple[Any, str]] = {}
    if new is not None and new != old:
        switched = switch_keys(old, new)
        for key in [k for k in values if k in switched]:
            value = values.pop(key)
            if key not in (METHOD_KEY, "clip_rule") and key not in layer.values:
                dropped[key] = (value, where(origins, key))
            for gone in [k for k in origins if k == key or k.startswith(key + ".")]:
                del origins[gone]
    data = layer.values.get("data")
    if isinstance(data, Mapping) and isinstance(values.get("data"), dict):
        # Files instead of a task, or the other way round: the inherited source and its options go.
        for key, others in {"path": ("task", "task_options"), "task": ("path",)}.items():
            if data.get(key) not in (None, *NULL_TEXTS):
                for other in others:
                    if other not in data:
                        values["data"].pop(other, None)
    merge(values, origins, layer)
    return dropped


def _switch_notice(layer: Layer, old: str, dropped: Mapping[str, tuple[Any, str]]) -> str:
    """The one line of an override that switched method and dropped inherited settings."""
    selector = METHOD_KEY if layer.values.get(METHOD_KEY) not in (None, *NULL_TEXTS) else "clip_rule"
    new = layer.values[selector]
    keys = ", ".join(f"{key}={value!r}" for key, (value, _) in dropped.items())
    files = [
        re.sub(rf":\d+(?:{re.escape(TILDE_MARK)})?$", "", at)
        for _, ats in dropped.values()
        if ats != "default"
        for at in ats.split(", ")
    ]
    places = f" ({', '.join(dict.fromkeys(files))})" if files else ""
    return (
        f"{selector}={new!r} ({where(layer.origins, selector)}) switches the method from {old!r} and drops the "
        f"inherited settings of the method: {keys}{places}; {new!r} starts from its defaults and what the overrides "
        "set"
    )


def _warn(message: str) -> None:
    """A :class:`ConfigWarning` attributed to the first caller outside :data:`_CONFIG_MODULES`."""
    frame, level = sys._getframe(1), 2  # stacklevel 2: the caller of this function
    while frame is not None and frame.f_globals.get("__name__") in _CONFIG_MODULES:
        frame, level = frame.f_back, level + 1
    warnings.warn(message, ConfigWarning, stacklevel=level)


def merge_overrides(values: dict[str, Any], origins: dict[str, str], layer: Layer) -> None:
    """:func:`merge_layer` for the overrides, warning in one line of the settings a method switch drops."""
    old = _selected_method(values) or DEFAULT_CLIP_RULE
    dropped = merge_layer(values, origins, layer)
    if dropped and _selected_method(values) in METHODS:  # an unknown name: its error follows, not this line
        _warn(_switch_notice(layer, old, dropped))


def check_renamed(trainer: dict[str, Any], origins: Mapping[str, str]) -> None:
    """Replace the old names of renamed fields (:data:`~bandpo_lab.training.trl_fields.RENAMED_FIELDS`) in
    ``trainer`` by the new ones, with one :class:`ConfigWarning` line (a :class:`ConfigError` for a refused name).
    The new name's value wins unless it is unset or null, as in transformers."""
    for old, renamed in RENAMED_FIELDS.items():
        if old not in trainer:
            continue
        value, at = trainer.pop(old), where(origins, old)
        new, was = renamed.new, f"it is the old name of {renamed.new} (renamed in {renamed.renamed_in})"
        if renamed.refused:
            raise ConfigError(f"{old}={value!r} ({at}) is the old name of {new} (renamed in {renamed.renamed_in}): "
                              f"write {new}={value!r}")  # fmt: skip
        if trainer.get(new) is not None:
            _warn(
                f"{old}={value!r} ({at}) has no effect: {was}, which the config also sets ({new}={trainer[new]!r}, "
                f"{where(origins, new)}) and which wins; set {new} only"
            )
            continue
        if new in trainer:  # set to null: transformers then reads the old name
            _warn(
                f"{old}={value!r} ({at}) is used: {was}, which the config sets to null ({where(origins, new)}), "
                f"and null leaves it to the old name; write {new}={value!r} only"
            )
        else:
            _warn(f"{old}={value!r} ({at}) is the old name of {new} (renamed in {renamed.renamed_in}; read as "
                  f"{new}): write {new}={value!r}")  # fmt: skip
        trainer[new] = value
