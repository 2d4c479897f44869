"""The comparison's starting policy (bandpo_lab.experiments.compare.baseline): a built-in model name resolves to its
converted directory, so ``bandpo compare`` evaluates the real model's starting policy (it was skipped before: the
name is not a directory)."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("trl")

from bandpo_lab.experiments.compare.baseline import _starting_model
from bandpo_lab.training.config import load_train_config
from helpers import CONFIGS


def test_built_in_model_is_the_converted_directory(smollm2_dir: Path) -> None:
    config = load_train_config(CONFIGS / "smollm2-arith.yaml")
    assert _starting_model(config) == smollm2_dir


def test_a_model_directory_is_itself(tmp_path: Path) -> None:
    config = load_train_config(CONFIGS / "smollm2-arith.yaml", [f"model.path={tmp_path}"])
    assert _starting_model(config) == tmp_path


@pytest.mark.parametrize("attention", ["eager", None])
def test_the_baseline_evaluates_with_the_runs_attention(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, attention: str | None
) -> None:
    """The starting model's folder has no run config, so the baseline passes the training section's attention
    (the runs train and evaluate with it; transformers would pick SDPA for a bare folder), and a baseline evaluated
    with another attention is not reused: the attention is in its fingerprint."""
    import bandpo_lab.eval.evaluate as evaluate
    from bandpo_lab.experiments.compare.baseline import evaluate_baseline
    from bandpo_lab.experiments.compare.config import load_compare_config
    from helpers.tiny import save_countdown_model_dir

    model = save_countdown_model_dir(tmp_path / "model")
    calls: list[str | None] = []

    def fake(model_dir, datasets, settings, **kwargs):
        calls.append(kwargs.get("attn_implementation", "missing"))
        return {"settings": {}, "overall": {"mean@4": 0.5}, "wall_time_s": 0.0}

    monkeypatch.setattr(evaluate, "evaluate_model_dir", fake)
    overrides = {
        "output_dir": str(tmp_path / "out"),
        "train.overrides": {"model.path": str(model), "model.attn_implementation": attention},
        "curves.every": 0,
    }
    first = evaluate_baseline(load_compare_config(None, overrides), progress=False)
    assert calls == [attention]
    other = "sdpa" if attention is None else None
    overrides["train.overrides"]["model.attn_implementation"] = other
    second = evaluate_baseline(load_compare_config(None, overrides), progress=False)
    assert calls == [attention, other] and first["fingerprint"] != second["fingerprint"]
    assert evaluate_baseline(load_compare_config(None, overrides), progress=False) == second  # reused
    assert len(calls) == 2
