"""Tests for ``bandpo_lab.runtime.fused_head``: TRL's fused LM head scoring only the completion tokens on a CPU."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from bandpo_lab.runtime import completion_tokens_only
from helpers.tiny import build_tiny_model_dir


def test_completion_tokens_only_projects_only_the_scored_positions_with_the_same_log_probs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Under ``completion_tokens_only()`` TRL's fused head projects only the scored positions (3 rows x 5 labels
    after the shift) instead of every position (3 x 11), and gives the same log-probs and entropies as scoring
    every position (each position's projection is computed alone). The rows are counted at the projection TRL
    calls (``_ChunkedLogProbFunction.apply``, read from ``trl.trainer.utils`` on each forward; the LM head module
    itself is never called), so a context that does nothing (TRL renamed ``_use_triton``, or reads it under
    another name) fails here rather than silently losing the CPU speed-up."""
    pytest.importorskip("trl")
    import trl.trainer.utils as trl_utils
    from transformers import AutoModelForCausalLM
    from trl.trainer.utils import add_fused_lm_head

    rows: list[int] = []
    real = trl_utils._ChunkedLogProbFunction

    class CountingProjection:
        @staticmethod
        def apply(hidden: torch.Tensor, *args: object) -> object:
            rows.append(hidden.shape[0])
            return real.apply(hidden, *args)

    monkeypatch.setattr(trl_utils, "_ChunkedLogProbFunction", CountingProjection)
    model = AutoModelForCausalLM.from_pretrained(build_tiny_model_dir(tmp_path), dtype=torch.float32).eval()
    torch.manual_seed(0)
    add_fused_lm_head(model, outputs=("log_probs", "entropy"))
    ids = torch.randint(0, model.config.vocab_size, (3, 12))
    labels = ids.clone()
    labels[:, :7] = -100  # after the shift, positions 1..11 predict; 7..11 are scored
    with torch.no_grad():
        full = model(input_ids=ids, labels=labels, fused_lm_head=True)
        with completion_tokens_only():
            compact = model(input_ids=ids, labels=labels, fused_lm_head=True)
    assert rows == [3 * 11, 3 * 5], rows
    torch.testing.assert_close(compact.log_probs, full.log_probs, rtol=0, atol=1e-6)
    torch.testing.assert_close(compact.entropy, full.entropy, rtol=0, atol=1e-6)
    assert bool((compact.log_probs[:, 6:] < 0).all())  # the scored positions hold real log-probs
    assert trl_utils._use_triton(torch.device("cpu")) is False  # restored
