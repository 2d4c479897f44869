"""Config documents: YAML files with their ``base:`` chain (:func:`read_layers`), ``key=value`` overrides
(:func:`override_layer`), merged layer by layer (:func:`merge`) with where each dotted key was set (``in
FILE:LINE``, :data:`OVERRIDES_LABEL`), so that an error found later names the file and line of the value. Override
values stay text until :func:`bandpo_lab.config.coerce.coerce_value` converts them to their field's type.
"""

from __future__ import annotations

import copy
import re
import warnings
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from bandpo.registry import did_you_mean
from bandpo_lab._files import (
    RECIPES,
    expand_path,
    read_utf8,
    recipe_name,
    recipe_names,
    resolve_config,
    same_or_inside,
)


class ConfigError(ValueError):
    """A problem with a config (key, value, file, dataset or model path), found before anything is trained."""


class ConfigWarning(UserWarning):
    """A config that works but may not do what its writer meant (an old key name, inherited keys a method switch
    dropped): one line naming the keys and what to write instead."""


OVERRIDES_LABEL = "from the overrides"
"""Origin of values set by ``key=value`` overrides (error messages say where a bad value came from)."""

NULL_TEXTS = ("null", "~", "None", "NULL", "Null")
"""Texts that mean "no value" where a field admits ``None``."""

TILDE_MARK = " as ~"
"""The end of a file key's origin (``in my.yaml:3 as ~``) whose value is written ``~``: YAML's null, which a user may
have meant as the home folder (a path key refuses it: :mod:`bandpo_lab.training.config`)."""


@dataclass
class Layer:
    """One layer of a config: ``values`` (nested dicts) and ``origins`` (dotted key -> where it was set)."""

    values: dict[str, Any]
    origins: dict[str, str] = field(default_factory=dict)


ALIAS_VALUES_LIMIT = 10_000
"""How many values the aliases (``*name``) of one YAML text may stand for in all (a "billion laughs" bound)."""


class AliasBoundError(yaml.composer.ComposerError):
    """YAML whose aliases stand for more than :data:`ALIAS_VALUES_LIMIT` values, or one inside the value it names."""


class _Loader(yaml.SafeLoader):
    """PyYAML's safe loader with four changes configs need: ``1e-6`` is a float (YAML 1.1 reads it as text),
    timestamps stay text, a key given twice in one mapping is an error, and aliases stand for at most
    :data:`ALIAS_VALUES_LIMIT` values in all, none inside the value it names."""

    def __init__(
        self, stream: str, whose: str = "the file's", instead: str = "or share a file's values with base:"
    ) -> None:
        super().__init__(stream)
        # how the bound's message names the text, and what else its writer can do
        self._whose, self._instead = whose, instead
        # id of a composed node -> how many values it holds with its aliases expanded
        self._sizes: dict[int, int] = {}
        self._aliased = 0  # the values the aliases read so far stand for

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node:
        if not self.check_event(yaml.AliasEvent):
            node = super().compose_node(parent, index)
            children = (
                [n for pair in node.value for n in pair] if isinstance(node, yaml.MappingNode) else node.value
            )
            inside = sum(self._sizes[id(n)] for n in children) if isinstance(children, list) else 0
            self._sizes[id(node)] = 1 + inside
            return node
        event = self.peek_event()
        node = super().compose_node(parent, index)
        size = self._sizes.get(id(node))
        if size is None:  # still being composed: the alias is inside the value it names
            raise AliasBoundError(
                None, None, f"the alias *{event.anchor} is inside the value it names (a recursive alias)",
                event.start_mark,
            )  # fmt: skip
        self._aliased += size
        if self._aliased > ALIAS_VALUES_LIMIT:
            raise AliasBoundError(
                None, None, f"with the alias *{event.anchor} {self._whose} aliases stand for more than "
                f"{ALIAS_VALUES_LIMIT} values (nested aliases repeat a value at every level, a 'billion laughs'); "
                f"write the values out{', ' + self._instead if self._instead else ''}", event.start_mark,
            )  # fmt: skip
        return node

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[str] = set()
        for key_node, _ in node.value:
            if isinstance(key_node, yaml.ScalarNode):
                if key_node.value in seen:
                    raise yaml.constructor.ConstructorError(
                        "while constructing a mapping",
                        node.start_mark,
                        f"found duplicate key {key_node.value}",
                        key_node.start_mark,
                    )
                seen.add(key_node.value)
        return super().construct_mapping(node, deep=deep)


_Loader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:timestamp"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?[0-9][0-9_]*(?:\.[0-9_]*)?[eE][-+]?[0-9]+$"),
    list("-+0123456789"),
)


def load_value(text: str) -> Any:
    """One value given on the command line (an override's, an option's such as ``--task-options``) read as YAML as
    a config file's values are (:class:`_Loader`), its aliases bounded the same way.

    Raises:
        yaml.YAMLError: text that is not YAML; :class:`AliasBoundError` where its aliases stand for more than
            :data:`ALIAS_VALUES_LIMIT` values ("the value's aliases") or one is inside the value it names.
    """
    loader = _Loader(text, whose="the value's", instead="")
    try:
        return loader.get_single_data()
    finally:
        loader.dispose()


def parse_scalar(text: str, name: str = f"a value {OVERRIDES_LABEL}") -> Any:
    """A command-line string read as a YAML value (scalar or flow list / mapping), as a config file's values are
    read (:class:`_Loader`); text that is not YAML stays the text.

    Raises:
        ConfigError: the value's aliases are out of bounds (:func:`load_value`), naming the value as ``name``
            (``max_steps (from the overrides)``).
    """
    try:
        value = load_value(text)
    except AliasBoundError as err:
        raise ConfigError(f"{name} is not valid YAML: {yaml_error_line(err)}") from None
    except yaml.YAMLError:
        return text
    if isinstance(value, str):
        for convert in (int, float):
            try:
                return convert(value)
            except ValueError:
                pass
    return value


def _key_lines(node: yaml.Node, prefix: str = "") -> dict[str, int]:
    """Dotted key -> 1-based line of the key, for the mappings of a composed YAML document; the items of a list
    count as keys ``0``, ``1``, ... (``methods.1``: the line where the list's second item starts)."""
    lines: dict[str, int] = {}
    if isinstance(node, yaml.MappingNode):
        for key_node, value_node in node.value:
            dotted = f"{prefix}{key_node.value}"
            lines[dotted] = key_node.start_mark.line + 1
            lines.update(_key_lines(value_node, dotted + "."))
    elif isinstance(node, yaml.SequenceNode) and prefix:
        for i, item in enumerate(node.value):
            lines[f"{prefix}{i}"] = item.start_mark.line + 1
            lines.update(_key_lines(item, f"{prefix}{i}."))
    return lines


def _tilde_keys(node: yaml.Node, prefix: str = "") -> set[str]:
    """The dotted keys of the mappings of a composed YAML document whose value is a plain ``~`` (YAML's null)."""
    keys: set[str] = set()
    if isinstance(node, yaml.MappingNode):
        for key_node, value_node in node.value:
            dotted = f"{prefix}{key_node.value}"
            if (
                isinstance(value_node, yaml.ScalarNode)
                and value_node.tag == "tag:yaml.org,2002:null"
                and value_node.value == "~"
            ):
                keys.add(dotted)
            keys |= _tilde_keys(value_node, dotted + ".")
    return keys


def shown_path(path: Path) -> str:
    """``path`` as messages show it: relative to the working directory where it lies under it
    (``configs/x.yaml``), else absolute."""
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def yaml_error_line(err: yaml.YAMLError) -> str:
    """The YAML parser's error in one line: ``line L, column C: PROBLEM (CONTEXT)`` (the parser's own message
    spans several lines, with a caret drawing)."""
    problem, mark = getattr(err, "problem", None), getattr(err, "problem_mark", None)
    if not problem:
        return " ".join(str(err).split())
    context = getattr(err, "context", None)
    at = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
    return f"{at}{problem}" + (f" ({context})" if context else "")


def _read_file(path: Path, what: str) -> Layer:
    if path.is_dir():
        raise ConfigError(f"{what} {str(path)!r} is a directory; it must be a YAML file")
    if not path.is_file():
        found = "does not exist" if not path.exists() else "is not a regular file (a device, a pipe)"
        raise ConfigError(f"{what} {str(path)!r} {found}; it must be a YAML file")
    try:
        text = read_utf8(path, f"{what} {str(path)!r}")
    except ValueError as err:
        raise ConfigError(str(err)) from None
    loader = _Loader(text)  # one parse: the node gives the keys' lines, the same node the values
    try:
        node = loader.get_single_node()
        if node is not None and not isinstance(node, yaml.MappingNode):
            kind = "list" if isinstance(node, yaml.SequenceNode) else "a single value"
            raise ConfigError(f"{what} {str(path)!r} must hold a mapping of keys, got {kind}")
        data = loader.construct_document(node) if node is not None else {}
    except yaml.YAMLError as err:
        raise ConfigError(f"{what} {str(path)!r} is not valid YAML: {yaml_error_line(err)}") from err
    finally:
        loader.dispose()
    lines = _key_lines(node) if node is not None else {}
    tildes = _tilde_keys(node) if node is not None else set()
    origins = {
        key: f"in {shown_path(path)}:{line}{TILDE_MARK if key in tildes else ''}"
        for key, line in lines.items()
    }
    return Layer(data, origins)


def config_file(path: str | Path, beside: Path | None = None, what: str = "config") -> Path:
    """The file a config argument names (:func:`bandpo_lab._files.resolve_config`): a file of the user's, else the
    built-in recipe its name names. A file of the user's that shadows a built-in recipe of the same name is read,
    with a :class:`ConfigWarning` naming both (``what``: how the message names ``path``). ``~`` and ``$VAR`` are
    expanded as in every other path (an unset variable: ``ConfigError``)."""
    if str(path).startswith("~") or "$" in str(path):
        path = expand_path(path, what, ConfigError)
    chosen, shadowed = resolve_config(path, beside)
    if shadowed is not None:
        warnings.warn(
            f"{what} {str(path)!r} reads the file {shown_path(chosen)}, which shadows the built-in recipe "
            f"{recipe_name(path)!r} ({shadowed}): pass that path for the built-in one",
            ConfigWarning,
            stacklevel=3,
        )
    return chosen


def recipe_note(path: str | Path) -> str:
    """What a config file is, for a dry run: ``the built-in recipe 'tiny' (PATH)`` or ``the file PATH``."""
    if same_or_inside(path, RECIPES):
        name = Path(path).resolve().relative_to(RECIPES.resolve()).with_suffix("").as_posix()
        return f"the built-in recipe {name!r} ({shown_path(Path(path).resolve())})"
    return f"the file {shown_path(Path(path).resolve())}"


def read_layers(
    path: str | Path,
    what: str = "config file",
    base_key: str | None = "base",
    kind: str | None = None,
    _chain: tuple[Path, ...] = (),
) -> list[Layer]:
    """The layers of YAML file ``path`` (:func:`config_file`: a built-in recipe's name reads that recipe): those
    of its ``base_key:`` chain first (``None``: no chain), then its own. A base is a path relative to its file.

    Raises:
        ConfigError: a missing or unreadable file, invalid YAML, a document that is not a mapping, a ``base`` that
            is not a path, a cycle of bases. ``what`` names the file in the messages (``config file``); a missing
            ``path`` lists the built-in recipes of ``kind`` (``train``, ``compare``, ``None``: all) and the
            closest one.
    """
    # the file named on the command line (the loaders resolved it and warned of a shadowed recipe)
    if not _chain:
        typed, path = path, resolve_config(path)[0]
        if not path.exists():
            names = recipe_names(kind=kind)
            raise ConfigError(
                f"{what} {str(path.resolve())!r} does not exist{did_you_mean(recipe_name(typed), names)}; "
                f"built-in recipes: {', '.join(names) or 'none in this install'}"
            )
    path = Path(path).resolve()
    if path in _chain:
        raise ConfigError(f"config {base_key}: cycle: {' -> '.join(str(p) for p in (*_chain, path))}")
    layer = _read_file(path, what)
    layers: list[Layer] = []
    if base_key is not None and base_key in layer.values:
        base = layer.values.pop(base_key)
        at = where(layer.origins, base_key)
        layer.origins = {k: v for k, v in layer.origins.items() if k.split(".")[0] != base_key}
        if not isinstance(base, str):
            raise ConfigError(
                f"{base_key} in {str(path)!r} must be a path to another config file, got {base!r}"
            )
        base_path = config_file(base, path.parent, f"{base_key} ({at})")  # beside its file, or a recipe
        if not base_path.exists():
            names = recipe_names(kind=kind)
            raise ConfigError(
                f"{base_key} {base!r} ({at}) names no config file: {str(base_path)!r} does not exist (a base is "
                f"read beside its file), nor a built-in recipe{did_you_mean(recipe_name(base), names)}; built-in "
                f"recipes: {', '.join(names) or 'none in this install'}"
            )
        layers.extend(read_layers(base_path, what, base_key, kind, (*_chain, path)))
    layers.append(layer)
    return layers


def split_override(text: object, example: str) -> tuple[str, str]:
    """``"key=value"`` -> ``(key, value)``, the key stripped; :class:`ConfigError` naming ``example`` otherwise."""
    if not isinstance(text, str) or "=" not in text:
        raise ConfigError(f"overrides must be key=value ({example}), got {text!r}")
    key, value = text.split("=", 1)
    return key.strip(), value


def override_layer(overrides: Iterable[str] | Mapping[str, Any]) -> Layer:
    """The layer of ``key=value`` overrides (or a mapping of dotted keys): nested values, text kept as text."""
    example = "dotted keys for sections, e.g. model.path=/models/x"  # for a malformed override
    items = (
        list(overrides.items())
        if isinstance(overrides, Mapping)
        else [split_override(text, example) for text in overrides]
    )
    tree: dict[str, Any] = {}
    for key, value in items:
        parts = key.split(".")
        if not key or "" in parts or any(c in key for c in "[]$"):
            raise ConfigError(f"override key must be a name or a dotted path like data.path, got {key!r}")
        node = tree
        for part in parts[:-1]:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise ConfigError(f"override {key!r} conflicts with another override of {part!r}")
        if isinstance(value, Mapping) and isinstance(node.get(parts[-1]), dict):
            merge(node[parts[-1]], {}, Layer(dict(value)))  # a mapping merges into earlier overrides below it
        else:
            node[parts[-1]] = copy.deepcopy(value)
    return Layer(tree, {key: OVERRIDES_LABEL for key, _ in items})


def merge(values: dict[str, Any], origins: dict[str, str], layer: Layer) -> None:
    """Merge ``layer`` into ``values`` in place (dicts key by key, anything else replaced, a
    list by a mapping too), and ``origins`` with it: a replaced key takes the layer's origins, its own and those of
    the keys it had inside go."""

    def walk(dst: dict[str, Any], src: Mapping[str, Any], prefix: str) -> None:
        for key, value in src.items():
            dotted = f"{prefix}{key}"
            if isinstance(value, Mapping) and isinstance(dst.get(key), Mapping):
                walk(dst[key], value, dotted + ".")
                continue
            # a list over a mapping or the reverse too: the field's check names it
            dst[key] = copy.deepcopy(value)
            inside = dotted + "."
            for old in [k for k in origins if k == dotted or k.startswith(inside)]:
                del origins[old]
            origins.update({k: v for k, v in layer.origins.items() if k == dotted or k.startswith(inside)})

    walk(values, layer.values, "")


def located(name: str, at: str | None) -> str:
    """``NAME (AT)`` for an error, ``AT`` being where the key was set (``in FILE:LINE``, ``overrides``, ...), or just
    ``NAME`` where that is not known."""
    return f"{name} ({at})" if at else name


def unknown_key(
    key: str, valid: Iterable[str], what: str = "config", at: str = "", known: str = ""
) -> ConfigError:
    """The error of an unknown key: ``unknown {what} key 'KEY' (AT) (did you mean 'X'?){known}``, with the
    closest of ``valid`` (:func:`bandpo.registry.did_you_mean`); ``at`` is where it was set, ``known`` lists keys."""
    return ConfigError(f"unknown {what} key {located(repr(key), at)}{did_you_mean(key, valid)}{known}")


def where(origins: Mapping[str, str], dotted: str) -> str:
    """Where ``dotted`` was set: its own origin, an enclosing key's, or those of the keys inside it."""
    parts = dotted.split(".")
    for end in range(len(parts), 0, -1):
        found = origins.get(".".join(parts[:end]))
        if found:
            return found
    inside = sorted({v for k, v in origins.items() if k.startswith(dotted + ".")})
    return ", ".join(inside) if inside else "default"
