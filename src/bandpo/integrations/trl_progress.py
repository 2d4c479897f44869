"""The training bar of a TRL trainer with a one-line summary per log: ``BandPOTrainer`` (and ``bandpo train``) put
it in place of transformers' ``ProgressCallback``, which printed the whole logged dict (more than 60 keys under
BandPO) at every log. Every metric still goes to ``trainer.state.log_history`` and the ``report_to`` loggers."""

from __future__ import annotations

from typing import Any

from transformers import ProgressCallback, TrainerControl, TrainerState, TrainingArguments

__all__ = ["PROGRESS_KEYS", "CompactProgressCallback", "use_compact_progress"]


PROGRESS_KEYS = (
    "loss",
    "reward",
    "reward_std",
    "entropy",
    "kl",
    "clip/frac",
    "clip/frac_out",
    "band/delta",
    "grad_norm",
)
"""Metrics shown on the progress line (all of them go to ``metrics.jsonl`` and the ``report_to`` loggers)."""


class CompactProgressCallback(ProgressCallback):
    """transformers' tqdm progress bar (steps, rate, ETA), printing ``step N | loss ... | reward ... | ...`` with
    :data:`PROGRESS_KEYS` (and any nonzero ``rewards/*/failures``) at each log instead of the full dict, and
    ``eval at step N | eval_reward ... | ...`` with their ``eval_`` names at an evaluation's log."""

    def on_log(
        self,
        args: TrainingArguments,
        state: TrainerState,
        control: TrainerControl,
        logs: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        if not state.is_world_process_zero or self.training_bar is None or not logs:
            return
        if "train_runtime" in logs:  # the end-of-training summary
            summary = {
                k: logs[k] for k in ("train_runtime", "train_steps_per_second", "train_loss") if k in logs
            }
            self.training_bar.write(f"done: {_format_items(summary)}")
            return
        shown = {k: logs[k] for k in PROGRESS_KEYS if k in logs}
        shown.update({k: v for k, v in logs.items() if k.endswith("/failures") and v})
        if shown:
            self.training_bar.write(f"step {state.global_step} | {_format_items(shown)}")
        evaluated = {f"eval_{k}": logs[f"eval_{k}"] for k in PROGRESS_KEYS if f"eval_{k}" in logs}
        if evaluated:  # an evaluation's log (eval_strategy): its keys carry the prefix
            self.training_bar.write(f"eval at step {state.global_step} | {_format_items(evaluated)}")


def _format_items(items: dict[str, Any]) -> str:
    def fmt(value: Any) -> str:
        return f"{value:.4g}" if isinstance(value, float) else str(value)

    return " | ".join(f"{k} {fmt(v)}" for k, v in items.items())


def use_compact_progress(trainer: Any) -> None:
    """Put :class:`CompactProgressCallback` in place of ``trainer``'s ``ProgressCallback`` (the bar of
    ``disable_tqdm=False``); with no bar (``disable_tqdm=True``: transformers' ``PrinterCallback``) nothing
    changes."""
    callbacks = trainer.callback_handler.callbacks
    if any(type(cb) is ProgressCallback for cb in callbacks):
        trainer.remove_callback(ProgressCallback)
        trainer.add_callback(CompactProgressCallback())
