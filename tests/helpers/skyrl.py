"""The SkyRL tests' shared pieces: whether SkyRL can run here, and a SkyRL algorithm config built as SkyRL does."""

from __future__ import annotations

import importlib.util
import sys
from typing import Any

import pytest

import bandpo.integrations.skyrl as bskyrl

HAVE_SKYRL = sys.version_info >= (3, 12) and importlib.util.find_spec("skyrl") is not None
needs_skyrl = pytest.mark.skipif(
    not HAVE_SKYRL,
    reason=(
        f"SkyRL {bskyrl.SKYRL_VERSION} needs Python >= 3.12 and skyrl installed; this is Python "
        f"{sys.version_info.major}.{sys.version_info.minor}: run `make test-skyrl` (builds .venv-skyrl)"
    ),
)


def algorithm(**overrides: Any) -> Any:
    """A BandPOAlgorithmConfig built the way SkyRL builds it: from ``key=value`` overrides (YAML-typed values)."""
    args = [f"trainer.algorithm.{k}={v}" for k, v in overrides.items()]
    return bskyrl.BandPOSkyRLConfig.from_cli_overrides(args).trainer.algorithm
