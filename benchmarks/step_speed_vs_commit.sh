#!/usr/bin/env bash
# Optimizer steps per hour of configs/smollm2-arith.yaml: this checkout (its precision: auto) against the code of an
# earlier commit (default 5aee1b2: float32 everywhere, before bandpo_lab.runtime), side by side at one thread each so
# both see the same machine. Each trains STEPS steps; the figure is the mean step_time of steps 3..STEPS (the
# first round includes the warm-up) from metrics.jsonl. MODE=sequential runs them one after the other instead,
# each alone on the machine (side by side, each slows the other by sharing caches and memory bandwidth, and not
# equally: docs/smollm2.md).
#   [MODE=sequential] benchmarks/step_speed_vs_commit.sh [COMMIT] [STEPS]
set -euo pipefail
COMMIT=${1:-5aee1b2}
STEPS=${2:-10}
if ! [[ "$STEPS" =~ ^[0-9]+$ ]] || (( 10#$STEPS < 3 )); then  # the mean is over steps 3..STEPS
  echo "step_speed_vs_commit.sh: STEPS must be an integer >= 3 (the mean is over steps 3..STEPS), got '$STEPS'" >&2
  exit 2
fi
HERE=$PWD
OLD=${OLD_TREE:-/tmp/bandpo-$COMMIT}
[ -d "$OLD" ] || git worktree add -q "$OLD" "$COMMIT"
export OMP_NUM_THREADS=1 HF_HUB_OFFLINE=1
OUT=${OUT:-runs/step-speed}
mkdir -p "$OUT"
# The old tree's own command: this checkout's `bandpo` script imports bandpo_lab.cli.main, which a tree from before
# the lab moved (4efc9ed) lacks, so that tree's bandpo would run under this checkout's lab and fail to import.
if [ -d "$OLD/src/bandpo_lab" ]; then OLD_CLI=bandpo_lab.cli.main; else OLD_CLI=bandpo.cli.main; fi
old() {
  (cd "$OLD" && PYTHONPATH="$OLD/src" "$HERE/.venv/bin/python" -c "import sys; from $OLD_CLI import main; sys.exit(main())" \
    train --config configs/smollm2-arith.yaml --overwrite \
    max_steps="$STEPS" save_steps=1000 disable_tqdm=true output_dir="$HERE/$OUT/old" > "$HERE/$OUT/old.log" 2>&1)
}
new() {
  .venv/bin/bandpo train --config configs/smollm2-arith.yaml --overwrite max_steps="$STEPS" save_steps=1000 \
    disable_tqdm=true output_dir="$OUT/new" > "$OUT/new.log" 2>&1
}
failed() {  # NAME STATUS: say which run failed and where its log is
  echo "step_speed_vs_commit.sh: the $1 run failed (exit $2); see $OUT/$1.log" >&2
}
case "${MODE:-side-by-side}" in
  side-by-side)
    # wait on each run by its pid: a bare `wait` returns 0 whatever the runs' statuses were
    old & old_pid=$!
    new & new_pid=$!
    status=0
    wait "$old_pid" || { s=$?; failed old "$s"; status=1; }
    wait "$new_pid" || { s=$?; failed new "$s"; status=1; }
    [ "$status" = 0 ] || exit 1
    ;;
  sequential)
    old || { s=$?; failed old "$s"; exit 1; }
    new || { s=$?; failed new "$s"; exit 1; }
    ;;
  *) echo "MODE must be side-by-side or sequential, got ${MODE}" >&2; exit 2 ;;
esac
.venv/bin/python - "$OUT" <<'PY'
import json, sys
out = sys.argv[1]
rate = {}
for name in ("old", "new"):
    rows = [json.loads(line) for line in open(f"{out}/{name}/metrics.jsonl")]
    times = [r["step_time"] for r in rows if "step_time" in r][2:]
    rate[name] = 3600 / (sum(times) / len(times))
    print(f"{name}: {sum(times) / len(times):.1f} s per step over steps 3-{len(times) + 2}, {rate[name]:.0f} steps per hour")
print(f"new / old: {rate['new'] / rate['old']:.2f}x the optimizer steps per hour")
PY
