"""DPPO (``dppo_tv`` / ``dppo_kl``) against verl 0.9.1's own ``compute_policy_loss_dppo_tv`` / ``_kl``, and Band
with DPPO's truncation against DPPO, with the tokens where they differ identified (skipped without verl).

1. Equivalence, float64: random batches with both signs of advantage, ragged padding, ratios from ~0 to far past
   ``c``, asymmetric thresholds, with and without rollout weights, every aggregation mode. Through the verl adapter
   (verl's ``agg_loss``) loss and gradients equal verl's to 1e-10 (measured: bit-identical). Through
   ``bandpo.policy_loss`` (bandpo's aggregation) likewise, except that verl's ``seq-mean-token-mean`` adds 1e-8 to
   each sequence's token count (relative difference <= 1e-8 / tokens there).
2. Band with DPPO's truncation (``truncation_c``), no cap, radius = DPPO's threshold, has the same region as DPPO:
   Band-TV's bounds ``1 -+ delta / p`` are DPPO-TV's, Band-KL's divergence is ``KL(pi_old || pi_new)`` over the
   binary partition, DPPO-KL's too. Their gradients are equal at every token except where the theory says they
   cannot be: (a) the log-ratio clamp at 20 (both clamp r to e^20; Band then tests the clamped ratio, DPPO tests
   probabilities), (b) verl's ``1e-8`` in DPPO-KL's logs, engineered here where it matters most (``1 - p_new``
   below 1e-8). Band-KL uses its exact solver (``method="newton"``); its table differs by up to 1e-7 relative.
3. Band as it is used (clipped ratio, dual clip ``c``, cap 10) against DPPO: they also differ on kept tokens with
   ``r > c`` (the dual clip zeroes ``A < 0``, the plain ratio keeps ``-A r`` for ``A > 0``, DPPO's weight is ``c``)
   and on ``A > 0`` tokens between the cap and the uncapped edge.
4. The other classes, each on its own constructed tokens: the ulp between ``exp(-lp_old)`` and ``1/exp(lp_old)`` at
   TV's simplex edge, the mirror of (a) below e^-20, verl's ``1e-8`` moving both KL edges up by a factor
   ``1 + 1e-8`` at every p, and bfloat16 log-probs (verl decides in bfloat16, bandpo in float32 as float64 does).
   ``scripts/dppo_vs_band.py`` counts every class on larger samples.
"""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch

pytest.importorskip("verl", reason="verl is not installed (pip install '.[verl]' in bandpo's clone)")

from verl.trainer.ppo.core_algos import get_policy_loss_fn
from verl.workers.config import ActorConfig, PolicyLossConfig

import bandpo.integrations.verl as bverl
from bandpo.losses import make_clip_rule, policy_loss

pytestmark = pytest.mark.verl

AGG_MODES = [
    "token-mean",
    "token-sum",
    "seq-mean-token-mean",
    "seq-mean-token-sum",
    "seq-mean-token-sum-norm",
]
THRESHOLDS = {"dppo_tv": (0.1, 0.2), "dppo_kl": (0.03, 0.08)}  # (low, high), asymmetric on purpose


def dppo_config(name: str, mode: str, low: float, high: float, c: float) -> ActorConfig:
    """verl's actor config for its DPPO losses: thresholds in ``clip_ratio_low/high``, ``c`` in ``clip_ratio_c``."""
    return ActorConfig(
        strategy="fsdp",
        rollout_n=4,
        ppo_micro_batch_size_per_gpu=2,
        loss_agg_mode=mode,
        clip_ratio=high,
        clip_ratio_low=low,
        clip_ratio_high=high,
        clip_ratio_c=c,
        policy_loss=PolicyLossConfig(loss_mode=name),
    )


def random_batch(seed: int, spread: float, batch: int = 8, length: int = 32) -> dict[str, torch.Tensor]:
    """p_old log-uniform from 1e-4 to 0.9999, log-ratios N(0, spread) (so r spans ~0 to far past c), per-sequence advantages
    of both signs with per-token jitter, a few zero advantages, ragged float 0/1 mask (one row empty) with finite values (verl's
    losses multiply padding by the mask, so NaN there would poison verl's side) at padded positions."""
    g = torch.Generator().manual_seed(seed)
    old = (-9.2 * torch.rand(batch, length, generator=g, dtype=torch.float64)).clamp(
        max=-1e-4
    )  # log-uniform p
    new = (old + spread * torch.randn(batch, length, generator=g, dtype=torch.float64)).clamp(max=-1e-9)
    adv = torch.randn(batch, 1, generator=g, dtype=torch.float64) + 0.3 * torch.randn(
        batch, length, generator=g, dtype=torch.float64
    )
    adv[0, :3] = 0.0
    lengths = torch.randint(1, length + 1, (batch,), generator=g)
    lengths[0] = length
    lengths[1] = 0  # an empty row: verl's seq-mean modes do not count it, nor do ours
    mask = (torch.arange(length).unsqueeze(0) < lengths.unsqueeze(1)).to(torch.float64)
    weights = torch.rand(batch, length, generator=g, dtype=torch.float64) + 0.5
    return {"old": old, "new": new, "adv": adv, "mask": mask, "weights": weights}


def grad_of(fn: Any, new: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, Any]:
    x = new.clone().requires_grad_(True)
    loss, metrics = fn(x)
    (g,) = torch.autograd.grad(loss, x)
    return loss.detach(), g, metrics


CASES = [  # (seed, log-ratio spread, c, thresholds, rollout weights)
    (0, 2.0, 3.0, "asymmetric", True),  # verl's ActorConfig c = 3: many tokens past c
    (1, 4.0, 20.0, "default", False),  # DPPO's default c = 20, ratios up to e^12
]


@pytest.mark.parametrize("mode", AGG_MODES)
@pytest.mark.parametrize("case", CASES, ids=["c3-asym-weights", "c20-default"])
@pytest.mark.parametrize("name", ["dppo_tv", "dppo_kl"])
def test_dppo_equals_verl(name: str, case: tuple, mode: str) -> None:
    seed, spread, c, thresholds, use_weights = case
    d = random_batch(seed, spread)
    if thresholds == "asymmetric":
        low, high = THRESHOLDS[name]
        rule = make_clip_rule(name, clip_divergence_low=low, clip_divergence_high=high, truncation_c=c)
    else:
        rule = make_clip_rule(name, truncation_c=c)
        low, high = rule.clip_divergence_low, rule.clip_divergence_high
    config = dppo_config(name, mode, low, high, c)
    weights = d["weights"] if use_weights else None
    ratio = torch.exp(torch.clamp(d["new"] - d["old"], -20, 20))
    real = ratio[d["mask"] > 0]
    assert (real > c).sum() >= 10 and (real < 0.5).sum() >= 10  # ratios past c and far below 1

    verl_fn = get_policy_loss_fn(name)
    ref, ref_g, ref_m = grad_of(
        lambda x: verl_fn(d["old"], x, d["adv"], d["mask"], mode, config, weights), d["new"]
    )
    ours, ours_g, ours_m = grad_of(
        lambda x: bverl.compute_policy_loss_clip_rule(
            d["old"], x, d["adv"], d["mask"], mode, config, weights, clip_rule=rule
        ),
        d["new"],
    )
    assert (ref_g != 0).sum() > 20 and (ref_g == 0).sum() > 20  # both kept and masked tokens present
    torch.testing.assert_close(ours, ref, rtol=0, atol=1e-10)
    torch.testing.assert_close(ours_g, ref_g, rtol=0, atol=1e-10)
    # by config: loss mode bandpo_<name> reads the thresholds and c from the actor config verl's own loss reads
    by_mode_fn = get_policy_loss_fn(f"bandpo_{name}")
    by_mode, by_mode_g, _ = grad_of(
        lambda x: by_mode_fn(d["old"], x, d["adv"], d["mask"], mode, config, weights), d["new"]
    )
    torch.testing.assert_close(by_mode, ref, rtol=0, atol=1e-10)
    torch.testing.assert_close(by_mode_g, ref_g, rtol=0, atol=1e-10)
    # verl's metrics (float32 means) agree, except that verl also counts A = 0 tokens outside the lower edge as
    # masked (their gradient is 0 either way; bandpo's clip/frac counts A < 0 only)
    real_mask = d["mask"] > 0
    r = torch.exp(torch.clamp(d["new"] - d["old"], -20, 20))
    lo, hi = rule.bounds(d["old"])
    _, down_ok = rule.region_masks(d["new"], d["old"], r, lo, hi)
    zero_adv_masked = ((d["adv"] == 0) & ~down_ok & real_mask).sum().item() / real_mask.sum().item()
    assert ours_m["actor/pg_clipfrac"] + zero_adv_masked == pytest.approx(
        ref_m["actor/pg_clipfrac"], abs=1e-7
    )
    for key in ("actor/pg_clipfrac_lower", "actor/ppo_kl"):
        assert ours_m[key] == pytest.approx(ref_m[key], rel=1e-6, abs=1e-7), key

    # the plain API: bandpo's own aggregation (verl's seq-mean-token-mean adds 1e-8 to the token counts)
    tol = {"rtol": 1e-8, "atol": 1e-10} if mode == "seq-mean-token-mean" else {"rtol": 0, "atol": 1e-10}
    plain, plain_g, _ = grad_of(
        lambda x: policy_loss(
            x, d["old"], d["adv"], d["mask"], rule, loss_agg_mode=mode, rollout_is_weights=weights
        ),
        d["new"],
    )
    torch.testing.assert_close(plain, ref, **tol)
    torch.testing.assert_close(plain_g, ref_g, **tol)


def test_padding_may_hold_nan_for_bandpo() -> None:
    """bandpo's DPPO ignores NaN / inf at padded positions (verl's own multiplies them by the mask: NaN)."""
    d = random_batch(2, 1.5)
    rule = make_clip_rule("dppo_kl", truncation_c=3.0)
    clean, clean_g, _ = grad_of(lambda x: policy_loss(x, d["old"], d["adv"], d["mask"], rule), d["new"])
    pad = d["mask"] == 0
    new, old = d["new"].clone(), d["old"].clone()
    new[pad], old[pad] = float("nan"), float("inf")
    dirty, dirty_g, _ = grad_of(lambda x: policy_loss(x, old, d["adv"], d["mask"], rule), new)
    assert torch.equal(dirty, clean) and torch.equal(dirty_g, clean_g)


# ---- Band with DPPO's truncation vs DPPO ----------------------------------------------------------------------


def exact_binary_kl(old: torch.Tensor, new: torch.Tensor) -> torch.Tensor:
    """KL(p_old || p_new) over {token, rest} without verl's 1e-8, the complement via expm1 (accurate near 1)."""
    q_old, q_new = -torch.expm1(old), -torch.expm1(new)
    return torch.exp(old) * (old - new) + q_old * (torch.log(q_old) - torch.log(q_new))


def verl_binary_kl(old: torch.Tensor, new: torch.Tensor) -> torch.Tensor:
    """verl 0.9.1's formula, with its 1e-8."""
    p, q = torch.exp(new), torch.exp(old)
    return q * (old - new) + (1 - q) * torch.log((1.0 - q + 1e-8) / (1.0 - p + 1e-8))


def engineered_batch(name: str, seed: int = 3) -> tuple[dict[str, torch.Tensor], dict[str, tuple[int, int]]]:
    """A random batch (token-sum, no padding: per-token gradients) plus the tokens theory predicts to differ."""
    d = random_batch(seed, 1.5, batch=6, length=24)
    d["mask"] = torch.ones_like(d["mask"])
    special: dict[str, tuple[int, int]] = {}
    # (a) log-ratio 24.3 > 20, A > 0: p_old = e^-25 to p_new = 0.5 is a TV move of 0.5 and a KL of 24.6 (outside
    # DPPO's region), but the clamped ratio e^20 is below Band's upper bound ~ delta e^25 (inside).
    special["ratio clamp at e^20"] = (1, 5)
    d["old"][1, 5], d["new"][1, 5], d["adv"][1, 5] = -25.0, math.log(0.5), 1.0
    if name == "dppo_kl":
        # (b) p_old = 0.9965 up to p_new = 1 - 1e-10, A > 0: exact KL 0.057 > 0.05 (outside), verl's KL with 1e-8
        # is 0.041 (inside).
        special["verl's 1e-8"] = (2, 7)
        d["old"][2, 7], d["new"][2, 7], d["adv"][2, 7] = math.log(0.9965), -1e-10, 1.0
    return d, special


C = 3.0  # DPPO's truncation constant and Band's dual-clip constant below
BAND_VS_DPPO = [
    ("dppo_tv", "tv", 0.15),
    ("dppo_kl", "kl", 0.05),
]  # DPPO's default thresholds as Band's radius


def band_and_dppo_grads(name: str, divergence: str, delta: float, cap: float | None, **loss_kw: Any) -> tuple:
    """Per-token gradients (token-sum) of verl's DPPO and of Band (radius = DPPO's threshold) on the engineered
    batch, and where they differ."""
    d, special = engineered_batch(name)
    config = dppo_config(name, "token-sum", delta, delta, C)
    verl_fn = get_policy_loss_fn(name)
    _, g_dppo, _ = grad_of(
        lambda x: verl_fn(d["old"], x, d["adv"], d["mask"], "token-sum", config, None), d["new"]
    )
    method = "newton" if divergence == "kl" else "auto"  # Band-KL's exact solver (its table: 1e-6 relative)
    band = make_clip_rule("band", divergence=divergence, delta=delta, cap=cap, method=method)
    _, g_band, _ = grad_of(
        lambda x: policy_loss(x, d["old"], d["adv"], d["mask"], band, loss_agg_mode="token-sum", **loss_kw),
        d["new"],
    )
    differ = (g_band - g_dppo).abs() > 1e-12 * (1.0 + g_dppo.abs())
    return d, special, g_dppo, g_band, differ


@pytest.mark.parametrize("name,divergence,delta", BAND_VS_DPPO)
def test_band_with_truncation_gives_dppo_gradient_except_identified_tokens(
    name: str, divergence: str, delta: float
) -> None:
    d, special, g_dppo, g_band, differ = band_and_dppo_grads(name, divergence, delta, None, truncation_c=C)
    assert {tuple(i) for i in differ.nonzero().tolist()} == set(special.values())
    # why, computed independently of both implementations
    old, new = d["old"], d["new"]
    i, t = special["ratio clamp at e^20"]
    assert new[i, t] - old[i, t] > 20 and g_dppo[i, t] == 0 and g_band[i, t] != 0
    if name == "dppo_kl":
        i, t = special["verl's 1e-8"]
        assert exact_binary_kl(old[i, t], new[i, t]) > delta >= verl_binary_kl(old[i, t], new[i, t])
        assert g_dppo[i, t] != 0 and g_band[i, t] == 0
    # elsewhere: the same kept tokens with the same weight min(r, c), to the last bit
    same = ~differ
    assert torch.equal(g_band[same], g_dppo[same])
    assert (g_dppo[same] != 0).sum() > 30 and (g_dppo[same] == 0).sum() > 10


@pytest.mark.parametrize("name,divergence,delta", BAND_VS_DPPO)
def test_band_as_used_differs_from_dppo_by_dual_clip_and_cap(
    name: str, divergence: str, delta: float
) -> None:
    """Band's clipped objective (dual clip c, cap 10) vs DPPO: the tokens that differ are exactly DPPO's kept tokens
    with r > c, its kept A > 0 tokens past the cap, and the kept ones among the tokens of the test above."""
    cap = 10.0
    d, special, g_dppo, g_band, differ = band_and_dppo_grads(name, divergence, delta, cap, clip_ratio_c=C)
    ratio = torch.exp(torch.clamp(d["new"] - d["old"], -20, 20))
    kept = g_dppo != 0  # inside DPPO's region
    region_differs = torch.zeros_like(
        kept
    )  # tokens of the test above that DPPO keeps (the cap catches the rest)
    for i, t in special.values():
        region_differs[i, t] = bool(kept[i, t])
    predicted = kept & ((ratio > C) | ((d["adv"] > 0) & (ratio > cap)) | region_differs)
    assert torch.equal(differ, predicted)
    assert (kept & (ratio > C) & (d["adv"] < 0)).any() and (kept & (ratio > C) & (d["adv"] > 0)).any()
    assert (kept & (ratio > cap) & (d["adv"] > 0)).any()
    assert torch.equal(g_band[~differ], g_dppo[~differ])
    # on the A < 0 tokens past c the dual clip zeroes the gradient, DPPO keeps -A c
    neg = kept & (ratio > C) & (d["adv"] < 0)
    assert (g_band[neg] == 0).all()
    torch.testing.assert_close(g_dppo[neg], -d["adv"][neg] * C, rtol=1e-14, atol=0)


# ---- the other classes of tokens where Band's region and verl's DPPO differ (docs/method.md#relatives-dppo) --


def per_token_grads(
    name: str, divergence: str, delta: float, old, new, adv
) -> tuple[torch.Tensor, torch.Tensor]:
    """verl's DPPO and Band (radius delta, no cap, exact solver where there is one, truncation C): per-token
    gradients (token-sum) of one (1, N) row of tokens."""
    mask = torch.ones_like(old)
    config = dppo_config(name, "token-sum", delta, delta, C)
    verl_fn = get_policy_loss_fn(name)
    _, g_dppo, _ = grad_of(lambda x: verl_fn(old, x, adv, mask, "token-sum", config, None), new)
    method = "newton" if divergence == "kl" else "auto"
    band = make_clip_rule("band", divergence=divergence, delta=delta, cap=None, method=method)
    _, g_band, _ = grad_of(
        lambda x: policy_loss(x, old, adv, mask, band, loss_agg_mode="token-sum", truncation_c=C), new
    )
    return g_dppo, g_band


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_tv_simplex_edge_differs_by_one_rounding(dtype: torch.dtype) -> None:
    """TV, A > 0, p_old > 1 - delta, new log-prob 0: Band's hi is 1/exp(lp_old), the ratio exp(-lp_old). DPPO keeps
    every such token (1 - p_old <= delta); Band clips exactly those where the two roundings put r above hi."""
    g = torch.Generator().manual_seed(0)
    p = 0.86 + 0.13 * torch.rand(1, 2000, generator=g, dtype=torch.float64)
    old = torch.log(p).to(dtype)
    new, adv = torch.zeros_like(old), torch.ones_like(old)
    g_dppo, g_band = per_token_grads("dppo_tv", "tv", 0.15, old, new, adv)
    _, hi = make_clip_rule("band", divergence="tv", delta=0.15, cap=None).bounds(old)
    above = torch.exp(new - old) > hi
    assert (g_dppo != 0).all()
    assert torch.equal(g_band != g_dppo, above) and above.any()
    assert torch.equal(
        above, (torch.exp(-old) != 1 / torch.exp(old)) & above
    )  # only where the roundings differ


def test_kl_low_clamp_mirror() -> None:
    """A < 0, new log-prob below Band-KL's lower edge: DPPO masks; Band keeps exactly the tokens whose edge is below
    e^-20, where the clamped ratio e^-20 passes ``r >= lo`` (the mirror of the e^20 clamp)."""
    g = torch.Generator().manual_seed(1)
    old = torch.log(
        1e-4 * 100 ** torch.rand(1, 400, generator=g, dtype=torch.float64)
    )  # p_old in [1e-4, 1e-2]
    lo, _ = make_clip_rule("band", divergence="kl", delta=0.05, cap=None, method="newton").bounds(old)
    new = old + torch.log(lo) - 0.01 - 4.99 * torch.rand(1, 400, generator=g, dtype=torch.float64)
    g_dppo, g_band = per_token_grads("dppo_kl", "kl", 0.05, old, new, -torch.ones_like(old))
    edge_below_clamp = torch.log(lo) < -20
    assert (g_dppo == 0).all()
    assert torch.equal(g_band != 0, edge_below_clamp) and edge_below_clamp.any() and (~edge_below_clamp).any()


@pytest.mark.parametrize("p_old", [1e-3, 0.1, 0.5, 0.9, 0.99])
def test_verl_epsilon_moves_both_kl_edges_up_by_1e8(p_old: float) -> None:
    """verl's +1e-8 moves the edge from x to x (1 + 1e-8) to first order, at every p: a token at 0.5e-8 above the
    exact upper edge is kept by verl only (wider), one at 0.5e-8 above the exact lower edge is masked by verl only
    (narrower); at 1.5e-8 above either edge both agree again."""
    old = torch.full((1, 4), math.log(p_old), dtype=torch.float64)
    lo, hi = make_clip_rule("band", divergence="kl", delta=0.05, cap=None, method="newton").bounds(old)
    shift = torch.tensor([[0.5e-8, 1.5e-8, 0.5e-8, 1.5e-8]], dtype=torch.float64)
    edge = torch.cat([hi[:, :2], lo[:, 2:]], dim=1)
    new = old + torch.log(edge) + torch.log1p(shift)
    adv = torch.tensor([[1.0, 1.0, -1.0, -1.0]], dtype=torch.float64)
    g_dppo, g_band = per_token_grads("dppo_kl", "kl", 0.05, old, new, adv)
    assert (g_dppo != 0).tolist() == [[True, False, False, True]]
    assert (g_band != 0).tolist() == [[False, False, True, True]]


@pytest.mark.parametrize("name", ["dppo_tv", "dppo_kl"])
def test_bfloat16_log_probs_bandpo_decides_as_float64(name: str) -> None:
    """With bfloat16 log-probs verl exponentiates and tests the region in bfloat16, bandpo in float32: bandpo's
    kept/masked decisions equal verl's own function applied to the same values in float64; verl's differ."""
    g = torch.Generator().manual_seed(1)
    old = torch.log(1e-4 * 1e4 ** torch.rand(1, 8000, generator=g, dtype=torch.float64)).to(torch.bfloat16)
    new = (old.double() + 0.5 * torch.randn(1, 8000, generator=g, dtype=torch.float64)).clamp(max=0.0)
    new = new.to(torch.bfloat16)
    adv = torch.where(torch.rand(1, 8000, generator=g) < 0.5, 1.0, -1.0)
    mask = torch.ones_like(adv)
    rule = make_clip_rule(name, truncation_c=C)
    config = dppo_config(name, "token-sum", rule.clip_divergence_low, rule.clip_divergence_high, C)
    verl_fn = get_policy_loss_fn(name)
    d64 = [t.double() for t in (old, adv, mask)]
    _, ref, _ = grad_of(lambda x: verl_fn(d64[0], x, d64[1], d64[2], "token-sum", config, None), new.double())
    b16 = [t.bfloat16() for t in (adv, mask)]
    _, in_bf16, _ = grad_of(lambda x: verl_fn(old, x, b16[0], b16[1], "token-sum", config, None), new)
    _, ours, _ = grad_of(lambda x: policy_loss(x, old, adv, mask, rule, loss_agg_mode="token-sum"), new)
    assert torch.equal(ours != 0, ref != 0)
    # verl 0.9.1 in bfloat16 decides some tokens otherwise (measured on these 8,000 tokens: TV 3, KL 6)
    assert ((in_bf16 != 0) != (ref != 0)).sum() > 0
