"""Built-in tasks for ``bandpo train`` (``data.task: <name>``): the problems, the default reward and, for
``countdown``, the task's own warm-started tiny model; ``arith`` has no model of its own (set ``model.path``).
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bandpo.registry import Registry
from bandpo_lab.config import ConfigError, build_dataclass
from bandpo_lab.rewards import REWARDS, register_reward
from bandpo_lab.tasks.arith import ArithConfig, make_arith_splits
from bandpo_lab.tasks.countdown import CountdownConfig, countdown_reward_func, make_splits

CACHE_ENV = "BANDPO_CACHE_DIR"


def default_cache_dir() -> Path:
    """Where built-in task models are cached: ``$BANDPO_CACHE_DIR``, else ``~/.cache/bandpo``."""
    env = os.environ.get(CACHE_ENV)
    return Path(env).expanduser() if env else Path.home() / ".cache" / "bandpo"


@dataclass(frozen=True)
class TaskSpec:
    """One built-in task.

    Attributes:
        options_type: the dataclass of ``data.task_options``.
        make_splits: ``options`` -> the problems of each of ``splits``, dicts with at least ``prompt`` and ``answer``.
        default_reward: the reward of a config without ``reward.name``.
        build_model: ``(options, model.warm_start, cache_dir, progress)`` -> the task model's directory;
            ``cached_model`` returns it when already built (else ``None``), ``check_model_options`` checks
            ``model.warm_start`` early.
        max_new_tokens: the answer length ``bandpo eval`` samples without ``--max-new-tokens`` (``None``: the
            model's generation config).
    """

    name: str
    options_type: type
    make_splits: Callable[[Any], tuple[list[dict[str, Any]], ...]]
    default_reward: str
    splits: tuple[str, ...] = ("train", "test")
    build_model: Callable[[Any, Mapping[str, Any], Path, bool], Path] | None = None
    cached_model: Callable[[Any, Mapping[str, Any], Path], Path | None] | None = None
    check_model_options: Callable[[Mapping[str, Any]], None] | None = None
    max_new_tokens: int | None = None

    def options(self, options: Mapping[str, Any], name: str = "data.task_options") -> Any:
        """The task's options object (``ValueError`` on a bad key or value, naming the key under ``name``)."""
        return build_dataclass(self.options_type, options, name)

    def build_split(self, options: Any, split: str) -> list[dict[str, Any]]:
        """The problems of ``split`` for the options object ``options``."""
        return dict(zip(self.splits, self.make_splits(options)))[split]


TASKS: Registry[TaskSpec] = Registry("task")
"""Task name -> :class:`TaskSpec`; ``data.task`` selects one."""


def _warm_start_config(options: CountdownConfig, model_options: Mapping[str, Any]) -> Any:
    """The ``WarmStartConfig`` of ``model.warm_start``; a value it refuses is named with its key there
    (``model.warm_start.n_layers must be ...``), as a wrong type or an unknown key already is."""
    import dataclasses

    from bandpo_lab.tasks.tiny_model import WarmStartConfig

    try:
        return build_dataclass(WarmStartConfig, model_options, "model.warm_start", task=options)
    except ConfigError:
        raise
    except (
        ValueError
    ) as err:  # WarmStartConfig's own checks: "n_layers must be ...", "hidden_size / n_heads ..."
        message = str(err)
        name = message.partition(" ")[0]
        fields = {f.name for f in dataclasses.fields(WarmStartConfig)}
        raise ConfigError(
            f"model.warm_start.{message}" if name in fields else f"model.warm_start: {message}"
        ) from None


def _countdown_model(
    options: CountdownConfig, model_options: Mapping[str, Any], cache_dir: Path, progress: bool
) -> Path:
    from bandpo_lab.tasks.tiny_model import warm_start

    return warm_start(cache_dir, _warm_start_config(options, model_options), progress=progress)


def _countdown_cached(
    options: CountdownConfig, model_options: Mapping[str, Any], cache_dir: Path
) -> Path | None:
    """The cached warm start for these options (``warm_start``'s cache layout), or ``None``."""
    target = Path(cache_dir) / f"countdown-warm-{_warm_start_config(options, model_options).cache_key()}"
    return target if (target / "warm_start.json").is_file() else None


def _check_countdown_model_options(model_options: Mapping[str, Any]) -> None:
    _warm_start_config(CountdownConfig(), model_options)


if "countdown" not in REWARDS:  # run as __main__, the module executes twice (see _main)
    register_reward("countdown", countdown_reward_func)

ARITH_ANSWER_TOKENS = 16
"""arith's answer length: a short sentence ending in the number."""

for _spec in (
    TaskSpec(
        name="countdown",
        options_type=CountdownConfig,
        make_splits=make_splits,
        default_reward="countdown",
        build_model=_countdown_model,
        cached_model=_countdown_cached,
        check_model_options=_check_countdown_model_options,
    ),
    TaskSpec(
        name="arith",
        options_type=ArithConfig,
        make_splits=make_arith_splits,
        default_reward="last_number",
        max_new_tokens=ARITH_ANSWER_TOKENS,
    ),
):
    TASKS.register(_spec.name, _spec)


_DISTRIBUTED_ENV = (
    "RANK",
    "LOCAL_RANK",
    "WORLD_SIZE",
    "LOCAL_WORLD_SIZE",
    "GROUP_RANK",
    "ROLE_RANK",
    "ROLE_WORLD_SIZE",
    "MASTER_ADDR",
    "MASTER_PORT",
    "TORCHELASTIC_RUN_ID",
)


def build_task_model(
    name: str,
    options: Mapping[str, Any],
    model_options: Mapping[str, Any],
    cache_dir: Path,
    progress: bool = True,
) -> Path:
    """Task ``name``'s model directory: the cached one, or one built now in a child process
    (``python -m bandpo_lab.training.tasks``) without the launcher's distributed environment, so that its training
    shares no accelerate state or process group with a data-parallel run. ``RuntimeError`` if the child fails."""
    spec = TASKS.get(name)
    if spec.build_model is None:
        raise ValueError(f"task {name!r} has no built-in model")
    task_options = spec.options(options)
    if spec.cached_model is not None:
        cached = spec.cached_model(task_options, model_options, Path(cache_dir))
        if cached is not None:
            return cached
    env = {
        k: v for k, v in os.environ.items() if k not in _DISTRIBUTED_ENV and not k.startswith("ACCELERATE_")
    }
    payload = json.dumps(
        {
            "task": name,
            "options": dict(options),
            "model_options": dict(model_options),
            "cache_dir": str(cache_dir),
            "progress": progress,
        }
    )
    proc = subprocess.run(
        [sys.executable, "-m", "bandpo_lab.training.tasks", payload],
        env=env,
        stdout=subprocess.PIPE,
        text=True,
    )
    lines = proc.stdout.strip().splitlines()
    if proc.returncode != 0 or not lines:
        raise RuntimeError(f"building the model of task {name!r} failed (exit code {proc.returncode})")
    for line in lines[:-1]:
        print(line)
    return Path(lines[-1])


def _main(argv: list[str]) -> int:
    """Child-process entry of :func:`build_task_model`: prints the model directory on the last line."""
    from bandpo_lab.training.tasks import (
        TASKS as registry,  # the importable module's registry, not __main__'s
    )

    request = json.loads(argv[0])
    spec = registry.get(request["task"])
    with contextlib.redirect_stdout(sys.stderr):  # keep stdout for the answer
        path = spec.build_model(  # type: ignore[misc]
            spec.options(request["options"]),
            request["model_options"],
            Path(request["cache_dir"]),
            bool(request["progress"]),
        )
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
