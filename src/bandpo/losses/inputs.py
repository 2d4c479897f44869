"""The objective's input checks, beside it: :func:`check_objective_inputs` runs once at the top of each entry point
of :mod:`bandpo.losses.policy_loss` and hands the objective its inputs checked, broadcast and resolved
(:class:`ObjectiveInputs`), so the objective reads without a check. Shape, dtype, device and name checks always
run (no host sync); ``check_values`` adds the checks of the values at real tokens, in one device->host sync."""

from __future__ import annotations

from numbers import Real
from typing import NamedTuple

import torch
from torch import Tensor

from bandpo.core.checks import FLOAT_DTYPES, check_float_tensor, expand_advantages
from bandpo.losses.aggregation import LOSS_AGG_MODES
from bandpo.losses.clip_rules import CLIP_RULES, ClipRule, make_clip_rule
from bandpo.losses.kl import KL_ESTIMATORS
from bandpo.validation import check_bool, check_number_above, check_positive_number


class ObjectiveInputs(NamedTuple):
    """The objective's inputs after :func:`check_objective_inputs`: shapes agree, names resolved."""

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


def is_dual_clip_c(value: object) -> bool:
    """Whether ``value`` can be the dual clip's ``c`` (``clip_ratio_c``): a real number > 1, not a bool (``inf``
    keeps the dual clip out of effect). The test behind every adapter's check of its own spelling of ``c``."""
    return isinstance(value, Real) and not isinstance(value, bool) and value > 1.0


class _DefaultClipRatioC(float):
    """The type of :data:`DEFAULT_CLIP_RATIO_C`: a float that tells the default from a value the caller passed."""


DEFAULT_CLIP_RATIO_C: float = _DefaultClipRatioC(10.0)
"""The default dual-clip constant ``clip_ratio_c`` of ``policy_loss`` and ``per_token_policy_loss``: 10.0.
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


def check_objective_inputs(
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
) -> ObjectiveInputs:
    """The one check of the objective's inputs, run once by each entry point (``per_token_policy_loss``,
    ``policy_loss``); arguments and errors as theirs (tensors on different devices or on the meta device: a
    ``ValueError`` naming each argument and its device). Shape, dtype and name checks always run;
    ``check_values`` adds the checks that sync with the host (a 0/1 mask, finite values at real tokens).
    """
    check_bool("check_values", check_values)
    for name, x in (("log_prob", log_prob), ("old_log_prob", old_log_prob), ("advantages", advantages)):
        check_float_tensor(name, x)
    if log_prob.dim() != 2:
        raise ValueError(f"log_prob must have shape (B, T), got {tuple(log_prob.shape)}")
    _check_like_log_prob("old_log_prob", old_log_prob, log_prob)
    _check_mask(response_mask)
    _check_like_log_prob("response_mask", response_mask, log_prob)
    advantages = expand_advantages(advantages, log_prob.shape)
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
    if clip_ratio_c is not None and not is_dual_clip_c(clip_ratio_c):
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
    return ObjectiveInputs(
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
    """``policy_loss(check_values=True)``: the values the objective accepts at real tokens (``mask`` true; the
    list, and why: ``policy_loss``'s docstring), in one device->host sync. Positions where the mask is 0 are
    never read, so they may hold anything; ``response_mask`` itself must be bool, or numbers 0 and 1.

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
