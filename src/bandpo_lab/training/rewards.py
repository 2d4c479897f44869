"""The run's rewards from the config's ``reward:`` section (:class:`~bandpo_lab.training.sections.RewardConfig`),
each wrapped by :func:`bandpo_lab.rewards.safe_reward_func` and tried once on the first problem before any model
loads."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from bandpo_lab.rewards import SafeRewardFunc, get_reward_func, reward_names, safe_reward_func
from bandpo_lab.rewards.registry import reward_display_name
from bandpo_lab.training.config import ConfigError, TrainConfig
from bandpo_lab.training.tasks import TASKS


def reward_list(config: TrainConfig) -> list[str]:
    """The reward names of ``config`` (the task's default without ``reward.name``); ``ConfigError`` for none with
    ``data.path``, an empty list or a repeated name."""
    name = config.reward.name
    if name is None:
        if config.data.task is None:
            raise ConfigError(
                "reward.name is required with data.path: a registered name "
                f"({', '.join(reward_names())}) or an import path such as my_pkg.rewards:score"
            )
        return [TASKS.get(config.data.task).default_reward]
    names = [name] if isinstance(name, str) else list(name)
    if not names or not all(isinstance(n, str) and n for n in names):
        raise ConfigError(f"reward.name must be a reward name or a non-empty list of them, got {name!r}")
    if len(set(names)) != len(names):
        raise ConfigError(f"reward.name lists a reward twice: {names!r}")
    return names


def _options_of(config: TrainConfig, names: list[str]) -> list[dict[str, Any]]:
    options = dict(config.reward.options)
    if len(names) == 1 and isinstance(config.reward.name, str):
        return [options]
    unknown = sorted(set(options) - set(names))
    if unknown:
        raise ConfigError(
            f"with several rewards, reward.options maps a reward's name to its options; {unknown} "
            f"is not among reward.name {names}"
        )
    out = []
    for n in names:
        value = options.get(n, {})
        if not isinstance(value, Mapping):
            raise ConfigError(f"reward.options.{n} must be a mapping of that reward's options, got {value!r}")
        out.append(dict(value))
    return out


def build_rewards(config: TrainConfig, weights: Sequence[float] | None = None) -> list[SafeRewardFunc]:
    """The config's rewards, wrapped; ``weights`` (TRL's ``reward_weights``) must have one entry per reward
    (``ConfigError`` otherwise, or for an unknown name, an import path that does not resolve, an unknown option)."""
    names = reward_list(config)
    if weights is not None and len(weights) != len(names):
        raise ConfigError(
            f"reward_weights={list(weights)!r} has {len(weights)} weight(s) for {len(names)} reward(s) {names}: "
            "give one weight per reward"
        )
    rewards = []
    several = not (len(names) == 1 and isinstance(config.reward.name, str))
    for name, options in zip(names, _options_of(config, names)):
        try:  # the name first, then its options: each error names its own key
            fn = get_reward_func(name)
            display = reward_display_name(name)
        except ValueError as err:
            raise ConfigError(f"reward.name: {err}") from err
        try:
            fn = get_reward_func(name, **options) if options else fn
        except ValueError as err:
            raise ConfigError(f"reward.options{f'.{name}' if several else ''}: {err}") from err
        safe = safe_reward_func(fn, config.reward.failure_reward)
        safe.__name__ = display  # TRL logs rewards/<name>/mean
        rewards.append(safe)
    displays = [r.__name__ for r in rewards]
    if len(set(displays)) != len(displays):
        raise ConfigError(
            f"two rewards would log under the same name: {displays}; rename one of the functions"
        )
    return rewards


def answer_columns(rewards: Sequence[SafeRewardFunc]) -> set[str]:
    """The dataset columns the rewards read the ground truth from (their ``answer_key``)."""
    return {key for r in rewards if (key := getattr(r.fn, "answer_key", None))}


def check_rewards_on(rewards: Sequence[SafeRewardFunc], problem: Mapping[str, Any]) -> None:
    """Call each reward once, as TRL will, on two completions of ``problem`` (an empty one and its ground truth):
    one that fails on both, or returns anything but one finite number (or ``None``) per completion, is a
    ``ConfigError`` naming the reward and what it raised or returned."""
    prompt = problem["prompt"]
    answer = problem.get("answer")
    texts = ["", str(answer[0] if isinstance(answer, list) else answer) if answer is not None else "0"]
    chat = not isinstance(prompt, str)
    completions = [[{"role": "assistant", "content": t}] for t in texts] if chat else texts
    columns = {k: [v, v] for k, v in problem.items() if k != "prompt"}
    for reward in rewards:
        try:
            out = reward.fn(prompts=[prompt, prompt], completions=completions, **columns)
        except Exception:
            out = None  # maybe one bad completion: the wrapper below scores them one by one
        if out is not None:
            try:
                reward._checked(out, len(texts))
            except ValueError as err:
                raise ConfigError(
                    f"{err} (a trial call with two completions of the first training problem returned {out!r})"[
                        :400
                    ]
                ) from err
            continue
        trial = safe_reward_func(reward.fn, reward.failure_reward, max_logged=0)
        trial.__name__ = reward.__name__
        try:
            trial(prompts=[prompt, prompt], completions=completions, **columns)
        except RuntimeError as err:
            raise ConfigError(
                f"reward {reward.__name__!r} failed on a trial call with two completions of the first training "
                f"problem ({texts!r}): {trial.last_error}"
            ) from err
