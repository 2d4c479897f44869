"""BandPO in SkyRL: every clip rule as a SkyRL policy loss, selected by ``trainer.algorithm.policy_loss_type``
(docs/skyrl.md).

SkyRL (``skyrl`` 0.4.0) dispatches the actor's policy loss by name through its ``PolicyLossRegistry``. This module
registers one :class:`SkyRLPolicyLoss` per clip rule (:func:`policy_loss_names`: ``bandpo`` and ``bandpo_<rule>``;
not ``adaptive_band``: SkyRL passes a policy loss no entropy). Per token the loss is ``bandpo.policy_loss``'s
objective (``per_token_policy_loss``), then SkyRL's own off-policy correction and ``reduce_loss`` (the masked sum:
the trainer has already divided the advantages by the normaliser of ``loss_reduction``, and the objective is
positively homogeneous in ``A``, so every reduction works). :class:`BandPOAlgorithmConfig` adds the section
``trainer.algorithm.bandpo`` (``skyrl_section``), checked when the config is built, before Ray starts.
``trainer.override_entrypoint=bandpo.integrations.skyrl`` runs :func:`main`: register, parse, validate, start Ray
(which sends the registry to the workers) and train with :class:`BandPOTrainer`, which sends each step's radius of
the schedule to the policy workers (``bandpo.step_delta``, SkyRL gives a policy loss no step).

SkyRL 0.4.0 needs Python >= 3.12. This module imports without SkyRL; the SkyRL-facing names (:data:`SKYRL_API`) are
built on first access and raise :class:`SkyRLUnavailableError`, one line, where SkyRL cannot be imported.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import sys
from collections.abc import Callable, Mapping
from typing import Any

import torch
from torch import Tensor

from bandpo._optional import MissingDependencyError
from bandpo.integrations.skyrl_section import (
    _SECTION,
    ANCHORS,
    SKYRL_NAMES,
    _check_section,
    _LossFields,
    _section,
    _section_values,
    _step_rule,
    clip_method_for,
    clip_rule_for,
    rule_params,
    schedule_for,
)
from bandpo.losses.clip_rules import CLIP_RULES
from bandpo.losses.inputs import is_dual_clip_c
from bandpo.losses.method import LOSS_NAME, RULE_PREFIX, entropy_rule, loss_names
from bandpo.losses.policy_loss import per_token_policy_loss
from bandpo.losses.terms import framework_metrics
from bandpo.registry import closest

__all__ = [
    "ANCHORS",
    "LOSS_NAME",
    "RULE_PREFIX",
    "SKYRL_API",
    "SKYRL_METRIC_NAMES",
    "SKYRL_NAMES",
    "SKYRL_VERSION",
    "SkyRLPolicyLoss",
    "SkyRLUnavailableError",
    "clip_method_for",
    "clip_rule_for",
    "policy_loss_names",
    "require_skyrl",
    "rule_params",
    "schedule_for",
    "unknown_loss_note",
]  # and, built on first access with SkyRL: SKYRL_API

#: The SkyRL release this adapter is written and tested against (``make test-skyrl`` pins it).
SKYRL_VERSION = "0.4.0"
#: SkyRL's metric names for the standard PPO diagnostics, mapped to ``bandpo.clip_metrics`` names.
SKYRL_METRIC_NAMES: dict[str, str] = {"clip_ratio": "clip/frac"}
#: The names built on first access, which need SkyRL (module ``__getattr__``).
SKYRL_API = (
    "BandPOLossConfig",
    "BandPOAlgorithmConfig",
    "BandPOTrainerConfig",
    "BandPOSkyRLConfig",
    "register",
    "main",
    "validate_config",
    "BandPOTrainer",
    "BandPOExp",
)


class SkyRLUnavailableError(MissingDependencyError):
    """SkyRL cannot be imported here (Python < 3.12, or skyrl not installed); the message says what to do."""


def require_skyrl() -> None:
    """Raise :class:`SkyRLUnavailableError` (one line: why, and how to get an environment with SkyRL) unless
    SkyRL's policy-loss registry and config import."""
    build = (
        "build its environment with `make test-skyrl` (a Python 3.12 .venv-skyrl) or pip install '.[skyrl]' in "
        "bandpo's clone under Python >= 3.12"
    )
    if sys.version_info < (3, 12):
        version = ".".join(map(str, sys.version_info[:3]))
        raise SkyRLUnavailableError(
            f"bandpo.integrations.skyrl: SkyRL {SKYRL_VERSION} needs Python >= 3.12, this is Python {version}; {build}"
        )
    try:
        importlib.import_module("skyrl.backends.skyrl_train.utils.ppo_utils")
        importlib.import_module("skyrl.train.config")
    except ImportError as err:
        raise SkyRLUnavailableError(
            f"bandpo.integrations.skyrl needs skyrl {SKYRL_VERSION}, whose import failed ({err}); {build}"
        ) from err


def policy_loss_names() -> dict[str, str]:
    """SkyRL policy-loss name -> bandpo clip rule, for every registered rule SkyRL can run: ``bandpo`` -> ``band``
    and ``bandpo_<rule>`` -> ``<rule>`` (rules that need the per-token entropy are left out: SkyRL does not pass
    it to policy losses)."""
    return loss_names()


def unknown_loss_note(name: object) -> str | None:
    """For a policy-loss name SkyRL does not know: bandpo's names, if ``name`` looks meant as one of them
    (``bandpo...``, a clip rule's name, or a near miss); else ``None``."""
    ours = policy_loss_names()
    text = str(name)
    by_rule = {rule: name for name, rule in ours.items()}
    guess = by_rule.get(text) or closest(text, ours) or closest(text.lower(), ours)
    if guess is None and not text.lower().startswith("band"):
        return None
    hint = f" (did you mean {guess!r}?)" if guess is not None else ""
    return (
        f"bandpo's policy losses{hint}: {', '.join(ours)}; they are registered by "
        "trainer.override_entrypoint=bandpo.integrations.skyrl (or bandpo.integrations.skyrl.register())"
    )


# ---- the policy loss -----------------------------------------------------------------------------------------


class SkyRLPolicyLoss:
    """One bandpo clip rule as a SkyRL policy loss: ``(loss, metrics) = self(log_probs, old_log_probs,
    advantages, config, loss_mask, rollout_logprobs)``, SkyRL's contract.

    An instance pickles as its class (by reference) and two strings, so SkyRL's registry actor can ship it to every
    Ray worker (``sync_registries``); the rule is rebuilt from the config of each call (cached per parameter set).

    Args:
        name: the SkyRL policy-loss name (``bandpo``, ``bandpo_dcpo``, ...).
        rule: the bandpo clip rule it runs (``band``, ``dcpo``, ...).
    """

    def __init__(self, name: str, rule: str) -> None:
        CLIP_RULES.canonical(rule)  # an unknown rule lists the valid names
        self.name = name
        self.rule = rule
        self.__name__ = self.__qualname__ = f"compute_policy_loss_{name}"

    def __repr__(self) -> str:
        return f"SkyRLPolicyLoss(name={self.name!r}, rule={self.rule!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, SkyRLPolicyLoss) and (self.name, self.rule) == (other.name, other.rule)

    def __hash__(self) -> int:
        return hash((self.name, self.rule))

    def __call__(
        self,
        log_probs: Tensor,
        old_log_probs: Tensor,
        advantages: Tensor,
        config: Any,
        loss_mask: Tensor | None = None,
        rollout_logprobs: Tensor | None = None,
    ) -> tuple[Tensor, dict[str, float]]:
        """SkyRL's policy-loss call.

        Args:
            log_probs: (B, T) float (any float dtype), log pi_theta of the sampled tokens (differentiable).
            old_log_probs: (B, T) float, log pi_old as SkyRL recomputed it (the anchor with ``anchor=old``).
            advantages: (B, T) float, already divided by the normaliser of ``loss_reduction``.
            config: SkyRL's ``AlgorithmConfig`` (``trainer.algorithm``): ``clip_ratio_c``, ``eps_clip_low`` /
                ``eps_clip_high``, ``off_policy_correction`` and, for :class:`BandPOAlgorithmConfig`, the section
                ``bandpo`` (its defaults without it).
            loss_mask: (B, T) 0/1 float or ``None`` (all tokens), the tokens that count.
            rollout_logprobs: (B, T) float or ``None``, the inference engine's log-probs: the anchor with
                ``anchor=rollout`` (``old_log_probs`` when absent) and the input of SkyRL's off-policy correction.

        Returns:
            ``(loss, metrics)``: the () float masked sum of the per-token loss (in the compute dtype, at least
            float32), and Python-float metrics (module docstring).
        """
        require_skyrl()  # one line on Python 3.11 or without skyrl, not a ModuleNotFoundError
        from skyrl.backends.skyrl_train.utils.off_policy_correction_utils import apply_off_policy_correction
        from skyrl.backends.skyrl_train.utils.ppo_utils import reduce_loss

        section = _section(config)
        method = clip_method_for(self.rule, config, section)
        if section["step_delta"] is None and not method.schedule.is_constant:
            # the radius of the step reaches the workers only from BandPOTrainer: without it the schedule stood still
            raise ValueError(
                f"trainer.algorithm.bandpo.delta_schedule={method.schedule.kind!r} needs each step's radius, which "
                "bandpo.integrations.skyrl's BandPOTrainer sends to the policy workers (bandpo.step_delta) and this "
                "trainer did not: train with BandPOTrainer (main() does), or set delta_schedule=constant"
            )
        rule = _step_rule(method, section)
        anchor = old_log_probs
        if section["anchor"] == "rollout" and rollout_logprobs is not None:
            anchor = rollout_logprobs
        mask = torch.ones_like(log_probs, dtype=torch.bool) if loss_mask is None else loss_mask
        # the dual clip (SkyRL's clip_ratio_c) belongs to the clipped objective; DPPO's truncated one has its own c
        dual = section["dual_clip"] and rule.truncation_c is None
        clip_ratio_c = float(getattr(config, "clip_ratio_c", 3.0)) if dual else None
        terms = per_token_policy_loss(
            log_probs, anchor, advantages, mask, rule, clip_ratio_c=clip_ratio_c, rollout_is_weights=None
        )
        loss, mask_after, off_policy_metrics = apply_off_policy_correction(
            terms.loss, old_log_probs, rollout_logprobs, mask, config.off_policy_correction
        )
        loss = reduce_loss(loss, mask_after)
        # SkyRL reduces the names ending _min / _max by min / max over micro-batches and ranks
        out = framework_metrics(terms, SKYRL_METRIC_NAMES, method.diagnostics, rule, extremes_reduced=True)
        out.update({k: float(v) for k, v in off_policy_metrics.items()})
        return loss, out


# ---- the SkyRL-facing API: built on first access (module __getattr__), needs SkyRL ------------------------------


def _check_loss_type(name: object) -> str | None:
    """The clip rule of policy-loss name ``name`` if it is one of bandpo's, ``None`` for any other name (SkyRL's
    to check); a ``bandpo``-prefixed name that is not one of bandpo's raises (one line, with the valid names)."""
    ours = policy_loss_names()
    if name in ours:
        return ours[name]
    if not (isinstance(name, str) and name.startswith(LOSS_NAME)):
        return None
    valid = ", ".join(ours)
    rule = entropy_rule(name)
    if rule is not None:
        raise ValueError(
            f"trainer.algorithm.policy_loss_type {name!r}: clip rule {rule!r} needs the per-token entropy of the "
            f"policy, which SkyRL {SKYRL_VERSION} does not pass to policy losses; bandpo's SkyRL losses: {valid}"
        )
    guess = closest(name, ours)
    hint = f" (did you mean {guess!r}?)" if guess is not None else ""
    raise ValueError(
        f"trainer.algorithm.policy_loss_type {name!r} is not one of bandpo's policy losses{hint}; valid: {valid}"
    )


def _loss_config_post_init(self: Any) -> None:
    """BandPOLossConfig's check: the section's fields, and Band's clip method (divergence, delta, cap, method,
    the radius schedule, the diagnostics level) whatever the policy loss."""
    values = _section_values(self)
    _check_section(values)
    # rule_kwargs belong to the selected rule (BandPOAlgorithmConfig checks them); Band's own fields here
    clip_method_for("band", None, {**values, "rule_kwargs": {}})


def _algorithm_config_post_init(self: Any) -> None:
    """BandPOAlgorithmConfig's check: the section (a mapping becomes a BandPOLossConfig), the policy-loss name,
    the selected rule's parameters and, with the dual clip, ``clip_ratio_c > 1``."""
    parent = getattr(super(_API["BandPOAlgorithmConfig"], self), "__post_init__", None)
    if parent is not None:
        parent()
    if isinstance(self.bandpo, Mapping):
        _check_section(self.bandpo)
        self.bandpo = _API["BandPOLossConfig"](**self.bandpo)
    rule = _check_loss_type(self.policy_loss_type)
    if rule is None:
        return
    clip_method_for(rule, self)  # the rule's parameters and its radius schedule
    if self.bandpo.dual_clip and not is_dual_clip_c(self.clip_ratio_c):
        raise ValueError(
            f"trainer.algorithm.clip_ratio_c must be a number > 1 for bandpo's dual clip, got {self.clip_ratio_c!r} "
            f"(or set {_SECTION}.dual_clip=false)"
        )


def _register(*, overwrite: bool = False) -> list[str]:
    """Put one :class:`SkyRLPolicyLoss` per name of :func:`policy_loss_names` into SkyRL's ``PolicyLossRegistry``;
    idempotent. Call it before ``initialize_ray`` (which sends the registry to the Ray workers); :func:`main` does.

    A name that SkyRL already maps to something else is left alone unless ``overwrite=True``.

    Returns:
        The names that map to this module's losses afterwards.

    Raises:
        ValueError: a name is taken by another function and ``overwrite`` is false (the others are registered).
    """
    from skyrl.backends.skyrl_train.utils.ppo_utils import PolicyLossRegistry

    available = set(PolicyLossRegistry.list_available())
    conflicts = []
    for name, rule in policy_loss_names().items():
        loss = SkyRLPolicyLoss(name, rule)
        if name in available:
            existing = PolicyLossRegistry.get(name)
            mine = type(existing).__module__ == __name__ and type(existing).__name__ == "SkyRLPolicyLoss"
            if mine and getattr(existing, "rule", None) == rule:
                continue
            if not (mine or overwrite):
                conflicts.append(f"{name!r} (taken by {existing!r})")
                continue
            PolicyLossRegistry.unregister(name)
        PolicyLossRegistry.register(name, loss)
    if conflicts:
        raise ValueError(
            f"SkyRL already registers policy loss(es) {', '.join(conflicts)}; "
            "call bandpo.integrations.skyrl.register(overwrite=True) to replace them"
        )
    return [name for name in policy_loss_names() if name in PolicyLossRegistry.list_available()]


def _validate_config(cfg: Any) -> None:
    """SkyRL's own ``validate_cfg(cfg)``; where it refuses an unknown ``policy_loss_type`` that looks meant as one
    of bandpo's, its error carries a note listing them (:func:`unknown_loss_note`)."""
    from skyrl.train.utils import validate_cfg

    try:
        validate_cfg(cfg)
    except (AssertionError, ValueError) as err:
        name = cfg.trainer.algorithm.policy_loss_type
        note = unknown_loss_note(name) if f"invalid policy_loss_type: {name}" in str(err) else None
        if note is not None:
            err.add_note(note)
        raise


class _PolicyLossConfig:
    """SkyRL's ``WorkerDispatch`` with ``loss_fn_config`` added to the policy's ``forward_backward`` calls (the
    workers merge it into their ``trainer.algorithm`` for that call); every other attribute is the dispatch's."""

    def __init__(self, dispatch: Any, loss_fn_config: dict[str, Any]) -> None:
        self._dispatch = dispatch
        self._loss_fn_config = loss_fn_config

    def __getattr__(self, name: str) -> Any:
        return getattr(self._dispatch, name)

    def _with_config(self, model: str, kwargs: dict[str, Any]) -> dict[str, Any]:
        if model == "policy" and kwargs.get("loss_fn_config") is None:
            kwargs["loss_fn_config"] = self._loss_fn_config
        return kwargs

    def forward_backward(self, model: str, data: Any, **kwargs: Any) -> Any:
        return self._dispatch.forward_backward(model, data, **self._with_config(model, kwargs))

    def forward_backward_from_staged(self, model: str, chunk_refs: Any, **kwargs: Any) -> Any:
        return self._dispatch.forward_backward_from_staged(
            model, chunk_refs, **self._with_config(model, kwargs)
        )


def _train_critic_and_policy(self: Any, data: Any) -> Any:
    """BandPOTrainer's training step: SkyRL's own, with the radius of this step (``schedule.value(global_step)``
    over ``total_training_steps``) sent to the policy workers as ``bandpo.step_delta``. SkyRL's ``global_step``
    counts training steps from 1 and is restored from a checkpoint on resume, so the radius after a resume is
    the one the step implies."""
    from skyrl.train.trainer import RayPPOTrainer

    algorithm = self.cfg.trainer.algorithm
    rule = _check_loss_type(algorithm.policy_loss_type)
    schedule = None if rule is None else schedule_for(rule, algorithm, self.total_training_steps)
    if schedule is None or schedule.is_constant:
        return RayPPOTrainer.train_critic_and_policy(self, data)
    dispatch = self.dispatch
    self.dispatch = _PolicyLossConfig(dispatch, {"bandpo": {"step_delta": schedule.value(self.global_step)}})
    try:
        return RayPPOTrainer.train_critic_and_policy(self, data)
    finally:
        self.dispatch = dispatch


def _get_trainer(self: Any, cfg: Any, tracker: Any, tokenizer: Any, *args: Any, **kwargs: Any) -> Any:
    """BandPOExp's trainer: a BandPOTrainer with SkyRL's own arguments."""
    return _trainer_api()["BandPOTrainer"](
        cfg=cfg, tracker=tracker, tokenizer=tokenizer, **dict(zip(_TRAINER_ARGS, args)), **kwargs
    )


_TRAINER_ARGS = ("train_dataset", "eval_dataset", "inference_engine_client", "generator", "colocate_pg")


def _run_experiment(cfg: Any) -> None:
    """In SkyRL's entrypoint Ray task: the experiment with bandpo's trainer (what main_base's
    ``skyrl_entrypoint`` does with ``BasePPOExp``)."""
    _trainer_api()["BandPOExp"](cfg).run()


_TRAINER_API: dict[str, Any] = {}


def _trainer_api() -> dict[str, Any]:
    """``BandPOTrainer`` (SkyRL's ``RayPPOTrainer`` with the radius schedule) and ``BandPOExp`` (SkyRL's
    ``BasePPOExp`` building it), built once; they import SkyRL's trainer stack."""
    if _TRAINER_API:
        return _TRAINER_API
    require_skyrl()
    from skyrl.train.entrypoints.main_base import BasePPOExp
    from skyrl.train.trainer import RayPPOTrainer

    trainer = type(
        "BandPOTrainer",
        (RayPPOTrainer,),
        {
            "__module__": __name__,
            "__doc__": "SkyRL's RayPPOTrainer that sends the radius schedule's value of each step to the policy "
            "workers (trainer.algorithm.bandpo.delta_schedule); otherwise SkyRL's own.",
            "train_critic_and_policy": _train_critic_and_policy,
        },
    )
    exp = type(
        "BandPOExp",
        (BasePPOExp,),
        {
            "__module__": __name__,
            "__doc__": "SkyRL's BasePPOExp whose trainer is a BandPOTrainer.",
            "get_trainer": _get_trainer,
        },
    )
    _TRAINER_API.update(BandPOTrainer=trainer, BandPOExp=exp)
    return _TRAINER_API


def _main(argv: list[str] | None = None) -> None:
    """The entrypoint ``trainer.override_entrypoint=bandpo.integrations.skyrl`` runs (``main_base`` imports this
    module and calls ``main()``): register the losses, parse ``argv`` (default ``sys.argv[1:]``, without the
    ``trainer.override_entrypoint=`` flag) with :class:`BandPOSkyRLConfig`, validate, start Ray (which syncs the
    registries to the workers) and run SkyRL's entrypoint task with :class:`BandPOExp` (SkyRL's ``BasePPOExp``
    with :class:`BandPOTrainer`: synchronous training, the radius schedule applied)."""
    import ray
    from skyrl.train.utils.utils import initialize_ray

    args = sys.argv[1:] if argv is None else list(argv)
    args = [arg for arg in args if not arg.startswith("trainer.override_entrypoint=")]
    _register()
    cfg = _API["BandPOSkyRLConfig"].from_cli_overrides(args)
    _validate_config(cfg)
    initialize_ray(cfg)
    ray.get(_entrypoint_task().remote(cfg))


@functools.lru_cache(maxsize=1)
def _entrypoint_task() -> Any:
    """:func:`_run_experiment` as a Ray task with one CPU, like main_base's ``skyrl_entrypoint`` (the training
    loop does not run on the head node's driver)."""
    import ray

    return ray.remote(num_cpus=1)(_run_experiment)


_API: dict[str, Any] = {}


def _build_skyrl_api() -> dict[str, Any]:
    """Import SkyRL (or raise :class:`SkyRLUnavailableError`) and build the names of :data:`SKYRL_API` once."""
    if _API:
        return _API
    require_skyrl()
    from skyrl.train.config.config import AlgorithmConfig, BaseConfig, SkyRLTrainConfig, TrainerConfig

    def make(
        name: str, bases: tuple[type, ...], fields: list[tuple[str, type, Any]], doc: str, **ns: Any
    ) -> type:
        # Real types in the fields (not strings): SkyRL's build_nested_dataclass builds nested sections by type.
        return dataclasses.make_dataclass(
            name, fields, bases=bases, namespace={"__doc__": doc, **ns}, module=__name__
        )

    loss_cls = make(
        "BandPOLossConfig",
        (_LossFields, BaseConfig),
        [],
        "The section ``trainer.algorithm.bandpo``: BandPO's parameters (fields of ``_LossFields``), checked at "
        "construction (one line naming the field and the value).",
        __post_init__=_loss_config_post_init,
    )
    algorithm_cls = make(
        "BandPOAlgorithmConfig",
        (AlgorithmConfig,),
        [
            ("policy_loss_type", str, dataclasses.field(default=LOSS_NAME)),
            ("bandpo", loss_cls, dataclasses.field(default_factory=loss_cls)),
        ],
        "SkyRL's ``AlgorithmConfig`` with the section ``bandpo`` (``BandPOLossConfig``) and ``policy_loss_type`` "
        "``bandpo`` by default. Checked at construction: the section, a ``bandpo``-prefixed policy-loss name that "
        "is not one of bandpo's, the selected rule's parameters, ``clip_ratio_c > 1`` with the dual clip.",
        __post_init__=_algorithm_config_post_init,
    )
    trainer_cls = make(
        "BandPOTrainerConfig",
        (TrainerConfig,),
        [("algorithm", algorithm_cls, dataclasses.field(default_factory=algorithm_cls))],
        "SkyRL's ``TrainerConfig`` whose ``algorithm`` is a ``BandPOAlgorithmConfig``.",
    )
    root_cls = make(
        "BandPOSkyRLConfig",
        (SkyRLTrainConfig,),
        [("trainer", trainer_cls, dataclasses.field(default_factory=trainer_cls))],
        "SkyRL's root ``SkyRLTrainConfig`` whose ``trainer.algorithm`` is a ``BandPOAlgorithmConfig`` (what "
        "``make_config(algorithm_cls=BandPOAlgorithmConfig)`` builds, under an importable name).",
    )
    functions: dict[str, Callable[..., Any]] = {
        "register": _register,
        "main": _main,
        "validate_config": _validate_config,
    }
    for public, fn in functions.items():
        fn.__name__ = fn.__qualname__ = public
    _API.update(
        BandPOLossConfig=loss_cls,
        BandPOAlgorithmConfig=algorithm_cls,
        BandPOTrainerConfig=trainer_cls,
        BandPOSkyRLConfig=root_cls,
        **functions,
    )
    return _API


def __getattr__(name: str) -> Any:
    """The names of :data:`SKYRL_API`, built on first access; :class:`SkyRLUnavailableError` without SkyRL."""
    if name in SKYRL_API:
        api = _trainer_api() if name in ("BandPOTrainer", "BandPOExp") else _build_skyrl_api()
        globals().update(api)
        return api[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *SKYRL_API})


if __name__ == "__main__":  # python -m bandpo.integrations.skyrl <SkyRL overrides>
    from bandpo.integrations.skyrl import main as _entry

    _entry()
