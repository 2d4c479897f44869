"""The report of ``bandpo compare``: tables, figures, and a plain statement of the outcome.

:func:`build_report` reads only the files of a compare output directory, so it can be rebuilt at any time
(``bandpo compare --config ... --report-only``) and tested on synthetic run directories:

* ``runs/<label>/seed<seed>/run_spec.json``: ``label``, ``method`` (a clip rule or a TRL-native method; older
  specs have ``clip_rule`` only), ``params``, ``seed`` (``method_index``);
* ``.../metrics.jsonl``: the training logs (``bandpo_lab.training.callbacks``: ``step``, ``policy/entropy``,
  ``clip/frac``, ``clip/frac_up``, ``clip/frac_down``, ``clip/frac_up/p0.0-0.2``, ..., ``clip/tail_share``,
  ``tokens/share/<bin>``, ``band/hi_mean``, ``band/lo_mean``, ``reward``);
* ``.../heldout.jsonl`` (optional): held-out accuracy during training (``step``, ``mean@k``, ...);
* ``.../results.json``: the final evaluation (``metrics``: ``mean@k``, ``pass@j``, ``best@k``, ``maj@k``,
  ``entropy``, ...; ``provenance``: the evaluating code's); a run without it is unfinished and left out of the
  tables;
* ``.../run_info.json`` (optional): the training calls' ``provenance`` (``provenance_earlier`` when resumed);
* ``baseline/results.json`` (optional): the starting policy; ``compare_plan.json`` (optional): method order,
  reference method, seeds, and ``calls``: every call that queued runs, with its time and provenance.

Files without provenance (written before bandpo recorded it) make the report's Provenance section say "not
recorded".

What it writes to ``<output_dir>/report/``: ``report.md`` and ``report.html`` (figures inline as base64 PNG),
``results.md`` / ``results.csv`` / ``results.json`` (per method: mean, 95% t-interval half-width, min, max over
seeds), ``runs.csv`` (every run's numbers) and ``figures/*.png``.

A number that was not measured is shown as ``-`` (never 0): the runs of a TRL-native method (``bandpo_lab.training.methods``,
trained by plain ``GRPOTrainer``) log TRL's metrics but none of our ``clip/*`` / ``band/*`` diagnostics, so their clip
columns are ``-``, and they are left out of the clip-by-bin and bounds figures.

The package, data first, then views:

* ``stats``: t quantiles, mean with a 95% interval, the difference of two methods (pure functions);
* ``data``: the run files read once (:func:`load_runs`, :func:`run_summary`) and :class:`ReportData`, every number
  the report shows (with ``series``: the figures' curves and bars; ``outcome``: what the comparison concludes;
  ``provenance``: the code the runs ran);
* ``document``: the report as blocks, rendered by ``markdown`` and ``html``; ``figures``; ``tables`` (CSV, JSON).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from bandpo_lab.experiments.compare.layout import REPORT_DIR
from bandpo_lab.experiments.report.data import ReportData
from bandpo_lab.experiments.report.document import report_blocks
from bandpo_lab.experiments.report.figures import draw_figures
from bandpo_lab.experiments.report.html import render_html
from bandpo_lab.experiments.report.markdown import render_markdown, results_markdown
from bandpo_lab.experiments.report.outcome import BAND_RULES
from bandpo_lab.experiments.report.runs import TAIL_BIN, RunData, load_runs, run_summary
from bandpo_lab.experiments.report.stats import compare_methods, mean_ci, t_quantile
from bandpo_lab.experiments.report.tables import write_tables

__all__ = [
    "BAND_RULES",
    "TAIL_BIN",
    "ReportData",
    "RunData",
    "build_report",
    "compare_methods",
    "load_runs",
    "mean_ci",
    "run_summary",
    "t_quantile",
]


def build_report(
    output_dir: str | Path,
    *,
    reference: str | None = None,
    smooth: int = 1,
    methods: Sequence[str] | None = None,
    seeds: Sequence[int] | None = None,
    method_seeds: Mapping[str, Sequence[int]] | None = None,
    rules: Mapping[str, tuple[str, Mapping[str, Any]]] | None = None,
    report_dir: str | Path | None = None,
    figures: bool = True,
) -> Path:
    """Write the report of the compare directory ``output_dir`` (module docstring); returns the report directory.

    Args:
        reference: the method the others are compared against (default: ``compare_plan.json``'s, else ``grpo`` if
            present, else the first method). A planned reference without runs is named in the report, and the
            others are compared against the first method with runs instead.
        smooth: rolling-mean window (in logged points) of the training curves.
        methods: method labels in display order (default: the plan's, else the run specs' ``method_index``); a
            method here without any run is reported missing on its seeds.
        seeds: the planned seeds (runs of these seeds that are missing are reported as missing).
        method_seeds: ``label -> seeds`` of the methods planned on other seeds than ``seeds`` (default: the
            plan's, for methods that name their own seeds).
        rules: ``label -> (clip_rule, params)`` for the bounds figure (default: from the run specs).
        report_dir: where to write (default ``<output_dir>/report``).
        figures: draw the PNGs (``False``: tables and text only, e.g. for a quick look).

    Raises:
        ValueError: no run directory in ``output_dir``; a ``reference`` that is no method of it.
    """
    data = ReportData.load(
        output_dir,
        reference=reference,
        smooth=smooth,
        methods=methods,
        seeds=seeds,
        method_seeds=method_seeds,
        rules=rules,
    )
    report_dir = Path(report_dir) if report_dir else data.output_dir / REPORT_DIR
    fig_dir = report_dir / "figures"
    fig_dir.mkdir(parents=True, exist_ok=True)
    drawn = draw_figures(data, fig_dir) if figures else []
    write_tables(data, report_dir)
    (report_dir / "results.md").write_text(results_markdown(data))
    blocks = report_blocks(data, drawn)
    (report_dir / "report.md").write_text(render_markdown(blocks))
    (report_dir / "report.html").write_text(render_html(blocks, report_dir, data.title))
    return report_dir
