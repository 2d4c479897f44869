"""The numbers of a report, computed once from the files of a compare output directory (:class:`ReportData`): the
views (figures, Markdown, HTML, CSV) format and draw, they compute nothing."""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bandpo_lab._files import read_json_object
from bandpo_lab.experiments.compare.layout import BASELINE_DIR, PLAN_FILE, RESULTS_FILE, RUN_SPEC_FILE
from bandpo_lab.experiments.report.outcome import Outcome, outcome_of
from bandpo_lab.experiments.report.provenance import CodeProvenance, collect_provenance
from bandpo_lab.experiments.report.runs import LATE, RunData, load_runs, run_summary
from bandpo_lab.experiments.report.series import BinBars, Curve, clip_bin_bars, curve
from bandpo_lab.experiments.report.stats import compare_methods, mean_ci


# --------------------------------------------------------------------------------------------------- report
@dataclass(frozen=True)
class Column:
    """A column of the results tables: the summary ``key``, its ``title``, shown in % or not, with ``digits``."""

    key: str
    title: str
    percent: bool
    digits: int


def _columns(k: int, ks: Sequence[int], late: bool) -> list[Column]:
    cols = [Column(f"{LATE}mean@{k}", f"late mean@{k} %", True, 1)] if late else []
    cols += [Column(f"mean@{k}", f"mean@{k} %", True, 1)]
    cols += [Column(f"pass@{j}", f"pass@{j} %", True, 1) for j in ks]
    cols += [
        Column(f"best@{k}", f"best@{k} %", True, 1),
        Column(f"maj@{k}", f"maj@{k} %", True, 1),
        Column("entropy", "entropy (eval, nats)", False, 3),
        Column("train/entropy_last", "entropy (train, last)", False, 3),
        Column("train/clip_frac", "clip %", True, 2),
        Column("train/clip_frac_up", "clip up %", True, 2),
        Column("train/clip_frac_down", "clip down %", True, 2),
        Column("train/tail_share", "tail share %", True, 1),
    ]
    return cols


@dataclass(frozen=True)
class ReportData:
    """Everything a report shows, built once by :meth:`load` (treat it as read-only).

    Methods are ``labels`` in display order; ``summaries[(label, seed)]`` is :func:`run_summary` of every run
    (finished or not); ``per_method[label][key]`` is :func:`~bandpo_lab.experiments.report.stats.mean_ci` over the
    finished seeds; ``comparisons`` are :func:`~bandpo_lab.experiments.report.stats.compare_methods` of each method
    against ``reference`` on ``main_key``, ``pass@max(ks)`` and ``entropy``, each with ``method``, ``reference``,
    ``metric`` and ``percent``. Fractions stay fractions (the views show them in %)."""

    output_dir: Path
    source: str | None  # the config the comparison was made with (compare_plan.json)
    runs: list[RunData]
    finished: list[RunData]  # the runs with a results.json
    labels: list[str]  # the methods with runs, in display order
    seeds: list[int]  # the planned seeds
    planned: dict[str, list[int]]  # label -> its planned seeds, of every method planned or with runs
    reference: str
    reference_missing: str | None  # the planned reference when it has no runs (the others are then compared
    # against ``reference``, the first method with runs)
    rule_of: dict[str, tuple[str, dict[str, Any]]]  # label -> (clip rule or method, params)
    smooth: int
    groups: dict[str, list[RunData]]  # label -> every run
    done_groups: dict[str, list[RunData]]  # label -> its finished runs
    summaries: dict[tuple[str, int], dict[str, Any]]
    baseline: dict[str, Any] | None  # baseline/results.json (None: none, or unreadable)
    k: int
    ks: list[int]
    main_key: str  # mean@k, or late/mean@k when the runs evaluated at eval.at_steps
    final_key: str  # mean@k (the final evaluation's)
    late_steps: list[int]  # the steps of eval.at_steps the late mean averages with the final evaluation
    columns: list[Column]
    run_keys: list[str]  # the columns' keys, then every other key a finished run has a number for
    per_method: dict[str, dict[str, dict[str, Any]]]
    comparisons: list[dict[str, Any]]
    outcome: Outcome
    missing: list[str]  # "<label> seed <seed>" of the planned runs without results (of every planned method)
    colors: dict[str, str]  # label -> its matplotlib color ("C0", "C1", ...)
    heldout_key: str | None  # the mean@k logged in heldout.jsonl, if any
    # held-out main_key per method: at step 0 (the baseline) and the mean final point of its runs
    final_points: dict[str, list[tuple[float, float]]]
    max_steps: int | None  # the most optimizer steps of a finished run
    dataset: str | None
    temperature: Any
    train_walls: list[float]  # train_wall_s of the finished runs that have one
    provenance: CodeProvenance  # the code of the runs and of the calls that queued them

    @property
    def title(self) -> str:
        return f"bandpo compare: {self.output_dir.name}"

    @classmethod
    def load(
        cls,
        output_dir: str | Path,
        *,
        reference: str | None = None,
        smooth: int = 1,
        methods: Sequence[str] | None = None,
        seeds: Sequence[int] | None = None,
        method_seeds: Mapping[str, Sequence[int]] | None = None,
        rules: Mapping[str, tuple[str, Mapping[str, Any]]] | None = None,
    ) -> ReportData:
        """Read ``output_dir``.

        Args:
            reference: the method the others are compared against (default: ``compare_plan.json``'s, else ``grpo``
                if present, else the first method). A planned reference without runs is named in the report, and
                the others are compared against the first method with runs instead.
            smooth: rolling-mean window (in logged points) of the training curves.
            methods: method labels in display order (default: the plan's, else the run specs' ``method_index``); a
                method here without any run is reported missing on its seeds.
            seeds: the planned seeds (runs of these seeds that are missing are reported as missing).
            method_seeds: ``label -> seeds`` of the methods planned on other seeds than ``seeds`` (default: the
                plan's, for methods that name their own seeds).
            rules: ``label -> (clip_rule, params)`` for the bounds figure (default: from the run specs).

        Raises:
            ValueError: no run directory in ``output_dir``; a ``reference`` that is no method of it (planned or with
                runs).
        """
        output_dir = Path(output_dir)
        plan = read_json_object(output_dir / PLAN_FILE)
        runs = load_runs(output_dir)
        if not runs:
            raise ValueError(
                f"output_dir {str(output_dir)!r} has no runs (looked for runs/<label>/seed<seed>/{RUN_SPEC_FILE})"
            )
        order = list(methods or [m["label"] for m in plan.get("methods", [])])
        order += [label for label in dict.fromkeys(r.label for r in runs) if label not in order]
        labels = [label for label in order if any(r.label == label for r in runs)]
        seeds = list(seeds or plan.get("seeds") or sorted({r.seed for r in runs}))
        if method_seeds is None:
            method_seeds = {
                m["label"]: m["seeds"] for m in plan.get("methods", []) if isinstance(m.get("seeds"), list)
            }
        planned = {label: list(method_seeds.get(label, seeds)) for label in order}
        reference = reference or plan.get("reference") or ("grpo" if "grpo" in labels else labels[0])
        if reference not in order:
            raise ValueError(
                f"reference must be one of the methods of {str(output_dir)!r} ({', '.join(order)}), got {reference!r}"
            )
        reference_missing = None
        if reference not in labels:  # planned, without runs: the report says so, and which one is used
            reference_missing, reference = reference, labels[0]
        rule_of = {r.label: (r.clip_rule, r.params) for r in runs}
        rule_of.update({key: (v[0], dict(v[1])) for key, v in (rules or {}).items()})

        finished = [r for r in runs if r.results]
        groups = {label: [r for r in runs if r.label == label] for label in labels}
        done_groups = {label: [r for r in finished if r.label == label] for label in labels}
        summaries = {(r.label, r.seed): run_summary(r) for r in runs}
        baseline = read_json_object(output_dir / BASELINE_DIR / RESULTS_FILE) or None
        settings = next((r.results.get("settings") for r in finished if r.results.get("settings")), None)
        settings = settings or (baseline or {}).get("settings") or {}
        guessed_k = (_first_mean_key(summaries.values()) or "mean@1").removeprefix("mean@")
        k = int(settings.get("k") or guessed_k)
        ks = list(settings.get("ks") or [1, k])
        late_steps = next(
            ([int(row["step"]) for row in r.results["at_steps"]] for r in finished if r.results.get("late")),
            [],
        )
        final_key = f"mean@{k}"
        main_key = f"{LATE}{final_key}" if late_steps else final_key
        columns = _columns(k, ks, bool(late_steps))
        done = {label: [summaries[(r.label, r.seed)] for r in done_groups[label]] for label in labels}
        stat_keys = sorted(
            {key for rows in done.values() for row in rows for key, v in row.items() if v is not None}
        )
        per_method = {
            label: {key: mean_ci([row.get(key) for row in done[label]]) for key in stat_keys}
            for label in labels
        }
        compared = ((main_key, True), (f"pass@{max(ks)}", True), ("entropy", False))
        if late_steps:
            compared = (compared[0], (final_key, True), *compared[1:])
        comparisons = [
            {"method": label, "reference": reference, "metric": key, "percent": percent}
            | compare_methods(
                _by_seed(done_groups[reference], summaries, key), _by_seed(done_groups[label], summaries, key)
            )
            for label in labels
            if label != reference
            for key, percent in compared
        ]
        first = (finished[0].results or {}) if finished else {}
        steps = [summaries[(r.label, r.seed)].get("train/steps") for r in finished]
        walls = [summaries[(r.label, r.seed)].get("train_wall_s") for r in finished]
        return cls(
            output_dir=output_dir,
            source=plan.get("source"),
            runs=runs,
            finished=finished,
            labels=labels,
            seeds=seeds,
            planned=planned,
            reference=reference,
            reference_missing=reference_missing,
            rule_of=rule_of,
            smooth=smooth,
            groups=groups,
            done_groups=done_groups,
            summaries=summaries,
            baseline=baseline,
            k=k,
            ks=ks,
            main_key=main_key,
            final_key=final_key,
            late_steps=late_steps,
            columns=columns,
            run_keys=[c.key for c in columns]
            + [key for key in stat_keys if key not in {c.key for c in columns}],
            per_method=per_method,
            comparisons=comparisons,
            outcome=outcome_of(comparisons, main_key, reference, rule_of),
            missing=[
                f"{label} seed {seed}"
                for label in planned
                for seed in planned[label]
                if not any(r.seed == seed for r in done_groups.get(label, []))
            ],
            colors={label: f"C{i}" for i, label in enumerate(labels)},  # matplotlib's color cycle, wrapping
            heldout_key=_first_mean_key(row for r in runs for row in r.heldout),
            final_points=_final_points(groups, baseline, final_key),
            max_steps=max((s for s in steps if s is not None), default=None),
            dataset=first.get("dataset"),
            temperature=(first.get("settings") or {}).get("temperature"),
            train_walls=[w for w in walls if isinstance(w, (int, float))],
            provenance=collect_provenance(runs, plan),
        )

    # ------------------------------------------------------------------------------------------ lookups
    def method_mean(self, label: str, key: str) -> float | None:
        """The mean over ``label``'s finished seeds of ``key`` (``None``: not measured)."""
        return (self.per_method.get(label, {}).get(key) or {}).get("mean")

    def baseline_metric(self, key: str) -> Any:
        """The starting policy's ``key`` (``None`` without a baseline); its late mean is its one evaluation (the
        starting policy does not move)."""
        return (self.baseline or {}).get("metrics", {}).get(key.removeprefix(LATE))

    @property
    def train_wall_mean(self) -> float:
        """The mean training wall time of a finished run in seconds (of those that recorded one)."""
        return statistics.fmean(self.train_walls)

    def reference_gain(self) -> float | None:
        """The reference method's mean ``main_key`` minus the starting policy's (``None`` without either)."""
        start, end = self.baseline_metric(self.main_key), self.method_mean(self.reference, self.main_key)
        return None if start is None or end is None else end - start

    def clip_ratios(self) -> dict[str, float]:
        """Each other method's mean clip fraction over the reference's (empty when the reference clips nothing or
        logs no clip fraction)."""
        ref_clip = self.method_mean(self.reference, "train/clip_frac")
        if not ref_clip:
            return {}
        clip = {label: self.method_mean(label, "train/clip_frac") for label in self.labels}
        return {label: v / ref_clip for label, v in clip.items() if v is not None and label != self.reference}

    def curve(self, label: str, key: str, *, heldout: bool = False, smooth: int = 1) -> Curve | None:
        """``key`` against the optimizer step over ``label``'s runs (``metrics.jsonl``, or ``heldout.jsonl``):
        per step the mean, min and max over the seeds that logged it, each seed's series rolling-averaged over
        ``smooth`` logged points; ``None`` when no run logged ``key``."""
        return curve([r.heldout if heldout else r.metrics for r in self.groups[label]], key, smooth)

    def clip_bins(self) -> BinBars | None:
        """Clipping by old-probability bin per method (:func:`~bandpo_lab.experiments.report.series.clip_bin_bars`)."""
        return clip_bin_bars(self.labels, self.per_method)


def _by_seed(
    runs: Sequence[RunData], summaries: Mapping[tuple[str, int], Mapping[str, Any]], key: str
) -> dict[int, float]:
    """``seed -> value`` of ``key`` over ``runs`` that have one."""
    pairs = ((r.seed, summaries[(r.label, r.seed)].get(key)) for r in runs)
    return {seed: value for seed, value in pairs if value is not None}


def _first_mean_key(rows: Iterable[Mapping[str, Any]]) -> str | None:
    """The first ``mean@<k>`` key of ``rows`` (``None``: none has one)."""
    return next((key for row in rows for key in row if key.startswith("mean@")), None)


def _final_points(
    groups: Mapping[str, Sequence[RunData]], baseline: Mapping[str, Any] | None, key: str
) -> dict[str, list[tuple[float, float]]]:
    start = (baseline or {}).get("metrics", {}).get(key)
    first = [(0.0, float(start))] if start is not None else []
    points: dict[str, list[tuple[float, float]]] = {}
    for label, runs in groups.items():
        ends = []  # (last logged step, final value) of each finished run
        for r in runs:
            if not r.results or r.results.get("metrics", {}).get(key) is None:
                continue
            steps = [row["step"] for row in r.metrics if row.get("step") is not None]
            ends.append((float(max(steps)) if steps else 1.0, float(r.results["metrics"][key])))
        if not ends:
            points[label] = []
            continue
        step, value = (statistics.fmean(column) for column in zip(*ends))
        points[label] = [*first, (step, value)]
    return points
