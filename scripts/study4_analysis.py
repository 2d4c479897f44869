"""Study 4's registered analysis lives in ``studies/study4/analysis.py``; this name stays for Study 5's registered
analysis alone: ``studies/study5/analysis.py`` imports ``study4_analysis`` from ``scripts/``, as committed with its
registration, and is never edited (its registered command runs from main after the 72nd run), so this file
stays as long as that analysis can be rerun; tests/studies/study5 imports analysis.py through it.

Importing ``study4_analysis`` gives the module of ``studies/study4/analysis.py`` itself (one copy of the code)."""

import importlib.util
import sys
from pathlib import Path

_PATH = Path(__file__).resolve().parents[1] / "studies" / "study4" / "analysis.py"
_spec = importlib.util.spec_from_file_location("study4_analysis", _PATH)
assert _spec is not None and _spec.loader is not None
_module = importlib.util.module_from_spec(_spec)
sys.modules["study4_analysis"] = _module
_spec.loader.exec_module(_module)
