"""The name -> object registry: lookups, aliases, suggestions, duplicates and temporary registrations."""

from __future__ import annotations

import pytest

from bandpo.registry import Registry, did_you_mean


def _registry() -> Registry[int]:
    reg: Registry[int] = Registry("widget")
    reg.register("alpha", 1, aliases=("a",))
    reg.register("beta", 2)
    return reg


def test_lookup_by_name_and_alias() -> None:
    reg = _registry()
    assert reg.get("alpha") == reg.get("a") == 1
    assert reg.canonical("a") == "alpha"
    assert reg.names() == ["alpha", "beta"] and list(reg) == ["alpha", "beta"] and len(reg) == 2
    assert "a" in reg and "gamma" not in reg and 3 not in reg


def test_unknown_name_lists_valid_names_and_suggests() -> None:
    with pytest.raises(
        ValueError, match=r"^unknown widget 'alpah' \(did you mean 'alpha'\?\); valid names: alpha, beta$"
    ):
        _registry().get("alpah")


def test_a_name_in_another_case_gets_the_suggestion() -> None:
    """``KL`` for ``kl``: difflib alone finds no likeness between the two (their characters differ), so the
    comparison ignores case; the suggestion is the registered spelling."""
    reg = _registry()
    reg.register("kl", 3)
    reg.register("reverse_kl", 4)
    for wrong, right in (("KL", "kl"), ("Alpha", "alpha"), ("BETTA", "beta"), ("A", "a")):
        with pytest.raises(
            ValueError, match=rf"^unknown widget '{wrong}' \(did you mean '{right}'\?\); valid"
        ):
            reg.get(wrong)
    assert did_you_mean("Revers_KL", reg.names()) == " (did you mean 'reverse_kl'?)"
    assert did_you_mean("zzz", reg.names()) == ""


def test_duplicate_name_or_alias_is_an_error() -> None:
    reg = _registry()
    with pytest.raises(ValueError, match=r"widget 'a' is already registered"):
        reg.register("gamma", 3, aliases=("a",))
    assert "gamma" not in reg


def test_unregister_removes_the_name_and_its_aliases() -> None:
    reg = _registry()
    assert reg.unregister("alpha") == 1
    assert reg.names() == ["beta"] and "a" not in reg
    reg.register("alpha", 10, aliases=("a",))  # the names are free again
    assert reg.get("a") == 10
    for bad in ("a", "gamma"):
        with pytest.raises(ValueError, match=rf"widget '{bad}' is not registered"):
            reg.unregister(bad)
