"""DPPO for TRL users: ``BandPOConfig(clip_rule="dppo_kl" | "dppo_tv")`` through ``BandPOTrainer``.

The rules reach TRL through the registry like every other rule: TRL's own loss path runs, the hook installs
DPPO's region as ratio bounds, and the truncated weight ``sg(min(r, c))`` enters through the advantages TRL
reads (``bandpo.integrations.trl``). Tested like the other rules (training, hook, metrics) and, on one hand-built
batch, against ``bandpo.policy_loss`` with the same rule: the parameter gradients of TRL's loss are DPPO's.
The registry also reaches ``bandpo compare``'s method validation.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("trl")

import torch
from test_trl import OUR_METRICS, ClampSpy, make_config, make_trainer

from bandpo.integrations.trl import BandPOConfig
from bandpo.losses import DPPOKLClip, DPPOTVClip, make_clip_rule, policy_loss

DPPO_RULES = ("dppo_tv", "dppo_kl")


def test_config_builds_dppo_rules(tmp_path: Path) -> None:
    args = make_config(tmp_path, clip_rule="dppo_kl")
    assert args.build_clip_rule() == DPPOKLClip()
    args = make_config(
        tmp_path,
        clip_rule="dppo_tv",
        clip_rule_kwargs='{"clip_divergence_low": 0.1, "clip_divergence_high": 0.2, "truncation_c": 5}',
    )
    assert args.build_clip_rule() == DPPOTVClip(0.1, 0.2, 5.0)


@pytest.mark.parametrize(
    ("overrides", "match"),
    [
        (
            {"clip_rule": "dppo_kl", "clip_rule_kwargs": {"clip_divergence_high": 0}},
            r"clip_rule='dppo_kl'\): clip_rule_kwargs\['clip_divergence_high'\] must be a finite number > 0, got 0",
        ),
        (
            {"clip_rule": "dppo_tv", "clip_rule_kwargs": {"clip_divergence_low": -0.1}},
            r"clip_rule_kwargs\['clip_divergence_low'\] must be a finite number > 0, got -0\.1",
        ),
        (
            {"clip_rule": "dppo_tv", "clip_rule_kwargs": {"truncation_c": 1}},
            r"clip_rule='dppo_tv'\): clip_rule_kwargs\['truncation_c'\] must be a finite number > 1, got 1",
        ),
        (
            {"clip_rule": "dppo_kl", "band_delta": 0.1},
            r"band_delta=0\.1 does not apply to clip_rule='dppo_kl'",
        ),
        ({"clip_rule": "dppo"}, r"unknown clip rule 'dppo'.*valid names: .*dppo_tv, dppo_kl"),
    ],
)
def test_config_errors(tmp_path: Path, overrides: dict[str, Any], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        BandPOConfig(output_dir=str(tmp_path), report_to="none", use_cpu=True, **overrides)


def test_compare_accepts_dppo_methods() -> None:
    """``bandpo compare`` validates methods through the registry: DPPO's names and parameters are known."""
    from bandpo_lab.experiments.compare import CompareError, MethodSpec

    spec = MethodSpec(label="dppo-kl", clip_rule="dppo_kl", params={"truncation_c": 10.0})
    assert make_clip_rule(spec.clip_rule, **spec.params) == DPPOKLClip(truncation_c=10.0)
    with pytest.raises(
        CompareError, match=r"methods\[bad\]: truncation_c must be a finite number > 1, got 0\.5"
    ):
        MethodSpec(label="bad", clip_rule="dppo_tv", params={"truncation_c": 0.5})


@pytest.mark.slow
@pytest.mark.parametrize("rule", DPPO_RULES)
def test_train_dppo_rule(
    tmp_path: Path, rule: str, tiny_model: Any, tiny_tokenizer: Any, tiny_dataset: Any
) -> None:
    """Like test_trl.py's test_train_every_clip_rule: TRL's loss path, the hook fires, metrics logged; a small
    truncation constant makes the truncated weight bind."""
    args = make_config(tmp_path, clip_rule=rule, clip_rule_kwargs={"truncation_c": 1.2})
    trainer = make_trainer(args, tiny_model, tiny_tokenizer, tiny_dataset)
    assert trainer.clip_rule.truncation_c == 1.2
    before = {n: p.detach().clone() for n, p in trainer.model.named_parameters()}
    spy = ClampSpy()
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(torch, "clamp", spy)
        trainer.train()
    assert len(spy.records) == args.max_steps  # TRL's own clip received DPPO's region as tensor bounds
    rows = [row for row in trainer.state.log_history if "loss" in row]
    assert len(rows) == args.max_steps and all(math.isfinite(row["loss"]) for row in rows)
    assert any(not torch.equal(p.detach(), before[n]) for n, p in trainer.model.named_parameters())
    for row in rows:
        missing = [k for k in (*OUR_METRICS, "clip_ratio/region_mean") if k not in row]
        assert not missing, f"metrics missing from the log: {missing}"
        assert row["clip/frac"] == pytest.approx(row["clip_ratio/region_mean"], abs=1e-6)
    assert max(row["clip/frac_out"] for row in rows) > 0
    assert isinstance(trainer.epsilon_low, float) and isinstance(trainer.epsilon_high, float)


def _hand_built_inputs(trainer: Any, seed: int = 0) -> tuple[dict[str, Any], torch.Tensor]:
    """TRL's loss inputs for 6 completions of 8 tokens (2 padded), advantages of both signs and old log-probs
    0.8-nat noise away from the current ones (ratios from ~0.1 to ~10)."""
    g = torch.Generator().manual_seed(seed)
    vocab = trainer.model.config.vocab_size
    prompt_ids = torch.randint(3, vocab, (6, 5), generator=g)
    completion_ids = torch.randint(3, vocab, (6, 8), generator=g)
    completion_mask = torch.ones(6, 8, dtype=torch.long)
    completion_mask[:2, 6:] = 0
    with torch.no_grad():
        current, _, _ = trainer._get_per_token_logps_and_entropies(
            trainer.model,
            torch.cat([prompt_ids, completion_ids], dim=1),
            torch.ones(6, 13, dtype=torch.long),
            8,
        )
    old = current + 0.8 * torch.randn(current.shape, generator=g)
    inputs = {
        "prompt_ids": prompt_ids,
        "prompt_mask": torch.ones_like(prompt_ids),
        "completion_ids": completion_ids,
        "completion_mask": completion_mask,
        "advantages": torch.tensor([1.0, -0.5, 0.8, -1.2, 0.3, -0.7]),
        "old_per_token_logps": old,
    }
    return inputs, old


@pytest.mark.parametrize("rule", DPPO_RULES)
def test_trl_gradient_is_dppos(
    tmp_path: Path, rule: str, tiny_model: Any, tiny_tokenizer: Any, tiny_dataset: Any
) -> None:
    """TRL's loss (bnpo: token mean) through the hook has the parameter gradient of bandpo's DPPO objective,
    truncation included; without the truncation it would not.

    Wiring test: TRL's loss code with the hook's region and truncated advantages against ``bandpo.policy_loss``
    with the same rule object (both sides take the region from the same ``rule.bounds``); it proves the hook's
    truncation reaches TRL's gradient. DPPO's numerics are checked against verl's own implementation in
    tests/integrations/test_dppo_verl.py::test_dppo_equals_verl.
    """
    kwargs = {"clip_divergence_low": 0.3, "clip_divergence_high": 0.3, "truncation_c": 1.5}
    args = make_config(tmp_path, clip_rule=rule, clip_rule_kwargs=kwargs, loss_type="bnpo")
    trainer = make_trainer(args, tiny_model, tiny_tokenizer, tiny_dataset)
    trainer.model.eval()  # TRL's eval branch: no gradient-accumulation normaliser
    inputs, old = _hand_built_inputs(trainer)
    params = [p for p in trainer.model.parameters() if p.requires_grad]

    trl_grads = torch.autograd.grad(trainer._compute_loss(trainer.model, inputs), params)
    assert inputs["old_per_token_logps"] is old  # the caller's inputs are left alone

    def bandpo_grads(c: float) -> list[torch.Tensor]:
        mask = inputs["completion_mask"]
        logp, _, _ = trainer._get_per_token_logps_and_entropies(  # TRL's forward, with TRL's attention mask
            trainer.model,
            torch.cat([inputs["prompt_ids"], inputs["completion_ids"]], dim=1),
            torch.cat([inputs["prompt_mask"], mask], dim=1),
            8,
        )
        rule_c = make_clip_rule(rule, **{**kwargs, "truncation_c": c})
        loss, _ = policy_loss(logp, old, inputs["advantages"], mask, rule_c, loss_agg_mode="token-mean")
        ratio = torch.exp(logp.detach() - old)[mask.bool()]
        assert (ratio > 1.5).sum() >= 5  # the truncation binds on some tokens
        return list(torch.autograd.grad(loss, params))

    want = bandpo_grads(1.5)
    scale = max(w.abs().max().item() for w in want)
    for got, w in zip(trl_grads, want):
        torch.testing.assert_close(got, w, rtol=0, atol=1e-6 * scale)  # tolerance: float32 rounding
    untruncated = bandpo_grads(1e6)
    assert max((u - w).abs().max().item() for u, w in zip(untruncated, want)) > 1e-2 * scale


@pytest.mark.parametrize("bias_correction", [True, False])
def test_trls_kl_term_keeps_its_gradient_beside_dppos_truncation(
    tmp_path: Path, bias_correction: bool, tiny_model: Any, tiny_tokenizer: Any, tiny_dataset: Any
) -> None:
    """With a KL term (beta != 0) the gradient of TRL's loss is DPPO's plus beta times TRL's own KL gradient: the
    truncation reaches only the policy term, not the ratio TRL multiplies its KL by (``use_bias_correction_kl``,
    TRL's default), whose gradient stays the full ``r grad logp`` where the truncation binds.

    Wiring test: TRL's loss with the hook against ``bandpo.policy_loss`` plus TRL's k3 term written out; DPPO's
    numerics are checked against verl's own implementation in
    tests/integrations/test_dppo_verl.py::test_dppo_equals_verl."""
    kwargs = {"clip_divergence_low": 0.3, "clip_divergence_high": 0.3, "truncation_c": 1.5}
    args = make_config(
        tmp_path,
        clip_rule="dppo_kl",
        clip_rule_kwargs=kwargs,
        loss_type="bnpo",
        use_bias_correction_kl=bias_correction,
    )
    trainer = make_trainer(args, tiny_model, tiny_tokenizer, tiny_dataset)
    trainer.model.eval()
    trainer.beta = 0.5  # TRL reads self.beta in its loss; the reference log-probs come with the inputs
    inputs, old = _hand_built_inputs(trainer)
    g = torch.Generator().manual_seed(1)
    inputs["ref_per_token_logps"] = old + 0.5 * torch.randn(old.shape, generator=g)
    params = [p for p in trainer.model.parameters() if p.requires_grad]
    got = torch.autograd.grad(trainer._compute_loss(trainer.model, inputs), params)

    mask = inputs["completion_mask"]
    logp, _, _ = trainer._get_per_token_logps_and_entropies(
        trainer.model,
        torch.cat([inputs["prompt_ids"], inputs["completion_ids"]], dim=1),
        torch.cat([inputs["prompt_mask"], mask], dim=1),
        8,
    )
    policy, _ = policy_loss(
        logp, old, inputs["advantages"], mask, make_clip_rule("dppo_kl", **kwargs), loss_agg_mode="token-mean"
    )
    d = inputs["ref_per_token_logps"] - logp
    kl = torch.exp(d) - d - 1.0
    if bias_correction:
        kl = kl * torch.exp(logp - old)  # the ratio with its full gradient
    ratio = torch.exp(logp.detach() - old)[mask.bool()]
    assert (ratio > 1.5).sum() >= 5  # the truncation binds on some tokens
    want = torch.autograd.grad(policy + 0.5 * (kl * mask).sum() / mask.sum(), params)
    scale = max(w.abs().max().item() for w in want)
    for ours, w in zip(got, want):
        torch.testing.assert_close(ours, w, rtol=0, atol=1e-6 * scale)
