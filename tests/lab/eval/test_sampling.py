"""Tests for bandpo_lab.eval.sampling on a tiny, randomly initialized character-level Qwen2."""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pytest
import torch

from bandpo_lab.eval.sampling import evaluate_pass_rates, generate_samples, sample_completions
from bandpo_lab.tasks.countdown import countdown_reward
from bandpo_lab.tasks.tiny_model import WarmStartConfig, build_model, build_tokenizer

PROMPTS = ["3,7,2:23=", "1,5,2:9=", "9,9,9:81=", "4,2:6="]  # different lengths: left padding matters


@pytest.fixture(scope="module")
def tok():
    return build_tokenizer()


@pytest.fixture(scope="module")
def model(tok):
    config = WarmStartConfig(n_layers=2, hidden_size=32, n_heads=2, intermediate_size=64, seed=0)
    return build_model(tok, config)


def test_k_strings_per_prompt_without_special_tokens(model, tok) -> None:
    out = sample_completions(model, tok, PROMPTS, k=3, temperature=1.0, max_new_tokens=6, batch_size=3)
    assert len(out) == len(PROMPTS)
    for row in out:
        assert len(row) == 3
        for text in row:
            assert isinstance(text, str)
            assert "<eos>" not in text and "<pad>" not in text
            assert len(text) <= 6


def test_token_ids_lengths_and_finished_agree(model, tok) -> None:
    samples = generate_samples(model, tok, PROMPTS, k=4, max_new_tokens=5, batch_size=4)
    for ids_row, lengths, finished in zip(samples.token_ids, samples.lengths, samples.finished):
        for ids, length, done in zip(ids_row, lengths, finished):
            assert len(ids) == length and 1 <= length <= 5
            assert done == (ids[-1] == tok.eos_token_id)
            assert tok.eos_token_id not in ids[:-1]
            assert done or length == 5


def test_seeded_and_batch_size_invariant_when_greedy(model, tok) -> None:
    a = sample_completions(model, tok, PROMPTS, k=4, seed=1, max_new_tokens=6)
    assert a == sample_completions(model, tok, PROMPTS, k=4, seed=1, max_new_tokens=6)
    assert a != sample_completions(model, tok, PROMPTS, k=4, seed=2, max_new_tokens=6)
    # Greedy decoding of a left-padded batch equals decoding each prompt alone.
    batched = sample_completions(model, tok, PROMPTS, k=2, temperature=0.0, batch_size=4, max_new_tokens=6)
    alone = [sample_completions(model, tok, [p], temperature=0.0, max_new_tokens=6)[0][0] for p in PROMPTS]
    assert [row[0] for row in batched] == alone
    assert all(row[0] == row[1] for row in batched)


def test_a_tokenizer_without_a_pad_token_pads_with_the_eos_and_is_left_as_it_was(model) -> None:
    """The pad token only fills masked positions: the completions are those of a tokenizer with one (it raised
    "Asking to pad but the tokenizer does not have a padding token")."""
    with_pad = build_tokenizer()
    without = build_tokenizer()
    without.pad_token = None
    expected = sample_completions(model, with_pad, PROMPTS, k=2, temperature=0.0, max_new_tokens=6)
    assert sample_completions(model, without, PROMPTS, k=2, temperature=0.0, max_new_tokens=6) == expected
    assert without.pad_token is None and without.pad_token_id is None


def test_global_rng_and_training_mode_restored(model, tok) -> None:
    model.train()
    state = torch.random.get_rng_state()
    sample_completions(model, tok, PROMPTS, k=2, seed=5, max_new_tokens=4)
    assert torch.equal(torch.random.get_rng_state(), state)
    assert model.training
    model.eval()


@pytest.mark.parametrize("temperature", [0.5, 1.0])
def test_entropy_matches_teacher_forced_recomputation(model, tok, temperature: float) -> None:
    samples = generate_samples(model, tok, PROMPTS, k=2, temperature=temperature, max_new_tokens=5, seed=3)
    assert samples.entropy is not None
    total, count = 0.0, 0
    with torch.no_grad():
        for prompt, rows in zip(PROMPTS, samples.token_ids):
            for completion_ids in rows:
                prompt_ids = tok(prompt, add_special_tokens=False)["input_ids"]
                length = len(completion_ids)
                ids = torch.tensor([prompt_ids + completion_ids])  # (1, L)
                logits = model(input_ids=ids).logits[0, len(prompt_ids) - 1 : -1]  # (length, V)
                logp = torch.log_softmax(logits / temperature, dim=-1)
                total += float(-(logp.exp() * logp).sum())
                count += length
    assert samples.entropy == pytest.approx(total / count, rel=1e-4)


def test_evaluate_pass_rates_structure(model, tok) -> None:
    problems = [{"prompt": p} for p in PROMPTS]
    result = evaluate_pass_rates(model, tok, problems, countdown_reward, k=8, batch_size=2, max_new_tokens=6)
    assert result["n"] == [8] * len(PROMPTS)
    assert all(0 <= c <= 8 for c in result["c"])
    assert [len(r) for r in result["rewards"]] == [8] * len(PROMPTS)
    assert result["accuracy"] == pytest.approx(result["pass@1"])
    assert result["pass@1"] <= result["pass@2"] <= result["pass@4"] <= result["pass@8"]
    assert result["entropy"] > 0 and 1 <= result["mean_length"] <= 6
    assert 0 <= result["truncated_frac"] <= 1

    def always(prompt: str, completion: str) -> float:
        return 1.0

    def every_other(prompt: str, completion: str, _calls: list[int] = [0]) -> float:  # noqa: B006
        _calls[0] += 1
        return float(_calls[0] % 2)

    all_right = evaluate_pass_rates(model, tok, PROMPTS, always, k=3, max_new_tokens=2)
    assert (
        all_right["c"] == [3] * len(PROMPTS) and all_right["pass@3"] == 1.0 and all_right["accuracy"] == 1.0
    )
    half = evaluate_pass_rates(model, tok, PROMPTS, every_other, k=2, max_new_tokens=2)
    assert half["c"] == [1] * len(PROMPTS)
    assert half["pass@1"] == pytest.approx(0.5) and half["pass@2"] == 1.0


def test_evaluate_pass_rates_takes_a_numpy_integer_k(model, tok) -> None:
    """``k`` from a numpy array (np.int64 has no bit_length: it raised after all the sampling)."""
    import numpy as np

    result = evaluate_pass_rates(model, tok, PROMPTS, countdown_reward, k=np.int64(4), max_new_tokens=2)
    assert type(result["k"]) is int and result["k"] == 4
    assert [j for j in result if j.startswith("pass@")] == ["pass@1", "pass@2", "pass@4"]
    with pytest.raises(ValueError, match=r"^k must be an integer >= 1, got 0$"):
        evaluate_pass_rates(model, tok, PROMPTS, countdown_reward, k=0)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"k": 0}, r"k must be an integer >= 1, got 0"),
        ({"max_new_tokens": 0}, r"max_new_tokens must be an integer >= 1, got 0"),
        ({"batch_size": 2.0}, r"batch_size must be an integer >= 1, got 2.0"),
        ({"temperature": -1.0}, r"temperature must be a finite number >= 0 \(0: greedy\), got -1.0"),
        ({"temperature": float("nan")}, r"temperature must be a finite number >= 0 \(0: greedy\), got nan"),
        ({"prompts": "3,7,2:23="}, r"prompts must be a sequence of strings"),
    ],
)
def test_argument_errors(model, tok, kwargs: dict, message: str) -> None:
    args = {"prompts": PROMPTS} | kwargs
    with pytest.raises(ValueError, match=message):
        generate_samples(model, tok, **args)


def test_evaluate_rejects_bad_problems(model, tok) -> None:
    with pytest.raises(ValueError, match="non-empty sequence of problems"):
        evaluate_pass_rates(model, tok, [], countdown_reward)
    with pytest.raises(ValueError, match=r"problems\[1\] must be a prompt string or a mapping"):
        evaluate_pass_rates(model, tok, ["3,7,2:23=", {"question": "x"}], countdown_reward)
