"""bandpo: Band-constrained Policy Optimization.

PPO/GRPO clip the token ratio ``r = pi_new / pi_old`` to a fixed ``[1-eps, 1+eps]``; BandPO replaces it with
per-token bounds from projecting an f-divergence trust region of radius ``delta`` onto the sampled token.

Dimension letters used in docstrings: ``B`` batch (sequences), ``T`` response length (tokens), ``G`` group
size (completions per prompt), ``N`` any flattened token count, ``...`` any shape.
"""

from bandpo.core import DIVERGENCES, Divergence, band_bounds, get_divergence, register_divergence
from bandpo.losses import (
    CLIP_RULES,
    LOSS_AGG_MODES,
    ClipRule,
    clip_metrics,
    group_advantages,
    make_clip_rule,
    policy_loss,
    register_clip_rule,
)

__version__ = "0.1.0"

__all__ = [
    "CLIP_RULES",
    "DIVERGENCES",
    "LOSS_AGG_MODES",
    "ClipRule",
    "Divergence",
    "__version__",
    "band_bounds",
    "clip_metrics",
    "get_divergence",
    "group_advantages",
    "make_clip_rule",
    "policy_loss",
    "register_clip_rule",
    "register_divergence",
]
