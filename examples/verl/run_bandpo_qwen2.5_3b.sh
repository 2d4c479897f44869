#!/usr/bin/env bash
# BandPO on verl (>= 0.9): the authors' recipe for Qwen2.5-3B-Instruct (docs/method.md#recipe), one 8-GPU node.
#
# GRPO advantages (group size 16), 256 prompts per step in 4 mini-batches of 64 (4 policy updates per rollout),
# lr 1e-6 constant, AdamW weight decay 0.01, grad clip 1.0, max response 4096, temperature 1.0,
# k3 ("low_var_kl") KL loss 0.001, no entropy bonus, seq-mean-token-mean, dual clip c = 10,
# and the BandPO policy loss (Band-KL, delta 0.05, upper bound capped at 10) instead of the fixed clip.
#
# Needs: pip install ./bandpo verl, bandpo from its clone (same environment on every node: verl finds bandpo's `verl.plugins` entry
# point at `import verl` in each Ray worker), plus verl's GPU stack (vLLM, ...).
# Data: parquet files in verl's RL format (prompt, reward_model.ground_truth, data_source). With
# data_source = "math_dapo" (or "aime*") verl's default reward is the authors' one: the final line
# "Answer: ..." normalised, exact match, +1 / -1 (verl.utils.reward_score.math_dapo).
# Train: DAPO-Math-17k + MATH levels 3-5. Validation: AMC23 (40), AIME24 (30), AIME25 (30), mean@32.
#
# Usage:  MODEL_PATH=... DATA_DIR=... bash examples/verl/run_bandpo_qwen2.5_3b.sh [extra hydra overrides]
#         DIVERGENCE=tv bash ...          # Band with another divergence (kl, reverse_kl, tv, chi2, ...)
#         LOSS_MODE=dcpo bash ...         # the DCPO baseline (eps 0.16 / 0.20 through the clip ratios)
#         LOSS_MODE=vanilla bash ...      # the GRPO baseline (fixed clip 0.2 / 0.2)
#         DRY_RUN=1 bash ...              # print the hydra overrides, one per line, and exit
set -euo pipefail

MODEL_PATH=${MODEL_PATH:-Qwen/Qwen2.5-3B-Instruct}
DATA_DIR=${DATA_DIR:-$HOME/data/bandpo}
TRAIN_FILES=${TRAIN_FILES:-"['${DATA_DIR}/dapo_math_17k.parquet','${DATA_DIR}/math_level3to5.parquet']"}
VAL_FILES=${VAL_FILES:-"['${DATA_DIR}/amc23.parquet','${DATA_DIR}/aime24.parquet','${DATA_DIR}/aime25.parquet']"}
NNODES=${NNODES:-1}
GPUS_PER_NODE=${GPUS_PER_NODE:-8}
LOSS_MODE=${LOSS_MODE:-bandpo}   # bandpo | dcpo | vanilla
DIVERGENCE=${DIVERGENCE:-kl}
DELTA=${DELTA:-0.05}
CAP=${CAP:-10.0}
EXPERIMENT=${EXPERIMENT:-qwen2.5-3b-${LOSS_MODE}-${DIVERGENCE}-${DELTA}}

if [[ "${LOSS_MODE}" == "dcpo" ]]; then
    CLIP_LOW=0.16; CLIP_HIGH=0.20
else
    CLIP_LOW=0.2; CLIP_HIGH=0.2
fi

# The overrides that select BandPO (the rest is the authors' GRPO recipe). New keys need the leading `+`.
BANDPO_OVERRIDES=(
    "actor_rollout_ref.actor.policy_loss._target_=bandpo.integrations.verl.BandPOPolicyLossConfig"
    "actor_rollout_ref.actor.policy_loss.loss_mode=${LOSS_MODE}"
    "+actor_rollout_ref.actor.policy_loss.divergence=${DIVERGENCE}"
    "+actor_rollout_ref.actor.policy_loss.delta=${DELTA}"
    "+actor_rollout_ref.actor.policy_loss.cap=${CAP}"
    "+actor_rollout_ref.actor.policy_loss.relax=false"
    "actor_rollout_ref.actor.clip_ratio_low=${CLIP_LOW}"
    "actor_rollout_ref.actor.clip_ratio_high=${CLIP_HIGH}"
    "actor_rollout_ref.actor.clip_ratio_c=10.0"
)

RECIPE_OVERRIDES=(
    "algorithm.adv_estimator=grpo"
    "algorithm.norm_adv_by_std_in_grpo=true"
    "algorithm.use_kl_in_reward=false"
    "data.train_files=${TRAIN_FILES}"
    "data.val_files=${VAL_FILES}"
    "data.prompt_key=prompt"
    "data.train_batch_size=256"
    "data.max_prompt_length=1024"
    "data.max_response_length=4096"
    "data.filter_overlong_prompts=true"
    "data.truncation=error"
    "actor_rollout_ref.model.path=${MODEL_PATH}"
    "actor_rollout_ref.model.use_remove_padding=true"
    "actor_rollout_ref.model.enable_gradient_checkpointing=true"
    "actor_rollout_ref.actor.optim.lr=1e-6"
    "actor_rollout_ref.actor.optim.lr_scheduler_type=constant"
    "actor_rollout_ref.actor.optim.weight_decay=0.01"
    "actor_rollout_ref.actor.optim.clip_grad=1.0"
    "actor_rollout_ref.actor.ppo_mini_batch_size=64"
    "actor_rollout_ref.actor.ppo_epochs=1"
    "actor_rollout_ref.actor.use_dynamic_bsz=true"
    "actor_rollout_ref.actor.ppo_max_token_len_per_gpu=20480"
    "actor_rollout_ref.actor.loss_agg_mode=seq-mean-token-mean"
    "actor_rollout_ref.actor.use_kl_loss=true"
    "actor_rollout_ref.actor.kl_loss_coef=0.001"
    "actor_rollout_ref.actor.kl_loss_type=low_var_kl"
    "actor_rollout_ref.actor.entropy_coeff=0"
    "actor_rollout_ref.rollout.name=vllm"
    "actor_rollout_ref.rollout.n=16"
    "actor_rollout_ref.rollout.temperature=1.0"
    "actor_rollout_ref.rollout.tensor_model_parallel_size=1"
    "actor_rollout_ref.rollout.gpu_memory_utilization=0.7"
    "actor_rollout_ref.rollout.val_kwargs.n=32"
    "actor_rollout_ref.rollout.val_kwargs.temperature=1.0"
    "actor_rollout_ref.rollout.val_kwargs.do_sample=true"
    "trainer.project_name=bandpo"
    "trainer.experiment_name=${EXPERIMENT}"
    "trainer.logger=[console,wandb]"
    "trainer.nnodes=${NNODES}"
    "trainer.n_gpus_per_node=${GPUS_PER_NODE}"
    "trainer.val_before_train=true"
    "trainer.test_freq=10"
    "trainer.save_freq=50"
    "trainer.total_epochs=10"
)

if [[ "${LOSS_MODE}" == "vanilla" ]]; then
    BANDPO_OVERRIDES=(
        "actor_rollout_ref.actor.policy_loss.loss_mode=vanilla"
        "actor_rollout_ref.actor.clip_ratio_low=0.2"
        "actor_rollout_ref.actor.clip_ratio_high=0.2"
        "actor_rollout_ref.actor.clip_ratio_c=10.0"
    )
fi

if [[ "${DRY_RUN:-0}" == "1" ]]; then
    printf '%s\n' "${RECIPE_OVERRIDES[@]}" "${BANDPO_OVERRIDES[@]}" "$@"
    exit 0
fi

python3 -m verl.trainer.main_ppo "${RECIPE_OVERRIDES[@]}" "${BANDPO_OVERRIDES[@]}" "$@"
