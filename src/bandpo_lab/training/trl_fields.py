"""The fields of TRL's ``GRPOConfig`` and bandpo's ``BandPOConfig`` with their types, without importing TRL.

The top-level keys of a ``bandpo train`` config are these fields (:mod:`bandpo_lab.training.config`); their values are
converted to these types when the config is read, so that reading and checking a config imports no TRL (importing
TRL and transformers takes seconds). TRL is imported when the trainer's config object is built.

The table is TRL 1.16's (transformers 5), the versions ``bandpo[trl]`` pins, in the dataclasses' field order.
Types are written as the converter needs them: an enum that a field also accepts as a plain string is the string
(``str | OptimizerNames`` is ``str``: any text passes, TRL converts it), an enum alone is the ``Literal`` of its
values, and a class of another library is a stand-in of the same name that no config value is an instance of.
``tests/lab/training/test_trl_fields.py`` compares the table with TRL's dataclasses field by field and prints the
lines to paste when TRL changes.

:data:`RENAMED_FIELDS`: fields TRL or transformers renamed, still fields under the old name; a config that writes
the old name gets a one-line warning (it is read as the new one) or error (it no longer should) naming the new one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

__all__ = [
    "BANDPO_FIELDS",
    "GRPO_FIELDS",
    "RENAMED_FIELDS",
    "TRAINER_FIELDS",
    "TRAINING_ARGUMENTS_FIELDS",
    "RenamedField",
]


class ParallelismConfig:
    """Stand-in for ``accelerate.ParallelismConfig``: a YAML value is never one, so a config may only leave
    ``parallelism_config`` null. (Against accelerate's class, pydantic built one from a mapping, which the config's
    YAML dump could not write: ``--dry-run`` and the run directory's copy of the config failed.)"""


TRAINING_ARGUMENTS_FIELDS: dict[str, Any] = {
    "output_dir": str | None,
    "per_device_train_batch_size": int,
    "num_train_epochs": float,
    "max_steps": int,
    "learning_rate": float,
    "lr_scheduler_type": str,
    "lr_scheduler_kwargs": dict | str | None,
    "warmup_steps": float,
    "optim": str,
    "optim_args": str | None,
    "weight_decay": float,
    "adam_beta1": float,
    "adam_beta2": float,
    "adam_epsilon": float,
    "optim_target_modules": None | str | list[str],
    "gradient_accumulation_steps": int,
    "average_tokens_across_devices": bool,
    "max_grad_norm": float,
    "label_smoothing_factor": float,
    "bf16": bool | None,
    "fp16": bool,
    "bf16_full_eval": bool,
    "fp16_full_eval": bool,
    "tf32": bool | None,
    "activation_checkpointing": bool | None,
    "activation_checkpointing_kwargs": dict[str, Any] | str | None,
    "gradient_checkpointing": bool,
    "gradient_checkpointing_kwargs": dict[str, Any] | str | None,
    "torch_compile": bool,
    "torch_compile_backend": str | None,
    "torch_compile_mode": str | None,
    "use_liger_kernel": bool,
    "liger_kernel_config": dict[str, bool] | None,
    "use_cache": bool,
    "neftune_noise_alpha": float | None,
    "torch_empty_cache_steps": int | None,
    "auto_find_batch_size": bool,
    "logging_strategy": str,
    "logging_steps": float,
    "logging_first_step": bool,
    "log_on_each_node": bool,
    "logging_nan_inf_filter": bool,
    "include_num_input_tokens_seen": str | bool,
    "log_level": str,
    "log_level_replica": str,
    "disable_tqdm": bool | None,
    "report_to": None | str | list[str],
    "run_name": str | None,
    "project": str,
    "trackio_space_id": str | None,
    "trackio_bucket_id": str | None,
    "trackio_static_space_id": str | None | Literal[False],
    "eval_strategy": str,
    "eval_steps": float | None,
    "eval_delay": float,
    "per_device_eval_batch_size": int,
    "prediction_loss_only": bool,
    "eval_on_start": bool,
    "eval_do_concat_batches": bool,
    "eval_use_gather_object": bool,
    "eval_accumulation_steps": int | None,
    "include_for_metrics": list[str],
    "batch_eval_metrics": bool,
    "save_only_model": bool,
    "save_strategy": str,
    "save_steps": float,
    "save_on_each_node": bool,
    "save_total_limit": int | None,
    "enable_jit_checkpoint": bool,
    "push_to_hub": bool,
    "hub_token": str | None,
    "hub_private_repo": bool | None,
    "hub_model_id": str | None,
    "hub_strategy": str,
    "hub_always_push": bool,
    "hub_revision": str | None,
    "load_best_model_at_end": bool,
    "metric_for_best_model": str | None,
    "greater_is_better": bool | None,
    "ignore_data_skip": bool,
    "restore_callback_states_from_checkpoint": bool,
    "full_determinism": bool,
    "seed": int,
    "data_seed": int | None,
    "use_cpu": bool,
    "accelerator_config": dict | str | None,
    "parallelism_config": ParallelismConfig | None,
    "dataloader_drop_last": bool,
    "dataloader_num_workers": int,
    "dataloader_pin_memory": bool,
    "dataloader_persistent_workers": bool,
    "dataloader_prefetch_factor": int | None,
    "dataloader_multiprocessing_context": str | None,
    "dataloader_in_order": bool,
    "remove_unused_columns": bool | None,
    "label_names": list[str] | None,
    "train_sampling_strategy": str,
    "length_column_name": str,
    "ddp_find_unused_parameters": bool | None,
    "ddp_bucket_cap_mb": int | None,
    "ddp_broadcast_buffers": bool | None,
    "ddp_static_graph": bool | None,
    "ddp_backend": str | None,
    "ddp_timeout": int,
    "fsdp": str | None,
    "fsdp_config": dict[str, Any] | str | None,
    "deepspeed": dict | str | None,
    "debug": str | list[Literal["underflow_overflow", "tpu_metrics_debug"]],
    "skip_memory_metrics": bool,
    "do_train": bool,
    "do_eval": bool,
    "do_predict": bool,
    "resume_from_checkpoint": str | None,
    "local_rank": int,
}
"""transformers' ``TrainingArguments`` fields: name -> type (as ``GRPOConfig`` types them: it retypes ``bf16``,
``gradient_checkpointing`` and ``remove_unused_columns``)."""

GRPO_FIELDS: dict[str, Any] = {
    "model_init_kwargs": dict[str, Any] | str | None,
    "trust_remote_code": bool,
    "router_aux_loss_coef": float | None,
    "disable_dropout": bool,
    "cast_lm_head_to_fp32": bool,
    "num_generations": int | None,
    "num_generations_eval": int | None,
    "max_completion_length": int | None,
    "ds3_gather_for_generation": bool,
    "shuffle_dataset": bool | None,
    "pad_to_multiple_of": int | str | None,
    "generation_batch_size": int | None,
    "steps_per_generation": int | None,
    "temperature": float,
    "top_p": float,
    "top_k": int,
    "min_p": float | None,
    "generation_kwargs": dict | str | None,
    "chat_template_kwargs": dict | str | None,
    "repetition_penalty": float,
    "cache_implementation": str | None,
    "use_vllm": bool,
    "vllm_mode": str,
    "vllm_model_impl": str,
    "vllm_enable_sleep_mode": bool,
    "vllm_structured_outputs_regex": str | None,
    "vllm_server_base_url": str | None,
    "vllm_server_host": str,
    "vllm_server_port": int,
    "vllm_server_timeout": float,
    "vllm_group_port": int,
    "vllm_gpu_memory_utilization": float,
    "vllm_max_model_length": int | None,
    "vllm_tensor_parallel_size": int,
    "beta": float,
    "num_iterations": int,
    "epsilon": float,
    "delta": float | None,
    "epsilon_high": float | None,
    "sapo_temperature_neg": float,
    "sapo_temperature_pos": float,
    "vespo_k_pos": float,
    "vespo_lambda_pos": float,
    "vespo_k_neg": float,
    "vespo_lambda_neg": float,
    "importance_sampling_level": str,
    "reward_weights": list[float] | None,
    "multi_objective_aggregation": str,
    "scale_rewards": str,
    "loss_type": str,
    "mask_truncated_completions": bool,
    "sync_ref_model": bool,
    "ref_model_mixup_alpha": float,
    "ref_model_sync_steps": int,
    "top_entropy_quantile": float,
    "entropy_coef": float,
    "use_adaptive_entropy": bool,
    "entropy_coef_min": float,
    "entropy_coef_max": float,
    "entropy_coef_delta": float,
    "entropy_target": float,
    "max_tool_calling_iterations": int | None,
    "vllm_importance_sampling_correction": bool,
    "vllm_importance_sampling_mode": str,
    "vllm_importance_sampling_clip_max": float | None,
    "vllm_importance_sampling_clip_min": float | None,
    "off_policy_mask_threshold": float | None,
    "use_bias_correction_kl": bool,
    "log_completions": bool,
    "log_multimodal": bool,
    "num_completions_to_print": int | None,
    "log_unique_prompts": bool,
    "log_completions_hub_repo": str | None,
    "use_transformers_continuous_batching": bool,
    "transformers_continuous_batching_config": dict | str | None,
    "use_transformers_paged": bool,
    "vllm_importance_sampling_cap": float | None,
}
"""TRL's ``GRPOConfig`` fields after those of ``TrainingArguments``: name -> type."""

BANDPO_FIELDS: dict[str, Any] = {
    "clip_rule": str,
    "clip_rule_kwargs": dict[str, Any] | str | None,
    "band_divergence": str | None,
    "band_delta": float | None,
    "band_cap": float | None,
    "band_relax": list[float] | None,
    "band_delta_schedule": str,
    "band_delta_end": float | None,
    "band_delta_hold_frac": float | None,
    "diagnostics": str,
}
"""``BandPOConfig``'s own fields (:mod:`bandpo.integrations.trl`): the clip rule, its parameters, the radius
schedule, the diagnostics level."""

TRAINER_FIELDS: dict[str, Any] = {**TRAINING_ARGUMENTS_FIELDS, **GRPO_FIELDS, **BANDPO_FIELDS}
"""Every ``BandPOConfig`` init field: name -> type (a config's top-level keys besides ``method`` and the sections)."""


@dataclass(frozen=True)
class RenamedField:
    """A field renamed by TRL or transformers, still a field under its old name.

    Attributes:
        new: the field's name now.
        renamed_in: where it was renamed (``transformers 5``).
        refused: whether a config that writes the old name is refused (an error) rather than warned (it still
            works). Warned: the names transformers 5 renamed, which it reads until v6 and TRL 1.16 itself still
            sets (``gradient_checkpointing=True`` is GRPOConfig's default); refused: TRL's renamed fields, which
            TRL warns will go in v2 and which no bandpo config has written.
    """

    new: str
    renamed_in: str
    refused: bool


RENAMED_FIELDS: dict[str, RenamedField] = {
    "gradient_checkpointing": RenamedField("activation_checkpointing", "transformers 5", refused=False),
    "gradient_checkpointing_kwargs": RenamedField(
        "activation_checkpointing_kwargs", "transformers 5", refused=False
    ),
    "use_transformers_paged": RenamedField("use_transformers_continuous_batching", "TRL 1.2", refused=True),
    "vllm_importance_sampling_cap": RenamedField(
        "vllm_importance_sampling_clip_max", "TRL 1.6", refused=True
    ),
}
"""Old field name -> its new name (the field's help in transformers' ``TrainingArguments`` or TRL's ``GRPOConfig``
says "Deprecated ... use NEW")."""
