"""Shared test helpers, importable from every test file as ``helpers.<module>`` (pyproject's pytest
``pythonpath = ["tests"]``).

- :mod:`helpers.tiny`: the tiny tokenizer and model directories, the small warm-start settings and the short-run
  overrides of ``configs/tiny.yaml``.
- :mod:`helpers.launch`: a two-process CPU (gloo) ``accelerate launch``.
- :mod:`helpers.numerics`: ``rel_err``, the error in units of a tolerance.
- :mod:`helpers.skyrl`: whether SkyRL can run here (``needs_skyrl``) and a SkyRL algorithm config (``algorithm``).
"""

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
CONFIGS = REPO / "configs"
