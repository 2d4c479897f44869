"""Loss aggregation modes (verl's names) and masked reductions. Shapes: (B, T) losses and masks.

Positions where the mask is 0 are ignored even when they hold NaN or inf: they are replaced by 0 with
``torch.where`` (not multiplied by the mask, which would give ``0 * nan = nan``), so neither the value nor the
gradient (0 there) sees them.
"""

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


def _zero_outside(x: Tensor, mask: Tensor) -> Tensor:
    """``x`` where ``mask`` is nonzero, 0 elsewhere (whatever ``x`` holds there; gradient 0 there)."""
    return torch.where(mask.bool(), x, torch.zeros((), dtype=x.dtype, device=x.device))


def masked_mean(x: Tensor, mask: Tensor) -> Tensor:
    """Mean of ``x`` over positions where ``mask`` is 1; 0 when the mask is empty. (...) -> () float.

    ``x``: (...) float; ``mask``: (...) bool or 0/1. Masked-out positions may hold NaN or inf.
    """
    return _zero_outside(x, mask).sum() / mask.to(x.dtype).sum().clamp(min=1.0)


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
        loss_mat: (B, T) float, per-token loss (finite wherever ``mask`` is 1; ignored elsewhere, even NaN).
        mask: (B, T) bool or 0/1, real response tokens.
        mode: one of ``LOSS_AGG_MODES.names()``.

    Returns:
        () float. An all-zero mask gives 0 (never NaN); sequences without tokens do not count in seq-means.
    """
    mode = LOSS_AGG_MODES.canonical(mode)
    m = mask.to(loss_mat.dtype)
    x = _zero_outside(loss_mat, mask)
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
