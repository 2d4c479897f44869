"""What bandpo knows about TRL without importing it: the versions and loss types the TRL adapter supports, and the
checks of TRL's own settings next to a clip rule.

``bandpo.integrations.trl`` (which imports TRL) re-exports these names; the config layer reads them from here, so
that reading a ``bandpo train`` YAML file imports no TRL. :data:`TRL_NAMES` is the one table from TRL's spellings
(``BandPOConfig``'s fields, a ``bandpo train`` YAML's keys) to bandpo's names (``bandpo.losses.method``).
"""

from __future__ import annotations

import contextlib
import math
import warnings
from collections.abc import Iterator
from typing import Any

import torch

from bandpo.losses.clip_rules import ClipRule, clip_rule_params
from bandpo.losses.method import METHOD_NAMES
from bandpo.losses.schedule import rule_at_radius
from bandpo.registry import did_you_mean

__all__ = [
    "OLD_CHECKPOINTING_NAMES",
    "REFUSED_LOSS_TYPES",
    "SUPPORTED_LOSS_TYPES",
    "SUPPORTED_TRL",
    "TRL_NAMES",
    "TRL_RULE_SHORTCUTS",
    "check_loss_type",
    "check_trl_delta",
    "largest_upper_bound",
    "loss_type_problem",
    "silence_old_checkpointing_names",
    "trl_delta_rule_problem",
]


OLD_CHECKPOINTING_NAMES = (
    r"`(is_)?gradient_checkpointing(_enable|_disable)?` is deprecated and will be removed in v6"
)
"""transformers 5's ``FutureWarning`` about gradient checkpointing's old names (now activation checkpointing),
which TRL 1.16 still uses: ``GRPOConfig``'s ``gradient_checkpointing=True`` default, read as a ``TrainingArguments``
is built, and the toggling around each generation (four warnings in a two-step run). bandpo never uses the old
names (a regex, as ``warnings.filterwarnings`` takes it; pyproject's filterwarnings holds the same)."""


@contextlib.contextmanager
def silence_old_checkpointing_names() -> Iterator[None]:
    """Within the block, hide :data:`OLD_CHECKPOINTING_NAMES` warnings, by that message and as ``FutureWarning``
    only: the warnings TRL causes and the user did not. ``BandPOConfig`` and ``BandPOTrainer`` (its construction
    and ``train``) run TRL inside it; every other warning shows, and the filter is gone after the block."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=OLD_CHECKPOINTING_NAMES, category=FutureWarning)
        yield


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

SUPPORTED_TRL = ">=1.16,<1.17"
"""TRL versions whose ``GRPOTrainer._compute_loss`` the TRL adapter was written against and tested with."""

SUPPORTED_LOSS_TYPES = ("grpo", "bnpo", "dr_grpo", "dapo")
"""TRL 1.16 loss types that clip the token ratio with ``torch.clamp(coef_1, 1 - eps_low, 1 + eps_high)``
(they differ only in aggregation)."""

REFUSED_LOSS_TYPES = {
    "cispo": "its epsilon_high is an absolute cap on the detached importance weight, not a ratio bound",
    "sapo": "it replaces clipping by a soft sigmoid gate and has no ratio bounds",
    "vespo": "it weights sequence-level importance ratios with a Gamma function and has no ratio bounds",
    "luspo": "it is a sequence-level objective (importance_sampling_level='sequence'), Band needs token ratios",
}
"""TRL loss types that cannot take per-token bounds, with the reason (shown in the error message)."""


def loss_type_problem(loss_type: object, where: str = "", how: str | None = None) -> str | None:
    """The one-line message refusing TRL's ``loss_type`` next to a clip rule (``None``: one of
    :data:`SUPPORTED_LOSS_TYPES`, allowed): an unknown name with a did-you-mean and TRL's loss types; a known one
    with ``how`` (what to do instead; default: the reason of :data:`REFUSED_LOSS_TYPES`) and the allowed ones.
    ``where``: appended to the name of the setting (e.g. `` (from the overrides)``)."""
    if loss_type in SUPPORTED_LOSS_TYPES:
        return None
    known = [*SUPPORTED_LOSS_TYPES, *REFUSED_LOSS_TYPES]
    if loss_type not in known:
        return (
            f"unknown loss_type {loss_type!r}{where}{did_you_mean(str(loss_type), known)}; TRL 1.16 loss types: "
            f"{', '.join(known)}"
        )
    how = how or REFUSED_LOSS_TYPES[str(loss_type)]
    return (
        f"loss_type={loss_type!r}{where} cannot be used with a clip rule: {how}. With a clip rule: "
        f"{', '.join(SUPPORTED_LOSS_TYPES)}"
    )


def check_loss_type(loss_type: object) -> None:
    """``ValueError`` with :func:`loss_type_problem`'s line unless ``loss_type`` is one of
    :data:`SUPPORTED_LOSS_TYPES`."""
    problem = loss_type_problem(loss_type)
    if problem is not None:
        raise ValueError(problem)


def largest_upper_bound(rule: ClipRule) -> float:
    """The largest ratio bound ``hi`` ``rule`` gives any token: at ``p_old = 0`` (its cap; ``inf`` without one), for
    an entropy-driven rule over entropies from 0.01 to 100 nats. A rule with a radius is asked with the tensor-radius
    solver: the bound at ``p_old = 0`` is the same, and no KL table (1.2 s) is built for this one look."""
    if "delta" in clip_rule_params(rule.name) and getattr(rule, "method", None) == "auto":
        rule = rule_at_radius(rule, rule.delta)
    old = torch.tensor([-math.inf], dtype=torch.float64)
    entropies = [0.01, 1.0, 100.0] if rule.needs_entropy else [None]
    his = [
        rule.bounds(old, None if h is None else torch.tensor([h], dtype=torch.float64))[1] for h in entropies
    ]
    return max(float(hi.max()) for hi in his)


def trl_delta_rule_problem(delta: float | None, rule: ClipRule) -> str | None:
    """Why TRL's ``delta`` (checked by :func:`check_trl_delta`) does not act as ``rule``'s dual clip, in one line, or
    ``None``. TRL clamps the ratio of *every* token at ``delta`` before the clip: a dual clip (the ratio of a token
    with a negative advantage capped) only where ``delta`` is at least every upper bound ``hi`` the rule gives.
    Below that, a token with a positive advantage loses its gradient inside the rule's bounds (Band's rare tokens,
    whose ``hi`` reaches the cap 10 at ``p_old`` below about 0.01); DPPO's truncated objective has no dual clip."""
    if delta is None:
        return None
    head = f"delta={delta!r} is TRL's clamp of every token's ratio (a dual clip only at or above the rule's bounds)"
    if rule.truncation_c is not None:
        return (
            f"{head}, but clip rule {rule.name!r} has no dual clip (its truncated objective's c is truncation_c="
            f"{rule.truncation_c:g}): the clamp would add one and cut its ratios at {delta:g}; leave delta null"
        )
    hi = largest_upper_bound(rule)
    if delta < hi:
        largest = "unbounded: the rule has no cap" if math.isinf(hi) else f"{hi:g}"
        fix = "give the rule a cap of at most delta" if math.isinf(hi) else f"set delta >= {hi:g}"
        return (
            f"{head}, below the largest upper bound of clip rule {rule.describe()} ({largest}): tokens with a "
            f"positive advantage would lose their gradient inside the rule's bounds; {fix}, or leave delta null"
        )
    return None


def check_trl_delta(delta: Any, rule: str | None, where: str = "") -> None:
    """TRL's own ``delta`` (``GRPOConfig.delta``, INTELLECT-2's two-sided clamp: the ratio of a token with negative
    advantage is clamped at ``delta`` from above) must be ``None`` or a finite number > 1: TRL does not check it, and
    a clamp at or below 1 silently changes the objective of every rule. Next to a rule with a radius ``delta``
    (``band``, ``adaptive_band``) such a value is Band's radius written under TRL's name, and the message says where
    the radius goes. ``rule``: the clip rule, or ``None`` for a TRL-native method (``method: gspo``). ``where``:
    appended to ``delta=...`` in the message (e.g. `` (from the overrides)``).

    Raises:
        ValueError: one line naming ``delta``, the value, what TRL's ``delta`` may be and ``band_delta``.
    """
    if delta is None:
        return
    if isinstance(delta, (int, float)) and not isinstance(delta, bool) and math.isfinite(delta) and delta > 1:
        return
    head = f"delta={delta!r}{where} is TRL's two-sided clamp of the ratio (GRPOConfig.delta, INTELLECT-2's)"
    if rule is not None and "delta" in clip_rule_params(rule):
        raise ValueError(
            f"{head}, not Band's radius: clip_rule={rule!r} takes its radius from band_delta (or "
            "clip_rule_kwargs.delta); next to a Band rule TRL's delta must be a finite number > 1 (an upper clamp of "
            "the ratio, e.g. 10) or null"
        )
    raise ValueError(
        f"{head}: it must be a finite number > 1 (an upper clamp of the ratio, e.g. 10) or null; Band's radius is "
        "band_delta, with clip_rule: band"
    )
