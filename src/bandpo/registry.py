"""A small name -> object registry: the single source of truth for each family of names.

Config validation, CLI choices and docs all read ``Registry.names()``, so a list of valid names is never
written twice. Lookups of unknown names fail with the valid names in the message; registering a name twice
is an error. Where a family is dispatched on, the registered object is the implementation itself (an
aggregation mode's reduction, a KL estimator), so one entry is all a new name needs.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Iterable, Iterator
from typing import Generic, TypeVar

T = TypeVar("T")


def closest(name: object, candidates: Iterable[str]) -> str | None:
    """The candidate most like ``str(name)``, or ``None``: compared ignoring case (``KL`` -> ``kl``), the one equal
    but for case, else the closest by ``difflib`` (similarity >= 0.6)."""
    folded: dict[str, str] = {}
    for candidate in candidates:
        folded.setdefault(candidate.lower(), candidate)
    close = difflib.get_close_matches(str(name).lower(), list(folded), n=1)
    return folded[close[0]] if close else None


def did_you_mean(name: object, candidates: Iterable[str]) -> str:
    """`` (did you mean 'x'?)`` for the closest candidate to ``name``, or ``""``: the one suggestion of every
    "unknown name" message in the package."""
    match = closest(name, candidates)
    return f" (did you mean {match!r}?)" if match is not None else ""


class Registry(Generic[T]):
    """Maps names (and optional aliases) to objects of one family, e.g. divergences or clip rules."""

    def __init__(self, family: str) -> None:
        self.family = family
        self._items: dict[str, T] = {}
        self._aliases: dict[str, str] = {}

    def register(self, name: str, obj: T, aliases: tuple[str, ...] = ()) -> T:
        """Register ``obj`` under ``name`` (and ``aliases``); a name already taken raises ``ValueError``."""
        for key in (name, *aliases):
            if not isinstance(key, str) or not key:
                raise ValueError(f"{self.family} names must be non-empty strings, got {key!r}")
            if key in self._items or key in self._aliases:
                raise ValueError(f"{self.family} {key!r} is already registered")
        self._items[name] = obj
        for alias in aliases:
            self._aliases[alias] = name
        return obj

    def decorator(self, name: str, aliases: tuple[str, ...] = ()) -> Callable[[T], T]:
        """``@registry.decorator("name")`` form of :meth:`register`."""

        def wrap(obj: T) -> T:
            return self.register(name, obj, aliases)

        return wrap

    def unregister(self, name: str) -> T:
        """Remove ``name`` (a registered name, not an alias) and its aliases; returns its object.

        For temporary registrations (e.g. a test's own entry); unknown names raise ``ValueError``.
        """
        if not isinstance(name, str) or name not in self._items:
            raise ValueError(f"{self.family} {name!r} is not registered (aliases cannot be unregistered)")
        for alias in [a for a, target in self._aliases.items() if target == name]:
            del self._aliases[alias]
        return self._items.pop(name)

    def canonical(self, name: str) -> str:
        """The registered name for ``name`` or one of its aliases; unknown names raise ``ValueError``."""
        if isinstance(name, str):
            if name in self._items:
                return name
            if name in self._aliases:
                return self._aliases[name]
        valid = ", ".join(self.names())
        hint = did_you_mean(name, [*self._items, *self._aliases]) if isinstance(name, str) else ""
        raise ValueError(f"unknown {self.family} {name!r}{hint}; valid names: {valid}")

    def get(self, name: str) -> T:
        return self._items[self.canonical(name)]

    def names(self) -> list[str]:
        """Registered names (aliases excluded), in registration order."""
        return list(self._items)

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and (name in self._items or name in self._aliases)

    def __iter__(self) -> Iterator[str]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)
