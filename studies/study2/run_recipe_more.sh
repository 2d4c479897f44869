#!/usr/bin/env bash
# Study 2b of docs/study.md: Band-chi2 and DPPO-KL on Study 2's seeds, one queue each (one core each); the GRPO
# and Band-KL runs of Study 2 in the same output_dir are reused (same config: same fingerprint).
#   OUT=runs/study/recipe studies/study2/run_recipe_more.sh      # from the repository root; resumable
set -uo pipefail
BANDPO=${BANDPO:-bandpo}
OUT=${OUT:-runs/study/recipe}
mkdir -p "$OUT"
run() {  # run METHODS SEEDS [extra]
  $BANDPO compare --config studies/study2/recipe-more.yaml --methods "$1" --no-progress \
    output_dir="$OUT" seeds="$2" "${@:3}" || echo "compare $1 $2 exited $?"
}
q1() { for s in 200 201 202 203 204; do run band-chi2 "[$s]" baseline=false; done; }
q2() { for s in 200 201 202 203 204; do run dppo-kl "[$s]" baseline=false; done; }
q1 > "$OUT.queue3.log" 2>&1 &
q2 > "$OUT.queue4.log" 2>&1 &
wait
$BANDPO compare --config studies/study2/recipe-more.yaml --report-only --no-progress output_dir="$OUT"
