"""Tests for bandpo_lab.tasks.tiny_model: tokenizer, model, demonstrations and the cached warm start."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

import bandpo_lab.tasks
from bandpo_lab.tasks import tiny_model
from bandpo_lab.tasks.countdown import CountdownConfig, countdown_reward, make_splits, parse_expression
from bandpo_lab.tasks.tiny_model import (
    VOCABULARY,
    WarmStartConfig,
    build_model,
    build_tokenizer,
    make_demonstrations,
    warm_start,
)

# A warm start that takes a few seconds: small model, few steps, few puzzles.
TINY = WarmStartConfig(
    task=CountdownConfig(n_train=50, n_test=10),
    n_layers=1,
    hidden_size=32,
    n_heads=2,
    intermediate_size=64,
    max_steps=4,
    batch_size=8,
    warmup_steps=0,
)


def test_tokenizer_is_character_level_and_round_trips(tmp_path: Path) -> None:
    tok = build_tokenizer()
    assert len(tok) == len(VOCABULARY) == 19
    text = "3,7,2:23=3*7+2"
    ids = tok(text, add_special_tokens=False)["input_ids"]
    assert len(ids) == len(text)
    assert tok.decode(ids) == text
    assert tok.pad_token == "<pad>" and tok.eos_token == "<eos>" and tok.padding_side == "left"
    assert tok(text + "<eos>")["input_ids"][-1] == tok.eos_token_id
    tok.save_pretrained(tmp_path)
    loaded = AutoTokenizer.from_pretrained(tmp_path)
    assert loaded(text)["input_ids"] == tok(text)["input_ids"]
    assert (loaded.pad_token_id, loaded.eos_token_id) == (tok.pad_token_id, tok.eos_token_id)


def test_build_model_default_shape_and_seed() -> None:
    tok = build_tokenizer()
    state = torch.random.get_rng_state()
    model = build_model(tok)
    assert torch.equal(torch.random.get_rng_state(), state), "build_model must not move the global RNG"
    n_params = sum(p.numel() for p in model.parameters())
    assert 0.8e6 < n_params < 0.95e6
    assert model.config.tie_word_embeddings
    assert model.get_input_embeddings().weight is model.get_output_embeddings().weight
    assert model.config.num_hidden_layers == 4 and model.config.hidden_size == 128
    same = build_model(tok)
    other = build_model(tok, WarmStartConfig(seed=1))
    first = next(iter(model.parameters()))
    assert torch.equal(first, next(iter(same.parameters())))
    assert not torch.equal(first, next(iter(other.parameters())))


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"max_steps": 0}, r"max_steps must be an integer >= 1, got 0"),
        ({"batch_size": -1}, r"batch_size must be an integer >= 1, got -1"),
        ({"learning_rate": 0.0}, r"learning_rate must be a finite number in \(0.0, 1.0\], got 0.0"),
        ({"learning_rate": float("nan")}, r"learning_rate must be a finite number in \(0.0, 1.0\], got nan"),
        ({"demo_accuracy": 1.5}, r"demo_accuracy must be a finite number in \[0.0, 1.0\], got 1.5"),
        ({"hidden_size": 100, "n_heads": 3}, r"hidden_size / n_heads must be an even integer.*100.*3"),
        ({"n_layers": 0}, r"n_layers must be an integer in \[1, 64\], got 0"),
        ({"seed": -2}, r"seed must be an integer in \[0, 4294967295\] \(numpy's seed range\), got -2"),
        (
            {"seed": 2**32},
            r"seed must be an integer in \[0, 4294967295\] \(numpy's seed range\), got 4294967296",
        ),
        ({"task": {"n_train": 5}}, r"task must be a CountdownConfig, got dict"),
    ],
)
def test_warm_start_config_errors(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        WarmStartConfig(**kwargs)


def test_cache_key_stable_and_sensitive() -> None:
    assert WarmStartConfig().cache_key() == WarmStartConfig().cache_key()
    assert WarmStartConfig().cache_key() != WarmStartConfig(seed=1).cache_key()
    assert WarmStartConfig().cache_key() != WarmStartConfig(task=CountdownConfig(seed=1)).cache_key()
    json.dumps(WarmStartConfig().to_dict())


def test_demonstrations_accuracy_and_digits() -> None:
    train, _ = make_splits(CountdownConfig())
    demos = make_demonstrations(train, 3000, demo_accuracy=0.3, seed=0)
    assert demos == make_demonstrations(train, 3000, demo_accuracy=0.3, seed=0)
    by_prompt = {p["prompt"]: p for p in train}
    right = 0
    for prompt, completion in demos:
        numbers, _ = parse_expression(completion)
        assert sorted(numbers) == sorted(by_prompt[prompt]["digits"])
        right += countdown_reward(prompt, completion) == 1.0
    # 30% right by construction, plus random expressions that happen to be right (~8% of the other 70%).
    assert 0.30 < right / len(demos) < 0.42
    assert all(countdown_reward(p, c) == 1.0 for p, c in make_demonstrations(train, 200, 1.0, seed=1))


def test_lazy_exports() -> None:
    assert bandpo_lab.tasks.warm_start is warm_start
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        _ = bandpo_lab.tasks.nope


def test_tiny_warm_start_loadable_cached_and_reproducible(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = warm_start(tmp_path / "a", TINY, progress=False)
    assert path.name == f"countdown-warm-{TINY.cache_key()}"
    summary = json.loads((path / "warm_start.json").read_text())
    assert summary["config"] == TINY.to_dict()
    assert any("loss" in entry for entry in summary["log_history"])
    assert [p.name for p in path.parent.iterdir()] == [path.name], "no temporary directory may be left over"

    model = AutoModelForCausalLM.from_pretrained(path)
    tok = AutoTokenizer.from_pretrained(path)
    assert model.config.num_hidden_layers == 1
    out = model.generate(**tok(["3,7,2:23="], return_tensors="pt"), max_new_tokens=3, do_sample=False)
    assert out.shape[0] == 1 and len("3,7,2:23=") < out.shape[1] <= len("3,7,2:23=") + 3

    # A second call reuses the cache: no training at all.
    def no_training(*args: object, **kwargs: object) -> None:
        raise AssertionError("warm_start retrained although the cache held the result")

    monkeypatch.setattr(tiny_model, "_train", no_training)
    weights = next(path.glob("*.safetensors"))
    mtime = weights.stat().st_mtime_ns
    assert warm_start(tmp_path / "a", TINY, progress=False) == path
    assert weights.stat().st_mtime_ns == mtime
    monkeypatch.undo()

    # Same config, fresh cache: bit-identical weights (seeded). force=True retrains in place.
    again = warm_start(tmp_path / "b", TINY, progress=False)
    reloaded = AutoModelForCausalLM.from_pretrained(again)
    for (name, p), q in zip(model.named_parameters(), reloaded.parameters()):
        assert torch.equal(p, q), name
    time.sleep(0.01)
    assert warm_start(tmp_path / "a", TINY, force=True, progress=False) == path
    assert next(path.glob("*.safetensors")).stat().st_mtime_ns != mtime


@pytest.mark.slow
def test_default_warm_start_reaches_promised_pass_rates(tmp_path: Path) -> None:
    """The default recipe gives pass@1 in [5%, 40%] and a clearly higher pass@8 on the 200 held-out puzzles."""
    from bandpo_lab.eval.metrics import pass_at_k
    from bandpo_lab.eval.sampling import generate_samples

    config = WarmStartConfig()
    start = time.perf_counter()
    path = warm_start(tmp_path, config, progress=False)
    train_s = time.perf_counter() - start
    model = AutoModelForCausalLM.from_pretrained(path)
    tok = AutoTokenizer.from_pretrained(path)
    _, test = make_splits(config.task)
    prompts = [p["prompt"] for p in test]
    samples = generate_samples(model, tok, prompts, k=8, temperature=1.0, batch_size=100)
    c = [sum(countdown_reward(p, x) > 0 for x in row) for p, row in zip(prompts, samples.completions)]
    result = {f"pass@{j}": float(pass_at_k(8, c, j).mean()) for j in (1, 8)} | {"entropy": samples.entropy}
    total_s = time.perf_counter() - start
    print(
        f"warm start: {train_s:.0f} s training, {total_s:.0f} s with evaluation; pass@1 {result['pass@1']:.3f}, "
        f"pass@8 {result['pass@8']:.3f}, entropy {result['entropy']:.3f}"
    )
    assert len(test) == 200
    assert 0.05 <= result["pass@1"] <= 0.40
    assert result["pass@8"] >= result["pass@1"] + 0.15
    # Wall time is printed, not asserted: about 2 minutes on two idle cores, far more when the cores are shared.
