"""Where Band with DPPO's truncation and verl 0.9.1's DPPO differ, token class by token class (needs verl).

    OMP_NUM_THREADS=1 python scripts/dppo_vs_band.py [--seed 1]   # about 15 s of CPU time

Band here is ``band`` with the same divergence, radius = DPPO's threshold, no cap and ``truncation_c = c``: the
rule whose region docs/method.md calls "DPPO's"; classes are numbered as in docs/method.md ("Relatives: DPPO").
Each line prints how many tokens of a constructed class get a
different per-token gradient (``token-sum`` aggregation, so a token's gradient is its own) under verl's
``compute_policy_loss_dppo_tv`` / ``_kl`` and under ``bandpo.policy_loss``, and the number of tokens in the class.
The last part feeds bfloat16 log-probabilities to both DPPO implementations and counts kept/masked decisions that
differ from the same computation on the same values in float64.
"""

from __future__ import annotations

import argparse
import math
import warnings
from collections.abc import Callable

import torch

from bandpo import band_bounds
from bandpo.losses import make_clip_rule, policy_loss

# verl loads bandpo's plugin at import, which warns that TRL is installed too (this environment has both on purpose)
warnings.filterwarnings("ignore", message=r"trl .* is installed next to verl")
from verl.trainer.ppo.core_algos import get_policy_loss_fn  # noqa: E402
from verl.workers.config import ActorConfig, PolicyLossConfig  # noqa: E402

C = 3.0  # DPPO's truncation (verl's ActorConfig value); no token below reaches it
TV, KL = 0.15, 0.05  # the DPPO authors' thresholds (bandpo's dppo_tv / dppo_kl defaults)


def verl_config(name: str, threshold: float) -> ActorConfig:
    return ActorConfig(
        strategy="fsdp",
        rollout_n=1,
        ppo_micro_batch_size_per_gpu=1,
        loss_agg_mode="token-sum",
        clip_ratio=threshold,
        clip_ratio_low=threshold,
        clip_ratio_high=threshold,
        clip_ratio_c=C,
        policy_loss=PolicyLossConfig(loss_mode=name),
    )


def grad(fn: Callable[[torch.Tensor], tuple[torch.Tensor, object]], new: torch.Tensor) -> torch.Tensor:
    """The gradient of ``fn``'s loss (the first of what it returns) with respect to ``new``, same shape."""
    x = new.clone().requires_grad_(True)
    loss, _ = fn(x)
    (g,) = torch.autograd.grad(loss, x)
    return g


def dppo_grad(
    name: str, threshold: float, old: torch.Tensor, new: torch.Tensor, adv: torch.Tensor
) -> torch.Tensor:
    """verl's per-token DPPO gradient; all (1, N)."""
    fn, cfg, mask = get_policy_loss_fn(name), verl_config(name, threshold), torch.ones_like(old)
    return grad(lambda x: fn(old, x, adv, mask, "token-sum", cfg, None), new)


def bandpo_dppo_grad(name: str, old: torch.Tensor, new: torch.Tensor, adv: torch.Tensor) -> torch.Tensor:
    """bandpo's per-token DPPO gradient (its default thresholds, c = C); all (1, N)."""
    rule, mask = make_clip_rule(name, truncation_c=C), torch.ones_like(old)
    return grad(lambda x: policy_loss(x, old, adv, mask, rule, loss_agg_mode="token-sum"), new)


def band_grad(
    divergence: str,
    delta: float,
    old: torch.Tensor,
    new: torch.Tensor,
    adv: torch.Tensor,
    method: str = "auto",
) -> torch.Tensor:
    """Band (radius delta, no cap) with DPPO's truncation; per-token gradient, (1, N)."""
    rule = make_clip_rule("band", divergence=divergence, delta=delta, cap=None, method=method)
    mask = torch.ones_like(old)
    return grad(
        lambda x: policy_loss(x, old, adv, mask, rule, loss_agg_mode="token-sum", truncation_c=C), new
    )


def differ(a: torch.Tensor, b: torch.Tensor) -> int:
    return int((a != b).sum())


def report(label: str, n_diff: int, n: int) -> None:
    print(f"  {label}: {n_diff} of {n} tokens")


def log_uniform(g: torch.Generator, n: int, lo: float, hi: float) -> torch.Tensor:
    """(n,) float64 probabilities, log-uniform in [lo, hi]."""
    return torch.exp(
        math.log(lo) + (math.log(hi) - math.log(lo)) * torch.rand(n, generator=g, dtype=torch.float64)
    )


def same_as_verl(g: torch.Generator, n: int) -> None:
    """bandpo's dppo_tv / dppo_kl against verl's on random tokens (both signs of A, ratios ~0 to past c)."""
    print("bandpo's DPPO vs verl's, random tokens: gradients that differ (bit for bit)")
    q = log_uniform(g, n, 1e-4, 0.9999)
    new = (torch.log(q) + 1.5 * torch.randn(n, generator=g, dtype=torch.float64)).clamp(max=0.0)
    adv = torch.randn(n, generator=g, dtype=torch.float64)
    for dtype in (torch.float32, torch.float64):
        old, x, a = (t.to(dtype).unsqueeze(0) for t in (torch.log(q), new, adv))
        for name, delta in (("dppo_tv", TV), ("dppo_kl", KL)):
            ours = bandpo_dppo_grad(name, old, x, a)
            kept = int((ours != 0).sum())
            report(f"{dtype} {name} ({kept} kept)", differ(ours, dppo_grad(name, delta, old, x, a)), n)


def class_tv_simplex_edge(g: torch.Generator, n: int) -> None:
    """Class 3: TV, A > 0, p_old > 0.85, log-prob 0: Band's hi is the simplex limit 1/exp(lp_old), the ratio is
    exp(0 - lp_old); the two roundings differ by an ulp on some tokens, DPPO tests 1 - p_old <= 0.15."""
    print("class 3: TV, A > 0, p_old in (0.85, 1), new log-prob 0:")
    for dtype in (torch.float32, torch.float64):
        p = 0.85 + 0.15 * torch.rand(n, generator=g, dtype=torch.float64)
        old = torch.log(p).to(dtype).unsqueeze(0)
        new, adv = torch.zeros_like(old), torch.ones_like(old)
        ratio = torch.exp(new - old)
        _, hi = band_bounds(old, TV, "tv", cap=None)
        n_diff = differ(dppo_grad("dppo_tv", TV, old, new, adv), band_grad("tv", TV, old, new, adv))
        report(
            f"{dtype}, different gradient (ratio above hi by rounding: {int((ratio > hi).sum())})", n_diff, n
        )


def class_kl_table(g: torch.Generator, n: int) -> None:
    """Class 6: Band-KL's default solver (method="auto": the interpolation table) vs the exact solver (Newton)."""
    print("class 6: Band-KL, method='auto' (table) vs 'newton' (exact root):")
    p = log_uniform(g, 200_000, 1e-30, 1 - 1e-7)
    for dtype in (torch.float64, torch.float32):
        old = torch.log(p).to(dtype)
        lo_t, hi_t = band_bounds(old, KL, "kl", cap=None, method="auto")
        lo_n, hi_n = band_bounds(old, KL, "kl", cap=None, method="newton")
        err_hi = ((hi_t.double() - hi_n.double()).abs() / hi_n.double()).max().item()
        err_lo = (
            ((lo_t.double() - lo_n.double()).abs() / lo_n.double().clamp(min=1e-300))[lo_n > 1e-6]
            .max()
            .item()
        )
        print(f"  {dtype}: largest relative bound difference, hi {err_hi:.1e}, lo (lo > 1e-6) {err_lo:.1e}")
    # tokens placed between the two solvers' edges (within 2e-7 relative of the exact root), both signs
    for dtype, spread in ((torch.float64, 2e-7), (torch.float32, 1e-5)):
        q = log_uniform(g, n, 0.01, 0.9)  # lower edge above e^-20: no ratio clamp involved
        old = torch.log(q)
        lo, hi = band_bounds(old, KL, "kl", cap=None, method="newton")
        adv = torch.where(torch.rand(n, generator=g) < 0.5, 1.0, -1.0).to(torch.float64)
        u = 2 * torch.rand(n, generator=g, dtype=torch.float64) - 1
        new = (old + torch.log(torch.where(adv > 0, hi, lo)) + torch.log1p(spread * u)).clamp(max=0.0)
        old, new, adv = old.to(dtype).unsqueeze(0), new.to(dtype).unsqueeze(0), adv.to(dtype).unsqueeze(0)
        g_auto, g_newton = band_grad("kl", KL, old, new, adv), band_grad("kl", KL, old, new, adv, "newton")
        g_dppo = dppo_grad("dppo_kl", KL, old, new, adv)
        report(
            f"{dtype}, within {spread:g} of the exact edge: 'auto' vs 'newton' differ on "
            f"{differ(g_auto, g_newton)}, verl vs 'auto' {differ(g_dppo, g_auto)}, verl vs 'newton'",
            differ(g_dppo, g_newton),
            n,
        )


def verl_keeps(old: torch.Tensor, new: torch.Tensor, adv: torch.Tensor) -> torch.Tensor:
    """verl's DPPO-KL decision, from its own function: kept (gradient != 0) or masked; all (N,) float64."""
    return dppo_grad("dppo_kl", KL, old.unsqueeze(0), new.unsqueeze(0), adv.unsqueeze(0)).squeeze(0) != 0


def class_kl_epsilon(g: torch.Generator, n: int) -> None:
    """Class 5: verl's +1e-8 in the logs: the region's edge moves at every p (wider for A > 0, narrower for A < 0)."""
    print(
        "class 5: DPPO-KL's +1e-8 (float64): relative shift of verl's region edge in r against the exact root"
    )
    ps = torch.tensor([1e-4, 1e-2, 0.1, 0.5, 0.9, 0.99, 0.999], dtype=torch.float64)
    old = torch.log(ps)
    lo, hi = band_bounds(old, KL, "kl", cap=None, method="newton")
    for side, edge, sign in (("A > 0, upper edge", hi, 1.0), ("A < 0, lower edge", lo, -1.0)):
        adv = torch.full_like(old, sign)
        a, b = (
            torch.log(edge) - sign * 0.01,
            torch.log(edge) + sign * 0.01,
        )  # log r: inside at a, outside at b
        for _ in range(100):
            mid = (a + b) / 2
            inside = verl_keeps(old, old + mid, adv)
            a, b = torch.where(inside, mid, a), torch.where(inside, b, mid)
        shift = torch.expm1((a + b) / 2 - torch.log(edge))
        cells = ", ".join(f"p {p:g}: {s:+.1e}" for p, s in zip(ps.tolist(), shift.tolist()))
        print(f"  {side}: {cells}")
    # near p_new = 1 the 1e-8 dominates: above this p_old, verl keeps every upward move up to p_new = 1
    a, b = torch.tensor([0.5], dtype=torch.float64), torch.tensor([1 - 1e-12], dtype=torch.float64)
    one, up = torch.zeros(1, dtype=torch.float64), torch.ones(1, dtype=torch.float64)
    for _ in range(60):
        mid = (a + b) / 2
        at_one = verl_keeps(torch.log(mid), one, up)
        a, b = torch.where(at_one, a, mid), torch.where(at_one, mid, b)
    print(
        f"  A > 0: for p_old above {b.item():.5f}, verl's region reaches p_new = 1 (the exact one never does)"
    )
    # tokens within 1e-6 (relative) of the exact edge, both signs: verl's kept/masked vs Band-newton's
    q = log_uniform(g, n, 0.01, 0.999)  # lower edge above e^-20: no ratio clamp involved
    old = torch.log(q)
    lo, hi = band_bounds(old, KL, "kl", cap=None, method="newton")
    adv = torch.where(torch.rand(n, generator=g) < 0.5, 1.0, -1.0).to(torch.float64)
    u = 2 * torch.rand(n, generator=g, dtype=torch.float64) - 1
    edge = torch.where(adv > 0, hi, lo)
    new = (old + torch.log(edge) + torch.log1p(1e-6 * u)).clamp(max=0.0)
    g_dppo = dppo_grad("dppo_kl", KL, old.unsqueeze(0), new.unsqueeze(0), adv.unsqueeze(0)).squeeze(0)
    g_band = band_grad("kl", KL, old.unsqueeze(0), new.unsqueeze(0), adv.unsqueeze(0), "newton").squeeze(0)
    pos, neg = adv > 0, adv < 0
    widen = int(((g_dppo != 0) & (g_band == 0) & pos).sum())
    narrow = int(((g_dppo == 0) & (g_band != 0) & neg).sum())
    other = differ(g_dppo, g_band) - widen - narrow
    print(
        f"  tokens within 1e-6 of the exact edge: A > 0 kept by verl only {widen} of {int(pos.sum())}, "
        f"A < 0 masked by verl only {narrow} of {int(neg.sum())}, other differences {other}"
    )


def class_high_clamp(g: torch.Generator, n: int) -> None:
    """Class 1: A > 0 with a log-ratio above 20: both clamp the ratio to e^20; Band tests the clamped ratio against
    hi, DPPO the probabilities (outside: a move from p_old < 1e-9 to p_new >= 0.2)."""
    print("class 1: A > 0, p_old log-uniform in [1e-14, 1e-9], p_new uniform in [0.2, 0.9] (log-ratio > 20):")
    old = torch.log(log_uniform(g, n, 1e-14, 1e-9)).unsqueeze(0)
    new = torch.log(0.2 + 0.7 * torch.rand(1, n, generator=g, dtype=torch.float64))
    adv = torch.ones_like(old)
    for name, div, delta in (("dppo_tv", "tv", TV), ("dppo_kl", "kl", KL)):
        method = "newton" if div == "kl" else "auto"
        _, hi = band_bounds(old, delta, div, cap=None, method=method)
        passes = int((math.exp(20.0) <= hi).sum())
        n_diff = differ(dppo_grad(name, delta, old, new, adv), band_grad(div, delta, old, new, adv, method))
        report(
            f"{div.upper()}, float64, different gradient (clamped ratio e^20 within hi: {passes})", n_diff, n
        )


def class_low_clamp(g: torch.Generator, n: int) -> None:
    """Class 2: A < 0 with a log-ratio below -20: both clamp the ratio to e^-20; Band tests the clamped ratio against
    lo, DPPO tests the probabilities (the low-side mirror of class 1). Only where Band-KL's lower
    edge lo is below e^-20 (p_old below about 2.6e-3 at KL 0.05) can a token be outside the region and still pass."""
    print(
        "class 2: KL, A < 0, p_old log-uniform in [1e-4, 1e-2], new log-prob 0.01-5 below the lower edge log(lo):"
    )
    old = torch.log(log_uniform(g, n, 1e-4, 1e-2))
    lo, _ = band_bounds(old, KL, "kl", cap=None, method="newton")
    new = old + torch.log(lo) - (0.01 + 4.99 * torch.rand(n, generator=g, dtype=torch.float64))
    below = int((torch.log(lo) < -20).sum())
    old, new = old.unsqueeze(0), new.unsqueeze(0)
    adv = -torch.ones_like(old)
    n_diff = differ(dppo_grad("dppo_kl", KL, old, new, adv), band_grad("kl", KL, old, new, adv, "newton"))
    report(f"float64, different gradient (lower edge below e^-20: {below})", n_diff, n)


def class_tv_edge(g: torch.Generator, n: int) -> None:
    """Class 4: TV, tokens within a few ulps of the region's edge p_new - p_old = +-0.15."""
    print("class 4: TV, p_new - p_old within a few ulps of +-0.15:")
    for dtype in (torch.float32, torch.float64):
        eps = torch.finfo(dtype).eps
        q = 0.01 + 0.8 * torch.rand(n, generator=g, dtype=torch.float64)
        adv = torch.where(torch.rand(n, generator=g) < 0.5, 1.0, -1.0).to(torch.float64)
        k = torch.randint(-4, 5, (n,), generator=g).to(torch.float64)
        target = (q + adv * TV * (1 + k * eps)).clamp(1e-6, 1.0)
        old, new = torch.log(q).to(dtype).unsqueeze(0), torch.log(target).to(dtype).unsqueeze(0)
        a = adv.to(dtype).unsqueeze(0)
        report(f"{dtype}", differ(dppo_grad("dppo_tv", TV, old, new, a), band_grad("tv", TV, old, new, a)), n)


def bf16_decisions(g: torch.Generator, n: int) -> None:
    """bfloat16 log-probs into verl's DPPO (it exponentiates and tests in bfloat16) and bandpo's (float32): kept
    or masked, compared with verl's own function on the same values in float64."""
    print("bfloat16 log-probs, DPPO kept/masked decisions that differ from float64 on the same values:")
    q = log_uniform(g, n, 1e-4, 0.9999)
    old16 = torch.log(q).to(torch.bfloat16).unsqueeze(0)
    new16 = (old16.double() + 0.5 * torch.randn(1, n, generator=g, dtype=torch.float64)).clamp(max=0.0)
    new16 = new16.to(torch.bfloat16)
    adv = torch.where(torch.rand(1, n, generator=g) < 0.5, 1.0, -1.0)
    for name, delta in (("dppo_tv", TV), ("dppo_kl", KL)):
        ref = dppo_grad(name, delta, old16.double(), new16.double(), adv.double()) != 0
        verl = dppo_grad(name, delta, old16, new16, adv.to(torch.bfloat16)) != 0
        ours = bandpo_dppo_grad(name, old16, new16, adv) != 0
        print(
            f"  {name}: verl (bfloat16) {differ(verl, ref)}, bandpo (float32) {differ(ours, ref)} of {n} tokens"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--tokens", type=int, default=2000, help="tokens per constructed class")
    args = parser.parse_args()
    print(
        f"verl vs bandpo, seed {args.seed}, {args.tokens} tokens per class, thresholds TV {TV} / KL {KL}, c {C}"
    )
    steps = [
        (same_as_verl, args.tokens),
        (class_high_clamp, args.tokens),
        (class_low_clamp, args.tokens),
        (class_tv_simplex_edge, args.tokens),
        (class_tv_edge, args.tokens),
        (class_kl_epsilon, args.tokens),
        (class_kl_table, args.tokens),
        (bf16_decisions, 4 * args.tokens),
    ]
    for k, (step, n) in enumerate(
        steps
    ):  # one generator per part: a part's sample does not depend on the others
        step(torch.Generator().manual_seed(1000 * args.seed + k), n)


if __name__ == "__main__":
    main()
