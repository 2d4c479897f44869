"""Tests for bandpo_lab.eval.sampling on a tiny, randomly initialized character-level Qwen2."""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pytest
import torch

from bandpo_lab.eval.sampling import generate_samples
from bandpo_lab.tasks.tiny_model import WarmStartConfig, build_model, build_tokenizer

PROMPTS = ["3,7,2:23=", "1,5,2:9=", "9,9,9:81=", "4,2:6="]  # different lengths: left padding matters


def sample_completions(model, tok, prompts, **kwargs) -> list[list[str]]:
    return generate_samples(model, tok, prompts, **kwargs).completions


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
    for field in (samples.token_ids, samples.lengths, samples.finished):
        assert [len(row) for row in field] == [4] * len(PROMPTS)  # [P][k]
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
