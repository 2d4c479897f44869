"""What the bf16 emulation's dispatch mode costs the ratio's float32 forward, and that suspending it there changes
no bit (docs/smollm2.md, "bf16 on a CPU without native bf16").

SmolLM2-135M-Instruct, one forward of 8 x 64 random tokens that records a graph, float32 at oneDNN's
``fp32_precision = "ieee"``, as in training under ``Precision.backward()`` + ``Precision.exact()`` for an emulated
``bf16``: once with the emulation's mode on (as before ``exact()`` suspended it) and once as ``exact()`` now runs it.
Interleaved rounds, best of ``--repeats`` each after a warm-up (``bandpo_lab.experiments.bench.time_call``); prints both times and their ratio per round.

    OMP_NUM_THREADS=1 .venv/bin/python scripts/emulation_mode_cost.py [--rounds 4] [--repeats 5]
"""

from __future__ import annotations

import argparse

import torch
from transformers import AutoModelForCausalLM

from bandpo_lab.bf16_backward import bf16_backward_linears
from bandpo_lab.bf16_emulation import emulated_bf16_products
from bandpo_lab.experiments.bench import time_call
from bandpo_lab.models import builtin_model_dir
from bandpo_lab.runtime import Precision, matmul_precision
from bandpo_lab.training.tasks import default_cache_dir


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    torch.set_num_threads(1)
    path = builtin_model_dir("smollm2-135m", default_cache_dir(), progress=False)
    model = AutoModelForCausalLM.from_pretrained(path, attn_implementation="eager", dtype=torch.float32)
    x = torch.randint(0, 1000, (8, 64), generator=torch.Generator().manual_seed(0))
    precision = Precision("bf16", "bf16", "emulated", emulated=True)

    def mode_on() -> torch.Tensor:
        with (
            matmul_precision("bf16"),
            bf16_backward_linears(),
            emulated_bf16_products(),
            matmul_precision("ieee"),
        ):
            return model(x, logits_to_keep=1).logits

    def suspended() -> torch.Tensor:
        with precision.backward(), precision.exact():
            return model(x, logits_to_keep=1).logits

    print("logits equal bit for bit:", torch.equal(mode_on(), suspended()))
    for _ in range(args.rounds):
        on, off = (time_call(f, repeats=args.repeats) for f in (mode_on, suspended))
        print(f"mode on {on * 1e3:.0f} ms; suspended {off * 1e3:.0f} ms ({off / on:.3f}x)")


if __name__ == "__main__":
    main()
