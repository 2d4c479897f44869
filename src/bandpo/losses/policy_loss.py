"""The BandPO / GRPO / DPPO policy loss with pluggable clip rules, regularisers and the paper's diagnostics.

:func:`policy_loss` returns the loss and its diagnostics; :func:`per_token_policy_loss` the (B, T) loss matrix before
aggregation, for an adapter that aggregates it itself (verl). Each checks its inputs once
(:func:`bandpo.losses.inputs.check_objective_inputs`), then runs :func:`_objective`, the per-token objective with
its formula, just below.
"""

from __future__ import annotations

import torch
from torch import Tensor

from bandpo.losses.aggregation import aggregate, masked_mean
from bandpo.losses.clip_rules import ClipRule
from bandpo.losses.diagnostics import check_diagnostics
from bandpo.losses.inputs import DEFAULT_CLIP_RATIO_C, ObjectiveInputs, check_objective_inputs
from bandpo.losses.kl import kl_penalty
from bandpo.losses.terms import LOG_RATIO_CLAMP, TokenTerms, compute_dtype

__all__ = ["per_token_policy_loss", "policy_loss"]


def _objective(x: ObjectiveInputs) -> TokenTerms:
    """The per-token objective ``L`` (B, T) and its terms, on inputs :func:`check_objective_inputs` has checked.

    With ``A`` the advantage, ``r = exp(clamp(logp - logp_old, -20, 20))`` and ``[lo, hi]`` from the clip rule, one of
    two objectives (docs/method.md#objective). The clipped ratio (every rule but DPPO's):

        L1 = max(-A r, -A clamp(r, lo, hi))
        L  = min(L1, -A c)   if A < 0   (dual clip, c = clip_ratio_c)
        L  = L1              otherwise

    The upper bound binds only for ``A > 0`` and the lower only for ``A < 0``; a binding bound zeroes that token's
    gradient. The truncated importance weight (DPPO; the rule's ``truncation_c``, or ``truncation_c=`` for any rule):

        L  = -A sg(min(r, c)) logp   if the token is inside the trust region (``A > 0``: ``up_ok``, else
                                     ``down_ok``, from ``clip_rule.region_masks``; default r <= hi / r >= lo)
        L  = 0                       otherwise                                 (no dual clip, c = truncation_c)

    Inside the region both have the gradient ``-A min(r, c) grad logp`` (the clipped one: ``-A r grad logp``, capped
    only for ``A < 0`` by the dual clip, which zeroes it past ``c`` where DPPO keeps ``-A c grad logp``). Rollout
    importance weights multiply ``L``. Computed in :func:`compute_dtype` of the inputs (at least float32, like verl's
    ``vanilla`` loss, whose float32 old log-probs and advantages promote a bfloat16 ``log_prob``); a lower-precision
    ``log_prob`` is upcast differentiably, so its gradient comes back in its own dtype.
    """
    log_prob, rule, mask = x.log_prob, x.clip_rule, x.mask
    cdt = compute_dtype(log_prob, x.old_log_prob, x.advantages, x.rollout_is_weights)
    zero = torch.zeros((), dtype=cdt, device=log_prob.device)
    # Padded positions may hold anything: replace them before any arithmetic so no NaN reaches the graph.
    logp = torch.where(mask, log_prob.to(cdt), zero)  # differentiable upcast
    old = torch.where(mask, x.old_log_prob.detach().to(cdt), zero)
    adv = torch.where(mask, x.advantages.detach().to(cdt), zero)

    ent = torch.where(mask, x.entropy.detach().to(cdt), zero) if rule.needs_entropy else None
    lo, hi = rule.bounds(old, ent)
    lo, hi = lo.to(cdt), hi.to(cdt)
    log_ratio = torch.clamp(logp - old, -LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
    ratio = torch.exp(log_ratio)
    if x.truncation_c is not None:  # DPPO: -A sg(min(r, c)) logp inside the region, 0 outside
        r = ratio.detach()
        up_ok, down_ok = rule.region_masks(logp.detach(), old, r, lo, hi)
        keep = torch.where(adv > 0, up_ok, down_ok) & mask
        loss = torch.where(keep, -adv * torch.clamp(r, max=x.truncation_c) * logp, zero)
        dual_active = keep & (r > x.truncation_c)
    else:
        neg_adv = -adv  # once: each use below is the same product as with -adv spelled out
        loss = torch.maximum(neg_adv * ratio, neg_adv * torch.clamp(ratio, lo, hi))  # L1
        if x.clip_ratio_c is not None:
            negative = adv < 0
            dual = torch.minimum(loss, neg_adv * x.clip_ratio_c)
            dual_active = negative & (dual < loss)
            loss = torch.where(negative, dual, loss)
        else:
            dual_active = torch.zeros_like(mask)
    if x.rollout_is_weights is not None:
        loss = loss * torch.where(mask, x.rollout_is_weights.detach().to(cdt), zero)
    return TokenTerms(loss, ratio.detach(), log_ratio.detach(), lo, hi, adv, old, mask, dual_active)


def per_token_policy_loss(
    log_prob: Tensor,
    old_log_prob: Tensor,
    advantages: Tensor,
    response_mask: Tensor,
    clip_rule: ClipRule,
    *,
    clip_ratio_c: float | None = DEFAULT_CLIP_RATIO_C,
    truncation_c: float | None = None,
    rollout_is_weights: Tensor | None = None,
    entropy: Tensor | None = None,
) -> TokenTerms:
    """The per-token loss matrix of ``bandpo.policy_loss`` before aggregation (the formula: :func:`_objective`).

    :func:`policy_loss` aggregates it (before its regularisers); the verl adapter aggregates it with verl's own
    ``agg_loss``. Arguments, shapes, dtypes and errors: :func:`policy_loss`'s (the objective's ones), with the same
    checks and messages, except that no value is checked here (no host sync: a NaN at a real token gives a NaN
    loss). Computed in :func:`~bandpo.losses.terms.compute_dtype` of the inputs (at least float32).
    """
    x = check_objective_inputs(
        log_prob,
        old_log_prob,
        advantages,
        response_mask,
        clip_rule,
        clip_ratio_c=clip_ratio_c,
        truncation_c=truncation_c,
        rollout_is_weights=rollout_is_weights,
        entropy=entropy,
    )
    return _objective(x)


def policy_loss(
    log_prob: Tensor,
    old_log_prob: Tensor,
    advantages: Tensor,
    response_mask: Tensor,
    clip_rule: ClipRule | str = "band",
    *,
    loss_agg_mode: str = "seq-mean-token-mean",
    clip_ratio_c: float | None = DEFAULT_CLIP_RATIO_C,
    truncation_c: float | None = None,
    rollout_is_weights: Tensor | None = None,
    ref_log_prob: Tensor | None = None,
    kl_coef: float = 0.0,
    kl_estimator: str = "low_var_kl",
    entropy: Tensor | None = None,
    entropy_coef: float = 0.0,
    check_values: bool = True,
    diagnostics: str = "full",
) -> tuple[Tensor, dict[str, Tensor]]:
    """Policy-gradient loss (:func:`_objective`'s clipped or truncated objective, aggregated) and its diagnostics.

    Values accepted at real tokens (``response_mask`` 1), checked with ``check_values=True`` (the default; all in
    one device->host sync, the only one of the call): ``log_prob`` and ``ref_log_prob`` finite and ``<= 0``
    (``-inf`` made the loss or its KL term infinite); ``old_log_prob`` in ``[-inf, 0]`` (as
    :func:`bandpo.band_bounds`; ``-inf``, probability 0 under the behaviour policy, gives the ratio its clamp
    ``e^20``); ``advantages`` finite; ``rollout_is_weights`` finite and ``>= 0`` (a NaN weight made the loss NaN, a
    negative one flipped the token's sign); ``entropy`` finite (NaN made the bonus and an entropy-driven rule's
    bounds NaN). With ``check_values=False`` (and in :func:`per_token_policy_loss`, which never syncs) none of
    these is checked: a NaN there gives a NaN loss. Positions where the mask is 0 are never read: padding may hold
    anything (NaN, +-inf, positive values), as verl and TRL leave it.

    Args:
        log_prob: (B, T) float (float16, bfloat16, float32 or float64), log pi_theta of the sampled tokens
            (differentiable; a lower-precision one is upcast, its gradient comes back in its own dtype), finite
            and <= 0.
        old_log_prob: (B, T) float, log pi_old (the behaviour policy of the update; detached here), in
            [-inf, 0].
        advantages: (B,), (B, 1) or (B, T) float, finite; (B,) and (B, 1) apply to every token of the row.
        response_mask: (B, T) bool or 0/1 float/int, real response tokens. Masked-out positions may hold anything.
        clip_rule: a ``ClipRule`` (the ratio bounds from the old log-probabilities and, for the truncated
            objective, the trust-region test ``region_masks``) or a registered name (built with defaults).
        loss_agg_mode: one of ``LOSS_AGG_MODES.names()``.
        clip_ratio_c: dual-clip constant (> 1) for negative advantages (default 10); ``None`` disables dual clip.
            The truncated objective has no dual clip (DPPO's rules carry their own ``truncation_c``, its ``c``):
            with it, any other ``clip_ratio_c`` passed raises ``ValueError`` instead of being ignored.
        truncation_c: > 1: the truncated objective with this ``c`` for any rule (e.g. Band); ``None``: the rule's
            (DPPO's rules: theirs; the others: ``None``, the clipped objective).
        rollout_is_weights: (B, T) float, truncated importance weights (e.g. vLLM/trainer mismatch), detached;
            finite and >= 0.
        ref_log_prob: (B, T) float, reference policy log-probs for the KL penalty (needed when kl_coef > 0),
            finite and <= 0.
        kl_coef, kl_estimator: KL penalty coefficient and estimator (``KL_ESTIMATORS.names()``).
        entropy: (B, T) float, per-token policy entropy; logged, used by entropy-driven rules, and the bonus;
            finite.
        entropy_coef: entropy bonus coefficient (the loss subtracts ``entropy_coef * agg(entropy)``); > 0 needs
            ``entropy``.
        check_values: raise ``ValueError`` on values outside those above at real tokens, or a mask that is not
            0/1 (one device->host sync); ``False`` skips it (shape, dtype and name checks always run).
        diagnostics: how many clipping diagnostics to compute, a name in ``DIAGNOSTICS.names()``: ``full``
            (default: every ``clip/``, ``band/`` and ``policy/`` metric below), ``basic`` (``clip/frac``,
            ``clip/frac_up``, ``clip/frac_down``, ``clip/frac_dual``, ``policy/ppo_kl``: what verl's and TRL's own
            losses log, the same values) or ``none``; the loss is the same at every level.

    Raises:
        TypeError: a tensor argument (the optional ones where passed) that is not a floating-point tensor (the
            mask: not a tensor of bool, integer or float dtype); a ``clip_rule`` that is neither a ``ClipRule``
            nor a registered name.
        ValueError: every other bad argument (shapes, names, constants, a missing entropy for an entropy-driven
            rule, a ``clip_ratio_c`` passed with the truncated objective that differs from its ``c``, values with
            ``check_values``), naming it, its value and what is allowed.

    Returns:
        ``(loss, metrics)``: () loss in the compute dtype (float32, float64 for float64 input;
        :func:`_objective`); metrics maps names (``clip/...``, ``band/...``, ``policy/...``,
        ``tokens/share/...`` and ``side/...`` at the ``full`` level, ``loss/...``) to detached () tensors, with no
        host sync (docs/method.md#metrics).
    """
    x = check_objective_inputs(
        log_prob,
        old_log_prob,
        advantages,
        response_mask,
        clip_rule,
        clip_ratio_c=clip_ratio_c,
        truncation_c=truncation_c,
        rollout_is_weights=rollout_is_weights,
        entropy=entropy,
        loss_agg_mode=loss_agg_mode,
        ref_log_prob=ref_log_prob,
        kl_coef=kl_coef,
        kl_estimator=kl_estimator,
        entropy_coef=entropy_coef,
        check_values=check_values,
    )
    diagnostics = check_diagnostics("diagnostics", diagnostics)  # before any work
    terms = _objective(x)
    mask = x.mask
    cdt = terms.loss.dtype  # compute_dtype of the inputs: at least float32
    zero = torch.zeros((), dtype=cdt, device=log_prob.device)
    # loss = agg(L) + kl_coef * agg(KL(pi || pi_ref)) - entropy_coef * agg(entropy), agg: loss_agg_mode
    pg_loss = aggregate(terms.loss, mask, loss_agg_mode)
    loss = pg_loss
    metrics: dict[str, Tensor] = {"loss/policy": pg_loss.detach()}
    if ref_log_prob is not None:
        logp = torch.where(mask, log_prob.to(cdt), zero)
        ref = torch.where(mask, ref_log_prob.detach().to(cdt), zero)
        kl = aggregate(kl_penalty(logp, ref, kl_estimator), mask, loss_agg_mode)
        loss = loss + kl_coef * kl
        metrics["loss/kl"] = kl.detach()
    if entropy is not None:
        ent = torch.where(mask, entropy.to(cdt), zero)
        ent_agg = aggregate(ent, mask, loss_agg_mode)
        if entropy_coef > 0:
            loss = loss - entropy_coef * ent_agg
        metrics["loss/entropy"] = ent_agg.detach()
        metrics["policy/entropy"] = masked_mean(ent.detach(), mask)
    metrics["loss/total"] = loss.detach()
    metrics.update(terms.clip_metrics(mask, diagnostics))
    return loss, metrics
