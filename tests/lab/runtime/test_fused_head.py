"""Tests for ``bandpo_lab.runtime.fused_head``: TRL's fused LM head scoring only the completion tokens on a CPU."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from bandpo_lab.runtime import completion_tokens_only
from helpers.tiny import build_tiny_model_dir


def test_completion_tokens_only_gives_the_same_log_probs(tmp_path: Path) -> None:
    """TRL's fused head scoring only the completion tokens gives the same log-probs as scoring every position
    (each position's projection is computed alone)."""
    pytest.importorskip("trl")
    from transformers import AutoModelForCausalLM
    from trl.trainer.utils import add_fused_lm_head

    model = AutoModelForCausalLM.from_pretrained(build_tiny_model_dir(tmp_path), dtype=torch.float32).eval()
    torch.manual_seed(0)
    add_fused_lm_head(model, outputs=("log_probs", "entropy"))
    ids = torch.randint(0, model.config.vocab_size, (3, 12))
    labels = ids.clone()
    labels[:, :7] = -100
    with torch.no_grad():
        full = model(input_ids=ids, labels=labels, fused_lm_head=True)
        with completion_tokens_only():
            compact = model(input_ids=ids, labels=labels, fused_lm_head=True)
    torch.testing.assert_close(compact.log_probs, full.log_probs, rtol=0, atol=1e-6)
    torch.testing.assert_close(compact.entropy, full.entropy, rtol=0, atol=1e-6)
    import trl.trainer.utils as trl_utils

    assert trl_utils._use_triton(torch.device("cpu")) is False  # restored
