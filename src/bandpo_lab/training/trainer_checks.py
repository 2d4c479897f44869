"""Checks of TRL / transformers settings that those libraries refuse only once the models are loaded
(``temperature=0``, ``learning_rate=-1``, ...): value ranges (:data:`VALUE_RULES`), ``report_to``, the optimizer,
scheduler and generation config built without a model, and a run that would train no step.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from typing import Any

from bandpo.validation import is_finite_real, is_int_in
from bandpo_lab.runtime.seeds import SEED_RANGE, is_seed
from bandpo_lab.training.config import ConfigError

Predicate = Callable[[Any], bool]


def _integer(low: int) -> Predicate:
    return lambda v: is_int_in(v, low)


def _number(ok: Callable[[float], bool]) -> Predicate:
    return lambda v: is_finite_real(v) and ok(v)


def _or_null(ok: Predicate) -> Predicate:
    return lambda v: v is None or ok(v)


def _one_of(*choices: str) -> Predicate:
    return lambda v: isinstance(v, str) and v in choices


MAX_STEPS = 10**9
"""The largest step count a config may give: a billion optimizer steps is years of training; more is a typo."""


def _interval(v: Any) -> bool:
    """A fraction of the run in (0, 1), or a whole number of steps in [1, :data:`MAX_STEPS`]."""
    return is_finite_real(v) and (0 < v < 1 or (v == int(v) and 1 <= v <= MAX_STEPS))


_INTERVAL = f"a number of steps: an integer in [1, {MAX_STEPS}], or in (0, 1) a fraction of the run"

SCALE_REWARDS = ("group", "batch", "none")
"""TRL 1.16's ``scale_rewards`` as text (TRL refuses ``"true"`` only at the first step)."""

MULTI_OBJECTIVE_AGGREGATIONS = ("sum_then_normalize", "normalize_then_sum")
"""TRL 1.16's ``multi_objective_aggregation``."""


VALUE_RULES: tuple[tuple[str, Predicate, str], ...] = (
    ("per_device_train_batch_size", _integer(1), "an integer >= 1"),
    ("gradient_accumulation_steps", _integer(1), "an integer >= 1"),
    ("steps_per_generation", _or_null(_integer(1)), "an integer >= 1 or null"),
    ("generation_batch_size", _or_null(_integer(1)), "an integer >= 1 or null"),
    ("num_iterations", _integer(1), "an integer >= 1"),
    ("max_completion_length", _or_null(_integer(1)), "an integer >= 1"),
    (
        "max_steps",
        lambda v: is_int_in(v, 1, MAX_STEPS) or is_int_in(v, -1, -1),
        f"an integer in [1, {MAX_STEPS}], or -1 to train num_train_epochs epochs (0 trains no step)",
    ),
    ("save_steps", _interval, f"{_INTERVAL} (0 saves no checkpoint: set save_strategy: 'no')"),
    ("logging_steps", _interval, f"{_INTERVAL} (0 logs nothing: set logging_strategy: 'no')"),
    ("eval_steps", _or_null(_interval), f"{_INTERVAL}, or null for logging_steps"),
    ("num_train_epochs", _number(lambda v: v > 0), "a finite number > 0"),
    ("learning_rate", _number(lambda v: v > 0), "a finite number > 0 (0 would update nothing)"),
    ("warmup_steps", _number(lambda v: v >= 0), "a number >= 0 (below 1: a fraction of the steps)"),
    ("weight_decay", _number(lambda v: v >= 0), "a finite number >= 0"),
    ("adam_beta1", _number(lambda v: 0 <= v < 1), "a number in [0, 1)"),
    ("adam_beta2", _number(lambda v: 0 <= v < 1), "a number in [0, 1)"),
    ("adam_epsilon", _number(lambda v: v >= 0), "a finite number >= 0"),
    ("max_grad_norm", _or_null(_number(lambda v: v >= 0)), "a finite number >= 0 (0: no clipping)"),
    ("beta", _number(lambda v: v >= 0), "a finite number >= 0"),
    ("temperature", _number(lambda v: v > 0), "a finite number > 0 (TRL divides the logits by it)"),
    ("top_p", _number(lambda v: 0 < v <= 1), "a number in (0, 1]"),
    ("top_k", _or_null(_integer(0)), "an integer >= 0 (0: no top-k filtering)"),
    ("min_p", _or_null(_number(lambda v: 0 <= v <= 1)), "a number in [0, 1] or null"),
    ("repetition_penalty", _number(lambda v: v > 0), "a finite number > 0 (1: no penalty)"),
    ("seed", is_seed, SEED_RANGE),
    ("dataloader_num_workers", _integer(0), "an integer >= 0 (0: load in the main process)"),
    ("ref_model_sync_steps", _integer(1), "an integer >= 1 (with sync_ref_model: the steps between syncs)"),
    ("scale_rewards", _one_of(*SCALE_REWARDS), f"one of {', '.join(SCALE_REWARDS)}"),
    (
        "multi_objective_aggregation",
        _one_of(*MULTI_OBJECTIVE_AGGREGATIONS),
        f"one of {', '.join(MULTI_OBJECTIVE_AGGREGATIONS)}",
    ),
)
"""``(key, valid, what is allowed)`` for the settings whose range TRL or transformers enforce late or never."""

_STRATEGY_OF = {
    "save_steps": "save_strategy",
    "logging_steps": "logging_strategy",
    "eval_steps": "eval_strategy",
}
"""The interval settings read only when their strategy is ``steps``."""

_READ_WITH = {"ref_model_sync_steps": "sync_ref_model"}
"""Settings read only when the flag they name is true."""


def check_trainer_values(get: Callable[[str], Any]) -> None:
    """Check the :data:`VALUE_RULES` keys that the run reads and ``report_to``; ``get(key)`` gives the value the
    run would use (config or default).

    Raises:
        ConfigError: ``<key> must be <allowed>, got <value>`` for the first value out of range.
    """
    for key, valid, allowed in VALUE_RULES:
        if key == "num_train_epochs" and get("max_steps") != -1:
            continue
        if key in _STRATEGY_OF and _plain(get(_STRATEGY_OF[key])) != "steps":
            continue
        if key in _READ_WITH and not get(_READ_WITH[key]):
            continue
        value = get(key)
        if not valid(value):
            raise ConfigError(f"{key} must be {allowed}, got {value!r}")
    if get("sync_ref_model") and get("beta") == 0:  # TRL refuses it once the model has loaded
        raise ConfigError(
            "sync_ref_model=true syncs the reference model, which beta=0.0 does not build (no KL term): set "
            "beta > 0, or sync_ref_model=false"
        )
    check_report_to(get("report_to"))
    for key in MAPPING_SETTINGS:
        check_mapping(key, get(key))


MAPPING_SETTINGS = (
    "generation_kwargs",
    "chat_template_kwargs",
    "model_init_kwargs",
    "lr_scheduler_kwargs",
    "gradient_checkpointing_kwargs",
)
"""TRL's and transformers' settings that hold keyword arguments: a mapping, or a JSON object as a string
(transformers reads it); a scalar was kept as a string and failed at the first step (``generation_kwargs=5``:
``'str' object is not a mapping``). ``deepspeed``, ``fsdp_config`` and ``accelerator_config`` also take a file's
path, and are left to transformers."""


def check_mapping(key: str, value: Any) -> None:
    """``value`` is ``None``, a mapping, or a string holding a JSON object (``ConfigError`` naming ``key``)."""
    if value is None or isinstance(value, Mapping):
        return
    if isinstance(value, str):
        try:
            if isinstance(json.loads(value), dict):
                return
        except ValueError:
            pass
    raise ConfigError(
        f"{key} must be a mapping of keyword arguments ({key}: {{name: value}}, or {key}='{{\"name\": value}}' "
        f"as JSON), got {value!r}"
    )


_ENUM_ERROR = re.compile(r"^(?P<value>.*) is not a valid \w+, please select one of \[(?P<choices>.*)\]$")


def enum_error(message: str, settings: Mapping[str, Any]) -> str:
    """transformers' ``foo is not a valid SchedulerType, please select one of ['linear', ...]`` (a ``ValueError``
    of its settings' classes) as ``lr_scheduler_type must be one of linear, ..., got 'foo'``, naming the key of
    ``settings`` that holds the value; any other ``message`` as it is."""
    match = _ENUM_ERROR.match(message)
    keys = [k for k, v in settings.items() if match and isinstance(v, str) and v == match["value"]]
    if match is None or not keys:
        return message
    choices = ", ".join(c.strip().strip("'") for c in match["choices"].split(","))
    return f"{keys[0]} must be one of {choices}, got {match['value']!r}"


def check_report_to(value: Any) -> None:
    """``report_to`` must be null, ``none``, ``all``, or one or a list of transformers' reporting integrations
    whose library is installed (``ConfigError`` naming them otherwise: transformers refused a missing one with a
    traceback when the trainer was built)."""
    from transformers.integrations import INTEGRATION_TO_CALLBACK, get_available_reporting_integrations

    names = [value] if isinstance(value, str) else value
    if value is None or names in (["none"], ["all"]):
        return
    if isinstance(names, list) and all(isinstance(n, str) and n in INTEGRATION_TO_CALLBACK for n in names):
        available = get_available_reporting_integrations()
        missing = [n for n in names if n not in available]
        if missing:
            raise ConfigError(
                f"report_to={value!r} names {', '.join(map(repr, missing))}, whose library is not installed here: "
                f"install it, or report to {', '.join(available) or 'none'} (installed) or none"
            )
        return
    raise ConfigError(
        f"report_to must be none, all, or one or a list of transformers' reporting integrations "
        f"({', '.join(INTEGRATION_TO_CALLBACK)}), got {value!r}"
    )


def _plain(value: Any) -> Any:
    """An enum setting as the string a config holds."""
    return getattr(value, "value", value)


def _refused(what: str, err: Exception) -> ConfigError:
    text = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
    return ConfigError(f"{what}: {text}")


def check_trainer_components(args: Any) -> None:
    """Build the optimizer (torch's only), the learning-rate scheduler and the generation config of ``args`` as
    transformers and TRL will, without a model (``ConfigError`` naming the settings and what the library said)."""
    import torch
    from transformers import GenerationConfig, Trainer
    from transformers.optimization import get_scheduler

    try:
        optimizer_cls, kwargs = Trainer.get_optimizer_cls_and_kwargs(args)
    except (ValueError, TypeError, ImportError, KeyError) as err:
        raise _refused(f"optim={_plain(args.optim)!r} (with optim_args={args.optim_args!r})", err) from err
    if getattr(optimizer_cls, "__module__", "").startswith("torch."):
        kwargs = {k: v for k, v in kwargs.items() if k not in ("fused", "foreach")}  # device choices
        try:
            optimizer = optimizer_cls([torch.nn.Parameter(torch.zeros(1))], **kwargs)
        except (ValueError, TypeError, RuntimeError) as err:
            raise _refused(
                f"the optimizer {_plain(args.optim)} refuses learning_rate={args.learning_rate}, adam_beta1="
                f"{args.adam_beta1}, adam_beta2={args.adam_beta2}, adam_epsilon={args.adam_epsilon} "
                f"or optim_args={args.optim_args!r}",
                err,
            ) from err
        steps = args.max_steps if args.max_steps > 0 else 1000
        try:
            get_scheduler(
                args.lr_scheduler_type,
                optimizer,
                num_warmup_steps=args.get_warmup_steps(steps),
                num_training_steps=steps,
                scheduler_specific_kwargs=args.lr_scheduler_kwargs,
            )
        except (ValueError, TypeError, KeyError) as err:
            raise _refused(
                f"lr_scheduler_type={_plain(args.lr_scheduler_type)!r} "
                f"with lr_scheduler_kwargs={args.lr_scheduler_kwargs!r}",
                err,
            ) from err
    if not args.use_vllm:  # vLLM takes its own sampling parameters
        generation = {
            "max_new_tokens": args.max_completion_length,
            "do_sample": True,
            "temperature": args.temperature,
            "top_p": args.top_p,
            "top_k": args.top_k,
            "min_p": args.min_p,
            "repetition_penalty": args.repetition_penalty,
            "cache_implementation": args.cache_implementation,
            **(args.generation_kwargs or {}),
        }
        try:
            GenerationConfig(**generation).validate(strict=True)
        except (ValueError, TypeError) as err:
            raise _refused(
                "the generation settings (max_completion_length, temperature, top_p, top_k, min_p, "
                "repetition_penalty, generation_kwargs)",
                err,
            ) from err


def check_training_length(args: Any, n_prompts: int) -> None:
    """Refuse a run whose data hold less than one generation round of prompts: TRL drops an incomplete round,
    so it would train no step (``ConfigError`` naming both numbers)."""
    per_round = args.generation_batch_size // args.num_generations
    if n_prompts < per_round:
        raise ConfigError(
            f"the training data hold {n_prompts} prompts, but one optimizer step needs a generation round of "
            f"{per_round} prompts (generation_batch_size {args.generation_batch_size} completions / "
            f"num_generations {args.num_generations}); TRL drops an incomplete round, so this run would train no "
            "step. Add prompts (data.max_samples, the task's n_train), or lower per_device_train_batch_size or "
            "steps_per_generation"
        )
