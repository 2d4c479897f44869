"""Tiny, locally built models, tokenizers and prompt datasets for the TRL integration tests.

Nothing is downloaded: the tokenizer is a character-level ``PreTrainedTokenizerFast`` built with ``tokenizers``
and the model is a randomly initialised two-layer Qwen2 (hidden size 32, init std 0.2). ``build_tiny_model_dir`` is importable
on its own (the multi-process test's script calls it too).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")
os.environ.setdefault("WANDB_DISABLED", "true")

CHARS = "abcdefghijklmnopqrstuvwxyz0123456789 +-*/=.,:?!()"
SPECIAL_TOKENS = ("<pad>", "<eos>", "<unk>")


def build_tiny_tokenizer():
    """A character-level fast tokenizer: one token per character of ``CHARS``, plus pad / eos / unk."""
    from tokenizers import Tokenizer, decoders, models
    from transformers import PreTrainedTokenizerFast

    vocab = {tok: i for i, tok in enumerate(SPECIAL_TOKENS)}
    for ch in CHARS:
        vocab[ch] = len(vocab)
    # BPE with no merges splits text into single characters; Fuse joins them back on decode.
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token="<unk>"))
    tok.decoder = decoders.Fuse()
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, pad_token="<pad>", eos_token="<eos>", unk_token="<unk>", padding_side="left"
    )


def build_tiny_model_dir(path: str | Path, seed: int = 0) -> Path:
    """Save a tiny random Qwen2 causal LM and its tokenizer to ``path``; returns the path."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    path = Path(path)
    tokenizer = build_tiny_tokenizer()
    config = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=128,
        initializer_range=0.2,  # peaked enough that some tokens have p_old > 0.2
        tie_word_embeddings=True,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=None,
    )
    torch.manual_seed(seed)
    model = Qwen2ForCausalLM(config)
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


def tiny_prompt_dataset(n: int = 8):
    """A ``datasets.Dataset`` with a text ``prompt`` column of ``n`` short arithmetic prompts."""
    from datasets import Dataset

    return Dataset.from_dict({"prompt": [f"{i}+{i + 1}=" for i in range(n)]})


def count_a_reward(completions: list[str], **kwargs) -> list[float]:
    """A trivial reward with spread inside every group: the number of ``a`` characters in the completion."""
    return [float(c.count("a")) for c in completions]


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Directory holding the tiny model and tokenizer (built once per session)."""
    return build_tiny_model_dir(tmp_path_factory.mktemp("tiny_qwen2"))


@pytest.fixture
def tiny_model(tiny_model_dir: Path):
    """A fresh float32 copy of the tiny model (TRL patches the model's forward, so never share one)."""
    import torch
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)


@pytest.fixture
def tiny_tokenizer(tiny_model_dir: Path):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_model_dir)


@pytest.fixture
def tiny_dataset():
    return tiny_prompt_dataset()
