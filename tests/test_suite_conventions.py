"""The suite's own conventions (issue 14, "tests that help").

- A test that compares code with itself (an adapter against the function it calls, a wrapper against what it wraps)
  is labelled with a docstring line ``Wiring test: ...`` that names, as ``tests/<file>.py::<test>``, where the
  numerics are checked against an independent reference; that reference exists and is not a wiring test itself.
- Every ``tests/<file>.py::<test>`` cited in the tests, docs/ or the README names a test that exists (tests move
  between files; a citation must move with them).
- One torch thread per test process (``tests/conftest.py``), and ``make test``, ``make test-fast``, ``.ci/run`` and
  the README run the suite with the same command (two pytest-xdist workers).
"""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from pathlib import Path

from helpers import REPO

CITATION = re.compile(r"\btests/[\w/]+\.py::\w+")
WIRING = "Wiring test:"


def _test_files() -> list[Path]:
    return sorted((REPO / "tests").rglob("test_*.py"))


def _functions(path: Path) -> dict[str, str]:
    """Every function defined in ``path`` (any nesting), with its docstring ('' if none)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    return {
        node.name: ast.get_docstring(node) or ""
        for node in ast.walk(tree)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
    }


def _resolve(citation: str) -> str | None:
    """The docstring of the test ``citation`` names, or None if there is no such test."""
    file, name = citation.split("::")
    path = REPO / file
    if not path.is_file():
        return None
    return _functions(path).get(name)


def test_wiring_tests_name_an_existing_independent_reference() -> None:
    problems = []
    n_wiring = 0
    for path in _test_files():
        for name, doc in _functions(path).items():
            if not any(line.strip().startswith(WIRING) for line in doc.splitlines()):
                continue
            n_wiring += 1
            where = f"{path.relative_to(REPO)}::{name}"
            cited = CITATION.findall(" ".join(doc.split()))
            if not cited:
                problems.append(f"{where}: a wiring test names no tests/<file>.py::<test> reference")
            for citation in cited:
                ref = _resolve(citation)
                if ref is None:
                    problems.append(f"{where}: cites {citation}, which does not exist")
                elif WIRING in ref:
                    problems.append(f"{where}: cites {citation}, itself a wiring test, as its reference")
    assert not problems, "\n".join(problems)
    assert n_wiring > 0, f"no test docstring has a line starting {WIRING!r}: the scan found nothing to check"


def test_citations_of_tests_name_existing_tests() -> None:
    sources = [
        *_test_files(),
        *(REPO / "docs").rglob("*.md"),
        REPO / "README.md",
        *(REPO / "src").rglob("*.py"),
    ]
    missing = [
        f"{source.relative_to(REPO)}: {citation}"
        for source in sources
        if source.is_file()
        for citation in sorted(set(CITATION.findall(" ".join(source.read_text().split()))))
        if _resolve(citation) is None
    ]
    assert not missing, "cited tests that do not exist:\n" + "\n".join(missing)


def test_one_torch_thread_per_test_process_and_its_subprocesses() -> None:
    """conftest.py: this worker computes on one thread, and a subprocess a test starts inherits the setting."""
    import torch

    assert os.environ["OMP_NUM_THREADS"] == os.environ["MKL_NUM_THREADS"] == "1"
    assert torch.get_num_threads() == 1
    code = "import torch; print(torch.get_num_threads())"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "1"


def test_make_ci_and_readme_run_the_suite_with_one_command() -> None:
    """The Makefile's test command (two xdist workers), used by ``make test`` and ``make test-fast``; ``.ci/run``
    runs ``make test``; the README shows that command."""
    makefile = (REPO / "Makefile").read_text()
    command = re.search(r"^PYTEST := (.+)$", makefile, re.MULTILINE)
    assert command is not None and "-n 2" in command.group(1)
    assert re.search(r"^test: setup\n\t\$\(PYTEST\)\n", makefile, re.MULTILINE)
    assert re.search(r'^test-fast: setup\n\t\$\(PYTEST\) -m "not slow"\n', makefile, re.MULTILINE)
    assert re.search(r"^make test$", (REPO / ".ci" / "run").read_text(), re.MULTILINE)
    shown = command.group(1).replace("$(BIN)", ".venv/bin")
    assert f"`{shown}`" in (REPO / "README.md").read_text()
