"""The checks of a training config's clip-rule fields, made when :class:`~bandpo_lab.training.config.TrainConfig`
is built (the rules: docs/trl.md, ``bandpo train``)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from bandpo.integrations.trl_spec import (
    REFUSED_LOSS_TYPES,
    TRL_RULE_SHORTCUTS,
    check_trl_delta,
    loss_type_problem,
)
from bandpo_lab.config import ConfigError
from bandpo_lab.training.methods import METHODS, TRL_METHODS

DEFAULT_CLIP_RULE = "band"
"""The clip rule of a config that selects no method: ``BandPOConfig``'s default."""


def check_clip_rule_fields(trainer: Mapping[str, Any], where: Any) -> None:
    """A registered rule, its parameters set once, and a loss type / importance-sampling level ``BandPOTrainer``
    can bound (TRL's other values name the TRL-native method that runs them)."""
    rule = trainer.get("clip_rule")
    if rule is not None:
        try:
            METHODS.clip_rule(rule, where("clip_rule"))
        except ValueError as err:
            raise ConfigError(str(err)) from err

    _check_rule_params(trainer, rule if rule is not None else DEFAULT_CLIP_RULE, where)

    def runs_it(key: str, value: Any) -> list[str]:
        return [n for n in METHODS.trl_names() if TRL_METHODS.get(n).fixed.get(key) == value]

    loss_type = trainer.get("loss_type")
    if loss_type is not None:
        methods = runs_it("loss_type", loss_type)
        if methods:
            how = f"select it with method: {methods[0]} (plain GRPOTrainer) instead of a clip rule"
        elif loss_type in REFUSED_LOSS_TYPES:
            how = f"{REFUSED_LOSS_TYPES[loss_type]}; bandpo runs TRL's {', '.join(METHODS.trl_names())} as methods"
        else:
            how = None
        problem = loss_type_problem(loss_type, where("loss_type"), how)
        if problem is not None:
            raise ConfigError(problem)
    level = trainer.get("importance_sampling_level")
    if level is not None and level != "token":
        methods = runs_it("importance_sampling_level", level)
        how = f"; for {methods[0].upper()} set method: {methods[0]}" if methods else ""
        raise ConfigError(
            f"importance_sampling_level={level!r}{where('importance_sampling_level')} cannot be used with a clip "
            f"rule, which bounds each token's ratio from its old probability{how}. With a clip rule: 'token'"
        )


def _check_rule_params(trainer: Mapping[str, Any], rule: str, where: Any) -> None:
    """TRL's ``delta`` at or below 1, or a ``band_*`` shortcut beside the ``clip_rule_kwargs`` entry it sets: refused."""
    try:
        check_trl_delta(trainer.get("delta"), rule, where("delta"))
    except ValueError as err:
        raise ConfigError(str(err)) from None
    kwargs = trainer.get("clip_rule_kwargs")
    if isinstance(kwargs, str):  # BandPOConfig's JSON form; a bad string is BandPOConfig's to report
        try:
            kwargs = json.loads(kwargs)
        except json.JSONDecodeError:
            return
    if not isinstance(kwargs, Mapping):
        return
    for shortcut, param in TRL_RULE_SHORTCUTS.items():
        value = trainer.get(shortcut)
        if value is None or param not in kwargs:
            continue
        key = f"clip_rule_kwargs.{param}"
        raise ConfigError(
            f"{key}={kwargs[param]!r}{where(key)} and {shortcut}={value!r}{where(shortcut)} both set the clip "
            f"rule's {param!r}: set it once, with {shortcut} (e.g. {shortcut}={kwargs[param]!r}), or with "
            f"{shortcut}=null and {key}"
        )
