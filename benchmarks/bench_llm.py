"""``benchmarks/bench.py --real-model``: one optimizer step of the real-model recipe, part by part, against this machine.

The recipe is ``configs/smollm2-arith.yaml``'s (SmolLM2-135M-Instruct, a generation round of 4 prompts x 8
completions of at most 16 new tokens, 2 optimizer steps of 16 completions per round). The step is split into the
parts the trainer runs (TRL's fused LM head, :mod:`bandpo_lab.runtime`'s precision contexts):

``generation``
    the round's 32 completions by the harness's sampler (:func:`bandpo_lab.decode.sample`: one prefill per distinct
    prompt), per optimizer step (divided by the 2 steps of a round); transformers' ``generate`` of the same
    completions is timed beside it (``generate_ms``, ``generate_x_sampler``).
``old log-probs``
    the no-grad forward of the round's micro-batches after the first (whose training forward gives its own,
    ``BandPOTrainer``), per optimizer step.
``forward + backward``
    one micro-batch of 16 completions.
``loss + diagnostics``
    the clip rule's bounds and bandpo's policy loss with its full diagnostics on the micro-batch's tokens.
``optimizer``
    one AdamW step over the 134.5M parameters.

Each part's floor is its matrix FLOPs divided by the rate of a matrix product of the same dtype timed in the
same run (:func:`matmul_rates`): float32 for float32 products, bfloat16 for the bf16 backward (the linear layers'
bfloat16 products, :mod:`bandpo_lab.bf16_backward`; the LM head's few take bfloat16 inputs into float32 products, so
the floor is slightly low) and for sampling under autocast. Every time is the best of ``rounds`` after one warm-up
(``torch.utils.benchmark``: :func:`bench_timing.measure`). ``bf16`` needs a CPU with native bf16 (``auto`` is float32
elsewhere).
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from bench_timing import best, measure

from bandpo_lab.decode import sample
from bandpo_lab.runtime import (
    Precision,
    completion_tokens_only,
    cpu_bf16_flags,
    freed_memory_kept,
    matmul_precision,
    onednn_matmul_setting,
    resolve_precision,
)

__all__ = ["RECIPE", "bench_real_step", "matmul_rates", "side_by_side"]

RECIPE = {
    "model": "smollm2-135m",
    "prompts": 4,
    "generations": 8,
    "max_new_tokens": 16,
    "micro_batch": 16,
    "attn_implementation": "eager",  # the recipe's, in every precision
    "steps_per_generation": 2,
    "task_options": {"digits": [1], "operators": ["+", "-", "*"], "n_train": 155, "n_test": 100, "seed": 0},
    # GRPOTrainer's sampling with the recipe's settings; without them ``generate`` takes transformers' default
    # top_k=50, a top-k filter over the 49,152-token vocabulary at every new token that training does not run.
    "sampling": {"temperature": 1.0, "top_k": 0, "top_p": 1.0},
}
"""The recipe of ``configs/smollm2-arith.yaml``, as the bench runs it."""


def _best(fn: Callable[[], object], rounds: int, progress: str | None = None) -> float:
    """Seconds of the best of ``rounds`` timed calls after one warm-up (:func:`bench_timing.measure`, one call per
    block: these calls take seconds), with a progress bar labelled ``progress`` (None: none)."""
    return best(measure({"call": fn}, rounds, min_run_time=0.0, progress=progress)["call"])


def matmul_rates(m: int = 864, k: int = 576, n: int = 1536, rounds: int = 20) -> dict[str, float]:
    """GFLOP/s of an (m, k) x (k, n) product, the shape of the model's MLP on a micro-batch: ``float32``,
    ``bf16_inputs`` (float32 tensors, bfloat16 inputs and float32 accumulation: oneDNN's ``fp32_precision =
    "bf16"``, what the bf16 backward used before :mod:`bandpo_lab.bf16_backward`) and ``bfloat16`` (bfloat16 tensors:
    autocast sampling and the linear layers' backward)."""
    a, b = torch.randn(m, k), torch.randn(k, n)
    flops = 2 * m * k * n
    rates = {"float32": flops / _best(lambda: a @ b, rounds) / 1e9}
    if onednn_matmul_setting() is not None:
        with matmul_precision("bf16"):
            rates["bf16_inputs"] = flops / _best(lambda: a @ b, rounds) / 1e9
    a16, b16 = a.bfloat16(), b.bfloat16()
    rates["bfloat16"] = flops / _best(lambda: a16 @ b16, rounds) / 1e9
    return rates


def _flops(model: Any, tokens: int, scored: int, backward: bool) -> float:
    """Matrix FLOPs of a forward (and backward: 2x more) over ``tokens`` positions, ``scored`` of which go
    through the LM head: 2 per weight per token for the decoder's linear layers, attention's score and value
    products ignored (sequences of ~50 tokens: under 2 % of the total)."""
    cfg = model.config
    head = cfg.vocab_size * cfg.hidden_size
    decoder = sum(p.numel() for name, p in model.named_parameters() if "layers." in name and p.dim() == 2)
    forward = 2 * (decoder * tokens + head * scored)
    return forward * (3 if backward else 1)


def _generation_flops(model: Any, prompt_mask: Any, generations: int, t_new: int) -> float:
    """Matrix FLOPs (:func:`_flops`) of sampling ``t_new`` tokens after each row of ``prompt_mask`` ((B, T), rows in
    groups of ``generations`` copies of one prompt) as :func:`bandpo_lab.decode.sample` does: each distinct prompt's
    tokens encoded once (its last position scored; padding not counted: a floor), then ``t_new - 1`` one-token
    forwards per row (the first new token comes from the prompt's logits, the last is never fed back)."""
    n_seq = prompt_mask.shape[0]
    prefill = _flops(model, int(prompt_mask[::generations].sum()), n_seq // generations, False)
    decode = n_seq * (t_new - 1)
    return prefill + _flops(model, decode, decode, False)


def runnable_precisions(cpuinfo: str | None = None) -> tuple[str, ...]:
    """The precisions the real-model section times here: ``float32``, and ``bf16`` only where the CPU has native
    bf16 (``cpuinfo``: ``/proc/cpuinfo``'s text, read when ``None``). Elsewhere the lab refuses ``bf16``
    (:func:`bandpo_lab.runtime.resolve_precision`), so asking for it would fail after the float32 parts."""
    return ("float32", "bf16") if cpu_bf16_flags(cpuinfo) else ("float32",)


def bench_real_step(
    precisions: tuple[str, ...] | None = None, rounds: int = 2, progress: bool = False
) -> dict[str, Any]:
    """The parts of one optimizer step of :data:`RECIPE` in each precision (``None``: :func:`runnable_precisions`),
    with floors and ratios (module docstring); ``progress``: a progress bar per part (stderr). Returns
    ``{"rates": ..., "rows": [...], "steps": {precision: {...}}}``.

    Raises:
        ValueError: a precision this machine cannot run (``bf16`` on a CPU without native bf16), before any timing.
    """
    names = runnable_precisions() if precisions is None else precisions
    resolved = [resolve_precision(name) for name in names]  # refuses up front, not after minutes of timing
    with freed_memory_kept():
        return _bench_real_step(resolved, rounds, progress)


def _bench_real_step(precisions: list[Precision], rounds: int, progress: bool) -> dict[str, Any]:
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl.trainer.utils import add_fused_lm_head

    from bandpo_lab.models import builtin_model_dir
    from bandpo_lab.tasks.arith import ArithConfig, make_arith_splits
    from bandpo_lab.training.tasks import default_cache_dir

    path = builtin_model_dir(RECIPE["model"], default_cache_dir(), progress=False)
    tokenizer = AutoTokenizer.from_pretrained(path)
    rates = matmul_rates()
    train, _ = make_arith_splits(ArithConfig(**RECIPE["task_options"]))
    texts = [
        tokenizer.apply_chat_template(row["prompt"], tokenize=False, add_generation_prompt=True)
        for row in train[: RECIPE["prompts"]]
    ]
    enc = tokenizer(texts, return_tensors="pt", padding=True, padding_side="left")
    g = RECIPE["generations"]
    prompt_ids = enc["input_ids"].repeat_interleave(g, dim=0)
    prompt_mask = enc["attention_mask"].repeat_interleave(g, dim=0)
    rows: list[dict[str, Any]] = []
    steps: dict[str, dict[str, float]] = {}
    for precision in precisions:
        model = AutoModelForCausalLM.from_pretrained(
            path, dtype=torch.float32, attn_implementation=RECIPE["attn_implementation"]
        )
        add_fused_lm_head(model, outputs=("log_probs", "entropy"))
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-12, fused=True)  # as training on a CPU
        torch.manual_seed(0)
        with precision.sampling(), torch.no_grad():
            out = model.generate(
                input_ids=prompt_ids,
                attention_mask=prompt_mask,
                do_sample=True,
                **RECIPE["sampling"],
                max_new_tokens=RECIPE["max_new_tokens"],
                min_new_tokens=RECIPE["max_new_tokens"],
                pad_token_id=tokenizer.pad_token_id or tokenizer.eos_token_id,
            )
        ids = out
        att = torch.cat([prompt_mask, torch.ones_like(out[:, prompt_ids.shape[1] :])], dim=1)
        t_new = ids.shape[1] - prompt_ids.shape[1]
        labels = ids.masked_fill(att == 0, -100)
        labels[:, :-t_new] = -100
        mb = RECIPE["micro_batch"]
        parts = _time_parts(
            model, optimizer, precision, prompt_ids, prompt_mask, ids, att, labels, mb, rounds, progress
        )
        n_seq, spg = ids.shape[0], RECIPE["steps_per_generation"]
        tokens_mb = int(att[:mb].sum())
        scored_mb = mb * t_new
        g = RECIPE["generations"]  # the sampler encodes each distinct prompt once (its last position scored)
        gen_flops = _generation_flops(model, prompt_mask, g, t_new)
        flops = {
            "generation": gen_flops / spg,
            "old log-probs": _flops(model, int(att[mb:].sum()), (n_seq - mb) * t_new, False) / spg,
            "forward + backward": _flops(model, tokens_mb, scored_mb, True),
            "loss + diagnostics": 0.0,
            "optimizer": 0.0,
        }
        fwd, bwd = _flops(model, tokens_mb, scored_mb, False), 2 * _flops(model, tokens_mb, scored_mb, False)
        rate_fwd = rates["float32"]
        rate_bf16 = rates["bfloat16"]
        rate_bwd = rate_bf16 if precision.bf16 else rates["float32"]
        rate_gen = rate_bf16 if precision.bf16 else rates["float32"]
        floor = {
            "generation": flops["generation"] / rate_gen / 1e9,
            "old log-probs": flops["old log-probs"] / rate_fwd / 1e9,
            "forward + backward": fwd / rate_fwd / 1e9 + bwd / rate_bwd / 1e9,
            "loss + diagnostics": 0.0,
            "optimizer": 0.0,
        }
        per_step = {
            "generation": parts["generation"] / spg,
            "old log-probs": parts["old log-probs"] / spg,
            "forward + backward": parts["forward + backward"],
            "loss + diagnostics": parts["loss + diagnostics"],
            "optimizer": parts["optimizer"],
        }
        total, total_floor = sum(per_step.values()), sum(floor.values())
        for part, seconds in per_step.items():
            rows.append(
                {
                    "precision": precision.name,
                    "part": part,
                    "ms": 1e3 * seconds,
                    "gflop": flops[part] / 1e9,
                    "floor_ms": 1e3 * floor[part],
                    "x_floor": seconds / floor[part] if floor[part] else None,
                    "share": seconds / total,
                }
            )
        rows.append(
            {
                "precision": precision.name,
                "part": "step",
                "ms": 1e3 * total,
                "gflop": sum(flops.values()) / 1e9,
                "floor_ms": 1e3 * total_floor,
                "x_floor": total / total_floor,
                "share": 1.0,
            }
        )
        steps[precision.name] = {
            "seconds": total,
            "floor": total_floor,
            "steps_per_hour": 3600 / total,
            # transformers' generate in the same run: its time per step, and how much longer than the sampler's
            "generate_ms": 1e3 * parts["generation by generate"] / spg,
            "generate_x_sampler": parts["generation by generate"] / parts["generation"],
        }
        del model, optimizer
    return {"rates": rates, "rows": rows, "steps": steps, "recipe": RECIPE}


def _time_parts(
    model: Any,
    optimizer: Any,
    precision: Precision,
    prompt_ids: torch.Tensor,
    prompt_mask: torch.Tensor,
    ids: torch.Tensor,
    att: torch.Tensor,
    labels: torch.Tensor,
    mb: int,
    rounds: int,
    progress: bool = False,
) -> dict[str, float]:
    """Best-of-``rounds`` seconds of each part, whole (generation and old log-probs over the whole round; the
    old-log-prob pass skips the first micro-batch, as the trainer does); ``progress``: a bar per part."""
    from bandpo.losses import make_clip_rule, policy_loss

    rule = make_clip_rule("band", divergence="kl", delta=0.05, cap=10.0)
    t_new = ids.shape[1] - prompt_ids.shape[1]

    def generation() -> None:  # the harness's sampler (bandpo_lab.decode), every completion t_new tokens long
        with precision.sampling(), torch.no_grad():
            sample(
                model,
                prompt_ids,
                prompt_mask,
                max_new_tokens=t_new,
                eos_token_id=-1,  # no token ends a row
                pad_token_id=0,
                temperature=RECIPE["sampling"]["temperature"],
            )

    def generation_by_generate() -> None:  # transformers' generate, the reference
        with precision.sampling(), torch.no_grad():
            model.generate(
                input_ids=prompt_ids,
                attention_mask=prompt_mask,
                do_sample=True,
                **RECIPE["sampling"],
                max_new_tokens=t_new,
                min_new_tokens=t_new,
                pad_token_id=0,
            )

    def forward(rows: slice) -> torch.Tensor:
        with completion_tokens_only():  # as the trainer scores, in every precision
            out = model(
                input_ids=ids[rows], attention_mask=att[rows], labels=labels[rows], fused_lm_head=True
            )
        return out.log_probs[:, -t_new:]

    def old_log_probs() -> None:
        with precision.exact(), torch.no_grad():
            for start in range(mb, ids.shape[0], mb):
                forward(slice(start, start + mb))

    adv = torch.randn(mb, 1)

    def forward_backward() -> None:
        with precision.backward():
            with precision.exact():
                logp = forward(slice(0, mb))
            loss = -(adv * logp).mean()
            loss.backward()
        model.zero_grad(set_to_none=True)

    old = torch.randn(mb, t_new).clamp(max=-1e-3)
    new = (old + 0.05 * torch.randn(mb, t_new)).clamp(max=-1e-3).requires_grad_()
    mask = torch.ones(mb, t_new, dtype=torch.bool)

    def loss_and_diagnostics() -> None:
        loss, _ = policy_loss(new, old, adv.expand(mb, t_new), mask, rule, diagnostics="full")
        loss.backward()
        new.grad = None

    def optimizer_step() -> None:
        optimizer.step()

    def label(part: str) -> str | None:
        return f"{precision.name}: {part}" if progress else None

    timed = {
        "generation": (generation, rounds),
        "generation by generate": (generation_by_generate, rounds),
        "old log-probs": (old_log_probs, rounds),
        "forward + backward": (forward_backward, rounds),
        "loss + diagnostics": (loss_and_diagnostics, max(rounds, 5)),
    }
    parts = {part: _best(fn, n, label(part)) for part, (fn, n) in timed.items()}
    for p in model.parameters():
        p.grad = torch.zeros_like(p)
    parts["optimizer"] = _best(optimizer_step, rounds, label("optimizer"))
    model.zero_grad(set_to_none=True)
    return parts


HERE = Path(__file__).resolve().parent
"""benchmarks/, which the worker processes import this module from."""

_WORKER = f"""
import sys
sys.path.insert(0, {str(HERE)!r})
from bench_llm import _throughput_worker

def together():  # loaded and warmed up: say so, then wait for the parent's go (both workers start together)
    print("ready", flush=True)
    sys.stdin.readline()

print(_throughput_worker(int(sys.argv[1]), int(sys.argv[2]), together))
"""


def _throughput_worker(threads: int, steps: int, ready: Callable[[], None] = lambda: None) -> str:
    """``steps`` forward + backward passes of one bf16 micro-batch (the recipe's shape) at ``threads``, as
    ``"<passes> <start> <end>"`` (``time.time()`` seconds, one clock for every process, :func:`pooled_rate`);
    ``ready`` is called once the model is loaded and one warm-up pass ran, just before the timed passes."""
    import time

    from transformers import AutoModelForCausalLM

    from bandpo_lab.models import builtin_model_dir
    from bandpo_lab.training.tasks import default_cache_dir

    torch.set_num_threads(threads)
    precision = resolve_precision("auto")
    model = AutoModelForCausalLM.from_pretrained(
        builtin_model_dir(RECIPE["model"], default_cache_dir(), progress=False),
        dtype=torch.float32,
        attn_implementation=RECIPE["attn_implementation"],
    )
    ids = torch.randint(0, model.config.vocab_size, (RECIPE["micro_batch"], 54))

    def step() -> None:
        with precision.backward():
            with precision.exact():
                logits = model(input_ids=ids, logits_to_keep=17).logits
            logits.float().logsumexp(-1).mean().backward()
        model.zero_grad(set_to_none=True)

    with freed_memory_kept():
        step()
        ready()
        start = time.time()
        for _ in range(steps):
            step()
        return f"{steps} {start} {time.time()}"


def pooled_rate(lines: list[str]) -> float:
    """Passes per second of processes run together, from their :func:`_throughput_worker` lines: all their passes
    over the span from the first start to the last end. The sum of each process's own rate counted the time one
    ran alone after the other finished as shared time."""
    rows = [[float(x) for x in line.split()] for line in lines]
    return sum(r[0] for r in rows) / (max(r[2] for r in rows) - min(r[1] for r in rows))


def run_together(commands: list[list[str]], env: dict[str, str] | None = None) -> list[str]:
    """Run ``commands`` as processes that each print ``ready`` when set up and then wait for a line on stdin; once
    all are ready, release them at once, so that their timed work overlaps. Returns each one's last stdout line.

    Raises:
        RuntimeError: a process that exits before ``ready`` or with a non-zero status, with its last stderr line.
    """
    import contextlib
    import os
    import tempfile

    with contextlib.ExitStack() as stack:
        # stderr to files: a pipe could fill while we read stdout and block a worker
        logs = [stack.enter_context(tempfile.TemporaryFile(mode="w+")) for _ in commands]
        procs = [
            subprocess.Popen(
                cmd,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=log,
                text=True,
                env={**os.environ, **(env or {})},
            )
            for cmd, log in zip(commands, logs)
        ]

        def failure(i: int, what: str) -> RuntimeError:
            if procs[i].poll() is None:  # e.g. still waiting for its go: it would never exit
                procs[i].kill()
            procs[i].wait()
            logs[i].seek(0)
            last = (logs[i].read().strip().splitlines() or ["(no output on stderr)"])[-1]
            return RuntimeError(
                f"process {i + 1} of {len(commands)} {what} (exit {procs[i].returncode}): {last}"
            )

        try:
            for i, p in enumerate(procs):
                assert p.stdout is not None
                for line in iter(p.stdout.readline, ""):  # lines before "ready" (library notices) skipped
                    if line.strip() == "ready":
                        break
                else:
                    raise failure(i, "stopped before it was ready")
            for p in procs:
                assert p.stdin is not None
                p.stdin.write("go\n")
                p.stdin.flush()
            lines = []
            for i, p in enumerate(procs):
                out, _ = p.communicate()
                if p.returncode != 0 or not out.strip():
                    raise failure(i, "failed")
                lines.append(out.strip().splitlines()[-1])
            return lines
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()
                    p.wait()


def side_by_side(steps: int = 6) -> dict[str, float]:
    """Throughput (forward + backward passes per second, both cores together) of two processes at one thread
    each, side by side, against one process at two threads. Each process loads the model and makes one warm-up
    pass first (not timed); the pair is released together (:func:`run_together`), so their timed passes overlap."""

    def command(threads: int) -> list[str]:
        return [sys.executable, "-c", _WORKER, str(threads), str(steps)]

    two_at_one = pooled_rate(run_together([command(1), command(1)], {"OMP_NUM_THREADS": "1"}))
    one_at_two = pooled_rate(run_together([command(2)], {"OMP_NUM_THREADS": "2"}))
    return {
        "two_processes_one_thread": two_at_one,
        "one_process_two_threads": one_at_two,
        "ratio": two_at_one / one_at_two,
    }
