"""The two packages' layers, read from the source: the library (``bandpo``) never imports the lab (``bandpo_lab``),
nothing imports upward inside either, and no modules import each other in a cycle.

The library, lowest first (a module may import its own layer and the ones below, never above)::

    0  registry, _optional, validation                utilities every layer may use
    1  core                                           pure tensor math
    2  losses, bandpo (the package's public API)      the objective, rules, metrics
    3  integrations                                   TRL / verl / SkyRL adapters

The lab, lowest first; it may import any module of the library, which is below all of its layers::

    0  _files, provenance, config, runtime,           utilities every layer may use
       bf16_backward, decode, bandpo_lab
    3  plots                                          bound plots
    4  tasks, rewards, models                         the built-in tasks, answer checking, built-in models
    5  training                                       one training run
    6  eval                                           metrics, sampling, evaluation of a model
    7  experiments                                    comparisons, reports
    8  cli                                            the command line

Function-level (lazy) imports count: a lazy upward import is still an upward dependency, and a lazy import of the
lab from the library still makes the library need the lab.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"
LIBRARY, LAB = "bandpo", "bandpo_lab"
PACKAGES = (LIBRARY, LAB)
LAYERS: dict[str, dict[str, int]] = {
    LIBRARY: {
        "registry": 0,
        "_optional": 0,
        "validation": 0,
        "core": 1,
        "losses": 2,
        "": 2,  # bandpo/__init__.py: re-exports core and losses
        "integrations": 3,
    },
    LAB: {
        "": 0,  # bandpo_lab/__init__.py: its docstring
        "_files": 0,
        "provenance": 0,
        "config": 0,
        "runtime": 0,
        "bf16_backward": 0,
        "decode": 0,
        "plots": 3,
        "tasks": 4,
        "rewards": 4,
        "models": 4,
        "training": 5,
        "eval": 6,
        "experiments": 7,
        "cli": 8,
    },
}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports_of(path: Path, name: str) -> set[str]:
    """Every ``bandpo`` or ``bandpo_lab`` module ``path`` imports, at module level or inside functions (relative
    imports resolved)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names if a.name.split(".")[0] in PACKAGES)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                target = ".".join([*base, node.module] if node.module else base)
            else:
                target = node.module or ""
            if target.split(".")[0] not in PACKAGES:
                continue
            out.add(target)
            # `from bandpo.x import y` may import the submodule bandpo.x.y
            out.update(f"{target}.{a.name}" for a in node.names)
    return out


def import_graph() -> dict[str, set[str]]:
    modules = {module_name(p): p for package in PACKAGES for p in SRC.joinpath(package).rglob("*.py")}
    return {
        name: {m for m in imports_of(path, name) if m in modules and m != name}
        for name, path in modules.items()
    }


def layer(module: str) -> int:
    parts = module.split(".")
    top = parts[1] if len(parts) > 1 else ""
    if top not in LAYERS[parts[0]]:
        raise AssertionError(
            f"{module}: its package {top!r} has no layer: add it to LAYERS[{parts[0]!r}] in {__file__}"
        )
    return LAYERS[parts[0]][top]


def test_every_package_has_a_layer() -> None:
    for module in import_graph():
        layer(module)


def test_the_library_never_imports_the_lab() -> None:
    found = [
        f"{module} imports {target}"
        for module, targets in sorted(import_graph().items())
        if module.split(".")[0] == LIBRARY
        for target in sorted(targets)
        if target.split(".")[0] == LAB
    ]
    assert not found, "the library imports the lab:\n" + "\n".join(found)


def test_the_library_does_not_name_the_lab() -> None:
    """Not through a string either (``importlib.import_module("bandpo_lab...")``, an entry point, a subprocess's
    ``-m``), which the import graph does not see: no file of ``src/bandpo`` holds the lab's name."""
    named = [
        str(p.relative_to(SRC))
        for p in sorted(SRC.joinpath(LIBRARY).rglob("*"))
        if p.is_file() and p.suffix in (".py", ".txt", ".json", ".toml") and LAB in p.read_text()
    ]
    assert not named, f"{LAB!r} appears in the library's " + ", ".join(named)


def test_nothing_imports_upward() -> None:
    """Inside each package, by layer; the lab's imports of the library are all downward."""
    upward = [
        f"{module} (layer {layer(module)}) imports {target} (layer {layer(target)})"
        for module, targets in sorted(import_graph().items())
        for target in sorted(targets)
        if module.split(".")[0] == target.split(".")[0] and layer(target) > layer(module)
    ]
    assert not upward, "upward imports:\n" + "\n".join(upward)


def strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's algorithm: the components with more than one module (the import cycles)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def _package_edges(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """Edges between modules, without a package's ``__init__`` re-exporting its own submodules (not a cycle of
    dependencies: the submodules do not need the package's namespace)."""
    return {
        m: {t for t in targets if not (t.startswith(m + ".") and (SRC / Path(*m.split("."))).is_dir())}
        for m, targets in graph.items()
    }


def test_no_import_cycles() -> None:
    cycles = strongly_connected(_package_edges(import_graph()))
    assert not cycles, "import cycles:\n" + "\n".join(" <-> ".join(c) for c in cycles)


@pytest.mark.parametrize(
    ("graph", "expected"),
    [
        ({"a": {"b"}, "b": {"a"}}, [["a", "b"]]),
        ({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}, [["a", "b", "c"]]),
        ({"a": {"b"}, "b": set()}, []),
    ],
)
def test_the_cycle_finder_finds_cycles(graph: dict[str, set[str]], expected: list[list[str]]) -> None:
    assert strongly_connected(graph) == expected


def test_the_layer_check_sees_function_level_imports(tmp_path: Path) -> None:
    path = tmp_path / "m.py"
    path.write_text("def f():\n    from bandpo_lab.cli import main\n    from .sibling import x\n")
    assert imports_of(path, "bandpo.core.m") == {
        "bandpo_lab.cli",
        "bandpo_lab.cli.main",
        "bandpo.core.sibling",
        "bandpo.core.sibling.x",
    }
