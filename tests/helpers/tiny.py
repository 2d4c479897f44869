"""Tiny, locally built models and the small warm-start settings shared by the test suite (nothing is downloaded).

Two kinds of tiny model:

- :func:`build_tiny_model_dir`: a generic character-level tokenizer (letters, digits, arithmetic) and a random
  two-layer Qwen2 (hidden size 32, init std 0.2): the TRL integration tests, whose prompts and rewards use letters.
- :func:`save_countdown_model_dir`: the countdown task's own tokenizer and a random one-layer model of
  ``bandpo_lab.tasks.tiny_model`` (no warm start): tests that need the task's model format but not its skill.

:func:`trl_test_args` holds the TRL integration tests' short-run arguments for the first kind.

The small warm start (:data:`SMALL_WARM_START`, under a second to build) is built once per session by the root
``conftest.py`` fixture ``warm_cache``; :func:`warm_start_overrides` points ``configs/tiny.yaml`` at it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

CHARS = "abcdefghijklmnopqrstuvwxyz0123456789 +-*/=.,:?!()"
SPECIAL_TOKENS = ("<pad>", "<eos>", "<unk>")


def build_tiny_tokenizer() -> Any:
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


def tiny_lm_config(vocab_size: int, pad_token_id: int, eos_token_id: int, **overrides: Any) -> dict[str, Any]:
    """The keyword arguments of a tiny Llama-family config (Qwen2, Llama): 2 layers, hidden size 32, 4 heads of
    which 2 key/value heads, init std 0.2 (peaked enough that some tokens have ``p_old > 0.2``)."""
    return {
        "vocab_size": vocab_size,
        "hidden_size": 32,
        "intermediate_size": 64,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "max_position_embeddings": 128,
        "initializer_range": 0.2,
        "pad_token_id": pad_token_id,
        "eos_token_id": eos_token_id,
        "bos_token_id": None,
        **overrides,
    }


def build_tiny_model_dir(path: str | Path, seed: int = 0) -> Path:
    """Save a tiny random Qwen2 causal LM and :func:`build_tiny_tokenizer`'s tokenizer to ``path``; returns it."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    path = Path(path)
    tokenizer = build_tiny_tokenizer()
    config = Qwen2Config(
        **tiny_lm_config(
            len(tokenizer), tokenizer.pad_token_id, tokenizer.eos_token_id, tie_word_embeddings=True
        )
    )
    torch.manual_seed(seed)
    model = Qwen2ForCausalLM(config)
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


def save_countdown_model_dir(path: str | Path, chat_template: str | None = None) -> Path:
    """A random (not warm-started) one-layer countdown model and its tokenizer in ``path`` (optionally with a chat
    template); returns ``path``."""
    from bandpo_lab.tasks.tiny_model import WarmStartConfig, build_model, build_tokenizer

    path = Path(path)
    tokenizer = build_tokenizer()
    if chat_template is not None:
        tokenizer.chat_template = chat_template
    model = build_model(
        tokenizer, WarmStartConfig(n_layers=1, hidden_size=16, n_heads=2, intermediate_size=32)
    )
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


# model.warm_start options of a warm start that takes under a second (the task options are tiny.yaml's, which are
# CountdownConfig's defaults: one cache entry serves the fixture and every run of tiny.yaml with these options).
SMALL_WARM_START: dict[str, Any] = {
    "n_layers": 1,
    "hidden_size": 16,
    "n_heads": 2,
    "intermediate_size": 32,
    "max_steps": 3,
    "batch_size": 8,
    "warmup_steps": 0,
}

# Overrides of configs/tiny.yaml for a run of a few seconds (2 optimizer steps per generation round, so the clip
# rule can bind; bf16 off so that the first update of a round has ratio exactly 1). Each test adds max_steps and
# report_to.
SMALL_RUN = [
    "per_device_train_batch_size=8",
    "num_generations=4",
    "steps_per_generation=2",
    "logging_steps=1",
    "save_steps=2",
    "bf16=false",
    "learning_rate=0.05",
]


def trl_test_args(output_dir: str | Path, **overrides: Any) -> dict[str, Any]:
    """``BandPOConfig`` / ``GRPOConfig`` keyword arguments of the TRL integration tests' short runs on the tiny
    model (:func:`build_tiny_model_dir`): off-policy (2 optimizer steps per generation round, each a round's
    mini-batch used twice), 4 steps each logged, a large learning rate so that clipping binds, no saving, CPU;
    ``overrides`` replace or add fields."""
    args: dict[str, Any] = dict(
        output_dir=str(output_dir),
        per_device_train_batch_size=4,
        num_generations=4,
        steps_per_generation=2,
        num_iterations=2,
        max_completion_length=8,
        learning_rate=3e-2,
        lr_scheduler_type="constant",
        max_steps=4,
        logging_steps=1,
        report_to="none",
        save_strategy="no",
        use_cpu=True,
        seed=0,
        disable_tqdm=True,
    )
    return {**args, **overrides}


def small_warm_start_config() -> Any:
    """The ``WarmStartConfig`` of :data:`SMALL_WARM_START` on the default countdown puzzles."""
    from bandpo_lab.tasks.countdown import CountdownConfig
    from bandpo_lab.tasks.tiny_model import WarmStartConfig

    return WarmStartConfig(task=CountdownConfig(), **SMALL_WARM_START)


def warm_start_overrides(cache_dir: Path, prefix: str = "") -> list[str]:
    """Overrides pointing configs/tiny.yaml at the small warm start cached in ``cache_dir`` (``prefix``: where the
    training keys sit, e.g. ``"train.overrides."`` in a compare config)."""
    options = ", ".join(f"{k}: {v}" for k, v in SMALL_WARM_START.items())
    return [f"{prefix}model.cache_dir={cache_dir}", f"{prefix}model.warm_start={{{options}}}"]
