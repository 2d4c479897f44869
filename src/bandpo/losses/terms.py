"""The per-token terms of one batch (:class:`TokenTerms`), the dtype the objective computes them in
(:func:`compute_dtype`), and the metrics an integration logs from them (:func:`framework_metrics`)."""

from __future__ import annotations

import math
from typing import NamedTuple

import torch
from torch import Tensor

from bandpo.losses.clip_rules import ClipRule
from bandpo.losses.diagnostics import DIAGNOSTICS, metrics_to_floats

LOG_RATIO_CLAMP = 20.0
"""The clamp of the log-ratio: ``r = exp(clamp(logp - logp_old, -20, 20))`` (:attr:`TokenTerms.ratio`)."""


def compute_dtype(*tensors: Tensor | None) -> torch.dtype:
    """The dtype the objective is computed in: float64 if any tensor is float64, else float32 (bfloat16 and
    float16 inputs are upcast). ``None`` entries are skipped."""
    out = torch.float32
    for x in tensors:
        if x is not None:
            out = torch.promote_types(out, x.dtype)
    return out


class TokenTerms(NamedTuple):
    """The per-token terms of one batch: the one object bandpo's objective, its diagnostics and every framework
    adapter pass around. All (B, T); float fields in the compute dtype (float32, or float64 for float64 input).
    At padded positions (mask 0) ``per_token_policy_loss`` computes as at a token with old log-prob 0 (p_old = 1)
    and advantage 0: ``loss``, ``log_ratio``, ``advantages`` and ``old_log_prob`` hold 0, ``ratio`` 1, ``lo`` and
    ``hi`` the rule's bounds at p_old = 1 (GRPO's 0.8 and 1.2; Band's upper bound 1), ``dual_active`` False.

    ``per_token_policy_loss`` fills every field but ``entropy``; an adapter whose framework computes the loss
    itself (TRL) builds one with ``loss=None`` and ``dual_active=None`` for the diagnostics.
    """

    loss: Tensor | None  #: per-token objective L (rollout IS weights applied), differentiable w.r.t. log_prob
    ratio: Tensor  #: r = exp(clamp(log_ratio, -20, 20)), detached
    log_ratio: Tensor  #: logp - logp_old, detached (clamped to [-20, 20] by bandpo's objective; TRL's is not)
    lo: Tensor  #: lower ratio bound
    hi: Tensor  #: upper ratio bound
    advantages: Tensor  #: A broadcast to (B, T), detached
    old_log_prob: Tensor  #: log pi_old, detached
    mask: Tensor  #: bool, real response tokens
    #: bool, the constant c binds: the dual clip (A < 0 and L1 > -A c) of the clipped objective, or the
    #: truncation (r > c on tokens inside the region) of the truncated one; None where it is not known
    dual_active: Tensor | None = None
    entropy: Tensor | None = None  #: the policy's per-token entropy, detached, where the caller has it

    def clip_metrics(self, mask: Tensor | None = None, level: str = "full") -> dict[str, Tensor]:
        """The diagnostics of these terms over ``mask`` (default: ``self.mask``) at ``level``, a name in
        :data:`bandpo.losses.DIAGNOSTICS` (``full``: :func:`bandpo.losses.diagnostics.clip_metrics`): detached ()
        tensors in the compute dtype, no host sync."""
        return DIAGNOSTICS.get(level)(
            self.ratio,
            self.lo,
            self.hi,
            self.advantages,
            self.mask if mask is None else mask,
            self.old_log_prob,
            dual_active=self.dual_active,
            log_ratio=self.log_ratio,
        )


_N_REAL = " n_real"  # the real tokens' count, sent with the metrics (no metric has a name with a space)


def framework_metrics(
    terms: TokenTerms,
    names: dict[str, str],
    level: str,
    rule: ClipRule,
    prefix: str = "",
    *,
    extremes_reduced: bool = False,
) -> dict[str, float]:
    """The metrics a policy-loss adapter (verl, SkyRL) returns, as Python floats with one device->host transfer: the
    framework's own metric names mapped to bandpo's values (``names``: framework name -> bandpo name, e.g. verl's
    ``actor/pg_clipfrac`` -> ``clip/frac``), present at every level as the framework's own losses log them (from
    the ``basic`` level where ``level`` has not computed them); ``terms.clip_metrics(level=level)`` under
    ``prefix``; and ``<prefix>band/delta``, the radius the loss used, for a ``rule`` with a radius ``delta``.

    Over a batch with no real token every metric is 0, which a framework that averages its micro-batches' metrics
    (verl) needs. ``extremes_reduced``: the framework reduces the names ending ``_min`` / ``_max`` by min / max over
    micro-batches and ranks (SkyRL), where such a 0 would replace every other micro-batch's extreme (a ``band/hi_min``
    of 0); those are then +inf / -inf, the neutral elements of the two reductions."""
    ours = terms.clip_metrics(level=level)
    have = (
        ours
        if all(name in ours for name in names.values())
        else {**terms.clip_metrics(level="basic"), **ours}
    )
    metrics = {theirs: have[name] for theirs, name in names.items()}
    metrics.update({prefix + name: value for name, value in ours.items()})
    extremes = [k for k in metrics if k.endswith(("_min", "_max"))] if extremes_reduced else []
    if extremes:
        metrics[_N_REAL] = terms.mask.sum()  # in the same transfer
    floats = metrics_to_floats(metrics)
    if extremes and floats.pop(_N_REAL) == 0:
        floats.update({k: math.inf if k.endswith("_min") else -math.inf for k in extremes})
    delta = getattr(rule, "delta", None)
    if isinstance(delta, (int, float)) and not isinstance(delta, bool):
        floats[prefix + "band/delta"] = float(delta)
    return floats
