#!/usr/bin/env bash
# Study 3 of docs/study.md: GRPO vs Band-KL on SmolLM2-135M-Instruct, two queues side by side (one core each),
# seeds in the same order in both queues so that an interrupted study has both methods on the same seeds.
#   studies/study3/run.sh            # from the repository root; resumable (finished runs are kept,
#   SEEDS="303 304" studies/study3/run.sh   # interrupted ones resume from their last checkpoint)
set -uo pipefail
BANDPO=${BANDPO:-bandpo}
OUT=${OUT:-runs/study/smollm2}
SEEDS=${SEEDS:-300 301 302}
mkdir -p "$OUT"
run() {  # run METHODS SEEDS [extra]
  $BANDPO compare --config studies/study3/config.yaml --methods "$1" --no-progress \
    output_dir="$OUT" seeds="$2" "${@:3}" || echo "compare $1 $2 exited $?"
}
q1() { for s in $SEEDS; do run grpo "[$s]"; done; }
q2() { for s in $SEEDS; do run band-kl "[$s]" baseline=false; done; }
q1 > "$OUT.queue1.log" 2>&1 &
q2 > "$OUT.queue2.log" 2>&1 &
wait
$BANDPO compare --config studies/study3/config.yaml --report-only --no-progress output_dir="$OUT"
