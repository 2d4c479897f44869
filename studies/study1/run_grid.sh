#!/usr/bin/env bash
# The regime grid of docs/study.md: 6 cells in two queues that run side by side (one core each).
#   studies/study1/run_grid.sh            # from the repository root; resumable (finished runs are kept)
# BANDPO: the command to run (default: bandpo); OUT: where the cells go (default: runs/study/grid).
set -uo pipefail
BANDPO=${BANDPO:-bandpo}
OUT=${OUT:-runs/study/grid}
cfg=studies/study1
mkdir -p "$OUT"
cell() {  # cell NAME CONFIG OVERRIDES...
  local name=$1 config=$2
  shift 2
  $BANDPO compare --config "$cfg/$config" output_dir="$OUT/$name" "$@" || echo "cell $name: compare exited $?"
}
queue1() {
  cell A grid-delta.yaml
  cell B grid.yaml train.overrides.beta=0.02
  cell C grid.yaml train.overrides.beta=0.0
}
queue2() {
  cell F grid-delta.yaml train.overrides.beta=0.0 train.overrides.learning_rate=1e-3 \
    train.overrides.steps_per_generation=8
  cell D grid.yaml train.overrides.learning_rate=1e-3
  cell E grid.yaml train.overrides.steps_per_generation=8
}
queue1 > "${OUT}.queue1.log" 2>&1 &
queue2 > "${OUT}.queue2.log" 2>&1 &
wait
