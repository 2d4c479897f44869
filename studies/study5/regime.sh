#!/usr/bin/env bash
# Issue 47, item 4 (exploratory, not part of Study 5's registration): where the paper's mechanism can act at this
# scale. `bandpo probe` on SmolLM2-135M with Study 5's task, in two update patterns, each at lr 1e-5 and 1e-6:
#   study4: 8 prompts x 8 completions, 8 mini-batches of 8, 16 updates (each completion used twice: Study 4/5's regime)
#   paper:  8 prompts x 8 completions, 4 mini-batches of 16, 4 updates (each completion used once, the first update
#           on-policy: the authors' scripts' pattern, 4 mini-batches of 1,024 there, scaled down; 16 prompts in 4
#           mini-batches of 32 was killed for memory beside Study 5's two runs on this 24 GiB machine)
# Clip share, tail share and Band's per-side tokens by update index come out in each folder's results.md.
# Usage (from the main checkout): studies/study5/regime.sh [OUT]   (default OUT runs/regime; one thread)
set -uo pipefail
OUT=${1:-runs/regime}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1} HF_HUB_OFFLINE=1
TASK="{digits: [1, 2], second_digits: [1], n_train: 2000, n_test: 500}"
probe() {  # probe NAME LR [options]
  local start=$SECONDS
  .venv/bin/bandpo probe --model smollm2-135m --dataset arith --task-options "$TASK" --max-new-tokens 32 \
    --rules grpo,band --lr "$2" --no-progress -o "$OUT/$1-lr$2" "${@:3}"
  echo "$1 lr $2: exit $?, $((SECONDS - start)) s"
}
STUDY4=(--prompts 8 --group-size 8 --minibatches 8 --updates 16)
PAPER=(--prompts 8 --group-size 8 --minibatches 4 --updates 4)
for lr in ${LRS:-1e-5 1e-6}; do
  [[ -f "$OUT/study4-lr$lr/results.json" ]] || probe study4 "$lr" "${STUDY4[@]}"
  [[ -f "$OUT/paper-lr$lr/results.json" ]] || probe paper "$lr" "${PAPER[@]}"
done
