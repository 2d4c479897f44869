"""BandPO for TRL: ``BandPOConfig`` / ``BandPOTrainer``, subclasses of TRL's ``GRPOConfig`` / ``GRPOTrainer``.

The trainer applies a clip rule's per-token ratio bounds ``[lo, hi]`` inside TRL's *own* loss (TRL 1.16.x), so
TRL's aggregation, KL term, vLLM importance correction, entropy masks, bonus and metrics keep working; no line of
TRL's loss is copied. ``GRPOTrainer._compute_loss`` clips with

    coef_2 = torch.clamp(coef_1, 1 - self.epsilon_low, 1 + self.epsilon_high)

reading ``self.epsilon_low`` / ``self.epsilon_high`` at call time: :meth:`BandPOTrainer._install_bounds` sets them
to the (B, T) tensors ``1 - lo`` / ``hi - 1`` from the forward the parent's loss makes, and the step guard
(``training_step``, :class:`_StepGuard`) raises ``BandBoundsNotAppliedError`` before an optimizer step whose loss
went around them. How it works, the step guard, DPPO's truncated weight, settings and metrics: docs/trl.md.
"""

from __future__ import annotations

import warnings
import weakref
from typing import Any, ClassVar

import torch
from torch import Tensor

from bandpo._optional import install_hint

try:
    import trl
    from transformers import TrainerCallback
    from trl import GRPOTrainer
    from trl.models.utils import disable_gradient_checkpointing
except ImportError as err:  # pragma: no cover - exercised only without trl
    raise ImportError(
        f"bandpo.integrations.trl needs TRL 1.16.x: {install_hint('trl')} (or pip install 'trl>=1.16,<1.17')"
    ) from err

from bandpo.integrations.trl_config import ALLOW_UNSUPPORTED_TRL_ENV, BandPOConfig, check_trl_version
from bandpo.integrations.trl_progress import use_compact_progress
from bandpo.integrations.trl_spec import (
    REFUSED_LOSS_TYPES,
    SUPPORTED_LOSS_TYPES,
    SUPPORTED_TRL,
    silence_old_checkpointing_names,
)
from bandpo.losses.aggregation import masked_mean
from bandpo.losses.clip_rules import ClipRule
from bandpo.losses.diagnostics import metrics_to_floats
from bandpo.losses.method import ClipMethod
from bandpo.losses.schedule import RadiusSchedule
from bandpo.losses.terms import TokenTerms

__all__ = [
    "ALLOW_UNSUPPORTED_TRL_ENV",
    "REFUSED_LOSS_TYPES",
    "SUPPORTED_LOSS_TYPES",
    "SUPPORTED_TRL",
    "BandBoundsNotAppliedError",
    "BandPOConfig",
    "BandPOTrainer",
    "OnPolicyClipWarning",
    "check_trl_version",
]

_FORWARD_EXTRAS = (
    "pixel_values",
    "image_grid_thw",
    "num_images",
    "pixel_attention_mask",
    "spatial_shapes",
    "num_tiles",
    "image_sizes",
    "token_type_ids",
    "mm_token_type_ids",
    "image_position_ids",
)
"""The optional inputs ``GRPOTrainer._compute_loss`` passes to its forward (multimodal fields), by name."""


class OnPolicyClipWarning(UserWarning):
    """Every update is on-policy (ratio exactly 1), so no clip rule can bind."""


class BandBoundsNotAppliedError(RuntimeError):
    """A training step's loss was computed without the clip rule's bounds (TRL's fixed clip would be used)."""


class _StepGuard(TrainerCallback):
    """Raises before an optimizer step when no training loss since the previous one had the Band bounds; fills
    the old log-probs of the round's micro-batches still missing them before the update moves the policy."""

    def __init__(self, trainer: BandPOTrainer) -> None:
        self._trainer = weakref.ref(trainer)  # the trainer holds this callback: no reference cycle

    def on_pre_optimizer_step(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        trainer = self._trainer()
        if trainer is None:
            return
        if trainer._bandpo_bounded_losses == 0:
            raise trainer._bounds_not_applied(
                "no loss computed for it since the previous optimizer step went through "
                "GRPOTrainer._compute_loss, where the bounds are installed"
            )
        trainer._bandpo_bounded_losses = 0
        if trainer._bandpo_old_missing:  # before the update moves the policy that sampled the round
            trainer._fill_missing_old_log_probs()
        trainer._bandpo_old_from_forward = None


_GATHERED = ("log_ratio", "lo", "hi", "advantages", "mask", "old_log_prob", "entropy")
"""The fields of a loss call's ``TokenTerms`` gathered from every process for the metrics (the ratio is
recomputed from the log-ratio)."""


class BandPOTrainer(GRPOTrainer):
    """``GRPOTrainer`` whose ratio clip uses the per-token bounds of ``args.clip_rule`` (module docstring).

    Same constructor as ``GRPOTrainer``; ``args`` must be a ``BandPOConfig``. ``self.clip_rule`` holds the rule
    (with its start radius), ``self.radius_schedule`` the schedule of its radius; :meth:`step_clip_rule` is the
    rule of the current optimizer update; ``self.clip_method`` the ``ClipMethod`` behind both.
    ``adaptive_band`` (and any rule with ``needs_entropy``) gets the per-token entropy of the current policy that
    TRL's loss forward computes anyway (``compute_entropy=True``), detached; on the first update of a generation
    it equals the rollout policy's entropy.
    """

    _tag_names: ClassVar[list[str]] = ["trl", "grpo", "bandpo"]

    def __init__(
        self,
        model: Any,
        reward_funcs: Any = None,
        args: BandPOConfig | None = None,
        *rest: Any,
        **kwargs: Any,
    ):
        if args is None:
            name = model if isinstance(model, str) else getattr(model.config, "_name_or_path", "model")
            args = BandPOConfig(f"{str(name).rstrip('/').split('/')[-1]}-BandPO")
        elif not isinstance(args, BandPOConfig):
            raise TypeError(
                f"args must be a BandPOConfig (GRPOConfig plus the clip rule), got {type(args).__name__}"
            )
        self.clip_method: ClipMethod = args.clip_method()
        self.clip_rule: ClipRule = self.clip_method.clip_rule
        self.radius_schedule: RadiusSchedule = self.clip_method.schedule
        self._bandpo_loss_inputs: dict[str, Any] | None = None
        # the per-token terms of the last loss call and its radius (None without one), for the metrics
        self._bandpo_capture: tuple[TokenTerms, float | None] | None = None
        # Training-mode losses computed with the bounds since the last optimizer step (the step guard).
        self._bandpo_bounded_losses = 0
        # The old-log-prob pass of a generation round, deferred to _prepare_inputs (training layout): the round's
        # micro-batches whose old log-probs are still to compute, the optimizer step at which the round was
        # generated, and the micro-batch whose training forward gives its own (no update since the generation).
        self._bandpo_defer_old = False
        self._bandpo_old_pending = False
        self._bandpo_old_missing: list[dict[str, Any]] = []
        self._bandpo_round_step = 0
        self._bandpo_old_from_forward: dict[str, Any] | None = None
        self._bandpo_forward_log_probs: Tensor | None = None
        with silence_old_checkpointing_names():  # warnings TRL causes, not the caller
            super().__init__(model, reward_funcs, args, *rest, **kwargs)  # GRPOTrainer's positional order
        self.add_callback(_StepGuard(self))
        use_compact_progress(self)  # the bar prints a short line per log, not the 60-odd metrics it logs
        note = args.on_policy_note()
        if note is not None and self.accelerator.is_main_process:
            warnings.warn(note, OnPolicyClipWarning, stacklevel=2)

    def train(self, *args: Any, **kwargs: Any) -> Any:
        """``GRPOTrainer.train`` without the ``FutureWarning`` lines TRL causes around each generation (its use of
        gradient checkpointing's old names: :func:`~bandpo.integrations.trl_spec.silence_old_checkpointing_names`);
        every other warning shows."""
        with silence_old_checkpointing_names():
            return super().train(*args, **kwargs)

    def _compute_loss(self, model: Any, inputs: dict[str, Any]) -> Tensor:
        """TRL's loss with the clip rule's bounds: arm the hook, call the parent, log our metrics."""
        scalar_eps = (self.epsilon_low, self.epsilon_high)
        # the hook may replace advantages (DPPO's truncation) in this copy only
        batch, inputs = inputs, dict(inputs)
        old_from_forward = batch is self._bandpo_old_from_forward
        if old_from_forward:  # the policy that sampled this round: its old log-probs are this forward's
            inputs["old_per_token_logps"] = None  # TRL's own on-policy case: old = current, detached
        self._bandpo_loss_inputs = inputs
        self._bandpo_capture = None
        self._bandpo_forward_log_probs = None
        try:
            loss = super()._compute_loss(model, inputs)
            capture = self._bandpo_capture
            if (
                old_from_forward and capture is not None
            ):  # kept for the batch's later updates (num_iterations)
                batch["old_per_token_logps"] = self._bandpo_forward_log_probs
                self._bandpo_old_from_forward = None
        finally:
            self.epsilon_low, self.epsilon_high = scalar_eps
            self._bandpo_loss_inputs = None
            self._bandpo_capture = None
            self._bandpo_forward_log_probs = None
        if capture is None:
            raise RuntimeError(
                f"BandPOTrainer's bounds were not applied: GRPOTrainer._compute_loss (trl {trl.__version__}) did "
                "not call _get_per_token_logps_and_entropies. This TRL version's loss path differs from the one "
                f"supported (trl{SUPPORTED_TRL})."
            )
        if self.model.training:
            self._bandpo_bounded_losses += 1
        self._log_clip_metrics(capture)
        return loss

    def training_step(self, model: Any, inputs: dict[str, Any], num_items_in_batch: Any = None) -> Tensor:
        """The parent's step (forward, backward); raises if its loss was computed without the bounds.

        Raises:
            BandBoundsNotAppliedError: the micro-batch's loss did not go through ``_compute_loss`` (before the
                optimizer step, so no parameter moves).
        """
        before = self._bandpo_bounded_losses
        loss = super().training_step(model, inputs, num_items_in_batch)
        if self._bandpo_bounded_losses == before:
            raise self._bounds_not_applied(
                "training_step computed this micro-batch's loss without going through "
                "GRPOTrainer._compute_loss, where the bounds are installed"
            )
        return loss

    def _bounds_not_applied(self, what: str) -> BandBoundsNotAppliedError:
        """The step guard's error for optimizer step ``global_step + 1``, saying ``what`` happened."""
        return BandBoundsNotAppliedError(
            f"Band bounds were not applied to optimizer step {self.state.global_step + 1} (trl {trl.__version__}): "
            f"{what}. Its update would use TRL's fixed clip [1 - epsilon, 1 + epsilon_high] instead of "
            f"{self.clip_rule.describe()}, so BandPOTrainer stops before the optimizer step. The loss must come "
            "from GRPOTrainer._compute_loss, as in TRL's own compute_loss (BandPOTrainer supports "
            f"trl{SUPPORTED_TRL}); an override of compute_loss or training_step that bypasses it, or a TRL "
            "version that dispatches the loss elsewhere, cannot train with Band bounds."
        )

    def step_clip_rule(self) -> ClipRule:
        """The clip rule of optimizer update ``state.global_step + 1``: ``clip_rule`` with the radius schedule's
        value there over ``state.max_steps`` steps (``args.max_steps`` before ``train()`` sets the state's; the start
        radius, ``clip_rule``, for an evaluation before training of an epoch-long run; ``clip_rule`` itself under a
        constant schedule).

        Raises:
            RuntimeError: a changing radius after training began with no run length known.
        """
        if self.radius_schedule.is_constant:
            return self.clip_rule
        total = self.state.max_steps if self.state.max_steps > 0 else self.args.max_steps
        if total <= 0 and self.state.global_step == 0:
            return self.clip_rule  # evaluate() before train(): the radius of the first update
        if total <= 0:
            raise RuntimeError(
                f"the radius schedule {self.radius_schedule.describe()} needs the run's length, but the trainer "
                f"state has max_steps={total} (it is set when train() starts)"
            )
        self.clip_method = self.clip_method.for_run(total)
        self.radius_schedule = self.clip_method.schedule
        return self.clip_method.rule_at_step(self.state.global_step + 1)

    def _generate_and_score_completions(self, inputs: Any) -> dict[str, Any]:
        """The parent's generation round, with its old-log-prob pass deferred to :meth:`_prepare_inputs`.

        TRL computes the old log-probs over the whole generation batch in chunks, in generation order, then
        shuffles the batch into micro-batches; the training forward then sees each sequence in another batch
        layout. Log-probs of one sequence may differ in the last bits between layouts, and in reduced precision
        by much more, which moves the ratio of the first update away from 1. Here the parent's pass returns a
        placeholder (no forward runs) and :meth:`_prepare_inputs` computes the old log-probs on the very
        micro-batches the updates use (same rows, order, padding and call), so the first update of a round has
        ratio exactly 1 and later ratios differ from it only by what the updates changed.
        """
        # TRL computes old log-probs exactly when clipping can bind (BandPOConfig.clipping_can_bind)
        defer = self.model.training and not self.use_vllm and self.args.clipping_can_bind
        self._bandpo_defer_old = defer
        try:
            out = super()._generate_and_score_completions(inputs)
        finally:
            self._bandpo_defer_old = False
        if defer:
            if out.get("old_per_token_logps") is None or not getattr(
                out["old_per_token_logps"], "_bandpo_deferred", False
            ):
                raise RuntimeError(
                    f"BandPOTrainer's bounds were not applied: GRPOTrainer._generate_and_score_completions (trl "
                    f"{trl.__version__}) computed its old log-probs without going through "
                    "BandPOTrainer._get_per_token_logps_and_entropies, where the bounds and the old log-probs' "
                    f"layout are installed. This TRL version's path differs from the one supported (trl{SUPPORTED_TRL})."
                )
            self._bandpo_old_pending = True
        return out

    def _prepare_inputs(self, generation_batch: Any) -> dict[str, Any]:
        """The parent's micro-batch, with the old log-probs of a deferred generation round.

        Until the first optimizer step after the round's generation the policy is the one that sampled it, so
        a micro-batch trained in that window takes its old log-probs from its own training forward (TRL's
        on-policy case: ratio exactly 1; the values are kept for the batch's later updates) and costs no extra
        pass. Every other micro-batch of the round gets them from a ``no_grad`` forward computed as the training
        forward computes it, run right before that first optimizer step (in the step's timed work; the
        optimizer-step callback is the safety net when TRL's micro-step count does not predict it).
        """
        inputs = super()._prepare_inputs(generation_batch)
        if self._bandpo_old_pending:
            self._bandpo_old_pending = False
            self._bandpo_old_missing = list(self._buffered_inputs)
            self._bandpo_round_step = self.state.global_step
        if self._bandpo_old_missing and self.model.training:
            if self.state.global_step != self._bandpo_round_step:  # cannot happen: the callback fills them
                raise RuntimeError(
                    "BandPOTrainer: a round's old log-probs were not computed before its first update"
                )
            if any(batch is inputs for batch in self._bandpo_old_missing):
                self._bandpo_old_missing = [
                    batch for batch in self._bandpo_old_missing if batch is not inputs
                ]
                self._bandpo_old_from_forward = inputs
            if self._optimizer_step_follows():
                self._fill_missing_old_log_probs()
        return inputs

    def _optimizer_step_follows(self) -> bool:
        """Whether an optimizer step follows the current micro-batch.

        transformers marks the last micro-batch of each update in ``accelerator.sync_gradients`` before its
        ``training_step`` (the update's own grouping, also where an epoch ends with a shorter update); TRL's
        micro-step count, the fallback when that flag is not available, drifts from the grouping after such an
        epoch. A wrong answer costs only forwards: a pass too early computes old log-probs that a training
        forward would have given, and a missed one is filled by the optimizer-step callback."""
        state = getattr(self.accelerator, "gradient_state", None)
        if state is not None and isinstance(getattr(state, "sync_gradients", None), bool):
            return state.sync_gradients
        accumulation = getattr(
            self, "current_gradient_accumulation_steps", self.args.gradient_accumulation_steps
        )
        return (self._step + 1) % accumulation == 0

    def _fill_missing_old_log_probs(self) -> None:
        """The ``no_grad`` old-log-prob pass of the round's micro-batches that no training forward has given them."""
        missing, self._bandpo_old_missing = self._bandpo_old_missing, []
        with (
            torch.no_grad(),
            disable_gradient_checkpointing(self.model, self.args.gradient_checkpointing_kwargs),
        ):
            for batch in missing:
                batch["old_per_token_logps"] = self._micro_batch_log_probs(batch)

    def _micro_batch_log_probs(self, batch: dict[str, Any]) -> Tensor:
        """(B, T) log-probs of ``batch``'s completion tokens by the current policy, through the same call as
        ``GRPOTrainer._compute_loss`` makes for its forward."""
        completion_ids = batch["completion_ids"]
        logps, _, _ = super()._get_per_token_logps_and_entropies(
            self.model,
            torch.cat([batch["prompt_ids"], completion_ids], dim=1),
            torch.cat([batch["prompt_mask"], batch["completion_mask"]], dim=1),
            completion_ids.size(1),
            compute_entropy=True,
            compute_aux_loss=self.aux_loss_enabled,
            **{name: batch.get(name) for name in _FORWARD_EXTRAS},
        )
        return logps

    def _get_per_token_logps_and_entropies(self, model: Any, *args: Any, **kwargs: Any) -> Any:
        """The parent's forward; inside ``_compute_loss`` it also installs the per-token bounds. The first call
        of a deferred generation round (its old-log-prob pass) returns a placeholder instead
        (:meth:`_generate_and_score_completions`)."""
        if self._bandpo_defer_old:
            self._bandpo_defer_old = False  # only the old-log-prob pass; a reference-model pass runs as usual
            input_ids, logits_to_keep = args[0], args[2]
            placeholder = torch.full(
                (input_ids.size(0), logits_to_keep),
                float("nan"),
                dtype=torch.float32,
                device=input_ids.device,
            )
            placeholder._bandpo_deferred = True  # type: ignore[attr-defined]
            return placeholder, None, None
        out = super()._get_per_token_logps_and_entropies(model, *args, **kwargs)
        if self._bandpo_loss_inputs is not None:
            self._install_bounds(self._bandpo_loss_inputs, out[0], out[1])
        return out

    def _install_bounds(self, inputs: dict[str, Any], log_prob: Tensor, entropy: Tensor | None) -> None:
        """Set ``self.epsilon_low/high`` to (B, T) tensors ``1 - lo`` / ``hi - 1`` for the parent's clamp.

        ``log_prob``: (B, T) float, the current policy's log-probs of the completion tokens.
        ``entropy``: (B, T) float or None, the current policy's per-token entropy.
        """
        if self._bandpo_capture is not None:
            raise RuntimeError(
                "GRPOTrainer._compute_loss called _get_per_token_logps_and_entropies twice: this TRL version's "
                f"loss path differs from the one BandPOTrainer supports (trl{SUPPORTED_TRL})"
            )
        mask = inputs["completion_mask"]
        if "tool_mask" in inputs:
            mask = mask * inputs["tool_mask"]
        mask = mask.bool()
        # Exactly TRL's old log-probs: None when every update is on-policy (then old == current, detached).
        old = inputs.get("old_per_token_logps")
        self._bandpo_forward_log_probs = log_prob.detach()
        old = log_prob.detach() if old is None else old.detach()
        if old.shape != log_prob.shape or mask.shape != log_prob.shape:
            raise RuntimeError(
                f"unexpected shapes from TRL: log-probs {tuple(log_prob.shape)}, old log-probs "
                f"{tuple(old.shape)}, completion mask {tuple(mask.shape)}"
            )
        # float32 (float64 if the log-probs are) so that 1 - (1 - lo) keeps lo to ~1 ulp even for bf16 models.
        work = torch.float64 if log_prob.dtype == torch.float64 else torch.float32
        zero = torch.zeros((), dtype=work, device=log_prob.device)
        old = torch.where(mask, old.to(work), zero)  # padding: p = 1, finite bounds
        ent = None
        if entropy is not None:
            ent = torch.where(mask, entropy.detach().to(work), zero)
        rule = self.step_clip_rule()
        if rule.needs_entropy and ent is None:
            raise RuntimeError(
                f"clip rule {rule.name!r} needs the per-token entropy, but TRL's loss forward returned "
                "none (compute_entropy=False)"
            )
        lo, hi = rule.bounds(old, ent if rule.needs_entropy else None)
        lo, hi = lo.to(work), hi.to(work)
        self.epsilon_low = 1.0 - lo  # the parent clamps coef_1 to [1 - epsilon_low, 1 + epsilon_high]
        self.epsilon_high = hi - 1.0
        advantages = inputs["advantages"]
        if advantages.dim() == 1:
            advantages = advantages.unsqueeze(1)  # (B, 1), as in the parent
        c = rule.truncation_c
        raw_old = inputs.get("old_per_token_logps")
        if c is not None and raw_old is not None:
            # DPPO's truncated weight sg(min(r, c)) in TRL's ratio loss, through the advantages, which TRL reads after
            # this forward and takes as (B, T): A' = A (1 + (s - 1)(logp - sg(logp))) with s = min(r, c) / r has A's
            # value, so TRL's loss and every metric keep theirs, while the gradient of its unclipped term coef_1 A'
            # becomes min(r, c) A grad logp. s stays 1 where TRL's clip binds (A > 0, r > hi: its clamped term,
            # whose gradient must stay 0) and where r <= c. TRL's ratio coef_1 itself is untouched, so its KL term
            # (multiplied by coef_1 with use_bias_correction_kl) keeps TRL's gradient. On-policy, old is None and
            # r = 1 < c.
            with torch.no_grad():
                log_r = torch.where(mask, log_prob.detach().to(work) - raw_old.to(work), zero)
                s = torch.clamp(c * torch.exp(-log_r), max=1.0)  # (B, T), 1 where r <= c
                s = torch.where((advantages > 0) & (torch.exp(log_r) > hi), 1.0, s)
            moved = torch.where(s < 1.0, (s - 1.0) * (log_prob.to(work) - log_prob.detach().to(work)), zero)
            inputs["advantages"] = advantages.to(work) * (1.0 + moved)
        # TRL's coef_1 is exp(log_ratio) unclamped; the clamp only guards the metrics against overflow.
        log_ratio = torch.where(mask, log_prob.detach().to(work) - old, zero)
        terms = TokenTerms(
            loss=None,
            ratio=torch.exp(torch.clamp(log_ratio, -20.0, 20.0)),
            log_ratio=log_ratio,
            lo=lo,
            hi=hi,
            advantages=advantages.detach().to(work).expand_as(lo),
            old_log_prob=old,
            mask=mask,
            entropy=ent,
        )
        self._bandpo_capture = (terms, getattr(rule, "delta", None))

    def _log_clip_metrics(self, capture: tuple[TokenTerms, float | None]) -> None:
        """Append the diagnostics (``args.diagnostics``) of the tokens of all processes to ``self._metrics[mode]``
        (one gather; none at level ``none``, which logs only ``band/delta``)."""
        terms, radius = capture
        mode = "train" if self.model.training else "eval"
        level = self.args.diagnostics
        # every process has the same level, so all of them skip the gather together
        metrics = {} if level == "none" else self._gathered_metrics(terms, level)
        for key, value in metrics_to_floats(metrics).items():  # one host sync
            self._metrics[mode][key].append(value)
        if radius is not None:
            self._metrics[mode]["band/delta"].append(float(radius))

    def _gathered_metrics(self, terms: TokenTerms, level: str) -> dict[str, Tensor]:
        """The diagnostics at ``level`` of the tokens of all processes (padded and gathered once), and
        ``policy/entropy`` when the loss had entropies: detached () tensors."""
        zeros = torch.zeros_like(terms.lo)
        channels = {name: getattr(terms, name) for name in _GATHERED}
        channels["mask"] = terms.mask.to(terms.lo.dtype)
        local = torch.stack([zeros if c is None else c for c in channels.values()], dim=-1)  # (B, T, C)
        local = local.contiguous()
        # Completion lengths and batch sizes may differ across processes: pad (mask 0) before gathering.
        local = self.accelerator.pad_across_processes(local, dim=1, pad_index=0)
        local = self.accelerator.pad_across_processes(local, dim=0, pad_index=0)
        gathered = dict(zip(_GATHERED, self.accelerator.gather(local).unbind(dim=-1)))  # (world * B, T_max)
        gathered["ratio"] = torch.exp(torch.clamp(gathered["log_ratio"], -20.0, 20.0))
        gathered["mask"] = gathered["mask"] > 0.5
        if terms.entropy is None:
            gathered["entropy"] = None
        full = terms._replace(**gathered)
        metrics = full.clip_metrics(level=level)
        # the tokens behind every share above (all processes)
        metrics["tokens/count"] = full.mask.sum().to(full.lo.dtype)
        if full.entropy is not None:
            metrics["policy/entropy"] = masked_mean(full.entropy, full.mask)
        return metrics
