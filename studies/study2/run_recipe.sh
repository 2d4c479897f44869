#!/usr/bin/env bash
# Study 2 of docs/study.md: GRPO vs Band-KL at the default recipe, two queues side by side (one core each),
# seeds in the same order in both queues so that an interrupted study has both methods on the same seeds.
#   studies/study2/run_recipe.sh           # from the repository root; resumable (finished runs are kept)
set -uo pipefail
BANDPO=${BANDPO:-bandpo}
OUT=${OUT:-runs/study/recipe}
mkdir -p "$OUT"
run() {  # run METHODS SEEDS [extra]
  $BANDPO compare --config studies/study2/recipe.yaml --methods "$1" --no-progress \
    output_dir="$OUT" seeds="$2" "${@:3}" || echo "compare $1 $2 exited $?"
}
q1() { for s in 200 201 202 203 204; do run grpo "[$s]"; done; }
q2() { for s in 200 201 202 203 204; do run band-kl "[$s]" baseline=false; done; }
q1 > "$OUT.queue1.log" 2>&1 &
q2 > "$OUT.queue2.log" 2>&1 &
wait
$BANDPO compare --config studies/study2/recipe.yaml --report-only --no-progress output_dir="$OUT"
