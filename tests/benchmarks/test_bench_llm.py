"""Tests for ``benchmarks/bench_llm.py``: the FLOP count behind each floor (against a count by hand on a small Llama)
and the matmul rates it divides by. The bench itself runs SmolLM2 for minutes: ``python benchmarks/bench.py
--real-model``."""

from __future__ import annotations

import re

import pytest

torch = pytest.importorskip("torch")

from bench_llm import _flops, _generation_flops, matmul_rates  # noqa: E402

from helpers import CONFIGS  # noqa: E402


def _tiny_llama():  # type: ignore[no-untyped-def]
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(
        vocab_size=100, hidden_size=16, intermediate_size=32, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, tie_word_embeddings=True,
    )  # fmt: skip
    return LlamaForCausalLM(cfg).eval()


def test_flops_count_every_decoder_weight_twice_per_token_and_the_head_per_scored_token() -> None:
    model = _tiny_llama()
    head_dim = 16 // 4
    per_layer = 16 * 16 + 2 * (16 * 2 * head_dim) + 16 * 16 + 3 * 16 * 32  # q, k, v, o, gate/up/down
    decoder = 2 * per_layer
    assert _flops(model, tokens=10, scored=3, backward=False) == 2 * (decoder * 10 + 100 * 16 * 3)
    assert _flops(model, tokens=10, scored=3, backward=True) == 3 * 2 * (decoder * 10 + 100 * 16 * 3)


def test_generation_flops_count_the_positions_the_sampler_runs() -> None:
    """The generation floor counts what bandpo_lab.decode.sample feeds the model (it once counted one decode step per
    completion too many: the last token is never fed back)."""
    from bandpo_lab.decode import sample

    model, g, t_new = _tiny_llama(), 3, 5
    prompts = torch.randint(0, 100, (2, 4)).repeat_interleave(g, dim=0)  # 2 prompts x 3 copies, no padding
    mask = torch.ones_like(prompts)
    seen = {"tokens": 0, "scored": 0}

    def count(_module, args, kwargs, out) -> None:  # type: ignore[no-untyped-def]
        seen["tokens"] += kwargs["input_ids"].numel()
        seen["scored"] += out.logits.shape[0] * out.logits.shape[1]

    model.register_forward_hook(count, with_kwargs=True)
    with torch.no_grad():
        out = sample(model, prompts, mask, max_new_tokens=t_new, eos_token_id=-1, pad_token_id=0)
    assert out.shape == (6, 4 + t_new)
    assert seen == {"tokens": 2 * 4 + 6 * (t_new - 1), "scored": 2 + 6 * (t_new - 1)}
    assert _generation_flops(model, mask, g, t_new) == _flops(model, seen["tokens"], seen["scored"], False)


def test_matmul_rates_are_positive_for_each_dtype() -> None:
    rates = matmul_rates(m=64, k=64, n=64, rounds=2)
    assert {"float32", "bfloat16"} <= set(rates)
    assert all(v > 0 for v in rates.values())


def test_recipe_is_the_configs_recipe_and_samples_as_the_trainer() -> None:
    """The bench times ``configs/smollm2-arith.yaml``'s step, sampling with what ``GRPOTrainer`` passes to
    ``generate`` (the config's values, else ``GRPOConfig``'s defaults), not transformers' defaults (top_k=50)."""
    pytest.importorskip("trl")
    from bench_llm import RECIPE
    from trl import GRPOConfig

    from bandpo_lab.training.config import load_train_config

    config = load_train_config(CONFIGS / "smollm2-arith.yaml")
    trainer = config.trainer
    defaults = {f: GRPOConfig.__dataclass_fields__[f].default for f in ("temperature", "top_k", "top_p")}
    sampling = {k: trainer[k] if trainer.get(k) is not None else v for k, v in defaults.items()}
    assert RECIPE["sampling"] == sampling
    assert RECIPE["model"] == config.model.path
    assert RECIPE["attn_implementation"] == config.model.attn_implementation  # both precisions' rows
    assert RECIPE["task_options"] == config.data.task_options
    assert RECIPE["max_new_tokens"] == trainer["max_completion_length"]
    assert RECIPE["micro_batch"] == trainer["per_device_train_batch_size"]
    assert RECIPE["steps_per_generation"] == trainer["steps_per_generation"]
    assert RECIPE["generations"] == trainer["num_generations"]
    assert RECIPE["prompts"] * RECIPE["generations"] == RECIPE["micro_batch"] * RECIPE["steps_per_generation"]


def _worker(before: str = "", after: str = "") -> list[str]:
    import sys

    code = f"import sys, time\n{before}\nprint('ready', flush=True)\nsys.stdin.readline()\n{after}"
    return [sys.executable, "-c", code]


def test_run_together_releases_the_processes_at_once() -> None:
    """The side-by-side throughput only means something if the two timed stretches overlap: the fast-loading
    worker waits for the slow one."""
    import time

    from bench_llm import run_together

    t0 = time.time()
    go = (
        "print(time.time())"  # a line before "ready" (a library's notice) is skipped, not taken for a failure
    )
    slow = "print('loading...', flush=True); time.sleep(1.0)"
    lines = run_together([_worker(after=go), _worker(before=slow, after=go)])
    starts = [float(x) for x in lines]
    assert min(starts) >= t0 + 0.95 and abs(starts[0] - starts[1]) < 0.5


@pytest.mark.parametrize(
    ("before", "after", "message"),
    [
        (
            "sys.exit('no model here')",
            "",
            "process 2 of 2 stopped before it was ready (exit 1): no model here",
        ),
        ("", "sys.stderr.write('bad step\\n'); sys.exit(3)", "process 2 of 2 failed (exit 3): bad step"),
        ("print('a notice'); sys.exit(5)", "", "process 2 of 2 stopped before it was ready (exit 5)"),
    ],
)
def test_run_together_names_a_failed_process(before: str, after: str, message: str) -> None:
    from bench_llm import run_together

    with pytest.raises(RuntimeError, match=re.escape(message)):
        run_together([_worker(after="print(1.0)"), _worker(before, after)])


@pytest.mark.parametrize(
    ("flags", "expected"),
    [
        ("fpu avx2", ("float32",)),
        ("fpu avx2 avx512_bf16", ("float32", "bf16")),
        ("amx_bf16 avx2", ("float32", "bf16")),
    ],
)
def test_the_real_model_section_times_bf16_only_where_the_cpu_has_it(
    flags: str, expected: tuple[str, ...]
) -> None:
    from bench_llm import runnable_precisions

    assert (
        runnable_precisions(f"processor : 0\nflags : {flags}\n\nprocessor : 1\nflags : {flags}\n") == expected
    )


def test_the_real_model_section_refuses_bf16_before_timing_anything(
    tmp_path, monkeypatch: pytest.MonkeyPatch
) -> None:  # type: ignore[no-untyped-def]
    """On a CPU without native bf16, asking for bf16 fails at once (it failed after the float32 parts' minutes, and
    printed nothing), and the default times float32 alone."""
    import bench_llm

    from bandpo_lab.runtime import precision

    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor : 0\nflags : fpu avx2\n")
    monkeypatch.setattr(precision, "_CPUINFO", cpuinfo)
    timed: list[list[str]] = []
    monkeypatch.setattr(
        bench_llm,
        "_bench_real_step",
        lambda precisions, rounds, progress: timed.append([p.name for p in precisions]),
    )
    with pytest.raises(ValueError, match="bf16"):
        bench_llm.bench_real_step(("float32", "bf16"))
    assert timed == []
    bench_llm.bench_real_step()
    assert timed == [["float32"]]


def test_processes_run_together_pool_their_passes_over_the_whole_span() -> None:
    """Two processes of 6 passes, one done after 3 s and the other after 6 s: 12 passes in 6 s, 2 a second. The sum
    of their own rates (2 + 1 = 3) counted the second one's 3 s alone as shared time."""
    from bench_llm import pooled_rate

    assert pooled_rate(["6 100.0 103.0", "6 100.0 106.0"]) == pytest.approx(2.0)
    assert pooled_rate(["6 100.0 106.0", "6 101.0 104.0"]) == pytest.approx(2.0)
    assert pooled_rate(["4 0.0 2.0"]) == pytest.approx(2.0)
