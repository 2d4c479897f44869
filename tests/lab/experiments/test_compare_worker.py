"""Tests for bandpo_lab.experiments.compare.worker's late mean and held-out callback (the training and evaluation it runs
are exercised end to end in tests/lab/cli/test_compare_cli.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from bandpo_lab.experiments.compare.worker import late_metrics


def test_the_late_mean_averages_each_metric_over_the_steps_and_the_final_evaluation() -> None:
    rows = [
        {"step": 40, "time": 1.0, "mean@8": 0.2, "pass@8": 0.5, "entropy": 1.0, "note": "x"},
        {"step": 20, "time": 2.0, "mean@8": 0.1, "pass@8": 0.4, "entropy": 2.0},
        {"step": 30, "time": 3.0, "mean@8": 0.9, "pass@8": 0.9, "entropy": 0.1},  # not a registered step
    ]
    final = {"mean@8": 0.6, "pass@8": 0.9, "entropy": 0.5, "n_problems": 200, "flag": True}
    late = late_metrics([20, 40], rows, final)
    assert late is not None
    assert late["mean@8"] == pytest.approx((0.1 + 0.2 + 0.6) / 3)
    assert late["pass@8"] == pytest.approx((0.4 + 0.5 + 0.9) / 3)
    assert late["entropy"] == pytest.approx((2.0 + 1.0 + 0.5) / 3)
    # only metrics every point has, and no booleans
    assert set(late) == {"mean@8", "pass@8", "entropy"}


def test_a_missing_step_gives_no_late_mean_rather_than_one_over_fewer_points() -> None:
    final = {"mean@8": 0.6}
    assert late_metrics([20, 40], [{"step": 20, "mean@8": 0.1}], final) is None
    assert late_metrics([], [{"step": 20, "mean@8": 0.1}], final) is None


class _Policy:
    """Stands in for the model: ``step`` is the optimizer step its weights are at."""

    step = 0


def _drive(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    max_steps: int,
    start: int = 0,
    after: Any = None,
    **kwargs: Any,
) -> list[tuple]:
    """transformers' own callback handler and flow callback around a held-out callback, driven the way ``Trainer``
    drives them (step begin, optimizer step, step end, then checkpoint and ``on_save`` when the flow callback asks
    for one, every 2 steps and at the last); a run resumed at ``start`` begins with the weights of that step.
    ``after``: a callback that runs after the held-out one. Returns the events in order: ``("save", step)`` and
    ``("eval", row step, the evaluated weights' step)``."""
    from transformers import TrainerControl, TrainerState, TrainingArguments
    from transformers.trainer_callback import CallbackHandler, DefaultFlowCallback

    from bandpo_lab.experiments.compare import worker

    path = tmp_path / "evals.jsonl"
    kept = [r for r in _rows(path) if r["step"] <= start] if start else []  # what the resumed run keeps
    events: list[tuple] = []
    policy = _Policy()
    policy.step = start

    def evaluate(model: _Policy, tokenizer: Any, datasets: Any, settings: Any) -> dict[str, Any]:
        events.append(("eval", model.step))
        return {"overall": {"weights": model.step}}

    monkeypatch.setattr("bandpo_lab.eval.evaluate.evaluate_model", evaluate)
    callback = worker._heldout_callback(path, "data", "settings", **kwargs)
    args = TrainingArguments(output_dir=str(tmp_path), save_strategy="steps", save_steps=2, report_to="none")
    callbacks = [DefaultFlowCallback(), callback, *([after] if after is not None else [])]
    handler = CallbackHandler(callbacks, policy, "tokenizer", None, None)
    state = TrainerState(max_steps=max_steps, save_steps=2, global_step=start)
    control = handler.on_train_begin(args, state, TrainerControl())
    for _ in range(start, max_steps):
        control = handler.on_step_begin(args, state, control)
        state.global_step += 1
        policy.step = state.global_step
        control = handler.on_step_end(args, state, control)
        if control.should_save:
            events.append(("save", state.global_step))
            control = handler.on_save(args, state, control)
        if control.should_training_stop:
            break
    handler.on_train_end(args, state, control)
    rows = iter(_rows(path)[len(kept) :])
    out = []
    for event in events:
        if event[0] == "eval":
            row = next(rows)
            assert row["weights"] == event[1]  # the row holds what was evaluated
            event = ("eval", row["step"], event[1])
        out.append(event)
    assert next(rows, None) is None
    return out


def _rows(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.is_file() else []


def test_an_evaluation_at_a_checkpoint_step_runs_after_the_checkpoint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A stop during the evaluation then resumes from that step's checkpoint, not the one before; steps without a
    checkpoint evaluate at once; each evaluation sees the weights of its own step."""
    events = _drive(tmp_path, monkeypatch, max_steps=5, steps=[1, 2, 4])
    assert events == [
        ("eval", 0, 0),  # ends: the starting policy
        ("eval", 1, 1),
        ("save", 2),
        ("eval", 2, 2),
        ("save", 4),
        ("eval", 4, 4),
        (
            "eval",
            5,
            5,
        ),  # ends: the last step, before the final checkpoint (a run with it resumes no training)
        ("save", 5),
    ]
    (tmp_path / "curves").mkdir()
    curves = _drive(tmp_path / "curves", monkeypatch, max_steps=3, every=1, ends=False)
    assert curves == [("eval", 1, 1), ("save", 2), ("eval", 2, 2), ("eval", 3, 3), ("save", 3)]


def test_a_run_resumed_at_a_due_step_without_its_row_evaluates_it_first(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The stop came after the checkpoint of step 2 and before its row: the resumed run evaluates step 2 with the
    checkpoint's weights, then goes on; a due step whose row exists is not evaluated again, and rows after the
    resumed step are dropped."""
    path = tmp_path / "evals.jsonl"
    path.write_text(
        json.dumps({"step": 1, "weights": 1}) + "\n" + json.dumps({"step": 3, "weights": 3}) + "\n"
    )
    events = _drive(tmp_path, monkeypatch, max_steps=5, start=2, steps=[2, 3, 4], ends=False)
    assert events == [("eval", 2, 2), ("eval", 3, 3), ("save", 4), ("eval", 4, 4), ("save", 5)]
    assert [(r["step"], r["weights"]) for r in _rows(path)] == [(1, 1), (2, 2), (3, 3), (4, 4)]
    again = tmp_path / "again"
    again.mkdir()
    (again / "evals.jsonl").write_text(json.dumps({"step": 2, "weights": 2}) + "\n")
    assert _drive(again, monkeypatch, max_steps=5, start=2, steps=[2, 3, 4], ends=False) == [
        ("eval", 3, 3),
        ("save", 4),
        ("eval", 4, 4),
        ("save", 5),
    ]


def test_an_evaluation_waiting_for_a_save_that_a_later_callback_cancels_runs_before_the_next_update(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The held-out callback saw ``should_save`` and waited; a callback after it cancelled the save: the evaluation
    runs at the next step's begin, still on the weights of its own step, and one still waiting at the end of
    training runs then."""
    from transformers import TrainerCallback

    class NoSaves(TrainerCallback):
        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            control.should_save = False

    events = _drive(tmp_path, monkeypatch, max_steps=5, after=NoSaves(), steps=[2, 4], ends=False)
    assert events == [("eval", 2, 2), ("eval", 4, 4)]  # no saves; each with its step's weights

    class StopNow(TrainerCallback):  # stops training at step 2 without its checkpoint (as early stopping may)
        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            if state.global_step == 2:
                control.should_save = False
                control.should_training_stop = True

    (tmp_path / "end").mkdir()
    assert _drive(tmp_path / "end", monkeypatch, max_steps=4, after=StopNow(), steps=[2], ends=False) == [
        ("eval", 2, 2)
    ]


@pytest.mark.parametrize("overwrite", [False, True])
def test_a_run_retrained_by_redo_trains_as_train_overwrite_does(
    overwrite: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--redo`` removed the run's whole folder, the user's files in it too; now its process trains with
    ``overwrite`` (``bandpo train --overwrite``'s discard of the earlier run), even where a finished run's
    ``train_done.json`` is left; without, it resumes."""
    from synthetic_runs import CONFIGS

    from bandpo_lab.experiments.compare import load_compare_config, plan_runs, worker

    config = load_compare_config(
        CONFIGS / "compare-tiny.yaml",
        [
            f"output_dir={tmp_path}",
            "seeds=[0]",
            "baseline=false",
            "curves.every=0",
            "methods=[{method: grpo}]",
        ],
    )
    plan = plan_runs(config)[0]
    plan.run_dir.mkdir(parents=True)
    spec = plan.run_dir / "run_spec.json"
    spec.write_text(json.dumps(plan.spec(config)))
    calls: list[dict[str, Any]] = []

    class Stop(Exception):
        pass

    def train(config: Any, **kwargs: Any) -> None:
        calls.append(kwargs)
        raise Stop

    monkeypatch.setattr("bandpo_lab.training.run.train", train)
    with pytest.raises(Stop):
        worker.main([*(["--overwrite"] if overwrite else []), str(spec)])
    assert (calls[0]["resume"], calls[0]["overwrite"]) == (not overwrite, overwrite)
    (plan.run_dir / "train_done.json").write_text("{}")
    (plan.run_dir / "config.json").write_text("{}")
    if overwrite:
        with pytest.raises(Stop):
            worker.run_one(spec, overwrite=True)
        assert len(calls) == 2
