"""The outcome of a comparison, decided once from the comparisons against the reference method."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

BAND_RULES = ("band", "adaptive_band")
"""Clip rules that are BandPO (the outcome statement singles them out)."""

PAPER_GAIN = 0.02
"""The paper's smallest gain of BandPO over GRPO in mean@32 (2 points)."""


@dataclass(frozen=True)
class Outcome:
    """The comparisons on the main metric (``main``; ``valid``: those with a difference), the ones significantly
    ``better`` / ``worse`` than the reference, and the others that have a difference (``other``: pass@max(ks),
    entropy). ``band``: the Band methods' comparisons when the reference is not a Band method (else empty), with
    the significant winners, the best one and whether any reaches the paper's gain of 2 points."""

    main: list[dict[str, Any]]
    valid: list[dict[str, Any]]
    better: list[dict[str, Any]]
    worse: list[dict[str, Any]]
    other: list[dict[str, Any]]
    band: list[dict[str, Any]]
    band_winners: list[dict[str, Any]]
    band_best: dict[str, Any] | None
    band_reaches_paper_gain: bool

    @property
    def single_seed(self) -> bool:
        """No valid comparison has an interval (a single seed on a side, fewer than 2 in common)."""
        return all(c["significant"] is None for c in self.valid)


def outcome_of(
    comparisons: Sequence[dict[str, Any]],
    main_key: str,
    reference: str,
    rule_of: Mapping[str, tuple[str, Mapping[str, Any]]],
) -> Outcome:
    """The :class:`Outcome` of ``comparisons`` (:func:`~bandpo_lab.experiments.report.stats.compare_methods` results
    with ``method`` and ``metric``); ``rule_of``: label -> (clip rule or method, params)."""
    main = [c for c in comparisons if c["metric"] == main_key]
    valid = [c for c in main if c["diff"] is not None]
    band = [c for c in valid if rule_of.get(c["method"], ("",))[0] in BAND_RULES]
    if rule_of.get(reference, ("",))[0] in BAND_RULES:
        band = []
    return Outcome(
        main=main,
        valid=valid,
        better=[c for c in valid if c["significant"] and c["diff"] > 0],
        worse=[c for c in valid if c["significant"] and c["diff"] < 0],
        other=[c for c in comparisons if c["metric"] != main_key and c["diff"] is not None],
        band=band,
        band_winners=[c for c in band if c["significant"] and c["diff"] > 0],
        band_best=max(band, key=lambda c: c["diff"]) if band else None,
        band_reaches_paper_gain=any(c["diff"] >= PAPER_GAIN for c in band),
    )
