"""The naive references of the loss's diagnostics (``bandpo.losses.diagnostics``): one masked reduction per
metric, written out from the definitions. tests/losses/test_diagnostics.py holds the fused pass to them bit for bit;
the diagnostics benchmark (benchmarks/bench_loss.py) times the fused pass against :func:`naive_clip_metrics`.

Imports the library and torch only: the library's tests run without the lab installed (``make test-bare``).
"""

from __future__ import annotations

import torch
from torch import Tensor

from bandpo.losses.aggregation import masked_mean
from bandpo.losses.diagnostics import FIXED_INTERVAL, PROB_BIN_EDGES, PROB_BINS, TAIL_PROB

__all__ = ["masked_max", "masked_min", "naive_clip_metrics", "naive_side_metrics"]


def masked_min(x: Tensor, mask: Tensor) -> Tensor:
    """Minimum over masked positions; 0 when the mask is empty."""
    m = mask.bool()
    val = torch.where(m, x, torch.full_like(x, float("inf"))).amin() if x.numel() else x.new_zeros(())
    return torch.where(m.any(), val, torch.zeros_like(val))


def masked_max(x: Tensor, mask: Tensor) -> Tensor:
    """Maximum over masked positions; 0 (+0.0) when the mask is empty."""
    m = mask.bool()
    val = torch.where(m, x, torch.full_like(x, float("-inf"))).amax() if x.numel() else x.new_zeros(())
    return torch.where(m.any(), val, torch.zeros_like(val))


def naive_clip_metrics(
    ratio: Tensor,
    lo: Tensor,
    hi: Tensor,
    advantages: Tensor,
    mask: Tensor,
    old_log_prob: Tensor,
    *,
    dual_active: Tensor | None = None,
    log_ratio: Tensor | None = None,
) -> dict[str, Tensor]:
    """The diagnostics as ``bandpo.losses.policy_loss.clip_metrics`` computed them before the fused pass of
    :func:`bandpo.losses.diagnostics.clip_metrics` (commit 04aab16), unchanged: one masked reduction per metric.
    Kept as the reference of tests/losses/test_diagnostics.py and the baseline of the diagnostics benchmark
    (benchmarks/bench_loss.py, ``bench_diagnostics``).

    Args (every tensor (B, T), float32 or float64 unless said, on one device):
        ratio: pi / pi_old per token. lo, hi: the clip bounds per token. advantages: (B, T), or (B, 1) broadcast
        over T. mask: (B, T) 0/1 or bool, the tokens counted. old_log_prob: log pi_old per token.
        dual_active: (B, T) bool, where the dual clip applied, or None. log_ratio: log(ratio) where the caller
        has it (else computed here).

    Returns:
        name -> 0-d detached tensor (float64 for float64 ``ratio``, else float32), in the fused pass's order."""
    with torch.no_grad():
        m = mask.bool()
        adv = advantages.expand_as(ratio)
        up = (ratio > hi) & (adv > 0) & m
        down = (ratio < lo) & (adv < 0) & m
        clipped = up | down
        out = ((ratio > hi) | (ratio < lo)) & m
        f = ratio.dtype if ratio.dtype in (torch.float32, torch.float64) else torch.float32
        n_tok = m.to(f).sum().clamp(min=1.0)
        met: dict[str, Tensor] = {
            "clip/frac": clipped.to(f).sum() / n_tok,
            "clip/frac_up": up.to(f).sum() / n_tok,
            "clip/frac_down": down.to(f).sum() / n_tok,
            "clip/frac_out": out.to(f).sum() / n_tok,
        }
        if dual_active is not None:
            met["clip/frac_dual"] = (dual_active & m).to(f).sum() / n_tok
        p_old = torch.exp(old_log_prob.to(f))
        bin_idx = torch.bucketize(
            p_old, torch.tensor(PROB_BIN_EDGES, dtype=f, device=p_old.device), right=True
        )
        for i, name in enumerate(PROB_BINS):
            in_bin = (bin_idx == i) & m
            n_bin = in_bin.to(f).sum()
            denom = n_bin.clamp(min=1.0)
            met[f"clip/frac_up/{name}"] = (up & in_bin).to(f).sum() / denom
            met[f"clip/frac_down/{name}"] = (down & in_bin).to(f).sum() / denom
            met[f"clip/frac/{name}"] = (clipped & in_bin).to(f).sum() / denom
            met[f"tokens/share/{name}"] = n_bin / n_tok
        tail = (bin_idx == 0) & m  # p_old < TAIL_PROB: the first bin [0, 0.2)
        n_clipped = clipped.to(f).sum()
        met["clip/tail_share"] = (clipped & tail).to(f).sum() / n_clipped.clamp(min=1.0)
        met["clip/tail_share_up"] = (up & tail).to(f).sum() / up.to(f).sum().clamp(min=1.0)
        for name, x in (("lo", lo), ("hi", hi)):
            x = x.to(f)
            met[f"band/{name}_mean"] = masked_mean(x, m)
            met[f"band/{name}_min"] = masked_min(x, m)
            met[f"band/{name}_max"] = masked_max(x, m)
        lr = torch.log(ratio.to(f)) if log_ratio is None else log_ratio.to(f)
        met["policy/ppo_kl"] = masked_mean(-lr, m)
        met["policy/approx_kl"] = masked_mean(torch.expm1(lr) - lr, m)
        r = ratio.to(f)
        met["policy/ratio_mean"] = masked_mean(r, m)
        met["policy/ratio_max"] = masked_max(r, m)
        met["policy/ratio_min"] = masked_min(r, m)
    met.update(naive_side_metrics(ratio, lo, hi, advantages, mask, old_log_prob, dual_active=dual_active))
    return met


def naive_side_metrics(
    ratio: Tensor,
    lo: Tensor,
    hi: Tensor,
    advantages: Tensor,
    mask: Tensor,
    old_log_prob: Tensor,
    *,
    dual_active: Tensor | None = None,
) -> dict[str, Tensor]:
    """The per-side counts of :func:`bandpo.losses.diagnostics.side_metrics` (added to the diagnostics after the
    fused pass), one masked reduction per metric, each token's sets written out from the definitions."""
    with torch.no_grad():
        m = mask.bool()
        f = ratio.dtype if ratio.dtype in (torch.float32, torch.float64) else torch.float32
        adv = advantages.expand_as(ratio)
        e_lo, e_hi = FIXED_INTERVAL
        fixed_hi = torch.tensor(1.0 + e_hi, dtype=ratio.dtype)
        fixed_lo = torch.tensor(1.0 - e_lo, dtype=ratio.dtype)
        up_through = m & (adv > 0) & (ratio > fixed_hi) & (ratio <= hi)
        down_through = m & (adv < 0) & (ratio < fixed_lo) & (ratio >= lo)
        tail = torch.exp(old_log_prob.to(f)) < TAIL_PROB
        n_tok = m.to(f).sum().clamp(min=1.0)
        met = {
            "side/up_through": up_through.to(f).sum() / n_tok,
            "side/down_through": down_through.to(f).sum() / n_tok,
            "side/up_through_tail": (up_through & tail).to(f).sum() / n_tok,
            "side/down_through_tail": (down_through & tail).to(f).sum() / n_tok,
            "side/up_held": (m & (adv > 0) & (ratio > hi) & (ratio <= fixed_hi)).to(f).sum() / n_tok,
            "side/down_held": (m & (adv < 0) & (ratio < lo) & (ratio >= fixed_lo)).to(f).sum() / n_tok,
        }
        with_grad = m & ~(((adv > 0) & (ratio > hi)) | ((adv < 0) & (ratio < lo)))
        if dual_active is not None:
            with_grad = with_grad & ~dual_active.bool()
        w = adv.to(f).abs() * ratio.to(f)
        zero = torch.zeros((), dtype=f)
        total = torch.where(with_grad, w, zero).sum()
        for side, sel in (("up", up_through), ("down", down_through)):
            part = torch.where(sel, w, zero).sum()
            met[f"side/{side}_through_grad"] = part / total if total > 0 else zero
    return met
