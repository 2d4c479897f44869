"""The bound solvers and the policy loss against baselines measured in the same run (``benchmarks/bench.py``'s
sections but the training step and the real model).

Every figure is a ratio against a baseline measured in the same run (this machine is noisy): the Band solvers
against the TV closed form and against the authors' algorithm (plain bisection, 50 iterations per side, tol 1e-6,
a device->host sync per iteration: docs/method.md#band-operator); the loss against GRPO's fixed clip and against
verl's own losses; the diagnostics against their naive reference. Timing: :mod:`bench_timing`
(``torch.utils.benchmark``).
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from bench_timing import CLOCKS, best, measure, measure_clocks, sample_logp
from torch import Tensor

from bandpo._optional import install_hint
from bandpo.core import DIVERGENCES, band_bounds
from bandpo.losses import CLIP_RULES, DIAGNOSTICS, clip_metrics, make_clip_rule, policy_loss

__all__ = [
    "VERL_COMPARED_RULES",
    "authors_bisection",
    "bench_bounds",
    "bench_diagnostics",
    "bench_loss",
    "bench_loss_vs_verl",
    "bench_schedule",
    "kl_accuracy",
    "table_memory_bytes",
]

TESTS = Path(__file__).resolve().parents[1] / "tests"
"""The repository's tests/, whose ``helpers`` hold the naive references the benchmarks time against."""


def _naive_clip_metrics() -> Callable[..., dict[str, Tensor]]:
    """``helpers.naive_diagnostics.naive_clip_metrics`` of :data:`TESTS` (one copy of the reference: the tests')."""
    if str(TESTS) not in sys.path:
        sys.path.insert(0, str(TESTS))
    from helpers.naive_diagnostics import naive_clip_metrics

    return naive_clip_metrics


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
    """Time per call of each divergence and baseline, per token count in ``sizes``: ``repeats`` rounds of the
    cases in turn (:func:`bench_timing.measure`), so a noisy stretch of the machine hits them alike; the best block
    of each. Rows ``{"n", "case", "ms", "calls", "x_tv", "speedup_vs_bisection"}``: ``calls`` timed (warm-up
    excluded), ratios to the TV closed form's time and the bisection's time over this one. ``progress``: a progress
    bar per size (stderr)."""
    rows: list[dict] = []
    for n in sizes:
        label = f"bounds, {n:,} tokens" if progress else None
        found = measure(_bound_cases(sample_logp(n, device=device)), rounds=repeats, progress=label)
        times = {case: best(m) for case, m in found.items()}
        tv, bis = times["band tv"], times["authors' bisection (kl, 50 it/side)"]
        for case, t in times.items():
            rows.append(
                {
                    "n": n,
                    "case": case,
                    "ms": 1e3 * t,
                    "calls": found[case].metadata["calls"],
                    "x_tv": t / tv,
                    "speedup_vs_bisection": bis / t,
                }
            )
    return rows


def kl_accuracy(n: int = 200_000) -> dict[str, float]:
    """Max relative error of the KL paths (table, Newton; float64 and float32) against the float64 generic bisection
    on ``n`` random p in [1e-30, 1 - 1e-30] (log-uniform in -log p: both tails), delta in {1e-3, 0.05, 1}. The
    error's denominator is ``|reference| + floor``, floor 1e-6 for the float64 paths and 1e-8 for float32's; a
    non-finite bound where the reference is finite is an error of ``inf``."""
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
                    # every p where the reference is finite; a NaN or inf there is an infinite error, not skipped
                    rel = ((got - ref).abs() / (ref.abs() + floor))[torch.isfinite(ref)]
                    err = max(err, rel.max().item() if bool(torch.isfinite(rel).all()) else math.inf)
                key = f"{method}/{str(dtype).split('.')[-1]}"
                out[key] = max(out.get(key, 0.0), err)
    return out


def _accuracy_logp(n: int) -> Tensor:
    """float64 (n,) log-probs with -log p log-uniform in [1e-30, -log(1e-30)], i.e. p in [1e-30, 1 - 1e-30]."""
    g = torch.Generator().manual_seed(1)
    lo, hi = math.log(1e-30), math.log(-math.log(1e-30))
    return -torch.exp(torch.rand(n, generator=g, dtype=torch.float64) * (hi - lo) + lo)


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
    dppo_tv / dppo_kl: DPPO's truncated objective) against grpo (``repeats`` rounds of the rules in turn, the best
    block of each: :func:`bench_timing.measure`), on ``device``. ``progress``: a progress bar (stderr)."""
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
    found = measure(steps, rounds=repeats, progress="loss, every rule" if progress else None)
    times = {name: best(m) for name, m in found.items()}
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
    solver, Halley's method) against the same rule at a constant radius (the cached table), in one run (cases in turn):
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
    found = measure(cases, rounds=repeats, progress="radius schedule" if progress else None)
    times = {case: best(m) for case, m in found.items()}
    return [
        {
            "case": f"{what} band kl, radius {kind}",
            "ms": 1e3 * times[f"{what} {kind}"],
            "x_constant": times[f"{what} {kind}"] / times[f"{what} constant"],
        }
        for what in ("bounds", "loss")
        for kind in schedules
    ]


def bench_diagnostics(
    batch: int = 64, length: int = 2048, rounds: int = 30, progress: bool = False
) -> list[dict]:
    """The loss's diagnostics alone (:func:`bandpo.losses.clip_metrics`, one fused pass) against the naive reference
    the tests hold it to (``tests/helpers/naive_diagnostics.py``: one masked mean per metric), on the per-token terms
    of ``grpo``, ``band`` and ``dppo_kl`` for the inputs of :func:`bench_loss_vs_verl`; ``rounds`` rounds of the
    cases in turn, each by the wall clock and the CPU clock (``progress``: with a progress bar on stderr). Returns
    per rule ``wall_ms`` and ``wall_naive_ms`` (best blocks) and ``wall_x_naive`` (their ratio), and the same of CPU
    time."""
    from bandpo.losses.policy_loss import per_token_policy_loss

    naive_clip_metrics = _naive_clip_metrics()

    old, log_prob, adv, mask = _loss_inputs(batch, length)
    cases: dict[str, Callable[[], object]] = {}
    for name in VERL_COMPARED_RULES:
        t = per_token_policy_loss(log_prob, old, adv, mask, make_clip_rule(name))
        args = (t.ratio, t.lo, t.hi, t.advantages, t.mask, t.old_log_prob)
        extra = {"dual_active": t.dual_active, "log_ratio": t.log_ratio}
        cases[f"{name} fused"] = lambda args=args, extra=extra: clip_metrics(*args, **extra)
        cases[f"{name} naive"] = lambda args=args, extra=extra: naive_clip_metrics(*args, **extra)
    found = measure_clocks(cases, rounds=rounds, progress="diagnostics" if progress else None)
    rows = []
    for name in VERL_COMPARED_RULES:
        row: dict[str, Any] = {"case": f"diagnostics {name}"}
        for clock in CLOCKS:
            fused, naive = (best(found[clock][f"{name} {kind}"]) for kind in ("fused", "naive"))
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
    ``dppo_kl`` defaults. Each case by the wall clock and the CPU clock (:func:`bench_timing.measure_clocks`).
    ``progress``: a progress bar over the blocks (stderr).

    Returns:
        ``(rows, None)``: per case ``case`` and, for each clock (``wall``, and ``cpu``: the process's CPU time, which
        waits for a core on a busy machine do not inflate), ``<clock>_ms`` (best block), ``<clock>_ms_median``,
        ``<clock>_x_verl`` (best over verl vanilla's best), ``<clock>_x_verl_median`` (median over median) and,
        for dppo_kl, ``<clock>_x_verl_dppo`` (best over verl dppo_kl's best); bandpo's rows also name their
        ``rule`` and diagnostics ``level``; ``([], reason)`` when verl is not
        installed.
    """
    try:
        from verl.trainer.ppo.core_algos import get_policy_loss_fn
        from verl.workers.config import ActorConfig, PolicyLossConfig
    except ImportError as err:
        return [], f"verl is not installed ({err}); {install_hint('verl')}"
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
    found = measure_clocks(steps, rounds=rounds, progress="loss vs verl" if progress else None)
    best_of = {clock: {k: best(m) for k, m in found[clock].items()} for clock in CLOCKS}
    median_of = {clock: {k: m.median for k, m in found[clock].items()} for clock in CLOCKS}
    rows = []
    for name in steps:
        row: dict[str, Any] = {"case": name, **cases[name]}
        for clock in CLOCKS:
            fastest, median = best_of[clock], median_of[clock]
            row[f"{clock}_ms"] = 1e3 * fastest[name]
            row[f"{clock}_ms_median"] = 1e3 * median[name]
            row[f"{clock}_x_verl"] = fastest[name] / fastest["verl vanilla"]
            row[f"{clock}_x_verl_median"] = median[name] / median["verl vanilla"]
            if cases[name].get("rule") == "dppo_kl":
                row[f"{clock}_x_verl_dppo"] = fastest[name] / fastest["verl dppo_kl"]
        rows.append(row)
    return rows, None


def table_memory_bytes(dtype: torch.dtype = torch.float32) -> int:
    """Bytes of one cached table copy in ``dtype`` ((value, slope) pairs for lo and hi), per (divergence,
    delta, device)."""
    from bandpo.core.solvers import TABLE_BINS_LOG2, BoundsTable

    nodes = ((BoundsTable.E_MAX - BoundsTable.E_MIN) << TABLE_BINS_LOG2[dtype]) + 1
    return nodes * 2 * 2 * torch.empty(0, dtype=dtype).element_size()
