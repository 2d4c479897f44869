"""The radius schedule in TRL and ``bandpo train``: ``BandPOConfig``'s ``band_delta_schedule`` / ``band_delta_end`` /
``band_delta_hold_frac`` (validated at config time), the radius each optimizer update uses and logs
(``band/delta``), no KL table built per radius, and a resumed run whose radius is the one its step implies.

The schedule's values are checked against the authors' formulas in tests/losses/test_schedule.py; here, where they
reach TRL's loss.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from helpers import CONFIGS
from helpers.tiny import SMALL_RUN, trl_test_args, warm_start_overrides

pytest.importorskip("trl")

from transformers import TrainerCallback

from bandpo.core import solvers
from bandpo.integrations.trl import BandPOConfig, BandPOTrainer
from bandpo.losses import RadiusSchedule
from bandpo.losses.method import ClipMethod
from bandpo_lab.training.callbacks import read_metrics
from bandpo_lab.training.config import ConfigError, load_train_config
from bandpo_lab.training.methods import METHODS
from bandpo_lab.training.resume import config_changes
from bandpo_lab.training.run import prepare, train

TINY = CONFIGS / "tiny.yaml"
DECAY = {"band_delta": 0.2, "band_delta_schedule": "linear", "band_delta_end": 0.02}


def config(tmp_path: Path, **overrides: Any) -> BandPOConfig:
    """The TRL tests' short off-policy run (``helpers.tiny.trl_test_args``: 4 steps, each logged)."""
    return BandPOConfig(**trl_test_args(tmp_path / "out", **overrides))


# ---- config time --------------------------------------------------------------------------------------------


def test_config_builds_the_schedule_from_the_rules_delta(tmp_path: Path) -> None:
    args = config(
        tmp_path, max_steps=100, band_delta_hold_frac=0.3, **{**DECAY, "band_delta_schedule": "hold_linear"}
    )
    assert args.build_radius_schedule() == RadiusSchedule("hold_then_linear", 0.2, 0.02, 0.3, 100)
    assert (
        config(tmp_path, max_steps=-1, num_train_epochs=2, **DECAY).build_radius_schedule().total_steps
        is None
    )
    default = config(tmp_path)
    assert default.band_delta_schedule == "constant" and default.build_radius_schedule().is_constant
    # the run's header line
    assert (
        METHODS.get("band")
        .describe(config(tmp_path, **DECAY))
        .endswith(", radius linear 0.2 -> 0.02 over 4 steps (BandPOTrainer)")
    )
    assert "radius" not in METHODS.get("band").describe(default)


def test_config_from_command_line(tmp_path: Path) -> None:
    from transformers import HfArgumentParser

    argv = ["--output_dir", str(tmp_path), "--report_to", "none", "--use_cpu", "--max_steps", "10"]
    argv += ["--band_delta", "0.2", "--band_delta_schedule", "cosine", "--band_delta_end", "0.02"]
    (args,) = HfArgumentParser(BandPOConfig).parse_args_into_dataclasses(argv)
    assert args.build_radius_schedule() == RadiusSchedule("cosine", 0.2, 0.02, total_steps=10)


@pytest.mark.parametrize(
    ("overrides", "match"),
    [
        (
            {"band_delta_schedule": "linaer"},
            r"band_delta_schedule: unknown radius schedule 'linaer' \(did you mean 'linear'",
        ),
        (
            {"band_delta_schedule": "linear"},
            r"band_delta_end must be set \(a finite number > 0\) for band_delta_schedule=",
        ),
        ({**DECAY, "band_delta_end": 0.0}, r"band_delta_end must be a finite number > 0, got 0\.0$"),
        ({**DECAY, "band_delta_end": -0.02}, r"band_delta_end must be a finite number > 0, got -0\.02$"),
        ({"band_delta_end": 0.02}, r"band_delta_end=0\.02 has no effect with band_delta_schedule='constant'"),
        (
            {**DECAY, "band_delta_schedule": "hold_then_linear", "band_delta_hold_frac": 1.0},
            r"band_delta_hold_frac must be a finite number in \[0, 1\), got 1\.0$",
        ),
        (
            {**DECAY, "band_delta_hold_frac": 0.3},
            r"band_delta_hold_frac=0\.3 has no effect with band_delta_schedule=",
        ),
        (
            {"clip_rule": "dppo_tv", "band_delta_schedule": "linear", "band_delta_end": 0.02},
            r"band_delta_schedule='linear' sets the radius delta, but clip rule dppo_tv\(.*\) has no delta",
        ),
        (
            {**DECAY, "clip_rule_kwargs": {"method": "table"}},
            r"method='table', which builds one table per radius",
        ),
    ],
)
def test_bad_schedule_is_one_line_at_config_time(tmp_path: Path, overrides: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match) as err:
        config(tmp_path, **overrides)
    assert "\n" not in str(err.value)


def test_train_config_checks_the_schedule_before_loading_a_model(tmp_path: Path) -> None:
    base = [f"output_dir={tmp_path / 'out'}", "report_to=none"]
    loaded = load_train_config(TINY, [*base, "band_delta_schedule=cosine"])
    with pytest.raises(ConfigError, match=r"band_delta_end must be set .* for band_delta_schedule='cosine'"):
        prepare(loaded)
    ok = load_train_config(
        TINY, [*base, "band_delta=0.2", "band_delta_schedule=cosine", "band_delta_end=0.02"]
    )
    assert (
        ok.trainer["band_delta_end"] == 0.02 and prepare(ok).args.build_radius_schedule().total_steps == 1600
    )
    with pytest.raises(ConfigError, match=r"band_delta_schedule='linear' .* is a clip-rule setting, but "):
        load_train_config(TINY, [*base, "method=cispo", "band_delta_schedule=linear"])
    # switching the method drops the inherited schedule with the rule's other parameters
    switched = load_train_config(TINY, [*base, *(f"{k}={v}" for k, v in DECAY.items())]).with_overrides(
        ["clip_rule=grpo"]
    )
    assert "band_delta_schedule" not in switched.trainer and "band_delta_end" not in switched.trainer


def test_resume_with_another_length_changes_a_scheduled_experiment() -> None:
    """The radius of a step depends on max_steps: extending a scheduled run changes it (a constant radius and
    learning rate do not)."""
    decay = [f"{k}={v}" for k, v in DECAY.items()]
    before = load_train_config(TINY, decay).to_dict()
    assert (
        "max_steps"
        in config_changes(before, load_train_config(TINY, [*decay, "max_steps=3200"]).to_dict()).altering
    )
    plain = load_train_config(TINY).to_dict()
    assert (
        "max_steps" in config_changes(plain, load_train_config(TINY, ["max_steps=3200"]).to_dict()).harmless
    )


# ---- training ------------------------------------------------------------------------------------------------


def vowel_reward(completions: list[str], **kwargs: Any) -> list[float]:
    return [float(sum(ch in "aeiou" for ch in c)) for c in completions]


def trainer_of(args: BandPOConfig, model_dir: Path, dataset: Any) -> BandPOTrainer:
    from transformers import AutoTokenizer

    return BandPOTrainer(
        model=str(model_dir),
        reward_funcs=vowel_reward,
        args=args,
        train_dataset=dataset,
        processing_class=AutoTokenizer.from_pretrained(model_dir),
    )


def trained(args: BandPOConfig, model_dir: Path, dataset: Any) -> BandPOTrainer:
    trainer = trainer_of(args, model_dir, dataset)
    trainer.train()
    return trainer


def test_an_evaluation_before_training_uses_the_first_updates_radius(
    tmp_path: Path, tiny_model_dir: Path, tiny_dataset: Any
) -> None:
    """``trainer.evaluate()`` before ``train()`` with a changing radius raised RuntimeError (the state's max_steps is
    0 until train() sets it): the rule is the first update's, over ``args.max_steps``, or the start radius when the
    run's length is given in epochs."""
    trainer = trainer_of(config(tmp_path, **DECAY), tiny_model_dir, tiny_dataset)
    assert trainer.state.max_steps == 0 and trainer.args.max_steps == 4
    assert trainer.step_clip_rule().delta == RadiusSchedule("linear", 0.2, 0.02, total_steps=4).value(1)
    by_epochs = trainer_of(
        config(tmp_path, **DECAY, max_steps=-1, num_train_epochs=1), tiny_model_dir, tiny_dataset
    )
    assert by_epochs.step_clip_rule() == by_epochs.clip_rule and by_epochs.clip_rule.delta == 0.2


def test_each_update_uses_and_logs_the_scheduled_radius_without_building_tables(
    tmp_path: Path, tiny_model_dir: Path, tiny_dataset: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    used: list[tuple[int, Any]] = []
    real_rule_at_step = ClipMethod.rule_at_step

    def spy(self: ClipMethod, step: int) -> Any:
        used.append((step, real_rule_at_step(self, step)))
        return used[-1][1]

    builds: list[int] = []
    real_init = solvers.BoundsTable.__init__

    def counting(self: Any, *args: Any, **kwargs: Any) -> None:
        builds.append(1)
        real_init(self, *args, **kwargs)

    monkeypatch.setattr(ClipMethod, "rule_at_step", spy)
    monkeypatch.setattr(solvers.BoundsTable, "__init__", counting)
    solvers.clear_table_cache()
    trainer = trained(config(tmp_path, **DECAY), tiny_model_dir, tiny_dataset)

    expected = RadiusSchedule("linear", 0.2, 0.02, total_steps=4)
    assert sorted({step for step, _ in used}) == [1, 2, 3, 4]
    for step, rule in used:
        assert rule.delta == expected.value(step) and rule.method == "newton"
    rows = [row for row in trainer.state.log_history if "loss" in row]
    assert [row["step"] for row in rows] == [1, 2, 3, 4]
    assert [row["band/delta"] for row in rows] == pytest.approx([expected.value(k) for k in (1, 2, 3, 4)])
    assert builds == [], "a KL table was built for a scheduled radius"

    constant = trained(config(tmp_path, band_delta=0.07), tiny_model_dir, tiny_dataset)
    assert [row["band/delta"] for row in constant.state.log_history if "loss" in row] == [0.07] * 4
    assert len(builds) == 1  # the constant radius: one table, cached across steps
    solvers.clear_table_cache()


def test_a_rule_without_radius_logs_none(tmp_path: Path, tiny_model_dir: Path, tiny_dataset: Any) -> None:
    trainer = trained(config(tmp_path, clip_rule="grpo", max_steps=1), tiny_model_dir, tiny_dataset)
    assert not any("band/delta" in row for row in trainer.state.log_history)


class InterruptAt(TrainerCallback):
    """Ctrl-C as the update after ``step`` begins (its checkpoint is saved)."""

    def __init__(self, step: int) -> None:
        self.step = step

    def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if state.global_step == self.step:
            raise KeyboardInterrupt


def test_resumed_run_logs_the_radius_its_step_implies(tmp_path: Path, warm_cache: Path) -> None:
    """A run of 4 steps with a decaying radius is interrupted after checkpoint-2 and resumed: steps 3 and 4 log
    the radius of steps 3 and 4 (a trainer that counted from the restart would log steps 1 and 2's)."""
    out = tmp_path / "out"
    overrides = [f"output_dir={out}", *warm_start_overrides(warm_cache), *SMALL_RUN, "max_steps=4"]
    overrides += ["report_to=none", "disable_tqdm=true", *(f"{k}={v}" for k, v in DECAY.items())]
    loaded = load_train_config(TINY, overrides)
    with pytest.raises(KeyboardInterrupt):
        train(loaded, callbacks=[InterruptAt(2)])
    assert [row["step"] for row in read_metrics(out) if "band/delta" in row] == [1, 2]
    assert not (out / "checkpoint-4").exists()

    train(loaded, resume=True)
    rows = [row for row in read_metrics(out) if "band/delta" in row]
    expected = RadiusSchedule("linear", 0.2, 0.02, total_steps=4)
    assert [row["step"] for row in rows] == [1, 2, 3, 4]
    assert [row["band/delta"] for row in rows] == pytest.approx([expected.value(k) for k in (1, 2, 3, 4)])
