"""A tiny character-level Qwen2 for the countdown task, built locally (nothing is downloaded) and warm-started on
demonstrations right ``demo_accuracy`` of the time, so that RL finds rare-but-right answers (docs/tiny-task.md).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import random
import shutil
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import transformers
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
from torch import Tensor
from transformers import (
    GenerationConfig,
    PreTrainedTokenizerFast,
    Qwen2Config,
    Qwen2ForCausalLM,
    Trainer,
    TrainingArguments,
)

from bandpo.validation import check_int_in, check_number_in
from bandpo_lab.runtime.seeds import check_seed
from bandpo_lab.tasks.countdown import OPERATORS, CountdownConfig, join_expression, make_splits, solutions

PAD_TOKEN = "<pad>"
EOS_TOKEN = "<eos>"
UNK_TOKEN = "<unk>"
VOCABULARY = (PAD_TOKEN, EOS_TOKEN, UNK_TOKEN, *"0123456789", *OPERATORS, ",", ":", "=")
"""Token strings in id order: 3 special tokens, then one token per character the task uses (19 in all)."""

RECIPE_VERSION = 1
"""Part of the cache key: bump it when a change to this module changes what a warm start produces."""

_MARKER = "warm_start.json"


def build_tokenizer() -> PreTrainedTokenizerFast:
    """Character-level tokenizer over :data:`VOCABULARY`: one token per character, no BOS, left padding.

    Unknown characters (e.g. spaces) map to ``<unk>``; ``decode`` joins tokens without separators.
    """
    vocab = {token: i for i, token in enumerate(VOCABULARY)}
    backend = Tokenizer(models.WordLevel(vocab, unk_token=UNK_TOKEN))
    backend.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    backend.decoder = decoders.Fuse()
    backend.add_special_tokens([PAD_TOKEN, EOS_TOKEN, UNK_TOKEN])
    return PreTrainedTokenizerFast(
        tokenizer_object=backend,
        pad_token=PAD_TOKEN,
        eos_token=EOS_TOKEN,
        unk_token=UNK_TOKEN,
        padding_side="left",
        model_max_length=128,
    )


@dataclass(frozen=True)
class WarmStartConfig:
    """The tiny model and its supervised warm start (all fields are part of the cache key).

    Args:
        task: the countdown puzzles; demonstrations use only its train split.
        n_layers, hidden_size, n_heads, intermediate_size: Qwen2 shape (``hidden_size / n_heads`` must be an
            even integer, for the rotary embedding).
        max_steps: optimizer steps (>= 1). batch_size: demonstrations per step (>= 1).
        learning_rate: AdamW peak learning rate in (0, 1], linear decay to 0 after ``warmup_steps``.
        weight_decay: AdamW weight decay in [0, 1].
        demo_accuracy: probability in [0, 1] that a demonstration is a correct solution; otherwise it is a
            uniformly random order of the digits with random operators (which may be right by chance).
        seed: seeds the initialization, the demonstrations and the data order.
    """

    task: CountdownConfig = field(default_factory=CountdownConfig)
    n_layers: int = 4
    hidden_size: int = 128
    n_heads: int = 4
    intermediate_size: int = 384
    max_steps: int = 600
    batch_size: int = 128
    learning_rate: float = 2e-3
    warmup_steps: int = 30
    weight_decay: float = 0.0
    demo_accuracy: float = 0.3
    seed: int = 0

    def __post_init__(self) -> None:
        if not isinstance(self.task, CountdownConfig):
            raise ValueError(f"task must be a CountdownConfig, got {type(self.task).__name__}")
        check_int_in("n_layers", self.n_layers, 1, 64)
        check_int_in("hidden_size", self.hidden_size, 8, 8192)
        check_int_in("n_heads", self.n_heads, 1, 256)
        if self.hidden_size % self.n_heads or (self.hidden_size // self.n_heads) % 2:
            raise ValueError(
                f"hidden_size / n_heads must be an even integer (rotary embedding), got hidden_size="
                f"{self.hidden_size} and n_heads={self.n_heads}"
            )
        check_int_in("intermediate_size", self.intermediate_size, 1, 65536)
        check_int_in("max_steps", self.max_steps, 1)
        check_int_in("batch_size", self.batch_size, 1)
        lr = self.learning_rate
        if isinstance(lr, bool) or not isinstance(lr, (int, float)) or not 0.0 < lr <= 1.0:
            raise ValueError(f"learning_rate must be a finite number in (0.0, 1.0], got {lr!r}")
        check_int_in("warmup_steps", self.warmup_steps, 0)
        check_number_in("weight_decay", self.weight_decay, 0.0, 1.0)
        check_number_in("demo_accuracy", self.demo_accuracy, 0.0, 1.0)
        check_seed("seed", self.seed)  # transformers seeds numpy with it

    def to_dict(self) -> dict[str, Any]:
        """Plain nested dict of the fields (JSON-serializable)."""
        return dataclasses.asdict(self)

    def cache_key(self) -> str:
        """16 hex digits of a SHA-256 over the fields and :data:`RECIPE_VERSION`."""
        blob = json.dumps({"recipe": RECIPE_VERSION, "config": self.to_dict()}, sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()[:16]


def build_model(
    tokenizer: PreTrainedTokenizerFast, config: WarmStartConfig | None = None
) -> Qwen2ForCausalLM:
    """A freshly initialized tiny ``Qwen2ForCausalLM`` (float32), seeded by ``config.seed``.

    The global torch RNG is left as it was. Eager attention: on CPU it is faster than SDPA at this size.
    """
    config = WarmStartConfig() if config is None else config
    max_answer = config.task.n_numbers * 2  # n digits, n-1 operators, eos
    model_config = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=config.hidden_size,
        intermediate_size=config.intermediate_size,
        num_hidden_layers=config.n_layers,
        num_attention_heads=config.n_heads,
        num_key_value_heads=config.n_heads,
        max_position_embeddings=128,
        tie_word_embeddings=True,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=None,
        attn_implementation="eager",
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(config.seed)
        model = Qwen2ForCausalLM(model_config)
    model.generation_config = GenerationConfig(
        do_sample=True,
        temperature=1.0,
        top_k=0,
        top_p=1.0,
        max_new_tokens=max_answer,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )
    return model


def make_demonstrations(
    problems: Sequence[dict[str, Any]], n: int, demo_accuracy: float, seed: int
) -> list[tuple[str, str]]:
    """``n`` (prompt, completion) pairs drawn uniformly from ``problems``; completions end without eos.

    With probability ``demo_accuracy`` the completion is a uniformly chosen correct solution, otherwise a
    uniformly random order of the prompt's digits joined by random operators.
    """
    check_int_in("n", n, 0)
    check_number_in("demo_accuracy", demo_accuracy, 0.0, 1.0)
    if not problems:
        raise ValueError("problems must be a non-empty sequence of countdown problems, got an empty one")
    rng = random.Random(seed)
    answers: dict[int, list[str]] = {}
    demos: list[tuple[str, str]] = []
    for _ in range(n):
        i = rng.randrange(len(problems))
        problem = problems[i]
        digits = list(problem["digits"])
        if rng.random() < demo_accuracy:
            if i not in answers:
                answers[i] = solutions(digits, problem["target"])
            completion = rng.choice(answers[i])
        else:
            rng.shuffle(digits)
            ops = [rng.choice(OPERATORS) for _ in digits[1:]]
            completion = join_expression(digits, ops)
        demos.append((problem["prompt"], completion))
    return demos


class _DemoCollator:
    """Right-pads ``prompt + completion + eos``: ``input_ids`` (B, L) long and ``labels`` (B, L) long, -100 on prompt
    and pad positions. No attention mask: with right padding and causal attention the pads never reach a real
    token."""

    def __init__(self, tokenizer: PreTrainedTokenizerFast) -> None:
        self.tokenizer = tokenizer
        self.eos_id = int(tokenizer.eos_token_id)
        self.pad_id = int(tokenizer.pad_token_id)

    def __call__(self, batch: list[tuple[str, str]]) -> dict[str, Tensor]:
        prompts = self.tokenizer([p for p, _ in batch], add_special_tokens=False)["input_ids"]
        answers = self.tokenizer([c for _, c in batch], add_special_tokens=False)["input_ids"]
        length = max(len(p) + len(a) + 1 for p, a in zip(prompts, answers))
        input_ids = torch.full((len(batch), length), self.pad_id, dtype=torch.long)  # (B, L)
        labels = torch.full((len(batch), length), -100, dtype=torch.long)  # (B, L)
        for row, (p, a) in enumerate(zip(prompts, answers)):
            seq = [*p, *a, self.eos_id]
            input_ids[row, : len(seq)] = torch.tensor(seq)
            labels[row, len(p) : len(seq)] = torch.tensor([*a, self.eos_id])
        return {"input_ids": input_ids, "labels": labels}


def _train(
    model: Qwen2ForCausalLM,
    tokenizer: PreTrainedTokenizerFast,
    config: WarmStartConfig,
    work_dir: Path,
    progress: bool,
) -> list[dict[str, float]]:
    """Supervised fine-tuning with transformers' ``Trainer`` (as fast as a hand-written loop here)."""
    train, _ = make_splits(config.task)
    demos = make_demonstrations(
        train, config.max_steps * config.batch_size, config.demo_accuracy, config.seed
    )
    args = TrainingArguments(
        output_dir=str(work_dir),
        max_steps=config.max_steps,
        per_device_train_batch_size=config.batch_size,
        learning_rate=config.learning_rate,
        lr_scheduler_type="linear",
        warmup_steps=config.warmup_steps,
        weight_decay=config.weight_decay,
        optim="adamw_torch",
        max_grad_norm=1.0,
        seed=config.seed,
        data_seed=config.seed,
        logging_steps=max(1, config.max_steps // 10),
        save_strategy="no",
        report_to="none",
        disable_tqdm=not progress,
        dataloader_num_workers=0,
        dataloader_pin_memory=False,
        remove_unused_columns=False,
    )
    trainer = Trainer(model=model, args=args, train_dataset=demos, data_collator=_DemoCollator(tokenizer))  # type: ignore[arg-type]
    trainer.train()
    return [dict(entry) for entry in trainer.state.log_history]


def warm_start(
    cache_dir: str | Path,
    config: WarmStartConfig | None = None,
    force: bool = False,
    progress: bool = True,
) -> Path:
    """Train (or reuse) the warm-started tiny model; returns ``cache_dir/countdown-warm-<config.cache_key()>``, which
    holds the model, the tokenizer and ``warm_start.json`` (config, wall time, loss log) and is reused unless
    ``force``. Training happens in a temporary sibling renamed into place at the end, so an interrupted run leaves
    no half-written entry. Seeds the global RNGs (as transformers' ``Trainer`` does)."""
    config = WarmStartConfig() if config is None else config
    if not isinstance(config, WarmStartConfig):
        raise ValueError(f"config must be a WarmStartConfig, got {type(config).__name__}")
    cache_dir = Path(cache_dir)
    target = cache_dir / f"countdown-warm-{config.cache_key()}"
    if (target / _MARKER).is_file() and not force:
        return target
    cache_dir.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(dir=cache_dir, prefix=f".{target.name}-") as tmp:
        tmp_path = Path(tmp)
        tokenizer = build_tokenizer()
        model = build_model(tokenizer, config)
        log = _train(model, tokenizer, config, tmp_path / "trainer", progress)
        out = tmp_path / "model"
        model.save_pretrained(out)
        tokenizer.save_pretrained(out)
        summary = {
            "recipe_version": RECIPE_VERSION,
            "config": config.to_dict(),
            "cache_key": config.cache_key(),
            "n_parameters": sum(p.numel() for p in model.parameters()),
            "wall_time_s": round(time.perf_counter() - start, 2),
            "log_history": log,
            "versions": {"torch": torch.__version__, "transformers": transformers.__version__},
        }
        (out / _MARKER).write_text(json.dumps(summary, indent=2))
        if (target / _MARKER).is_file() and not force:
            return target  # another process finished the same warm start meanwhile; keep its copy
        if target.exists():
            shutil.rmtree(target)
        out.rename(target)
    return target
