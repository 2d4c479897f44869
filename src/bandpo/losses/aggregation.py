"""Loss aggregation modes (verl's names) and masked reductions. Shapes: (B, T) losses and masks."""

from __future__ import annotations

import torch
from torch import Tensor

from bandpo.registry import Registry

LOSS_AGG_MODES: Registry[str] = Registry("loss aggregation mode")
for _mode, _doc in [
    ("token-mean", "sum over all real tokens / number of real tokens (DAPO)"),
    ("seq-mean-token-mean", "mean over sequences of each sequence's token mean (GRPO; the authors' runs)"),
    ("seq-mean-token-sum", "mean over sequences of each sequence's token sum"),
    ("seq-mean-token-sum-norm", "seq-mean-token-sum / T: Dr. GRPO's constant normaliser (verl's definition)"),
    ("token-sum", "sum over all real tokens"),
]:
    LOSS_AGG_MODES.register(_mode, _doc)


def masked_mean(x: Tensor, mask: Tensor) -> Tensor:
    """Mean of ``x`` over positions where ``mask`` is 1; 0 when the mask is empty. (...) -> () float."""
    m = mask.to(x.dtype)
    return (x * m).sum() / m.sum().clamp(min=1.0)


def masked_min(x: Tensor, mask: Tensor) -> Tensor:
    """Minimum over masked positions; 0 when the mask is empty."""
    m = mask.bool()
    val = torch.where(m, x, torch.full_like(x, float("inf"))).amin() if x.numel() else x.new_zeros(())
    return torch.where(m.any(), val, torch.zeros_like(val))


def masked_max(x: Tensor, mask: Tensor) -> Tensor:
    """Maximum over masked positions; 0 when the mask is empty."""
    return -masked_min(-x, mask)


def aggregate(loss_mat: Tensor, mask: Tensor, mode: str = "seq-mean-token-mean") -> Tensor:
    """Reduce per-token losses to a scalar.

    Args:
        loss_mat: (B, T) float, per-token loss (finite wherever ``mask`` is 1; ignored elsewhere).
        mask: (B, T) 0/1, real response tokens.
        mode: one of ``LOSS_AGG_MODES.names()``.

    Returns:
        () float. An all-zero mask gives 0 (never NaN); sequences without tokens do not count in seq-means.
    """
    mode = LOSS_AGG_MODES.canonical(mode)
    m = mask.to(loss_mat.dtype)
    x = loss_mat * m
    if mode == "token-mean":
        return x.sum() / m.sum().clamp(min=1.0)
    if mode == "token-sum":
        return x.sum()
    tokens = m.sum(-1)  # (B,)
    seq = x.sum(-1) / tokens.clamp(min=1.0) if mode == "seq-mean-token-mean" else x.sum(-1)
    has = (tokens > 0).to(loss_mat.dtype)
    loss = (seq * has).sum() / has.sum().clamp(min=1.0)
    if mode == "seq-mean-token-sum-norm":
        loss = loss / max(loss_mat.shape[-1], 1)
    return loss
