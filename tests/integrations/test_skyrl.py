"""bandpo.integrations.skyrl against the real SkyRL 0.4.0 (``make test-skyrl``, Python 3.12): registration, config,
loss, gradient, metrics, the registry round trip through Ray, the override entrypoint, the radius of a step in the
loss (the config's checks: test_skyrl_section.py).

SkyRL needs Python >= 3.12; in the main environment (Python 3.11) the SkyRL tests skip with that reason and only
the tests of the SkyRL-free part (names, the one-line error) run, in test_skyrl_names.py. Independent reference: with the fixed clip rule
``grpo`` the adapter reproduces SkyRL's own ``dual_clip`` (and, without the dual clip, ``regular``) loss token by
token, and the tokens where ``regular`` and bandpo's ``grpo`` differ are named.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

import bandpo
import bandpo.integrations.skyrl as bskyrl
from bandpo.losses.clip_rules import make_clip_rule
from bandpo.losses.schedule import RadiusSchedule, rule_at_radius
from helpers import REPO
from helpers.skyrl import algorithm, needs_skyrl

#: SkyRL 0.4.0's loss reductions (AlgorithmConfig.loss_reduction; apply_loss_reduction_to_advantages_minibatch).
SKYRL_REDUCTIONS = [
    "token_mean",
    "token_mean_legacy",
    "sequence_mean",
    "seq_mean_token_sum_norm",
    "prompt_mean",
]
TOL64 = {"rtol": 1e-10, "atol": 1e-12}
#: SkyRL's safe_exp_delta computes the ratio in float32 even for float64 inputs: agreement to float32 rounding.
TOL_SKYRL_RATIO = {"rtol": 1e-6, "atol": 1e-9}


# ---- with SkyRL ---------------------------------------------------------------------------------------------------


def _skyrl() -> Any:
    from skyrl.backends.skyrl_train.utils import ppo_utils

    return ppo_utils


@pytest.fixture
def registry() -> Any:
    """SkyRL's policy-loss registry with bandpo's losses registered (Ray not running: the local registry)."""
    ppo = _skyrl()
    bskyrl.register()
    return ppo.PolicyLossRegistry


def batch(
    b: int = 8, t: int = 12, dtype: torch.dtype = torch.float64, seed: int = 0
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(log_prob, old_log_prob, advantages (B,), mask)``: tail and head tokens, ratios from 0.2 to 6 (both bounds
    and the dual clip bind), advantages of both signs, ragged 0/1 float mask (every sequence >= 2 tokens)."""
    g = torch.Generator().manual_seed(seed)
    old = torch.where(
        torch.rand(b, t, generator=g) < 0.4,
        -torch.rand(b, t, generator=g, dtype=dtype) * 6.0,
        -torch.rand(b, t, generator=g, dtype=dtype) * 0.3,
    ).to(dtype)
    log_ratio = torch.randn(b, t, generator=g, dtype=dtype) * 0.7
    logp = torch.clamp(old + log_ratio, max=-1e-4)
    adv = (
        torch.randn(b, generator=g, dtype=dtype).abs() * torch.tensor([1.0, -1.0], dtype=dtype).repeat(b)[:b]
    )
    lengths = torch.randint(2, t + 1, (b,), generator=g)
    mask = (torch.arange(t)[None, :] < lengths[:, None]).to(dtype)
    return logp, old, adv, mask


#: loss name -> (overrides of trainer.algorithm, the rule bandpo.policy_loss is given, built independently)
CASES: dict[str, tuple[dict[str, Any], Any]] = {
    "bandpo": (
        {"bandpo.delta": 0.1, "bandpo.divergence": "tv"},
        lambda: make_clip_rule("band", delta=0.1, divergence="tv"),
    ),
    "bandpo_grpo": (
        {"eps_clip_low": 0.2, "eps_clip_high": 0.28},
        lambda: make_clip_rule("grpo", eps_high=0.28),
    ),
    "bandpo_dcpo": (
        {"eps_clip_low": 0.16, "eps_clip_high": 0.2, "bandpo.cap": 5.0},
        lambda: make_clip_rule("dcpo", eps_low=0.16, eps_high=0.2, cap=5.0),
    ),
    "bandpo_dppo_kl": (  # DPPO's thresholds in SkyRL's own spelling (its dppo's), c through rule_kwargs
        {"dppo.delta_low": 0.02, "dppo.delta_high": 0.03, "bandpo.rule_kwargs": "{truncation_c: 5.0}"},
        lambda: make_clip_rule(
            "dppo_kl", clip_divergence_low=0.02, clip_divergence_high=0.03, truncation_c=5.0
        ),
    ),
}


def _skyrl_minibatch_loss(
    fn: Any,
    cfg: Any,
    logp: torch.Tensor,
    old: torch.Tensor,
    adv: torch.Tensor,
    mask: torch.Tensor,
    reduction: str,
    micro: int,
    prompt_boundaries: list[tuple[int, int]],
) -> torch.Tensor:
    """The mini-batch's policy loss as SkyRL 0.4.0's trainer and worker build it: the reduction scales the (B, T)
    advantages of the whole mini-batch (RayPPOTrainer._normalize_advantages), then each micro-batch's registered
    loss is added up (the worker back-propagates each one; their sum is the mini-batch's)."""
    ppo = _skyrl()
    adv_bt = adv[:, None].expand_as(logp).clone()
    scaled = ppo.apply_loss_reduction_to_advantages_minibatch(
        adv_bt, mask, reduction, micro, logp.shape[1], prompt_boundaries
    )
    total = torch.zeros((), dtype=logp.dtype)
    for start in range(0, logp.shape[0], micro):
        rows = slice(start, start + micro)
        loss, metrics = fn(
            logp[rows], old[rows], scaled[rows], config=cfg, loss_mask=mask[rows], rollout_logprobs=None
        )
        assert all(isinstance(v, float) for v in metrics.values())
        total = total + loss
    return total


def _reference_loss(
    rule: Any,
    logp: torch.Tensor,
    old: torch.Tensor,
    adv: torch.Tensor,
    mask: torch.Tensor,
    reduction: str,
    micro: int,
    prompt_boundaries: list[tuple[int, int]],
    clip_ratio_c: float,
) -> torch.Tensor:
    """The same reduction written with bandpo.policy_loss's aggregation modes."""

    c = None if rule.truncation_c is not None else clip_ratio_c  # DPPO's truncated objective: no dual clip

    def agg(rows: slice, mode: str) -> torch.Tensor:
        loss, _ = bandpo.policy_loss(
            logp[rows], old[rows], adv[rows], mask[rows], rule, loss_agg_mode=mode, clip_ratio_c=c
        )
        return loss

    b = logp.shape[0]
    if reduction == "token_mean":
        return agg(slice(None), "token-mean")
    if reduction == "sequence_mean":
        return agg(slice(None), "seq-mean-token-mean")
    if reduction == "seq_mean_token_sum_norm":
        return agg(slice(None), "seq-mean-token-sum-norm")  # max_seq_len = T
    if reduction == "token_mean_legacy":  # token mean per micro-batch, averaged over micro-batches
        parts = [agg(slice(s, s + micro), "token-mean") for s in range(0, b, micro)]
        return torch.stack(parts).mean()
    if reduction == "prompt_mean":  # token mean per prompt group, averaged over prompts
        return torch.stack([agg(slice(s, e), "token-mean") for s, e in prompt_boundaries]).mean()
    raise AssertionError(reduction)


@needs_skyrl
@pytest.mark.parametrize("reduction", SKYRL_REDUCTIONS)
@pytest.mark.parametrize("name", sorted(CASES))
def test_loss_and_gradient_equal_policy_loss_in_every_reduction(
    registry: Any, name: str, reduction: str
) -> None:
    """Wiring test: the registered loss, called as SkyRL's worker calls it after SkyRL's own advantage scaling,
    gives bandpo.policy_loss's loss and gradient for every SkyRL reduction (both run per_token_policy_loss); the
    per-token numerics are checked against SkyRL's own losses in
    tests/integrations/test_skyrl.py::test_grpo_rule_equals_skyrl_dual_clip_and_regular."""
    overrides, rule = CASES[name]
    cfg = algorithm(policy_loss_type=name, loss_reduction=reduction, max_seq_len=12, **overrides)
    logp, old, adv, mask = batch()
    micro, groups = 2, [(0, 4), (4, 8)]
    fn = registry.get(name)
    assert isinstance(fn, bskyrl.SkyRLPolicyLoss) and fn.rule == bskyrl.policy_loss_names()[name]

    lp1 = logp.clone().requires_grad_(True)
    got = _skyrl_minibatch_loss(fn, cfg, lp1, old, adv, mask, reduction, micro, groups)
    got.backward()
    lp2 = logp.clone().requires_grad_(True)
    want = _reference_loss(rule(), lp2, old, adv, mask, reduction, micro, groups, cfg.clip_ratio_c)
    want.backward()
    torch.testing.assert_close(got, want, **TOL64)
    torch.testing.assert_close(lp1.grad, lp2.grad, **TOL64)
    assert got.abs() > 0 and lp1.grad.abs().sum() > 0


def _per_token(
    fn: Any, cfg: Any, logp: torch.Tensor, old: torch.Tensor, adv_bt: torch.Tensor
) -> torch.Tensor:
    """(B, T) per-token losses of a SkyRL policy loss: the masked sum with a one-token loss_mask, token by token."""
    out = torch.empty_like(logp)
    for i in range(logp.shape[0]):
        for j in range(logp.shape[1]):
            one = torch.zeros_like(logp)
            one[i, j] = 1.0
            out[i, j] = fn(logp, old, adv_bt, config=cfg, loss_mask=one, rollout_logprobs=None)[0]
    return out


@needs_skyrl
def test_grpo_rule_equals_skyrl_dual_clip_and_regular(registry: Any) -> None:
    """SkyRL's own ``dual_clip`` equals bandpo's ``grpo`` rule token by token, ``regular`` equals it without the
    dual clip, and ``regular`` differs from it exactly at the tokens the dual clip caps: A < 0 and r > clip_ratio_c
    (float64 inputs; SkyRL's ratio goes through float32 in safe_exp_delta, hence float32 rounding)."""
    logp, old, adv, _ = batch(b=6, t=10, seed=1)
    adv_bt = adv[:, None].expand_as(logp).contiguous()
    eps = {
        "eps_clip_low": 0.2,
        "eps_clip_high": 0.28,
        "clip_ratio_c": 1.5,
    }  # low c: the dual clip binds often
    ours_dual = _per_token(
        registry.get("bandpo_grpo"), algorithm(policy_loss_type="bandpo_grpo", **eps), logp, old, adv_bt
    )
    ours_plain = _per_token(
        registry.get("bandpo_grpo"),
        algorithm(policy_loss_type="bandpo_grpo", **{"bandpo.dual_clip": "false"}, **eps),
        logp,
        old,
        adv_bt,
    )
    skyrl_dual = _per_token(
        registry.get("dual_clip"), algorithm(policy_loss_type="dual_clip", **eps), logp, old, adv_bt
    )
    skyrl_regular = _per_token(
        registry.get("regular"), algorithm(policy_loss_type="regular", **eps), logp, old, adv_bt
    )

    torch.testing.assert_close(ours_dual, skyrl_dual, **TOL_SKYRL_RATIO)
    torch.testing.assert_close(ours_plain, skyrl_regular, **TOL_SKYRL_RATIO)
    ratio = torch.exp(logp - old)
    capped = (adv_bt < 0) & (ratio > eps["clip_ratio_c"])
    differ = ~torch.isclose(ours_dual, skyrl_regular, **TOL_SKYRL_RATIO)
    tokens = [tuple(ix) for ix in differ.nonzero().tolist()]
    assert torch.equal(differ, capped), f"regular vs bandpo_grpo differ at (row, token) {tokens}"
    assert capped.any(), "the batch must hold tokens the dual clip caps"
    # where they differ, the dual clip's cap -A c is below regular's -A max(r, clamp(r)) for A < 0
    assert torch.all(ours_dual[capped] < skyrl_regular[capped])


@needs_skyrl
def test_masked_non_finite_tokens_are_ignored_where_skyrl_regular_gives_nan(registry: Any) -> None:
    """A difference by definition: padded tokens (loss_mask 0) holding -inf log-probs make SkyRL's ``regular``
    loss NaN (its masked sum multiplies by the mask: 0 * nan), bandpo's losses ignore them (torch.where)."""
    logp, old, adv, mask = batch(b=4, t=8, seed=2)
    logp = torch.where(mask > 0, logp, torch.full_like(logp, float("-inf")))
    old = torch.where(mask > 0, old, torch.full_like(old, float("nan")))
    adv_bt = adv[:, None].expand_as(logp).contiguous()
    eps = {"eps_clip_low": 0.2, "eps_clip_high": 0.2}
    cfg_ours = algorithm(policy_loss_type="bandpo_grpo", **{"bandpo.dual_clip": "false"}, **eps)
    cfg_skyrl = algorithm(policy_loss_type="regular", **eps)
    ours, _ = registry.get("bandpo_grpo")(logp, old, adv_bt, config=cfg_ours, loss_mask=mask)
    theirs, _ = registry.get("regular")(logp, old, adv_bt, config=cfg_skyrl, loss_mask=mask)
    assert torch.isfinite(ours) and torch.isnan(theirs)
    clean = (
        torch.where(mask > 0, logp, torch.zeros_like(logp)),
        torch.where(mask > 0, old, torch.zeros_like(old)),
    )
    finite, _ = registry.get("regular")(*clean, adv_bt, config=cfg_skyrl, loss_mask=mask)
    torch.testing.assert_close(ours, finite, **TOL_SKYRL_RATIO)


@needs_skyrl
def test_metrics_are_skyrl_clip_ratio_and_bandpo_clip_metrics(registry: Any) -> None:
    """Wiring test: the metrics are bandpo.clip_metrics of the batch (as Python floats) plus SkyRL's
    ``clip_ratio``, which equals SkyRL's own ``regular`` loss's; the clip metrics are checked in
    tests/losses/test_policy_loss.py::test_metrics_on_hand_built_case."""
    logp, old, adv, mask = batch(seed=3)
    adv_bt = adv[:, None].expand_as(logp).contiguous()
    cfg = algorithm(policy_loss_type="bandpo", **{"bandpo.delta": 0.05})
    _, got = registry.get("bandpo")(logp, old, adv_bt, config=cfg, loss_mask=mask)
    _, want = bandpo.policy_loss(logp, old, adv, mask, make_clip_rule("band", delta=0.05), clip_ratio_c=3.0)
    ours = {k: v for k, v in want.items() if not k.startswith("loss/")}
    assert set(got) == {"clip_ratio", "band/delta", *ours}
    for key, value in ours.items():
        assert got[key] == pytest.approx(float(value), rel=1e-12, abs=1e-12), key
    assert got["clip_ratio"] == got["clip/frac"] and got["band/delta"] == 0.05

    cfg_grpo = algorithm(policy_loss_type="bandpo_grpo")
    _, grpo = registry.get("bandpo_grpo")(logp, old, adv_bt, config=cfg_grpo, loss_mask=mask)
    _, regular = registry.get("regular")(
        logp, old, adv_bt, config=algorithm(policy_loss_type="regular"), loss_mask=mask
    )
    assert grpo["clip_ratio"] == pytest.approx(regular["clip_ratio"], abs=1e-7)


@needs_skyrl
def test_an_empty_micro_batch_leaves_the_extremes_skyrl_reduces_by_min_and_max(registry: Any) -> None:
    """SkyRL's reduce_metrics takes the min of ``*_min`` and the max of ``*_max`` over micro-batches: a micro-batch
    with no loss token (zero_variance_filter, small micro-batches) reports +inf / -inf there, so the mini-batch's
    extremes are the real micro-batch's (a 0 would make ``band/hi_min`` 0, below 1); the means average as SkyRL's
    own metrics do."""
    from skyrl.backends.skyrl_train.workers.worker_utils import reduce_metrics

    logp, old, adv, mask = batch(seed=3)
    adv_bt = adv[:, None].expand_as(logp).contiguous()
    fn = registry.get("bandpo")
    _, real = fn(logp, old, adv_bt, config=algorithm(), loss_mask=mask)
    _, empty = fn(logp, old, adv_bt, config=algorithm(), loss_mask=torch.zeros_like(mask))
    assert real.keys() == empty.keys()
    reduced = reduce_metrics({k: [real[k], empty[k]] for k in real}, sum_loss_metrics=True)
    extremes = [k for k in real if k.endswith(("_min", "_max"))]
    assert len(extremes) == 6 and all(reduced[k] == real[k] for k in extremes)
    assert reduced["band/hi_min"] > 1.0 and 0.0 < reduced["band/lo_min"] < 1.0
    assert reduced["clip/frac"] == real["clip/frac"] / 2  # a mean, as SkyRL's own clip_ratio


@needs_skyrl
@pytest.mark.parametrize("level", ["basic", "none"])
def test_lighter_diagnostics_keep_skyrls_clip_ratio_and_the_loss(registry: Any, level: str) -> None:
    logp, old, adv, mask = batch(seed=3)
    adv_bt = adv[:, None].expand_as(logp).contiguous()
    loss_full, full = registry.get("bandpo")(logp, old, adv_bt, config=algorithm(), loss_mask=mask)
    cfg = algorithm(**{"bandpo.diagnostics": level})
    loss, got = registry.get("bandpo")(logp, old, adv_bt, config=cfg, loss_mask=mask)
    assert torch.equal(loss, loss_full)
    basic = {"clip/frac", "clip/frac_up", "clip/frac_down", "clip/frac_dual", "policy/ppo_kl"}
    assert set(got) == {"clip_ratio", "band/delta"} | (basic if level == "basic" else set())
    assert all(got[k] == full[k] for k in got)


@needs_skyrl
def test_rollout_anchor_and_off_policy_correction_as_skyrl(registry: Any) -> None:
    """``anchor=rollout`` centres the trust region on the rollout log-probs (what SkyRL's fully async mode assumes
    of custom losses), and SkyRL's token TIS correction multiplies the loss as in SkyRL's ``regular``: with
    ``grpo`` and no dual clip the two agree (SkyRL's ``regular`` given rollout log-probs as its old ones)."""
    logp, old, adv, mask = batch(seed=4)
    rollout = old + 0.1 * torch.randn(old.shape, generator=torch.Generator().manual_seed(5), dtype=old.dtype)
    rollout = torch.clamp(rollout, max=-1e-4)
    adv_bt = adv[:, None].expand_as(logp).contiguous()
    tis = {
        "off_policy_correction.tis_ratio_type": "token",
        "off_policy_correction.token_tis_ratio_clip_high": 1.5,
    }
    plain = {"bandpo.dual_clip": "false"}
    cfg = algorithm(policy_loss_type="bandpo_grpo", **{"bandpo.anchor": "rollout"}, **plain, **tis)
    ours, metrics = registry.get("bandpo_grpo")(
        logp, old, adv_bt, config=cfg, loss_mask=mask, rollout_logprobs=rollout
    )
    # SkyRL's regular with the rollout log-probs as its anchor and the same TIS weights exp(old - rollout) <= 1.5
    weights = torch.clamp(torch.exp(old - rollout), max=1.5)
    want, _ = registry.get("regular")(
        logp, rollout, adv_bt * weights, config=algorithm(policy_loss_type="regular"), loss_mask=mask
    )
    torch.testing.assert_close(ours, want, **TOL_SKYRL_RATIO)
    assert any(key.startswith("is_ratio") or "tis" in key for key in metrics), sorted(metrics)

    cfg_old = algorithm(policy_loss_type="bandpo_grpo", **plain)
    anchored_old, _ = registry.get("bandpo_grpo")(
        logp, old, adv_bt, config=cfg_old, loss_mask=mask, rollout_logprobs=rollout
    )
    want_old, _ = registry.get("regular")(
        logp, old, adv_bt, config=algorithm(policy_loss_type="regular"), loss_mask=mask
    )
    torch.testing.assert_close(anchored_old, want_old, **TOL_SKYRL_RATIO)


@needs_skyrl
def test_register_is_idempotent_and_refuses_a_taken_name(registry: Any) -> None:
    names = bskyrl.register()
    assert names == list(bskyrl.policy_loss_names())
    assert set(names) <= set(registry.list_available())
    registry.unregister("bandpo_dcpo")
    registry.register("bandpo_dcpo", lambda *args, **kwargs: None)
    try:
        with pytest.raises(ValueError, match=r"bandpo_dcpo.*register\(overwrite=True\)"):
            bskyrl.register()
        assert bskyrl.register(overwrite=True) == names
        assert isinstance(registry.get("bandpo_dcpo"), bskyrl.SkyRLPolicyLoss)
    finally:
        bskyrl.register(overwrite=True)


# ---- entrypoint and Ray ----------------------------------------------------------------------------------------


@needs_skyrl
def test_override_entrypoint_dispatches_to_main_and_refuses_bad_config_before_ray() -> None:
    """SkyRL's own main_base, given trainer.override_entrypoint=bandpo.integrations.skyrl, imports this module and
    calls its main(), which parses with BandPOSkyRLConfig: a bad delta stops it in one line, before Ray starts."""
    cmd = [
        sys.executable,
        "-m",
        "skyrl.train.entrypoints.main_base",
        "trainer.override_entrypoint=bandpo.integrations.skyrl",
        "trainer.algorithm.bandpo.delta=-1",
    ]
    out = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, timeout=300)
    assert out.returncode != 0
    last = out.stderr.strip().splitlines()[-1]
    assert last.startswith("ValueError: invalid trainer.algorithm.bandpo config"), out.stderr[-2000:]
    assert "delta must be a finite number > 0, got -1" in last
    assert "ray.init" not in out.stderr and "Started a local Ray instance" not in out.stderr


@needs_skyrl
def test_main_parses_validates_and_hands_the_config_to_skyrl(monkeypatch: pytest.MonkeyPatch) -> None:
    """Wiring test: main() registers the losses, parses with BandPOSkyRLConfig (the override flag removed), runs
    SkyRL's validate_cfg, then initialize_ray and the entrypoint task running BandPOExp (both replaced here: a real
    run needs GPUs and an inference engine). The loss it selects is checked in
    tests/integrations/test_skyrl.py::test_grpo_rule_equals_skyrl_dual_clip_and_regular."""
    import ray
    import skyrl.train.utils.utils as skyrl_utils

    seen: dict[str, Any] = {}

    class Task:
        @staticmethod
        def remote(cfg: Any) -> Any:
            seen["cfg"] = cfg
            return "ref"

    monkeypatch.setattr(skyrl_utils, "initialize_ray", lambda cfg: seen.setdefault("ray", cfg))
    monkeypatch.setattr(bskyrl, "_entrypoint_task", lambda: Task)
    monkeypatch.setattr(ray, "get", lambda ref: seen.setdefault("got", ref))
    bskyrl.main(
        [
            "trainer.override_entrypoint=bandpo.integrations.skyrl",
            "trainer.logger=console",
            "trainer.algorithm.policy_loss_type=bandpo_dcpo",
            "trainer.algorithm.bandpo.cap=4",
        ]
    )
    cfg = seen["cfg"]
    assert seen["ray"] is cfg and seen["got"] == "ref"
    assert isinstance(cfg, bskyrl.BandPOSkyRLConfig)
    assert cfg.trainer.algorithm.policy_loss_type == "bandpo_dcpo" and cfg.trainer.algorithm.bandpo.cap == 4
    from skyrl.train.entrypoints.main_base import BasePPOExp

    assert issubclass(bskyrl.BandPOExp, BasePPOExp)


# ---- the radius schedule (its config checks: test_skyrl_section.py) ----------------------------------------


@needs_skyrl
def test_step_radius_reaches_the_loss_through_skyrls_loss_fn_config_merge(registry: Any) -> None:
    """What a policy worker does with the trainer's ``loss_fn_config`` (SkyRL 0.4.0's _forward_backward_micro:
    OmegaConf.merge of asdict(config) and the overrides, then type(config).from_dict_config): the loss then uses
    the step's radius with the tensor-radius solver (bandpo.rule_at_radius: no KL table per radius)."""
    from dataclasses import asdict

    from omegaconf import OmegaConf

    cfg = algorithm(**{"bandpo.delta": 0.2, "bandpo.delta_schedule": "linear", "bandpo.delta_end": 0.02})
    merged = OmegaConf.merge(
        OmegaConf.create(asdict(cfg)), OmegaConf.create({"bandpo": {"step_delta": 0.128}})
    )
    step_cfg = type(cfg).from_dict_config(merged)
    assert type(step_cfg) is type(cfg) and step_cfg.bandpo.step_delta == 0.128
    logp, old, adv, mask = batch(seed=7)
    lp = logp.clone().requires_grad_(True)
    got, metrics = registry.get("bandpo")(
        lp, old, adv[:, None].expand_as(logp), config=step_cfg, loss_mask=mask
    )
    rule = rule_at_radius(make_clip_rule("band", delta=0.2), 0.128)
    assert rule.method != "table" and bskyrl.clip_rule_for("band", step_cfg) == rule
    lp2 = logp.clone().requires_grad_(True)
    want, _ = bandpo.policy_loss(lp2, old, adv, mask, rule, loss_agg_mode="token-sum", clip_ratio_c=3.0)
    torch.testing.assert_close(got, want, **TOL64)
    got.backward()
    want.backward()
    torch.testing.assert_close(lp.grad, lp2.grad, **TOL64)
    assert metrics["band/delta"] == 0.128


@needs_skyrl
def test_a_schedule_without_the_step_radius_stops_at_the_first_update(registry: Any) -> None:
    """A custom trainer (not BandPOTrainer) sends no ``bandpo.step_delta``: the loss ran the whole run at the start
    radius and logged it as if scheduled; it stops with one line naming the key and BandPOTrainer. A constant
    radius needs no step."""
    logp, old, adv, mask = batch(seed=8)
    scheduled = algorithm(
        **{"bandpo.delta": 0.2, "bandpo.delta_schedule": "linear", "bandpo.delta_end": 0.02}
    )
    with pytest.raises(
        ValueError,
        match=r"^trainer.algorithm.bandpo.delta_schedule='linear' needs each step's radius.*BandPOTrainer",
    ):
        registry.get("bandpo")(logp, old, adv[:, None].expand_as(logp), config=scheduled, loss_mask=mask)
    _, metrics = registry.get("bandpo")(
        logp, old, adv[:, None].expand_as(logp), config=algorithm(), loss_mask=mask
    )
    assert metrics["band/delta"] == 0.05


@needs_skyrl
@pytest.mark.parametrize(
    ("global_step", "kind"), [(4, "linear"), (1, "cosine"), (10, "hold_then_linear"), (3, "constant")]
)
def test_trainer_sends_the_radius_of_its_step_to_the_policy_workers(
    monkeypatch: pytest.MonkeyPatch, global_step: int, kind: str
) -> None:
    """BandPOTrainer's training step is SkyRL's own with ``bandpo.step_delta = schedule.value(global_step)``
    (over ``total_training_steps``) added to the policy's forward_backward calls only; the critic's calls and
    the dispatch afterwards are untouched; a constant schedule sends nothing. SkyRL's global_step is restored
    from the checkpoint on resume, so the radius after a resume is the one the step implies."""
    from skyrl.train.trainer import RayPPOTrainer

    calls: list[tuple[str, dict[str, Any]]] = []

    class Dispatch:
        def forward_backward_from_staged(self, model: str, chunk_refs: Any, **kwargs: Any) -> str:
            calls.append((model, kwargs))
            return "status"

    def skyrl_step(self: Any, data: Any) -> str:  # stands for SkyRL's step: it calls the dispatch per model
        self.dispatch.forward_backward_from_staged("critic", "refs")
        return self.dispatch.forward_backward_from_staged("policy", "refs")

    monkeypatch.setattr(RayPPOTrainer, "train_critic_and_policy", skyrl_step)
    overrides = {"bandpo.delta": 0.2, "bandpo.delta_schedule": kind}
    if kind != "constant":
        overrides["bandpo.delta_end"] = 0.02
    cfg = bskyrl.BandPOSkyRLConfig.from_cli_overrides(
        [f"trainer.algorithm.{k}={v}" for k, v in overrides.items()]
    )
    trainer = object.__new__(bskyrl.BandPOTrainer)  # the real __init__ builds Ray actors
    dispatch = Dispatch()
    trainer.cfg, trainer.dispatch, trainer.global_step, trainer.total_training_steps = (
        cfg,
        dispatch,
        global_step,
        10,
    )
    assert trainer.train_critic_and_policy(None) == "status"
    assert trainer.dispatch is dispatch
    assert calls[0] == ("critic", {})
    if kind == "constant":
        assert calls[1] == ("policy", {})
        return
    want = RadiusSchedule(kind, 0.2, 0.02, total_steps=10).value(global_step)
    assert calls[1] == ("policy", {"loss_fn_config": {"bandpo": {"step_delta": want}}})


def _ray_worker_loss(name: str, inputs: dict[str, torch.Tensor]) -> dict[str, Any]:
    """In a Ray worker process: SkyRL's registry (synced from the registry actor) computes loss and gradient."""
    from skyrl.backends.skyrl_train.utils.ppo_utils import PolicyLossRegistry

    import bandpo.integrations.skyrl as ours

    fn = PolicyLossRegistry.get(name)
    cfg = ours.BandPOSkyRLConfig.from_cli_overrides(
        [f"trainer.algorithm.policy_loss_type={name}"]
    ).trainer.algorithm
    logp = inputs["logp"].clone().requires_grad_(True)
    loss, metrics = fn(logp, inputs["old"], inputs["adv"], config=cfg, loss_mask=inputs["mask"])
    loss.backward()
    return {
        "pid": os.getpid(),
        "type": type(fn).__name__,
        "loss": loss.detach(),
        "grad": logp.grad,
        "metrics": metrics,
    }


@needs_skyrl
@pytest.mark.slow
def test_registry_round_trip_through_sync_registries_on_a_local_ray_cluster() -> None:
    """The losses registered in the driver reach a Ray worker process through SkyRL's sync_registries (what
    initialize_ray calls) and compute there what they compute here. Needs a local Ray cluster on the CPU."""
    import ray
    from skyrl.backends.skyrl_train.utils.ppo_utils import PolicyLossRegistry, sync_registries

    bskyrl.register()
    here = Path(__file__).resolve().parent
    path = os.pathsep.join([str(here), str(here.parent), os.environ.get("PYTHONPATH", "")])
    # Ray waits a fixed 30 s for its raylet to register: on a loaded machine one start can time out, so try thrice
    errors = []
    for _ in range(3):
        try:
            ray.init(
                num_cpus=1,
                include_dashboard=False,
                log_to_driver=False,
                runtime_env={"env_vars": {"PYTHONPATH": path}},
            )
            break
        except Exception as err:
            errors.append(f"{type(err).__name__}: {err}")
            ray.shutdown()
    else:
        pytest.skip(f"a local Ray cluster did not start on this machine in 3 tries: {errors[-1]}")
    try:
        sync_registries()
        remote = ray.remote(num_cpus=1)(_ray_worker_loss)
        logp, old, adv, mask = batch(seed=6)
        adv_bt = adv[:, None].expand_as(logp).contiguous()
        for name in bskyrl.policy_loss_names():
            inputs = {"logp": logp, "old": old, "adv": adv_bt, "mask": mask}
            there = ray.get(remote.remote(name, inputs), timeout=240)
            assert there["pid"] != os.getpid() and there["type"] == "SkyRLPolicyLoss"
            here_out = _ray_worker_loss(name, inputs)
            torch.testing.assert_close(there["loss"], here_out["loss"], rtol=0, atol=0)
            torch.testing.assert_close(there["grad"], here_out["grad"], rtol=0, atol=0)
            assert there["metrics"] == here_out["metrics"]
        assert set(bskyrl.policy_loss_names()) <= set(PolicyLossRegistry.list_available())
    finally:
        ray.shutdown()
