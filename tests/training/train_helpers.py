"""Constants and helpers shared by the training tests (imported by ``conftest.py`` and the test modules)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
CONFIGS = REPO / "configs"

# model.warm_start options of a warm start that takes a few seconds (the task options are tiny.yaml's).
SMALL_WARM_START: dict[str, Any] = {
    "n_layers": 1,
    "hidden_size": 16,
    "n_heads": 2,
    "intermediate_size": 32,
    "max_steps": 3,
    "batch_size": 8,
    "warmup_steps": 0,
}

# Overrides of configs/tiny.yaml for a run of a few seconds (2 optimizer steps per generation round, so the
# clip rule can bind; bf16 off so that the first update of a round has ratio exactly 1).
SMALL_RUN = [
    "per_device_train_batch_size=8",
    "num_generations=4",
    "steps_per_generation=2",
    "max_steps=2",
    "logging_steps=1",
    "save_steps=2",
    "report_to=none",
    "bf16=false",
    "learning_rate=0.05",
]


def warm_start_overrides(cache_dir: Path) -> list[str]:
    """Overrides pointing configs/tiny.yaml at the small warm start cached in ``cache_dir``."""
    options = ", ".join(f"{k}: {v}" for k, v in SMALL_WARM_START.items())
    return [f"model.cache_dir={cache_dir}", f"model.warm_start={{{options}}}"]


def save_model_dir(path: Path, chat_template: str | None = None) -> Path:
    """A random tiny character-level Qwen2 and its tokenizer in ``path`` (optionally with a chat template)."""
    from bandpo.tasks.tiny_model import WarmStartConfig, build_model, build_tokenizer

    tokenizer = build_tokenizer()
    if chat_template is not None:
        tokenizer.chat_template = chat_template
    model = build_model(
        tokenizer, WarmStartConfig(n_layers=1, hidden_size=16, n_heads=2, intermediate_size=32)
    )
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


def fake_checkpoint(output_dir: Path, step: int) -> Path:
    """A complete ``checkpoint-<step>`` as transformers writes it (tiny tensors; no model needed)."""
    import json

    import torch
    from safetensors.torch import save_file

    path = output_dir / f"checkpoint-{step}"
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.json").write_text("{}")
    save_file({"model.embed_tokens.weight": torch.arange(6.0).reshape(2, 3)}, path / "model.safetensors")
    torch.save({"state": {}, "param_groups": []}, path / "optimizer.pt")
    torch.save({"last_epoch": step}, path / "scheduler.pt")
    torch.save({"python": None}, path / "rng_state.pth")
    (path / "trainer_state.json").write_text(json.dumps({"global_step": step, "max_steps": step}))
    return path


def truncate(path: Path, keep: int | None = None) -> None:
    """Cut ``path`` to its first ``keep`` bytes (negative: all but the last -keep; default: half), as a kill during
    the write leaves it."""
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2 if keep is None else keep])
