"""The report's machine-readable files: ``runs.csv`` (every finished run), ``results.csv`` and ``results.json``
(per method: mean, 95% half-width, min, max over seeds; the comparisons; the missing runs)."""

from __future__ import annotations

import csv
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bandpo_lab.experiments.report.data import ReportData


def _write_csv(path: Path, header: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    """Floats as ``repr`` (every digit), ``None`` as an empty cell."""
    with path.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(header)
        writer.writerows(
            ["" if v is None else (repr(v) if isinstance(v, float) else v) for v in row] for row in rows
        )


def write_tables(data: ReportData, report_dir: Path) -> None:
    """Write ``runs.csv``, ``results.csv`` and ``results.json`` of ``data`` into ``report_dir``."""
    keys = data.run_keys
    _write_csv(
        report_dir / "runs.csv",
        ["method", "clip_rule", "seed", *keys],
        [
            [r.label, r.clip_rule, r.seed, *[data.summaries[(r.label, r.seed)].get(key) for key in keys]]
            for r in data.finished
        ],
    )
    header = ["method", "clip_rule", "n_seeds"]
    for key in keys:
        header += [key, f"{key}_ci95", f"{key}_min", f"{key}_max"]
    rows = []
    for label in data.labels:
        row: list[Any] = [label, data.rule_of[label][0], len(data.done_groups[label])]
        for key in keys:
            s = data.per_method[label].get(key) or {}
            row += [s.get("mean"), s.get("ci95"), s.get("min"), s.get("max")]
        rows.append(row)
    _write_csv(report_dir / "results.csv", header, rows)
    results = {
        "k": data.k,
        "ks": data.ks,
        "reference": data.reference,
        "main_metric": data.main_key,
        "methods": {
            label: {
                "clip_rule": data.rule_of[label][0],
                "params": data.rule_of[label][1],
                "seeds": [r.seed for r in data.done_groups[label]],
                "metrics": data.per_method[label],
            }
            for label in data.labels
        },
        "baseline": data.baseline,
        "comparisons": data.comparisons,
        "runs": [
            {"method": r.label, "seed": r.seed, **data.summaries[(r.label, r.seed)]} for r in data.finished
        ],
        "missing": data.missing,
    }
    (report_dir / "results.json").write_text(json.dumps(results, indent=2, default=str) + "\n")
