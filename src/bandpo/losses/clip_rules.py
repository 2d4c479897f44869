"""Clip rules: each turns old log-probabilities into per-token ratio bounds ``lo <= 1 <= hi``.

One registry (``CLIP_RULES``) holds every rule; ``make_clip_rule(name, **params)`` builds one and validates its
parameters at construction. The policy loss, the TRL and verl adapters and the CLI all dispatch through it. Each
rule's bounds are in its class below; all of them side by side: docs/method.md#baselines.

A rule also chooses the per-token objective (``bandpo.losses.policy_loss``): the clipped ratio with the dual clip
(every rule but DPPO's), or DPPO's truncated importance weight with a trust-region mask (``truncation_c`` not
None; the mask is ``region_masks``, by default ``r <= hi`` / ``r >= lo``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

import torch
from torch import Tensor

from bandpo.core.bounds import band_bounds, resolve_divergence, resolve_method
from bandpo.core.checks import check_cap, check_delta, check_relax
from bandpo.core.divergences import Divergence
from bandpo.registry import Registry, did_you_mean
from bandpo.validation import check_bool, check_number_above, check_number_in, check_positive_number

PAPER_DELTA = 0.05
"""The authors' trust-region radius (BandPO's default and best value): the default of every Band radius."""

PAPER_CAP = 10.0
"""The authors' cap on the upper bound: the default of Band's and DCPO's ``cap``."""


class ClipRule:
    """Base class: ``bounds(old_log_prob, entropy=None) -> (lo, hi)``, same shape and dtype as the input."""

    name: ClassVar[str] = "base"
    needs_entropy: ClassVar[bool] = False

    def bounds(self, old_log_prob: Tensor, entropy: Tensor | None = None) -> tuple[Tensor, Tensor]:
        """Ratio bounds for tokens with old log-probabilities ``old_log_prob`` (...) float.

        ``entropy`` (...) float: the policy's per-token entropy (nats), used by entropy-driven rules only.
        """
        raise NotImplementedError

    @property
    def truncation_c(self) -> float | None:
        """The truncation constant ``c`` of DPPO's objective (truncated importance weight and trust-region mask)
        when the rule uses it; ``None`` (the default): the clipped ratio with the dual clip."""
        return None

    def region_masks(
        self, log_prob: Tensor, old_log_prob: Tensor, ratio: Tensor, lo: Tensor, hi: Tensor
    ) -> tuple[Tensor, Tensor]:
        """Where the token is inside the trust region, for the truncated objective: ``(up_ok, down_ok)``.

        ``up_ok`` decides for tokens with ``A > 0`` (not moved up past the region's edge), ``down_ok`` for
        ``A <= 0``. All arguments (...) float of one dtype, detached: current and old log-probabilities,
        ``ratio = exp(clamp(log_prob - old_log_prob, -20, 20))`` and this rule's bounds; returns bool tensors.
        Default ``r <= hi`` and ``r >= lo``; DPPO's rules test their divergence in probability space instead.
        """
        return ratio <= hi, ratio >= lo

    def params(self) -> dict[str, Any]:
        """The rule's parameters, for logs and configs."""
        return dataclasses.asdict(self) if dataclasses.is_dataclass(self) else {}

    def describe(self) -> str:
        args = ", ".join(f"{k}={v}" for k, v in self.params().items())
        return f"{self.name}({args})"

    def warm(self, dtype: torch.dtype = torch.float32, device: torch.device | str = "cpu") -> None:
        """Build now what the first :meth:`bounds` call with ``dtype`` log-probs on ``device`` would build: the
        interpolation table of a scalar KL radius (``bandpo.core.solvers.cached_table``: 0.1-2 s per radius and
        compute dtype on a CPU core, 1.6 MB in float32) and its copy to the device. Later calls, and a CUDA graph
        captured after this one, then find it cached. Cheap for rules without a table (one bounds call on one
        token)."""
        one = torch.zeros(1, dtype=dtype, device=device)  # p = 1
        self.bounds(one, torch.ones_like(one) if self.needs_entropy else None)


CLIP_RULES: Registry[type[ClipRule]] = Registry("clip rule")


def register_clip_rule(name: str) -> Callable[[type[ClipRule]], type[ClipRule]]:
    """Class decorator: register a ``ClipRule`` subclass under ``name``.

    The class must be a frozen dataclass (its fields are the rule's parameters, and rules are hashed as cache
    keys); a class that is not, or a name already taken, raises before the class is changed."""

    def wrap(cls: type[ClipRule]) -> type[ClipRule]:
        # the class's own dataclass parameters, not inherited ones (a plain subclass of a rule is no dataclass)
        params = vars(cls).get("__dataclass_params__") if isinstance(cls, type) else None
        if not (params is not None and params.frozen and issubclass(cls, ClipRule)):
            raise TypeError(
                f"register_clip_rule({name!r}) needs a ClipRule subclass decorated with @dataclass(frozen=True) "
                f"(under @register_clip_rule), got {cls!r}"
            )
        CLIP_RULES.register(name, cls)
        cls.name = name
        return cls

    return wrap


@register_clip_rule("grpo")
@dataclass(frozen=True)
class FixedClip(ClipRule):
    """PPO/GRPO's fixed interval ``[1 - eps_low, 1 + eps_high]``."""

    eps_low: float = 0.2
    eps_high: float = 0.2

    def __post_init__(self) -> None:
        check_number_in("eps_low", self.eps_low, 0.0, 1.0)
        check_positive_number("eps_high", self.eps_high, allow_zero=True)

    def bounds(self, old_log_prob: Tensor, entropy: Tensor | None = None) -> tuple[Tensor, Tensor]:
        lo = torch.full_like(old_log_prob, 1.0 - self.eps_low)
        hi = torch.full_like(old_log_prob, 1.0 + self.eps_high)
        return lo, hi


@register_clip_rule("clip_higher")
@dataclass(frozen=True)
class ClipHigher(FixedClip):
    """DAPO's Clip-Higher: a fixed interval with a wider upper side (eps 0.2 / 0.28)."""

    eps_low: float = 0.2
    eps_high: float = 0.28


@register_clip_rule("dcpo")
@dataclass(frozen=True)
class DCPOClip(ClipRule):
    """DCPO's dynamic adaptive clipping, with ``p = p_old`` (``q`` in DCPO's paper; ``q`` is ``1 - p`` elsewhere in
    bandpo):

    ``lo = 0.5 + 0.5 sqrt(max(1 - 4 eps_low / p, 0))``, ``hi = min(0.5 + 0.5 sqrt(1 + 4 eps_high / p), cap)``.
    """

    eps_low: float = 0.16
    eps_high: float = 0.20
    cap: float = PAPER_CAP

    def __post_init__(self) -> None:
        check_positive_number("eps_low", self.eps_low, allow_zero=True)
        check_positive_number("eps_high", self.eps_high, allow_zero=True)
        check_cap(self.cap, allow_none=False)

    def bounds(self, old_log_prob: Tensor, entropy: Tensor | None = None) -> tuple[Tensor, Tensor]:
        cdt = torch.float64 if old_log_prob.dtype == torch.float64 else torch.float32
        inv_p = torch.exp(-old_log_prob.detach().to(cdt))  # 1/p, inf at p = 0

        def four_eps_over_p(eps: float) -> Tensor:  # 4 eps / p; exactly 0 for eps = 0 (not 0 * inf = nan)
            return 4.0 * eps * inv_p if eps > 0 else torch.zeros_like(inv_p)

        lo = 0.5 + 0.5 * torch.sqrt(torch.clamp(1.0 - four_eps_over_p(self.eps_low), min=0.0))
        hi = torch.clamp(0.5 + 0.5 * torch.sqrt(1.0 + four_eps_over_p(self.eps_high)), max=self.cap)
        return lo.to(old_log_prob.dtype), hi.to(old_log_prob.dtype)


def _check_band_params(divergence: object, delta: object, cap: object, check_values: object) -> Divergence:
    """The parameters every Band rule shares: a registered divergence name, ``delta > 0``, ``cap >= 1`` or None,
    ``check_values`` a bool (a string such as ``"false"`` would be truthy and add a host sync to every call)."""
    if not isinstance(divergence, str):
        raise ValueError(f"divergence must be a registered name, got {divergence!r}")
    div = resolve_divergence(divergence)
    check_delta("delta", delta, div)
    check_cap(cap)
    check_bool("check_values", check_values)
    return div


@register_clip_rule("band")
@dataclass(frozen=True)
class BandClip(ClipRule):
    """BandPO: bounds from projecting the f-divergence trust region of radius ``delta`` (``band_bounds``).

    ``relax = (eps_low, eps_high)`` takes the union with a fixed interval (the authors' ablation: it hurts).
    ``check_values`` runs ``band_bounds``' log-prob checks (a device->host sync; off in training loops).
    """

    divergence: str = "kl"
    delta: float = PAPER_DELTA
    cap: float | None = PAPER_CAP
    relax: tuple[float, float] | None = None
    method: str = "auto"
    check_values: bool = False

    def __post_init__(self) -> None:
        div = _check_band_params(self.divergence, self.delta, self.cap, self.check_values)
        object.__setattr__(self, "divergence", div.name)  # an alias stored as its registered name
        object.__setattr__(self, "relax", check_relax(self.relax))
        resolve_method(div, self.method, scalar_delta=True)

    def bounds(self, old_log_prob: Tensor, entropy: Tensor | None = None) -> tuple[Tensor, Tensor]:
        return band_bounds(
            old_log_prob.detach(),
            self.delta,
            self.divergence,
            cap=self.cap,
            relax=self.relax,
            method=self.method,
            check_values=self.check_values,
        )


@dataclass(frozen=True)
class _OneSidedBand(ClipRule):
    """Band on one side of the ratio, GRPO's fixed bound on the other: the rules that tell the two sides of the
    band apart (docs/method.md#baselines, "One side of the band"; Study 5, studies/study5/README.md)."""

    divergence: str = "kl"
    delta: float = PAPER_DELTA
    cap: float | None = PAPER_CAP
    method: str = "auto"
    check_values: bool = False

    def __post_init__(self) -> None:
        div = _check_band_params(self.divergence, self.delta, self.cap, self.check_values)
        object.__setattr__(self, "divergence", div.name)  # an alias stored as its registered name
        resolve_method(div, self.method, scalar_delta=True)

    def _band(self, old_log_prob: Tensor) -> tuple[Tensor, Tensor]:
        return band_bounds(
            old_log_prob.detach(),
            self.delta,
            self.divergence,
            cap=self.cap,
            method=self.method,
            check_values=self.check_values,
        )


@register_clip_rule("band_upper")
@dataclass(frozen=True)
class BandUpperClip(_OneSidedBand):
    """Band's upper bound with the fixed lower bound: ``lo = 1 - eps_low``, ``hi`` = ``band``'s (same divergence,
    radius, cap and solver). Tokens with ``A < 0`` are clipped as GRPO clips them; tokens with ``A > 0`` as Band
    does. Defaults: Band-KL at delta 0.05, cap 10, ``eps_low`` 0.2 (GRPO's)."""

    eps_low: float = 0.2

    def __post_init__(self) -> None:
        super().__post_init__()
        check_number_in("eps_low", self.eps_low, 0.0, 1.0)

    def bounds(self, old_log_prob: Tensor, entropy: Tensor | None = None) -> tuple[Tensor, Tensor]:
        _, hi = self._band(old_log_prob)
        return torch.full_like(hi, 1.0 - self.eps_low), hi


@register_clip_rule("band_lower")
@dataclass(frozen=True)
class BandLowerClip(_OneSidedBand):
    """Band's lower bound with the fixed upper bound: ``lo`` = ``band``'s, ``hi = 1 + eps_high``. Tokens with
    ``A > 0`` are clipped as GRPO clips them; tokens with ``A < 0`` as Band does. Defaults: Band-KL at delta 0.05,
    ``eps_high`` 0.2 (GRPO's); ``cap`` (Band's cap of the upper bound) changes nothing here but is kept, so that
    the two one-sided rules and ``band`` take the same settings."""

    eps_high: float = 0.2

    def __post_init__(self) -> None:
        super().__post_init__()
        check_positive_number("eps_high", self.eps_high, allow_zero=True)

    def bounds(self, old_log_prob: Tensor, entropy: Tensor | None = None) -> tuple[Tensor, Tensor]:
        lo, _ = self._band(old_log_prob)
        return lo, torch.full_like(lo, 1.0 + self.eps_high)


@register_clip_rule("adaptive_band")
@dataclass(frozen=True)
class AdaptiveBandClip(ClipRule):
    """Band with a per-token radius modulated by the policy's token entropy (the paper's future work).

    Rule, with ``H_t`` the entropy (nats) of the policy's next-token distribution at token t:

        delta_t = delta * clamp((H_t / entropy_ref) ** power, min_scale, max_scale)

    so confident tokens (low entropy) get a tighter trust region and uncertain ones a looser one; with
    ``H_t = entropy_ref`` the radius is ``delta``. ``bounds`` without an entropy tensor raises ``ValueError``
    (no silent fallback to plain Band).
    Defaults: ``entropy_ref = 1.0`` nat, ``power = 0.5``, scale in ``[0.25, 4]``.
    """

    needs_entropy: ClassVar[bool] = True

    divergence: str = "kl"
    delta: float = PAPER_DELTA
    entropy_ref: float = 1.0
    power: float = 0.5
    min_scale: float = 0.25
    max_scale: float = 4.0
    cap: float | None = PAPER_CAP
    check_values: bool = False

    def __post_init__(self) -> None:
        div = _check_band_params(self.divergence, self.delta, self.cap, self.check_values)
        object.__setattr__(self, "divergence", div.name)  # an alias stored as its registered name
        check_positive_number("entropy_ref", self.entropy_ref)
        check_positive_number("power", self.power, allow_zero=True)
        lo = check_positive_number("min_scale", self.min_scale)
        hi = check_positive_number("max_scale", self.max_scale)
        if lo > hi:
            raise ValueError(f"min_scale must be <= max_scale, got {self.min_scale!r} > {self.max_scale!r}")
        check_delta("delta * min_scale (the smallest per-token radius)", self.delta * lo, div)
        check_delta("delta * max_scale (the largest per-token radius)", self.delta * hi, div)
        resolve_method(div, "auto", scalar_delta=False)

    def radius(self, entropy: Tensor) -> Tensor:
        """Per-token ``delta_t`` (...) float32/float64 from entropies (...) float (negative values read as 0)."""
        cdt = torch.float64 if entropy.dtype == torch.float64 else torch.float32
        h = torch.clamp(entropy.detach().to(cdt), min=0.0)
        scale = torch.clamp((h / self.entropy_ref) ** self.power, self.min_scale, self.max_scale)
        return self.delta * scale

    def bounds(self, old_log_prob: Tensor, entropy: Tensor | None = None) -> tuple[Tensor, Tensor]:
        if entropy is None:
            raise ValueError(
                f"clip rule {self.name!r} needs the per-token entropy of the policy: pass entropy, a float "
                f"tensor of old_log_prob's shape {tuple(old_log_prob.shape)}, got None"
            )
        delta = self.radius(entropy)
        if delta.shape != old_log_prob.shape:
            raise ValueError(
                f"entropy of shape {tuple(entropy.shape)} must match old_log_prob's shape {tuple(old_log_prob.shape)}"
            )
        return band_bounds(
            old_log_prob.detach(), delta, self.divergence, cap=self.cap, check_values=self.check_values
        )


def _binary_kl(old_log_prob: Tensor, log_prob: Tensor, old_prob: Tensor, prob: Tensor) -> Tensor:
    """DPPO's binary ``KL(p_old || p_new)`` over {the token, the rest}, written exactly as verl 0.9.1 does (with
    its ``1e-8`` inside the log of the complement). All (...) float, ``prob = exp(log_prob)``."""
    return old_prob * (old_log_prob - log_prob) + (1 - old_prob) * torch.log(
        (1.0 - old_prob + 1e-8) / (1.0 - prob + 1e-8)
    )


@dataclass(frozen=True)
class _DPPOClip(ClipRule):
    """DPPO (Qi et al. 2026, arXiv 2602.04879) in its Binary form, as verl 0.9.1's ``dppo_tv`` / ``dppo_kl``.

    Per token, with ``w = sg(min(r, truncation_c))`` (verl's ``clip_ratio_c``; no dual clip)::

        L = -A w log pi    if the token is inside the trust region in the direction A pushes it, else 0

    The region compares the new and old probability of the sampled token against the divergence thresholds
    (``clip_divergence_high`` where ``A > 0``, ``clip_divergence_low`` where ``A <= 0``; verl's ``clip_ratio_high`` /
    ``clip_ratio_low``): see ``region_masks``. With float32 or float64 log-probs this equals verl's functions bit
    for bit; with bfloat16 ones it computes in float32 where verl computes in bfloat16.

    ``bounds`` gives the same region as ratio bounds: Band's bounds of the same binary divergence, radius the
    threshold, no cap, default solver (for the metrics and for TRL, which clips ratios). The mask and those bounds
    agree except at the log-ratio clamp at +-20, within rounding of the edge (including the simplex edge
    ``hi = 1/p``), for KL at verl's ``1e-8`` (which moves both edges up by a factor ``1 + 1e-8`` in ``r``) and at
    the KL table's error (``method="auto"``: up to 1e-7 relative in float64, 8e-6 in float32); docs/method.md's
    "Relatives: DPPO" counts each class (``scripts/dppo_vs_band.py``).

    Defaults: the DPPO authors' thresholds, ``truncation_c`` 20 (verl 0.9.1's code fallback); the defaults of
    verl's ``ActorConfig`` and of the authors' script, with their sources: docs/method.md#relatives-dppo.
    """

    divergence: ClassVar[str] = "tv"

    clip_divergence_low: float = 0.15
    clip_divergence_high: float = 0.15
    truncation_c: float = 20.0  # type: ignore[assignment]  # a field here, the base class's property elsewhere

    def __post_init__(self) -> None:
        div = resolve_divergence(self.divergence)  # the thresholds are radii of Band's bounds of it
        check_delta("clip_divergence_low", self.clip_divergence_low, div)
        check_delta("clip_divergence_high", self.clip_divergence_high, div)
        object.__setattr__(self, "truncation_c", check_number_above("truncation_c", self.truncation_c, 1.0))

    def bounds(self, old_log_prob: Tensor, entropy: Tensor | None = None) -> tuple[Tensor, Tensor]:
        old = old_log_prob.detach()
        lo, hi = band_bounds(old, self.clip_divergence_high, self.divergence, cap=None, check_values=False)
        if self.clip_divergence_low != self.clip_divergence_high:
            lo, _ = band_bounds(old, self.clip_divergence_low, self.divergence, cap=None, check_values=False)
        return lo, hi


@register_clip_rule("dppo_tv")
@dataclass(frozen=True)
class DPPOTVClip(_DPPOClip):
    """DPPO-Binary-TV: ``up_ok = p_new - p_old <= clip_divergence_high``, ``down_ok = p_new - p_old >=
    -clip_divergence_low``; thresholds 0.15 / 0.15. Its ratio bounds are Band-TV's at radius the threshold without
    cap: ``1 -+ delta / p``, clamped to ``[0, 1/p]``."""

    divergence: ClassVar[str] = "tv"

    def region_masks(
        self, log_prob: Tensor, old_log_prob: Tensor, ratio: Tensor, lo: Tensor, hi: Tensor
    ) -> tuple[Tensor, Tensor]:
        change = torch.exp(log_prob) - torch.exp(old_log_prob)
        return change <= self.clip_divergence_high, change >= -self.clip_divergence_low


@register_clip_rule("dppo_kl")
@dataclass(frozen=True)
class DPPOKLClip(_DPPOClip):
    """DPPO-Binary-KL: ``up_ok = KL_bin(p_old || p_new) <= clip_divergence_high or p_new <= p_old``, ``down_ok =
    KL_bin <= clip_divergence_low or p_new >= p_old``; thresholds 0.05 / 0.05. ``KL_bin`` is :func:`_binary_kl`
    (verl's, with its 1e-8). Its ratio bounds are Band-KL's (``KL(pi_old || pi_new)``, the same direction) at radius
    the threshold without cap."""

    divergence: ClassVar[str] = "kl"

    clip_divergence_low: float = 0.05
    clip_divergence_high: float = 0.05

    def __post_init__(self) -> None:
        """Checks the parameters, then builds the float32 KL tables of both thresholds (:meth:`warm`; one when
        they are equal): their 0.1-2 s per new threshold is paid here, at configuration time, and not inside the
        first loss. The float64 tables (float64 log-probs) are built on first use."""
        super().__post_init__()
        self.warm()

    def region_masks(
        self, log_prob: Tensor, old_log_prob: Tensor, ratio: Tensor, lo: Tensor, hi: Tensor
    ) -> tuple[Tensor, Tensor]:
        prob, old_prob = torch.exp(log_prob), torch.exp(old_log_prob)
        kl = _binary_kl(old_log_prob, log_prob, old_prob, prob)
        up_ok = (kl <= self.clip_divergence_high) | (prob <= old_prob)
        down_ok = (kl <= self.clip_divergence_low) | (prob >= old_prob)
        return up_ok, down_ok


def make_clip_rule(name: str | ClipRule = "band", **params: Any) -> ClipRule:
    """Build a registered clip rule by name, validating its parameters (unknown ones list the valid ones)."""
    if isinstance(name, ClipRule):
        if params:
            raise ValueError("pass either a ClipRule instance or a name with parameters, not both")
        return name
    cls = CLIP_RULES.get(name)
    fields = [f.name for f in dataclasses.fields(cls)]
    unknown = sorted(set(params) - set(fields))
    if unknown:
        shown = ", ".join(repr(u) + did_you_mean(u, fields) for u in unknown)
        raise ValueError(f"unknown parameter(s) {shown} for clip rule {name!r}; valid: {', '.join(fields)}")
    return cls(**params)


def clip_rule_params(name: str) -> dict[str, Any]:
    """Parameter names of a registered rule with their defaults (for CLIs and docs)."""
    cls = CLIP_RULES.get(name)
    out: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        out[f.name] = f.default if f.default is not dataclasses.MISSING else None
    return out
