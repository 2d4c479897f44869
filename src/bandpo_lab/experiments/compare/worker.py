"""One run of a comparison, in its own process (``python -m bandpo_lab.experiments.compare.worker RUN_SPEC.json``):
train (resuming), evaluate, write ``results.json``."""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from bandpo_lab._files import write_json
from bandpo_lab.experiments.compare.config import CompareError, EvalSpec
from bandpo_lab.experiments.compare.layout import (
    AT_STEPS_FILE,
    HELDOUT_FILE,
    OVERWRITE_FLAG,
    RESULTS_FILE,
    RUN_DIR_FILES,
    TRAIN_DONE_FILE,
)
from bandpo_lab.provenance import code_changed, provenance
from bandpo_lab.training.layout import MODEL_CONFIG_FILE


def eval_dataset(evals: EvalSpec, train_config: Mapping[str, Any], max_problems: int | None) -> Any:
    """The eval dataset of ``evals``: its ``dataset``, or the training task's ``split``."""
    from bandpo_lab.eval.datasets import load_eval_dataset
    from bandpo_lab.eval.errors import EvalError

    data = train_config.get("data") or {}
    dataset = evals.dataset
    if dataset is None:
        if not data.get("task"):
            raise CompareError(
                "eval.dataset is required when training on files (data.path): name a task or an eval file"
            )
        dataset = data["task"]
    try:
        return load_eval_dataset(
            dataset,
            split=evals.split,
            verifier=evals.verifier,
            prompt_column=evals.prompt_column,
            answer_column=evals.answer_column,
            task_options=(data.get("task_options") or {}) if dataset == data.get("task") else None,
            max_problems=max_problems,
        )
    except EvalError as err:
        raise CompareError(f"eval: {err}") from err


# ------------------------------------------------------------------------------------------- held-out curve
def _heldout_callback(
    path: Path, dataset: Any, settings: Any, every: int = 0, steps: Sequence[int] = (), ends: bool = True
) -> Any:
    """A ``TrainerCallback`` that evaluates the policy at the optimizer steps in ``steps``, every ``every`` steps and
    (``ends``) at step 0 and the last step, appending ``{"step", **overall metrics}`` rows to ``path`` (rows after
    the step a resumed run restarts from dropped first). Sampling forks the RNG: training is the same without it.
    At a step that saves a checkpoint (but the last) it runs after the save (docs/trl.md)."""
    from transformers import TrainerCallback

    from bandpo_lab.eval.evaluate import evaluate_model
    from bandpo_lab.runtime import freed_memory_returned

    wanted = set(steps)

    def due(step: int, max_steps: int) -> bool:
        return step in wanted or bool(every and step % every == 0) or (ends and step >= max_steps)

    class HeldoutCallback(TrainerCallback):
        def __init__(self) -> None:
            self.done: set[int] = set()
            self.pending: int | None = None  # a due step whose evaluation waits for its checkpoint

        def _evaluate(self, step: int, model: Any, tokenizer: Any) -> None:
            if step in self.done or model is None or tokenizer is None:
                return
            self.done.add(step)
            with freed_memory_returned():  # not on the heap the training keeps (bandpo_lab.runtime)
                out = evaluate_model(model, tokenizer, [dataset], settings)
            row = {"step": step, "time": round(time.time(), 3), **out["overall"]}
            with path.open("a") as f:
                f.write(json.dumps(row) + "\n")

        def _flush(self, kwargs: dict[str, Any]) -> None:
            """The pending evaluation, while the weights are still those of its step."""
            if self.pending is not None:
                step, self.pending = self.pending, None
                self._evaluate(step, kwargs.get("model"), kwargs.get("processing_class"))

        def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            from bandpo_lab.training.callbacks import keep_rows_through

            self.done = {int(r["step"]) for r in keep_rows_through(path, state.global_step)}
            self.pending = None
            if (state.global_step == 0 and ends) or (
                state.global_step and due(state.global_step, state.max_steps)
            ):
                self._evaluate(state.global_step, kwargs.get("model"), kwargs.get("processing_class"))

        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            if not due(state.global_step, state.max_steps):
                return
            self.pending = state.global_step
            if not control.should_save or control.should_training_stop:  # else on_save, after the checkpoint
                self._flush(kwargs)

        def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            self._flush(kwargs)

        def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            self._flush(kwargs)  # a save that did not come (a later callback cancelled it): the same weights

        def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            self._flush(kwargs)

    return HeldoutCallback()


def late_metrics(
    at_steps: Sequence[int], rows: Sequence[Mapping[str, Any]], final: Mapping[str, Any]
) -> dict[str, float] | None:
    """The late mean: each numeric metric averaged over the evaluations at ``at_steps`` (``rows``, one per step)
    and the final one (``final``); only metrics that every one of them has. ``None`` when a step in ``at_steps``
    has no row (the run did not evaluate there: no late mean, rather than one over fewer points)."""
    by_step = {int(r["step"]): r for r in rows if r.get("step") is not None}
    if not at_steps or any(step not in by_step for step in at_steps):
        return None
    points = [by_step[step] for step in at_steps] + [final]
    out = {}
    for key in final:
        values = [p.get(key) for p in points]
        if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
            out[key] = sum(float(v) for v in values) / len(values)
    return out


# ------------------------------------------------------------------------------------------- one run (child)
def run_one(spec_path: str | Path, overwrite: bool = False) -> int:
    """Train the run of ``run_spec.json`` in its directory (resuming; skipped once ``train_done.json`` is there;
    ``overwrite``: from scratch, the earlier run's checkpoints, logs and run info discarded as ``bandpo train
    --overwrite`` discards them), evaluate its final policy and write ``results.json`` (atomically, last)."""
    import torch

    from bandpo_lab.eval.evaluate import evaluate_model_dir
    from bandpo_lab.training.config import TrainConfig
    from bandpo_lab.training.run import train

    spec_path = Path(spec_path)
    spec = json.loads(spec_path.read_text())
    run_dir = spec_path.parent
    if os.environ.get("OMP_NUM_THREADS"):
        torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))
    config = TrainConfig.from_dict(spec["train_config"], source=spec.get("train_source"))
    curves = spec["curves"]
    evals = EvalSpec(**spec["eval"])
    at_steps = evals.at_steps
    start = time.time()
    done_marker = run_dir / TRAIN_DONE_FILE
    if overwrite or not (done_marker.is_file() and (run_dir / MODEL_CONFIG_FILE).is_file()):
        callbacks = []
        if curves.get("every", 0):
            data = eval_dataset(evals, spec["train_config"], curves.get("max_problems"))
            settings = evals.settings(k=curves["k"])
            callbacks.append(_heldout_callback(run_dir / HELDOUT_FILE, data, settings, every=curves["every"]))
        if at_steps:  # the final evaluation's settings, during training
            data = eval_dataset(evals, spec["train_config"], evals.max_problems)
            callbacks.append(
                _heldout_callback(run_dir / AT_STEPS_FILE, data, evals.settings(), steps=at_steps, ends=False)
            )
        train(
            config, resume=not overwrite, overwrite=overwrite, callbacks=callbacks, caller_files=RUN_DIR_FILES
        )
        write_json(done_marker, {"wall_time_s": round(time.time() - start, 2), "finished": time.time()})
    train_info = json.loads(done_marker.read_text())
    eval_start = time.time()
    code = provenance()  # the code that evaluates, recorded before it runs
    data = eval_dataset(evals, spec["train_config"], evals.max_problems)
    # with the attention the run trained with, from its train_config.yaml (bandpo_lab.eval.models.ATTENTION_AUTO)
    result = evaluate_model_dir(run_dir, [data], evals.settings(progress=True))
    metrics = result["overall"]
    extra: dict[str, Any] = {}
    if at_steps:
        from bandpo_lab.training.callbacks import read_metrics

        rows = [r for r in read_metrics(run_dir / AT_STEPS_FILE) if r.get("step") in at_steps]
        extra = {"at_steps": rows, "late": late_metrics(at_steps, rows, metrics)}
    write_json(
        run_dir / RESULTS_FILE,
        {
            "label": spec["label"],
            "method": spec.get("method", spec["clip_rule"]),
            "clip_rule": spec["clip_rule"],
            "params": spec["params"],
            "seed": spec["seed"],
            "fingerprint": spec["fingerprint"],
            "dataset": data.name,
            "settings": result["settings"],
            "metrics": metrics,
            **extra,
            "train_wall_s": train_info.get("wall_time_s"),
            "eval_wall_s": round(time.time() - eval_start, 2),
            "provenance": code,
            "checkout_changed_during_run": code_changed(code, provenance()),
        },
    )
    print(f"bandpo compare: {spec['label']} seed {spec['seed']}: {headline(metrics, evals.k)}", flush=True)
    return 0


def headline(metrics: Mapping[str, Any], k: int) -> str:
    parts = []
    for key in (f"mean@{k}", "pass@1", f"pass@{k}"):
        if metrics.get(key) is not None:
            parts.append(f"{key} {100 * metrics[key]:.1f}%")
    if metrics.get("entropy") is not None:
        parts.append(f"entropy {metrics['entropy']:.3f}")
    return ", ".join(parts) or "no metrics"


def main(argv: Sequence[str]) -> int:
    """``python -m bandpo_lab.experiments.compare.worker [--overwrite] RUN_SPEC.json``: :func:`run_one`."""
    args = list(argv)
    overwrite = args[:1] == [OVERWRITE_FLAG]
    if overwrite:
        args = args[1:]
    if len(args) != 1:
        print(
            f"usage: python -m bandpo_lab.experiments.compare.worker [{OVERWRITE_FLAG}] RUN_SPEC.json (started by "
            "bandpo compare)",
            file=sys.stderr,
        )
        return 2
    return run_one(args[0], overwrite=overwrite)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
