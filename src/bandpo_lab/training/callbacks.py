"""The trainer callback of ``bandpo train`` that writes every logged dict to ``<output_dir>/metrics.jsonl``."""

from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import Any

from transformers import TrainerCallback, TrainerControl, TrainerState, TrainingArguments

from bandpo_lab._files import read_jsonl, write_text
from bandpo_lab.training.layout import METRICS_FILE


def _json_value(value: Any) -> Any:
    """Plain JSON values: non-finite floats become ``null``; tensors and numpy scalars become numbers."""
    if hasattr(value, "item") and callable(value.item):
        try:
            value = value.item()
        except (TypeError, ValueError, RuntimeError):
            return repr(value)
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    if isinstance(value, (list, tuple)):
        return [_json_value(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _json_value(v) for k, v in value.items()}
    return repr(value)


def read_metrics(path: str | Path) -> list[dict[str, Any]]:
    """The rows of a ``metrics.jsonl`` file (a directory means its ``metrics.jsonl``)."""
    path = Path(path)
    return read_jsonl(path / METRICS_FILE if path.is_dir() else path)


def keep_rows_through(path: Path, step: int) -> list[dict[str, Any]]:
    """Rewrite the JSONL file ``path`` (atomically) with its rows up to optimizer step ``step``, none at step 0 (a
    fresh run starts a new file; a resumed one lists every step once); returns them."""
    keep = [r for r in read_metrics(path) if r.get("step", 0) <= step] if step else []
    write_text(path, "".join(json.dumps(r) + "\n" for r in keep))
    return keep


class MetricsJSONLCallback(TrainerCallback):
    """Appends one JSON line per ``Trainer.log`` call to ``path`` (main process only): ``{"step", "time",
    "elapsed_s", **logs}``, ``step`` the optimizer step, ``elapsed_s`` the seconds since training began. A fresh
    run starts a new file; a run resumed at step ``s`` keeps the rows up to ``s``, so every step appears once."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._start = time.time()

    def on_train_begin(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ) -> None:
        self._start = time.time()
        if not state.is_world_process_zero:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        keep_rows_through(self.path, state.global_step)

    def on_log(
        self,
        args: TrainingArguments,
        state: TrainerState,
        control: TrainerControl,
        logs: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        if not state.is_world_process_zero or not logs:
            return
        now = time.time()
        row = {"step": state.global_step, "time": round(now, 3), "elapsed_s": round(now - self._start, 3)}
        row.update({str(k): _json_value(v) for k, v in logs.items()})
        with self.path.open("a") as f:
            f.write(json.dumps(row) + "\n")
            f.flush()
