"""scripts/probe_checks.py rebuilds the numbers of ``bandpo probe`` on SmolLM2-135M that docs/smollm2.md and
docs/results.md quote from its committed results.json, and asserts each against the docs (a difference exits
non-zero)."""

from __future__ import annotations

import subprocess
import sys

from helpers import REPO


def test_probe_checks_rebuild_the_numbers_the_docs_quote() -> None:
    done = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "probe_checks.py")], capture_output=True, text=True, cwd=REPO
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("bandpo probe, SmolLM2-135M: 6 batches, 5 with signal")
    assert "-0.040 [-0.142, +0.063] (paired, n = 5; docs: -0.04 [-0.14, +0.06])" in done.stdout
