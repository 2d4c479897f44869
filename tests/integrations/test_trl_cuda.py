"""CUDA checks of the TRL integration (``-m gpu``; skipped without a CUDA device; ``make gpu-check``).

On a GPU, ``bandpo train`` leaves precision to TRL (``bf16: true`` is its bfloat16 autocast). The check that
matters for the clip rules: the first update of every generation round sees ratio exactly 1 there too, so bf16
creates no clipping of its own; the later updates of a round see the moved policy. The CPU version, with
``model.precision``, is tests/integrations/test_trl.py::test_first_update_of_a_round_has_ratio_exactly_one.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("trl")

import torch
from test_trl import (
    ClampSpy,
    _log_rows,
    assert_rounds_open_at_ratio_one,
    harness_trainer,
    make_config,
)

from bandpo.integrations.trl import BandPOTrainer

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("bf16", [False, True], ids=["float32", "bf16-autocast"])
def test_first_update_of_a_round_has_ratio_exactly_one_on_cuda(
    tmp_path: Path,
    bf16: bool,
    tiny_model: Any,
    tiny_tokenizer: Any,
    tiny_dataset: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """As ``bandpo train`` builds the trainer on a GPU (the harness's mixin, precision ``framework``), 2 mini-batches
    x 2 iterations per round: rounds open at steps 0 and 4, where the ratio must be exactly 1 (bit for bit)."""
    args = make_config(tmp_path, max_steps=6, use_cpu=False, bf16=bf16)
    trainer = harness_trainer(
        BandPOTrainer, "auto", args, tiny_model, tiny_tokenizer, tiny_dataset, on_gpu=True
    )
    spy = ClampSpy()
    monkeypatch.setattr(torch, "clamp", spy)
    trainer.train()
    monkeypatch.undo()

    assert all(rec["current"].is_cuda for rec in spy.records), "the loss did not run on the GPU"
    assert_rounds_open_at_ratio_one(trainer, spy, steps=6, per_round=4)
    rows = _log_rows(trainer)
    assert [rows[s]["clip/frac"] for s in (0, 4)] == [0.0, 0.0], "bf16 clipped tokens the update did not move"
