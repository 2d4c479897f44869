"""``bandpo.losses.diagnostics.clip_metrics`` (one fused pass) against the naive implementation it replaced (one
masked mean per metric, kept verbatim as ``tests/helpers/naive_diagnostics.py``'s ``naive_clip_metrics``, the baseline of
``benchmarks/bench.py``): the same names in the same order and the same values, bit for bit, on ragged batches with NaN and inf in the padding, empty bins, an empty mask, p_old = 0
and p_old exactly at a bin edge, in float32 and float64; the ``basic`` level against ``full``."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import Tensor

from bandpo.losses import make_clip_rule, policy_loss
from bandpo.losses.diagnostics import (
    _N_CODES,
    _PADDING,
    DIAGNOSTICS,
    PROB_BIN_EDGES,
    _count_codes,
    basic_clip_metrics,
    check_diagnostics,
    clip_metrics,
    side_metrics,
)
from bandpo.losses.policy_loss import per_token_policy_loss
from helpers.naive_diagnostics import naive_clip_metrics


def assert_same_metrics(got: dict[str, Tensor], want: dict[str, Tensor]) -> None:
    assert list(got) == list(want)  # names and order
    for name, value in want.items():
        assert got[name].shape == () and got[name].dtype == value.dtype, name
        assert not got[name].requires_grad, name
        if value.isnan():
            same = bool(got[name].isnan())
        else:  # torch.equal says -0.0 == 0.0: the sign bit too
            same = torch.equal(got[name], value) and bool(torch.signbit(got[name]) == torch.signbit(value))
        assert same, f"{name}: fused {got[name].item()!r}, naive {value.item()!r}"


def _edge_logps(p: float, dtype: torch.dtype) -> tuple[float, float]:
    """The two neighbouring log-probabilities in ``dtype`` on either side of bin edge ``p``: the smallest whose exp
    (in ``dtype``) is ``>= p``, and the one below it (exp ``< p``)."""
    target = torch.tensor(p, dtype=dtype)
    x = torch.log(target)
    down, up = torch.tensor(-math.inf, dtype=dtype), torch.tensor(math.inf, dtype=dtype)
    while torch.exp(x) < target:
        x = torch.nextafter(x, up)
    while torch.exp(torch.nextafter(x, down)) >= target:
        x = torch.nextafter(x, down)
    return x.item(), torch.nextafter(x, down).item()


def batch(
    seed: int, dtype: torch.dtype, *, ragged: bool = True, padding: float = math.nan
) -> dict[str, Tensor]:
    """Ratios from e^-2 to e^2 around bounds [0.6, 1] x [1, 1.6], both signs of advantage and zeros, p_old over
    every bin with tokens on both sides of each edge (0.2, 0.4, 0.6, 0.8), at p_old = 0 (log-prob -inf, hi = inf) and
    at 1, a ragged mask, and ``padding`` written into every float argument where the mask is 0."""
    g = torch.Generator().manual_seed(seed)
    B, T = 6, 40
    old = torch.log(torch.rand(B, T, generator=g, dtype=dtype))
    for j, edge in enumerate(PROB_BIN_EDGES):
        old[:, j], old[:, 10 + j] = _edge_logps(edge, dtype)
    old[:, 4], old[:, 5] = -math.inf, 0.0
    log_ratio = (torch.randn(B, T, generator=g, dtype=dtype) * 0.7).clamp(-2, 2)
    ratio = torch.exp(log_ratio)
    lo = 1 - 0.4 * torch.rand(B, T, generator=g, dtype=dtype)
    hi = 1 + 0.6 * torch.rand(B, T, generator=g, dtype=dtype)
    hi[:, 4] = math.inf
    adv = torch.randn(B, T, generator=g, dtype=dtype)
    adv[:, 6:9] = 0.0
    lengths = torch.randint(1, T + 1, (B,), generator=g) if ragged else torch.full((B,), T)
    lengths[0] = T
    mask = torch.arange(T).unsqueeze(0) < lengths.unsqueeze(1)
    dual = (torch.rand(B, T, generator=g) < 0.2) & (adv < 0)
    out = {"ratio": ratio, "lo": lo, "hi": hi, "advantages": adv, "old_log_prob": old, "log_ratio": log_ratio}
    for x in out.values():
        x[~mask] = padding
    return {**out, "mask": mask, "dual_active": dual}


def both(b: dict[str, Tensor], **changes: object) -> tuple[dict[str, Tensor], dict[str, Tensor]]:
    args = {**b, **changes}
    return clip_metrics(**args), naive_clip_metrics(**args)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("padding", [math.nan, math.inf, -math.inf, 0.0])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_fused_equals_naive_on_ragged_batches(dtype: torch.dtype, padding: float, seed: int) -> None:
    b = batch(seed, dtype, padding=padding)
    assert_same_metrics(*both(b))
    assert_same_metrics(*both(b, dual_active=None, log_ratio=None))  # log(ratio), no dual clip metric
    assert_same_metrics(*both(b, advantages=b["advantages"][:, :1]))  # (B, 1) broadcast
    assert_same_metrics(*both(b, mask=b["mask"].to(dtype)))  # a 0/1 float mask


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_empty_bins_and_an_empty_mask(dtype: torch.dtype) -> None:
    b = batch(3, dtype, ragged=False)
    one_bin = torch.full_like(b["old_log_prob"], math.log(0.5))  # every token in p0.4-0.6
    got, want = both(b, old_log_prob=one_bin)
    assert_same_metrics(got, want)
    assert got["tokens/share/p0.4-0.6"].item() == 1.0 and got["clip/frac/p0.0-0.2"].item() == 0.0
    assert got["clip/tail_share"].item() == 0.0
    nothing = torch.zeros_like(b["mask"])
    got, want = both(b, mask=nothing)
    assert_same_metrics(got, want)
    assert all(v.item() == 0.0 for v in got.values())
    nothing_clipped = both(b, lo=torch.zeros_like(b["lo"]), hi=torch.full_like(b["hi"], math.inf))
    assert_same_metrics(*nothing_clipped)
    assert nothing_clipped[0]["clip/frac"].item() == 0.0


@pytest.mark.parametrize("rows,cols", [(0, 24), (4, 0)])
def test_a_batch_of_no_positions_gives_the_naive_zeros(rows: int, cols: int) -> None:
    """B = 0 or T = 0 (a rank's empty micro-batch): every metric 0, as the naive code and ``basic`` give."""
    b = batch(8, torch.float32)
    empty = {k: (v[:rows] if rows == 0 else v[:, :cols]) for k, v in b.items()}
    got, want = both(empty)
    assert_same_metrics(got, want)
    assert all(v.item() == 0.0 for v in got.values())
    loss, metrics = policy_loss(
        empty["old_log_prob"] * 0, empty["old_log_prob"] * 0, empty["advantages"], empty["mask"], "band"
    )
    assert loss.item() == 0.0 and all(v.item() == 0.0 for v in metrics.values())


def test_nan_at_a_real_token_propagates_like_the_naive_minimum() -> None:
    b = batch(4, torch.float64)
    b["hi"][0, 10] = math.nan
    got, want = both(b)
    assert_same_metrics(got, want)
    assert got["band/hi_max"].isnan() and got["band/hi_min"].isnan()


def test_bf16_ratios_are_reduced_in_float32() -> None:
    b = batch(5, torch.float32, padding=0.0)
    low = {k: (v.bfloat16() if k in ("ratio", "lo", "hi") else v) for k, v in b.items()}
    got, want = both(low)
    assert_same_metrics(got, want)
    assert got["clip/frac"].dtype == torch.float32


@pytest.mark.parametrize("rule", ["grpo", "band", "dppo_kl"])
def test_policy_loss_reports_the_naive_metrics_of_its_terms(rule: str) -> None:
    """Wiring test: ``policy_loss``'s clip metrics are the diagnostics of its own per-token terms (the numbers are
    checked against the naive code in tests/losses/test_diagnostics.py::test_fused_equals_naive_on_ragged_batches)."""
    b = batch(6, torch.float32, padding=math.nan)
    old = b["old_log_prob"].clone()
    old[:, 4] = -30.0  # a finite log_prob there (policy_loss refuses -inf in log_prob)
    new = (old + b["log_ratio"]).clamp(max=0.0)
    new[~b["mask"]] = math.nan
    args = (new, old, b["advantages"], b["mask"], make_clip_rule(rule))
    _, metrics = policy_loss(*args)
    terms = per_token_policy_loss(*args)
    want = naive_clip_metrics(
        terms.ratio,
        terms.lo,
        terms.hi,
        terms.advantages,
        terms.mask,
        terms.old_log_prob,
        dual_active=terms.dual_active,
        log_ratio=terms.log_ratio,
    )
    assert_same_metrics({k: metrics[k] for k in want}, want)


BASIC = ["clip/frac", "clip/frac_up", "clip/frac_down", "clip/frac_dual", "policy/ppo_kl"]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("padding", [math.nan, math.inf, 0.0])
@pytest.mark.parametrize("seed", [0, 1])
def test_basic_is_full_restricted_to_its_names(dtype: torch.dtype, padding: float, seed: int) -> None:
    b = batch(seed, dtype, padding=padding)
    bf16 = {k: b[k].bfloat16() for k in ("ratio", "lo", "hi")}
    empty = {"mask": torch.zeros_like(b["mask"])}
    for changes in ({}, {"dual_active": None, "log_ratio": None}, {"mask": b["mask"].to(dtype)}, bf16, empty):
        args = {**b, **changes}
        full, basic = clip_metrics(**args), basic_clip_metrics(**args)
        names = BASIC if args["dual_active"] is not None else [n for n in BASIC if n != "clip/frac_dual"]
        assert list(basic) == names
        assert_same_metrics(basic, {k: full[k] for k in names})
    assert all(v.item() == 0.0 and not v.signbit() for v in basic_clip_metrics(**{**b, **empty}).values())


def test_levels_are_registered_and_an_unknown_one_is_refused() -> None:
    assert DIAGNOSTICS.names() == ["full", "basic", "none"]
    b = batch(7, torch.float32, padding=0.0)
    assert DIAGNOSTICS.get("none")(**b) == {}
    old = b["old_log_prob"].clamp(min=-30.0)
    new = (old + b["log_ratio"]).clamp(max=0.0)
    args = (new, old, b["advantages"], b["mask"], "grpo")
    loss_full, full = policy_loss(*args)
    for level in ("basic", "none"):
        loss, met = policy_loss(*args, diagnostics=level)
        assert torch.equal(loss, loss_full)  # the loss does not depend on the level
        extra = [k for k in met if not k.startswith("loss/")]
        assert extra == (BASIC if level == "basic" else [])
        assert all(torch.equal(met[k], full[k]) for k in met)
    msg = r"^diagnostics must be one of full, basic, none, got 'ful' \(did you mean 'full'\?\)$"
    with pytest.raises(ValueError, match=msg):
        policy_loss(*args, diagnostics="ful")
    for bad in (None, 1, ""):
        with pytest.raises(
            ValueError, match=rf"^x\.diagnostics must be one of full, basic, none, got {bad!r}$"
        ):
            check_diagnostics("x.diagnostics", bad)
    assert check_diagnostics("x", "basic") == "basic"


@settings(max_examples=60, deadline=None)
@given(
    codes=st.lists(
        st.one_of(st.integers(0, _N_CODES - 1), st.integers(_PADDING, _PADDING + _N_CODES - 1)), max_size=300
    ),
    cols=st.integers(1, 4),
)
def test_code_counts_by_scatter_equal_bincount(codes: list[int], cols: int) -> None:
    """The scatter-add count (the path off the CPU: no host sync, capturable in a CUDA graph) equals bincount's and
    a Python count of the real codes, padding codes left out, for any shape."""
    rows = len(codes) // cols
    code = torch.tensor(codes[: rows * cols], dtype=torch.uint8).view(rows, cols)
    want = torch.tensor([codes[: rows * cols].count(c) for c in range(_N_CODES)], dtype=torch.int64)
    for scatter in (False, True):
        got = _count_codes(code, scatter=scatter)
        assert got.dtype == torch.int64 and torch.equal(got, want), scatter


def test_side_metrics_count_each_side_by_hand() -> None:
    """Eight tokens whose sets are known by construction, bounds [0.5, 2.0] against GRPO's [0.8, 1.2]: each counted
    once, in its side, the tail split by p_old, the gradient mass |A| r over the tokens with a gradient."""
    from bandpo.losses.diagnostics import SIDE_METRICS, side_metrics

    #         up-through  up-through(tail) down-through  down-through(tail) clipped-up  inside  A=0   padding
    ratio = torch.tensor([[1.5, 1.9, 0.6, 0.55, 2.5, 1.0, 1.7, 1.5]])
    adv = torch.tensor([[1.0, 2.0, -1.0, -3.0, 1.0, 1.0, 0.0, 1.0]])
    p_old = torch.tensor([[0.5, 0.1, 0.9, 0.05, 0.5, 0.5, 0.5, 0.1]])
    mask = torch.tensor([[True] * 7 + [False]])
    lo, hi = torch.full_like(ratio, 0.5), torch.full_like(ratio, 2.0)
    got = side_metrics(ratio, lo, hi, adv, mask, torch.log(p_old))
    assert list(got) == list(SIDE_METRICS)
    with_grad = [1.5, 3.8, 0.6, 1.65, 1.0]  # |A| r of the unclipped tokens with A != 0 (A = 0 adds 0)
    want = {
        "side/up_through": 2 / 7,
        "side/down_through": 2 / 7,
        "side/up_through_tail": 1 / 7,
        "side/down_through_tail": 1 / 7,
        "side/up_held": 0.0,
        "side/down_held": 0.0,
        "side/up_through_grad": (1.5 + 3.8) / sum(with_grad),
        "side/down_through_grad": (0.6 + 1.65) / sum(with_grad),
    }
    for name, value in want.items():
        assert got[name].item() == pytest.approx(value, rel=1e-6), name
    # GRPO's own interval: nothing goes through, nothing is held
    fixed = side_metrics(
        ratio, torch.full_like(ratio, 0.8), torch.full_like(ratio, 1.2), adv, mask, torch.log(p_old)
    )
    assert all(v.item() == 0.0 for v in fixed.values())
    # bounds tighter than GRPO's: [0.9, 1.1] holds the tokens between them and GRPO's edges
    r2 = torch.tensor([[1.15, 0.85, 1.25, 0.85]])
    a2 = torch.tensor([[1.0, -1.0, 1.0, 1.0]])
    tight = side_metrics(
        r2, torch.full_like(r2, 0.9), torch.full_like(r2, 1.1), a2, torch.ones_like(r2), torch.zeros_like(r2)
    )
    assert tight["side/up_held"].item() == pytest.approx(0.25) and tight[
        "side/down_held"
    ].item() == pytest.approx(0.25)
    assert tight["side/up_through"].item() == 0.0  # 1.25 > hi: clipped by both rules


@pytest.mark.parametrize("rule", ["grpo", "band_upper", "band_lower", "band"])
def test_side_metrics_of_the_one_sided_rules_act_on_their_side_only(rule: str) -> None:
    b = batch(3, torch.float32, padding=math.nan)
    old = b["old_log_prob"].clamp(min=-30.0)
    new = (old + b["log_ratio"]).clamp(max=0.0)
    _, met = policy_loss(new, old, b["advantages"], b["mask"], rule)
    up, down = met["side/up_through"].item(), met["side/down_through"].item()
    assert (up > 0) == (rule in ("band_upper", "band")) and (down > 0) == (rule in ("band_lower", "band"))
    if rule in ("band_upper", "grpo"):
        assert met["side/down_held"].item() == 0.0
    if rule in ("band_lower", "grpo"):
        assert met["side/up_held"].item() == 0.0


@pytest.mark.parametrize("fn", [clip_metrics, basic_clip_metrics, side_metrics])
def test_per_sequence_advantages_apply_to_their_rows_on_a_square_batch(fn: object) -> None:
    """(B,) advantages mean one per sequence, as in ``policy_loss``: on a batch with B == T (where torch's own
    broadcasting would apply a[j] to column j) they give the metrics of the same advantages as (B, 1) and (B, T)."""
    b = {k: v[:, :6].contiguous() for k, v in batch(5, torch.float64, padding=0.0).items()}
    if fn is side_metrics:
        del b["log_ratio"]
    per_seq = torch.tensor([1.0, -1.0, 2.0, -0.5, 0.0, 3.0], dtype=torch.float64)
    rows = fn(**{**b, "advantages": per_seq[:, None].expand(6, 6)})
    for adv in (per_seq, per_seq[:, None]):
        assert_same_metrics(fn(**{**b, "advantages": adv}), rows)


@pytest.mark.parametrize("fn", [clip_metrics, basic_clip_metrics, side_metrics])
@pytest.mark.parametrize(
    "name,shape,match",
    [
        (
            "advantages",
            (4,),
            r"advantages shape \(4,\) must be \(B,\), \(B, 1\) or \(B, T\) with \(B, T\) = \(6, 40\)",
        ),
        ("advantages", (40,), r"advantages shape \(40,\) must be"),
        ("lo", (6, 1), r"lo shape \(6, 1\) must equal ratio shape \(6, 40\)"),
        ("mask", (6, 39), r"mask shape \(6, 39\) must equal ratio shape \(6, 40\)"),
        ("old_log_prob", (40,), r"old_log_prob shape \(40,\) must equal ratio shape"),
        ("dual_active", (6, 1), r"dual_active shape \(6, 1\) must equal ratio shape"),
        ("ratio", (240,), r"ratio must have shape \(B, T\), got \(240,\)"),
    ],
)
def test_a_misshaped_argument_is_named_before_any_metric(
    fn: object, name: str, shape: tuple[int, ...], match: str
) -> None:
    b = batch(6, torch.float32)
    if fn is side_metrics:
        del b["log_ratio"]
    b[name] = torch.zeros(shape, dtype=b[name].dtype)
    with pytest.raises(ValueError, match=match):
        fn(**b)
