"""Where a held-out evaluation's time goes: PyTorch's profiler over one evaluation, operators by self CPU time.

Evaluates a model (default: the built-in SmolLM2-135M-Instruct) on the first problems of Study 4's held-out split
(the arith task), k samples per problem, at one thread, under ``torch.profiler``, and prints the wall time and the
operators that took the most CPU time themselves, grouped by input shapes with ``--shapes`` (a batch of 64 prompts x
8 samples is one sampling batch of 512 rows, as in the study's evaluations).

    .venv/bin/python scripts/profile_eval.py --problems 64 --max-new-tokens 32        # the study's batch
    .venv/bin/python scripts/profile_eval.py --problems 64 --max-new-tokens 4 --shapes
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from eval_allocator_speed import TASK_OPTIONS  # Study 4's held-out split


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="smollm2-135m", help="a model directory or built-in name")
    parser.add_argument("--problems", type=int, default=64, help="held-out problems (default 64)")
    parser.add_argument("--k", type=int, default=8, help="samples per problem (default 8)")
    parser.add_argument("--max-new-tokens", type=int, default=32, help="new tokens per sample (default 32)")
    parser.add_argument("--precision", default="bf16", help="sampling precision (default bf16, as Study 4)")
    parser.add_argument(
        "--attn-implementation", default="eager", help="attention (default eager, as Study 4's training)"
    )
    parser.add_argument("--rows", type=int, default=25, help="operators to print (default 25)")
    parser.add_argument("--shapes", action="store_true", help="group the operators by input shapes")
    args = parser.parse_args(argv)
    for name in ("problems", "k", "max_new_tokens", "rows"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be a positive integer, got {getattr(args, name)}")

    import torch
    from torch.profiler import ProfilerActivity, profile

    from bandpo_lab.eval.datasets import load_eval_dataset
    from bandpo_lab.eval.evaluate import evaluate_model
    from bandpo_lab.eval.models import load_model, resolve_model_dir
    from bandpo_lab.eval.settings import EvalSettings

    torch.set_num_threads(1)
    path = resolve_model_dir(args.model)
    data = load_eval_dataset("arith", split="test", task_options=TASK_OPTIONS, max_problems=args.problems)
    settings = EvalSettings(
        k=args.k,
        ks=(1, args.k),
        temperature=1.0,
        max_new_tokens=args.max_new_tokens,
        seed=0,
        precision=args.precision,
        progress=False,
    )
    model, tokenizer = load_model(
        path, device="cpu", dtype="float32", attn_implementation=args.attn_implementation
    )
    with profile(activities=[ProfilerActivity.CPU], record_shapes=args.shapes) as prof:
        start = time.perf_counter()
        evaluate_model(model, tokenizer, [data], settings)
        wall = time.perf_counter() - start
    print(
        f"{args.model}: {args.problems} problems x {args.k} samples, {args.max_new_tokens} new tokens, "
        f"{args.precision} sampling, {args.attn_implementation} attention, one thread: {wall:.1f} s (profiled)"
    )
    table = prof.key_averages(group_by_input_shape=args.shapes).table(
        sort_by="self_cpu_time_total",
        row_limit=args.rows,
        max_name_column_width=28,
        max_shapes_column_width=70,
    )
    print(table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
