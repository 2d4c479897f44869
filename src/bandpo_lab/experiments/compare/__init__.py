"""Compare clip rules: train the same task with several methods over several seeds, evaluate, report.

The engine behind ``bandpo compare --config configs/compare-tiny.yaml`` (the config, the output directory and the
report: docs/trl.md, "The compare config and the output directory"; the modules: docs/architecture.md).
"""

from bandpo_lab.experiments.compare.config import (
    DEFAULT_METHODS,
    CompareError,
    MethodSpec,
    load_compare_config,
)
from bandpo_lab.experiments.compare.driver import run_compare
from bandpo_lab.experiments.compare.export import export_results
from bandpo_lab.experiments.compare.layout import RESULTS_FILE
from bandpo_lab.experiments.compare.plan import check_eval_data, plan_runs, validate_with_trainer

__all__ = [
    "DEFAULT_METHODS",
    "RESULTS_FILE",
    "CompareError",
    "MethodSpec",
    "check_eval_data",
    "export_results",
    "load_compare_config",
    "plan_runs",
    "run_compare",
    "validate_with_trainer",
]
