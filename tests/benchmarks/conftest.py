"""benchmarks/ on ``sys.path``, as when a script there runs (``python benchmarks/bench.py``): its modules import each
other by name (``bench_timing``, ``bench_loss``, ...)."""

import sys

from helpers import REPO

BENCHMARKS = REPO / "benchmarks"
if str(BENCHMARKS) not in sys.path:
    sys.path.insert(0, str(BENCHMARKS))
