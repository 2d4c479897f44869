"""The checks of a training config that need no model (processes, batch arithmetic, libraries, the model path),
which :func:`bandpo_lab.training.run.prepare` runs before anything loads; the cache and the tokenizer."""

from __future__ import annotations

import importlib.util
import math
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from bandpo.registry import did_you_mean
from bandpo_lab._files import expand_path, output_dir_problem
from bandpo_lab.config import located
from bandpo_lab.models import MODELS, ModelUnavailableError, is_builtin_model
from bandpo_lab.runtime import bf16_problem
from bandpo_lab.training.checkpoints import weights_problem
from bandpo_lab.training.config import ConfigError, TrainConfig
from bandpo_lab.training.layout import MODEL_CONFIG_FILE, TOKENIZER_FILES
from bandpo_lab.training.resume import trainer_default
from bandpo_lab.training.tasks import TASKS, default_cache_dir


def world_size() -> int:
    """``WORLD_SIZE`` under accelerate / torchrun, else 1."""
    return max(1, int(os.environ.get("WORLD_SIZE", "1")))


def is_main_rank() -> bool:
    """Whether this process writes the run's files (rank 0, or the only process)."""
    return os.environ.get("RANK", "0") == "0"


def trainer_value(config: TrainConfig, name: str) -> Any:
    """The value of trainer field ``name`` the run uses: the config's, or the ``BandPOConfig`` default."""
    return config.trainer.get(name, trainer_default(name))


def check_batch(config: TrainConfig, world_size: int) -> None:
    """The generation batch holds whole groups (``ConfigError`` otherwise, with the arithmetic and a batch size
    that works)."""

    def get(name: str) -> Any:
        return trainer_value(config, name)

    n = get("num_generations")
    if n is None or n < 2:
        raise ConfigError(
            f"num_generations must be an integer >= 2 (GRPO standardises rewards within each group of completions "
            f"of one prompt), got {n!r}"
        )
    per_device = get("per_device_train_batch_size")
    accumulation = get("gradient_accumulation_steps")
    steps = get("steps_per_generation")
    generation_batch = get("generation_batch_size")
    if steps is not None and generation_batch is not None:
        raise ConfigError(
            f"steps_per_generation={steps} and generation_batch_size={generation_batch} are both set; set one"
        )
    if generation_batch is None:
        steps = accumulation if steps is None else steps
        generation_batch = per_device * world_size * steps
        how = (
            f"per_device_train_batch_size ({per_device}) x processes ({world_size}) x steps_per_generation "
            f"({steps}{' = gradient_accumulation_steps' if get('steps_per_generation') is None else ''})"
        )
    else:
        how = "generation_batch_size"
        if generation_batch % (per_device * world_size):
            raise ConfigError(
                f"generation_batch_size ({generation_batch}) must be a multiple of per_device_train_batch_size "
                f"({per_device}) x processes ({world_size})"
            )
    if generation_batch % n:
        raise ConfigError(
            f"num_generations={n} must divide the generation batch: {how} = {generation_batch} completions, which "
            f"is not a whole number of groups of {n}. Make per_device_train_batch_size x processes x "
            "steps_per_generation a multiple of num_generations (e.g. per_device_train_batch_size="
            f"{max(n, math.ceil(per_device / n) * n)}), or change num_generations"
        )


def _flash_attention() -> dict[str, Callable[[], bool]]:
    from transformers.utils import is_flash_attn_2_available, is_flash_attn_3_available

    return {"flash_attention_2": is_flash_attn_2_available, "flash_attention_3": is_flash_attn_3_available}


def attention_problem(value: str | None, name: str, at: str | None = None) -> str | None:
    """Why ``from_pretrained`` would refuse ``attn_implementation=value`` once the model has loaded, or ``None``:
    a name the installed transformers knows (with or without its ``paged|`` prefix) or a Hub kernel (``org/name``)
    is accepted. ``name``: the setting, ``at``: where it was set."""
    if value is None:
        return None
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    allowed = ["eager", *ALL_ATTENTION_FUNCTIONS.valid_keys()]
    if value in allowed or value.removeprefix("paged|") in allowed:
        available = _flash_attention().get(value.removeprefix("paged|"))
        if available is not None and not available():
            return (
                f"{located(f'{name}={value!r}', at)} needs the flash-attn package and a CUDA GPU, which this machine "
                f"lacks (transformers' {available.__name__}() is False): use sdpa or eager"
            )
        return None
    try:
        from transformers.integrations.hub_kernels import is_kernel
    except ImportError:  # pragma: no cover - transformers without Hub kernels
        is_kernel = None
    if is_kernel is not None and is_kernel(value):
        return None
    return (
        f"{located(f'{name}={value!r}', at)} is not an attention implementation transformers knows"
        f"{did_you_mean(value, allowed)}: one of {', '.join(allowed)}, or a kernel from the Hub (org/name)"
    )


LIBRARY_SETTINGS: tuple[tuple[str, str, str, str], ...] = (
    ("use_vllm", "vllm", "vllm", "samples with vLLM"),
    ("use_liger_kernel", "liger_kernel", "liger-kernel", "computes the loss with Liger's kernels"),
    ("deepspeed", "deepspeed", "deepspeed", "trains with DeepSpeed"),
)
"""(setting, module, pip package, what it does): a setting that, set, needs a library the lab does not install;
refused before the models load when ``import <module>`` finds nothing (vLLM failed at the first step, DeepSpeed
with a traceback on a dry run)."""


def check_libraries(config: TrainConfig) -> None:
    """The library each set :data:`LIBRARY_SETTINGS` entry needs, and an attention implementation transformers
    knows and can run here (``model.attn_implementation`` or ``model_init_kwargs.attn_implementation``)."""
    for key, module, package, does in LIBRARY_SETTINGS:
        value = config.trainer.get(key)
        if value and importlib.util.find_spec(module) is None:
            raise ConfigError(
                f"{located(f'{key}={value!r}', config.where(key))} {does}, which is not installed here (import "
                f"{module} finds nothing): install it (pip install {package}) or leave {key} unset"
            )
    init_kwargs = config.trainer.get("model_init_kwargs")
    for key, value in (
        ("model.attn_implementation", config.model.attn_implementation),
        (
            "model_init_kwargs.attn_implementation",
            init_kwargs.get("attn_implementation") if isinstance(init_kwargs, Mapping) else None,
        ),
    ):
        problem = attention_problem(value, key, config.where(key))
        if problem is not None:
            raise ConfigError(problem)


_GPU_ONLY = {
    "use_liger_kernel": "runs Liger's Triton kernels, which need a GPU",  # Triton: "0 active drivers" at step 1
    "fp16": "is CUDA's float16 autocast, which does nothing on a CPU (the run would train in float32 and save "
    "fp16: true)",
}
"""TRL settings that only a GPU runs, and why: refused on a CPU before the model loads."""


def check_gpu_settings(config: TrainConfig, on_gpu: bool) -> None:
    """Each set :data:`_GPU_ONLY` setting on a CPU: one line naming it and where it was set."""
    if on_gpu:
        return
    for key, why in _GPU_ONLY.items():
        if config.trainer.get(key):
            raise ConfigError(
                f"{located(f'{key}=true', config.where(key))} {why}; this run is on the CPU: leave {key} unset"
            )


def check_precision_here(config: TrainConfig, on_gpu: bool) -> None:
    """``model.precision: bf16`` on a CPU without native bfloat16 instructions: refused before the model loads
    (:func:`bandpo_lab.runtime.bf16_problem`)."""
    problem = bf16_problem(
        config.model.precision, "model.precision", at=config.where("model.precision"), on_gpu=on_gpu
    )
    if problem is not None:
        raise ConfigError(problem)


def _looks_like_hub_id(path: str) -> bool:
    parts = path.split("/")
    return len(parts) == 2 and all(parts) and not path.startswith((".", "~")) and "\\" not in path


def check_model(config: TrainConfig) -> str | None:
    """The model path to load (``None``: the task model, built later). Raises ``ConfigError`` if it is missing."""
    model = config.model
    if model.uses_task_model:
        if config.data.task is None:
            raise ConfigError(
                f"model.path={model.path!r} means the built-in task's own model, but data.task is not set; set "
                "model.path to a model directory (or a Hugging Face id), or data.task to "
                f"{', '.join(TASKS.names())}"
            )
        spec = TASKS.get(config.data.task)
        if spec.build_model is None:
            raise ConfigError(f"task {spec.name!r} has no built-in model: set model.path")
        if spec.check_model_options is not None:
            try:
                spec.check_model_options(model.warm_start)
            except (
                ValueError
            ) as err:  # named with its key (model.warm_start.n_layers must be ...) and where it was set
                key = str(err).partition(" ")[0]
                at = f" ({config.where(key)})" if key.startswith("model.warm_start.") else ""
                raise ConfigError(f"{err}{at}") from err
        cache_dir(config)  # where the task's model will be built: checked now
        return None
    if model.warm_start:
        raise ConfigError(
            f"model.warm_start={model.warm_start!r} applies to the task model only (model.path absent or 'tiny'), "
            f"but model.path={model.path!r}"
        )
    if is_builtin_model(model.path):
        try:
            MODELS.get(str(model.path)).check()
        except ModelUnavailableError as err:
            raise ConfigError(f"model.path={model.path!r}: {err}") from err
        cached = MODELS.get(str(model.path)).cached(cache_dir(config))
        return None if cached is None else str(cached)  # None: converted by the main process before training
    path = expand_path(str(model.path), "model.path", ConfigError)
    if path.is_dir():
        if not (path / MODEL_CONFIG_FILE).is_file():
            raise ConfigError(
                f"model.path {str(model.path)!r} is a directory without config.json: not a transformers model "
                f"directory (it holds: {', '.join(sorted(p.name for p in path.iterdir())[:20]) or 'nothing'})"
            )
        # weights that load (headers only), as resume and bandpo eval check them
        problem = weights_problem(path)
        if problem is not None:
            raise ConfigError(
                f"model.path {str(model.path)!r} is not a model transformers can load: {problem}"
            )
        if not any((path / name).is_file() for name in TOKENIZER_FILES):
            raise ConfigError(
                f"model.path {str(model.path)!r} has no tokenizer (looked for {', '.join(TOKENIZER_FILES)}): "
                "training loads it from the model directory; save the tokenizer with the model"
            )
        return str(path)
    if path.exists():
        raise ConfigError(f"model.path {str(model.path)!r} is a file; it must be a model directory")
    if _looks_like_hub_id(str(model.path)):
        from huggingface_hub import constants, try_to_load_from_cache

        if constants.HF_HUB_OFFLINE:
            cached = try_to_load_from_cache(str(model.path), MODEL_CONFIG_FILE)
            if not isinstance(cached, str):
                raise ConfigError(
                    f"model.path {str(model.path)!r} is not a local directory and not in the Hugging Face cache, "
                    "and HF_HUB_OFFLINE=1 forbids downloading it: download it first or point model.path at a "
                    "local model directory"
                )
        return str(model.path)
    raise ConfigError(
        f"model.path {str(model.path)!r} does not exist (relative paths are relative to {Path.cwd()}); it must be "
        f"a model directory, a Hugging Face id (org/name), a built-in model ({', '.join(MODELS.names())}) or 'tiny' "
        "with data.task"
    )


def cache_dir(config: TrainConfig) -> Path:
    """Where task and built-in models are cached: ``model.cache_dir`` (``~`` and ``$VAR`` expanded), else the default
    cache directory.

    Raises:
        ConfigError: ``model.cache_dir`` names an unset variable, or a file (a path no model can be written under).
    """
    if not config.model.cache_dir:
        return default_cache_dir()
    path = expand_path(str(config.model.cache_dir), "model.cache_dir", ConfigError)
    problem = output_dir_problem(path, "model.cache_dir")
    if problem is not None:
        raise ConfigError(problem)
    return path


def load_tokenizer(
    path: str | Path, *, name: str = "model.path", error: type[ValueError] = ConfigError
) -> Any:
    """The tokenizer of the model at ``path``, its pad token the EOS token where it has none; ``error`` (naming the
    setting ``name``) where transformers cannot read its files."""
    from transformers import AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(str(path))
    except (OSError, ValueError, TypeError) as err:  # tokenizer files that transformers cannot read
        reason = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise error(f"{name} {str(path)!r}: its tokenizer cannot be loaded: {reason}") from err
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer
