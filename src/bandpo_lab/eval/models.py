"""Model directories: check (before anything loads), resolve (``tiny``, built-in models) and load them."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal, overload

from bandpo_lab._files import WEIGHT_FILES, expand_path, has_weights, read_utf8
from bandpo_lab.eval.errors import EvalError
from bandpo_lab.training.checkpoints import checkpoint_dirs, weights_problem
from bandpo_lab.training.layout import CONFIG_FILE, MODEL_CONFIG_FILE, TOKENIZER_FILES
from bandpo_lab.training.sections import DTYPES

ATTENTION_AUTO = "auto"
"""``load_model``'s default attention: the training run's (:func:`attention_of_run`; a saved model does not record
it), else transformers' default."""


def check_model_dir(path: str | Path) -> tuple[Path, Path]:
    """Check that ``path`` (``~`` and ``$VAR`` expanded) is a transformers model directory; returns ``(model_dir,
    tokenizer_dir)``: a checkpoint without tokenizer files uses its parent's (the run directory) when that has them.

    Raises:
        EvalError: naming the path and what is missing: no such directory, no ``config.json`` (naming the last
            ``checkpoint-*`` of a run directory), no weights or unloadable ones (as resume checks them), no tokenizer.
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
        checkpoints = checkpoint_dirs(p)
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
    if not has_weights(names):
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
    """``device`` (``auto``: CUDA if available, else the CPU; ``cpu``, ``cuda`` or ``cuda:N``) with ``auto`` resolved;
    ``EvalError`` for another name or a CUDA device this machine does not have."""
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
    """The ``train_config.yaml`` mapping of the run in ``model_dir`` or its parent (a ``checkpoint-N`` directory),
    else ``None``; ``EvalError`` naming it when it is not UTF-8 text."""
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
    """The attention a training config mapping loads its model with: ``model.attn_implementation``, else
    ``model_init_kwargs.attn_implementation``; ``None`` where it sets none (transformers' default)."""
    for section in (config.get("model"), config.get("model_init_kwargs")):
        value = section.get("attn_implementation") if isinstance(section, Mapping) else None
        if isinstance(value, str) and value:
            return value
    return None


def attention_of_run(model_dir: str | Path) -> str | None:
    """:func:`attention_of_config` of the run that saved ``model_dir`` (:func:`run_config_of`), else ``None``."""
    return attention_of_config(run_config_of(model_dir) or {})


def loaded_attention(model: Any) -> str | None:
    """The attention a loaded transformers model computes with, ``None`` without one (the vLLM backend)."""
    value = getattr(getattr(model, "config", None), "_attn_implementation", None)
    return value if isinstance(value, str) else None


def load_model(
    path: str | Path,
    device: str = "auto",
    dtype: str = "auto",
    attn_implementation: str | None = ATTENTION_AUTO,
) -> tuple[Any, Any]:
    """``(model, tokenizer)`` from a checked model directory (:func:`check_model_dir`), model in eval mode on
    ``device`` (:func:`check_device`), in ``dtype`` (``auto``: the checkpoint's, ``float32``, ``bfloat16`` or
    ``float16``), with ``attn_implementation`` (:data:`ATTENTION_AUTO`, ``None``: transformers' default, or a name
    such as ``eager``, ``sdpa``)."""
    import torch
    from transformers import AutoModelForCausalLM

    from bandpo_lab.training.preflight import load_tokenizer

    model_dir, tokenizer_dir = check_model_dir(path)
    if dtype not in DTYPES:
        raise EvalError(f"dtype must be one of {', '.join(DTYPES)}, got {dtype!r}")
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
    model.to(device)
    model.eval()
    return model, load_tokenizer(tokenizer_dir, name="tokenizer of model", error=EvalError)


@overload
def resolve_model_dir(
    model: str | Path,
    datasets: Sequence[str] = (),
    task_options: Mapping[str, Any] | None = None,
    build: Literal[True] = True,
    *,
    cache_dir: Path | None = None,
) -> Path: ...


@overload
def resolve_model_dir(
    model: str | Path,
    datasets: Sequence[str],
    task_options: Mapping[str, Any] | None,
    build: bool,
    *,
    cache_dir: Path | None = None,
) -> Path | None: ...


def resolve_model_dir(
    model: str | Path,
    datasets: Sequence[str] = (),
    task_options: Mapping[str, Any] | None = None,
    build: bool = True,
    *,
    cache_dir: Path | None = None,
) -> Path | None:
    """``model`` as a model directory checked by :func:`check_model_dir`: a path, a built-in model name
    (:data:`bandpo_lab.models.MODELS`: its converted directory) or ``"tiny"`` (the cached warm-started model of
    the first built-in task among ``datasets``, built with ``task_options``); the last two are converted or built
    now when not cached, in ``cache_dir`` (``None``: the default cache directory). With ``build`` False (a dry
    run): ``None`` for those two, after ``tiny``'s check.

    Raises:
        EvalError: ``tiny`` without a built-in task that has a tiny model among ``datasets``; a path
            :func:`check_model_dir` rejects.
    """
    from bandpo_lab.models import ModelUnavailableError, builtin_model_dir, is_builtin_model
    from bandpo_lab.training.tasks import TASKS, build_task_model, default_cache_dir

    cache = default_cache_dir() if cache_dir is None else cache_dir
    if is_builtin_model(str(model)):
        if not build:
            return None
        try:
            path = builtin_model_dir(str(model), cache)
        except ModelUnavailableError as err:
            raise EvalError(f"--model {model}: {err}") from err
        return check_model_dir(path)[0]
    if model == "tiny":
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
        path = Path(build_task_model(task, task_options or {}, {}, cache))
    else:
        path = Path(model)
    return check_model_dir(path)[0]
