"""Checkpoint fakes for the training tests (the tiny models and short-run settings are in ``tests/helpers``)."""

from __future__ import annotations

from pathlib import Path

BANDPO_RUN_INFO = {"provenance": {"bandpo": "0.0.test"}}
"""The least ``run_info.json`` that marks a folder as a bandpo training run's."""


def fake_run_info(output_dir: Path, **values: object) -> Path:
    """``output_dir/run_info.json`` as a bandpo run starts it (its provenance), with ``values`` added."""
    import json

    output_dir.mkdir(parents=True, exist_ok=True)
    path = output_dir / "run_info.json"
    path.write_text(json.dumps({**BANDPO_RUN_INFO, **values}))
    return path


def fake_checkpoint(output_dir: Path, step: int, bandpo_run: bool = True) -> Path:
    """A complete ``checkpoint-<step>`` as transformers writes it (tiny tensors; no model needed), in a bandpo
    run's folder (its ``run_info.json``, where missing) unless ``bandpo_run`` is false (another trainer's)."""
    import json

    import torch
    from safetensors.torch import save_file

    if bandpo_run and not (output_dir / "run_info.json").exists():
        fake_run_info(output_dir)
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
