"""Model directories: check that a path holds a transformers model (config, weights, tokenizer) before anything
loads, resolve ``tiny`` to the built-in task's cached model, and load model and tokenizer."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal, overload

from bandpo_lab._files import expand_path, read_utf8
from bandpo_lab.eval.errors import EvalError
from bandpo_lab.training.checkpoints import weights_problem
from bandpo_lab.training.layout import CONFIG_FILE, MODEL_CONFIG_FILE

__all__ = [
    "ATTENTION_AUTO",
    "TOKENIZER_FILES",
    "WEIGHT_FILES",
    "attention_of_config",
    "attention_of_run",
    "check_device",
    "check_model_dir",
    "holds_model",
    "load_model",
    "loaded_attention",
    "resolve_model_dir",
    "run_config_of",
]

ATTENTION_AUTO = "auto"
"""``load_model``'s default attention: the one the run that saved the model trained with (:func:`attention_of_run`),
else transformers' default for the checkpoint. transformers does not save a model's attention implementation, so a
policy trained with ``eager`` attention would otherwise be evaluated with ``sdpa``: other samples from the same
weights."""

WEIGHT_FILES = (
    "model.safetensors",
    "pytorch_model.bin",
    "model.safetensors.index.json",
    "pytorch_model.bin.index.json",
)
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json")


def _has_weights(names: Sequence[str]) -> bool:
    return any(n in names for n in WEIGHT_FILES) or any(n.endswith(".safetensors") for n in names)


def holds_model(folder: Path) -> bool:
    """Whether ``folder`` holds a transformers model: ``config.json`` and weights (:data:`WEIGHT_FILES` or a
    ``.safetensors`` file), as :func:`check_model_dir` asks."""
    try:
        names = [c.name for c in folder.iterdir()] if folder.is_dir() else []
    except OSError:
        return False
    return MODEL_CONFIG_FILE in names and _has_weights(names)


def check_model_dir(path: str | Path) -> tuple[Path, Path]:
    """Check that ``path`` is a transformers model directory; returns ``(model_dir, tokenizer_dir)``, with ``~``
    and ``$VAR`` expanded (:func:`bandpo_lab._files.expand_path`).

    A checkpoint without tokenizer files uses its parent's (the run directory) when that has them.

    Raises:
        EvalError: the path does not exist, is a file, has no ``config.json`` (a run directory with only
            ``checkpoint-*`` folders names the last one), no weights or weights that are truncated or not of their
            format (:func:`bandpo_lab.training.checkpoints.weights_problem`, as resume checks a checkpoint), or no
            tokenizer; the message names the path and what is missing.
    """
    p = expand_path(path, "model directory", EvalError)
    if not p.exists():
        raise EvalError(f"model directory {str(path)!r} does not exist (relative to {Path.cwd()})")
    if not p.is_dir():
        raise EvalError(
            f"model {str(path)!r} is a file; expected a model directory (config.json, weights, tokenizer)"
        )
    names = sorted(c.name for c in p.iterdir())
    if MODEL_CONFIG_FILE not in names:
        checkpoints = sorted(
            (c for c in p.glob("checkpoint-*") if c.is_dir() and c.name.split("-")[-1].isdigit()),
            key=lambda c: int(c.name.split("-")[-1]),
        )
        hint = (
            f"; it holds training checkpoints: pass one of them, e.g. {str(checkpoints[-1])!r}"
            if checkpoints
            else f"; it holds: {', '.join(names[:20]) or 'nothing'}"
        )
        raise EvalError(f"model directory {str(path)!r} is not a model: config.json is missing{hint}")
    try:
        json.loads((p / MODEL_CONFIG_FILE).read_text())
    except (OSError, json.JSONDecodeError) as err:
        raise EvalError(f"model directory {str(path)!r}: config.json is not valid JSON ({err})") from err
    if not _has_weights(names):
        raise EvalError(
            f"model directory {str(path)!r} is not a model: it has config.json but no weights (looked for "
            f"{', '.join(WEIGHT_FILES)}); it holds: {', '.join(names[:20])}"
        )
    problem = weights_problem(p)  # the check resume makes of a checkpoint's weights, headers only
    if problem is not None:
        raise EvalError(f"model directory {str(path)!r}: its weights cannot be loaded: {problem}")
    tokenizer_dir = p
    if not any(n in names for n in TOKENIZER_FILES):
        parent = p.parent
        if any((parent / n).is_file() for n in TOKENIZER_FILES):
            tokenizer_dir = parent
        else:
            raise EvalError(
                f"model directory {str(path)!r} has no tokenizer (looked for {', '.join(TOKENIZER_FILES)} there and "
                f"in {str(parent)!r}); save the tokenizer with the model"
            )
    return p, tokenizer_dir


def check_device(device: str) -> str:
    """``device`` as a torch device this machine has: ``auto`` (CUDA if available, else the CPU), ``cpu``,
    ``cuda`` or ``cuda:N``; returns it with ``auto`` resolved.

    Raises:
        EvalError: another name, or a CUDA device this machine does not have (one line, before any model loads).
    """
    import torch

    allowed = "auto, cpu, cuda or cuda:N"
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError, ValueError):
        raise EvalError(f"device must be {allowed}, got {device!r}") from None
    if dev.type == "cuda":
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if (dev.index or 0) >= count:
            raise EvalError(
                f"device {device!r} is not on this machine (CUDA devices: {count}); use cpu or auto"
            )
    elif dev.type != "cpu":
        raise EvalError(f"device must be {allowed}, got {device!r}")
    return device


def run_config_of(model_dir: str | Path) -> dict[str, Any] | None:
    """The config a training run ran with (its ``train_config.yaml``, as a mapping), read from ``model_dir`` or its
    parent (a ``checkpoint-N`` directory); ``None`` where there is none or it is not a YAML mapping. ``~`` and
    ``$VAR`` in ``model_dir`` are expanded.

    Raises:
        EvalError: the file is not UTF-8 text (:func:`bandpo_lab._files.read_utf8`: where its first other byte
            lies), in one line naming it.
    """
    import yaml

    model_dir = expand_path(model_dir, "model directory", EvalError)
    for folder in (model_dir, model_dir.parent):
        path = folder / CONFIG_FILE
        if path.is_file():
            try:
                text = read_utf8(path, f"the training run's config {str(path)!r}")
            except ValueError as err:
                raise EvalError(str(err)) from None
            try:
                data = yaml.safe_load(text)
            except yaml.YAMLError:
                return None
            return data if isinstance(data, dict) else None
    return None


def attention_of_config(config: Mapping[str, Any]) -> str | None:
    """The attention implementation a training config (a ``train_config.yaml`` mapping) loads its model with:
    ``model.attn_implementation``, else ``model_init_kwargs.attn_implementation`` (the two are refused when they
    disagree); ``None`` where it sets none (transformers' default)."""
    for section in (config.get("model"), config.get("model_init_kwargs")):
        value = section.get("attn_implementation") if isinstance(section, Mapping) else None
        if isinstance(value, str) and value:
            return value
    return None


def attention_of_run(model_dir: str | Path) -> str | None:
    """The attention implementation of the training run that saved ``model_dir`` (:func:`run_config_of`,
    :func:`attention_of_config`); ``None`` where there is no run config or it sets none."""
    return attention_of_config(run_config_of(model_dir) or {})


def loaded_attention(model: Any) -> str | None:
    """The attention implementation a loaded transformers model computes with (its config's
    ``_attn_implementation``), ``None`` for an object without one (no model: the vLLM backend)."""
    value = getattr(getattr(model, "config", None), "_attn_implementation", None)
    return value if isinstance(value, str) else None


def load_model(
    path: str | Path,
    device: str = "auto",
    dtype: str = "auto",
    attn_implementation: str | None = ATTENTION_AUTO,
) -> tuple[Any, Any]:
    """``(model, tokenizer)`` from a checked model directory (:func:`check_model_dir`), model in eval mode.

    Args:
        device: ``auto`` (CUDA when available, else CPU), ``cpu``, ``cuda``, ``cuda:1``, ...
        dtype: ``auto`` (the checkpoint's), ``float32``, ``bfloat16`` or ``float16``.
        attn_implementation: ``auto`` (:data:`ATTENTION_AUTO`: the training run's, else transformers' default),
            ``None`` (transformers' default) or a name transformers knows (``eager``, ``sdpa``, ...). The one used:
            :func:`loaded_attention`.
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model_dir, tokenizer_dir = check_model_dir(path)
    if dtype not in ("auto", "float32", "bfloat16", "float16"):
        raise EvalError(f"dtype must be one of auto, float32, bfloat16, float16, got {dtype!r}")
    if attn_implementation is not None and (
        not isinstance(attn_implementation, str) or not attn_implementation
    ):
        raise EvalError(
            f"attn_implementation must be {ATTENTION_AUTO!r}, None or an attention implementation's name "
            f"(eager, sdpa, ...), got {attn_implementation!r}"
        )
    device = check_device(device)
    attention = attention_of_run(model_dir) if attn_implementation == ATTENTION_AUTO else attn_implementation
    try:
        model = AutoModelForCausalLM.from_pretrained(
            str(model_dir),
            dtype="auto" if dtype == "auto" else getattr(torch, dtype),
            **({"attn_implementation": attention} if attention else {}),
        )
    except (OSError, ValueError, KeyError, ImportError) as err:
        what = f" with attn_implementation {attention!r}" if attention else ""
        raise EvalError(
            f"model directory {str(path)!r} could not be loaded as a causal LM{what}: {err}"
        ) from err
    tokenizer = AutoTokenizer.from_pretrained(str(tokenizer_dir))
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    model.to(device)
    model.eval()
    return model, tokenizer


@overload
def resolve_model_dir(
    model: str | Path,
    datasets: Sequence[str] = (),
    task_options: Mapping[str, Any] | None = None,
    build: Literal[True] = True,
) -> Path: ...


@overload
def resolve_model_dir(
    model: str | Path, datasets: Sequence[str], task_options: Mapping[str, Any] | None, build: bool
) -> Path | None: ...


def resolve_model_dir(
    model: str | Path,
    datasets: Sequence[str] = (),
    task_options: Mapping[str, Any] | None = None,
    build: bool = True,
) -> Path | None:
    """``model`` as a path, checked by :func:`check_model_dir` (a wrong path fails before any dataset loads), with
    ``~`` and ``$VAR`` expanded as that check reads them (the run's ``train_config.yaml`` is looked up there).

    A built-in model name (:data:`bandpo_lab.models.MODELS`, e.g. ``smollm2-135m``) stands for its converted directory
    (converted now when it is not cached yet). ``"tiny"`` stands for the cached warm-started model of the first built-in task among ``datasets``, built with
    ``task_options`` now when it is not cached yet (:func:`bandpo_lab.training.tasks.build_task_model`). With
    ``build`` False (a dry run) neither is converted nor built, nor looked up: ``None`` for them, after the checks
    that need no model (``tiny``'s task among ``datasets``).

    Raises:
        EvalError: ``tiny`` without a built-in task that has a tiny model among ``datasets``; a path :func:`check_model_dir` rejects.
    """
    from bandpo_lab.models import ModelUnavailableError, builtin_model_dir, is_builtin_model

    if is_builtin_model(str(model)):
        if not build:
            return None
        from bandpo_lab.training.tasks import default_cache_dir

        try:
            path = builtin_model_dir(str(model), default_cache_dir())
        except ModelUnavailableError as err:
            raise EvalError(f"--model {model}: {err}") from err
        return check_model_dir(path)[0]
    if model == "tiny":
        from bandpo_lab.training.tasks import TASKS, build_task_model, default_cache_dir

        with_model = [name for name in TASKS.names() if TASKS.get(name).build_model is not None]
        task = next((d for d in datasets if d in with_model), None)
        if task is None:
            without = [d for d in datasets if d in TASKS]
            none = f"; {', '.join(map(repr, without))} has none (use a model directory or a built-in model)"
            raise EvalError(
                f"--model tiny needs a built-in task with its own tiny model among --dataset "
                f"({', '.join(with_model)}){none if without else ''}"
            )
        if not build:
            return None
        path = Path(build_task_model(task, task_options or {}, {}, default_cache_dir()))
    else:
        path = Path(model)
    return check_model_dir(path)[0]
