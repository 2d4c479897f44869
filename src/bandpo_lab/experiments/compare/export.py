"""Compact results of a comparison (no weights), from which its report rebuilds."""

from __future__ import annotations

from pathlib import Path

from bandpo_lab.experiments.compare.config import CompareError
from bandpo_lab.experiments.compare.layout import (
    BASELINE_DIR,
    COMPARE_CONFIG_FILE,
    LOG_FILE,
    PLAN_FILE,
    REPORT_DIR,
    RESULTS_FILE,
    RUN_DIR_FILES,
    RUN_SPEC_FILE,
    written_by_compare,
)


def export_results(output_dir: str | Path, dest: str | Path) -> list[Path]:
    """Copy the compact results of a comparison into ``dest``, in the layout of ``output_dir``: the plan, the
    baseline, every started run's spec, configs, evaluations and training log (gzipped, byte-for-byte
    reproducible), and the report but its ``report.html``; no models. A report rebuilt from ``dest`` equals one
    built from ``output_dir``. Exporting again updates ``dest``: a run's files there that the run no longer has go
    (a run being redone); a run gone from ``output_dir`` is left as it is. Returns the files written.

    Raises:
        CompareError: ``output_dir`` holds no runs, ``dest`` is inside it or the same directory, or ``dest`` is
            neither new, empty nor an earlier export (:func:`_destination_problem`).
    """
    import gzip
    import shutil

    from bandpo_lab.training.layout import CONFIG_FILE, METRICS_FILE, RUN_INFO_FILE

    # what is copied of a run directory (its metrics.jsonl is gzipped below; no weights, no checkpoints): the
    # comparison's files but train.log, the training config and the run info
    run_files = (*(name for name in RUN_DIR_FILES if name != LOG_FILE), CONFIG_FILE, RUN_INFO_FILE)
    src, out = Path(output_dir).resolve(), Path(dest).resolve()
    if out == src or src in out.parents:
        raise CompareError(
            f"export destination {str(dest)!r} must be outside the output_dir {str(output_dir)!r}"
        )
    problem = _destination_problem(out, dest)
    if problem is not None:
        raise CompareError(problem)
    run_dirs = sorted(p.parent for p in src.glob(f"runs/*/seed*/{RUN_SPEC_FILE}"))
    if not run_dirs:
        raise CompareError(
            f"nothing to export: no runs in {str(output_dir)!r} (runs/<label>/seed<n>/{RUN_SPEC_FILE})"
        )
    written: list[Path] = []

    def copy(path: Path) -> None:
        target = out / path.relative_to(src)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, target)
        written.append(target)

    for path in (src / PLAN_FILE, src / BASELINE_DIR / RESULTS_FILE):
        if path.is_file():
            copy(path)
    for run_dir in run_dirs:
        metrics = run_dir / METRICS_FILE
        packed = metrics.with_name(metrics.name + ".gz")  # read_jsonl's fallback
        # an earlier export's files that the run no longer has (a run being redone: its old results) go
        has = {name for name in run_files if (run_dir / name).is_file()}
        has |= {packed.name} if metrics.is_file() or packed.is_file() else set()
        for name in (*run_files, packed.name):
            stale = out / run_dir.relative_to(src) / name
            if name not in has and stale.is_file():
                stale.unlink()
        for name in run_files:
            if name in has:
                copy(run_dir / name)
        if metrics.is_file():
            target = out / packed.relative_to(src)
            target.write_bytes(gzip.compress(metrics.read_bytes(), compresslevel=9, mtime=0))
            written.append(target)
        elif packed.is_file():  # a run restored from an export: its log is already packed
            copy(packed)
    report = src / REPORT_DIR
    if report.is_dir():  # report.html is left out: it embeds the figures a second time (rebuild it from here)
        for path in sorted(p for p in report.rglob("*") if p.is_file() and p.suffix != ".html"):
            copy(path)
    return written


def _destination_problem(out: Path, dest: str | Path) -> str | None:
    """Why the export may not write into the folder ``out`` (``dest`` as typed), or ``None``: it must be new, empty
    or an earlier export (:func:`~bandpo_lab.experiments.compare.layout.written_by_compare`), whose files exporting
    again replaces; not a folder of the user's files (``report/report.md``) nor a comparison's output_dir, whose
    runs hold trained models (or, not yet trained or failed, its ``compare_config.yaml`` and their ``train.log``)."""
    from bandpo_lab.training.layout import MODEL_CONFIG_FILE

    if not out.is_dir() or not any(p.is_file() for p in out.rglob("*")):  # new, or no file in it
        return None
    if any(out.glob(f"runs/*/seed*/{MODEL_CONFIG_FILE}")) or any(out.glob("runs/*/seed*/checkpoint-*")):
        return (
            f"export destination {str(dest)!r} is a comparison's output_dir (its runs hold trained models), not "
            "an export: exporting there would replace its runs' files; choose a new or empty folder"
        )
    if (out / COMPARE_CONFIG_FILE).is_file() or any(out.glob(f"runs/*/seed*/{LOG_FILE}")):
        return (
            f"export destination {str(dest)!r} is a comparison's output_dir (its {COMPARE_CONFIG_FILE} or a run's "
            f"{LOG_FILE}, which an export never holds), not an export: exporting there would replace its plan and "
            "its runs' files; choose a new or empty folder"
        )
    if written_by_compare(out):
        return None
    names = sorted(p.name + ("/" if p.is_dir() else "") for p in out.iterdir())
    shown = ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")
    return (
        f"export destination {str(dest)!r} holds files that are not an earlier export ({shown}): exporting "
        "replaces files of the same names there; choose a new or empty folder"
    )
