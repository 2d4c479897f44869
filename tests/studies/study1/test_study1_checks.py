"""studies/study1/checks.py rebuilds, from the committed exports of Studies 1, 2 and 2b, the numbers docs/study.md
quotes that the reports do not print."""

from __future__ import annotations

import subprocess
import sys

from helpers import REPO


def test_checks_rebuild_the_numbers_the_docs_quote() -> None:
    done = subprocess.run(
        [sys.executable, str(REPO / "studies" / "study1" / "checks.py")],
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    assert done.returncode == 0, done.stderr
    study = " ".join((REPO / "docs" / "study.md").read_text().split())
    for printed, quoted in (
        ("study-final ratio of medians: 0.81", "ratio of medians 0.81"),
        ("study-final dppo-kl - band-kl: +1.81 [-1.53, +5.15]", "+1.8 [-1.5, +5.2]"),
        ("study-recipe dppo-kl - band-kl: -3.70 [-6.56, -0.84]", "-3.7 [-6.6, -0.8]"),
        ("study-final band-kl - grpo: +2.18 [-4.49, +8.86]", "+2.2 [-4.5, +8.9]"),
    ):
        assert printed in done.stdout, printed
        assert quoted in study, quoted
