"""Shared test helpers, importable from every test file as ``helpers.<module>`` (pyproject's pytest
``pythonpath = ["tests"]``).

- :mod:`helpers.tiny`: the tiny tokenizer and model directories, the small warm-start settings and the short-run
  overrides of ``configs/tiny.yaml``.
- :mod:`helpers.launch`: a two-process CPU (gloo) ``accelerate launch``.
- :mod:`helpers.numerics`: ``rel_err``, the error in units of a tolerance.
- :mod:`helpers.skyrl`: whether SkyRL can run here (``needs_skyrl``) and a SkyRL algorithm config (``algorithm``).
- :mod:`helpers.naive_diagnostics`: the naive references of the loss's diagnostics (library and torch only).
- :mod:`helpers.cli`: ``bandpo`` run in the test's process (``run_bandpo``, ``exit_status``).
- :func:`load_script`: a script of ``scripts/`` or ``benchmarks/`` as a module.
"""

import importlib.util
from pathlib import Path
from types import ModuleType

REPO = Path(__file__).resolve().parents[2]
CONFIGS = REPO / "configs"


def load_script(relpath: str) -> ModuleType:
    """A script as a module (scripts/ and benchmarks/ are not packages); its ``main`` does not run."""
    path = REPO / relpath
    spec = importlib.util.spec_from_file_location(f"_script_{path.stem}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
