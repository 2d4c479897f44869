#!/usr/bin/env bash
# The final comparison of docs/study.md at the grid's chosen cell C (no KL term: beta 0), two queues side by side
# (one core each), seeds 100-102 first so that an interrupted study has every method on the same seeds.
#   studies/study1/run_final.sh            # from the repository root; resumable (finished runs are kept)
set -uo pipefail
BANDPO=${BANDPO:-bandpo}
OUT=${OUT:-runs/study/final}
mkdir -p "$OUT"
cell=(train.overrides.beta=0.0)
run() {  # run METHODS SEEDS [extra]
  $BANDPO compare --config studies/study1/final.yaml --methods "$1" --no-progress \
    output_dir="$OUT" "${cell[@]}" seeds="$2" "${@:3}" || echo "compare $1 $2 exited $?"
}
q1() { run grpo,clip_higher,dcpo,dppo-kl "[100,101,102]"; run grpo,clip_higher,dcpo,dppo-kl "[103,104]"; }
q2() { run band-kl,band-tv,band-chi2 "[100,101,102]" baseline=false; run band-kl,band-tv,band-chi2 "[103,104]" baseline=false; }
q1 > "$OUT.queue1.log" 2>&1 &
q2 > "$OUT.queue2.log" 2>&1 &
wait
$BANDPO compare --config studies/study1/final.yaml --report-only --no-progress output_dir="$OUT" "${cell[@]}"
