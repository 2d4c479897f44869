"""The clipping diagnostics of the policy loss (:func:`clip_metrics`), computed in one fused pass.

Every count the metrics need (clipped up / down / outside the bounds / by the constant ``c``, per old-probability
bin, padding apart) comes from one count (``bincount`` on the CPU) over a uint8 code per token, instead of one
masked sum per metric; the bound, ratio and KL statistics are one masked sum per tensor and one ``aminmax`` for a
minimum and maximum. Equal bit for bit to the naive masked reductions, one per metric, that
``tests/helpers/naive_diagnostics.py`` keeps as the reference (counts are exact integers, the means the same
``where(mask, x, 0).sum()`` divided by the same count, minima and maxima exact), in 0.31-0.42x their time at
B = 64, T = 2048 with the per-side metrics (6.1-6.2 ms against 14.7-19.7 ms on a 2-core AVX2 machine;
docs/method.md#speed).

Three levels, registered in :data:`DIAGNOSTICS` (the ``diagnostics`` argument of ``bandpo.policy_loss`` and of the
integrations): ``full`` (:func:`clip_metrics`, the default), ``basic`` (:func:`basic_clip_metrics`) and ``none``;
what each logs: docs/method.md#metrics.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import torch
from torch import Tensor

from bandpo.core.checks import expand_advantages
from bandpo.registry import Registry, did_you_mean

__all__ = [
    "DIAGNOSTICS",
    "FIXED_INTERVAL",
    "PROB_BINS",
    "PROB_BIN_EDGES",
    "SIDE_METRICS",
    "TAIL_PROB",
    "basic_clip_metrics",
    "check_diagnostics",
    "clip_metrics",
    "metrics_to_floats",
    "side_metrics",
]

PROB_BIN_EDGES = (0.2, 0.4, 0.6, 0.8)
"""Edges of the old-probability bins of the metrics; bins are half-open ``[a, b)`` (the last ``[0.8, 1]``)."""
TAIL_PROB = PROB_BIN_EDGES[0]
"""Tail tokens: ``p_old < TAIL_PROB``, i.e. exactly the first bin ``[0, 0.2)``."""


FIXED_INTERVAL = (0.2, 0.2)
"""``(eps_low, eps_high)`` of GRPO's fixed interval ``[0.8, 1.2]``: what :func:`side_metrics` compares a rule's bounds
with, side by side."""


def _bin_names() -> list[str]:
    edges = (0.0, *PROB_BIN_EDGES, 1.0)
    return [f"p{edges[i]:.1f}-{edges[i + 1]:.1f}" for i in range(len(edges) - 1)]


PROB_BINS = _bin_names()

# A token's code: its bin b (0-4, counted from the last), whether it is clipped up (1) or down (2) or neither
# (0), whether r is outside [lo, hi] and whether the constant c binds: code = (4 - b) * _PER_BIN + side + _OUT * out
# + _DUAL * dual; padding adds _PADDING, which puts it past the real codes.
_OUT, _DUAL = 3, 6
_PER_BIN = 12
_N_CODES = len(PROB_BINS) * _PER_BIN
_PADDING = 64  # >= _N_CODES, and _N_CODES - 1 + _PADDING fits in uint8


def _count_codes(code: Tensor, scatter: bool | None = None) -> Tensor:
    """int64 ``(_N_CODES,)``: how many entries of the uint8 ``code`` (any shape) hold each real code; padding codes
    (``>= _PADDING``) are not counted. On the CPU ``torch.bincount``; on another device (``scatter`` None), or with
    ``scatter`` True, a scatter-add into a buffer of fixed size, which never waits on the host: CUDA's ``bincount``
    reads the largest code back first, which stalls the stream and which a captured CUDA graph refuses. Both are
    exact integer counts (tests/losses/test_diagnostics.py::test_code_counts_by_scatter_equal_bincount)."""
    flat = code.reshape(-1)
    if scatter is None:
        scatter = flat.device.type != "cpu"
    if not scatter:
        return torch.bincount(flat, minlength=_N_CODES)[:_N_CODES]
    counts = torch.zeros(_PADDING + _N_CODES, dtype=torch.int64, device=flat.device)
    ones = torch.ones((), dtype=torch.int64, device=flat.device).expand(flat.numel())
    return counts.scatter_add_(0, flat.long(), ones)[:_N_CODES]


_COUNT_METRICS = [
    "clip/frac",
    "clip/frac_up",
    "clip/frac_down",
    "clip/frac_out",
    "clip/frac_dual",
    *(
        f"{kind}/{b}"
        for b in PROB_BINS
        for kind in ("clip/frac_up", "clip/frac_down", "clip/frac", "tokens/share")
    ),
    "clip/tail_share",
    "clip/tail_share_up",
]
"""The metrics that are ratios of token counts, in the order :func:`clip_metrics` returns them."""


def _min_max(x: Tensor, m: Tensor, first: Tensor) -> Tensor:
    """(2,) the minimum and maximum of ``x`` (B, T) over ``m`` (any values when the mask is empty). Padding is filled
    with the value at the first real token ``first`` (a flat index, 0-d long tensor), so one ``aminmax`` finds both
    without a device->host sync (``gather``, not indexing by a tensor: ``torch.compile(fullgraph=True)`` would need
    the index as a Python int); NaN at a real token gives NaN, as ``amin`` / ``amax`` do."""
    fill = x.reshape(-1).gather(0, first.reshape(1)).reshape(())  # () the value of a real token
    return torch.stack(torch.aminmax(torch.where(m, x, fill)))


def _advantages(
    ratio: Tensor,
    advantages: Tensor,
    lo: Tensor,
    hi: Tensor,
    mask: Tensor,
    old_log_prob: Tensor,
    dual_active: Tensor | None = None,
    log_ratio: Tensor | None = None,
) -> Tensor:
    """The shapes of a diagnostic's arguments (metadata only, no host sync): ``ratio`` (B, T), ``advantages`` (B,),
    (B, 1) or (B, T), every other tensor (B, T); returns the advantages as (B, T).

    Raises:
        ValueError: naming the argument, its shape and the shape allowed.
    """
    if ratio.dim() != 2:
        raise ValueError(f"ratio must have shape (B, T), got {tuple(ratio.shape)}")
    like_ratio = {"lo": lo, "hi": hi, "mask": mask, "old_log_prob": old_log_prob}
    for name, x in {**like_ratio, "dual_active": dual_active, "log_ratio": log_ratio}.items():
        if x is not None and x.shape != ratio.shape:
            raise ValueError(f"{name} shape {tuple(x.shape)} must equal ratio shape {tuple(ratio.shape)}")
    return expand_advantages(advantages, ratio.shape)


def clip_metrics(
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
    """Clipping diagnostics (detached () tensors, no host sync), computed under ``torch.no_grad``.

    Args:
        ratio: (B, T) float, r = pi / pi_old.
        lo, hi: (B, T) float, the ratio bounds.
        advantages: (B,), (B, 1) or (B, T) float: one per sequence or one per token.
        mask: (B, T) bool or 0/1, real response tokens; padded positions may hold anything (NaN and inf too) in
            every other argument.
        old_log_prob: (B, T) float, log pi_old (``-inf``: p_old = 0, in the first bin).
        dual_active: (B, T) bool, where the constant c binds (the dual clip, or DPPO's truncation).
        log_ratio: (B, T) float, log r if already computed (default ``log(ratio)``).

    Returns:
        The metrics of docs/method.md#metrics, detached () tensors in ``ratio``'s dtype (float32 for a lower
        precision): the shares of real tokens ``clip/frac_up`` (r > hi and A > 0), ``clip/frac_down`` (r < lo and
        A < 0), ``clip/frac`` (their sum), ``clip/frac_out`` (r outside [lo, hi]), ``clip/frac_dual`` (only with
        ``dual_active``); the same per old-probability bin (:data:`PROB_BINS`, half-open ``[a, b)``, the last
        ``[0.8, 1]``; 0 for an empty bin) with ``tokens/share/<bin>``; ``clip/tail_share`` and
        ``clip/tail_share_up`` (the first bin's share of the clipped tokens); ``band/{lo,hi}_{mean,min,max}``;
        ``policy/ppo_kl`` (k1) and ``policy/approx_kl`` (k3) of KL(old || new); ``policy/ratio_{mean,max,min}``;
        :func:`side_metrics`. Means, minima and maxima over an empty mask are 0.
    """
    adv = _advantages(ratio, advantages, lo, hi, mask, old_log_prob, dual_active, log_ratio)
    with torch.no_grad():
        m = mask.bool()
        f = ratio.dtype if ratio.dtype in (torch.float32, torch.float64) else torch.float32
        above, below = ratio > hi, ratio < lo
        p_old = torch.exp(old_log_prob.to(f))
        # The bin is torch.bucketize(p_old, edges, right=True): the number of edges <= p_old (NaN: all of them).
        # The code counts the edges above p_old instead (4 - bin: NaN above none), with four compares (faster than
        # bucketize's binary search), in uint8 (the codes are < 61); the counts are flipped back below.
        code = (p_old < PROB_BIN_EDGES[0]).to(torch.uint8)  # a Python edge compares in p_old's dtype
        for edge in PROB_BIN_EDGES[1:]:
            code += p_old < edge
        code *= _PER_BIN
        code += above & (adv > 0)  # clipped up: 1
        code.add_(below & (adv < 0), alpha=2)  # clipped down: 2 (A > 0 and A < 0 exclude each other)
        code.add_(above | below, alpha=_OUT)
        if dual_active is not None:
            code.add_(dual_active.bool(), alpha=_DUAL)
        code.add_((~m).view(torch.uint8), alpha=_PADDING)  # padding: past the real codes (a where costs more)
        counts = _count_codes(code)  # int64, exact
        # [bin, dual, out, side]: tokens (the codes' bins run from the last to the first)
        c = counts.view(len(PROB_BINS), 2, 2, 3).flip(0)
        per_bin = c.sum(dim=(1, 2))  # (bins, side)
        n_bin, n_up, n_down = per_bin.sum(dim=1), per_bin[:, 1], per_bin[:, 2]  # (bins,) each
        n_clip = n_up + n_down
        n_real = n_bin.sum()
        totals = torch.stack([n_clip.sum(), n_up.sum(), n_down.sum(), c[:, :, 1].sum(), c[:, 1].sum()])
        # every count metric is a ratio of counts: numerators and denominators in the order of the names
        num, den = [totals], [n_real.expand(5)]
        num.append(torch.stack([n_up, n_down, n_clip, n_bin], dim=1).reshape(-1))
        den.append(torch.stack([n_bin, n_bin, n_bin, n_real.expand_as(n_bin)], dim=1).reshape(-1))
        num.append(torch.stack([n_clip[0], n_up[0]]))  # the tail shares: the first bin is the tail
        den.append(totals[:2])
        # every denominator at least 1: an empty set of tokens gives 0
        values = torch.cat(num).to(f) / torch.cat(den).to(f).clamp(min=1.0)
        met: dict[str, Tensor] = dict(zip(_COUNT_METRICS, values.unbind()))
        if dual_active is None:
            del met["clip/frac_dual"]

        zero = torch.zeros((), dtype=f, device=ratio.device)
        r = ratio.to(f)
        lr = torch.log(r) if log_ratio is None else log_ratio.to(f)
        lo_f, hi_f = lo.to(f), hi.to(f)
        sums = torch.stack(
            [
                torch.where(m, lo_f, zero).sum(),
                torch.where(m, hi_f, zero).sum(),
                zero - torch.where(m, lr, zero).sum(),  # not -sum: +0, not -0, over an empty mask
                torch.where(m, torch.expm1(lr) - lr, zero).sum(),
                torch.where(m, r, zero).sum(),
            ]
        )
        lo_mean, hi_mean, ppo_kl, approx_kl, r_mean = (sums / n_real.to(f).clamp(min=1.0)).unbind()
        if m.numel():
            first = m.reshape(-1).view(torch.uint8).argmax()  # a real token (index 0 when there is none)
            extremes = torch.cat([_min_max(lo_f, m, first), _min_max(hi_f, m, first), _min_max(r, m, first)])
        else:  # a batch of no positions (B = 0 or T = 0): nothing to take an extreme of
            extremes = zero.expand(6)
        lo_min, lo_max, hi_min, hi_max, r_min, r_max = torch.where(n_real > 0, extremes, zero).unbind()
        met.update(
            {
                "band/lo_mean": lo_mean,
                "band/lo_min": lo_min,
                "band/lo_max": lo_max,
                "band/hi_mean": hi_mean,
                "band/hi_min": hi_min,
                "band/hi_max": hi_max,
                "policy/ppo_kl": ppo_kl,
                "policy/approx_kl": approx_kl,
                "policy/ratio_mean": r_mean,
                "policy/ratio_max": r_max,
                "policy/ratio_min": r_min,
            }
        )
        met.update(_side_metrics(ratio, lo, hi, above, below, adv, m, p_old < TAIL_PROB, dual_active, f))
    return met


SIDE_METRICS = (
    "side/up_through",
    "side/down_through",
    "side/up_through_tail",
    "side/down_through_tail",
    "side/up_held",
    "side/down_held",
    "side/up_through_grad",
    "side/down_through_grad",
)
"""The names :func:`side_metrics` returns, in its order (the last of :func:`clip_metrics`'s)."""


def side_metrics(
    ratio: Tensor,
    lo: Tensor,
    hi: Tensor,
    advantages: Tensor,
    mask: Tensor,
    old_log_prob: Tensor,
    *,
    dual_active: Tensor | None = None,
) -> dict[str, Tensor]:
    """Which side of the rule's bounds acts where GRPO's fixed interval ``[1 - 0.2, 1 + 0.2]`` (:data:`FIXED_INTERVAL`)
    would act otherwise: the per-side counts of a clip rule against GRPO, on the tokens of one update.

    With ``A`` the advantage and ``r`` the ratio of a real token, ``e_lo, e_hi = FIXED_INTERVAL``:

    * ``side/up_through``: ``A > 0`` and ``1 + e_hi < r <= hi`` (the rule lets the gradient through where GRPO
      clips: the upper side is wider); ``side/down_through``: ``A < 0`` and ``lo <= r < 1 - e_lo`` (the lower side
      is wider: the token is pushed further down than GRPO allows);
    * ``side/up_through_tail`` / ``side/down_through_tail``: the same with ``p_old < 0.2`` (the tail);
    * ``side/up_held``: ``A > 0`` and ``hi < r <= 1 + e_hi`` (the rule clips where GRPO would not);
      ``side/down_held``: ``A < 0`` and ``1 - e_lo <= r < lo``;
    * ``side/up_through_grad`` / ``side/down_through_grad``: the gradient mass of the through tokens, ``sum |A| r``
      over them divided by ``sum |A| r`` over every real token with a gradient (not clipped by the bounds, nor by
      the constant ``c`` where ``dual_active``): the share of the per-token gradient (before the aggregation's
      weights) that exists only because the rule is wider than GRPO on that side.

    Counts are shares of the real tokens (multiply by their number for counts). For ``grpo`` itself every value is
    0. Comparisons are made in ``ratio``'s dtype, as the loss's own clipping (a ratio of exactly ``1 + e_hi`` is
    inside both intervals).

    Args: as :func:`clip_metrics` (``ratio``, ``lo``, ``hi``, ``old_log_prob`` (B, T) float; ``advantages``
    (B,), (B, 1) or (B, T); ``mask`` (B, T) bool or 0/1; ``dual_active`` (B, T) bool or None).

    Returns: detached () tensors in ``ratio``'s dtype (float32 for a lower precision), names :data:`SIDE_METRICS`;
    0 over an empty mask or an empty set of tokens.
    """
    adv = _advantages(ratio, advantages, lo, hi, mask, old_log_prob, dual_active)
    with torch.no_grad():
        m = mask.bool()
        f = ratio.dtype if ratio.dtype in (torch.float32, torch.float64) else torch.float32
        tail = torch.exp(old_log_prob.to(f)) < TAIL_PROB
        return _side_metrics(ratio, lo, hi, ratio > hi, ratio < lo, adv, m, tail, dual_active, f)


def _side_metrics(
    ratio: Tensor,
    lo: Tensor,
    hi: Tensor,
    above: Tensor,
    below: Tensor,
    adv: Tensor,
    m: Tensor,
    tail: Tensor,
    dual_active: Tensor | None,
    f: torch.dtype,
) -> dict[str, Tensor]:
    """:func:`side_metrics` from what :func:`clip_metrics` has computed already (so the fused pass does not compute
    it twice): the bounds ``lo``, ``hi`` and ``above = ratio > hi``, ``below = ratio < lo``, ``adv`` the advantages expanded to (B, T), ``m`` the
    bool mask, ``tail = p_old < TAIL_PROB`` and ``f`` the reduction dtype. Runs under the caller's ``no_grad``."""
    e_lo, e_hi = FIXED_INTERVAL
    pos, neg = m & (adv > 0), m & (adv < 0)
    above_fixed, below_fixed = ratio > 1.0 + e_hi, ratio < 1.0 - e_lo
    up_through = pos & above_fixed & (ratio <= hi)  # not ~above: a NaN bound lets nothing through
    down_through = neg & below_fixed & (ratio >= lo)
    clipped_up, clipped_down = pos & above, neg & below
    up_held, down_held = clipped_up & ~above_fixed, clipped_down & ~below_fixed
    counts = torch.stack(
        [
            m.sum(),
            up_through.sum(),
            down_through.sum(),
            (up_through & tail).sum(),
            (down_through & tail).sum(),
            up_held.sum(),
            down_held.sum(),
        ]
    )  # int64, exact
    shares = counts[1:].to(f) / counts[0].to(f).clamp(min=1.0)
    clipped = clipped_up | clipped_down
    if dual_active is not None:
        clipped = clipped | dual_active.bool()
    zero = torch.zeros((), dtype=f, device=ratio.device)
    weight = adv.to(f).abs() * ratio.to(f)
    mass = torch.stack(
        [
            torch.where(m & ~clipped, weight, zero).sum(),
            torch.where(up_through, weight, zero).sum(),
            torch.where(down_through, weight, zero).sum(),
        ]
    )
    grad = torch.where(mass[0] > 0, mass[1:] / torch.where(mass[0] > 0, mass[0], 1.0), zero)
    return dict(zip(SIDE_METRICS, torch.cat([shares, grad]).unbind()))


def basic_clip_metrics(
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
    """The diagnostics that verl's and TRL's own PPO losses log, and nothing else: ``clip/frac``,
    ``clip/frac_up``, ``clip/frac_down``, ``clip/frac_dual`` (only with ``dual_active``) and ``policy/ppo_kl``,
    each equal bit for bit to :func:`clip_metrics`'s value of the same name (the same integer counts, the same
    masked sum, the same division). Arguments as :func:`clip_metrics` (``old_log_prob`` is not read: no bins).

    Returns:
        Detached () tensors in ``ratio``'s dtype (float32 for a lower precision), computed under ``torch.no_grad``
        with no host sync; 0 over an empty mask."""
    adv = _advantages(ratio, advantages, lo, hi, mask, old_log_prob, dual_active, log_ratio)
    del old_log_prob  # the signature of the registry's entries: shape-checked, not read
    with torch.no_grad():
        m = mask.bool()
        f = ratio.dtype if ratio.dtype in (torch.float32, torch.float64) else torch.float32
        counts = [m.sum(), (m & (ratio > hi) & (adv > 0)).sum(), (m & (ratio < lo) & (adv < 0)).sum()]
        if dual_active is not None:
            counts.append((m & dual_active.bool()).sum())
        n = torch.stack(counts)  # int64, exact: [real, up, down(, dual)]
        n_real = n[0]
        num = torch.cat([(n[1] + n[2]).reshape(1), n[1:]])
        values = num.to(f) / n_real.expand_as(num).to(f).clamp(min=1.0)
        names = ["clip/frac", "clip/frac_up", "clip/frac_down", "clip/frac_dual"][: len(num)]
        met: dict[str, Tensor] = dict(zip(names, values.unbind()))
        zero = torch.zeros((), dtype=f, device=ratio.device)
        lr = torch.log(ratio.to(f)) if log_ratio is None else log_ratio.to(f)
        met["policy/ppo_kl"] = (zero - torch.where(m, lr, zero).sum()) / n_real.to(f).clamp(min=1.0)
    return met


def _no_metrics(*args: Tensor, **kwargs: Tensor | None) -> dict[str, Tensor]:
    """The ``none`` level: no diagnostics (the loss's own ``loss/...`` values stay)."""
    return {}


def metrics_to_floats(metrics: Mapping[str, Tensor]) -> dict[str, float]:
    """Detached () tensors -> Python floats (through float64) with a single device->host transfer; ``{}`` for
    none."""
    if not metrics:
        return {}
    values = torch.stack([v.detach().to(torch.float64).reshape(()) for v in metrics.values()]).tolist()
    return dict(zip(metrics, values))


def check_diagnostics(name: str, value: object) -> str:
    """``value`` as a registered level of :data:`DIAGNOSTICS` (its canonical name), for the setting ``name`` (e.g.
    ``"diagnostics"``, ``"policy_loss.diagnostics"``); anything else raises ``ValueError`` in one line naming the
    setting, the value, the closest level and the valid ones."""
    if isinstance(value, str) and value in DIAGNOSTICS:
        return DIAGNOSTICS.canonical(value)
    hint = did_you_mean(value, DIAGNOSTICS.names()) if isinstance(value, str) else ""
    raise ValueError(f"{name} must be one of {', '.join(DIAGNOSTICS.names())}, got {value!r}{hint}")


DiagnosticsFn = Callable[..., dict[str, Tensor]]
DIAGNOSTICS: Registry[DiagnosticsFn] = Registry("diagnostics level")
"""Diagnostics levels: ``full`` (:func:`clip_metrics`), ``basic`` (:func:`basic_clip_metrics`), ``none``. Each entry
takes :func:`clip_metrics`'s arguments and returns its metrics (a subset of ``full``'s names, the same values)."""
DIAGNOSTICS.register("full", clip_metrics)
DIAGNOSTICS.register("basic", basic_clip_metrics)
DIAGNOSTICS.register("none", _no_metrics)
