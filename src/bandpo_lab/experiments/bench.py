"""Benchmarks (``bandpo bench`` / ``make bench``): bound solvers and the policy loss against baselines.

Every figure is a ratio against a baseline measured in the same run (this machine is noisy): the Band
solvers against the TV closed form and against the authors' algorithm (plain bisection, 50 iterations per
side, tol 1e-6, a device->host sync per iteration: docs/method.md#band-operator); the loss against GRPO's fixed clip.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from bandpo.core import DIVERGENCES, band_bounds
from bandpo.losses import CLIP_RULES, DIAGNOSTICS, clip_metrics, make_clip_rule, policy_loss
from bandpo.losses.aggregation import masked_max, masked_mean, masked_min
from bandpo.losses.diagnostics import FIXED_INTERVAL, PROB_BIN_EDGES, PROB_BINS, TAIL_PROB
from bandpo.validation import check_int_in
from bandpo_lab._files import RECIPES, read_jsonl


def authors_bisection(
    logp: Tensor, delta: float, iterations: int = 50, tol: float = 1e-6
) -> tuple[Tensor, Tensor]:
    """The authors' KL solver as docs/method.md#band-operator describes it (our transcription, for timing only): bisection on
    r in [1, 1/p] and [0, 1], 50 iterations per side, early exit when the widest bracket is below ``tol``,
    which reads the max over the whole tensor on the host every iteration."""
    p = torch.exp(logp)
    q = 1.0 - p

    def g(r: Tensor) -> Tensor:
        return -p * torch.log(r) - q * torch.log((1.0 - r * p) / q)

    out = []
    for a, b, upper in (
        (torch.ones_like(p), 1.0 / p, True),
        (torch.zeros_like(p), torch.ones_like(p), False),
    ):
        for _ in range(iterations):
            mid = 0.5 * (a + b)
            outside = g(mid) > delta
            if upper:
                a, b = torch.where(outside, a, mid), torch.where(outside, mid, b)
            else:
                a, b = torch.where(outside, mid, a), torch.where(outside, b, mid)
            if (b - a).max().item() < tol:  # the per-iteration device->host sync
                break
        out.append(a if upper else b)
    return out[1], out[0]


def progress_bar(label: str | None, total: int, unit: str = "call") -> Any:
    """A progress bar on stderr (count, rate, ETA) labelled ``label`` over ``total`` calls, removed when done
    (the tables go to stdout); with ``label`` None, or without tqdm (a core install), one that shows nothing.
    Use as a context manager; ``update()`` after each call."""
    try:
        from tqdm.auto import tqdm
    except ImportError:
        tqdm = None
    if tqdm is None or label is None:
        return _NoBar()
    return tqdm(total=total, desc=label, unit=unit, leave=False, dynamic_ncols=True)


class _NoBar:
    """The interface of a progress bar that :func:`progress_bar` uses, showing nothing."""

    def __enter__(self) -> _NoBar:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def update(self, n: int = 1) -> None:
        return None


def time_call(fn: Callable[[], object], repeats: int = 5, progress: str | None = None) -> float:
    """Best wall time of ``repeats`` timed calls after one warm-up, in seconds (the real-model parts; a comparison
    of several cases uses :func:`time_interleaved`, the same number of calls for each). ``progress``: the label
    of a progress bar over the calls (:func:`progress_bar`), or None for none."""
    check_int_in("repeats", repeats, 1)
    with progress_bar(progress, repeats + 1) as bar:
        fn()
        bar.update()
        times = []
        for _ in range(repeats):
            times.append(_timed(fn))
            bar.update()
    return min(times)


def _timed(fn: Callable[[], object]) -> float:
    """Wall time of one call in seconds, the GPU (if any) synchronised before and after."""
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    fn()
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    return time.perf_counter() - t0


def sample_logp(n: int, seed: int = 0, device: str = "cpu") -> Tensor:
    """Old log-probs shaped like an LLM's sampled tokens: most near 0, a long tail down to p = 1e-8."""
    g = torch.Generator().manual_seed(seed)
    u = torch.rand(n, generator=g)
    logp = torch.where(u < 0.7, -torch.rand(n, generator=g) * 0.1, -torch.rand(n, generator=g) * 18.0)
    return logp.to(device)


def _bound_cases(logp: Tensor) -> dict[str, Callable[[], object]]:
    """The timed calls on one input, by label."""
    fixed, dcpo = make_clip_rule("grpo"), make_clip_rule("dcpo")
    delta_t = torch.full_like(logp, 0.05)
    cases: dict[str, Callable[[], object]] = {
        "fixed clip (eps 0.2)": lambda: fixed.bounds(logp),
        "dcpo": lambda: dcpo.bounds(logp),
    }
    for name in DIVERGENCES.names():
        cases[f"band {name}"] = lambda name=name: band_bounds(logp, 0.05, name, check_values=False)
    cases["band kl, per-token delta (newton)"] = lambda: band_bounds(logp, delta_t, "kl", check_values=False)
    cases["authors' bisection (kl, 50 it/side)"] = lambda: authors_bisection(logp, 0.05)
    return cases


def bench_bounds(
    sizes: tuple[int, ...] = (1 << 20, 1 << 24), repeats: int = 5, device: str = "cpu", progress: bool = False
) -> list[dict]:
    """Time per call of each divergence and baseline, per token count in ``sizes``: the cases called in turn,
    ``repeats`` rounds after one warm-up each (:func:`time_interleaved`), so every case gets the same number of
    calls and a noisy stretch of the machine hits them alike; best of each. Rows ``{"n", "case", "ms", "calls",
    "x_tv", "speedup_vs_bisection"}``: ratios to the TV closed form's time and the bisection's time over this one.
    ``progress``: a progress bar per size (stderr)."""
    rows: list[dict] = []
    for n in sizes:
        label = f"bounds, {n:,} tokens" if progress else None
        times = time_interleaved(_bound_cases(sample_logp(n, device=device)), rounds=repeats, progress=label)
        tv, bis = times["band tv"], times["authors' bisection (kl, 50 it/side)"]
        for label, t in times.items():
            rows.append(
                {
                    "n": n,
                    "case": label,
                    "ms": 1e3 * t,
                    "calls": repeats,
                    "x_tv": t / tv,
                    "speedup_vs_bisection": bis / t,
                }
            )
    return rows


def kl_accuracy(n: int = 200_000) -> dict[str, float]:
    """Max relative error of the KL paths (table, Newton; float64 and float32) against the float64 generic bisection
    on ``n`` random p in [1e-30, 1 - 1e-30] (log-uniform in -log p: both tails), delta in {1e-3, 0.05, 1}. The
    error's denominator is ``|reference| + floor``, floor 1e-6 for the float64 paths and 1e-8 for float32's."""
    logp = _accuracy_logp(n)
    out: dict[str, float] = {}
    for delta in (1e-3, 0.05, 1.0):
        ref_lo, ref_hi = band_bounds(logp, delta, "kl", cap=None, method="bisection")
        for method in ("table", "newton"):
            for dtype in (torch.float64, torch.float32):
                lo, hi = band_bounds(logp.to(dtype), delta, "kl", cap=None, method=method)
                floor = 1e-6 if dtype == torch.float64 else 1e-8
                err = 0.0
                for got, ref in ((lo.double(), ref_lo), (hi.double(), ref_hi)):
                    finite = torch.isfinite(ref) & torch.isfinite(got)
                    err = max(err, ((got - ref).abs() / (ref.abs() + floor))[finite].max().item())
                key = f"{method}/{str(dtype).split('.')[-1]}"
                out[key] = max(out.get(key, 0.0), err)
    return out


def _accuracy_logp(n: int) -> Tensor:
    """float64 (n,) log-probs with -log p log-uniform in [1e-30, -log(1e-30)], i.e. p in [1e-30, 1 - 1e-30]."""
    g = torch.Generator().manual_seed(1)
    lo, hi = math.log(1e-30), math.log(-math.log(1e-30))
    return -torch.exp(torch.rand(n, generator=g, dtype=torch.float64) * (hi - lo) + lo)


def time_interleaved(
    fns: dict[str, Callable[[], object]], rounds: int = 30, progress: str | None = None
) -> dict[str, float]:
    """Best wall time per case, the cases called in turn (a, b, c, a, b, c, ...) after one warm-up each, so
    that a noisy stretch of the machine hits every case alike. ``progress``: as in :func:`time_interleaved_samples`."""
    samples = time_interleaved_samples(fns, rounds, progress)
    return {name: min(w for w, _ in times) for name, times in samples.items()}


def time_interleaved_samples(
    fns: dict[str, Callable[[], object]], rounds: int = 30, progress: str | None = None
) -> dict[str, list[tuple[float, float]]]:
    """Every ``(wall, CPU)`` time in seconds (``rounds`` per case) of :func:`time_interleaved`'s schedule. The CPU
    time is this process's (``time.process_time``): on a busy machine the waits for a core inflate the wall time
    but not it, so with one torch thread it measures the work itself. ``progress``: the label of a progress bar
    over all ``len(fns) * (rounds + 1)`` calls, warm-ups included (:func:`progress_bar`), or None for none."""
    check_int_in("rounds", rounds, 1)
    times: dict[str, list[tuple[float, float]]] = {name: [] for name in fns}
    with progress_bar(progress, len(fns) * (rounds + 1)) as bar:
        for fn in fns.values():
            fn()
            bar.update()
        for _ in range(rounds):
            for name, fn in fns.items():
                cpu = time.process_time()
                wall = _timed(fn)
                times[name].append((wall, time.process_time() - cpu))
                bar.update()
    return times


def _dense_loss_inputs(
    batch: int, length: int, g: torch.Generator, device: str = "cpu"
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """``(old_log_prob, log_prob, advantages, mask)`` of the loss and schedule benchmarks: float32 (B, T) log-probs
    shaped like sampled tokens (:func:`sample_logp`) and 5% apart, one advantage per sequence (B,), every token
    counted (a mask of ones), on ``device``. ``g`` (a CPU generator) draws the noise and the advantages, so the
    values are the same on every device."""
    old = sample_logp(batch * length).view(batch, length)
    log_prob = (old + 0.05 * torch.randn(batch, length, generator=g)).clamp(max=0)
    tensors = (old, log_prob, torch.randn(batch, generator=g), torch.ones(batch, length))
    return tuple(t.to(device) for t in tensors)  # type: ignore[return-value]


def bench_loss(
    batch: int = 64, length: int = 4096, repeats: int = 30, progress: bool = False, device: str = "cpu"
) -> list[dict]:
    """Forward + backward time of the policy loss with every registered clip rule at its defaults (band: KL;
    dppo_tv / dppo_kl: DPPO's truncated objective) against grpo (``repeats`` interleaved rounds, best of each), on
    ``device``. ``progress``: a progress bar (stderr)."""
    g = torch.Generator().manual_seed(0)
    old, log_prob, adv, mask = _dense_loss_inputs(batch, length, g, device)
    steps = {}
    for name in ["grpo", *(n for n in CLIP_RULES.names() if n != "grpo")]:
        rule = make_clip_rule(name)
        ent = torch.rand(batch, length, generator=g).to(device) if rule.needs_entropy else None

        def step(rule=rule, ent=ent) -> None:
            lp = log_prob.clone().requires_grad_(True)
            loss, _ = policy_loss(lp, old, adv, mask, rule, entropy=ent, check_values=False)
            loss.backward()

        steps[name] = step
    times = time_interleaved(steps, rounds=repeats, progress="loss, every rule" if progress else None)
    return [
        {"case": f"loss fwd+bwd {name}", "ms": 1e3 * t, "x_grpo": t / times["grpo"]}
        for name, t in times.items()
    ]


def bench_schedule(
    batch: int = 64,
    length: int = 4096,
    repeats: int = 30,
    steps: int = 1000,
    progress: bool = False,
    device: str = "cpu",
) -> list[dict]:
    """Band-KL with a radius that changes every step (``linear`` 0.2 -> 0.02 over ``steps``: the tensor-radius
    solver, Halley's method) against the same rule at a constant radius (the cached table), in one interleaved run:
    the bounds alone and the loss forward + backward, each call at the next step's radius. Returns rows with
    ``x_constant`` (scheduled / constant). That no table is built per radius is tested
    (tests/losses/test_schedule.py::test_a_radius_per_step_builds_no_table). On ``device``; ``progress``: a
    progress bar (stderr)."""
    from bandpo.losses import radius_schedule, rule_at_step

    old, log_prob, adv, mask = _dense_loss_inputs(batch, length, torch.Generator().manual_seed(0), device)
    rule = make_clip_rule("band", delta=0.2)
    schedules = {"constant": radius_schedule(rule), "scheduled": radius_schedule(rule, "linear", end=0.02)}
    schedules["scheduled"] = schedules["scheduled"].for_run(steps)
    step = {"constant": 0, "scheduled": 0}

    def bounds(kind: str) -> None:
        step[kind] = step[kind] % steps + 1
        rule_at_step(rule, schedules[kind], step[kind]).bounds(old)

    def loss(kind: str) -> None:
        step[kind] = step[kind] % steps + 1
        lp = log_prob.clone().requires_grad_(True)
        out, _ = policy_loss(
            lp, old, adv, mask, rule_at_step(rule, schedules[kind], step[kind]), check_values=False
        )
        out.backward()

    cases = {
        f"{what} {kind}": (lambda fn=fn, kind=kind: fn(kind))
        for what, fn in (("bounds", bounds), ("loss", loss))
        for kind in schedules
    }
    times = time_interleaved(cases, rounds=repeats, progress="radius schedule" if progress else None)
    return [
        {
            "case": f"{what} band kl, radius {kind}",
            "ms": 1e3 * times[f"{what} {kind}"],
            "x_constant": times[f"{what} {kind}"] / times[f"{what} constant"],
        }
        for what in ("bounds", "loss")
        for kind in schedules
    ]


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
    Kept as the baseline of :func:`bench_diagnostics` and the reference of tests/losses/test_diagnostics.py."""
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


def bench_diagnostics(
    batch: int = 64, length: int = 2048, rounds: int = 30, progress: bool = False
) -> list[dict]:
    """The loss's diagnostics alone (:func:`bandpo.losses.clip_metrics`, one fused pass) against
    :func:`naive_clip_metrics` (one masked mean per metric), on the per-token terms of ``grpo``, ``band`` and
    ``dppo_kl`` for the inputs of :func:`bench_loss_vs_verl`; ``rounds`` interleaved rounds (``progress``: with a
    progress bar on stderr). Returns per rule ``ms`` and ``naive_ms`` (best wall times) and ``x_naive`` (their
    ratio), and the same of CPU time."""
    from bandpo.losses.policy_loss import per_token_policy_loss

    old, log_prob, adv, mask = _loss_inputs(batch, length)
    cases: dict[str, Callable[[], object]] = {}
    for name in VERL_COMPARED_RULES:
        t = per_token_policy_loss(log_prob, old, adv, mask, make_clip_rule(name))
        args = (t.ratio, t.lo, t.hi, t.advantages, t.mask, t.old_log_prob)
        extra = {"dual_active": t.dual_active, "log_ratio": t.log_ratio}
        cases[f"{name} fused"] = lambda args=args, extra=extra: clip_metrics(*args, **extra)
        cases[f"{name} naive"] = lambda args=args, extra=extra: naive_clip_metrics(*args, **extra)
    times = time_interleaved_samples(cases, rounds=rounds, progress="diagnostics" if progress else None)
    rows = []
    for name in VERL_COMPARED_RULES:
        row: dict[str, Any] = {"case": f"diagnostics {name}"}
        for clock, i in (("wall", 0), ("cpu", 1)):
            fused, naive = (min(t[i] for t in times[f"{name} {kind}"]) for kind in ("fused", "naive"))
            row |= {
                f"{clock}_ms": 1e3 * fused,
                f"{clock}_naive_ms": 1e3 * naive,
                f"{clock}_x_naive": fused / naive,
            }
        rows.append(row)
    return rows


def _loss_inputs(batch: int, length: int) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """``(old_log_prob, log_prob, advantages, mask)``, float32 (B, T) each: log-probs shaped like sampled tokens
    (:func:`sample_logp`), per-token advantages (a sequence's value plus 10% noise), a ragged 0/1 mask (lengths
    uniform in [T/2, T])."""
    g = torch.Generator().manual_seed(0)
    old = sample_logp(batch * length).view(batch, length)
    log_prob = (old + 0.05 * torch.randn(batch, length, generator=g)).clamp(max=0)
    adv = (torch.randn(batch, 1, generator=g) + 0.1 * torch.randn(batch, length, generator=g)).contiguous()
    lengths = torch.randint(length // 2, length + 1, (batch,), generator=g)
    mask = (torch.arange(length).unsqueeze(0) < lengths.unsqueeze(1)).float()
    return old, log_prob, adv, mask


VERL_COMPARED_RULES = ("grpo", "band", "dppo_kl")
"""The clip rules whose loss ``bench_loss_vs_verl`` times against verl's (band: its default, KL)."""


def bench_loss_vs_verl(
    batch: int = 64,
    length: int = 2048,
    rounds: int = 30,
    loss_agg_mode: str = "token-mean",
    progress: bool = False,
) -> tuple[list[dict], str | None]:
    """Forward + backward of ``bandpo.policy_loss`` with its diagnostics (every metric it returns: what a training
    step computes; case ``bandpo <rule>``, and at the lighter levels of ``DIAGNOSTICS``, ``bandpo <rule> (basic)``
    and ``(none)``) for :data:`VERL_COMPARED_RULES`, against verl's built-in ``vanilla`` PPO loss (and ``dppo_kl``
    against verl's own ``dppo_kl``) on the same inputs in the same run, ``rounds`` interleaved rounds.

    Inputs: :func:`_loss_inputs` (float32 (B, T) = (``batch``, ``length``), a ragged mask); both losses aggregate with
    ``loss_agg_mode``; bandpo with ``check_values=False`` (verl checks no values) and verl's dual clip ``c = 10``
    (bandpo's default), clip ratios 0.2/0.2 (GRPO's); verl's DPPO-KL with the thresholds and ``c`` of bandpo's
    ``dppo_kl`` defaults. ``progress``: a progress bar over the calls (stderr).

    Returns:
        ``(rows, None)``: per case ``case`` and, for each clock (``wall``, and ``cpu``: the process's CPU time, which
        waits for a core on a busy machine do not inflate), ``<clock>_ms`` (best), ``<clock>_ms_median``,
        ``<clock>_x_verl`` (best over verl vanilla's best), ``<clock>_x_verl_median`` (median over median) and,
        for dppo_kl, ``<clock>_x_verl_dppo`` (best over verl dppo_kl's best); bandpo's rows also name their
        ``rule`` and diagnostics ``level``; ``([], reason)`` when verl is not
        installed.
    """
    try:
        from verl.trainer.ppo.core_algos import get_policy_loss_fn
        from verl.workers.config import ActorConfig, PolicyLossConfig
    except ImportError as err:
        return [], f"verl is not installed ({err}); pip install 'bandpo[verl]'"
    import statistics

    old, log_prob, adv, mask = _loss_inputs(batch, length)
    dppo = make_clip_rule("dppo_kl")

    def verl_config(mode: str, low: float, high: float, c: float) -> Any:
        return ActorConfig(
            strategy="fsdp",
            rollout_n=1,
            ppo_micro_batch_size_per_gpu=1,
            loss_agg_mode=loss_agg_mode,
            clip_ratio=high,
            clip_ratio_low=low,
            clip_ratio_high=high,
            clip_ratio_c=c,
            policy_loss=PolicyLossConfig(loss_mode=mode),
        )

    def verl_step(mode: str, config: Any) -> Callable[[], None]:
        fn = get_policy_loss_fn(mode)

        def step() -> None:
            lp = log_prob.clone().requires_grad_(True)
            loss, _ = fn(old, lp, adv, mask, loss_agg_mode=loss_agg_mode, config=config)
            loss.backward()

        return step

    def bandpo_step(rule: Any, diagnostics: str) -> Callable[[], None]:
        def step() -> None:
            lp = log_prob.clone().requires_grad_(True)
            loss, _ = policy_loss(
                lp,
                old,
                adv,
                mask,
                rule,
                loss_agg_mode=loss_agg_mode,
                check_values=False,
                diagnostics=diagnostics,
            )
            loss.backward()

        return step

    steps = {"verl vanilla": verl_step("vanilla", verl_config("vanilla", 0.2, 0.2, 10.0))}
    steps["verl dppo_kl"] = verl_step(
        "dppo_kl",
        verl_config("dppo_kl", dppo.clip_divergence_low, dppo.clip_divergence_high, dppo.truncation_c),
    )
    cases: dict[str, dict[str, Any]] = {"verl vanilla": {}, "verl dppo_kl": {}}
    for rule in VERL_COMPARED_RULES:
        for level in DIAGNOSTICS.names():
            case = f"bandpo {rule}" + ("" if level == "full" else f" ({level})")
            steps[case] = bandpo_step(make_clip_rule(rule), level)
            cases[case] = {"rule": rule, "level": level}
    times = time_interleaved_samples(steps, rounds=rounds, progress="loss vs verl" if progress else None)
    clocks = {"wall": 0, "cpu": 1}
    best_of = {clock: {k: min(t[i] for t in v) for k, v in times.items()} for clock, i in clocks.items()}
    median_of = {
        clock: {k: statistics.median(t[i] for t in v) for k, v in times.items()}
        for clock, i in clocks.items()
    }
    rows = []
    for name in steps:
        row: dict[str, Any] = {"case": name, **cases[name]}
        for clock in clocks:
            best, median = best_of[clock], median_of[clock]
            row[f"{clock}_ms"] = 1e3 * best[name]
            row[f"{clock}_ms_median"] = 1e3 * median[name]
            row[f"{clock}_x_verl"] = best[name] / best["verl vanilla"]
            row[f"{clock}_x_verl_median"] = median[name] / median["verl vanilla"]
            if cases[name].get("rule") == "dppo_kl":
                row[f"{clock}_x_verl_dppo"] = best[name] / best["verl dppo_kl"]
        rows.append(row)
    return rows, None


def table_memory_bytes(dtype: torch.dtype = torch.float32) -> int:
    """Bytes of one cached table copy in ``dtype`` ((value, slope) pairs for lo and hi), per (divergence,
    delta, device)."""
    from bandpo.core.solvers import TABLE_BINS_LOG2, BoundsTable

    nodes = ((BoundsTable.E_MAX - BoundsTable.E_MIN) << TABLE_BINS_LOG2[dtype]) + 1
    return nodes * 2 * 2 * torch.empty(0, dtype=dtype).element_size()


TINY_RECIPE = RECIPES / "tiny.yaml"
"""The recipe :func:`bench_train_step` times (a checkout's ``configs/`` or a wheel's copy: :data:`bandpo_lab._files.RECIPES`)."""


def bench_train_step(
    steps: int = 24, rounds: int = 2, workdir: str | None = None, progress: bool = False
) -> list[dict]:
    """Wall time per optimizer step of ``BandPOTrainer`` with ``band`` (kl) against ``grpo`` on the same tiny
    (untrained) countdown model and settings, rounds interleaved (band, grpo, band, grpo, ...); best round each.

    Uses :data:`TINY_RECIPE` (64 completions per step, ``steps_per_generation`` 4). A step's time is read from the
    run's own log: the wall time from the end of the first generation round (warm-up: model loading, trainer setup,
    first calls) to the end of the last, over the optimizer steps between, so whole rounds (each with its
    generation) and no setup are timed. ``steps`` must be a whole number of rounds, at least 2. ``progress``: a
    progress bar over the ``2 * rounds`` training runs (stderr).

    Returns:
        rows ``{"case", "ms", "x_grpo"}`` (ms per step, best round; ``x_grpo`` = band's / grpo's).

    Raises:
        FileNotFoundError: no :data:`TINY_RECIPE` (an install without the recipes).
        ValueError: ``steps`` not a multiple of the recipe's ``steps_per_generation`` or under 2 rounds; ``rounds`` < 1.
    """
    import contextlib
    import io
    import shutil
    import tempfile
    import warnings

    from bandpo_lab.config import ConfigWarning
    from bandpo_lab.tasks.tiny_model import build_model, build_tokenizer
    from bandpo_lab.training.config import load_train_config
    from bandpo_lab.training.layout import METRICS_FILE
    from bandpo_lab.training.run import train

    if not TINY_RECIPE.is_file():
        raise FileNotFoundError(
            f"the training-step benchmark needs {TINY_RECIPE}, which this install of bandpo lacks"
        )
    per_round = int(load_train_config(TINY_RECIPE).trainer.get("steps_per_generation", 1))
    note = f" and a multiple of steps_per_generation ({per_round}): whole rounds, the first one warm-up"
    if check_int_in("steps", steps, 2 * per_round, note=note) % per_round:
        raise ValueError(f"steps must be an integer >= {2 * per_round}{note}, got {steps!r}")
    check_int_in("rounds", rounds, 1)
    root = Path(tempfile.mkdtemp(prefix="bandpo-bench-", dir=workdir))
    try:
        tokenizer = build_tokenizer()
        build_model(tokenizer).save_pretrained(root / "model")
        tokenizer.save_pretrained(root / "model")
        best: dict[str, float] = {}
        runs = [(r, rule) for r in range(rounds) for rule in ("band", "grpo")]
        with progress_bar("training step (TRL)" if progress else None, len(runs), unit="run") as bar:
            for r, rule in runs:
                out = root / f"{rule}-{r}"
                overrides = [
                    f"model.path={root / 'model'}",
                    f"clip_rule={rule}",
                    f"max_steps={steps}",
                    f"output_dir={out}",
                    "save_steps=100000",
                    "report_to=none",
                    "logging_steps=1",
                    "disable_tqdm=true",
                ]
                with warnings.catch_warnings():  # grpo's switch from the recipe's band drops band_*: intended
                    warnings.simplefilter("ignore", ConfigWarning)
                    config = load_train_config(TINY_RECIPE, overrides)
                with contextlib.redirect_stdout(io.StringIO()):  # the per-step log lines of logging_steps=1
                    train(config, overwrite=True)
                best[rule] = min(best.get(rule, math.inf), step_seconds(out / METRICS_FILE, per_round, steps))
                bar.update()
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return [
        {"case": f"train step {rule}", "ms": 1e3 * t, "x_grpo": t / best["grpo"]} for rule, t in best.items()
    ]


def step_seconds(metrics: Path, first: int, last: int) -> float:
    """Seconds per optimizer step between the logged ends of steps ``first`` and ``last`` of a run's
    ``metrics.jsonl`` (each row's ``elapsed_s`` is taken when the step is logged, after its optimizer update).

    Raises:
        ValueError: either step missing from the log (logging every step is needed).
    """
    at: dict[int, float] = {}
    for row in read_jsonl(metrics):
        if isinstance(row.get("step"), int) and "elapsed_s" in row:
            at.setdefault(row["step"], float(row["elapsed_s"]))
    missing = [s for s in (first, last) if s not in at]
    if missing:
        raise ValueError(f"{metrics}: no logged step {missing[0]} (steps logged: {len(at)})")
    return (at[last] - at[first]) / (last - first)
