"""Fixtures of the experiments tests: one synthetic comparison directory and its report, built once per module."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from synthetic_runs import BAND_KL, BAND_TV, GRPO, make_run

from bandpo_lab.experiments.report import (
    build_report,
)


@pytest.fixture(scope="module")
def compare_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("compare") / "cmp"
    for seed in (0, 1, 2):
        make_run(root, "grpo", "grpo", {"eps_low": 0.2, "eps_high": 0.2}, seed, 0, GRPO[seed], 0.01 * seed)
        make_run(
            root,
            "band-kl",
            "band",
            {"divergence": "kl", "delta": 0.05},
            seed,
            1,
            BAND_KL[seed],
            0.02 + 0.01 * seed,
        )
        make_run(
            root, "band-tv", "band", {"divergence": "tv", "delta": 0.05}, seed, 2, BAND_TV[seed], 0.03 * seed
        )
    baseline = {
        "label": "baseline",
        "metrics": {"mean@8": 0.09, "pass@1": 0.09, "pass@8": 0.4, "entropy": 0.64},
    }
    (root / "baseline").mkdir()
    (root / "baseline" / "results.json").write_text(json.dumps(baseline))
    return root


@pytest.fixture(scope="module")
def report(compare_dir: Path) -> Path:
    """The report of ``compare_dir``, built once for the module (figures take seconds on a busy machine)."""
    return build_report(compare_dir, reference="grpo", smooth=2)
