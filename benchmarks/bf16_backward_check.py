"""The bf16 backward on SmolLM2-135M-Instruct: its log-probs, gradient and time against float32 (docs/smollm2.md,
"The backward in bfloat16 products").

One micro-batch of the recipe's shape (16 sequences of 54 tokens, the last 16 scored, random token ids; fixed
seed), TRL's fused LM head on the scored tokens, loss ``-mean(A * logp)`` with random advantages. Three ways:

  float32          every product in float32
  bf16_inputs      oneDNN's fp32_precision = "bf16" for the backward (bf16 precision before bandpo_lab.bf16_backward)
  bf16             Precision("bf16").backward(): the linear layers' backward in bfloat16 products

Printed: whether the log-probs equal float32's bit for bit, the relative difference of the whole gradient and
per parameter tensor (median, max) against float32, and the best of ``--rounds`` forward + backward times after
one warm-up call per way, with their ratio to float32's (time / float32's time: below 1 is faster).

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/bf16_backward_check.py [--rounds 2]
"""

from __future__ import annotations

import argparse
import contextlib
import time
from collections.abc import Callable, Iterator

import torch


def format_time(seconds: float, ref_seconds: float) -> str:
    """A way's forward + backward time and its ratio to float32's, as the project writes "x baseline":
    time / baseline time (below 1: faster than float32)."""
    return f"forward + backward {seconds:.2f} s ({seconds / ref_seconds:.2f}x float32's time)"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2, help="timed repetitions per way (default: 2)")
    args = parser.parse_args(argv)
    if args.rounds < 1:
        parser.error(f"--rounds must be an integer >= 1, got {args.rounds}")
    # imported after the options are checked: transformers and TRL take seconds to import
    from transformers import AutoModelForCausalLM
    from trl.trainer.utils import add_fused_lm_head

    from bandpo_lab.models import builtin_model_dir
    from bandpo_lab.runtime import (
        completion_tokens_only,
        freed_memory_kept,
        matmul_precision,
        resolve_precision,
    )
    from bandpo_lab.training.tasks import default_cache_dir

    try:  # before the model loads: a CPU without native bf16 refuses bf16
        bf16 = resolve_precision("bf16")
    except ValueError as err:
        parser.error(str(err))
    path = builtin_model_dir("smollm2-135m", default_cache_dir(), progress=False)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32, attn_implementation="eager")
    add_fused_lm_head(model, outputs=("log_probs", "entropy"))
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, model.config.vocab_size, (16, 54), generator=g)
    labels = ids.clone()
    labels[:, :-16] = -100
    adv = torch.randn(16, 1, generator=g)

    @contextlib.contextmanager
    def bf16_inputs() -> Iterator[None]:
        with matmul_precision("bf16"):
            yield

    ways: dict[str, Callable[[], contextlib.AbstractContextManager[None]]] = {
        "float32": contextlib.nullcontext,
        "bf16_inputs": bf16_inputs,
        "bf16": bf16.backward,
    }

    def step(way: str) -> tuple[torch.Tensor, list[torch.Tensor], float]:
        start = time.perf_counter()
        with ways[way]():
            with matmul_precision("ieee"), completion_tokens_only():
                out = model(input_ids=ids, labels=labels, fused_lm_head=True)
            logp = out.log_probs[:, -16:]
            (-(adv * logp).mean()).backward()
        seconds = time.perf_counter() - start
        grads = [p.grad.clone() for p in model.parameters() if p.grad is not None]
        model.zero_grad(set_to_none=True)
        return logp.detach(), grads, seconds

    with freed_memory_kept():
        for way in ways:  # warm-up, every way: oneDNN's first call of each kind of product is slower
            step(way)
        results = {}
        for way in ways:
            runs = [step(way) for _ in range(args.rounds)]
            results[way] = (runs[0][0], runs[0][1], min(r[2] for r in runs))
    ref_logp, ref_grads, ref_seconds = results["float32"]
    norm = torch.sqrt(sum(g.double().square().sum() for g in ref_grads))
    for way, (logp, grads, seconds) in results.items():
        whole = (
            torch.sqrt(sum((a.double() - b.double()).square().sum() for a, b in zip(grads, ref_grads))) / norm
        )
        per = sorted(float((a - b).norm() / b.norm()) for a, b in zip(grads, ref_grads))
        print(
            f"{way:12s} log-probs equal float32's: {torch.equal(logp, ref_logp)!s:5s}  gradient vs float32: whole "
            f"{float(whole):.4f}, per tensor median {per[len(per) // 2]:.4f} max {per[-1]:.4f}  "
            + format_time(seconds, ref_seconds)
        )


if __name__ == "__main__":
    main()
