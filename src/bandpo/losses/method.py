"""The clip method, framework-neutral: a clip rule with its parameters, the radius schedule and the diagnostics level.

Inside bandpo every parameter has one name, the clip rule's (``delta`` is Band's radius, the paper's name). A
framework adapter translates its own config slot into these names once, with one table ``its spelling ->
bandpo's name`` (docs/names.md lists every spelling); the names of the method itself are :data:`METHOD_NAMES`,
every other name is a parameter of the clip rule.

This module imports no framework: the config layer reads TRL's spellings from here without importing TRL.
"""

from __future__ import annotations

__all__ = ["METHOD_NAMES", "TRL_NAMES", "TRL_RULE_SHORTCUTS"]

METHOD_NAMES = (
    "rule",
    "params",
    "delta_schedule",
    "delta_end",
    "delta_hold_frac",
    "total_steps",
    "diagnostics",
)
"""bandpo's names of the method's own settings: the rule's name, its parameter dict, the radius schedule (kind,
end radius, hold fraction, the run's length) and the diagnostics level. Every other name is a clip-rule parameter
(``divergence``, ``delta``, ``cap``, ``relax``, ``eps_low``, ...)."""

TRL_NAMES: dict[str, str] = {
    "clip_rule": "rule",
    "clip_rule_kwargs": "params",
    "band_divergence": "divergence",
    "band_delta": "delta",
    "band_cap": "cap",
    "band_relax": "relax",
    "band_delta_schedule": "delta_schedule",
    "band_delta_end": "delta_end",
    "band_delta_hold_frac": "delta_hold_frac",
    "max_steps": "total_steps",
    "diagnostics": "diagnostics",
}
"""TRL's spelling (``BandPOConfig`` fields, the top-level keys of a ``bandpo train`` YAML) -> bandpo's name. TRL
owns ``delta`` (its two-sided clamp of the ratio) and ``epsilon``, so Band's parameters carry the prefix
``band_``."""

TRL_RULE_SHORTCUTS: dict[str, str] = {k: v for k, v in TRL_NAMES.items() if v not in METHOD_NAMES}
"""The ``band_*`` fields of ``BandPOConfig`` that set a clip-rule parameter (shortcuts for the entries of
``clip_rule_kwargs``): TRL spelling -> the rule's parameter (``band_delta`` -> ``delta``, ...)."""
