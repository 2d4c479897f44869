"""Aggregation modes and masked reductions: padded positions are ignored even when they hold NaN or inf."""

from __future__ import annotations

import pytest
import torch

from bandpo.losses import LOSS_AGG_MODES, aggregate, masked_mean, policy_loss
from helpers.naive_diagnostics import masked_max, masked_min


def _batch() -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(4, 6, generator=g, dtype=torch.float64)
    mask = torch.rand(4, 6, generator=g) > 0.3
    mask[:, 0] = True
    mask[3] = False  # an empty sequence
    return x, mask


@pytest.mark.parametrize("mask_dtype", [torch.bool, torch.float64, torch.int64])
@pytest.mark.parametrize("mode", LOSS_AGG_MODES.names())
def test_aggregate_ignores_nan_and_inf_at_padding(mode: str, mask_dtype: torch.dtype) -> None:
    x, mask = _batch()
    clean = aggregate(x, mask.to(mask_dtype), mode)
    dirty = x.clone()
    dirty[~mask] = torch.tensor([float("nan"), float("inf"), -float("inf")], dtype=x.dtype).repeat(
        int((~mask).sum())
    )[: int((~mask).sum())]
    leaf = dirty.clone().requires_grad_(True)
    out = aggregate(leaf, mask.to(mask_dtype), mode)
    assert torch.equal(out, clean)
    (grad,) = torch.autograd.grad(out, leaf)
    assert torch.isfinite(grad).all() and (grad[~mask] == 0).all()
    assert (grad[mask] != 0).all()


def test_masked_reductions_ignore_nan_and_inf_at_padding() -> None:
    x, mask = _batch()
    dirty = torch.where(mask, x, torch.full_like(x, float("nan")))
    dirty[~mask & (torch.arange(6) % 2 == 0)] = float("inf")
    leaf = dirty.clone().requires_grad_(True)
    mean = masked_mean(leaf, mask.double())
    assert mean.item() == pytest.approx(x[mask].mean().item(), rel=1e-14)
    (grad,) = torch.autograd.grad(mean, leaf)
    assert torch.isfinite(grad).all() and (grad[~mask] == 0).all()
    assert masked_min(dirty, mask).item() == x[mask].min().item()
    assert masked_max(dirty, mask).item() == x[mask].max().item()
    assert masked_mean(dirty, torch.zeros_like(mask)).item() == 0.0


def test_loss_agg_modes_dispatch_to_their_registered_function() -> None:
    """Wiring test: ``aggregate`` is the registry lookup, one registered function per name, nothing else; the
    reductions' values are checked against a plain re-derivation in
    tests/losses/test_policy_loss.py::test_matches_naive_reference_values_and_grads."""
    x, mask = _batch()
    for mode in LOSS_AGG_MODES.names():
        reduce = LOSS_AGG_MODES.get(mode)
        assert torch.equal(aggregate(x, mask, mode), reduce(torch.where(mask, x, 0.0), mask.double())), mode


def test_a_registered_mode_works_end_to_end_and_can_be_removed() -> None:
    """One registry entry is all a new mode needs: ``aggregate`` and ``policy_loss`` accept it at once."""
    x, mask = _batch()

    def masked_max_mode(x: torch.Tensor, m: torch.Tensor) -> torch.Tensor:
        return masked_max(x, m)

    LOSS_AGG_MODES.register("test-max", masked_max_mode, aliases=("test_max",))
    try:
        assert aggregate(x, mask, "test_max").item() == x[mask].max().item()
        lp = torch.full((2, 3), -1.0)
        loss, _ = policy_loss(
            lp, lp, torch.tensor([1.0, -1.0]), torch.ones(2, 3), "grpo", loss_agg_mode="test-max"
        )
        assert loss.item() == 1.0  # r = 1: the per-token losses -A r are -1 (A = 1) and 1 (A = -1)
    finally:
        assert LOSS_AGG_MODES.unregister("test-max") is masked_max_mode
    assert "test-max" not in LOSS_AGG_MODES and "test_max" not in LOSS_AGG_MODES
    with pytest.raises(ValueError, match=r"unknown loss aggregation mode 'test-max'"):
        aggregate(x, mask, "test-max")
