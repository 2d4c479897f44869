"""``BandPOConfig``: TRL's ``GRPOConfig`` plus the clip method (``bandpo.losses.method.ClipMethod``) that replaces GRPO's
fixed clip, validated before any model loads; and the check of the installed TRL version, which runs on import.
``bandpo.integrations.trl`` (the trainer) re-exports both; docs/trl.md describes the settings.
"""

from __future__ import annotations

import json
import os
import warnings
from dataclasses import dataclass, field
from typing import Any

from bandpo._optional import install_hint

try:
    import trl
    from packaging.specifiers import SpecifierSet
    from packaging.version import InvalidVersion, Version
    from trl import GRPOConfig
except ImportError as err:  # pragma: no cover - exercised only without trl
    raise ImportError(
        f"bandpo.integrations.trl needs TRL 1.16.x: {install_hint('trl')} (or pip install 'trl>=1.16,<1.17')"
    ) from err

from bandpo.integrations.trl_spec import (
    SUPPORTED_TRL,
    TRL_NAMES,
    check_loss_type,
    check_trl_delta,
    silence_old_checkpointing_names,
    trl_delta_rule_problem,
)
from bandpo.losses.clip_rules import CLIP_RULES, ClipRule
from bandpo.losses.diagnostics import DIAGNOSTICS
from bandpo.losses.method import ClipMethod, clip_method
from bandpo.losses.schedule import RADIUS_SCHEDULES, RadiusSchedule

__all__ = ["ALLOW_UNSUPPORTED_TRL_ENV", "BandPOConfig", "check_trl_version"]

ALLOW_UNSUPPORTED_TRL_ENV = "BANDPO_ALLOW_UNSUPPORTED_TRL"


def check_trl_version(version: str | None = None) -> None:
    """Raise ``ImportError`` if ``version`` (default: the installed TRL) is outside ``SUPPORTED_TRL``.

    With the environment variable ``BANDPO_ALLOW_UNSUPPORTED_TRL=1`` it warns instead; the trainer still
    raises at the first step if TRL's loss path no longer calls the hook this adapter relies on.
    """
    version = trl.__version__ if version is None else version
    try:
        parsed = Version(version)
    except InvalidVersion:  # e.g. "unknown": counts as unsupported
        parsed = None
    if parsed is not None and SpecifierSet(SUPPORTED_TRL).contains(parsed, prereleases=True):
        return
    msg = (
        f"bandpo.integrations.trl supports trl{SUPPORTED_TRL}, found trl {version}: BandPOTrainer injects its "
        "bounds into GRPOTrainer._compute_loss, whose internals change between TRL releases. Install "
        f"'trl{SUPPORTED_TRL}', or set {ALLOW_UNSUPPORTED_TRL_ENV}=1 to try this version anyway."
    )
    if os.environ.get(ALLOW_UNSUPPORTED_TRL_ENV, "").lower() in ("1", "true", "yes"):
        warnings.warn(msg, stacklevel=2)
        return
    raise ImportError(msg)


check_trl_version()


@dataclass
class BandPOConfig(GRPOConfig):
    """``GRPOConfig`` plus the clip rule that replaces GRPO's fixed ``[1 - epsilon, 1 + epsilon_high]``, validated
    in ``__post_init__`` (each field's ``help`` says what it takes; docs/trl.md, docs/names.md).

    The rule is built by name from ``bandpo.CLIP_RULES`` with ``clip_rule_kwargs`` (unknown names raise with the
    valid ones); the ``band_*`` fields are shortcuts for its entries and apply to any rule with a parameter of that
    name (``None``: the rule's default; no cap is ``clip_rule_kwargs={"cap": None}``). ``band_delta`` is Band's
    radius, not TRL's ``delta`` (INTELLECT-2's clamp of the ratio), which still works as in TRL when it is a finite
    number > 1 and is refused at or below 1. TRL's ``epsilon`` / ``epsilon_high`` must keep their defaults: a
    fixed interval is ``clip_rule="grpo"`` (or ``"clip_higher"``) with ``clip_rule_kwargs={"eps_low": ...}``.
    """

    clip_rule: str = field(
        default="band",
        metadata={
            "help": "Clip rule that sets the per-token ratio bounds; a name registered in bandpo.CLIP_RULES "
            f"({', '.join(CLIP_RULES.names())}, or one registered later)."
        },
    )
    clip_rule_kwargs: dict[str, Any] | str | None = field(
        default=None,
        metadata={
            "help": "Parameters of the clip rule, as a dict or a JSON string, e.g. '{\"delta\": 0.05}'."
        },
    )
    band_divergence: str | None = field(
        default=None,
        metadata={"help": "Band's f-divergence (kl, tv, chi2, ...); None keeps the rule's default (kl)."},
    )
    band_delta: float | None = field(
        default=None,
        metadata={"help": "Band's trust-region radius delta > 0; None keeps the rule's default (0.05)."},
    )
    band_cap: float | None = field(
        default=None,
        metadata={"help": "Cap (>= 1) on Band's upper ratio bound; None keeps the rule's default (10)."},
    )
    band_relax: list[float] | None = field(
        default=None,
        metadata={"help": "Two numbers eps_low eps_high: union of Band with [1 - eps_low, 1 + eps_high]."},
    )
    band_delta_schedule: str = field(
        default="constant",
        metadata={
            "help": f"Schedule of Band's radius over the run ({', '.join(RADIUS_SCHEDULES.names())}): from the "
            "rule's delta to band_delta_end."
        },
    )
    band_delta_end: float | None = field(
        default=None,
        metadata={
            "help": "Band's radius at the end of the run (> 0); needed by every schedule but constant."
        },
    )
    band_delta_hold_frac: float | None = field(
        default=None,
        metadata={
            "help": "hold_then_linear: share of the run at the start radius, in [0, 1) (default 0.25)."
        },
    )
    diagnostics: str = field(
        default="full",
        metadata={
            "help": f"Clipping diagnostics logged next to TRL's ({', '.join(DIAGNOSTICS.names())}): full (every "
            "clip/, band/ and policy/ metric), basic (clip fractions, policy/ppo_kl and policy/entropy), none (TRL's "
            "own and band/delta only)."
        },
    )

    def __post_init__(self) -> None:
        # Our checks first: they are cheap and need nothing from TrainingArguments' device setup.
        self._validate_bandpo_fields()
        with silence_old_checkpointing_names():  # GRPOConfig's own gradient_checkpointing=True default
            super().__post_init__()

    def _validate_bandpo_fields(self) -> None:
        check_loss_type(self.loss_type)
        if self.importance_sampling_level != "token":
            raise ValueError(
                f"importance_sampling_level={self.importance_sampling_level!r} is not supported: clip rules bound "
                "the per-token ratio pi(a|s) / pi_old(a|s) using the token's old probability, and a sequence-level "
                "ratio (GSPO) has no token probability. Allowed: 'token'"
            )
        if self.epsilon != 0.2 or self.epsilon_high is not None:
            raise ValueError(
                f"epsilon={self.epsilon!r} / epsilon_high={self.epsilon_high!r} are TRL's fixed clip range, which "
                "BandPOConfig replaces by clip_rule: leave them at their defaults (0.2 / None). For a fixed "
                "interval use clip_rule='grpo' with clip_rule_kwargs={'eps_low': ..., 'eps_high': ...}; for Band's "
                "union with one, band_relax=[eps_low, eps_high]"
            )
        if isinstance(self.clip_rule_kwargs, str):
            try:
                self.clip_rule_kwargs = json.loads(self.clip_rule_kwargs)
            except json.JSONDecodeError as err:
                raise ValueError(
                    f"clip_rule_kwargs must be a dict or a JSON object string, got {self.clip_rule_kwargs!r} ({err})"
                ) from err
        if self.clip_rule_kwargs is not None and not isinstance(self.clip_rule_kwargs, dict):
            raise ValueError(
                f"clip_rule_kwargs must be a dict or a JSON object string, got {self.clip_rule_kwargs!r}"
            )
        if self.band_relax is not None:
            self.band_relax = list(self.band_relax)
        method = self.clip_method()
        self.diagnostics = method.diagnostics
        check_trl_delta(self.delta, method.rule)
        problem = trl_delta_rule_problem(self.delta, method.clip_rule)
        if problem is not None:
            raise ValueError(problem)

    def clip_method(self) -> ClipMethod:
        """The clip method these fields describe (``bandpo.integrations.trl_spec.TRL_NAMES`` translates them), over
        ``max_steps`` when it is set (``> 0``); a trainer sets the run's length when training starts.

        Raises:
            ValueError: one line naming the field (``band_delta``, ``band_delta_schedule``, ...), the value and what
                is allowed.
        """
        settings = {key: getattr(self, key) for key in TRL_NAMES}
        settings["max_steps"] = self.max_steps if self.max_steps > 0 else None
        return clip_method(settings, TRL_NAMES, where="clip rule configuration")

    def build_clip_rule(self) -> ClipRule:
        """The configured ``ClipRule`` (built through the registry, cached per parameter set)."""
        return self.clip_method().clip_rule

    def build_radius_schedule(self, rule: ClipRule | None = None) -> RadiusSchedule:
        """The radius schedule of the configured rule (``rule``: unused, that rule), over ``max_steps`` when it is
        set (``> 0``); a trainer sets the run's length when training starts (``RadiusSchedule.for_run``)."""
        return self.clip_method().schedule

    @property
    def clipping_can_bind(self) -> bool:
        """False when TRL makes every update on-policy, so the ratio is exactly 1 and no clip rule can bind.

        Mirrors ``GRPOTrainer._generate_and_score_completions``: TRL tracks old log-probs only when
        ``gradient_accumulation_steps % (steps_per_generation * num_iterations) != 0``; otherwise each generation
        batch is consumed within one optimizer step by the policy that generated it.
        """
        generate_every = self.steps_per_generation * self.num_iterations
        return self.gradient_accumulation_steps % generate_every != 0

    def on_policy_note(self) -> str | None:
        """Where :attr:`clipping_can_bind` is false, the one-line note that says so and how to make clipping bind
        (``BandPOTrainer`` warns it, ``bandpo train --dry-run`` prints it); ``None`` otherwise."""
        if self.clipping_can_bind:
            return None
        with_vllm_old = self.use_vllm and self.vllm_importance_sampling_correction
        ratio = (
            "the ratio pi / pi_old differs from 1 only by the rounding of two forward passes of the same weights (TRL "
            "computes old log-probs for vLLM's importance sampling correction), so the clip rule "
            f"{self.build_clip_rule().describe()} binds on that noise alone, not on a change of policy"
            if with_vllm_old
            else f"the ratio pi / pi_old is exactly 1, so the clip rule {self.build_clip_rule().describe()} never "
            "binds and training equals unclipped GRPO"
        )
        return (
            f"Every update is on-policy (num_iterations={self.num_iterations}, "
            f"steps_per_generation={self.steps_per_generation}, gradient_accumulation_steps="
            f"{self.gradient_accumulation_steps}): {ratio}. Clipping binds "
            "when gradient_accumulation_steps is not a multiple of steps_per_generation * num_iterations, e.g. "
            "steps_per_generation > gradient_accumulation_steps (several optimizer steps per generation batch, the "
            "authors use 4) or num_iterations > 1."
        )
