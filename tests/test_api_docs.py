"""docs/api.md lists the library's public API: each name of the ``__all__`` of ``bandpo``, ``bandpo.core``,
``bandpo.losses`` and the three framework adapters has one row in the section of that module, and no row names
something the module does not export. Torch only: the adapters' ``__all__`` is read from their source, so neither
TRL, verl nor SkyRL is imported."""

from __future__ import annotations

import ast
import importlib
import importlib.util
import re
from pathlib import Path

import pytest

from helpers import REPO

API = REPO / "docs" / "api.md"
PACKAGES = ("bandpo", "bandpo.core", "bandpo.losses")
ADAPTERS = ("bandpo.integrations.trl", "bandpo.integrations.verl", "bandpo.integrations.skyrl")
ROW = re.compile(r"^\| `([^`]+)` \|", re.MULTILINE)  # a table row's first cell: | `name` |


def _exported(module: str) -> list[str]:
    """``module.__all__``: imported for the packages, the literal list in the source for the adapters."""
    if module in PACKAGES:
        return list(importlib.import_module(module).__all__)
    spec = importlib.util.find_spec(module)
    assert spec is not None and spec.origin is not None, module
    for node in ast.parse(Path(spec.origin).read_text()).body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "__all__" for t in node.targets):
            return list(ast.literal_eval(node.value))
    raise AssertionError(f"{module} has no literal __all__")


def _rows() -> dict[str, list[str]]:
    """The names in the first column of each ``## `module` `` section's table (``## `import bandpo` ``: bandpo)."""
    sections = {}
    for part in API.read_text().split("\n## ")[1:]:
        heading, _, body = part.partition("\n")
        sections[heading.strip().strip("`").removeprefix("import ")] = ROW.findall(body)
    return sections


def test_api_page_has_one_section_per_module() -> None:
    assert sorted(_rows()) == sorted(PACKAGES + ADAPTERS)


@pytest.mark.parametrize("module", PACKAGES + ADAPTERS)
def test_every_public_name_has_one_row(module: str) -> None:
    rows, exported = _rows()[module], _exported(module)
    missing = [name for name in exported if name not in rows]
    assert not missing, f"docs/api.md, section {module}: no row for {missing}"
    unknown = [name for name in rows if name not in exported]
    assert not unknown, f"docs/api.md, section {module}: {unknown} not in {module}.__all__"
    assert len(rows) == len(set(rows)), f"docs/api.md, section {module}: a name has two rows"
