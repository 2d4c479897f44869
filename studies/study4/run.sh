#!/usr/bin/env bash
# Study 4 of docs/study.md: GRPO, Band-KL and Clip-Higher on SmolLM2-135M-Instruct, two queues side by side (one core
# each, OMP_NUM_THREADS=1: docs/smollm2.md measures it against one process at two threads). Queue 1 runs GRPO, queue 2
# Band-KL, seed by seed in the same order, so that an interrupted study has both methods on the same seeds: seeds
# 410-419, then Clip-Higher on 410-415 (split over both queues), then seeds 420-439 (docs/study.md, Study 4).
# Resumable: finished runs are kept, an interrupted run resumes from its last checkpoint (bandpo compare). The study's
# runs used this script as configs/study/run_study4.sh in a worktree at the study's commits (studies/study4/README.md):
#   git worktree add ../study4 083dcc6 && cd ../study4 && ln -s ../main/.venv .venv && configs/study/run_study4.sh
# Here it runs the same queues with this checkout's code: studies/study4/run.sh from the repository root.
# The worktree's own source comes first on the path (the shared .venv's editable install points at the main
# checkout), so the runs and their provenance are the worktree's commit.
set -uo pipefail
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"
BANDPO=${BANDPO:-.venv/bin/bandpo}
.venv/bin/python -c "import bandpo, sys; print('bandpo from', bandpo.__file__)"
OUT=${OUT:-runs/study/study4}
FIRST=${FIRST:-$(seq -s ' ' 410 419)}
REST=${REST:-$(seq -s ' ' 420 439)}
HIGHER=${HIGHER:-$(seq -s ' ' 410 415)}
export HF_HUB_OFFLINE=1
mkdir -p "$OUT"
run() {  # run METHOD SEED [extra]
  $BANDPO compare --config studies/study4/config.yaml --methods "$1" --no-progress \
    output_dir="$OUT" seeds="[$2]" "${@:3}" || echo "compare $1 $2 exited $?"
}
half() { local i=0; for s in $HIGHER; do [ $((i % 2)) -eq "$1" ] && run clip-higher "$s" baseline=false; i=$((i + 1)); done; }
q1() { for s in $FIRST; do run grpo "$s"; done; half 0; for s in $REST; do run grpo "$s" baseline=false; done; }
q2() { for s in $FIRST; do run band-kl "$s" baseline=false; done; half 1; for s in $REST; do run band-kl "$s" baseline=false; done; }
q1 > "$OUT.queue1.log" 2>&1 &
q2 > "$OUT.queue2.log" 2>&1 &
wait
$BANDPO compare --config studies/study4/config.yaml --report-only --no-progress output_dir="$OUT"
