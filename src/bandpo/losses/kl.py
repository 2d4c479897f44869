"""KL estimators: per-token estimates of KL(pi || pi_ref) from the sampled tokens, verl's ``k1``, ``k2`` and ``k3``
under verl's names and aliases, in one registry (:data:`KL_ESTIMATORS`); :func:`bandpo.policy_loss` adds
``kl_coef`` times their aggregate to the loss."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from bandpo.losses.terms import LOG_RATIO_CLAMP
from bandpo.registry import Registry

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
    """Per-token estimate of KL(pi || pi_ref) from sampled tokens, (B, T) float -> (B, T) float, by ``estimator``:
    a name or alias of ``KL_ESTIMATORS`` (each one's formula is on its function above)."""
    return KL_ESTIMATORS.get(estimator)(log_prob, ref_log_prob)
