"""Loss aggregation modes (verl's names) and masked reductions. Shapes: (B, T) losses and masks.

Positions where the mask is 0 are ignored even when they hold NaN or inf: they are replaced by 0 with
``torch.where`` (not multiplied by the mask, which would give ``0 * nan = nan``), so neither the value nor the
gradient (0 there) sees them.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from bandpo.registry import Registry

AggregationMode = Callable[[Tensor, Tensor], Tensor]
"""``(x, m) -> ()``: ``x`` the (B, T) per-token losses, 0 wherever the mask is 0; ``m`` the (B, T) 0/1 mask in
``x``'s dtype."""

LOSS_AGG_MODES: Registry[AggregationMode] = Registry("loss aggregation mode")
"""verl's aggregation modes; each entry is the reduction itself (:func:`aggregate` looks it up)."""


def _zero_outside(x: Tensor, mask: Tensor) -> Tensor:
    """``x`` where ``mask`` is nonzero, 0 elsewhere (whatever ``x`` holds there; gradient 0 there)."""
    return torch.where(mask.bool(), x, torch.zeros((), dtype=x.dtype, device=x.device))


def masked_mean(x: Tensor, mask: Tensor) -> Tensor:
    """Mean of ``x`` over positions where ``mask`` is 1; 0 when the mask is empty. (...) -> () float.

    ``x``: (...) float; ``mask``: (...) bool or 0/1. Masked-out positions may hold NaN or inf.
    """
    return _zero_outside(x, mask).sum() / mask.to(x.dtype).sum().clamp(min=1.0)


def aggregate(loss_mat: Tensor, mask: Tensor, mode: str = "seq-mean-token-mean") -> Tensor:
    """Reduce per-token losses to a scalar.

    Args:
        loss_mat: (B, T) float, per-token loss (finite wherever ``mask`` is 1; ignored elsewhere, even NaN).
        mask: (B, T) bool or 0/1, real response tokens.
        mode: one of ``LOSS_AGG_MODES.names()``.

    Returns:
        () float. An all-zero mask gives 0 (never NaN); sequences without tokens do not count in seq-means.
    """
    reduce = LOSS_AGG_MODES.get(mode)
    return reduce(_zero_outside(loss_mat, mask), mask.to(loss_mat.dtype))


@LOSS_AGG_MODES.decorator("token-mean")
def _token_mean(x: Tensor, m: Tensor) -> Tensor:
    """Sum over all real tokens / number of real tokens (DAPO)."""
    return x.sum() / m.sum().clamp(min=1.0)


def _mean_over_sequences(seq: Tensor, m: Tensor) -> Tensor:
    """Mean of the (B,) per-sequence values ``seq`` over sequences with at least one real token."""
    has = (m.sum(-1) > 0).to(seq.dtype)
    return (seq * has).sum() / has.sum().clamp(min=1.0)


@LOSS_AGG_MODES.decorator("seq-mean-token-mean")
def _seq_mean_token_mean(x: Tensor, m: Tensor) -> Tensor:
    """Mean over sequences of each sequence's token mean (GRPO; the authors' runs)."""
    return _mean_over_sequences(x.sum(-1) / m.sum(-1).clamp(min=1.0), m)


@LOSS_AGG_MODES.decorator("seq-mean-token-sum")
def _seq_mean_token_sum(x: Tensor, m: Tensor) -> Tensor:
    """Mean over sequences of each sequence's token sum."""
    return _mean_over_sequences(x.sum(-1), m)


@LOSS_AGG_MODES.decorator("seq-mean-token-sum-norm")
def _seq_mean_token_sum_norm(x: Tensor, m: Tensor) -> Tensor:
    """seq-mean-token-sum / T: Dr. GRPO's constant normaliser (verl's definition)."""
    return _seq_mean_token_sum(x, m) / max(x.shape[-1], 1)


@LOSS_AGG_MODES.decorator("token-sum")
def _token_sum(x: Tensor, m: Tensor) -> Tensor:
    """Sum over all real tokens."""
    return x.sum()
