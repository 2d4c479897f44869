"""The code a comparison ran, collected for the report from the :func:`bandpo_lab.provenance.provenance` records in
its files (numbers only; ``document`` words them)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from bandpo_lab.experiments.report.runs import RunData
from bandpo_lab.provenance import DEFAULT_PACKAGES, UNKNOWN

_NOT_LIBRARIES = {"bandpo", "commit", "dirty", "dirty_count", "dirty_files", "dirty_sha256", "started"}
"""The keys of a record that are not a library's (or Python's) version."""


def code_of(record: Mapping[str, Any]) -> tuple[str, str, bool | str]:
    """``(bandpo version, commit, dirty)`` of a record (``"unknown"`` for a missing key)."""
    dirty = record.get("dirty")
    return (
        str(record.get("bandpo", UNKNOWN)),
        str(record.get("commit", UNKNOWN)),
        dirty if isinstance(dirty, bool) else UNKNOWN,
    )


def run_records(run: RunData) -> list[dict[str, Any]]:
    """Every provenance record of ``run``: its training calls' (``run_info.json``, oldest first), then its
    evaluation's (``results.json``)."""
    info = run.run_info or {}
    out = [r for r in info.get("provenance_earlier") or [] if isinstance(r, dict)]
    for record in (info.get("provenance"), (run.results or {}).get("provenance")):
        if isinstance(record, dict):
            out.append(record)
    return out


@dataclass(frozen=True)
class Call:
    """A call of ``bandpo compare`` that queued runs: its ``time`` and code (``None``: not recorded)."""

    time: str | None
    code: tuple[str, str, bool | str] | None
    queued: int | None  # runs it trained or resumed (None: not recorded)


@dataclass(frozen=True)
class CodeProvenance:
    """The code behind a report's runs.

    ``codes``: each distinct ``(bandpo version, commit, dirty)`` with the number of runs that recorded it (a run
    trained, resumed or evaluated under several counts under each), in order of first appearance;
    ``unrecorded``: runs with no record; ``n_runs``: all runs; ``versions``: per library (and ``python``) the
    distinct versions recorded, the default libraries first; ``calls``: the plan's calls, oldest first (empty when
    the plan does not keep them)."""

    n_runs: int
    codes: list[tuple[tuple[str, str, bool | str], int]]
    unrecorded: list[str]
    versions: dict[str, list[str]]
    calls: list[Call]

    @property
    def recorded(self) -> bool:
        """Whether any run or call recorded its code."""
        return bool(self.codes) or any(c.code is not None for c in self.calls)


def _calls(plan: Mapping[str, Any]) -> list[Call]:
    out = []
    for call in plan.get("calls") or []:
        if not isinstance(call, dict):
            continue
        record = call.get("provenance")
        queued = call.get("queued")
        out.append(
            Call(
                time=call.get("time") if isinstance(call.get("time"), str) else None,
                code=code_of(record) if isinstance(record, dict) else None,
                queued=len(queued) if isinstance(queued, list) else None,
            )
        )
    return out


def _versions(records: Iterable[Mapping[str, Any]]) -> dict[str, list[str]]:
    seen: dict[str, dict[str, None]] = {name: {} for name in ("python", *DEFAULT_PACKAGES)}
    for record in records:
        for name, version in record.items():
            if name not in _NOT_LIBRARIES and isinstance(version, str):
                seen.setdefault(name, {})[version] = None
    return {name: list(versions) for name, versions in seen.items() if versions}


def collect_provenance(runs: Sequence[RunData], plan: Mapping[str, Any]) -> CodeProvenance:
    """The :class:`CodeProvenance` of ``runs`` and of ``plan`` (the ``compare_plan.json`` object, ``{}`` if none)."""
    counts: dict[tuple[str, str, bool | str], int] = {}
    unrecorded, every = [], []
    for run in runs:
        records = run_records(run)
        if not records:
            unrecorded.append(f"{run.label} seed {run.seed}")
        for code in dict.fromkeys(code_of(r) for r in records):
            counts[code] = counts.get(code, 0) + 1
        every += records
    return CodeProvenance(
        n_runs=len(runs),
        codes=list(counts.items()),
        unrecorded=unrecorded,
        versions=_versions(every),
        calls=_calls(plan),
    )
