"""The report as Markdown (``report.md``, ``results.md``), made from
:class:`~bandpo_lab.experiments.report.data.ReportData`; ``html.py`` renders the same text as a page. Numbers are
formatted here, never computed."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from bandpo_lab.experiments.compare.layout import PLAN_FILE
from bandpo_lab.experiments.report.data import Column, ReportData
from bandpo_lab.experiments.report.provenance import Call
from bandpo_lab.experiments.report.runs import TAIL_BIN
from bandpo_lab.provenance import UNKNOWN


@dataclass(frozen=True)
class Figure:
    """A figure the report shows: ``file`` in ``figures/`` with its caption, or (``file`` ``None``) a note that
    stands where a figure could not be drawn."""

    file: str | None
    caption: str


def _bullets(items: Sequence[str]) -> str:
    return "\n".join(f"- {item}" for item in items)


def markdown_table(header: Sequence[Any], rows: Sequence[Sequence[Any]]) -> str:
    """A pipe table, ``|`` in a cell escaped."""
    lines = ["| " + " | ".join(str(c).replace("|", "\\|") for c in row) + " |" for row in [header, *rows]]
    return "\n".join([lines[0], "|" + "|".join("---" for _ in header) + "|", *lines[1:]])


def _figure(f: Figure) -> str:
    return f"![{f.caption}](figures/{f.file})\n\n*{f.caption}*" if f.file else f.caption


def report_markdown(data: ReportData, figures: Sequence[Figure]) -> str:
    """The whole report: setup, provenance, outcome, results, clipping and entropy, ``figures``, per-run results,
    missing runs, definitions; blocks separated by blank lines."""
    blocks = [f"# {data.title}", "## Setup", _setup(data), "## Provenance", _bullets(_provenance(data))]
    comparisons = [_comparison(data, c) for c in data.outcome.main] or ["only one method: nothing to compare"]
    blocks += ["## Outcome", _bullets(comparisons), *_outcome_summary(data)]
    start = _starting_policy(data)
    if start:
        blocks.append(start)
    k = data.k
    blocks += [
        "## Results",
        f"Final evaluation in % ({data.main_key}, pass@j: unbiased estimator, best@{k}: the authors' bootstrap, "
        f"maj@{k}: majority vote); entropy in nats per token; training clip fractions in % of response tokens. "
        "Mean ± 95% t-interval half-width over seeds (no interval with one seed)."
        + _late_note(data, " (same settings)"),
        _results_table(data),
    ]
    if data.outcome.other:
        blocks += ["### Other comparisons", _bullets([_comparison(data, c) for c in data.outcome.other])]
    dynamics = _dynamics(data)
    if dynamics:
        blocks += ["## Clipping and entropy", _bullets(dynamics)]
    blocks += ["## Figures", *map(_figure, figures), "## Per-run results", _runs_table(data)]
    if data.missing:
        blocks += [
            "## Missing runs",
            "Not finished (no results.json; see each run's train.log): " + ", ".join(data.missing) + ".",
        ]
    return "\n\n".join([*blocks, "## Definitions", _bullets(_definitions(k))]) + "\n"


def results_markdown(data: ReportData) -> str:
    """``results.md``: one line saying what the numbers are, then the results table."""
    return (
        f"Final evaluation: {data.main_key} etc. in % on the held-out set (k={data.k} samples per problem); mean ± "
        f"95% t-interval half-width over seeds.{_late_note(data, '')}\n\n{_results_table(data)}\n"
    )


def _late_note(data: ReportData, settings: str) -> str:
    if not data.late_steps:
        return ""
    return (
        f" Late mean@{data.k}: mean@{data.k} averaged over the evaluations at steps "
        f"{', '.join(map(str, data.late_steps))} and the final one{settings}."
    )


def _results_table(data: ReportData) -> str:
    """Per method (after the starting policy when there is a baseline): the seeds and each column's mean ± 95%
    half-width, with ``(n=...)`` where fewer seeds than the method's have a value."""
    rows = []
    if data.baseline and data.baseline.get("metrics"):
        b = data.baseline["metrics"]
        rows.append(["starting policy", "-", *[_fmt_value(b.get(c.key), c) for c in data.columns]])
    for label in data.labels:
        seeds = len(data.done_groups[label])
        stats = [(c, data.per_method[label].get(c.key) or {}) for c in data.columns]
        cells = [
            _fmt_value(s.get("mean"), c, s.get("ci95"))
            + (f" (n={s['n']})" if 0 < s.get("n", seeds) < seeds else "")
            for c, s in stats
        ]
        rows.append([label, str(seeds), *cells])
    return markdown_table(["method", "seeds", *[c.title for c in data.columns]], rows)


def _runs_table(data: ReportData) -> str:
    rows = [
        [
            r.label,
            str(r.seed),
            *[_fmt_value(data.summaries[(r.label, r.seed)].get(c.key), c) for c in data.columns],
        ]
        for r in data.finished
    ]
    return markdown_table(["method", "seed", *[c.title for c in data.columns]], rows)


def _setup(data: ReportData) -> str:
    labels, seeds = data.labels, data.seeds
    own = [label for label in labels if data.planned[label] != seeds]  # methods planned on their own seeds
    per_method = "".join(
        f", {label} on {_count(len(data.planned[label]), 'seed')} ({', '.join(map(str, data.planned[label]))})"
        for label in own
    )
    runs = f": {_count(sum(len(data.planned[label]) for label in labels), 'run')}" if own else ""
    reference = (
        f"Reference method: {data.reference_missing}, which has no runs, so the others are compared against "
        f"{data.reference}."
        if data.reference_missing
        else f"Reference method: {data.reference}."
    )
    text = (
        f"{len(labels)} methods ({', '.join(labels)}) x {len(seeds)} seeds ({', '.join(map(str, seeds))})"
        f"{per_method}{runs}; "
        f"{'?' if data.max_steps is None else data.max_steps} optimizer steps per run; final evaluation on "
        f"{data.dataset or 'the held-out set'} with k={data.k} samples per problem"
        + (f" at temperature {data.temperature:g}" if isinstance(data.temperature, (int, float)) else "")
        + f". {reference} Intervals are 95% Student-t intervals over seeds."
    )
    if data.source:
        text += f" Config: {data.source}."
    walls = data.train_walls
    if walls:
        text += (
            f" Training wall time per run: {data.train_wall_mean / 60:.1f} min on average "
            f"({sum(walls) / 60:.0f} min over {len(walls)} runs)."
        )
    return text


def _code(code: tuple[str, str, bool | str]) -> str:
    version, commit, dirty = code
    if commit == UNKNOWN:
        return f"bandpo {version}, commit unknown (not run from a git checkout)"
    state = {True: "with uncommitted changes", False: "clean"}.get(dirty, "dirty flag unknown")
    return f"bandpo {version} at commit {commit[:10]} ({state})"


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'s' * (n != 1)}"


LISTED_CALLS = 6
"""Up to this many calls of ``bandpo compare`` are listed one by one; more (a study resumed over many sessions, two
queues side by side) are counted by code (:func:`_calls_summary`)."""


def _calls_summary(calls: Sequence[Call]) -> str:
    """The calls counted: their span in time, how many queued runs and how many found nothing to run, and how many
    ran each code (in order of first appearance); each call itself is in ``compare_plan.json``."""
    times = sorted(c.time for c in calls if c.time)
    span = f", {times[0]} to {times[-1]}" if times else ""
    by_code: dict[str, int] = {}
    for c in calls:
        key = _code(c.code) if c.code else "code not recorded"
        by_code[key] = by_code.get(key, 0) + 1
    queued = [c.queued for c in calls if c.queued is not None]
    work = ""
    if queued:
        work = (
            f"; {sum(q > 0 for q in queued)} queued runs to train or resume ({sum(queued)} in all), "
            f"{sum(q == 0 for q in queued)} found nothing left to run"
        )
        if len(queued) < len(calls):
            work += f", {len(calls) - len(queued)} did not record it"
    codes = "; ".join(f"{_count(n, 'call')} with {code}" for code, n in by_code.items())
    return (
        f"Queued by {_count(len(calls), 'call')} of bandpo compare{span}{work}: {codes} (each call, its arguments "
        f"and its code: {PLAN_FILE})."
    )


def _provenance(data: ReportData) -> list[str]:
    p = data.provenance
    if not p.recorded:
        return [
            "Not recorded: these files hold no record of the code the runs ran (bandpo version, git commit, "
            "uncommitted changes) or of the library versions."
        ]
    items = []
    if p.codes:
        text = "Code of the runs: " + "; ".join(f"{_code(c)}: {_count(n, 'run')}" for c, n in p.codes)
        if sum(n for _, n in p.codes) > p.n_runs - len(p.unrecorded):
            text += " (a run trained, resumed or evaluated under several of these counts under each)"
        if p.unrecorded:
            text += f"; not recorded for {len(p.unrecorded)} of {p.n_runs} runs"
        items.append(text + ".")
    else:
        items.append(f"Code of the runs: not recorded for any of the {p.n_runs} runs.")
    if p.versions:
        items.append(
            "Libraries: " + ", ".join(f"{name} {' / '.join(v)}" for name, v in p.versions.items()) + "."
        )
    if len(p.calls) > LISTED_CALLS:
        items.append(_calls_summary(p.calls))
    elif p.calls:
        calls = [
            f"{c.time or 'time not recorded'}"
            + ("" if c.queued is None else f" ({_count(c.queued, 'run')} to run)")
            + (f", {_code(c.code)}" if c.code else ", code not recorded")
            for c in p.calls
        ]
        items.append(f"Queued by {_count(len(calls), 'call')} of bandpo compare: " + "; ".join(calls) + ".")
    else:
        items.append("Calls of bandpo compare that queued the runs: not recorded.")
    return items


def _starting_policy(data: ReportData) -> str | None:
    start, ref = data.baseline_metric(data.main_key), data.reference
    if start is None:
        return None
    text = f"Starting policy: {data.main_key} = {_pct(start)}%."
    gain = data.reference_gain()
    if gain is not None:
        ref_mean = data.method_mean(ref, data.main_key)
        text += f" After training, {ref} reaches {_pct(ref_mean)}% ({100 * gain:+.1f} points)."
        if gain <= 0:
            text += (
                f" {ref} did not improve on the starting policy here, so this budget says little about the methods' "
                "relative merit."
            )
    return text


def _comparison(data: ReportData, c: Mapping[str, Any]) -> str:
    """``<method> vs <reference>: <difference>; <verdict>`` of a comparison."""
    if c["diff"] is None:
        return f"{c['method']} vs {data.reference}: no finished runs to compare"
    return (
        f"{c['method']} vs {data.reference}: {_fmt_diff(c, c['percent'], c['metric'])}; {_verdict(data, c)}"
    )


def _outcome_summary(data: ReportData) -> list[str]:
    o, ref, key = data.outcome, data.reference, data.main_key
    if not o.valid:
        return []
    out = []
    for word, significant in (("better", o.better), ("worse", o.worse)):
        if significant:
            listed = ", ".join(f"{c['method']} ({100 * c['diff']:+.1f})" for c in significant)
            out.append(f"Significantly {word} than {ref} on {key}: {listed}.")
    if not o.better and not o.worse:
        if o.single_seed:
            out.append(f"With a single seed on a side no difference on {key} can be called significant.")
        else:
            out.append(f"No method differs significantly from {ref} on {key} with these seeds.")
    if o.band_best is not None:
        if o.band_winners:
            winners = ", ".join(c["method"] for c in o.band_winners)
            out.append(f"BandPO wins here: {winners} beat {ref} significantly on {key}.")
        else:
            out.append(
                f"BandPO does not win here: no Band method is significantly better than {ref} on {key} "
                f"(best: {o.band_best['method']}, {100 * o.band_best['diff']:+.1f} points)."
            )
        if not o.band_reaches_paper_gain:
            out.append(
                f"The paper reports BandPO >= 2 points mean@32 above GRPO in every setting; no Band method reaches "
                f"+2 points over {ref} here."
            )
    return out


def _dynamics(data: ReportData) -> list[str]:
    out = []
    tail = {label: data.method_mean(label, f"bins/up/{TAIL_BIN}") for label in data.labels}
    if any(v is not None for v in tail.values()):
        out.append(
            "Tail tokens (p_old < 0.2) clipped at the upper bound (% of tail tokens, mean over steps): "
            + ", ".join(f"{label} {_pct(v, 2)}" for label, v in tail.items())
            + "."
        )
    share = {label: data.method_mean(label, "train/tail_share") for label in data.labels}
    if any(v is not None for v in share.values()):
        out.append(
            "Share of all clipping that falls on tail tokens: "
            + ", ".join(f"{label} {_pct(v)}{'' if v is None else '%'}" for label, v in share.items())
            + " (the paper: about 20% under fixed bounds)."
        )
    ref_clip = data.method_mean(data.reference, "train/clip_frac")
    if ref_clip:
        out.append(
            f"Overall clip fraction relative to {data.reference} ({_pct(ref_clip, 2)}% of tokens): "
            + ", ".join(f"{label} {ratio:.2f}x" for label, ratio in data.clip_ratios().items())
            + "."
        )
    entropy = {label: data.method_mean(label, "entropy") for label in data.labels}
    if any(v is not None for v in entropy.values()):
        start = data.baseline_metric("entropy")
        out.append(
            "Entropy of the final policy on the held-out prompts (nats per token): "
            + ", ".join(f"{label} {v:.3f}" for label, v in entropy.items() if v is not None)
            + (f"; starting policy {start:.3f}." if start is not None else ".")
        )
    return out


def _definitions(k: int) -> list[str]:
    return [
        f"mean@{k}: per problem the share of the {k} samples that are correct, averaged over problems; pass@j: the "
        "unbiased estimator 1 - C(n-c, j)/C(n, j); best@k: the authors' bootstrap (1000 resamples of k with "
        "replacement, max, mean), below pass@k; maj@k: accuracy of the majority answer.",
        "entropy (eval): mean entropy of the sampling distribution per generated token on the held-out prompts; "
        "entropy (train, last): the last logged policy/entropy.",
        "clip %, clip up %, clip down %: mean over logged steps of clip/frac, clip/frac_up (r > hi with A > 0), "
        "clip/frac_down (r < lo with A < 0).",
        "tail share %: share of all clipped tokens with p_old < 0.2, pooled over logged steps.",
        "-: not measured. TRL-native methods (trained by plain GRPOTrainer) log TRL's metrics, not these clip "
        "diagnostics.",
        "95% CI of a difference: paired over common seeds (t with n-1 degrees of freedom); 'not significant' "
        "means the interval contains 0.",
    ]


# --------------------------------------------------------------------------------------------------- format
def _pct(x: Any, digits: int = 1) -> str:
    return "-" if x is None else f"{100 * x:.{digits}f}"


def _fmt_value(x: Any, c: Column, ci95: float | None = None) -> str:
    """``x`` (with `` ± ci95`` when given) in column ``c``'s unit and digits; ``-`` for ``None``."""
    if x is None:
        return "-"
    scale = 100.0 if c.percent else 1.0
    text = f"{scale * float(x):.{c.digits}f}"
    return text if ci95 is None else f"{text} ± {scale * ci95:.{c.digits}f}"


def _fmt_diff(c: Mapping[str, Any], percent: bool, metric: str) -> str:
    scale, unit = (100.0, " points") if percent else (1.0, "")
    d = 1 if percent else 3
    text = f"{scale * c['diff']:+.{d}f}{unit} {metric}"
    if c["lo"] is not None:
        text += (
            f" (95% CI [{scale * c['lo']:+.{d}f}, {scale * c['hi']:+.{d}f}], {c['kind']} over {c['n']} seeds)"
        )
    return text


def _verdict(data: ReportData, c: Mapping[str, Any]) -> str:
    if c["significant"] is None:
        return "a single seed on a side and not 2 in common: no confidence interval, not evidence either way"
    if not c["significant"]:
        return f"not significant with {c['n']} seeds"
    better = c["diff"] > 0
    return f"{c['method']} is significantly {'better' if better else 'worse'} than {data.reference} (95% CI excludes 0)"
