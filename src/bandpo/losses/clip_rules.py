"""Clip rules: each turns old log-probabilities into per-token ratio bounds ``lo <= 1 <= hi``.

One registry (``CLIP_RULES``) holds every rule; ``make_clip_rule(name, **params)`` builds one and validates its
parameters at construction. The policy loss, the TRL and verl adapters and the CLI all dispatch through it.

| name            | bounds                                                                            |
|-----------------|-----------------------------------------------------------------------------------|
| ``grpo``        | fixed ``[1 - eps_low, 1 + eps_high]``, eps 0.2 / 0.2                              |
| ``clip_higher`` | fixed, eps 0.2 / 0.28 (DAPO)                                                      |
| ``dcpo``        | ``lo = 0.5 + 0.5 sqrt(max(1 - 4 eps_low / p, 0))``, ``hi = min(0.5 + 0.5 sqrt(1 + 4 eps_high / p), cap)`` |
| ``band``        | ``bandpo.band_bounds`` (any divergence, delta, cap, relax)                         |
| ``adaptive_band`` | Band with a per-token radius driven by the token entropy (``AdaptiveBandClip``) |
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, ClassVar

import torch
from torch import Tensor

from bandpo.core.bounds import band_bounds, resolve_divergence, resolve_method
from bandpo.core.divergences import Divergence
from bandpo.core.errors import check_cap, check_number_in, check_positive_number, check_relax
from bandpo.registry import Registry


class ClipRule:
    """Base class: ``bounds(old_log_prob, entropy=None) -> (lo, hi)``, same shape and dtype as the input."""

    name: ClassVar[str] = "base"
    needs_entropy: ClassVar[bool] = False

    def bounds(self, old_log_prob: Tensor, entropy: Tensor | None = None) -> tuple[Tensor, Tensor]:
        """Ratio bounds for tokens with old log-probabilities ``old_log_prob`` (...) float.

        ``entropy`` (...) float: the policy's per-token entropy (nats), used by entropy-driven rules only.
        """
        raise NotImplementedError

    def params(self) -> dict[str, Any]:
        """The rule's parameters, for logs and configs."""
        return dataclasses.asdict(self) if dataclasses.is_dataclass(self) else {}

    def describe(self) -> str:
        args = ", ".join(f"{k}={v}" for k, v in self.params().items())
        return f"{self.name}({args})"


CLIP_RULES: Registry[type[ClipRule]] = Registry("clip rule")


def register_clip_rule(name: str):
    """Class decorator: register a ``ClipRule`` subclass under ``name``."""

    def wrap(cls: type[ClipRule]) -> type[ClipRule]:
        cls.name = name
        CLIP_RULES.register(name, cls)
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
    """DCPO's dynamic adaptive clipping, with ``q = p_old``:

    ``lo = 0.5 + 0.5 sqrt(max(1 - 4 eps_low / q, 0))``, ``hi = min(0.5 + 0.5 sqrt(1 + 4 eps_high / q), cap)``.
    """

    eps_low: float = 0.16
    eps_high: float = 0.20
    cap: float = 10.0

    def __post_init__(self) -> None:
        check_positive_number("eps_low", self.eps_low, allow_zero=True)
        check_positive_number("eps_high", self.eps_high, allow_zero=True)
        check_cap(self.cap, allow_none=False)

    def bounds(self, old_log_prob: Tensor, entropy: Tensor | None = None) -> tuple[Tensor, Tensor]:
        cdt = torch.float64 if old_log_prob.dtype == torch.float64 else torch.float32
        inv_p = torch.exp(-old_log_prob.to(cdt))  # 1/p, inf at p = 0
        lo = 0.5 + 0.5 * torch.sqrt(torch.clamp(1.0 - 4.0 * self.eps_low * inv_p, min=0.0))
        hi = torch.clamp(0.5 + 0.5 * torch.sqrt(1.0 + 4.0 * self.eps_high * inv_p), max=self.cap)
        return lo.to(old_log_prob.dtype), hi.to(old_log_prob.dtype)


def _check_band_params(divergence: object, delta: object, cap: object) -> Divergence:
    """The parameters every Band rule shares: a registered divergence name, ``delta > 0``, ``cap >= 1`` or None."""
    if not isinstance(divergence, str):
        raise ValueError(f"divergence must be a registered name, got {divergence!r}")
    div = resolve_divergence(divergence)
    check_positive_number("delta", delta)
    check_cap(cap)
    return div


@register_clip_rule("band")
@dataclass(frozen=True)
class BandClip(ClipRule):
    """BandPO: bounds from projecting the f-divergence trust region of radius ``delta`` (``band_bounds``).

    ``relax = (eps_low, eps_high)`` takes the union with a fixed interval (the authors' ablation: it hurts).
    ``check_values`` runs ``band_bounds``' log-prob checks (a device->host sync; off in training loops).
    """

    divergence: str = "kl"
    delta: float = 0.05
    cap: float | None = 10.0
    relax: tuple[float, float] | None = None
    method: str = "auto"
    check_values: bool = False

    def __post_init__(self) -> None:
        div = _check_band_params(self.divergence, self.delta, self.cap)
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
    delta: float = 0.05
    entropy_ref: float = 1.0
    power: float = 0.5
    min_scale: float = 0.25
    max_scale: float = 4.0
    cap: float | None = 10.0
    check_values: bool = False

    def __post_init__(self) -> None:
        div = _check_band_params(self.divergence, self.delta, self.cap)
        check_positive_number("entropy_ref", self.entropy_ref)
        check_positive_number("power", self.power, allow_zero=True)
        lo = check_positive_number("min_scale", self.min_scale)
        hi = check_positive_number("max_scale", self.max_scale)
        if lo > hi:
            raise ValueError(f"min_scale must be <= max_scale, got {self.min_scale!r} > {self.max_scale!r}")
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
        raise ValueError(
            f"unknown parameter(s) {', '.join(map(repr, unknown))} for clip rule {name!r}; valid: {', '.join(fields)}"
        )
    if "relax" in params and isinstance(params["relax"], list):
        params["relax"] = tuple(params["relax"])
    return cls(**params)


def clip_rule_params(name: str) -> dict[str, Any]:
    """Parameter names of a registered rule with their defaults (for CLIs and docs)."""
    cls = CLIP_RULES.get(name)
    out: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        out[f.name] = f.default if f.default is not dataclasses.MISSING else None
    return out
