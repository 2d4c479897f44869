"""Eager attention from float32 copies of the cache (``bandpo_lab.bf16_attention``) against transformers' own, in an
evaluation with emulated bf16: the speed of each, and whether they give the same results.

Evaluates one model with eager attention and bf16 sampling (Study 4's settings: the arith task's held-out split, k
samples per problem, 32 new tokens), with the copies off (transformers' eager function under the emulation) and on,
each twice, alternating, in one process at one thread, and prints the wall times as ratios to the first run without
the copies with the seconds spent inside the attention function (a timer around it), and whether all four give the
same completions and the same scores and sampling entropy (they must: exit 1 otherwise). Where this CPU has native bf16 instructions nothing is emulated and there is nothing to compare
(exit 0 with a line that says so).

    .venv/bin/python scripts/bench_bf16_attention.py --problems 16        # the built-in SmolLM2-135M-Instruct
    .venv/bin/python scripts/bench_bf16_attention.py --model runs/some-run --problems 64
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import time
from pathlib import Path
from typing import Any
from unittest import mock

sys.path.insert(0, str(Path(__file__).resolve().parent))
from eval_allocator_speed import TASK_OPTIONS  # Study 4's held-out split

ORDER = (False, True, False, True)
"""Copies off, on, off, on."""


def _without_copies() -> contextlib.AbstractContextManager[Any]:
    """``Precision.sampling`` as it was before ``bandpo_lab.bf16_attention``: autocast and the emulated products only."""
    from bandpo_lab.runtime import Precision

    return mock.patch.object(Precision, "_attention", lambda self: contextlib.nullcontext())


@contextlib.contextmanager
def _timed(owner: Any, name: str, seconds: list[float]) -> Any:
    """Add the wall time of every call of ``owner.name`` to ``seconds[0]`` within the block."""
    original = getattr(owner, name)

    def timed(*args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        try:
            return original(*args, **kwargs)
        finally:
            seconds[0] += time.perf_counter() - start

    with mock.patch.object(owner, name, timed):
        yield


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="smollm2-135m", help="a model directory or built-in name")
    parser.add_argument("--problems", type=int, default=16, help="held-out problems (default 16)")
    parser.add_argument("--k", type=int, default=8, help="samples per problem (default 8)")
    args = parser.parse_args(argv)
    if args.problems < 1 or args.k < 1:
        parser.error(f"--problems and --k must be positive integers, got {args.problems} and {args.k}")

    import torch

    from bandpo_lab.bf16_attention import EagerAttentionCopies
    from bandpo_lab.eval.datasets import load_eval_dataset
    from bandpo_lab.eval.evaluate import evaluate_model
    from bandpo_lab.eval.models import load_model, resolve_model_dir
    from bandpo_lab.eval.settings import EvalSettings
    from bandpo_lab.runtime import resolve_precision

    precision = resolve_precision("bf16")
    if not precision.emulated:
        print(f"bf16 is not emulated on this CPU ({precision.reason}): no copies to compare")
        return 0
    torch.set_num_threads(1)
    path = resolve_model_dir(args.model)
    data = load_eval_dataset("arith", split="test", task_options=TASK_OPTIONS, max_problems=args.problems)
    settings = EvalSettings(
        k=args.k, ks=(1, args.k), temperature=1.0, max_new_tokens=32, seed=0, precision="bf16"
    )
    model, tokenizer = load_model(path, device="cpu", dtype="float32", attn_implementation="eager")
    model_file = sys.modules[type(model).__module__]  # where the model's eager_attention_forward lives
    walls: dict[bool, list[float]] = {}
    in_attention: dict[bool, list[float]] = {}
    outputs: list[str] = []
    for i, copies in enumerate(ORDER, 1):
        print(f"[{i}/{len(ORDER)}] copies {'on' if copies else 'off'} ...", file=sys.stderr, flush=True)
        seconds = [0.0]
        with contextlib.ExitStack() as stack:
            if copies:
                stack.enter_context(_timed(EagerAttentionCopies, "__call__", seconds))
            else:
                stack.enter_context(_without_copies())
                stack.enter_context(_timed(model_file, "eager_attention_forward", seconds))
            out = evaluate_model(model, tokenizer, [data], settings, keep_samples=True)
        walls.setdefault(copies, []).append(out.pop("wall_time_s"))
        in_attention.setdefault(copies, []).append(seconds[0])
        outputs.append(json.dumps(out, sort_keys=True))  # completions, scores, entropy: everything else
    base = walls[False][0]
    print(
        f"{args.model}: {args.problems} problems x {args.k} samples, eager attention, emulated bf16, one thread"
    )
    for copies in (False, True):
        times = ", ".join(
            f"{w:.1f} s ({w / base:.2f}x; {a:.1f} s in attention)"
            for w, a in zip(walls[copies], in_attention[copies], strict=True)
        )
        print(f"  copies {'on ' if copies else 'off'}: {times}")
    print(f"speed-up (mean of each's two): {sum(walls[False]) / sum(walls[True]):.2f}x")
    same = all(o == outputs[0] for o in outputs)
    print(f"the four evaluations give the same completions, scores and entropy: {same}")
    return 0 if same else 1


if __name__ == "__main__":
    raise SystemExit(main())
