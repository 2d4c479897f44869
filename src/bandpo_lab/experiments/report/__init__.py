"""The report of ``bandpo compare``: tables, figures, and a plain statement of the outcome.

:func:`build_report` reads only the files of a compare output directory (docs/trl.md, "The compare config and the
output directory"), so it can be rebuilt at any time; its modules, data first, then views: docs/architecture.md.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bandpo_lab.experiments.compare.layout import REPORT_DIR
from bandpo_lab.experiments.report.data import ReportData
from bandpo_lab.experiments.report.document import report_markdown, results_markdown
from bandpo_lab.experiments.report.figures import draw_figures
from bandpo_lab.experiments.report.html import render_html
from bandpo_lab.experiments.report.runs import load_runs, run_summary
from bandpo_lab.experiments.report.stats import compare_methods, mean_ci, t_quantile
from bandpo_lab.experiments.report.tables import write_tables

__all__ = [
    "ReportData",
    "build_report",
    "compare_methods",
    "load_runs",
    "mean_ci",
    "run_summary",
    "t_quantile",
]


def build_report(output_dir: str | Path, *, figures: bool = True, **options: Any) -> Path:
    """Write the report of the compare directory ``output_dir`` into ``<output_dir>/report`` and return that.

    ``options`` are :meth:`ReportData.load`'s (the reference method, the curves' smoothing, the planned methods and
    seeds); ``figures``: draw the PNGs (``False``: tables and text only, e.g. for a quick look).

    Raises:
        ValueError: no run directory in ``output_dir``; a ``reference`` that is no method of it.
    """
    data = ReportData.load(output_dir, **options)
    report_dir = data.output_dir / REPORT_DIR
    fig_dir = report_dir / "figures"
    fig_dir.mkdir(parents=True, exist_ok=True)
    drawn = draw_figures(data, fig_dir) if figures else []
    write_tables(data, report_dir)
    (report_dir / "results.md").write_text(results_markdown(data))
    markdown = report_markdown(data, drawn)
    (report_dir / "report.md").write_text(markdown)
    (report_dir / "report.html").write_text(render_html(markdown, report_dir, data.title))
    return report_dir
