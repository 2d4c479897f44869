"""The Band operator: probability-aware ratio bounds ``lo <= 1 <= hi`` for the sampled token.

``band_bounds`` projects the f-divergence trust region ``D_f(pi_new || pi_old) <= delta`` onto the sampled
token's ratio ``r = pi_new(a|s) / pi_old(a|s)`` (formula in ``bandpo.core.divergences``): the bounds are wide
for rare tokens (``hi -> 1/p`` as p -> 0) and tight for likely ones (``hi -> 1`` as p -> 1), and never leave the
probability simplex.

Methods (``method=``):
    ``"closed_form"``: exact formulas (tv, chi2, neyman_chi2, hellinger).
    ``"table"``: scalar delta only; exact bounds tabulated once per (divergence, delta) and interpolated.
        Indexed by the bit pattern of ``-logp``: integer ops, two gathers, two ``exp2`` (``solvers.BoundsTable``).
        For KL (the one divergence ``auto`` tabulates) relative error <= 1e-6 (float64) / 1e-4 (float32) against a
        float64 reference (``benchmarks/bench.py``). Where ``lo`` reaches 0 at a finite p (reverse_kl, js, chi2,
        hellinger) the interpolated ``log lo`` loses its relative accuracy near that p (measured: absolute error up
        to 1e-4 at delta = 0.001; ``tests/core/test_bounds.py`` checks reverse_kl's and js's). A divergence without
        a fast solver builds its table by bisection: 12-30 s on a CPU core, once per (divergence, delta).
    ``"newton"``: kl, reverse_kl, js; any per-token delta. KL: Halley iterations (``solvers.kl_bounds``);
        reverse_kl and js: Newton's method on the generator's derivative (``newton.fdiv_newton_bounds``).
        In float32 compute p is clamped at e^-80 and ``hi`` extended as ``c / p`` below: exact for kl and js
        (``hi p`` tends to a constant as p -> 0), approximate for reverse_kl (``hi p ~ delta / log(1/p)``: 7% off
        at p = e^-85), where ``hi > 1e33`` is far above any cap.
    ``"bisection"``: the generic bracketed solver; any divergence, any user generator f; the reference.
        Runs in float64 whatever the compute dtype (float32 only on devices without float64, e.g. MPS).
    ``"auto"``: closed_form if available, else table for a scalar delta (where tabulated), else newton
        (kl, reverse_kl, js), else bisection.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

from bandpo.core import solvers
from bandpo.core.checks import (
    DELTA_MAX,
    DELTA_MIN,
    check_cap,
    check_delta,
    check_float_tensor,
    check_logprobs,
    check_relax,
    delta_range,
    delta_refused,
)
from bandpo.core.divergences import DIVERGENCES, FAST_SOLVERS, Divergence, LogSolver
from bandpo.registry import Registry
from bandpo.validation import check_bool

logger = logging.getLogger(__name__)

# logp is clamped to [LOGP_MIN, -Q_MIN] inside the solvers so that p and q = 1-p stay normal numbers;
# p = 0 and p = 1 are then restored exactly (hi = inf resp. hi = 1), the other bound reaches its limit.
_LOGP_MIN = {torch.float32: -80.0, torch.float64: -700.0}
_Q_MIN = {torch.float32: 1e-20, torch.float64: 1e-200}


def check_generator(f: Callable[[Tensor], Tensor]) -> None:
    """Cheap checks that a user generator is usable: f(1) = 0, finite and convex on a grid of u in (0, 50].

    Raises ``ValueError`` naming the failed property. (Convexity is checked by second differences on a
    log-spaced grid; a generator that passes can still be non-convex between grid points.)
    """
    u = torch.cat(
        [torch.logspace(-4, math.log10(50.0), 97, dtype=torch.float64), torch.ones(1, dtype=torch.float64)]
    )
    u, _ = torch.sort(u)
    try:
        fu = f(u)
    except Exception as err:  # report the user's error with context
        raise ValueError(f"divergence generator f failed on a float64 tensor: {err!r}") from err
    if not isinstance(fu, Tensor) or fu.shape != u.shape:
        raise ValueError("divergence generator f must map a tensor to a tensor of the same shape")
    fu = fu.to(torch.float64)
    f1 = f(torch.ones(1, dtype=torch.float64)).to(torch.float64).item()
    if not math.isfinite(f1) or abs(f1) > 1e-9:
        raise ValueError(f"divergence generator f must satisfy f(1) = 0, got f(1) = {f1!r}")
    if not bool(torch.isfinite(fu).all()):
        raise ValueError(
            "divergence generator f must be finite on (0, inf); got non-finite values on (0, 50]"
        )
    # convexity: slopes between consecutive grid points must not decrease
    slopes = torch.diff(fu) / torch.diff(u)
    scale = slopes.abs().max().clamp(min=1.0)
    if bool((torch.diff(slopes) < -1e-9 * scale).any()):
        bad = int(torch.nonzero(torch.diff(slopes) < -1e-9 * scale)[0]) + 1
        raise ValueError(
            f"divergence generator f must be convex; its slope decreases near u = {u[bad].item():.4g}"
        )


def resolve_divergence(divergence: str | Divergence | Callable[[Tensor], Tensor]) -> Divergence:
    """A registered name (or alias), a ``Divergence``, or a user generator ``f`` (checked with
    :func:`check_generator`) -> ``Divergence``."""
    if isinstance(divergence, Divergence):
        return divergence
    if isinstance(divergence, str):
        return DIVERGENCES.get(divergence)
    if callable(divergence):
        check_generator(divergence)
        name = getattr(divergence, "__name__", "custom")
        return Divergence(f"custom:{name}", divergence, "user-supplied generator")
    raise TypeError(
        f"divergence must be a name ({', '.join(DIVERGENCES.names())}), a Divergence or a callable f(u), "
        f"got {type(divergence).__name__}"
    )


def _compute_dtype(x: Tensor, compute_dtype: torch.dtype | None) -> torch.dtype:
    if compute_dtype is None:
        return torch.float64 if x.dtype == torch.float64 else torch.float32
    if compute_dtype not in (torch.float32, torch.float64):
        raise ValueError(f"compute_dtype must be torch.float32 or torch.float64, got {compute_dtype}")
    return compute_dtype


ExactSolve = Callable[[Divergence, Tensor, Tensor], tuple[Tensor, Tensor]]
"""``(div, logp, delta) -> (lo, hi)`` in ``logp``'s dtype, with ``logp`` in [-inf, 0] and ``delta`` broadcasting to
it: an exact solver, unclamped."""


def _in_log_space(
    log_solver: LogSolver, div: Divergence, logp: Tensor, delta: Tensor
) -> tuple[Tensor, Tensor]:
    """An iterative solver's ``(log lo, log hi)`` on ``logp`` clamped so that p and 1-p stay normal numbers, mapped
    back to the unclamped p: ``hi = x / p``, so p = 0 gives inf; then kept inside ``1/p``."""
    dt = logp.dtype
    logp_c = torch.clamp(logp, _LOGP_MIN[dt], -_Q_MIN[dt])
    log_lo, log_hi = log_solver(div, logp_c, torch.log(-torch.expm1(logp_c)), delta)
    return torch.exp(log_lo), torch.exp(torch.minimum(log_hi + (logp_c - logp), -logp))


def _closed_form(div: Divergence, logp: Tensor, delta: Tensor) -> tuple[Tensor, Tensor]:
    return div.closed_form(logp, delta)  # type: ignore[misc]  # the formulas handle p = 0 and p = 1 exactly


def _newton(div: Divergence, logp: Tensor, delta: Tensor) -> tuple[Tensor, Tensor]:
    """The divergence's own fast solver (``FAST_SOLVERS``: KL's Halley, else Newton's with ``f'``)."""
    return _in_log_space(FAST_SOLVERS.get(div.fast_solver), div, logp, delta)  # type: ignore[arg-type]


def _generic_log(div: Divergence, logp: Tensor, log1mp: Tensor, delta: Tensor) -> tuple[Tensor, Tensor]:
    lo, hi = solvers.generic_bounds(div.generator, logp, log1mp, delta)
    return torch.log(lo), torch.log(hi)


def _bisection(div: Divergence, logp: Tensor, delta: Tensor) -> tuple[Tensor, Tensor]:
    """The generic solver evaluates g_f by cancellation-prone sums: run in float64 (the slow, reference path)
    wherever the device has float64."""
    if logp.dtype != torch.float64 and logp.device.type != "mps":
        lo, hi = _bisection(div, logp.double(), delta.double())
        return lo.to(logp.dtype), hi.to(logp.dtype)
    return _in_log_space(_generic_log, div, logp, delta)


@dataclass(frozen=True)
class Solver:
    """One of ``band_bounds``' methods (an entry of :data:`SOLVERS`).

    Attributes:
        what: one line for the docs and the error messages.
        refuses: ``(div, scalar_delta) -> why it cannot serve, or None``.
        solve: the exact solver; ``None`` for ``auto`` (resolved to another) and ``table`` (built from an exact
            solver, then interpolated).
        auto_takes: whether ``auto`` picks it for a divergence it serves (``table``: only a tabulated one).
    """

    what: str
    refuses: Callable[[Divergence, bool], str | None]
    solve: ExactSolve | None = None
    auto_takes: Callable[[Divergence], bool] = lambda div: True


def _newton_refuses(div: Divergence, scalar_delta: bool) -> str | None:
    if div.fast_solver is not None:
        return None
    names = ", ".join(repr(n) for n in DIVERGENCES.names() if DIVERGENCES.get(n).fast_solver is not None)
    return f"method='newton' is available for divergences {names} only, got {div.name!r}"


SOLVERS: Registry[Solver] = Registry("method")
"""``band_bounds``' solvers (its ``method``), in the order ``auto`` tries them (module docstring): the one source of
the names every adapter and the docs list, and the dispatch of ``band_bounds``."""
SOLVERS.register(
    "auto",
    Solver(
        "the first of the others that the divergence and the radius allow, in this order",
        lambda div, scalar: None,
        auto_takes=lambda div: False,
    ),
)
SOLVERS.register(
    "closed_form",
    Solver(
        "exact formulas (tv, chi2, neyman_chi2, hellinger)",
        lambda div, scalar: (
            None
            if div.closed_form is not None
            else f"method='closed_form' is not available for divergence {div.name!r}"
        ),
        _closed_form,
    ),
)
SOLVERS.register(
    "table",
    Solver(
        "scalar delta: exact bounds tabulated once per (divergence, delta), interpolated",
        lambda div, scalar: (
            None if scalar else "method='table' needs a scalar delta (a Python float); got a tensor"
        ),
        auto_takes=lambda div: div.tabulate,
    ),
)
SOLVERS.register(
    "newton",
    Solver(
        "any delta: Halley's method for kl, Newton's with the generator's derivative (reverse_kl, js)",
        _newton_refuses,
        _newton,
    ),
)
SOLVERS.register(
    "bisection",
    Solver(
        "any divergence: the generic bracketed solver in float64, the reference",
        lambda div, scalar: None,
        _bisection,
    ),
)
METHODS = tuple(SOLVERS.names())
"""The names of :data:`SOLVERS`."""


def resolve_method(div: Divergence, method: str, scalar_delta: bool) -> str:
    """The solver ``band_bounds`` uses for ``div`` (``"auto"``: the first entry of :data:`SOLVERS` that serves and
    that ``auto`` takes); impossible requests raise ``ValueError`` with the solver's reason."""
    method = SOLVERS.canonical(method)  # an unknown name: its did-you-mean and the valid names
    if method == "auto":
        return next(
            name
            for name in SOLVERS
            if SOLVERS.get(name).auto_takes(div) and SOLVERS.get(name).refuses(div, scalar_delta) is None
        )
    problem = SOLVERS.get(method).refuses(div, scalar_delta)
    if problem is not None:
        raise ValueError(problem)
    return method


def _exact_method(div: Divergence, method: str) -> ExactSolve:
    """The exact solver of ``method``; for the table, the one it is built from (newton where the divergence has a
    fast solver, else bisection)."""
    if method == "table":
        method = "newton" if SOLVERS.get("newton").refuses(div, True) is None else "bisection"
    solve = SOLVERS.get(method).solve
    assert solve is not None, method  # auto is resolved first
    return solve


CPU_CHUNK = 1 << 16  # tokens per chunk of the iterative solvers and closed forms on the CPU


def _chunked(
    solve: Callable[[Tensor, Tensor], tuple[Tensor, Tensor]], logp: Tensor, delta: Tensor
) -> tuple[Tensor, Tensor]:
    """``solve(logp, delta)`` on CPU chunks of ``CPU_CHUNK`` to ``2 CPU_CHUNK`` tokens, written into
    preallocated outputs: the solvers' dozens of temporaries then stay in cache instead of streaming
    through memory (elementwise, so equal to one call to at most 1 ulp: torch's vectorised and scalar tail
    loops may round differently on some CPUs). Other devices: one call."""
    ranges = solvers.chunk_ranges(logp.numel(), CPU_CHUNK, logp.device)
    if len(ranges) == 1:
        return solve(logp, delta)
    flat = logp.reshape(-1)
    d = delta if delta.dim() == 0 else torch.broadcast_to(delta, logp.shape).reshape(-1)
    lo, hi = torch.empty_like(flat), torch.empty_like(flat)
    for start, end in ranges:
        lo[start:end], hi[start:end] = solve(flat[start:end], d if d.dim() == 0 else d[start:end])
    return lo.view(logp.shape), hi.view(logp.shape)


def band_bounds(
    old_log_prob: Tensor,
    delta: float | Tensor = 0.05,
    divergence: str | Divergence | Callable[[Tensor], Tensor] = "kl",
    *,
    cap: float | None = 10.0,
    relax: tuple[float, float] | None = None,
    method: str = "auto",
    compute_dtype: torch.dtype | None = None,
    check_values: bool = True,
) -> tuple[Tensor, Tensor]:
    """Band ratio bounds for the sampled tokens.

    Args:
        old_log_prob: (...) float16/bfloat16/float32/float64, ``log pi_old(a|s)`` of the sampled tokens, in
            [-inf, 0]. ``-inf`` (p = 0) gives ``lo = 0, hi = cap``; ``0`` (p = 1) gives ``hi = 1``.
        delta: trust-region radius > 0 (KL: at most ``KL_DELTA_MAX`` = 1000, ``Divergence.max_delta``; a bounded
            divergence below its largest value, ``Divergence.saturating_delta``: TV < 1, hellinger < 2, JS < log 2,
            where the bounds would be the whole simplex); a float,
            or a float tensor broadcastable to ``old_log_prob`` (per token).
        divergence: a registered name (``bandpo.DIVERGENCES.names()``), a ``Divergence``, or a convex generator
            ``f(u)`` with ``f(1) = 0`` (solved by the generic bisection).
        cap: upper cap on ``hi``, a finite number >= 1 (the authors' ``upper_bound_max``, default 10);
            ``None`` keeps only ``1/p``.
        relax: ``(eps_low, eps_high)`` with ``0 <= eps_low <= 1``, ``eps_high >= 0``: take the union with the
            fixed interval ``[1-eps_low, 1+eps_high]``.
        method: ``"auto"`` or one of ``closed_form``, ``table``, ``newton``, ``bisection`` (module docstring).
        compute_dtype: float32 or float64; default float64 for float64 input, else float32.
        check_values: check for NaN / +inf / positive log-probs and a per-token ``delta``'s range (one device->host
            sync); shape and dtype checks always run. Off, a radius out of range gives NaN or meaningless bounds.

    Returns:
        ``(lo, hi)``: same shape, dtype and device as ``old_log_prob``, without gradient (computed from detached
        inputs whatever the solver); ``0 <= lo <= 1 <= hi <= min(1/p, cap)``
        (``relax`` may widen them to its fixed interval).
    """
    check_float_tensor("old_log_prob", old_log_prob)
    check_bool("check_values", check_values)
    div = resolve_divergence(divergence)
    scalar_delta = not isinstance(delta, Tensor)
    cdt = _compute_dtype(old_log_prob, compute_dtype)
    method = resolve_method(div, method, scalar_delta)
    if scalar_delta:
        delta_f = check_delta("delta", delta, div)
        delta_t = None  # made below only where a solver needs it (not the table: no host->device copy)
    else:
        check_float_tensor("delta", delta)
        # delta's shape broadcasts to old_log_prob's: written out, since torch.broadcast_shapes imports sympy on its
        # first call (1-2 s, up to 18 s on a loaded machine)
        trailing = zip(reversed(delta.shape), reversed(old_log_prob.shape))
        if delta.dim() > old_log_prob.dim() or any(d not in (1, n) for d, n in trailing):
            raise ValueError(
                f"delta of shape {tuple(delta.shape)} must broadcast to old_log_prob's shape {tuple(old_log_prob.shape)}"
            )
        delta_t = delta.detach().to(device=old_log_prob.device, dtype=cdt)
        out = delta_refused(delta_t, div)
        if check_values and bool(out.any()):
            first = delta_t[out].reshape(-1)[0].item()
            if 0 < first < DELTA_MIN:
                raise ValueError(f"delta must hold radii of at least {DELTA_MIN:g}, found {first!r}")
            if DELTA_MAX < first < math.inf and div.max_delta > DELTA_MAX:
                raise ValueError(f"delta must hold radii of at most {DELTA_MAX:g}, found {first!r}")
            raise ValueError(f"delta must hold finite numbers {delta_range(div)}, found {first!r}")
    cap = check_cap(cap)
    if cap is not None:  # beyond the compute or output dtype's range: its largest number (float16: 65504)
        cap = min(cap, torch.finfo(cdt).max, torch.finfo(old_log_prob.dtype).max)
    relax = check_relax(relax)
    if relax is not None:
        eps_low, eps_high = relax
    if check_values:
        check_logprobs("old_log_prob", old_log_prob)

    # the bounds are constants of the objective: no gradient, by any solver
    logp = old_log_prob.detach().to(cdt)
    if method == "table":
        bins = solvers.TABLE_BINS_LOG2[cdt]

        def build() -> solvers.BoundsTable:  # only on a cache miss: logged with its cost (0.1-2 s)
            start = time.perf_counter()
            exact = _exact_method(div, "table")
            d64 = torch.tensor(delta_f, dtype=torch.float64)
            table = solvers.BoundsTable(lambda lp: exact(div, lp, d64), bins)
            logger.info(
                "built the %s bounds table for delta=%g (%s compute, %d nodes) in %.2f s; cached for later calls",
                div.name,
                delta_f,
                str(cdt).removeprefix("torch."),
                table.n_intervals + 1,
                time.perf_counter() - start,
            )
            return table

        table = solvers.cached_table(div, delta_f, bins, build)
        # the lookup returns 0 <= lo <= 1 <= hi <= cap already: without relax, nothing is left to clamp
        lo, hi = table.lookup(logp, cap=cap)
        if relax is None:
            return lo.to(old_log_prob.dtype), hi.to(old_log_prob.dtype)
    else:
        if delta_t is None:
            # a fill on the device, not a copy from the host (refused while a CUDA graph is captured)
            delta_t = torch.full((), delta_f, dtype=cdt, device=old_log_prob.device)
        exact = _exact_method(div, method)
        lo, hi = _chunked(lambda lp, d: exact(div, lp, d), logp, delta_t)

    if relax is not None:
        lo = torch.clamp(lo, max=1.0 - eps_low)
        hi = torch.clamp(hi, min=1.0 + eps_high)
    lo = torch.clamp(lo, 0.0, 1.0)
    hi = torch.clamp(hi, min=1.0) if cap is None else torch.clamp(hi, 1.0, cap)
    return lo.to(old_log_prob.dtype), hi.to(old_log_prob.dtype)
