"""f-divergences for the Band operator, with their closed-form bounds where they exist.

Notation (see ``bandpo.core.bounds``): ``p = pi_old(a|s)`` is the old probability of the sampled token,
``q = 1 - p`` (always computed as ``-expm1(logp)``), ``r = pi_new(a|s) / pi_old(a|s)`` the token ratio.
A generator ``f`` is convex with ``f(1) = 0``; the trust region ``sum_b P(b) f(Q(b)/P(b)) <= delta`` projected
onto the sampled token gives the scalar equation (the complement rescaled uniformly, paper Lemma 1)

    g_f(p, r) = p f(r) + q f((1 - r p) / q) = delta,       r in [0, 1/p],

whose two roots are the Band bounds ``lo <= 1 <= hi``.

Every divergence is registered once in ``DIVERGENCES``; config validation, the CLI and the docs read it.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

from bandpo.core import newton, solvers
from bandpo.registry import Registry, did_you_mean

# (logp, delta) -> (lo, hi), all (...) float tensors in the compute dtype, 0 <= lo <= 1 <= hi <= 1/p,
# exact also at p = 0 (logp = -inf: lo = 0, hi = inf) and p = 1 (hi = 1).
ClosedForm = Callable[[Tensor, Tensor], tuple[Tensor, Tensor]]


@dataclass(frozen=True)
class Divergence:
    """One f-divergence of the Band operator.

    Attributes:
        name: registry name.
        generator: ``f(u)`` for ``u >= 0``, elementwise on float tensors; convex with ``f(1) = 0``.
        description: one line for tables and ``--help``.
        closed_form: exact bounds ``(logp, delta) -> (lo, hi)`` when they exist.
        fast_solver: name of the fast exact iterative solver when there is one (:data:`FAST_SOLVERS`): ``"kl"``
            (Halley, ``bandpo.core.solvers.kl_bounds``) or ``"newton"`` (``bandpo.core.newton.fdiv_newton_bounds``,
            needs ``derivative``); otherwise the generic bracketed solver serves.
        tabulate: scalar-``delta`` calls may use a cached interpolation table (built by the exact solver).
        limit_lo_at_one: ``lim_{p -> 1} lo``, for the docs and the tests.
        derivative: ``f'(u)`` for ``u > 0``, elementwise on float tensors of the generator's dtype; used by
            the ``"newton"`` solver, which needs ``f(0)`` finite and ``f'`` at most logarithmically singular
            at 0 (see ``bandpo.core.newton.fdiv_newton_bounds``).
        max_delta: the largest radius ``band_bounds`` and the clip rules accept (``inf``: no limit; KL:
            :data:`KL_DELTA_MAX`). A finite one lies where the bounds have already reached ``[0, 1/p]`` (a larger
            radius would change nothing) and below any radius where a solver fails.
        saturating_delta: for a bounded divergence, its largest value ``sup g_f`` (TV 1, squared Hellinger 2,
            JS log 2): from this radius on every ratio in ``[0, 1/p]`` is inside the region for every ``p``, the
            bounds are ``[0, 1/p]`` (the whole simplex) and nothing is clipped, so ``band_bounds`` and the clip
            rules refuse a radius ``>= saturating_delta`` (``inf``: unbounded, never reached; KL, reverse KL and
            both chi^2 keep lo > 0 at p near 1 and hi < 1/p at p near 0 for every finite radius).
    """

    name: str
    generator: Callable[[Tensor], Tensor]
    description: str
    closed_form: ClosedForm | None = None
    fast_solver: str | None = None
    tabulate: bool = False
    limit_lo_at_one: Callable[[float], float] | None = None
    derivative: Callable[[Tensor], Tensor] | None = None
    max_delta: float = math.inf
    saturating_delta: float = math.inf

    def __post_init__(self) -> None:
        """One line for a field a solver would trip over later (a misspelled ``fast_solver`` ran the slow generic
        solver silently)."""
        if not isinstance(self.name, str) or not self.name:
            raise ValueError(f"Divergence name must be a non-empty string, got {self.name!r}")
        for field_name in ("generator", "closed_form", "limit_lo_at_one", "derivative"):
            value = getattr(self, field_name)
            if not (callable(value) or (value is None and field_name != "generator")):
                raise TypeError(f"Divergence {self.name!r}: {field_name} must be a function, got {value!r}")
        if self.fast_solver is not None and self.fast_solver not in FAST_SOLVERS:
            names = ", ".join(map(repr, [None, *FAST_SOLVERS.names()]))
            raise ValueError(
                f"Divergence {self.name!r}: fast_solver must be one of {names}, got "
                f"{self.fast_solver!r}{did_you_mean(self.fast_solver, FAST_SOLVERS)}"
            )
        if self.fast_solver == "newton" and self.derivative is None:
            raise ValueError(
                f"Divergence {self.name!r}: fast_solver='newton' needs derivative, the generator's f'"
            )
        for field_name in ("max_delta", "saturating_delta"):
            value = getattr(self, field_name)
            if not (isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0):
                raise ValueError(
                    f"Divergence {self.name!r}: {field_name} must be a number > 0 (inf: none), got {value!r}"
                )

    def g(self, p: Tensor, r: Tensor) -> Tensor:
        """The projected divergence ``g_f(p, r) = p f(r) + (1-p) f((1-rp)/(1-p))`` (naive; for tests/plots)."""
        q = 1.0 - p
        return p * self.generator(r) + q * self.generator((1.0 - r * p) / q)


LogSolver = Callable[[Divergence, Tensor, Tensor, Tensor], tuple[Tensor, Tensor]]
"""``(div, logp, log1mp, delta) -> (log lo, log hi)``: all (...) tensors of one float dtype, ``logp`` clamped by
``band_bounds`` so that ``p`` and ``1 - p = exp(log1mp)`` are normal numbers; ``delta`` broadcasts to ``logp``."""

FAST_SOLVERS: Registry[LogSolver] = Registry("fast solver")
"""The values of :attr:`Divergence.fast_solver` (``None``: the generic solver), each the solver it names: KL's
Halley iterations, Newton's method with the generator's derivative. Both run as ``band_bounds``'
``method="newton"``, which dispatches here on the divergence's ``fast_solver``."""
FAST_SOLVERS.register("kl", lambda div, logp, log1mp, delta: solvers.kl_bounds(logp, log1mp, delta))
FAST_SOLVERS.register(
    "newton",
    lambda div, logp, log1mp, delta: newton.fdiv_newton_bounds(
        div.generator, div.derivative, logp, log1mp, delta
    ),
)

DIVERGENCES: Registry[Divergence] = Registry("divergence")

KL_DELTA_MAX = 1000.0
"""The largest radius of Band-KL (``band``, ``adaptive_band``) and the largest threshold of DPPO-KL (``dppo_kl``).

From ``delta ~ 745`` on, KL's bounds are ``[0, 1/p]`` to float64 rounding (``lo <= e^-delta`` underflows, ``hi p =
1 - e^-delta`` rounds to 1 for small p): the region is the whole simplex and a larger radius changes nothing.
Halley's solver (``solvers.kl_bounds``) overflows in its outer starting point ``~ delta / p`` at the clamp of
``p`` (``e^-80`` in float32, ``e^-700`` in float64) once ``delta`` exceeds ``finfo.max * p``: 6141.6 in float32,
17724.7 in float64, and from there gives NaN bounds for p = 0 (from about 1.7e16 also for p near 1, and for
most p by 1e17); the table (``method="auto"``) is built by the float64 solver. ``tests/core/test_bounds.py``
checks both numbers and that every method and dtype gives finite, saturated bounds at this limit."""


def register_divergence(div: Divergence, aliases: tuple[str, ...] = ()) -> Divergence:
    """Add a divergence to the registry (names must be new)."""
    if not isinstance(div, Divergence):
        raise TypeError(
            f"register_divergence needs a Divergence(name, generator, description, ...), got {type(div).__name__}"
        )
    return DIVERGENCES.register(div.name, div, aliases)


def get_divergence(name: str) -> Divergence:
    """Look up a registered divergence by name or alias (unknown names list the valid ones)."""
    return DIVERGENCES.get(name)


# --------------------------------------------------------------------------------------------- generators
def _xlogx(u: Tensor) -> Tensor:
    """u log u for u >= 0, with the limit 0 at u = 0 (one fused op)."""
    return torch.xlogy(u, u)


def _f_kl(u: Tensor) -> Tensor:  # KL(pi_old || pi_new): f(u) = -log u
    return -torch.log(u)


def _f_reverse_kl(u: Tensor) -> Tensor:  # KL(pi_new || pi_old): f(u) = u log u
    return _xlogx(u)


def _df_reverse_kl(u: Tensor) -> Tensor:  # f'(u) = 1 + log u
    return 1.0 + torch.log(u)


def _f_tv(u: Tensor) -> Tensor:
    return 0.5 * torch.abs(u - 1.0)


def _f_chi2(u: Tensor) -> Tensor:
    return (u - 1.0) ** 2


def _f_neyman(u: Tensor) -> Tensor:
    return (u - 1.0) ** 2 / u


def _f_hellinger(u: Tensor) -> Tensor:
    return (torch.sqrt(u) - 1.0) ** 2


def _f_js(u: Tensor) -> Tensor:
    # JS(P, Q) = 1/2 KL(P||M) + 1/2 KL(Q||M), M = (P+Q)/2, as a generator in u = Q/P:
    # f(u) = 1/2 [u log u - (1+u) log((1+u)/2)] = 1/2 [(1+u) log1p(w) - log u]          (u >= 1/2)
    #      = 1/2 [u log s + log(2 - s)],  w = (u-1)/(u+1), s = 2u/(1+u) = 1 + w              (u < 1/2).
    # Near u = 1 the O(u-1) terms cancel down to f ~ (u-1)^2 / 8; in the first form with only eps |u-1|
    # absolute error (the textbook form: eps, ~1e-7 in float32, which the float32 Newton solver would see).
    # Below 1/2 nothing cancels. Two logs in all: one on log s | log u, one log1p on 1 - s | w.
    up1 = u + 1.0
    s = 2.0 * u / up1
    small = u < 0.5
    # clamped so that u log s = 0 at u = 0
    log_su = torch.log(torch.clamp(torch.where(small, s, u), min=torch.finfo(u.dtype).tiny))
    log1p_tw = torch.log1p(torch.where(small, 1.0 - s, (u - 1.0) / up1))
    return 0.5 * torch.where(small, u * log_su + log1p_tw, up1 * log1p_tw - log_su)


def _df_js(u: Tensor) -> Tensor:  # f'(u) = 1/2 log(2u / (1+u)); -inf at u = 0
    return 0.5 * torch.log(2.0 * (u / (1.0 + u)))


# ------------------------------------------------------------------------------------------- closed forms
def _symmetric_clamped(p: Tensor, width: Tensor) -> tuple[Tensor, Tensor]:
    """[1 - width, 1 + width] clamped to the simplex [0, 1/p]."""
    lo = torch.clamp(1.0 - width, min=0.0)
    hi = torch.minimum(1.0 + width, torch.reciprocal(p))
    return lo, hi


def _tv_bounds(logp: Tensor, delta: Tensor) -> tuple[Tensor, Tensor]:
    # g = p |r - 1|  ->  r = 1 -/+ delta / p
    p = torch.exp(logp)
    return _symmetric_clamped(p, delta / p)


def _chi2_bounds(logp: Tensor, delta: Tensor) -> tuple[Tensor, Tensor]:
    # g = p (r - 1)^2 / (1 - p)  ->  r = 1 -/+ sqrt(delta (1 - p) / p)
    p, q = torch.exp(logp), -torch.expm1(logp)
    return _symmetric_clamped(p, torch.sqrt(delta * q / p))


def _neyman_bounds(logp: Tensor, delta: Tensor) -> tuple[Tensor, Tensor]:
    # g = p (r-1)^2 / (r (1 - r p)) = delta  <=>  p (1+delta) r^2 - (2p + delta) r + p = 0.
    # hi = (2p + delta + sqrt(D)) / (2p (1 + delta)),  D = 4 p delta (1-p) + delta^2;
    # lo from the product of the roots, lo * hi = 1 / (1 + delta): no cancellation as p -> 0.
    p, q = torch.exp(logp), -torch.expm1(logp)
    s = 2.0 * p + delta + torch.sqrt(4.0 * p * delta * q + delta * delta)
    hi = torch.minimum(s / (2.0 * p * (1.0 + delta)), torch.reciprocal(p))
    lo = 2.0 * p / s
    return lo, hi


def _hellinger_bounds(logp: Tensor, delta: Tensor) -> tuple[Tensor, Tensor]:
    # g = 2 - 2 (p sqrt(r) + sqrt((1-p)(1-rp))) = delta. With k = 1 - delta/2:
    # sqrt(r) = k -/+ sqrt((1-p)(1-k^2)/p); lo = 0 when p <= 1-k^2, hi = 1/p when p >= k^2.
    # (delta >= 2 is the whole simplex: k clamps to 0.)
    p, q = torch.exp(logp), -torch.expm1(logp)
    k = torch.clamp(1.0 - 0.5 * delta, min=0.0)
    # 1 - k^2 = delta (1 - delta/4) without cancellation, for delta < 2; 1 once k is clamped to 0 (the formula
    # would fall below 1 for 2 < delta < 4 and turn negative, NaN under the sqrt, above 4)
    one_minus_k2 = torch.where(delta >= 2.0, 1.0, delta * (1.0 - 0.25 * delta))
    m = torch.sqrt(q * one_minus_k2 / p)
    inv_p = torch.reciprocal(p)
    lo = torch.where(p <= one_minus_k2, torch.zeros_like(p), (k - m) ** 2)
    hi = torch.where(p >= k * k, inv_p, torch.minimum((k + m) ** 2, inv_p))
    return lo, hi


register_divergence(
    Divergence(
        "kl",
        _f_kl,
        "KL(pi_old || pi_new), f(u) = -log u: the paper's default; never saturates",
        fast_solver="kl",
        tabulate=True,
        limit_lo_at_one=lambda d: math.exp(-d),
        max_delta=KL_DELTA_MAX,
    ),
    aliases=("bandkl",),
)
register_divergence(
    Divergence(
        "reverse_kl",
        _f_reverse_kl,
        "KL(pi_new || pi_old), f(u) = u log u; hi = 1/p for p >= exp(-delta), lo = 0 for p <= 1 - exp(-delta)",
        fast_solver="newton",
        derivative=_df_reverse_kl,
    )
)
register_divergence(
    Divergence(
        "tv",
        _f_tv,
        "total variation, f(u) = |u - 1| / 2: r = 1 -/+ delta / p",
        closed_form=_tv_bounds,
        limit_lo_at_one=lambda d: max(1.0 - d, 0.0),
        saturating_delta=1.0,  # p |r - 1| <= 1: from delta = 1 on lo = 0 and hi = 1/p for every p
    ),
    aliases=("bandtv",),
)
register_divergence(
    Divergence(
        "chi2",
        _f_chi2,
        "Pearson chi^2, f(u) = (u - 1)^2: r = 1 -/+ sqrt(delta (1 - p) / p)",
        closed_form=_chi2_bounds,
        limit_lo_at_one=lambda d: 1.0,
    ),
    aliases=("bandchi2", "pearson_chi2"),
)
register_divergence(
    Divergence(
        "neyman_chi2",
        _f_neyman,
        "Neyman chi^2, f(u) = (u - 1)^2 / u: quadratic closed form; never saturates",
        closed_form=_neyman_bounds,
        limit_lo_at_one=lambda d: 1.0 / (1.0 + d),
    )
)
register_divergence(
    Divergence(
        "hellinger",
        _f_hellinger,
        "squared Hellinger, f(u) = (sqrt(u) - 1)^2: closed form with saturation at both simplex edges",
        closed_form=_hellinger_bounds,
        limit_lo_at_one=lambda d: max(1.0 - 0.5 * d, 0.0) ** 2,
        saturating_delta=2.0,  # (sqrt P - sqrt Q)^2 summed is at most 2: k = 1 - delta/2 reaches 0
    )
)
register_divergence(
    Divergence(
        "js",
        _f_js,
        "Jensen-Shannon, f(u) = [u log u - (1+u) log((1+u)/2)] / 2; saturates (JS <= log 2)",
        fast_solver="newton",
        derivative=_df_js,
        saturating_delta=math.log(2.0),  # JS <= log 2, reached at p = 1, r = 0 (disjoint supports)
    ),
    aliases=("jensen_shannon",),
)
