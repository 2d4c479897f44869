#!/usr/bin/env bash
# Study 5 (studies/study5/README.md): GRPO, Band-KL, band_upper and band_lower on SmolLM2-135M-Instruct in Study 4's
# regime, two queues side by side (one core each, OMP_NUM_THREADS=1 through the config's num_threads). Seed by seed in
# the registered order; per seed, queue 1 runs band-upper then grpo, queue 2 band-lower then band-kl, so that an
# interrupted study has all four rules on the same seeds. Resumable: finished runs are kept, an interrupted run
# resumes from its last checkpoint (bandpo compare). Run it from a worktree at the registration commit, through
#   .venv/bin/python studies/study5/session.py resume        (from the main checkout)
# The worktree's own source comes first on the path (the shared .venv's editable install points at the main
# checkout), so the runs and their provenance are the worktree's commit.
set -uo pipefail
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"
BANDPO=${BANDPO:-.venv/bin/bandpo}
CONFIG=studies/study5/config.yaml
.venv/bin/python -c "import bandpo, sys; print('bandpo from', bandpo.__file__)"
OUT=${OUT:-runs/study/study5}
SEEDS=${SEEDS:-$(seq -s ' ' 410 427)}
export HF_HUB_OFFLINE=1
mkdir -p "$OUT"
run() {  # run METHOD SEED [extra]
  $BANDPO compare --config "$CONFIG" --methods "$1" --no-progress output_dir="$OUT" seeds="[$2]" "${@:3}" \
    || echo "compare $1 $2 exited $?"
}
# queue 1 evaluates the starting policy once (the config's baseline: true; skipped once done); queue 2 never does
q1() { for s in $SEEDS; do run band-upper "$s"; run grpo "$s"; done; }
q2() { for s in $SEEDS; do run band-lower "$s" baseline=false; run band-kl "$s" baseline=false; done; }
q1 > "$OUT.queue1.log" 2>&1 &
q2 > "$OUT.queue2.log" 2>&1 &
wait
$BANDPO compare --config "$CONFIG" --report-only --no-progress output_dir="$OUT"
