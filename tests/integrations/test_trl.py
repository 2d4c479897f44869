"""Tests for ``bandpo.integrations.trl``'s trainer: the bounds TRL applies, training with every clip rule on a tiny
local Qwen2, metrics, the on-policy warning, the step guard, and a two-process run through ``accelerate launch``.
The version pin and ``BandPOConfig`` are tested in ``test_trl_config.py``.
"""

from __future__ import annotations

import json
import math
import re
import sys
import warnings
from pathlib import Path
from typing import Any

import pytest

from helpers.launch import accelerate_launch
from helpers.tiny import trl_test_args

pytest.importorskip("trl")

import torch
from torch import Tensor

from bandpo import CLIP_RULES, band_bounds
from bandpo.integrations import trl as bandpo_trl
from bandpo.integrations.trl import (
    BandPOConfig,
    BandPOTrainer,
    OnPolicyClipWarning,
)

OUR_METRICS = (
    "clip/frac",
    "clip/frac_up",
    "clip/frac_down",
    "clip/frac_out",
    "clip/frac_up/p0.0-0.2",
    "clip/frac_down/p0.8-1.0",
    "tokens/share/p0.0-0.2",
    "clip/tail_share",
    "clip/tail_share_up",
    "band/lo_mean",
    "band/hi_mean",
    "band/hi_max",
    "policy/ppo_kl",
    "policy/entropy",
    "tokens/count",
)


def vowel_digit_reward(completions: list[str], **kwargs: Any) -> list[float]:
    """Number of vowels and digits in the completion: spread inside every group, so advantages are nonzero."""
    return [float(sum(ch in "aeiou0123456789" for ch in c)) for c in completions]


def make_config(tmp_path: Path, **overrides: Any) -> BandPOConfig:
    """Off-policy by default: 2 mini-batches x 2 iterations per generation, 1 micro-step per optimizer step, so
    steps 2-4 of each generation update a policy that has moved; a large learning rate makes clipping bind."""
    return BandPOConfig(**trl_test_args(tmp_path / "out", **overrides))


def make_trainer(args: BandPOConfig, model: Any, tokenizer: Any, dataset: Any) -> BandPOTrainer:
    return BandPOTrainer(
        model=model,
        reward_funcs=vowel_digit_reward,
        args=args,
        train_dataset=dataset,
        processing_class=tokenizer,
    )


def harness_trainer(
    cls: type[BandPOTrainer],
    precision: str,
    args: BandPOConfig,
    model: Any,
    tokenizer: Any,
    dataset: Any,
    on_gpu: bool = False,
) -> BandPOTrainer:
    """``cls`` as ``bandpo train`` builds it (the harness's trainer mixin) at ``precision`` (bandpo_lab.runtime), on a
    GPU with ``on_gpu`` (precision ``framework``: TRL's own)."""
    from bandpo_lab.runtime import Precision, resolve_precision
    from bandpo_lab.training.run import _trainer_class

    trainer = _trainer_class(cls)(
        model=model,
        reward_funcs=vowel_digit_reward,
        args=args,
        train_dataset=dataset,
        processing_class=tokenizer,
    )
    # bf16's contexts on any CPU: resolve_precision refuses bf16 where the CPU has no native bf16 (the kernels run)
    if precision == "bf16" and not on_gpu:
        trainer.precision = Precision("bf16", "bf16", "test")
    else:
        trainer.precision = resolve_precision(precision, on_gpu=on_gpu)
    return trainer


# ----------------------------------------------------------------------------------------------------------------
# Trainer


def test_trainer_needs_bandpo_config(
    tmp_path: Path, tiny_model: Any, tiny_tokenizer: Any, tiny_dataset: Any
) -> None:
    from trl import GRPOConfig

    args = GRPOConfig(output_dir=str(tmp_path), report_to="none", use_cpu=True)
    with pytest.raises(TypeError, match=r"args must be a BandPOConfig.*got GRPOConfig"):
        BandPOTrainer(
            model=tiny_model, reward_funcs=vowel_digit_reward, args=args, train_dataset=tiny_dataset
        )


def test_trainer_takes_grpo_trainers_positional_arguments(
    tmp_path: Path, tiny_model: Any, tiny_tokenizer: Any, tiny_dataset: Any
) -> None:
    """``BandPOTrainer(model, reward, args, train_dataset)``, as GRPOTrainer takes them, raised "takes from 2 to 4
    positional arguments but 5 were given"."""
    trainer = BandPOTrainer(
        tiny_model, vowel_digit_reward, make_config(tmp_path), tiny_dataset, None, tiny_tokenizer
    )
    assert trainer.train_dataset is tiny_dataset and trainer.processing_class is tiny_tokenizer


def test_on_policy_warning(
    tmp_path: Path, tiny_model_dir: Path, tiny_tokenizer: Any, tiny_dataset: Any
) -> None:
    from transformers import AutoModelForCausalLM

    on_policy = make_config(tmp_path, steps_per_generation=None, num_iterations=1)
    with pytest.warns(OnPolicyClipWarning, match=r"num_iterations=1, steps_per_generation=1") as record:
        make_trainer(
            on_policy, AutoModelForCausalLM.from_pretrained(tiny_model_dir), tiny_tokenizer, tiny_dataset
        )
    assert sum(issubclass(w.category, OnPolicyClipWarning) for w in record) == 1
    assert "never binds" in str(record[0].message)

    with warnings.catch_warnings():
        warnings.simplefilter("error", OnPolicyClipWarning)
        make_trainer(
            make_config(tmp_path),
            AutoModelForCausalLM.from_pretrained(tiny_model_dir),
            tiny_tokenizer,
            tiny_dataset,
        )


def _log_rows(trainer: BandPOTrainer) -> list[dict[str, float]]:
    return [row for row in trainer.state.log_history if "loss" in row]


@pytest.mark.slow
@pytest.mark.parametrize("rule", CLIP_RULES.names())
def test_train_every_clip_rule(
    tmp_path: Path, rule: str, tiny_model: Any, tiny_tokenizer: Any, tiny_dataset: Any
) -> None:
    args = make_config(tmp_path, clip_rule=rule)
    trainer = make_trainer(args, tiny_model, tiny_tokenizer, tiny_dataset)
    before = {n: p.detach().clone() for n, p in trainer.model.named_parameters()}
    trainer.train()

    rows = _log_rows(trainer)
    assert len(rows) == args.max_steps
    assert all(math.isfinite(row["loss"]) for row in rows)
    changed = [n for n, p in trainer.model.named_parameters() if not torch.equal(p.detach(), before[n])]
    assert changed, "no parameter changed"
    for row in rows:
        missing = [k for k in (*OUR_METRICS, "entropy", "clip_ratio/region_mean") if k not in row]
        assert not missing, f"metrics missing from the log: {missing}"
        # TRL's own clip counter runs on the bounds we installed: it agrees with ours.
        assert row["clip/frac"] == pytest.approx(row["clip_ratio/region_mean"], abs=1e-6)
        assert row["clip/frac_up"] == pytest.approx(row["clip_ratio/high_mean"], abs=1e-6)
        assert row["clip/frac_down"] == pytest.approx(row["clip_ratio/low_mean"], abs=1e-6)
        assert row["policy/entropy"] == pytest.approx(row["entropy"], rel=1e-5)
    assert rows[0]["clip/frac_out"] == 0.0  # first update of a generation: ratio exactly 1
    assert max(row["clip/frac_out"] for row in rows) > 0, "clipping never became active"
    assert max(row["clip/frac"] for row in rows) > 0
    # The trainer's scalar epsilons are restored after each loss call.
    assert isinstance(trainer.epsilon_low, float) and isinstance(trainer.epsilon_high, float)


@pytest.mark.slow
def test_train_keeps_trl_features(
    tmp_path: Path, tiny_model_dir: Path, tiny_tokenizer: Any, tiny_dataset: Any
) -> None:
    """TRL's KL term, entropy mask, entropy bonus, two-sided clip (at Band's cap: a lower ``delta`` is refused)
    and another aggregation still run with Band."""

    args = make_config(
        tmp_path,
        loss_type="grpo",
        beta=0.01,
        top_entropy_quantile=0.5,
        entropy_coef=0.01,
        delta=10.0,
        clip_rule="band",
        band_divergence="tv",
        band_delta=0.1,
        model_init_kwargs={"dtype": torch.float32},
    )
    trainer = make_trainer(args, str(tiny_model_dir), tiny_tokenizer, tiny_dataset)
    trainer.train()
    rows = _log_rows(trainer)
    assert len(rows) == args.max_steps
    for row in rows:
        assert math.isfinite(row["loss"])
        assert all(k in row for k in (*OUR_METRICS, "kl", "entropy_coef"))
        assert row["clip/frac"] == pytest.approx(row["clip_ratio/region_mean"], abs=1e-6)
    assert max(row["kl"] for row in rows) > 0
    assert max(row["clip/frac_out"] for row in rows) > 0


class ClampSpy:
    """Records the tensor bounds of ``torch.clamp`` calls made by ``GRPOTrainer._compute_loss`` itself,
    with the parent's local old log-probs, mask and entropies at that moment."""

    def __init__(self) -> None:
        self.real = torch.clamp
        self.records: list[dict[str, Tensor]] = []

    def __call__(self, input: Tensor, min: Any = None, max: Any = None, *args: Any, **kwargs: Any) -> Tensor:
        frame = sys._getframe(1)
        code = frame.f_code
        if (
            code.co_name == "_compute_loss"
            and code.co_filename.endswith("grpo_trainer.py")
            and isinstance(min, Tensor)
            and isinstance(max, Tensor)
        ):
            loc = frame.f_locals
            self.records.append(
                {
                    "lo": min.detach().clone(),
                    "hi": max.detach().clone(),
                    "old": loc["old_per_token_logps"].detach().clone(),
                    "current": loc["per_token_logps"].detach().clone(),
                    "mask": loc["mask"].bool().clone(),
                    "entropies": loc["entropies"].detach().clone(),
                }
            )
        return self.real(input, min, max, *args, **kwargs)


@pytest.mark.parametrize(
    ("rule", "off_policy"), [("band", True), ("band", False), ("adaptive_band", True), ("dcpo", True)]
)
def test_bounds_applied_by_trl_equal_band_bounds(
    tmp_path: Path,
    rule: str,
    off_policy: bool,
    tiny_model: Any,
    tiny_tokenizer: Any,
    tiny_dataset: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The tensor bounds TRL's own ``_compute_loss`` clamps with are the rule's bounds of TRL's old log-probs
    (its entropies for the adaptive radius), on every step, on- and off-policy.

    Wiring test: the expected bounds come from the same ``band_bounds`` / ``rule.bounds`` the hook calls, so this
    proves the hook feeds TRL's clamp the right tokens; the bounds' numerics are checked against an independent
    mpmath reference in tests/core/test_bounds.py::test_float64_matches_mpmath_reference, DCPO's and the adaptive radius's
    formulas in tests/losses/test_clip_rules.py::test_dcpo_formula and
    tests/losses/test_clip_rules.py::test_adaptive_band_radius_and_bounds.
    """
    overrides: dict[str, Any] = {"clip_rule": rule, "max_steps": 3}
    if not off_policy:  # TRL leaves old_per_token_logps None and uses the current log-probs, detached
        overrides.update(steps_per_generation=None, num_iterations=1)
    args = make_config(tmp_path, **overrides)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", OnPolicyClipWarning)
        trainer = make_trainer(args, tiny_model, tiny_tokenizer, tiny_dataset)
    spy = ClampSpy()
    monkeypatch.setattr(torch, "clamp", spy)
    trainer.train()
    monkeypatch.undo()

    assert len(spy.records) == args.max_steps, "TRL's clamp did not receive tensor bounds on every step"
    rule_obj = trainer.clip_rule
    for rec in spy.records:
        mask, old = rec["mask"], rec["old"]
        assert rec["lo"].shape == old.shape == rec["hi"].shape
        if not off_policy:
            torch.testing.assert_close(old, rec["current"], rtol=0, atol=0)
        if rule == "band":
            lo, hi = band_bounds(old, 0.05, "kl", cap=10.0)
        elif rule == "adaptive_band":
            lo, hi = band_bounds(old, rule_obj.radius(rec["entropies"]), "kl", cap=10.0)
        else:
            lo, hi = rule_obj.bounds(old)
        torch.testing.assert_close(rec["lo"][mask], lo[mask], rtol=0, atol=2e-7)
        torch.testing.assert_close(rec["hi"][mask], hi[mask], rtol=0, atol=2e-6)


def test_missing_hook_raises(
    tmp_path: Path, tiny_model: Any, tiny_tokenizer: Any, tiny_dataset: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """If TRL's loss stops calling the forward we hook, the step fails instead of using TRL's fixed clip."""
    from trl import GRPOTrainer

    trainer = make_trainer(make_config(tmp_path, max_steps=1), tiny_model, tiny_tokenizer, tiny_dataset)
    monkeypatch.setattr(
        trainer,
        "_get_per_token_logps_and_entropies",
        GRPOTrainer._get_per_token_logps_and_entropies.__get__(trainer),
    )
    with pytest.raises(RuntimeError, match="bounds were not applied"):
        trainer.train()


class _LossAroundCompute(BandPOTrainer):
    """A user override whose ``compute_loss`` calls TRL's loss directly: TRL's fixed clip, no Band bounds."""

    def compute_loss(
        self, model: Any, inputs: Any, return_outputs: bool = False, num_items_in_batch: Any = None
    ) -> Tensor:
        from trl import GRPOTrainer

        return GRPOTrainer._compute_loss(self, model, inputs)


class _StepAroundTrainingStep(_LossAroundCompute):
    """Also bypasses ``BandPOTrainer.training_step``: only the optimizer-step callback can notice."""

    def training_step(self, model: Any, inputs: Any, num_items_in_batch: Any = None) -> Tensor:
        from trl import GRPOTrainer

        return GRPOTrainer.training_step(self, model, inputs, num_items_in_batch)


@pytest.mark.parametrize(
    ("trainer_cls", "what"),
    [
        (_LossAroundCompute, r"training_step computed this micro-batch's loss without going through"),
        (_StepAroundTrainingStep, r"no loss computed for it since the previous optimizer step went through"),
    ],
    ids=["compute_loss_override", "training_step_override"],
)
def test_step_whose_loss_skips_the_bounds_raises(
    tmp_path: Path, trainer_cls: type, what: str, tiny_model: Any, tiny_tokenizer: Any, tiny_dataset: Any
) -> None:
    """A training step whose loss never reached ``_compute_loss`` stops before the optimizer step, naming the
    TRL version, instead of training with TRL's fixed clip."""
    import trl

    args = make_config(tmp_path, max_steps=2, gradient_accumulation_steps=2, steps_per_generation=4)
    trainer = trainer_cls(
        model=tiny_model,
        reward_funcs=vowel_digit_reward,
        args=args,
        train_dataset=tiny_dataset,
        processing_class=tiny_tokenizer,
    )
    before = {n: p.detach().clone() for n, p in trainer.model.named_parameters()}
    message = (
        rf"Band bounds were not applied to optimizer step 1 \(trl {re.escape(trl.__version__)}\): {what}"
    )
    with pytest.raises(bandpo_trl.BandBoundsNotAppliedError, match=message) as info:
        trainer.train()
    assert "band(divergence=kl" in str(info.value) and "stops before the optimizer step" in str(info.value)
    assert trainer.state.global_step == 0
    assert all(torch.equal(p.detach(), before[n]) for n, p in trainer.model.named_parameters())


def test_step_guard_counts_every_micro_batch(
    tmp_path: Path, tiny_model: Any, tiny_tokenizer: Any, tiny_dataset: Any
) -> None:
    """With gradient accumulation, each micro-batch's loss goes through the hook and each optimizer step passes
    the guard; the counter is reset at every optimizer step."""
    args = make_config(tmp_path, max_steps=2, gradient_accumulation_steps=2, steps_per_generation=4)
    trainer = make_trainer(args, tiny_model, tiny_tokenizer, tiny_dataset)
    seen: list[int] = []
    real = bandpo_trl._StepGuard.on_pre_optimizer_step

    def spy(self: Any, *a: Any, **k: Any) -> None:
        seen.append(self._trainer()._bandpo_bounded_losses)
        real(self, *a, **k)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(bandpo_trl._StepGuard, "on_pre_optimizer_step", spy)
        trainer.train()
    assert trainer.state.global_step == 2
    assert seen == [2, 2]
    assert trainer._bandpo_bounded_losses == 0


@pytest.mark.parametrize("level", ["basic", "none"])
def test_lighter_diagnostics_log_fewer_metrics(
    tmp_path: Path, level: str, tiny_model: Any, tiny_tokenizer: Any, tiny_dataset: Any
) -> None:
    """``diagnostics="basic"`` logs the clip fractions, ``policy/ppo_kl``, ``policy/entropy`` and ``tokens/count``
    only, ``"none"`` only ``band/delta``
    (TRL's own metrics stay at every level)."""
    trainer = make_trainer(
        make_config(tmp_path, max_steps=2, diagnostics=level), tiny_model, tiny_tokenizer, tiny_dataset
    )
    trainer.train()
    logged = {k for row in trainer.state.log_history for k in row}
    ours = {k for k in logged if k.split("/")[0] in ("clip", "band", "policy", "tokens")}
    basic = {"clip/frac", "clip/frac_up", "clip/frac_down", "policy/ppo_kl", "policy/entropy", "tokens/count"}
    assert ours == (basic if level == "basic" else set()) | {"band/delta"}
    assert "clip_ratio/region_mean" in logged  # TRL's own


def test_liger_kernel_still_applies_the_bounds(
    tmp_path: Path, tiny_model: Any, tiny_tokenizer: Any, tiny_dataset: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``use_liger_kernel=True``: TRL 1.16 patches the model with Liger's layer kernels and still computes the
    loss in ``_compute_loss``, so the bounds TRL clamps with are Band's on every step (older TRL dispatched to a
    fused Liger loss that would have bypassed them; the step guard would raise).

    Liger's kernels are Triton kernels, which have no CPU driver: on CPU the layer kernels are switched off in
    ``liger_kernel_config``, so the test covers TRL's Liger code path (the trainer applies Liger to the model,
    the loss dispatch), not the kernels' numerics.

    Wiring test: the expected bounds come from the ``band_bounds`` the hook calls; their numerics are checked
    against an independent mpmath reference in tests/core/test_bounds.py::test_float64_matches_mpmath_reference.
    """
    pytest.importorskip(
        "liger_kernel", reason="liger-kernel is not installed (pip install '.[dev]' in bandpo's clone)"
    )
    import transformers.trainer

    applied: list[Any] = []
    real_apply = transformers.trainer.apply_liger_kernel

    def apply_spy(model: Any, kernel_config: Any) -> None:
        applied.append(kernel_config)
        real_apply(model, kernel_config)

    monkeypatch.setattr(transformers.trainer, "apply_liger_kernel", apply_spy)
    kernels_off = {"rope": False, "rms_norm": False, "swiglu": False}  # Triton kernels cannot run on CPU
    args = make_config(tmp_path, max_steps=3, use_liger_kernel=True, liger_kernel_config=kernels_off)
    with warnings.catch_warnings():
        warnings.filterwarnings(
            "ignore", message="`use_liger_kernel=True` is deprecated", category=FutureWarning
        )
        trainer = make_trainer(args, tiny_model, tiny_tokenizer, tiny_dataset)
    spy = ClampSpy()
    monkeypatch.setattr(torch, "clamp", spy)
    trainer.train()
    monkeypatch.setattr(torch, "clamp", spy.real)

    assert applied == [
        {**kernels_off, "fused_linear_cross_entropy": False}
    ]  # TRL forces the layer kernels only
    assert trainer.state.global_step == args.max_steps
    assert len(spy.records) == args.max_steps, "TRL's clamp did not receive tensor bounds on every step"
    for rec in spy.records:
        mask = rec["mask"]
        lo, hi = band_bounds(rec["old"], 0.05, "kl", cap=10.0)
        torch.testing.assert_close(rec["lo"][mask], lo[mask], rtol=0, atol=2e-7)
        torch.testing.assert_close(rec["hi"][mask], hi[mask], rtol=0, atol=2e-6)


# ----------------------------------------------------------------------------------------------------------------
# Two processes (accelerate launch, CPU, gloo)

MULTI_PROCESS_SCRIPT = '''
"""Two-process BandPO run (written by tests/integrations/test_trl.py)."""
import json
import sys

import torch
from datasets import Dataset
from transformers import AutoModelForCausalLM, AutoTokenizer

from bandpo.integrations.trl import BandPOConfig, BandPOTrainer

model_dir, out_dir = sys.argv[1], sys.argv[2]


def reward(completions, **kwargs):
    return [float(sum(ch in "aeiou0123456789" for ch in c)) for c in completions]


args = BandPOConfig(
    output_dir=out_dir, clip_rule="band", per_device_train_batch_size=4, num_generations=4,
    steps_per_generation=2, num_iterations=2, max_completion_length=8, learning_rate=3e-2,
    lr_scheduler_type="constant", max_steps=4, logging_steps=1, report_to="none", save_strategy="no",
    use_cpu=True, seed=0, disable_tqdm=True,
)
trainer = BandPOTrainer(
    model=AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32),
    reward_funcs=reward,
    args=args,
    train_dataset=Dataset.from_dict({"prompt": [f"{i}+{i + 1}=" for i in range(16)]}),
    processing_class=AutoTokenizer.from_pretrained(model_dir),
)
trainer.train()
if trainer.accelerator.is_main_process:
    with open(f"{out_dir}/result.json", "w") as f:
        json.dump({"num_processes": trainer.accelerator.num_processes, "log_history": trainer.state.log_history}, f)
torch.distributed.destroy_process_group()  # else Gloo's threads may abort the exit (SIGABRT) on a loaded machine
'''


@pytest.mark.slow
def test_two_processes_accelerate_launch(tmp_path: Path, tiny_model_dir: Path) -> None:
    script = tmp_path / "bandpo_two_procs.py"
    script.write_text(MULTI_PROCESS_SCRIPT)
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    proc = accelerate_launch([str(script), str(tiny_model_dir), str(out_dir)], timeout=900)
    assert proc.returncode == 0, f"accelerate launch failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}"

    result = json.loads((out_dir / "result.json").read_text())
    assert result["num_processes"] == 2
    rows = [row for row in result["log_history"] if "loss" in row]
    assert len(rows) == 4
    for row in rows:
        assert math.isfinite(row["loss"])
        assert all(k in row for k in OUR_METRICS)
        # Ours are computed on the gathered tokens of both processes, TRL's by an all-reduce of sums and counts:
        # equal only if both are global.
        assert row["clip/frac"] == pytest.approx(row["clip_ratio/region_mean"], abs=1e-6)
        assert row["policy/entropy"] == pytest.approx(row["entropy"], rel=1e-5)
    assert max(row["clip/frac_out"] for row in rows) > 0


@pytest.mark.parametrize("precision", ["float32", "bf16"])
def test_first_update_of_a_round_has_ratio_exactly_one(
    tmp_path: Path,
    precision: str,
    tiny_model: Any,
    tiny_tokenizer: Any,
    tiny_dataset: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The old log-probs of a generation round are computed on the micro-batches the updates use, so the first
    update of every round sees ratio exactly 1 (bit for bit), in float32 and in bf16 (bf16 sampling and backward,
    ``bandpo_lab.runtime``); later updates of the round see a moved policy (the ratio differs from 1 somewhere).
    On this tiny model TRL's own layout happens to give the same bits too; the layout itself is checked by
    test_old_log_probs_use_the_training_micro_batches."""
    # 2 mini-batches x 2 iterations per round: rounds start at steps 0 and 4
    args = make_config(tmp_path, max_steps=6)
    trainer = harness_trainer(BandPOTrainer, precision, args, tiny_model, tiny_tokenizer, tiny_dataset)
    spy = ClampSpy()
    monkeypatch.setattr(torch, "clamp", spy)
    trainer.train()
    monkeypatch.undo()
    assert_rounds_open_at_ratio_one(trainer, spy, steps=6, per_round=4)


def assert_rounds_open_at_ratio_one(
    trainer: BandPOTrainer, spy: ClampSpy, steps: int, per_round: int
) -> None:
    """``steps`` loss calls recorded, the tokens behind each step's logged shares the recorded mask's, every old
    log-prob filled, the ratio exactly 1 (bit for bit) at the first update of each round of ``per_round`` updates
    and not 1 somewhere at the others (the policy moved)."""
    assert len(spy.records) == steps
    counts = [row["tokens/count"] for row in _log_rows(trainer)]
    assert counts == [float(rec["mask"].sum()) for rec in spy.records]  # the tokens behind each step's shares
    for step, rec in enumerate(spy.records):
        mask = rec["mask"]
        assert not torch.isnan(rec["old"][mask]).any(), f"step {step}: a deferred old log-prob was not filled"
        diff = (rec["current"] - rec["old"])[mask].abs().max().item()
        if step % per_round == 0:
            assert diff == 0.0, f"step {step} opens a round: ratio must be exactly 1, max |log r| = {diff}"
        else:
            assert diff > 0.0, f"step {step}: the policy moved (lr 3e-2), the ratio cannot be exactly 1"


def test_old_log_probs_equal_trl_own_up_to_layout(
    tmp_path: Path, tiny_model: Any, tiny_tokenizer: Any, tiny_dataset: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The deferred old log-probs are the ones TRL computes over the whole generation batch (to float32
    rounding): only the batch layout differs. Reference: the same round with the deferral switched off."""
    records = {}
    for defer in (True, False):
        model = type(tiny_model).from_pretrained(tiny_model.config._name_or_path, dtype=torch.float32)
        args = make_config(tmp_path / str(defer), max_steps=1)
        trainer = make_trainer(args, model, tiny_tokenizer, tiny_dataset)
        if not defer:
            monkeypatch.setattr(
                BandPOTrainer,
                "_generate_and_score_completions",
                bandpo_trl.GRPOTrainer._generate_and_score_completions,
            )
        spy = ClampSpy()
        monkeypatch.setattr(torch, "clamp", spy)
        trainer.train()
        monkeypatch.undo()
        records[defer] = spy.records[0]
    a, b = records[True], records[False]
    mask = a["mask"]
    assert torch.equal(mask, b["mask"])
    torch.testing.assert_close(a["old"][mask], b["old"][mask], rtol=0, atol=1e-5)


def test_old_log_probs_use_the_training_micro_batches(
    tmp_path: Path, tiny_model: Any, tiny_tokenizer: Any, tiny_dataset: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every forward that gives old log-probs runs on exactly the tensors (rows, order, padding) of a training
    forward of the same round, and the old log-probs of a round are computed once, before its first update: the
    micro-batch of the round's first optimizer step takes its own from its training forward (no extra pass)."""
    calls: list[tuple[bool, Tensor, Tensor]] = []
    real = bandpo_trl.GRPOTrainer._get_per_token_logps_and_entropies

    def spy(self: Any, model: Any, input_ids: Tensor, attention_mask: Tensor, *a: Any, **k: Any) -> Any:
        calls.append((torch.is_grad_enabled(), input_ids.clone(), attention_mask.clone()))
        return real(self, model, input_ids, attention_mask, *a, **k)

    monkeypatch.setattr(bandpo_trl.GRPOTrainer, "_get_per_token_logps_and_entropies", spy)
    args = make_config(tmp_path, max_steps=8)  # two rounds of 2 micro-batches x 2 iterations
    make_trainer(args, tiny_model, tiny_tokenizer, tiny_dataset).train()
    kinds = ["train" if grad else "old" for grad, _, _ in calls]
    assert kinds == ["old"] + ["train"] * 4 + ["old"] + ["train"] * 4
    for start in (0, 5):
        (_, o_ids, o_att), train = calls[start], calls[start + 1 : start + 5]
        # the pass serves the round's second micro-batch: not the first update's, and the third update's
        assert not torch.equal(train[0][1], o_ids)
        assert torch.equal(train[1][1], o_ids) and torch.equal(train[1][2], o_att)
        assert torch.equal(train[0][1], train[2][1]) and torch.equal(train[1][1], train[3][1])


def _assert_same_training(
    records: list[dict[str, Tensor]],
    weights: dict[str, Tensor],
    ref_records: list[dict[str, Tensor]],
    ref_weights: dict[str, Tensor],
) -> None:
    """Every micro-step's old and current log-probs, bounds and mask, and the final weights, equal bit for bit."""
    for step, (rec, ref) in enumerate(zip(records, ref_records)):
        assert not torch.isnan(rec["old"][rec["mask"]]).any()
        for key in ("old", "current", "lo", "hi", "mask"):
            assert torch.equal(rec[key], ref[key]), f"micro-step {step}: {key} differs"
    for name, value in weights.items():
        assert torch.equal(value, ref_weights[name]), name


class _EveryOldLogProbByItsOwnPass(BandPOTrainer):
    """The reference for the reuse below: every micro-batch of a round gets its old log-probs from a ``no_grad``
    pass right after the generation (what BandPOTrainer did before the first update's forward gave its own)."""

    def _prepare_inputs(self, generation_batch: Any) -> dict[str, Any]:
        inputs = bandpo_trl.GRPOTrainer._prepare_inputs(self, generation_batch)
        if self._bandpo_old_pending:
            self._bandpo_old_pending = False
            self._bandpo_old_missing = list(self._buffered_inputs)
            self._fill_missing_old_log_probs()
        return inputs


class _FilledByTheOptimizerStepCallback(BandPOTrainer):
    """As BandPOTrainer, with the optimizer step never predicted: the step guard's callback fills the pass."""

    def _optimizer_step_follows(self) -> bool:
        return False


@pytest.mark.parametrize(
    ("precision", "accumulation", "trainer_class"),
    [
        ("float32", 1, BandPOTrainer),
        ("float32", 2, BandPOTrainer),
        ("bf16", 1, BandPOTrainer),
        ("bf16", 2, BandPOTrainer),
        ("float32", 2, _FilledByTheOptimizerStepCallback),
    ],
)
def test_old_log_probs_of_the_first_update_come_from_its_forward_bit_for_bit(
    tmp_path: Path,
    precision: str,
    accumulation: int,
    trainer_class: type[BandPOTrainer],
    tiny_model: Any,
    tiny_tokenizer: Any,
    tiny_dataset: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Taking the old log-probs of the micro-batches trained before a round's first optimizer step from their
    training forward changes nothing: every ratio, bound and weight equals, bit for bit, training with a separate
    ``no_grad`` pass for every micro-batch, in float32 and bf16, with 1 or 2 micro-steps per optimizer step, and
    when the pass is left to the callback before the optimizer step; only the number of extra forwards falls
    (the round's first ``accumulation`` micro-batches need none)."""
    results = {}
    for cls in (trainer_class, _EveryOldLogProbByItsOwnPass):
        model = type(tiny_model).from_pretrained(tiny_model.config._name_or_path, dtype=torch.float32)
        # rounds of 4 micro-batches used twice: 8 micro-steps, 8 / accumulation optimizer steps per round
        args = make_config(
            tmp_path / cls.__name__,
            max_steps=8 // accumulation * 2,
            steps_per_generation=4,
            gradient_accumulation_steps=accumulation,
        )
        trainer = harness_trainer(cls, precision, args, model, tiny_tokenizer, tiny_dataset)
        passes = []
        fill = cls._fill_missing_old_log_probs
        monkeypatch.setattr(
            cls,
            "_fill_missing_old_log_probs",
            lambda self, passes=passes, fill=fill: (passes.append(len(self._bandpo_old_missing)), fill(self)),
        )
        spy = ClampSpy()
        monkeypatch.setattr(torch, "clamp", spy)
        trainer.train()
        monkeypatch.undo()
        results[cls] = (spy.records, {k: v.detach().clone() for k, v in model.state_dict().items()}, passes)
    (records, weights, passes), (ref_records, ref_weights, ref_passes) = results.values()
    assert ref_passes == [4, 4] and passes == [4 - accumulation, 4 - accumulation]
    assert len(records) == len(ref_records) == 16
    _assert_same_training(records, weights, ref_records, ref_weights)


def test_old_log_probs_when_an_epoch_ends_with_a_shorter_update(
    tmp_path: Path, tiny_model: Any, tiny_tokenizer: Any, tiny_dataset: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """3 micro-steps per optimizer step over rounds of 4 micro-batches used once: transformers ends each epoch
    with a shorter update and restarts its grouping, while TRL's micro-step count runs on. The pass is still
    placed by the update's own grouping: every fill happens before the micro-batch that precedes an optimizer
    step (none is left to the callback), the micro-batches trained before a round's first step take their own
    forward's, and training equals a separate pass per micro-batch bit for bit."""
    results = {}
    for cls in (BandPOTrainer, _EveryOldLogProbByItsOwnPass):
        model = type(tiny_model).from_pretrained(tiny_model.config._name_or_path, dtype=torch.float32)
        args = make_config(
            tmp_path / cls.__name__,
            max_steps=6,
            steps_per_generation=4,
            num_iterations=1,
            gradient_accumulation_steps=3,
        )
        trainer = harness_trainer(cls, "float32", args, model, tiny_tokenizer, tiny_dataset)
        left_to_callback: list[int] = []
        guard = bandpo_trl._StepGuard.on_pre_optimizer_step

        def spy_guard(
            self: Any,
            *a: Any,
            trainer: Any = trainer,
            left: list[int] = left_to_callback,
            guard: Any = guard,
            **k: Any,
        ) -> None:
            left.append(len(trainer._bandpo_old_missing))
            guard(self, *a, **k)

        monkeypatch.setattr(bandpo_trl._StepGuard, "on_pre_optimizer_step", spy_guard)
        clamp = ClampSpy()
        monkeypatch.setattr(torch, "clamp", clamp)
        trainer.train()
        monkeypatch.undo()
        results[cls] = (clamp.records, {k: v.detach().clone() for k, v in model.state_dict().items()})
        if cls is BandPOTrainer:
            assert len(left_to_callback) == 6 and not any(left_to_callback), left_to_callback
    (records, weights), (ref_records, ref_weights) = results.values()
    assert len(records) == len(ref_records) == 16  # 2 epochs of 8 micro-steps, updates of 3, 3 and 2
    _assert_same_training(records, weights, ref_records, ref_weights)


def test_old_log_probs_filled_by_the_callback_compute_as_the_training_forward(
    tmp_path: Path, tiny_model: Any, tiny_tokenizer: Any, tiny_dataset: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The pass run from the optimizer-step callback (outside the harness's ``compute_loss`` and
    ``_prepare_inputs``) still computes in the harness's setting for the ratio: float32 products
    (``Precision.exact``) and the completion-tokens-only LM head."""
    import trl.trainer.utils as trl_utils

    seen: list[tuple[str, bool]] = []
    real = BandPOTrainer._micro_batch_log_probs

    def spy(self: Any, batch: dict[str, Any]) -> Tensor:
        compact = trl_utils._use_triton(torch.device("cpu"))
        seen.append((torch.backends.mkldnn.matmul.fp32_precision, compact))
        return real(self, batch)

    monkeypatch.setattr(BandPOTrainer, "_micro_batch_log_probs", spy)
    args = make_config(tmp_path, max_steps=4, steps_per_generation=4, num_iterations=1)
    trainer = harness_trainer(
        _FilledByTheOptimizerStepCallback, "bf16", args, tiny_model, tiny_tokenizer, tiny_dataset
    )
    trainer.train()
    assert len(seen) == 3  # the round's micro-batches 2-4, filled before its first optimizer step
    assert set(seen) == {("ieee", True)}, seen
