"""The same weights evaluated with eager attention and with PyTorch's fused attention (``sdpa``): speed and samples.

A model saved by transformers does not record its attention implementation, so ``from_pretrained`` without one
picks ``sdpa``; Study 4's runs train (and evaluate during training) with ``eager`` and, at the study's commits,
load the saved policy for the final evaluation without the setting (docs/study.md, "Disclosure: the attention of
the final evaluation"). This evaluates one model both ways, each twice, alternating, in one process at one thread
(the arith task's Study 4 held-out split, k samples per problem, bf16 sampling as in the study), and prints each
implementation's wall times as ratios to eager's first, whether each repeats its own completions exactly, and how
many completions the two share. Exit 1 if an implementation does not repeat itself.

    .venv/bin/python scripts/eval_attention.py --problems 16            # the built-in SmolLM2-135M-Instruct
    .venv/bin/python scripts/eval_attention.py --model runs/some-run     # a trained policy
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from eval_allocator_speed import TASK_OPTIONS  # Study 4's held-out split

ORDER = ("eager", "sdpa", "eager", "sdpa")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="smollm2-135m", help="a model directory or built-in name")
    parser.add_argument("--problems", type=int, default=16, help="held-out problems (default 16)")
    parser.add_argument("--k", type=int, default=8, help="samples per problem (default 8)")
    parser.add_argument("--precision", default="bf16", help="sampling precision (default bf16, as Study 4)")
    args = parser.parse_args(argv)
    if args.problems < 1 or args.k < 1:
        parser.error(f"--problems and --k must be positive integers, got {args.problems} and {args.k}")

    import torch

    from bandpo_lab.eval.datasets import load_eval_dataset
    from bandpo_lab.eval.evaluate import evaluate_model
    from bandpo_lab.eval.models import load_model, resolve_model_dir
    from bandpo_lab.eval.settings import EvalSettings

    torch.set_num_threads(1)
    path = resolve_model_dir(args.model)
    data = load_eval_dataset("arith", split="test", task_options=TASK_OPTIONS, max_problems=args.problems)
    settings = EvalSettings(
        k=args.k, ks=(1, args.k), temperature=1.0, max_new_tokens=32, seed=0, precision=args.precision
    )
    walls: dict[str, list[float]] = {}
    samples: dict[str, list[list[list[str]]]] = {}
    for i, attn in enumerate(ORDER, 1):
        print(f"[{i}/{len(ORDER)}] {attn} ...", file=sys.stderr, flush=True)
        model, tokenizer = load_model(path, device="cpu", dtype="float32", attn_implementation=attn)
        out = evaluate_model(model, tokenizer, [data], settings, keep_samples=True)
        walls.setdefault(attn, []).append(out["wall_time_s"])
        samples.setdefault(attn, []).append([s["completions"] for s in out["samples"]])
    base = walls["eager"][0]
    print(f"{args.model}: {args.problems} problems x {args.k} samples, {args.precision} sampling, one thread")
    repeats = True
    for attn in ("eager", "sdpa"):
        same = samples[attn][0] == samples[attn][1]
        repeats = repeats and same
        times = ", ".join(f"{w:.1f} s ({w / base:.2f}x)" for w in walls[attn])
        print(f"  {attn:<6} {times}; repeats its completions exactly: {same}")
    pairs = [(a, b) for ca, cb in zip(samples["eager"][0], samples["sdpa"][0]) for a, b in zip(ca, cb)]
    shared = sum(a == b for a, b in pairs)
    print(f"completions the two share: {shared} of {len(pairs)}")
    return 0 if repeats else 1


if __name__ == "__main__":
    raise SystemExit(main())
