"""Training methods: the one list of method names that ``bandpo train`` and ``bandpo compare`` accept, a clip rule
of ``bandpo.losses.CLIP_RULES`` (``BandPOTrainer``) or a TRL-native method (:data:`TRL_METHODS`, plain
``GRPOTrainer``: docs/trl.md, "TRL-native baselines"); :data:`METHODS` dispatches on the kind, never on the name.
Imports neither torch nor TRL until a trainer or config class is asked for.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from bandpo.integrations.trl_spec import TRL_NAMES
from bandpo.registry import Registry, did_you_mean
from bandpo.validation import is_finite_real

RULE_PARAM_KEYS = tuple(k for k, v in TRL_NAMES.items() if v not in ("rule", "total_steps", "diagnostics"))
"""Trainer keys that parametrise the clip rule or its radius schedule (``clip_rule_kwargs``, ``band_*``)."""

SCHEDULE_PARAMS: dict[str, str] = {
    name: key for key, name in TRL_NAMES.items() if name in ("delta_schedule", "delta_end", "delta_hold_frac")
}
"""The radius schedule's settings a compare config's ``methods[].params`` may hold beside the rule's parameters:
bandpo's name -> the trainer key (``delta_end`` -> ``band_delta_end``)."""


def split_schedule(params: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """``params`` of a clip-rule method -> ``(the rule's parameters, the schedule's settings)``, both by bandpo's
    names (:data:`SCHEDULE_PARAMS`)."""
    rule = {k: v for k, v in params.items() if k not in SCHEDULE_PARAMS}
    return rule, {k: v for k, v in params.items() if k in SCHEDULE_PARAMS}


CLIP_RULE_KEYS = ("clip_rule", *RULE_PARAM_KEYS)
"""Every trainer key of the clip-rule kind: BandPOConfig's own fields."""

METHOD_KEY = "method"
"""The config key that selects a method by name (``method: cispo``)."""


@dataclass(frozen=True)
class MethodParam:
    """A parameter of a TRL-native method: the ``GRPOConfig`` field, its default, whether a value is ``valid``,
    the range in words (``allowed``, for the message) and what the field does in this method (``meaning``)."""

    field: str
    default: float
    valid: Callable[[Any], bool]
    allowed: str
    meaning: str


@dataclass(frozen=True)
class ClipRuleMethod:
    """A clip rule of ``bandpo.losses.CLIP_RULES`` as a method: ``BandPOTrainer`` + ``BandPOConfig``."""

    name: str

    def config_class(self) -> type:
        from bandpo.integrations.trl import BandPOConfig

        return BandPOConfig

    def trainer_class(self) -> type:
        from bandpo.integrations.trl import BandPOTrainer

        return BandPOTrainer

    def check_params(self, params: Mapping[str, Any]) -> None:
        """Build the rule and its radius schedule from ``params`` (``ValueError`` / ``TypeError`` from their own
        validation, naming bandpo's names)."""
        from bandpo.losses import make_clip_rule
        from bandpo.losses.method import clip_method

        rule, schedule = split_schedule(params)
        make_clip_rule(self.name, **rule)
        if schedule:
            names = {"rule": "rule", "params": "params", **{name: name for name in SCHEDULE_PARAMS}}
            clip_method({"rule": self.name, "params": rule, **schedule}, names, where="params")

    def defaults(self, trainer: Mapping[str, Any]) -> dict[str, Any]:
        """Trainer fields the method adds to a config's own: none."""
        return {}

    def config_entries(self, params: Mapping[str, Any]) -> dict[str, Any]:
        """The training-config keys that select this method with ``params`` (the rule's and the schedule's)."""
        rule, schedule = split_schedule(params)
        return {
            "clip_rule": self.name,
            "clip_rule_kwargs": rule or None,
            **{SCHEDULE_PARAMS[name]: value for name, value in schedule.items()},
        }

    def describe(self, args: Any) -> str:
        """One line for the run's header: the rule with its parameters and a changing radius's schedule."""
        rule = args.build_clip_rule()
        schedule = args.build_radius_schedule()
        radius = "" if schedule.is_constant else f", radius {schedule.describe()}"
        return f"clip rule {rule.describe()}{radius} (BandPOTrainer)"


@dataclass(frozen=True)
class TrlNativeMethod:
    """A loss TRL ships, trained by plain ``GRPOTrainer``.

    Attributes:
        title: the name in prose, with its paper (``CISPO (MiniMax-M1)``).
        fixed: ``GRPOConfig`` fields the method sets; a config may repeat them, not change them.
        params: the ``GRPOConfig`` fields that tune it.
        ignored: ``GRPOConfig`` fields its loss does not read; setting one is an error.
    """

    name: str
    title: str
    fixed: Mapping[str, Any]
    params: tuple[MethodParam, ...] = ()
    ignored: tuple[str, ...] = ()

    def config_class(self) -> type:
        from trl import GRPOConfig

        return GRPOConfig

    def trainer_class(self) -> type:
        from trl import GRPOTrainer

        return GRPOTrainer

    def param_names(self) -> list[str]:
        return [p.field for p in self.params]

    def method_keys(self) -> tuple[str, ...]:
        return (*self.fixed, *self.param_names(), *self.ignored)

    def check_params(self, params: Mapping[str, Any], where: Callable[[str], str] = lambda key: "") -> None:
        """``ValueError`` naming the field, the value and the range for an unknown or out-of-range parameter."""
        by_field = {p.field: p for p in self.params}
        for key, value in params.items():
            spec = by_field.get(key)
            if spec is None:
                raise ValueError(
                    f"unknown parameter {key!r}{did_you_mean(key, by_field)} for method {self.name!r} ({self.title}); its parameters "
                    f"(GRPOConfig fields): {', '.join(by_field) or 'none'}"
                )
            if not spec.valid(value):
                raise ValueError(
                    f"{key}{where(key)} must be {spec.allowed} for method {self.name!r} ({spec.meaning}), got "
                    f"{value!r}"
                )

    def check_trainer(self, trainer: Mapping[str, Any], where: Callable[[str], str] = lambda key: "") -> None:
        """``ValueError`` for clip-rule fields, a fixed field changed, an ignored field set or a parameter out of
        range in a config's trainer fields; ``where(key)`` says where a key was set."""
        for key in CLIP_RULE_KEYS:
            if key in trainer:
                raise ValueError(
                    f"{key}={trainer[key]!r}{where(key)} is a clip-rule setting, but method={self.name!r} is TRL-native "
                    f"({self.title}, trained by plain GRPOTrainer) and has no clip rule: remove {key}, or choose a "
                    f"clip rule ({', '.join(METHODS.clip_rule_names())})"
                )
        for key, value in self.fixed.items():
            if key in trainer and trainer[key] != value:
                raise ValueError(
                    f"{key}={trainer[key]!r}{where(key)} conflicts with method={self.name!r}, which sets "
                    f"{key}={value!r}: remove {key}"
                )
        for key in self.ignored:
            if key in trainer:
                raise ValueError(
                    f"{key}={trainer[key]!r}{where(key)} has no effect with method={self.name!r}: TRL's {self.title} "
                    f"loss does not read it; its parameters: {', '.join(self.param_names()) or 'none'}"
                )
        self.check_params({k: trainer[k] for k in self.param_names() if k in trainer}, where)

    def defaults(self, trainer: Mapping[str, Any]) -> dict[str, Any]:
        """The ``GRPOConfig`` fields the method sets: ``fixed``, then each parameter's value or default."""
        self.check_params({k: trainer[k] for k in self.param_names() if k in trainer})
        return {**self.fixed, **{p.field: trainer.get(p.field, p.default) for p in self.params}}

    def config_entries(self, params: Mapping[str, Any]) -> dict[str, Any]:
        return {METHOD_KEY: self.name, **dict(params)}

    def describe(self, args: Any) -> str:
        values = {**self.fixed, **{p: getattr(args, p) for p in self.param_names()}}
        text = ", ".join(f"{k}={v}" for k, v in values.items())
        return f"{self.name}: {self.title}, TRL-native ({text}; plain GRPOTrainer)"


TRL_METHODS: Registry[TrlNativeMethod] = Registry("TRL-native method")
"""The TRL-native methods by name."""

_TEMPERATURE = "a finite number > 0 (TRL divides by it)"
for _method in (
    TrlNativeMethod(
        name="cispo",
        title="CISPO (MiniMax-M1)",
        fixed={"loss_type": "cispo", "importance_sampling_level": "token"},
        params=(
            MethodParam(
                "epsilon_high",
                5.0,
                lambda v: is_finite_real(v) and v >= 1,
                "a finite number >= 1",
                "the cap on the detached importance weight sg(min(r, epsilon_high)); below 1 it would shrink "
                "on-policy tokens too",
            ),
        ),
        ignored=("epsilon", "delta", "sapo_temperature_pos", "sapo_temperature_neg"),
    ),
    TrlNativeMethod(
        name="sapo",
        title="SAPO (Soft Adaptive Policy Optimization)",
        fixed={"loss_type": "sapo", "importance_sampling_level": "token"},
        params=(
            MethodParam(
                "sapo_temperature_pos",
                1.0,
                lambda v: is_finite_real(v) and v > 0,
                _TEMPERATURE,
                "the gate's temperature for tokens with A > 0",
            ),
            MethodParam(
                "sapo_temperature_neg",
                1.05,
                lambda v: is_finite_real(v) and v > 0,
                _TEMPERATURE,
                "the gate's temperature for tokens with A <= 0",
            ),
        ),
        ignored=("epsilon", "epsilon_high", "delta"),
    ),
    TrlNativeMethod(
        name="gspo",
        title="GSPO (Group Sequence Policy Optimization)",
        fixed={"importance_sampling_level": "sequence", "loss_type": "grpo"},
        params=(
            MethodParam(
                "epsilon",
                3e-4,
                lambda v: is_finite_real(v) and 0 < v < 1,
                "a finite number in (0, 1)",
                "the sequence ratio's lower clip 1 - epsilon",
            ),
            MethodParam(
                "epsilon_high",
                4e-4,
                lambda v: is_finite_real(v) and v > 0,
                "a finite number > 0",
                "the sequence ratio's upper clip 1 + epsilon_high",
            ),
        ),
        ignored=("sapo_temperature_pos", "sapo_temperature_neg"),
    ),
):
    TRL_METHODS.register(_method.name, _method)


class TrainingMethods:
    """The one list of method names: the clip rules of ``CLIP_RULES`` (read at each call) and :data:`TRL_METHODS`.
    ``get(name)`` returns a :class:`ClipRuleMethod` or a :class:`TrlNativeMethod`, which answer alike
    (``config_class()``, ``trainer_class()``, ``check_params()``, ``config_entries()``, ``describe()``)."""

    trl = TRL_METHODS

    @staticmethod
    def _clip_rules() -> Registry[Any]:
        from bandpo.losses import CLIP_RULES

        return CLIP_RULES

    def clip_rule_names(self) -> list[str]:
        return self._clip_rules().names()

    def trl_names(self) -> list[str]:
        return self.trl.names()

    def names(self) -> list[str]:
        """Every method name: the clip rules, then the TRL-native methods."""
        return [*self.clip_rule_names(), *self.trl_names()]

    def __contains__(self, name: object) -> bool:
        return name in self.trl or name in self._clip_rules()

    def is_trl_native(self, name: object) -> bool:
        return name in self.trl

    def clip_rule(self, name: str, where: str = "") -> ClipRuleMethod:
        """The clip rule called ``name``, written as ``clip_rule`` at ``where``; ``ValueError`` for a TRL-native
        method's name (saying to select it with ``method:``) or an unknown name (the closest rule, every rule and
        the TRL-native methods)."""
        if name in self.trl:
            raise ValueError(
                f"clip_rule={name!r}{where} is TRL's {self.trl.get(name).title}, a TRL-native method rather than a "
                f"clip rule: select it with method: {name} (plain GRPOTrainer, without clip-rule fields)"
            )
        try:
            return ClipRuleMethod(self._clip_rules().canonical(name))
        except ValueError as err:
            raise ValueError(
                f"clip_rule{where}: {err}; TRL-native methods (method: NAME): {', '.join(self.trl_names())}"
            ) from None

    def get(self, name: str) -> ClipRuleMethod | TrlNativeMethod:
        """The method called ``name``.

        Raises:
            ValueError: an unknown name (with the closest name and every valid one), or a name registered both as
                a clip rule and as a TRL-native method.
        """
        rules = self._clip_rules()
        if name in self.trl:
            if name in rules:
                raise ValueError(
                    f"method {name!r} is registered both as a clip rule and as a TRL-native method; rename one"
                )
            return self.trl.get(name)
        if name in rules:
            return ClipRuleMethod(rules.canonical(name))
        hint = did_you_mean(name, self.names()) if isinstance(name, str) else ""
        raise ValueError(
            f"unknown method {name!r}{hint}; clip rules: {', '.join(self.clip_rule_names())}; TRL-native methods: "
            f"{', '.join(self.trl_names())}"
        )


METHODS = TrainingMethods()
"""The registry of method names ``bandpo train`` (``clip_rule:`` / ``method:``) and ``bandpo compare`` accept."""


def switch_keys(old: str, new: str) -> set[str]:
    """Trainer keys dropped from the inherited layers when a layer switches from method ``old`` to ``new``: both
    methods' own keys and the selecting keys (unknown names count as clip rules)."""

    def keys(name: str) -> tuple[str, ...]:
        return TRL_METHODS.get(name).method_keys() if name in TRL_METHODS else CLIP_RULE_KEYS

    return {METHOD_KEY, "clip_rule", *keys(old), *keys(new)}
