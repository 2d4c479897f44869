"""The per-token objective runs in at least float32 whatever the input dtype (issue 11, item 9).

verl passes a bfloat16 ``log_prob`` with float32 old log-probs and advantages; its ``vanilla`` loss computes in
float32 by type promotion. ``bandpo.policy_loss`` and the verl adapter do the same: a bfloat16 or float16
``log_prob`` gives exactly the loss and metrics of the same values in float32 (tolerance 0: the computation after
the differentiable upcast is the float32 one; measured error 0), and its gradient is the float32 gradient rounded
to the input dtype (again exactly). Before the fix the loss was 0.3-5% off and single gradient entries up to 38% of
the largest (tokens changing side of a bound). The TRL trainer runs TRL's own loss, which gets float32 log-probs
from TRL's fused LM head even for a bfloat16 model (guarded below).
"""

from __future__ import annotations

import importlib.util
import sys
import warnings
from pathlib import Path
from typing import Any

import pytest
import torch

from bandpo.losses import CLIP_RULES, LOSS_AGG_MODES, policy_loss
from bandpo.losses.clip_rules import FixedClip

LOW = [torch.bfloat16, torch.float16]


def make_batch(seed: int = 0, batch: int = 8, length: int = 24) -> dict[str, torch.Tensor]:
    """float32 old log-probs and advantages (as verl holds them), float64 current log-probs to cast down."""
    g = torch.Generator().manual_seed(seed)
    old = torch.log(torch.rand(batch, length, generator=g, dtype=torch.float64) * 0.98 + 0.01)
    new = (old + 0.4 * torch.randn(batch, length, generator=g, dtype=torch.float64)).clamp(max=-1e-3)
    mask = torch.rand(batch, length, generator=g) > 0.2
    mask[:, 0] = True
    return {
        "new": new,
        "old": old.float(),
        "adv": torch.randn(batch, generator=g).float(),
        "mask": mask,
        "entropy": torch.rand(batch, length, generator=g) * 2,
        "weights": (torch.rand(batch, length, generator=g) + 0.5).float(),
    }


def _loss_grad(lp: torch.Tensor, d: dict[str, torch.Tensor], rule: str, mode: str) -> tuple[Any, ...]:
    x = lp.clone().requires_grad_(True)
    loss, metrics = policy_loss(
        x,
        d["old"],
        d["adv"],
        d["mask"],
        rule,
        loss_agg_mode=mode,
        entropy=d["entropy"],
        rollout_is_weights=d["weights"],
    )
    (grad,) = torch.autograd.grad(loss, x)
    return loss, metrics, grad


@pytest.mark.parametrize("mode", ["token-mean", "seq-mean-token-mean"])
@pytest.mark.parametrize("rule", CLIP_RULES.names())
@pytest.mark.parametrize("dtype", LOW)
def test_policy_loss_low_precision_equals_float32(dtype: torch.dtype, rule: str, mode: str) -> None:
    d = make_batch()
    lp = d["new"].to(dtype)
    loss, metrics, grad = _loss_grad(lp, d, rule, mode)
    ref, ref_metrics, ref_grad = _loss_grad(lp.float(), d, rule, mode)
    assert loss.dtype == torch.float32 and grad.dtype == dtype
    assert torch.equal(loss, ref)  # tolerance 0 (measured: 0)
    assert torch.equal(grad, ref_grad.to(dtype))
    for k, v in ref_metrics.items():
        assert torch.equal(metrics[k], v), k


@pytest.mark.parametrize("dtype", LOW)
def test_float64_inputs_stay_float64(dtype: torch.dtype) -> None:
    """Promotion, not a fixed float32: any float64 input makes the whole objective float64."""
    d = make_batch(seed=1)
    x = d["new"].to(dtype).requires_grad_(True)
    loss, _ = policy_loss(x, d["old"].double(), d["adv"], d["mask"], "band")
    loss.backward()
    assert loss.dtype == torch.float64 and x.grad.dtype == dtype


# ---- verl adapter ------------------------------------------------------------------------------------------


def _actor_config(loss_mode: str, loss_agg_mode: str) -> Any:
    """verl's ``ActorConfig`` with verl's default dual-clip constant 3 and clip ratios 0.2."""
    from verl.workers.config import ActorConfig, PolicyLossConfig

    return ActorConfig(
        strategy="fsdp",
        rollout_n=4,
        ppo_micro_batch_size_per_gpu=2,
        loss_agg_mode=loss_agg_mode,
        clip_ratio_c=3.0,
        clip_ratio_low=0.2,
        clip_ratio_high=0.2,
        policy_loss=PolicyLossConfig(loss_mode=loss_mode),
    )


@pytest.mark.verl
@pytest.mark.parametrize("mode", LOSS_AGG_MODES.names())
@pytest.mark.parametrize("dtype", LOW)
def test_verl_adapter_low_precision_equals_float32_and_vanilla(dtype: torch.dtype, mode: str) -> None:
    pytest.importorskip("verl", reason="verl is not installed")
    from verl.trainer.ppo.core_algos import get_policy_loss_fn

    import bandpo.integrations.verl as bverl

    vanilla = get_policy_loss_fn("vanilla")
    config = _actor_config("vanilla", mode)
    d = make_batch(seed=2)
    mask = d["mask"].float()  # verl's response_mask is a float 0/1 tensor
    adv = d["adv"].unsqueeze(1).expand_as(d["old"]).contiguous()

    def run(fn: Any, lp: torch.Tensor, old: torch.Tensor, **kw: Any) -> tuple[torch.Tensor, torch.Tensor]:
        x = lp.clone().requires_grad_(True)
        loss, _ = fn(old, x, adv, mask, mode, config, d["weights"], **kw)
        (grad,) = torch.autograd.grad(loss, x)
        return loss, grad

    ours = bverl.compute_policy_loss_clip_rule
    fixed = FixedClip(0.2, 0.2)
    lp = d["new"].to(dtype)
    loss, grad = run(ours, lp, d["old"], clip_rule=fixed)
    ref, ref_grad = run(ours, lp.float(), d["old"], clip_rule=fixed)
    assert loss.dtype == torch.float32 and grad.dtype == dtype
    assert torch.equal(loss, ref) and torch.equal(grad, ref_grad.to(dtype))
    # verl's own vanilla on the same bf16/fp16 call: the same float32 numbers
    van, van_grad = run(vanilla, lp, d["old"])
    torch.testing.assert_close(loss, van, rtol=2e-7, atol=1e-9)
    torch.testing.assert_close(grad, van_grad, rtol=0, atol=0)

    # ratio exactly 1 (old = the low-precision log-probs): the loss is -agg(A * w) in float32, as vanilla's.
    # Advantages +-a in mirrored sequences: vanilla gives 0 up to float32 rounding of the sums.
    half = adv.shape[0] // 2
    sym_adv = torch.cat([adv[:half], -adv[:half]])
    sym_mask = torch.cat([mask[:half], mask[:half]])
    ones = torch.ones_like(d["weights"])
    old1 = lp.float()
    got, _ = ours(
        old1, lp.clone().requires_grad_(True), sym_adv, sym_mask, mode, config, ones, clip_rule=fixed
    )
    want, _ = vanilla(old1, lp.clone().requires_grad_(True), sym_adv, sym_mask, mode, config, ones)
    scale = agg_abs(sym_adv, sym_mask, mode, config)  # the loss's scale: float32 rounding is ~1e-7 of it
    assert abs(want.item()) <= 1e-6 * scale
    torch.testing.assert_close(got, want, rtol=0, atol=1e-6 * scale)


def agg_abs(adv: torch.Tensor, mask: torch.Tensor, mode: str, config: Any) -> float:
    from verl.trainer.ppo.core_algos import agg_loss

    return agg_loss(adv.abs().double(), mask.double(), mode, **config.global_batch_info).item()


# ---- TRL ---------------------------------------------------------------------------------------------------


# TRL 1.16 patches the model with a fused LM head whose chunked log-softmax returns float32 log-probs even for a
# bfloat16 model, so TRL's own loss (ratio, clip, products) already runs in float32 and the adapter needs no cast.
# This test guards that: a TRL release that hands bfloat16 log-probs to the loss fails it.


class _LossDtypeSpy:
    """Records the dtypes TRL's ``_compute_loss`` computes its ratio clip in (``torch.clamp`` with tensor
    bounds, called from TRL's file)."""

    def __init__(self) -> None:
        self.real = torch.clamp
        self.records: list[tuple[torch.dtype, torch.dtype]] = []

    def __call__(self, input: Any, min: Any = None, max: Any = None, *args: Any, **kwargs: Any) -> Any:
        frame = sys._getframe(1)
        if (
            frame.f_code.co_name == "_compute_loss"
            and frame.f_code.co_filename.endswith("grpo_trainer.py")
            and isinstance(min, torch.Tensor)
        ):
            self.records.append((frame.f_locals["per_token_logps"].dtype, input.dtype))
        return self.real(input, min, max, *args, **kwargs)


@pytest.mark.slow
@pytest.mark.skipif(
    importlib.util.find_spec("trl") is None, reason="trl is not installed"
)  # before the fixtures
def test_trl_loss_runs_in_float32_for_a_bfloat16_model(
    tmp_path: Path,
    tiny_model_dir: Path,
    tiny_tokenizer: Any,
    tiny_dataset: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    pytest.importorskip("trl")
    from bandpo.integrations.trl import BandPOConfig, BandPOTrainer, OnPolicyClipWarning

    args = BandPOConfig(
        output_dir=str(tmp_path / "out"),
        per_device_train_batch_size=4,
        num_generations=4,
        max_completion_length=6,
        max_steps=1,
        learning_rate=1e-2,
        report_to="none",
        save_strategy="no",
        use_cpu=True,
        disable_tqdm=True,
        model_init_kwargs={"dtype": torch.bfloat16},
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", OnPolicyClipWarning)
        trainer = BandPOTrainer(
            model=str(tiny_model_dir),
            reward_funcs=lambda completions, **kw: [float(c.count("a")) for c in completions],
            args=args,
            train_dataset=tiny_dataset,
            processing_class=tiny_tokenizer,
        )
    assert next(trainer.model.parameters()).dtype == torch.bfloat16
    before = {n: p.detach().clone() for n, p in trainer.model.named_parameters()}
    spy = _LossDtypeSpy()
    monkeypatch.setattr(torch, "clamp", spy)
    trainer.train()
    monkeypatch.undo()
    assert spy.records and all(rec == (torch.float32, torch.float32) for rec in spy.records), spy.records
    changed = [n for n, p in trainer.model.named_parameters() if not torch.equal(p.detach(), before[n])]
    assert changed, "the bfloat16 model did not change: no gradient reached it"
    assert all(p.dtype == torch.bfloat16 for p in trainer.model.parameters())
