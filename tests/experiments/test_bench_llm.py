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
    assert {"float32", "bfloat16"} <= set(rates)
    assert all(v > 0 for v in rates.values())
