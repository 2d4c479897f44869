"""The starting policy's evaluation, once per comparison (``<output_dir>/baseline/results.json``)."""

from __future__ import annotations

import contextlib
import dataclasses
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from bandpo_lab._files import read_json_object, write_json
from bandpo_lab.experiments.compare.config import CompareConfig
from bandpo_lab.experiments.compare.layout import BASELINE_DIR, RESULTS_FILE, fingerprint
from bandpo_lab.experiments.compare.plan import base_train_config
from bandpo_lab.experiments.compare.worker import eval_dataset
from bandpo_lab.provenance import code_changed, provenance


def _starting_model(train_config: Any) -> Path:
    """The starting policy's directory: the task's model, a built-in model (converted if needed), or the path."""
    from bandpo_lab.models import builtin_model_dir, is_builtin_model
    from bandpo_lab.training.preflight import cache_dir
    from bandpo_lab.training.tasks import build_task_model

    cache = cache_dir(train_config)
    if train_config.model.uses_task_model:
        return build_task_model(
            train_config.data.task, train_config.data.task_options, train_config.model.warm_start, cache
        )
    if is_builtin_model(train_config.model.path):
        return builtin_model_dir(str(train_config.model.path), cache, progress=False)
    return Path(str(train_config.model.path))


def evaluate_baseline(config: CompareConfig, progress: bool = True) -> dict[str, Any] | None:
    """Evaluate the starting policy once (``<output_dir>/baseline/results.json``, reused when its fingerprint
    matches). Returns the results, or ``None`` for a Hugging Face id that is not a local directory."""
    from bandpo_lab.eval.evaluate import evaluate_model_dir
    from bandpo_lab.eval.models import attention_of_config

    base = base_train_config(config)
    model = _starting_model(base)
    if not model.is_dir():
        return None
    spec = dataclasses.asdict(config.eval)
    train_dict = json.loads(json.dumps(base.to_dict(), default=str))
    attention = attention_of_config(train_dict)  # the runs train (and evaluate) the starting model with it
    stamp = fingerprint(
        {
            "model": str(model.resolve()),
            "eval": spec,
            "data": train_dict.get("data"),
            **({"attn_implementation": attention} if attention else {}),  # since 2026-12-05
        }
    )
    path = Path(config.output_dir) / BASELINE_DIR / RESULTS_FILE
    old = read_json_object(path)
    if old.get("fingerprint") == stamp:
        return old
    path.parent.mkdir(parents=True, exist_ok=True)
    code = provenance()  # the code that evaluates, recorded before it runs
    with _torch_threads(config.num_threads):
        data = eval_dataset(config.eval, train_dict, config.eval.max_problems)
        settings = config.eval.settings(progress=progress)
        result = evaluate_model_dir(model, [data], settings, attn_implementation=attention)
        out = {
            "label": "baseline",
            "model": str(model),
            "fingerprint": stamp,
            "dataset": data.name,
            "settings": result["settings"],
            "metrics": result["overall"],
            "eval_wall_s": result["wall_time_s"],
            "provenance": code,
        }
        if config.curves.every:
            curve = evaluate_model_dir(
                model,
                [eval_dataset(config.eval, train_dict, config.curves.max_problems)],
                config.eval.settings(k=config.curves.k),
                attn_implementation=attention,
            )
            out["curve_metrics"] = curve["overall"]
    out["checkout_changed_during_run"] = code_changed(code, provenance())
    write_json(path, out)
    return out


@contextlib.contextmanager
def _torch_threads(n: int | None) -> Iterator[None]:
    """Use ``n`` torch threads inside the block, as the runs do (``num_threads``; ``None``: as many as now)."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(n or before)
    try:
        yield
    finally:
        torch.set_num_threads(before)
