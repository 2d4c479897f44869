"""Tests for ``bandpo_lab.eval.backends``: the vLLM sampler, with a stand-in ``vllm`` module (vLLM is not a test
dependency) that records what it is given."""

from __future__ import annotations

import sys
import types
from pathlib import Path
from typing import Any

import pytest

from bandpo_lab.eval.datasets import load_eval_dataset
from bandpo_lab.eval.evaluate import evaluate_model_dir
from bandpo_lab.eval.settings import EvalSettings


@pytest.fixture
def fake_vllm(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """A ``vllm`` module whose ``LLM`` records its keyword arguments and answers every prompt with ``n`` empty
    completions stopped at once; returns the recorded arguments."""
    made: list[dict[str, Any]] = []

    class LLM:
        def __init__(self, **kwargs: Any) -> None:
            made.append(kwargs)

        def generate(self, prompts: list[Any], params: Any, use_tqdm: bool = True) -> list[Any]:
            done = types.SimpleNamespace(text="", token_ids=[0], finish_reason="stop")
            return [types.SimpleNamespace(outputs=[done] * params.n) for _ in prompts]

    module = types.ModuleType("vllm")
    module.LLM = LLM  # type: ignore[attr-defined]
    module.SamplingParams = types.SimpleNamespace  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "vllm", module)
    return made


def test_vllm_gets_the_tokenizer_of_the_run_for_a_checkpoint_without_one(
    tmp_path: Path, model_dir: Path, fake_vllm: list[dict[str, Any]]
) -> None:
    """A checkpoint saved without tokenizer files is checked with the run directory's tokenizer; vLLM was given
    the checkpoint as its tokenizer and could not load one."""
    run = tmp_path / "run"
    checkpoint = run / "checkpoint-2"
    checkpoint.mkdir(parents=True)
    for item in model_dir.iterdir():
        target = checkpoint if item.name in ("config.json", "model.safetensors") else run
        (target / item.name).write_bytes(item.read_bytes())
    settings = EvalSettings(k=2, max_new_tokens=3, backend="vllm", progress=False)
    out = evaluate_model_dir(checkpoint, [load_eval_dataset("countdown", max_problems=3)], settings)
    assert [(made["model"], made["tokenizer"]) for made in fake_vllm] == [(str(checkpoint), str(run))]
    assert out["overall"]["n_samples"] == 6
    evaluate_model_dir(model_dir, [load_eval_dataset("countdown", max_problems=3)], settings)
    assert fake_vllm[-1]["tokenizer"] == str(model_dir)
