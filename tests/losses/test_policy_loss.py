"""policy_loss against a naive per-token re-derivation of docs/method.md#objective, plus gradients, metrics and errors."""

from __future__ import annotations

import math
import re

try:
    import numpy as np
except ImportError:  # the library needs torch alone; the numpy cases run where numpy is installed
    np = None
import pytest
import torch
from hypothesis import example, given, settings
from hypothesis import strategies as st

import bandpo
from bandpo.losses import CLIP_RULES, LOSS_AGG_MODES, group_advantages, make_clip_rule, policy_loss
from bandpo.losses.inputs import MASK_DTYPES
from bandpo.losses.policy_loss import per_token_policy_loss

AGG_MODES = LOSS_AGG_MODES.names()
ENTRY_POINTS = {"policy_loss": policy_loss, "per_token_policy_loss": per_token_policy_loss}


def naive_dppo_inside(rule, lp: float, old: float, a: float) -> bool:
    """DPPO's trust-region test for one token, written out in probability space (verl 0.9.1's formulas)."""
    p, q = math.exp(lp), math.exp(old)
    if rule.name == "dppo_tv":
        return p - q <= rule.clip_divergence_high if a > 0 else p - q >= -rule.clip_divergence_low
    kl = q * (old - lp) + (1 - q) * math.log((1.0 - q + 1e-8) / (1.0 - p + 1e-8))
    if a > 0:
        return kl <= rule.clip_divergence_high or p <= q
    return kl <= rule.clip_divergence_low or p >= q


def naive_loss(lp, old, adv, mask, lo, hi, mode, c=10.0, weights=None, dppo=None) -> torch.Tensor:
    """Token by token, straight from docs/method.md#objective (``dppo``: a DPPO rule, its truncated objective instead),
    then the aggregation written out per mode."""
    B, T = lp.shape
    per = [[None] * T for _ in range(B)]
    for i in range(B):
        for t in range(T):
            if not mask[i][t]:
                continue
            a = adv[i][t] if adv.dim() == 2 else adv[i]
            r = torch.exp(torch.clamp(lp[i][t] - old[i][t], -20, 20))
            if dppo is not None:
                inside = naive_dppo_inside(dppo, lp[i][t].item(), old[i][t].item(), a.item())
                w = min(r.item(), dppo.truncation_c)
                term = -a * w * lp[i][t] if inside else lp[i][t] * 0.0
            else:
                l1 = torch.maximum(-a * r, -a * torch.clamp(r, lo[i][t], hi[i][t]))
                term = torch.minimum(l1, -a * c) if a < 0 else l1
            per[i][t] = term * (weights[i][t] if weights is not None else 1.0)
    rows = [[x for x in row if x is not None] for row in per]
    tokens = [x for row in rows for x in row]
    zero = lp.sum() * 0
    if mode == "token-mean":
        return sum(tokens, zero) / max(len(tokens), 1)
    if mode == "token-sum":
        return sum(tokens, zero)
    seqs = [row for row in rows if row]
    if mode == "seq-mean-token-mean":
        vals = [sum(row, zero) / len(row) for row in seqs]
    else:
        vals = [sum(row, zero) for row in seqs]
    out = sum(vals, zero) / max(len(vals), 1)
    return out / T if mode == "seq-mean-token-sum-norm" else out


def make_batch(B=4, T=7, seed=0, dtype=torch.float64, spread=0.6, shift=0.0):
    """``spread``: the scale of the log-ratio noise; ``shift``: added to every old log-prob (below 0: rarer tokens,
    so that ratios can grow large)."""
    g = torch.Generator().manual_seed(seed)
    old = torch.log(torch.rand(B, T, generator=g, dtype=dtype).clamp(min=1e-4)) + shift
    new = (old + spread * torch.randn(B, T, generator=g, dtype=dtype)).clamp(max=0)
    adv = torch.randn(B, generator=g, dtype=dtype)
    mask = (torch.rand(B, T, generator=g) > 0.2).to(dtype)
    mask[:, 0] = 1
    return new, old, adv, mask


@pytest.mark.parametrize("empty_row", [False, True])
@pytest.mark.parametrize("mode", AGG_MODES)
@pytest.mark.parametrize("rule_name", CLIP_RULES.names())
def test_matches_naive_reference_values_and_grads(mode: str, rule_name: str, empty_row: bool) -> None:
    """``empty_row``: a sequence without tokens, which the seq-mean modes do not count (docs/method.md)."""
    new, old, adv, mask = make_batch()
    if empty_row:
        mask[2] = 0
    rule = make_clip_rule(rule_name)
    ent = torch.rand_like(new) * 2
    lo, hi = rule.bounds(old, ent if rule.needs_entropy else None)

    lp1 = new.clone().requires_grad_(True)
    loss, _ = policy_loss(lp1, old, adv, mask, rule, loss_agg_mode=mode, entropy=ent)
    loss.backward()
    lp2 = new.clone().requires_grad_(True)
    ref = naive_loss(lp2, old, adv, mask, lo, hi, mode, dppo=rule if rule.truncation_c else None)
    ref.backward()
    assert loss.item() == pytest.approx(ref.item(), rel=1e-10, abs=1e-12)
    assert torch.allclose(lp1.grad, lp2.grad, rtol=1e-9, atol=1e-12)


BINDING_C = 3.0
"""``c`` of the dual clip and of DPPO's truncation in the next test (its ratios reach far past it)."""

CAPPED_RULES = ("dcpo", "band", "band_upper", "adaptive_band")
"""Rules whose upper bound reaches its cap at small p_old (``band_lower``'s cap changes nothing: its hi is 1.2)."""


@pytest.mark.parametrize("mode", AGG_MODES)
@pytest.mark.parametrize("rule_name", CLIP_RULES.names())
def test_matches_naive_reference_where_every_branch_binds(mode: str, rule_name: str) -> None:
    """The naive reference on a batch that reaches the branches make_batch's default ratios (at most about 2) never
    reach: the dual clip (A < 0 and r > c), DPPO's truncation (r > truncation_c inside its region) and its region's
    outside, and the cap of the upper bound (A > 0 and r > hi = cap). Old log-probs shifted by -3, log-ratio spread
    2.5; c = ``BINDING_C`` on both sides (``clip_ratio_c``, and DPPO's ``truncation_c``). Each branch is asserted
    live in the batch, so the test cannot silently stop covering it."""
    c = BINDING_C
    new, old, adv, mask = make_batch(seed=4, spread=2.5, shift=-3.0)
    ent = 2 * torch.rand(new.shape, generator=torch.Generator().manual_seed(4), dtype=new.dtype)
    rule = make_clip_rule(rule_name)
    if rule.truncation_c is not None:
        rule = make_clip_rule(rule_name, truncation_c=c)
    lo, hi = rule.bounds(old, ent if rule.needs_entropy else None)

    # Each branch is live at a real token (the ratio clamp at e^+-20 is not reached here).
    assert (new - old).abs().max() < 20
    r, real, a = torch.exp(new - old), mask > 0, adv[:, None].expand_as(new)
    if rule.truncation_c is not None:
        inside = torch.tensor(
            [
                [naive_dppo_inside(rule, lp_, old_, a_) for lp_, old_, a_ in zip(*rows)]
                for rows in zip(new.tolist(), old.tolist(), a.tolist())
            ]
        )
        assert (inside & (r > c) & real).any(), "no truncated token"
        assert (inside & (r < c) & real).any(), "no token inside the region below c"
        assert (~inside & real).any(), "no token outside the region"
    else:
        assert ((a < 0) & (r > c) & real).any(), "the dual clip binds nowhere"
        if rule_name in CAPPED_RULES:
            assert ((a > 0) & (hi == rule.cap) & (r > hi) & real).any(), "the cap binds nowhere"

    lp1 = new.clone().requires_grad_(True)
    loss, _ = policy_loss(lp1, old, adv, mask, rule, loss_agg_mode=mode, clip_ratio_c=c, entropy=ent)
    loss.backward()
    lp2 = new.clone().requires_grad_(True)
    ref = naive_loss(lp2, old, adv, mask, lo, hi, mode, c=c, dppo=rule if rule.truncation_c else None)
    ref.backward()
    assert loss.item() == pytest.approx(ref.item(), rel=1e-10, abs=1e-12)
    assert torch.allclose(lp1.grad, lp2.grad, rtol=1e-9, atol=1e-12)
    assert lp1.grad.abs().sum() > 0  # some token keeps its gradient


def test_per_token_advantages_and_is_weights() -> None:
    new, old, adv, mask = make_batch(seed=3)
    adv_bt = adv[:, None] * torch.linspace(0.5, 1.5, new.shape[1], dtype=new.dtype)
    w = torch.rand_like(new)
    rule = make_clip_rule("band")
    lo, hi = rule.bounds(old)
    loss, _ = policy_loss(new, old, adv_bt, mask, rule, loss_agg_mode="token-mean", rollout_is_weights=w)
    ref = naive_loss(new, old, adv_bt, mask, lo, hi, "token-mean", weights=w)
    assert loss.item() == pytest.approx(ref.item(), rel=1e-10)


@pytest.mark.parametrize("entry", ["policy_loss", "per_token_policy_loss"])
def test_advantages_of_shape_b_1_are_those_of_shape_b(entry: str) -> None:
    """TRL's ``advantages[:, None]`` (B, 1) applies to every token of its row, as (B,) does: same loss, same
    gradient; a (1, T) or (B, 2) tensor stays refused."""
    new, old, adv, mask = make_batch(seed=5)
    rule = make_clip_rule("band")
    out = {}
    for name, a in (("b", adv), ("b1", adv[:, None])):
        lp = new.clone().requires_grad_(True)
        result = ENTRY_POINTS[entry](lp, old, a, mask, rule)
        loss = result[0] if entry == "policy_loss" else (result.loss * mask).sum()
        loss.backward()
        out[name] = (loss.detach(), lp.grad)
    assert torch.equal(out["b1"][0], out["b"][0]) and torch.equal(out["b1"][1], out["b"][1])
    assert out["b"][1].abs().sum() > 0  # the gradient is not trivially zero
    for bad in (adv[None, :1].expand(1, new.shape[1]), adv[:, None].expand(-1, 2)):
        with pytest.raises(ValueError, match=r"advantages shape .* must be \(B,\), \(B, 1\) or \(B, T\)"):
            ENTRY_POINTS[entry](new, old, bad, mask, rule)


@pytest.mark.parametrize(
    ("mask", "match"),
    [
        (
            [[1, 1, 0], [1, 0, 0]],
            r"response_mask must be a torch.Tensor of bool, integer or float dtype .*got list",
        ),
        (
            torch.ones(2, 3, dtype=torch.complex64),
            r"response_mask must be a torch.Tensor of bool, integer or float dtype .*got dtype torch.complex64",
        ),
    ],
)
@pytest.mark.parametrize("entry", ["policy_loss", "per_token_policy_loss"])
def test_a_mask_that_is_not_a_real_tensor_is_refused(entry: str, mask: object, match: str) -> None:
    """A list or a complex tensor is refused in one line; the allowed dtypes: the next test."""
    args = _good_args() | {"response_mask": mask, "clip_rule": make_clip_rule("band")}
    with pytest.raises(TypeError, match=match):
        ENTRY_POINTS[entry](**args)


@pytest.mark.parametrize("dtype", MASK_DTYPES, ids=str)
@pytest.mark.parametrize("entry", ["policy_loss", "per_token_policy_loss"])
def test_every_allowed_mask_dtype_gives_the_float_masks_loss_and_gradient(
    entry: str, dtype: torch.dtype
) -> None:
    """``response_mask`` may be bool or 0/1 integers or floats: on a ragged mask each dtype gives the float32 mask's
    loss (matrix) and gradient, exactly; and that mask is read (not the all-ones loss, gradient 0 at padding)."""
    new, old, _, _ = make_batch(B=2, T=3, seed=13)
    adv = torch.tensor([1.0, -0.5], dtype=torch.float64)
    ragged = [[1, 1, 0], [1, 0, 0]]

    def loss_and_grad(mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        lp = new.clone().requires_grad_(True)
        out = ENTRY_POINTS[entry](lp, old, adv, mask, make_clip_rule("band"))
        loss = out[0] if entry == "policy_loss" else out.loss
        return loss.detach(), torch.autograd.grad(loss.sum(), lp)[0]

    want, want_g = loss_and_grad(torch.tensor(ragged, dtype=torch.float32))
    got, got_g = loss_and_grad(torch.tensor(ragged, dtype=dtype))
    assert torch.equal(got, want) and torch.equal(got_g, want_g)
    padding = torch.tensor(ragged) == 0
    assert (want_g[padding] == 0).all() and (want_g[~padding] != 0).any()
    assert not torch.equal(loss_and_grad(torch.ones(2, 3, dtype=dtype))[0], want)


@pytest.mark.parametrize("rule", ["band", "grpo", "dcpo", "dppo_tv"])
def test_padded_positions_hold_what_token_terms_documents(rule: str) -> None:
    """TokenTerms' docstring: padding computes as old log-prob 0 (p_old = 1) and advantage 0, so lo / hi hold the
    rule's bounds at p_old = 1 (not 0) while the other float fields hold 0 (ratio 1)."""
    nan = float("nan")
    log_prob = torch.tensor([[-1.0, nan, -2.0]], dtype=torch.float64)
    old = torch.tensor([[-1.1, nan, 5.0]], dtype=torch.float64)
    mask = torch.tensor([[True, False, False]])
    clip_rule = make_clip_rule(rule)
    terms = per_token_policy_loss(log_prob, old, torch.tensor([-1.0], dtype=torch.float64), mask, clip_rule)
    lo1, hi1 = clip_rule.bounds(torch.zeros(1, 1, dtype=torch.float64))
    pad = ~mask
    assert torch.equal(terms.lo[pad], lo1.expand(1, 2).reshape(-1))
    assert torch.equal(terms.hi[pad], hi1.expand(1, 2).reshape(-1))
    for name in ("loss", "log_ratio", "advantages", "old_log_prob"):
        assert torch.equal(getattr(terms, name)[pad].abs(), torch.zeros(2, dtype=torch.float64)), name
    assert torch.equal(terms.ratio[pad], torch.ones(2, dtype=torch.float64))
    assert not terms.dual_active[pad].any()
    assert float(lo1) < 1.0 or float(hi1) > 1.0  # not the 0 the docstring used to claim


def test_clipped_tokens_get_exactly_zero_gradient() -> None:
    old = torch.log(torch.tensor([[0.5, 0.5, 0.5, 0.5]], dtype=torch.float64))
    # ratios 2.0 (above hi), 1.05 (inside), 0.3 (below lo), 1.0
    new = old + torch.log(torch.tensor([[2.0, 1.05, 0.3, 1.0]], dtype=torch.float64))
    for adv_sign, clipped_idx in ((1.0, 0), (-1.0, 2)):
        lp = new.clone().requires_grad_(True)
        loss, m = policy_loss(
            lp, old, torch.tensor([adv_sign], dtype=torch.float64), torch.ones(1, 4), "grpo"
        )
        loss.backward()
        assert lp.grad[0, clipped_idx].item() == 0.0
        assert lp.grad[0, 1].item() != 0.0 and lp.grad[0, 3].item() != 0.0
        assert m["clip/frac"].item() == pytest.approx(0.25)


def test_band_with_a_constant_interval_reproduces_grpo() -> None:
    """A vanishing TV radius relaxed to [0.8, 1.2] is exactly the fixed interval: same loss, same gradient."""
    new, old, adv, mask = make_batch(seed=5)
    old = old.clamp(min=math.log(0.01))
    band = make_clip_rule("band", divergence="tv", delta=1e-9, relax=(0.2, 0.2))
    results = []
    for rule in (band, make_clip_rule("grpo")):
        lp = new.clone().requires_grad_(True)
        loss, m = policy_loss(lp, old, adv, mask, rule)
        loss.backward()
        results.append((loss.detach(), lp.grad, m["clip/frac"]))
    assert torch.equal(results[0][0], results[1][0])
    assert torch.equal(results[0][1], results[1][1])
    assert torch.equal(results[0][2], results[1][2])


def test_dual_clip_caps_negative_advantage_loss() -> None:
    old = torch.log(torch.tensor([[0.01]], dtype=torch.float64))
    new = old + math.log(50.0)  # ratio 50 (p 0.01 -> 0.5) with a negative advantage
    loss, m = policy_loss(
        new, old, torch.tensor([-1.0], dtype=torch.float64), torch.ones(1, 1), "grpo", clip_ratio_c=3.0
    )
    assert loss.item() == pytest.approx(3.0)
    assert m["clip/frac_dual"].item() == 1.0
    loss, _ = policy_loss(
        new, old, torch.tensor([-1.0], dtype=torch.float64), torch.ones(1, 1), "grpo", clip_ratio_c=None
    )
    assert loss.item() == pytest.approx(50.0)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_low_precision_inputs(dtype: torch.dtype) -> None:
    new, old, adv, mask = make_batch(seed=7, dtype=torch.float64)
    ref, _ = policy_loss(new, old, adv, mask, "band")
    lp = new.to(dtype).requires_grad_(True)
    loss, m = policy_loss(lp, old.to(dtype), adv.to(dtype), mask, "band")
    loss.backward()
    assert loss.dtype == torch.float32 and lp.grad.dtype == dtype  # computed in float32, gradient in dtype
    assert torch.isfinite(lp.grad.float()).all()
    # Here old_log_prob and advantages are rounded to dtype too. Measured |loss - ref| at this batch (|ref| 0.59):
    # bf16 1.4e-3, fp16 2.4e-4, fp32 4.2e-8; the largest over seeds 0-199: 3.2e-3, 5.6e-4, 1.8e-7.
    tol = {torch.bfloat16: 4e-3, torch.float16: 7e-4, torch.float32: 1e-6}[dtype]
    assert loss.double().item() == pytest.approx(ref.item(), rel=tol, abs=tol)
    assert all(torch.isfinite(v.float()) for v in m.values())


def test_padding_may_hold_anything_and_empty_mask_gives_zero() -> None:
    new, old, adv, mask = make_batch(seed=9)
    bad_new, bad_old = new.clone(), old.clone()
    bad_new[mask == 0] = float("nan")
    bad_old[mask == 0] = float("inf")
    lp = bad_new.clone().requires_grad_(True)
    loss, m = policy_loss(lp, bad_old, adv, mask, "band")
    loss.backward()
    ref, _ = policy_loss(new, old, adv, mask, "band")
    assert loss.item() == pytest.approx(ref.item(), rel=1e-12)
    assert torch.isfinite(lp.grad).all() and (lp.grad[mask == 0] == 0).all()
    for mode in AGG_MODES:
        lp = new.clone().requires_grad_(True)
        loss, m = policy_loss(lp, old, adv, torch.zeros_like(mask), "band", loss_agg_mode=mode)
        loss.backward()
        assert loss.item() == 0.0 and torch.isfinite(lp.grad).all()
        assert all(torch.isfinite(v) for v in m.values())


# ---- the values the loss accepts (check_values=True), at real tokens and at padding -----------------------

DOMAIN = [  # (argument, value at one real token, accepted); band_bounds' domain: tests/core/test_bounds.py
    ("old_log_prob", -math.inf, True),  # p_old = 0: the ratio clamps at e^20
    ("old_log_prob", 0.0, True),  # p_old = 1
    ("old_log_prob", 1e-30, False),
    ("old_log_prob", 1e30, False),
    ("old_log_prob", math.nan, False),
    ("old_log_prob", math.inf, False),
    ("log_prob", 0.0, True),
    ("log_prob", -1e4, True),
    ("log_prob", -math.inf, False),  # the truncated objective -A w log pi would be infinite
    ("log_prob", 1e-30, False),
    ("log_prob", math.nan, False),
    ("ref_log_prob", 0.0, True),
    ("ref_log_prob", -math.inf, False),  # k1 = log pi - log pi_ref would be infinite
    ("ref_log_prob", 0.5, False),
    ("advantages", math.inf, False),
]


def _domain_args(name: str, value: float) -> dict:
    """A (2, 3) batch whose token [1, 1] (a real one) holds ``value`` in argument ``name``."""
    new, old, _, _ = make_batch(B=2, T=3, seed=13)
    args = {
        "log_prob": new,
        "old_log_prob": old,
        "advantages": torch.tensor([[1.0, -1.0, 0.5], [-0.5, 2.0, 1.0]], dtype=torch.float64),
        "response_mask": torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]]),
        "ref_log_prob": old - 0.1,
        "kl_coef": 0.1,
    }
    args[name] = args[name].clone()
    args[name][1, 1] = value
    return args


@pytest.mark.parametrize("name,value,accepted", DOMAIN)
def test_loss_accepts_log_probabilities_and_refuses_the_rest(name: str, value: float, accepted: bool) -> None:
    args = _domain_args(name, value)
    if not accepted:
        with pytest.raises(
            ValueError,
            match=rf"^{name} must hold .* at real tokens \(response_mask = 1\); found 1 other value\(s\), e\.g\. {re.escape(repr(value))}$",
        ):
            policy_loss(**args, clip_rule="band")
        policy_loss(**args, clip_rule="band", check_values=False)  # the switch skips the value checks
        with pytest.raises(ValueError, match=r"^check_values must be True or False, got 'false'$"):
            policy_loss(**args, clip_rule="band", check_values="false")  # truthy: would check
        return
    for rule in CLIP_RULES.names():
        lp = args["log_prob"].clone().requires_grad_(True)
        loss, m = policy_loss(**(args | {"log_prob": lp}), clip_rule=rule, entropy=torch.ones(2, 3))
        (g,) = torch.autograd.grad(loss, lp)
        assert torch.isfinite(loss) and torch.isfinite(g).all(), rule
        assert not any(torch.isnan(v) for v in m.values()), rule


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf, 1e30])
@pytest.mark.parametrize("rule", CLIP_RULES.names())
def test_padding_is_never_read_by_any_rule(rule: str, value: float) -> None:
    """Masked-out positions may hold anything (verl and TRL pad with whatever the model computed): the checks pass,
    and loss, gradient and metrics equal those of the same batch with valid padding."""
    args = _domain_args("log_prob", -0.5)
    args["advantages"] = args["advantages"].clone()
    dirty = {
        k: v.clone()
        for k, v in args.items()
        if k in ("log_prob", "old_log_prob", "advantages", "ref_log_prob")
    }
    for x in dirty.values():
        x[1, 2] = value
    out = []
    for inputs in (args, args | dirty):
        lp = inputs["log_prob"].clone().requires_grad_(True)
        loss, m = policy_loss(**(inputs | {"log_prob": lp}), clip_rule=rule, entropy=torch.ones(2, 3))
        out.append((loss, torch.autograd.grad(loss, lp)[0], m))
    (loss, g, m), (dirty_loss, dirty_g, dirty_m) = out
    assert torch.equal(dirty_loss, loss) and torch.equal(dirty_g, g)
    assert all(torch.equal(dirty_m[k], m[k]) for k in m)


def test_extreme_log_probs_are_finite_forward_and_backward() -> None:
    """Log-ratios far past the clamp (-80, +50, +1000, -1000) give a finite loss and gradient under every rule, and
    under grpo the values of the formula (docs/method.md#objective) at ``r = exp(clamp(log ratio, -20, 20))``:
    ``r = e^-20, e^20, e^20, e^-20``; for A > 0 the terms ``-A r`` below the interval and ``-A hi = -1.2 A`` above it,
    for A < 0 ``-A lo = 0.8 |A|`` below and the dual clip's ``-A c = 10 |A|`` above; seq-mean-token-mean: their
    mean."""
    old = torch.tensor([[-1e-9, -50.0, -1000.0, 0.0]], dtype=torch.float32)
    new = torch.tensor([[-80.0, -1e-6, 0.0, -1000.0]], dtype=torch.float32, requires_grad=True)
    for rule in CLIP_RULES.names():
        for a in (1.0, -1.0):
            loss, _m = policy_loss(
                new, old, torch.tensor([a]), torch.ones(1, 4), rule, entropy=torch.ones(1, 4)
            )
            (g,) = torch.autograd.grad(loss, new)
            assert torch.isfinite(loss) and torch.isfinite(g).all(), rule
    tiny, huge = math.exp(-20.0), math.exp(20.0)
    for a, terms in ((2.0, [-2 * tiny, -2.4, -2.4, -2 * tiny]), (-2.0, [1.6, 20.0, 20.0, 1.6])):
        adv = torch.tensor([a])
        got = per_token_policy_loss(new, old, adv, torch.ones(1, 4), make_clip_rule("grpo"))
        torch.testing.assert_close(got.ratio, torch.tensor([[tiny, huge, huge, tiny]]), rtol=1e-6, atol=0)
        torch.testing.assert_close(got.loss.detach(), torch.tensor([terms]), rtol=1e-6, atol=0)
        loss, _ = policy_loss(new, old, adv, torch.ones(1, 4), "grpo")
        assert loss.item() == pytest.approx(sum(terms) / 4, rel=1e-6)
    # The e^-20 term is below float32's resolution beside the others: token 0 alone (token-sum) is -A e^-20.
    only_first = torch.tensor([[1.0, 0.0, 0.0, 0.0]])
    loss, _ = policy_loss(new, old, torch.tensor([2.0]), only_first, "grpo", loss_agg_mode="token-sum")
    assert loss.item() == pytest.approx(-2 * tiny, rel=1e-6)
    # beyond the clamp the ratio is constant, so even that unclipped term has no gradient (docs/method.md#objective)
    (g,) = torch.autograd.grad(loss, new)
    assert g[0, 0].item() == 0.0


def test_kl_penalty_and_entropy_bonus_are_added_and_reported() -> None:
    new, old, adv, mask = make_batch(seed=11)
    ref_lp = old - 0.1
    ent = torch.rand_like(new)
    base, _ = policy_loss(new, old, adv, mask, "band")
    loss, m = policy_loss(
        new, old, adv, mask, "band", ref_log_prob=ref_lp, kl_coef=0.5, entropy=ent, entropy_coef=0.1
    )
    assert loss.item() == pytest.approx(
        base.item() + 0.5 * m["loss/kl"].item() - 0.1 * m["loss/entropy"].item()
    )
    k3 = torch.exp(ref_lp - new) - (ref_lp - new) - 1
    want = bandpo.losses.aggregate(k3, mask, "seq-mean-token-mean")
    assert m["loss/kl"].item() == pytest.approx(want.item(), rel=1e-10)


def test_metrics_on_hand_built_case() -> None:
    p = torch.tensor([[0.1, 0.1, 0.5, 0.9, 0.3, 0.7]], dtype=torch.float64)
    r = torch.tensor([[1.5, 0.5, 1.5, 1.0, 0.5, 1.1]], dtype=torch.float64)
    adv = torch.tensor([[1.0, -1.0, 1.0, 1.0, 1.0, -1.0]], dtype=torch.float64)
    old = p.log()
    _loss, m = policy_loss(old + r.log(), old, adv, torch.ones(1, 6), "grpo")
    # up: tokens 0 (p 0.1) and 2 (p 0.5); down: token 1 (p 0.1); out: also token 4 (r 0.5, A > 0)
    assert m["clip/frac_up"].item() == pytest.approx(2 / 6)
    assert m["clip/frac_down"].item() == pytest.approx(1 / 6)
    assert m["clip/frac"].item() == pytest.approx(3 / 6)
    assert m["clip/frac_out"].item() == pytest.approx(4 / 6)
    assert m["clip/tail_share"].item() == pytest.approx(2 / 3)
    assert m["clip/tail_share_up"].item() == pytest.approx(1 / 2)
    assert m["clip/frac_up/p0.0-0.2"].item() == pytest.approx(1 / 2)
    assert m["clip/frac_down/p0.0-0.2"].item() == pytest.approx(1 / 2)
    assert m["clip/frac/p0.4-0.6"].item() == pytest.approx(1.0)
    assert m["tokens/share/p0.8-1.0"].item() == pytest.approx(1 / 6)
    assert m["band/hi_mean"].item() == pytest.approx(1.2)
    assert m["policy/ratio_max"].item() == pytest.approx(1.5)
    assert m["policy/ppo_kl"].item() == pytest.approx(-r.log().mean().item())
    assert all(not v.requires_grad for v in m.values())


def test_truncated_objective_on_hand_built_tokens() -> None:
    """truncation_c: L = -A sg(min(r, c)) logp inside the region, 0 outside, no dual clip (module docstring)."""
    old = torch.log(torch.tensor([[0.5, 0.5, 0.01, 0.01, 0.5]], dtype=torch.float64))
    r = torch.tensor([[1.05, 2.0, 50.0, 50.0, 0.3]], dtype=torch.float64)
    adv = torch.tensor([[1.0, 1.0, 1.0, -1.0, -1.0]], dtype=torch.float64)
    rule = make_clip_rule("band", divergence="tv", delta=0.2, cap=None)  # p 0.5: [0.6, 1.4]; p 0.01: [0, 21]
    lp = (old + r.log()).requires_grad_(True)
    loss, m = policy_loss(lp, old, adv, torch.ones(1, 5), rule, loss_agg_mode="token-sum", truncation_c=3.0)
    (g,) = torch.autograd.grad(loss, lp)
    # inside: 0 (r 1.05, A > 0), 3 (r 50 > c, A < 0: truncated, where the dual clip would give 0); outside: 1
    # (r 2 > hi 1.4), 2 (r 50 > hi 21), 4 (r 0.3 < lo 0.6, A < 0)
    want_g = torch.tensor([[-1.05, 0.0, 0.0, 3.0, 0.0]], dtype=torch.float64)
    torch.testing.assert_close(g, want_g, rtol=1e-14, atol=0)
    want = -1.05 * lp[0, 0] + 3.0 * lp[0, 3]
    assert loss.item() == pytest.approx(want.item(), rel=1e-14)
    assert m["clip/frac_dual"].item() == pytest.approx(1 / 5)  # the truncation binds on token 3
    # the clipped objective with its dual clip zeroes token 3 instead
    loss2, _ = policy_loss(lp, old, adv, torch.ones(1, 5), rule, loss_agg_mode="token-sum", clip_ratio_c=3.0)
    (g2,) = torch.autograd.grad(loss2, lp)
    assert g2[0, 3].item() == 0.0 and g2[0, 0].item() == pytest.approx(-1.05)


@pytest.mark.parametrize("entry", ["policy_loss", "per_token_policy_loss"])
@pytest.mark.parametrize(
    "rule,kwargs",
    [
        (make_clip_rule("dppo_tv", truncation_c=3.0), {}),
        (make_clip_rule("dppo_kl", truncation_c=3.0), {}),
        (make_clip_rule("band"), {"truncation_c": 3.0}),
    ],
    ids=["dppo_tv", "dppo_kl", "band-truncated"],
)
def test_truncated_objective_refuses_a_clip_ratio_c_it_would_ignore(entry: str, rule, kwargs: dict) -> None:
    """The truncated objective (c = 3 here) has no dual clip: a ``clip_ratio_c`` other than its ``c`` is refused, not
    ignored; left unset, ``None`` or equal to ``c`` (verl passes its one ``clip_ratio_c`` to both objectives) it is
    accepted and changes nothing."""
    _, old, adv, mask = make_batch(seed=17)
    old = old - 2.0  # p_old <= e^-2, so that ratios reach past c
    new = (
        old + 1.5 * torch.randn(old.shape, generator=torch.Generator().manual_seed(17), dtype=old.dtype)
    ).clamp(max=0.0)
    assert (torch.exp(new - old)[mask > 0] > 3.0).sum() >= 3  # tokens where c binds
    args = {"log_prob": new, "old_log_prob": old, "advantages": adv, "response_mask": mask, "clip_rule": rule}

    def loss(**extra) -> torch.Tensor:
        out = ENTRY_POINTS[entry](**args, **extra)
        return out[0] if entry == "policy_loss" else out.loss

    with pytest.raises(
        ValueError,
        match=r"^clip_ratio_c=5\.0 has no effect on the truncated objective of .*\(its c is 3; it has no dual "
        r"clip\): set c with .* and leave clip_ratio_c unset \(or equal to c\)$",
    ):
        loss(clip_ratio_c=5.0, **kwargs)
    ref = loss(**kwargs)
    for same in (None, 3, 3.0):
        assert torch.equal(loss(clip_ratio_c=same, **kwargs), ref)
    if (
        kwargs
    ):  # the same rule without truncation_c: the clipped objective, whose dual clip reads clip_ratio_c
        assert not torch.equal(loss(clip_ratio_c=3.0), loss(clip_ratio_c=5.0))


def _exact_logp(p: float) -> float:
    """A float64 log-probability whose exp is exactly the float ``p`` (searched around log(p))."""
    x = torch.log(torch.tensor(p, dtype=torch.float64))
    for _ in range(64):
        e = torch.exp(x).item()
        if e == p:
            return x.item()
        x = torch.nextafter(x, torch.tensor(math.inf if e < p else -math.inf, dtype=torch.float64))
    raise AssertionError(f"no float64 logp with exp(logp) == {p}")


def test_tail_share_and_bins_agree_at_the_edge() -> None:
    """Bins are [a, b): a clipped token at p_old = 0.2 exactly is in p0.2-0.4 and not in the tail."""
    at_edge = _exact_logp(0.2)
    below = math.nextafter(at_edge, -math.inf)
    old = torch.tensor([[at_edge, below, math.log(0.5)]], dtype=torch.float64)
    assert torch.exp(old[0, 0]).item() == 0.2 and torch.exp(old[0, 1]).item() < 0.2
    adv = torch.tensor([1.0], dtype=torch.float64)
    for clipped, tail in (
        ([True, False, False], 0.0),
        ([False, True, False], 1.0),
        ([True, True, True], 1 / 3),
    ):
        r = torch.tensor([[2.0 if c else 1.0 for c in clipped]], dtype=torch.float64)
        _loss, m = policy_loss(old + r.log(), old, adv, torch.ones(1, 3), "grpo")
        assert m["clip/tail_share"].item() == pytest.approx(tail), clipped
        assert m["clip/tail_share_up"].item() == pytest.approx(tail), clipped
        in_tail_bin = m["clip/frac/p0.0-0.2"].item() * m["tokens/share/p0.0-0.2"].item()
        assert in_tail_bin == pytest.approx(tail * m["clip/frac"].item())
    assert m["tokens/share/p0.2-0.4"].item() == pytest.approx(1 / 3)  # the edge token
    assert m["tokens/share/p0.0-0.2"].item() == pytest.approx(1 / 3)


def _good_args() -> dict:
    """Valid arguments of ``policy_loss`` (B = 2, T = 3) for the error tests to spoil one at a time."""
    return {
        "log_prob": -torch.rand(2, 3),
        "old_log_prob": -torch.rand(2, 3),
        "advantages": torch.zeros(2),
        "response_mask": torch.ones(2, 3),
        "clip_rule": "band",
    }


@pytest.mark.parametrize(
    "kwargs,match",
    [
        (
            {"old_log_prob": torch.zeros(2, 4)},
            r"old_log_prob shape \(2, 4\) must equal log_prob shape \(2, 3\)",
        ),
        ({"response_mask": torch.ones(2, 4)}, r"response_mask shape \(2, 4\) must equal"),
        ({"advantages": torch.zeros(3)}, r"advantages shape \(3,\) must be \(B,\), \(B, 1\) or \(B, T\)"),
        ({"response_mask": torch.full((2, 3), 2.0)}, "response_mask must hold only 0 and 1"),
        (
            {"advantages": torch.tensor([float("nan"), 0.0])},
            r"advantages must hold finite numbers at real tokens \(response_mask = 1\); found 3 other value",
        ),
        ({"loss_agg_mode": "mean"}, r"unknown loss aggregation mode 'mean'.*valid names: token-mean"),
        ({"clip_rule": "ppo"}, r"unknown clip rule 'ppo'.*valid names: grpo, clip_higher, dcpo, band"),
        ({"clip_ratio_c": 0.5}, "clip_ratio_c must be a number > 1"),
        ({"clip_ratio_c": float("nan")}, r"clip_ratio_c must be a number > 1 .*got nan"),
        ({"clip_ratio_c": "3"}, r"clip_ratio_c must be a number > 1 .*got '3'"),
        ({"truncation_c": 1.0}, r"truncation_c must be a finite number > 1, got 1.0"),
        ({"kl_coef": float("nan")}, r"kl_coef must be a finite number >= 0, got nan"),
        ({"kl_coef": float("inf")}, r"kl_coef must be a finite number >= 0, got inf"),
        ({"kl_coef": "0.1"}, r"kl_coef must be a finite number >= 0, got '0.1'"),
        ({"kl_coef": -0.1}, r"kl_coef must be a finite number >= 0, got -0.1"),
        ({"entropy_coef": float("nan")}, r"entropy_coef must be a finite number >= 0, got nan"),
        ({"kl_estimator": "bogus"}, r"unknown kl estimator 'bogus'.*valid names: k1, k2, k3"),
        ({"clip_rule": "dppo_kl", "entropy": torch.ones(2, 4)}, r"entropy shape \(2, 4\) must equal"),
        ({"kl_coef": 0.1}, "kl_coef > 0 needs ref_log_prob"),
    ],
)
def test_bad_input(kwargs: dict, match: str) -> None:
    args = _good_args() | kwargs
    with pytest.raises(ValueError, match=match):
        policy_loss(**args)


@pytest.mark.parametrize(
    "kwargs,match",
    [
        ({"log_prob": -torch.rand(6)}, r"log_prob must have shape \(B, T\), got \(6,\)"),
        ({"old_log_prob": torch.zeros(2, 4)}, r"old_log_prob shape \(2, 4\) must equal log_prob shape"),
        ({"advantages": torch.zeros(3)}, r"advantages shape \(3,\) must be \(B,\), \(B, 1\) or \(B, T\)"),
        ({"clip_ratio_c": 1.0}, "clip_ratio_c must be a number > 1"),
        ({"truncation_c": 0.5}, r"truncation_c must be a finite number > 1, got 0.5"),
        ({"rollout_is_weights": torch.ones(2, 4)}, r"rollout_is_weights shape \(2, 4\) must equal"),
        ({"clip_rule": "adaptive_band"}, r"clip rule 'adaptive_band' needs the per-token entropy.*got None"),
        ({"clip_rule": "adaptive_band", "entropy": torch.ones(3, 3)}, r"entropy shape \(3, 3\) must equal"),
    ],
)
@pytest.mark.parametrize("entry", ["policy_loss", "per_token_policy_loss"])
def test_both_entry_points_check_the_same_inputs(entry: str, kwargs: dict, match: str) -> None:
    """``policy_loss`` and ``per_token_policy_loss`` (the verl adapter's entry) share one input check."""
    args = _good_args() | kwargs
    if entry == "per_token_policy_loss":
        args["clip_rule"] = make_clip_rule(args["clip_rule"])
    with pytest.raises(ValueError, match=match):
        ENTRY_POINTS[entry](**args)
    with pytest.raises(TypeError, match=r"advantages must be a floating-point tensor"):
        ENTRY_POINTS[entry](**(args | {"advantages": torch.zeros(2, dtype=torch.long)}))


_BAD_TYPES = [
    ({"rollout_is_weights": [[1.0] * 3] * 2}, r"^rollout_is_weights must be a torch\.Tensor, got list$"),
    (
        {"rollout_is_weights": torch.ones(2, 3, dtype=torch.long)},
        r"^rollout_is_weights must be a floating-point",
    ),
    *([({"entropy": np.ones((2, 3))}, r"^entropy must be a torch\.Tensor, got ndarray$")] if np else []),
    (
        {"entropy": torch.ones(2, 3, dtype=torch.long)},
        r"^entropy must be a floating-point tensor .*torch\.int64$",
    ),
    *(
        [({"ref_log_prob": np.ones((2, 3))}, r"^ref_log_prob must be a torch\.Tensor, got ndarray$")]
        if np
        else []
    ),
    ({"ref_log_prob": torch.zeros(2, 3, dtype=torch.long)}, r"^ref_log_prob must be a floating-point tensor"),
    (
        {"clip_rule": {"name": "band"}},
        r"^clip_rule must be a registered clip rule name \(grpo, .*band.*\) or a ClipRule .*got dict",
    ),
]


@pytest.mark.parametrize(
    ("entry", "kwargs", "match"),
    [
        (entry, kwargs, match)
        for entry in ENTRY_POINTS
        for kwargs, match in _BAD_TYPES
        if entry == "policy_loss"
        or "ref_log_prob" not in kwargs  # per_token_policy_loss takes no ref_log_prob
    ],
)
def test_optional_tensors_and_the_clip_rule_are_type_checked(entry: str, kwargs: dict, match: str) -> None:
    """A list, an array or an integer tensor as an optional tensor, or a dict as the rule, is refused in one line
    naming the argument (it raised AttributeError deep in the objective, or passed silently)."""
    with pytest.raises(TypeError, match=match):
        ENTRY_POINTS[entry](**(_good_args() | kwargs))


@pytest.mark.parametrize(
    ("name", "value", "allowed"),
    [
        ("rollout_is_weights", math.nan, "finite numbers >= 0"),
        ("rollout_is_weights", math.inf, "finite numbers >= 0"),
        ("rollout_is_weights", -0.5, "finite numbers >= 0"),
        ("entropy", math.nan, "finite numbers"),
        ("entropy", -math.inf, "finite numbers"),
    ],
)
def test_bad_weights_or_entropy_at_a_real_token_are_refused(name: str, value: float, allowed: str) -> None:
    """A NaN or negative rollout_is_weights gave a NaN or sign-flipped loss, a NaN entropy a NaN loss: refused at
    real tokens in one line naming the argument, how many and the first bad value; padding may hold them, and
    ``check_values=False`` skips the check (the loss is then what the values make it)."""
    args = _good_args() | {
        "advantages": torch.tensor([1.0, -1.0]),
        "response_mask": torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]]),
        "rollout_is_weights": torch.ones(2, 3),
        "entropy": torch.ones(2, 3),
        "entropy_coef": 0.1,
    }
    bad = args[name].clone()
    bad[0, 2] = bad[1, 0] = value
    match = rf"^{name} must hold {allowed} at real tokens \(response_mask = 1\); found 2 other value\(s\), e\.g\. {re.escape(repr(value))}$"
    for rule in ("band", "adaptive_band"):
        with pytest.raises(ValueError, match=match):
            policy_loss(**(args | {name: bad, "clip_rule": rule}))
    loss, _ = policy_loss(**(args | {name: bad}), check_values=False)
    if value == -0.5:  # finite, and what the weights make it: they multiply each token's term, sign and all
        lo, hi = make_clip_rule("band").bounds(args["old_log_prob"])
        ref = [args[k] for k in ("log_prob", "old_log_prob", "advantages", "response_mask")]
        # minus the entropy bonus: 0.1 * agg(entropy 1) = 0.1
        want = naive_loss(*ref, lo, hi, "seq-mean-token-mean", weights=bad) - 0.1
        assert loss.item() == pytest.approx(want.item(), rel=1e-6, abs=1e-6)
        unsigned = naive_loss(*ref, lo, hi, "seq-mean-token-mean", weights=bad.abs()) - 0.1
        assert abs(loss.item() - unsigned.item()) > 1e-3  # the sign flip shows in the loss
    else:
        assert not torch.isfinite(loss)  # what the check prevents
    padded = args[name].clone()
    padded[1, 2] = value  # padding: never read
    want, _ = policy_loss(**args)
    assert torch.equal(policy_loss(**(args | {name: padded}))[0], want)


@pytest.mark.parametrize("mode", AGG_MODES)
def test_a_zero_rollout_weight_drops_the_tokens_term_but_keeps_it_counted(mode: str) -> None:
    """A rollout weight 0 is accepted (``>= 0``) and multiplies the token's term ``L`` (``_objective``): its term and
    gradient vanish, but the token stays a real one for the aggregation. So under the sum modes (token-sum,
    seq-mean-token-sum and its -norm, its row keeping other tokens) the loss and gradient are those of the same
    batch with that token masked out; the mean modes still count it: token-mean divides by 5 tokens, not 4, and
    seq-mean-token-mean divides row 0 by 3 tokens, not 2."""
    new, old, _, _ = make_batch(B=2, T=3, seed=13)
    adv = torch.tensor([1.0, -0.5], dtype=torch.float64)
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]])
    zero_weight = torch.ones(2, 3, dtype=torch.float64)
    zero_weight[0, 0] = 0.0
    masked = mask.clone()
    masked[0, 0] = 0.0

    def loss_and_grad(mask: torch.Tensor, **kwargs) -> tuple[torch.Tensor, torch.Tensor]:
        lp = new.clone().requires_grad_(True)
        loss, _ = policy_loss(lp, old, adv, mask, "band", loss_agg_mode=mode, **kwargs)
        return loss.detach(), torch.autograd.grad(loss, lp)[0]

    loss, g = loss_and_grad(mask, rollout_is_weights=zero_weight)
    loss_masked, g_masked = loss_and_grad(masked)
    assert g[0, 0] == 0.0 and loss_and_grad(mask)[1][0, 0] != 0.0  # the weight, not a clip, zeroes it
    if mode == "token-mean":
        assert loss.item() == pytest.approx(loss_masked.item() * 4 / 5, rel=1e-12)
        torch.testing.assert_close(g, g_masked * 4 / 5, rtol=1e-12, atol=0)
    elif mode == "seq-mean-token-mean":
        row1 = policy_loss(new[1:], old[1:], adv[1:], mask[1:], "band", loss_agg_mode=mode)[0]
        assert loss.item() == pytest.approx(((loss_masked - row1 / 2) * 2 / 3 + row1 / 2).item(), rel=1e-12)
    else:
        assert torch.equal(loss, loss_masked) and torch.equal(g, g_masked)


@pytest.mark.parametrize("entry", ["policy_loss", "per_token_policy_loss"])
def test_tensors_on_the_meta_device_or_on_two_devices_are_refused(entry: str) -> None:
    """Tensors on the meta device, or on different devices, raised torch's own errors from deep in the objective (or,
    on meta without check_values, returned a meta loss): refused first, in one line naming each argument and its
    device."""
    args = _good_args() | {"clip_rule": make_clip_rule("band"), "entropy": torch.ones(2, 3)}
    meta = {k: v.to("meta") for k, v in args.items() if isinstance(v, torch.Tensor)}
    with pytest.raises(
        ValueError,
        match=r"^log_prob, old_log_prob, advantages, response_mask, entropy are on the meta device, which holds "
        r"shapes but no values: pass tensors with values \(on the model's device\)$",
    ):
        ENTRY_POINTS[entry](**(args | meta))
    with pytest.raises(
        ValueError,
        match=r"^the tensor arguments must be on one device, got log_prob on cpu, old_log_prob on meta, "
        r"advantages on cpu, response_mask on cpu, entropy on cpu$",
    ):
        ENTRY_POINTS[entry](**(args | {"old_log_prob": meta["old_log_prob"]}))
    if torch.cuda.is_available():
        with pytest.raises(
            ValueError, match=r"^the tensor arguments .* response_mask on cuda:0, entropy on cpu$"
        ):
            ENTRY_POINTS[entry](
                **(
                    args
                    | {k: v.cuda() for k, v in args.items() if k != "entropy" and isinstance(v, torch.Tensor)}
                )
            )


def test_entropy_coef_without_entropy_is_refused() -> None:
    """``entropy_coef > 0`` with no ``entropy``: the bonus was dropped silently (kl_coef without ref_log_prob
    raised); now refused in one line naming both arguments, as the KL penalty is."""
    match = r"^entropy_coef > 0 needs entropy \(B, T\), the policy's per-token entropy: pass entropy=\.\.\. or set entropy_coef=0$"
    with pytest.raises(ValueError, match=match):
        policy_loss(**_good_args(), entropy_coef=0.1)
    loss, m = policy_loss(**_good_args(), entropy_coef=0.1, entropy=torch.ones(2, 3))
    assert m["loss/entropy"] == 1.0 and loss == m["loss/policy"] - 0.1
    policy_loss(**_good_args(), entropy_coef=0.0)  # no bonus asked: no entropy needed


def test_group_advantages() -> None:
    r = torch.tensor([1.0, 0.0, 1.0, 0.0, 0.1, 0.1, 0.1, 0.1])
    a = group_advantages(r, 4)
    std = torch.tensor([1.0, 0.0, 1.0, 0.0]).std()
    assert torch.allclose(a[:4], torch.tensor([0.5, -0.5, 0.5, -0.5]) / (std + 1e-6))
    assert torch.equal(a[4:], torch.zeros(4))  # constant group: exactly 0
    assert torch.allclose(
        group_advantages(r, 4, normalize_std=False)[:4], torch.tensor([0.5, -0.5, 0.5, -0.5])
    )
    with pytest.raises(ValueError, match=r"group_size must divide the number of rewards 8 .*, got 3$"):
        group_advantages(r, 3)
    for bad in (True, 0, 4.0, "4"):  # a bool is no group size (True ran as G = 1, all advantages 0)
        with pytest.raises(ValueError, match=rf"^group_size must be an integer >= 1, got {bad!r}$"):
            group_advantages(r, bad)
    if np is not None:  # numpy's integers are integers
        assert torch.equal(group_advantages(r, np.int64(4)), a)
    for eps in (float("nan"), -1e-6, float("inf")):
        with pytest.raises(ValueError, match=rf"eps must be a finite number >= 0, got {eps!r}"):
            group_advantages(r, 4, eps=eps)


@pytest.mark.parametrize(("index", "value"), [(5, math.nan), (0, math.inf), (7, -math.inf)])
def test_group_advantages_refuses_a_non_finite_reward(index: int, value: float) -> None:
    """One NaN or inf reward made its whole group's advantages NaN: refused in one line with its index and value
    (and how many); ``check_values=False`` skips the check."""
    r = torch.tensor([1.0, 0.0, 1.0, 0.0, 0.1, 0.2, 0.1, 0.1])
    r[index] = value
    match = rf"^rewards must hold finite numbers \(.*\); found 1 other value\(s\), the first rewards\[{index}\] = {value!r}$"
    with pytest.raises(ValueError, match=match):
        group_advantages(r, 4)
    assert torch.isnan(group_advantages(r, 4, check_values=False)[index // 4 * 4]).item()
    for name in ("check_values", "normalize_std"):
        with pytest.raises(ValueError, match=rf"^{name} must be True or False, got 'no'$"):
            group_advantages(r, 4, **{name: "no"})
    r[3] = math.nan
    with pytest.raises(ValueError, match=rf"found 2 other value\(s\), the first rewards\[{min(index, 3)}\]"):
        group_advantages(r, 4)


@settings(max_examples=200, deadline=None)
@example(rewards=[3e38, 3e38, 3e38, 1.0, 0.0, 1.0, 0.0, 1.0], normalize_std=True)  # NaN before
@example(rewards=[3e38, 3e38, 3e38, 1.0, 0.0, 1.0, 0.0, 1.0], normalize_std=False)
@given(
    rewards=st.lists(st.floats(width=32, allow_nan=False, allow_infinity=False), min_size=8, max_size=8),
    normalize_std=st.booleans(),
)
def test_group_advantages_are_finite_for_any_finite_float32_rewards(
    rewards: list[float], normalize_std: bool
) -> None:
    """A group of rewards near float32's largest (3e38 x 3 and 1) had an infinite mean: NaN advantages. Such a group
    is redone in float64, close to a float64 reference and finite with ``normalize_std`` (and without it wherever
    ``r - mean`` is a float32 number); a group that float32 computes finitely keeps float32's bits."""
    r = torch.tensor(rewards, dtype=torch.float32)
    got = group_advantages(r, 4, normalize_std=normalize_std)
    assert got.dtype == torch.float32

    def reference(dtype: torch.dtype) -> torch.Tensor:
        g = r.to(dtype).view(2, 4)
        a = g - g.mean(dim=1, keepdim=True)
        if normalize_std:
            a = a / (g.std(dim=1, keepdim=True) + 1e-6)
        return torch.where((g == g[:, :1]).all(dim=1, keepdim=True), 0.0, a).view(-1).float()

    native, wide = reference(torch.float32), reference(torch.float64)
    fine = torch.isfinite(native)
    assert torch.equal(got[fine], native[fine])  # float32's bits where float32 is finite
    assert torch.equal(got[~fine], wide[~fine])
    if normalize_std:  # advantages of order 1: float32's rounding only
        assert torch.allclose(got, wide, rtol=1e-4, atol=1e-5)
    if normalize_std or wide.abs().max() <= torch.finfo(torch.float32).max:
        assert torch.isfinite(got).all()


def test_group_advantages_keep_a_half_precision_dtype() -> None:
    """float16 rewards near its largest (65504) give float16 advantages close to the exact ones."""
    r = torch.tensor([6e4, 6e4, 6e4, 1.0], dtype=torch.float16)
    a = group_advantages(r, 4)
    assert a.dtype == torch.float16
    assert torch.allclose(a.float(), torch.tensor([0.5, 0.5, 0.5, -1.5]), rtol=2e-3)


@pytest.mark.parametrize("dtype", [torch.bool, torch.uint8, torch.int32, torch.int64])
def test_group_advantages_accepts_integer_and_bool_rewards(dtype: torch.dtype) -> None:
    """A verifier's 0/1 rewards as a bool or integer tensor were refused: cast to float32, the same advantages as
    the float32 rewards."""
    r = torch.tensor([1, 0, 1, 1, 0, 0, 0, 0])
    a = group_advantages(r.to(dtype), 4)
    assert a.dtype == torch.float32
    assert torch.equal(a, group_advantages(r.to(torch.float32), 4))
    with pytest.raises(TypeError, match=r"^rewards must be a floating-point tensor"):
        group_advantages(r.to(torch.complex64), 4)


@pytest.mark.parametrize(
    ("estimator", "want"),
    [
        ("k1", lambda d: d),
        ("kl", lambda d: d),
        ("k2", lambda d: 0.5 * d * d),
        ("mse", lambda d: 0.5 * d * d),
        ("k3", lambda d: torch.exp(-d) + d - 1),
        ("low_var_kl", lambda d: torch.exp(-d) + d - 1),
    ],
)
def test_kl_estimators_against_their_formulas(estimator, want) -> None:
    """Each name and alias reaches its own estimator (d = logp - ref, small enough for no clamp)."""
    g = torch.Generator().manual_seed(3)
    lp, ref = (
        -torch.rand(3, 5, generator=g, dtype=torch.float64),
        -torch.rand(3, 5, generator=g, dtype=torch.float64),
    )
    got = bandpo.losses.kl_penalty(lp, ref, estimator)
    torch.testing.assert_close(got, want(lp - ref), rtol=1e-12, atol=1e-15)


def test_kl_estimators_registry_is_the_dispatch() -> None:
    """A registered estimator is used by ``policy_loss`` at once; unregistering removes it and its aliases."""
    new, old, adv, mask = make_batch(seed=5)

    def zero_kl(log_prob: torch.Tensor, ref_log_prob: torch.Tensor) -> torch.Tensor:
        return torch.zeros_like(log_prob)

    bandpo.losses.KL_ESTIMATORS.register("test-zero", zero_kl, aliases=("test_zero",))
    try:
        _, m = policy_loss(
            new, old, adv, mask, "band", ref_log_prob=old, kl_coef=0.5, kl_estimator="test_zero"
        )
        assert m["loss/kl"].item() == 0.0
    finally:
        assert bandpo.losses.KL_ESTIMATORS.unregister("test-zero") is zero_kl
    assert "test_zero" not in bandpo.losses.KL_ESTIMATORS
    with pytest.raises(ValueError, match=r"unknown kl estimator 'test-zero'"):
        bandpo.losses.kl_penalty(new, old, "test-zero")
