"""studies/study3/checks.py rebuilds Study 3's per-seed numbers, power and screens from its export and asserts each
against the number docs/study.md writes (a difference exits non-zero)."""

from __future__ import annotations

import subprocess
import sys

from helpers import REPO


def test_checks_rebuild_the_numbers_the_docs_quote() -> None:
    done = subprocess.run(
        [sys.executable, str(REPO / "studies" / "study3" / "checks.py")],
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    assert done.returncode == 0, done.stderr
    # the checks ran (not the line that says there is no export)
    assert "Study 3 mean@8 band-kl - grpo (points): 1.575 (docs: +1.6)" in done.stdout
    assert "+3.75 [-15.4, +22.9] (paired, n = 3; docs: +3.75 [-15.4, +22.9])" in done.stdout
