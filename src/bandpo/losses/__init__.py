"""Policy losses built on the Band operator: clip rules, the objective (``policy_loss``), its input checks, per-token
terms, KL estimators, aggregation modes, group advantages, the radius schedule, diagnostics."""

from bandpo.losses.advantages import group_advantages
from bandpo.losses.aggregation import LOSS_AGG_MODES, aggregate, masked_mean
from bandpo.losses.clip_rules import (
    CLIP_RULES,
    AdaptiveBandClip,
    BandClip,
    ClipHigher,
    ClipRule,
    DCPOClip,
    DPPOKLClip,
    DPPOTVClip,
    FixedClip,
    clip_rule_params,
    make_clip_rule,
    register_clip_rule,
)
from bandpo.losses.diagnostics import DIAGNOSTICS, PROB_BINS, basic_clip_metrics, clip_metrics
from bandpo.losses.kl import KL_ESTIMATORS, kl_penalty
from bandpo.losses.method import ClipMethod, clip_method
from bandpo.losses.policy_loss import policy_loss
from bandpo.losses.schedule import (
    RADIUS_SCHEDULES,
    RadiusSchedule,
    check_schedulable,
    radius_schedule,
    rule_at_radius,
    rule_at_step,
)
from bandpo.losses.terms import TokenTerms

__all__ = [
    "CLIP_RULES",
    "DIAGNOSTICS",
    "KL_ESTIMATORS",
    "LOSS_AGG_MODES",
    "PROB_BINS",
    "RADIUS_SCHEDULES",
    "AdaptiveBandClip",
    "BandClip",
    "ClipHigher",
    "ClipMethod",
    "ClipRule",
    "DCPOClip",
    "DPPOKLClip",
    "DPPOTVClip",
    "FixedClip",
    "RadiusSchedule",
    "TokenTerms",
    "aggregate",
    "basic_clip_metrics",
    "check_schedulable",
    "clip_method",
    "clip_metrics",
    "clip_rule_params",
    "group_advantages",
    "kl_penalty",
    "make_clip_rule",
    "masked_mean",
    "policy_loss",
    "radius_schedule",
    "register_clip_rule",
    "rule_at_radius",
    "rule_at_step",
]
