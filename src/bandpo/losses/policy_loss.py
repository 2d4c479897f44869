"""The BandPO / GRPO / DPPO policy loss with pluggable clip rules, regularisers and the paper's diagnostics.

Per token (docs/method.md#objective), with ``A`` the advantage, ``r = exp(clamp(logp - logp_old, -20, 20))`` and
``[lo, hi]`` from the clip rule, one of two objectives. The clipped ratio (every rule but DPPO's):

    L1 = max(-A r, -A clamp(r, lo, hi))
    L  = min(L1, -A c)   if A < 0   (dual clip, c = clip_ratio_c)
    L  = L1              otherwise

The upper bound binds only for ``A > 0`` and the lower only for ``A < 0``; a binding bound zeroes that token's
gradient. The truncated importance weight (DPPO; the rule's ``truncation_c``, or ``truncation_c=`` for any rule):

    L  = -A sg(min(r, c)) logp   if the token is inside the trust region (``A > 0``: ``up_ok``, else
                                 ``down_ok``, from ``clip_rule.region_masks``; default r <= hi / r >= lo)
    L  = 0                       otherwise                                 (no dual clip, c = truncation_c)

Inside the region both objectives have the gradient ``-A min(r, c) grad logp`` (the clipped one: ``-A r grad logp``,
capped only for ``A < 0`` by the dual clip, which zeroes it past ``c`` where DPPO keeps ``-A c grad logp``).
Optional: truncated importance weights multiply ``L``; a KL penalty to a reference policy and an entropy bonus
are added after aggregation with their coefficients.

Precision: the objective is computed in at least float32 whatever the input dtype (float64 if any input is
float64), like verl's ``vanilla`` loss, whose float32 old log-probs and advantages promote a bfloat16
``log_prob``. Low-precision ``log_prob`` is upcast with a differentiable cast, so its gradient comes back in its
own dtype; the loss and the metrics are in the compute dtype.
"""

from __future__ import annotations

from collections.abc import Callable
from numbers import Real
from typing import NamedTuple

import torch
from torch import Tensor

from bandpo.core.checks import FLOAT_DTYPES, check_float_tensor
from bandpo.losses.aggregation import LOSS_AGG_MODES, aggregate, masked_mean
from bandpo.losses.clip_rules import CLIP_RULES, ClipRule, make_clip_rule
from bandpo.losses.diagnostics import DIAGNOSTICS, check_diagnostics
from bandpo.registry import Registry
from bandpo.validation import check_number_above, check_positive_number

LOG_RATIO_CLAMP = 20.0

KLEstimator = Callable[[Tensor, Tensor], Tensor]
"""``(log_prob, ref_log_prob) -> `` per-token estimate of KL(pi || pi_ref); (B, T) float -> (B, T) float."""

KL_ESTIMATORS: Registry[KLEstimator] = Registry("kl estimator")
"""verl's KL estimators (with verl's aliases); each entry is the estimator itself (:func:`kl_penalty`)."""


@KL_ESTIMATORS.decorator("k1", aliases=("kl",))
def _kl_k1(log_prob: Tensor, ref_log_prob: Tensor) -> Tensor:
    """log pi - log pi_ref (unbiased, can be negative)."""
    return log_prob - ref_log_prob


@KL_ESTIMATORS.decorator("k2", aliases=("mse",))
def _kl_k2(log_prob: Tensor, ref_log_prob: Tensor) -> Tensor:
    """(log pi - log pi_ref)^2 / 2."""
    diff = log_prob - ref_log_prob
    return 0.5 * diff * diff


@KL_ESTIMATORS.decorator("k3", aliases=("low_var_kl",))
def _kl_k3(log_prob: Tensor, ref_log_prob: Tensor) -> Tensor:
    """exp(ref - logp) - (ref - logp) - 1, clamped to [-10, 10] (verl's ``low_var_kl``)."""
    neg = torch.clamp(-(log_prob - ref_log_prob), -LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
    return torch.clamp(torch.exp(neg) - neg - 1.0, -10.0, 10.0)


def kl_penalty(log_prob: Tensor, ref_log_prob: Tensor, estimator: str = "low_var_kl") -> Tensor:
    """Per-token estimate of KL(pi || pi_ref) from sampled tokens; (B, T) -> (B, T).

    k1 = logp - ref; k2 = (logp - ref)^2 / 2; k3 (low_var_kl) = exp(ref - logp) - (ref - logp) - 1, clamped
    to [-10, 10] like verl. ``estimator``: one of ``KL_ESTIMATORS`` (names or aliases).
    """
    return KL_ESTIMATORS.get(estimator)(log_prob, ref_log_prob)


def compute_dtype(*tensors: Tensor | None) -> torch.dtype:
    """The dtype the objective is computed in: float64 if any tensor is float64, else float32 (bfloat16 and
    float16 inputs are upcast). ``None`` entries are skipped."""
    out = torch.float32
    for x in tensors:
        if x is not None:
            out = torch.promote_types(out, x.dtype)
    return out


class _ObjectiveInputs(NamedTuple):
    """The objective's inputs after :func:`_check_objective_inputs`: shapes agree, names resolved."""

    log_prob: Tensor  #: (B, T) float
    old_log_prob: Tensor  #: (B, T) float
    advantages: Tensor  #: (B, T) float (a (B,) or (B, 1) input broadcast)
    mask: Tensor  #: (B, T) bool, real response tokens
    clip_rule: ClipRule
    clip_ratio_c: float | None
    truncation_c: float | None  #: the objective's c: the argument, else the rule's (None: clipped objective)
    rollout_is_weights: Tensor | None  #: (B, T) float
    entropy: Tensor | None  #: (B, T) float; present whenever the rule needs it
    ref_log_prob: Tensor | None  #: (B, T) float


class _DefaultClipRatioC(float):
    """The type of :data:`DEFAULT_CLIP_RATIO_C`: a float that tells the default from a value the caller passed."""


DEFAULT_CLIP_RATIO_C: float = _DefaultClipRatioC(10.0)
"""The default dual-clip constant ``clip_ratio_c`` of :func:`policy_loss` and :func:`per_token_policy_loss`: 10.0.
The truncated objective (DPPO) has no dual clip, so it refuses any other ``clip_ratio_c`` passed with it."""


def _passed(clip_ratio_c: float | None) -> bool:
    """Whether the caller set ``clip_ratio_c`` (neither the default nor ``None``)."""
    return clip_ratio_c is not None and not isinstance(clip_ratio_c, _DefaultClipRatioC)


def _check_like_log_prob(name: str, x: Tensor | None, log_prob: Tensor) -> None:
    if x is not None and x.shape != log_prob.shape:
        raise ValueError(f"{name} shape {tuple(x.shape)} must equal log_prob shape {tuple(log_prob.shape)}")


MASK_DTYPES = (
    torch.bool,
    torch.uint8,
    torch.int8,
    torch.int16,
    torch.int32,
    torch.int64,
    *FLOAT_DTYPES,
)
"""The dtypes ``response_mask`` may have: bool, or 0/1 integers or floats."""


def _check_mask(response_mask: object) -> None:
    """``response_mask`` must be a tensor of one of :data:`MASK_DTYPES` (not a list, not complex numbers)."""
    allowed = "a torch.Tensor of bool, integer or float dtype (1 at real response tokens, 0 elsewhere)"
    if not isinstance(response_mask, Tensor):
        raise TypeError(f"response_mask must be {allowed}, got {type(response_mask).__name__}")
    if response_mask.dtype not in MASK_DTYPES:
        raise TypeError(f"response_mask must be {allowed}, got dtype {response_mask.dtype}")


def _check_devices(**tensors: Tensor | None) -> None:
    """The tensors passed (``None``: not passed) must be on one device, and not the meta device (shapes without
    values): torch's own errors came from deep in the objective. No host sync (devices are metadata).

    Raises:
        ValueError: naming each argument and its device.
    """
    on = {name: x.device for name, x in tensors.items() if x is not None}
    if len(set(on.values())) > 1:
        listed = ", ".join(f"{name} on {device}" for name, device in on.items())
        raise ValueError(f"the tensor arguments must be on one device, got {listed}")
    meta = [name for name, device in on.items() if device.type == "meta"]
    if meta:
        raise ValueError(
            f"{', '.join(meta)} are on the meta device, which holds shapes but no values: pass tensors with values "
            "(on the model's device)"
        )


def _check_objective_inputs(
    log_prob: Tensor,
    old_log_prob: Tensor,
    advantages: Tensor,
    response_mask: Tensor,
    clip_rule: ClipRule | str,
    *,
    clip_ratio_c: float | None,
    truncation_c: float | None,
    rollout_is_weights: Tensor | None,
    entropy: Tensor | None,
    loss_agg_mode: str | None = None,
    ref_log_prob: Tensor | None = None,
    kl_coef: float = 0.0,
    kl_estimator: str = "low_var_kl",
    entropy_coef: float = 0.0,
    check_values: bool = False,
) -> _ObjectiveInputs:
    """The one check of the objective's inputs, run once by each entry point (:func:`per_token_policy_loss`,
    :func:`policy_loss`); arguments as theirs. Shape, dtype and name checks always run; ``check_values`` adds
    the checks that sync with the host (a 0/1 mask, finite values at real tokens).

    Raises:
        TypeError: a ``log_prob``, ``old_log_prob`` or ``advantages``, or a ``rollout_is_weights``, ``entropy`` or
            ``ref_log_prob`` passed, that is not a floating-point tensor; a ``response_mask`` that is not a tensor
            of :data:`MASK_DTYPES`; a ``clip_rule`` that is neither a registered name nor a ``ClipRule``.
        ValueError: every other bad input, naming the argument, its value and what is allowed (tensors on
            different devices or on the meta device: each argument and its device).
    """
    for name, x in (("log_prob", log_prob), ("old_log_prob", old_log_prob), ("advantages", advantages)):
        check_float_tensor(name, x)
    if log_prob.dim() != 2:
        raise ValueError(f"log_prob must have shape (B, T), got {tuple(log_prob.shape)}")
    _check_like_log_prob("old_log_prob", old_log_prob, log_prob)
    _check_mask(response_mask)
    _check_like_log_prob("response_mask", response_mask, log_prob)
    if advantages.shape == log_prob.shape[:1]:
        advantages = advantages.unsqueeze(-1).expand_as(log_prob)  # (B,) -> (B, T)
    elif advantages.shape == (log_prob.shape[0], 1):
        advantages = advantages.expand_as(log_prob)  # (B, 1), TRL's adv[:, None] -> (B, T)
    elif advantages.shape != log_prob.shape:
        raise ValueError(
            f"advantages shape {tuple(advantages.shape)} must be (B,), (B, 1) or (B, T) with (B, T) = "
            f"{tuple(log_prob.shape)}"
        )
    if loss_agg_mode is not None:
        LOSS_AGG_MODES.canonical(loss_agg_mode)
    if isinstance(clip_rule, str):
        rule = make_clip_rule(clip_rule)
    elif isinstance(clip_rule, ClipRule):
        rule = clip_rule
    else:
        raise TypeError(
            f"clip_rule must be a registered clip rule name ({', '.join(CLIP_RULES.names())}) or a ClipRule "
            f"(bandpo.make_clip_rule(name, **params)), got {type(clip_rule).__name__} {clip_rule!r}"
        )
    if clip_ratio_c is not None and not (
        isinstance(clip_ratio_c, Real) and not isinstance(clip_ratio_c, bool) and clip_ratio_c > 1.0
    ):
        raise ValueError(
            f"clip_ratio_c must be a number > 1 (or None to disable dual clip), got {clip_ratio_c!r}"
        )
    passed_c = truncation_c is not None
    truncation_c = check_number_above("truncation_c", truncation_c, 1.0) if passed_c else rule.truncation_c
    if truncation_c is not None and _passed(clip_ratio_c) and clip_ratio_c != truncation_c:
        source, how = (  # built only for the message (describe() formats every parameter)
            (f"truncation_c={truncation_c:g}", "truncation_c")
            if passed_c
            else (
                f"clip rule {rule.describe()}",
                f"the rule's truncation_c, e.g. make_clip_rule({rule.name!r}, truncation_c=...)",
            )
        )
        raise ValueError(
            f"clip_ratio_c={clip_ratio_c!r} has no effect on the truncated objective of {source} (its c is "
            f"{truncation_c:g}; it has no dual clip): set c with {how} and leave clip_ratio_c unset (or equal to c)"
        )
    clip_ratio_c = None if clip_ratio_c is None else float(clip_ratio_c)
    kl_coef = check_positive_number("kl_coef", kl_coef, allow_zero=True)
    entropy_coef = check_positive_number("entropy_coef", entropy_coef, allow_zero=True)
    KL_ESTIMATORS.canonical(kl_estimator)
    if kl_coef > 0 and ref_log_prob is None:
        raise ValueError("kl_coef > 0 needs ref_log_prob (B, T)")
    if entropy_coef > 0 and entropy is None:  # the bonus would be dropped
        raise ValueError(
            "entropy_coef > 0 needs entropy (B, T), the policy's per-token entropy: pass entropy=... or set "
            "entropy_coef=0"
        )
    for name, x in (
        ("rollout_is_weights", rollout_is_weights),
        ("ref_log_prob", ref_log_prob),
        ("entropy", entropy),
    ):
        if x is not None:
            check_float_tensor(name, x)
            _check_like_log_prob(name, x, log_prob)
    _check_devices(
        log_prob=log_prob,
        old_log_prob=old_log_prob,
        advantages=advantages,
        response_mask=response_mask,
        rollout_is_weights=rollout_is_weights,
        ref_log_prob=ref_log_prob,
        entropy=entropy,
    )
    if rule.needs_entropy and entropy is None:
        raise ValueError(
            f"clip rule {rule.name!r} needs the per-token entropy of the policy: pass entropy=(B, T) float, "
            "got None"
        )

    mask = response_mask if response_mask.dtype == torch.bool else response_mask != 0
    if check_values:
        _check_values(
            response_mask, mask, log_prob, old_log_prob, advantages, ref_log_prob, rollout_is_weights, entropy
        )
    return _ObjectiveInputs(
        log_prob,
        old_log_prob,
        advantages,
        mask,
        rule,
        clip_ratio_c,
        truncation_c,
        rollout_is_weights,
        entropy,
        ref_log_prob,
    )


def _check_values(
    response_mask: Tensor,
    mask: Tensor,
    log_prob: Tensor,
    old_log_prob: Tensor,
    advantages: Tensor,
    ref_log_prob: Tensor | None,
    rollout_is_weights: Tensor | None = None,
    entropy: Tensor | None = None,
) -> None:
    """``policy_loss(check_values=True)``: the values the objective accepts at real tokens (``mask`` true), in
    one device->host sync. Positions where the mask is 0 are never read, so they may hold anything.

    ``log_prob`` and ``ref_log_prob``: finite log-probabilities, ``<= 0`` (``-inf`` would make the loss or its
    KL term infinite). ``old_log_prob``: ``[-inf, 0]`` as ``band_bounds`` accepts (``-inf``: the behaviour
    policy gave the token probability 0; its ratio is clamped at ``e^20``). ``advantages``: finite.
    ``rollout_is_weights`` (where passed): finite and ``>= 0`` (NaN made the loss NaN, a negative weight flipped
    the token's sign). ``entropy`` (where passed): finite (NaN made the bonus and an entropy-driven rule's bounds
    NaN). ``response_mask``: bool, or numbers 0 and 1.

    Raises:
        ValueError: naming the first argument that holds another value, how many, and one of them.
    """
    lp_bad = "finite log-probabilities <= 0"
    checks: list[tuple[str, Tensor | None, str, Tensor]] = [
        (
            "response_mask",
            None,
            "only 0 and 1 (or be a bool tensor)",
            (response_mask != 0) & (response_mask != 1),
        ),
        ("log_prob", log_prob, lp_bad, ~torch.isfinite(log_prob) | (log_prob > 0)),
        (
            "old_log_prob",
            old_log_prob,
            "log-probabilities in [-inf, 0] (-inf: probability 0; no NaN, +inf or positive values)",
            torch.isnan(old_log_prob) | (old_log_prob > 0),
        ),
        ("advantages", advantages, "finite numbers", ~torch.isfinite(advantages)),
    ]
    if ref_log_prob is not None:
        checks.append(
            ("ref_log_prob", ref_log_prob, lp_bad, ~torch.isfinite(ref_log_prob) | (ref_log_prob > 0))
        )
    if rollout_is_weights is not None:
        w = rollout_is_weights
        checks.append(("rollout_is_weights", w, "finite numbers >= 0", ~torch.isfinite(w) | (w < 0)))
    if entropy is not None:
        checks.append(("entropy", entropy, "finite numbers", ~torch.isfinite(entropy)))
    bad = [b if x is None else b & mask for _, x, _, b in checks]
    counts = torch.stack([b.sum() for b in bad]).tolist()  # the one host sync
    for (name, x, allowed, _), b, n in zip(checks, bad, counts):
        if n:
            where = "" if x is None else " at real tokens (response_mask = 1)"
            example = "" if x is None else f", e.g. {x[b].reshape(-1)[0].item()!r}"
            raise ValueError(f"{name} must hold {allowed}{where}; found {n} other value(s){example}")


class TokenTerms(NamedTuple):
    """The per-token terms of one batch: the one object bandpo's objective, its diagnostics and every framework
    adapter pass around. All (B, T); float fields in the compute dtype (float32, or float64 for float64 input).
    At padded positions (mask 0) :func:`per_token_policy_loss` computes as at a token with old log-prob 0 (p_old = 1)
    and advantage 0: ``loss``, ``log_ratio``, ``advantages`` and ``old_log_prob`` hold 0, ``ratio`` 1, ``lo`` and
    ``hi`` the rule's bounds at p_old = 1 (GRPO's 0.8 and 1.2; Band's upper bound 1), ``dual_active`` False.

    :func:`per_token_policy_loss` fills every field but ``entropy``; an adapter whose framework computes the loss
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


def framework_metrics(
    terms: TokenTerms, names: dict[str, str], level: str
) -> tuple[dict[str, Tensor], dict[str, Tensor]]:
    """The metrics an integration logs: ``(theirs, ours)``, where ``theirs`` maps the framework's own metric names
    to bandpo's values (``names``: framework name -> bandpo name, e.g. verl's ``actor/pg_clipfrac`` ->
    ``clip/frac``), present at every level as the framework's own losses log them, and ``ours`` is
    ``terms.clip_metrics(level=level)``. Names that ``level`` does not compute come from the ``basic`` level
    (detached () tensors)."""
    ours = terms.clip_metrics(level=level)
    have = (
        ours
        if all(name in ours for name in names.values())
        else {**terms.clip_metrics(level="basic"), **ours}
    )
    return {theirs: have[name] for theirs, name in names.items()}, ours


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
    """The per-token loss matrix of ``bandpo.policy_loss`` before aggregation (module docstring formula).

    :func:`policy_loss` aggregates it (before its regularisers); the verl adapter aggregates it with verl's own
    ``agg_loss``. Both check their inputs once, with the same checks and messages.

    Computed in :func:`compute_dtype` of the inputs (at least float32); ``log_prob`` of a lower precision is
    upcast differentiably, so its gradient arrives in its own dtype.

    Args:
        log_prob: (B, T) float (any of float16/bfloat16/float32/float64), log pi_theta of the sampled tokens
            (differentiable).
        old_log_prob: (B, T) float, log pi_old (detached here).
        advantages: (B,), (B, 1) (TRL's ``adv[:, None]``) or (B, T) float (detached here); (B,) and (B, 1) apply
            to every token of the row.
        response_mask: (B, T) bool or 0/1 float/int, real response tokens; padded positions may hold anything.
            Values are not checked here (no host sync): :func:`policy_loss`'s ``check_values`` lists the ones the
            objective accepts.
        clip_rule: a ``ClipRule`` giving the ratio bounds from the old log-probabilities (and, for the truncated
            objective, the trust-region test ``region_masks``).
        clip_ratio_c: dual-clip constant > 1 for negative advantages (default 10); ``None`` disables the dual
            clip. The truncated objective has no dual clip: with it, a ``clip_ratio_c`` other than its ``c`` (or
            ``None``) raises ``ValueError`` instead of being ignored (its ``c`` is the rule's or ``truncation_c``).
        truncation_c: > 1: use the truncated objective with this ``c`` whatever the rule; ``None`` (default): the
            rule's ``truncation_c`` (DPPO's rules: theirs; the others: ``None``, the clipped objective).
        rollout_is_weights: (B, T) float, rollout importance weights multiplying L (detached here).
        entropy: (B, T) float, per-token policy entropy, for entropy-driven clip rules (detached here).

    Raises:
        TypeError: a tensor argument that is not a floating-point tensor (``rollout_is_weights`` and ``entropy``
            where passed; the mask: not a tensor of bool, integer or float dtype); a ``clip_rule`` that is neither
            a ``ClipRule`` nor a registered name.
        ValueError: on shapes that do not match ``log_prob`` (B, T), ``clip_ratio_c <= 1`` or
            ``truncation_c <= 1``, a ``clip_ratio_c`` passed with the truncated objective that differs from its
            ``c``, a missing entropy for an entropy-driven rule.
    """
    x = _check_objective_inputs(
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
    return _token_terms(x)


def _token_terms(x: _ObjectiveInputs) -> TokenTerms:
    """:func:`per_token_policy_loss` on inputs :func:`_check_objective_inputs` has checked (no checks here)."""
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
    """Policy-gradient loss (the module docstring's clipped or truncated objective) and its diagnostics.

    Values accepted at real tokens (``response_mask`` 1), checked with ``check_values=True`` (the default; all in
    one device->host sync, the only one of the call): ``log_prob`` and ``ref_log_prob`` finite and ``<= 0``;
    ``old_log_prob`` in ``[-inf, 0]`` (as :func:`bandpo.band_bounds`; ``-inf``, probability 0 under the behaviour
    policy, gives the ratio its clamp ``e^20``); ``advantages`` finite; ``rollout_is_weights`` finite and ``>= 0``
    (a NaN weight made the loss NaN, a negative one flipped the token's sign); ``entropy`` finite. With
    ``check_values=False`` (and in :func:`per_token_policy_loss`, which never syncs) none of these is checked: a
    NaN there gives a NaN loss. Positions where the mask is 0 are never read: padding may hold anything (NaN, +-inf, positive
    values), as verl and TRL leave it.

    Args:
        log_prob: (B, T) float, log pi_theta of the sampled tokens (differentiable), finite and <= 0.
        old_log_prob: (B, T) float, log pi_old (the behaviour policy of the update; detached here), in
            [-inf, 0].
        advantages: (B,), (B, 1) or (B, T) float, finite; (B,) and (B, 1) apply to every token of the row.
        response_mask: (B, T) bool or 0/1, real response tokens. Masked-out positions may hold anything.
        clip_rule: a ``ClipRule`` or a registered name (built with defaults).
        loss_agg_mode: one of ``LOSS_AGG_MODES.names()``.
        clip_ratio_c: dual-clip constant (> 1) for negative advantages (default 10); ``None`` disables dual clip.
            The truncated objective has no dual clip (DPPO's rules carry their own ``truncation_c``, its ``c``):
            with it, any other ``clip_ratio_c`` passed raises ``ValueError`` instead of being ignored.
        truncation_c: > 1: the truncated objective with this ``c`` for any rule (e.g. Band); ``None``: the rule's.
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
        ValueError: every other bad argument (shapes, names, constants, values with ``check_values``), naming
            it, its value and what is allowed.

    Returns:
        ``(loss, metrics)``: () loss in the compute dtype (float32, float64 for float64 input; the module
        docstring); metrics maps names (``clip/...``, ``band/...``, ``policy/...``,
        ``loss/...``) to detached () tensors, with no host sync.
    """
    x = _check_objective_inputs(
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
    terms = _token_terms(x)
    mask = x.mask
    cdt = terms.loss.dtype  # compute_dtype of the inputs: at least float32
    zero = torch.zeros((), dtype=cdt, device=log_prob.device)
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


def group_advantages(
    rewards: Tensor,
    group_size: int,
    normalize_std: bool = True,
    eps: float = 1e-6,
    *,
    check_values: bool = True,
) -> Tensor:
    """GRPO advantages: ``(r - mean_group) / (std_group + eps)``.

    Args:
        rewards: (B,) float, integer or bool (cast to float32), with B = n_groups * G and each group's G
            completions contiguous; finite (one NaN or inf made its whole group NaN).
        group_size: G >= 1.
        normalize_std: divide by the group's (unbiased) standard deviation (Dr. GRPO: False).
        eps: added to the std.
        check_values: refuse a NaN or infinite reward (one device->host sync); ``False`` skips it.

    Returns:
        (B,) float advantages (float32 for integer or bool rewards, else the rewards' dtype). Groups whose rewards
        are all equal get exactly 0 (no signal, no 1/eps blow-up); G = 1 gives 0.

    Raises:
        TypeError: ``rewards`` not a tensor of a float, integer or bool dtype.
        ValueError: a bad shape, ``group_size`` or ``eps``; with ``check_values``, a non-finite reward, naming the
            first (index and value) and how many.
    """
    if isinstance(rewards, Tensor) and not rewards.dtype.is_floating_point and not rewards.dtype.is_complex:
        rewards = rewards.to(torch.float32)  # integer or bool rewards (a verifier's 0/1)
    check_float_tensor("rewards", rewards)
    check_positive_number("eps", eps, allow_zero=True)
    if rewards.dim() != 1:
        raise ValueError(f"rewards must have shape (B,), got {tuple(rewards.shape)}")
    if not isinstance(group_size, int) or group_size < 1 or rewards.numel() % group_size:
        raise ValueError(
            f"group_size must be a positive integer dividing the number of rewards {rewards.numel()}, got {group_size!r}"
        )
    if check_values:
        bad = ~torch.isfinite(rewards)
        n = int(bad.sum())
        if n:
            first = int(bad.nonzero()[0, 0])
            raise ValueError(
                f"rewards must hold finite numbers (a NaN or inf makes its whole group's advantages NaN); found "
                f"{n} other value(s), the first rewards[{first}] = {rewards[first].item()!r}"
            )
    g = rewards.view(-1, group_size)  # (n_groups, G)
    centred = g - g.mean(dim=1, keepdim=True)
    constant = (g == g[:, :1]).all(dim=1, keepdim=True)  # (n_groups, 1)
    if normalize_std and group_size > 1:
        centred = centred / (g.std(dim=1, keepdim=True) + eps)
    return torch.where(constant, torch.zeros_like(centred), centred).view(-1)
