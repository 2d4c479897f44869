"""Tests for ``bandpo.experiments.bench_llm``: the FLOP count behind each floor (against a count by hand on a small
Llama) and the matmul rates it divides by. The bench itself runs SmolLM2 for minutes: ``bandpo bench
--real-model``."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from bandpo.experiments.bench_llm import _flops, matmul_rates  # noqa: E402


def test_flops_count_every_decoder_weight_twice_per_token_and_the_head_per_scored_token() -> None:
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(
        vocab_size=100, hidden_size=16, intermediate_size=32, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, tie_word_embeddings=True,
    )  # fmt: skip
    model = LlamaForCausalLM(cfg)
    head_dim = 16 // 4
    per_layer = 16 * 16 + 2 * (16 * 2 * head_dim) + 16 * 16 + 3 * 16 * 32  # q, k, v, o, gate/up/down
    decoder = 2 * per_layer
    assert _flops(model, tokens=10, scored=3, backward=False) == 2 * (decoder * 10 + 100 * 16 * 3)
    assert _flops(model, tokens=10, scored=3, backward=True) == 3 * 2 * (decoder * 10 + 100 * 16 * 3)


def test_matmul_rates_are_positive_for_each_dtype() -> None:
    rates = matmul_rates(m=64, k=64, n=64, rounds=2)
    assert {"float32", "bfloat16", "bfloat16_emulated"} <= set(rates)
    assert all(v > 0 for v in rates.values())


def test_recipe_is_the_configs_recipe_and_samples_as_the_trainer() -> None:
    """The bench times ``configs/smollm2-arith.yaml``'s step, sampling with what ``GRPOTrainer`` passes to
    ``generate`` (the config's values, else ``GRPOConfig``'s defaults), not transformers' defaults (top_k=50)."""
    from pathlib import Path

    pytest.importorskip("trl")
    from trl import GRPOConfig

    from bandpo.experiments.bench_llm import RECIPE
    from bandpo.training.config import load_train_config

    root = Path(__file__).resolve().parents[2]
    config = load_train_config(root / "configs" / "smollm2-arith.yaml")
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
