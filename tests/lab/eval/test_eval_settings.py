"""Tests for bandpo_lab.eval.settings: EvalSettings and the pass@j values, checked at construction."""

from __future__ import annotations

import pytest

from bandpo_lab.eval.errors import EvalError
from bandpo_lab.eval.settings import EvalSettings, parse_ks


def test_settings_and_ks() -> None:
    assert parse_ks(None, 32) == (1, 4, 32) and parse_ks(None, 2) == (1, 2)
    assert parse_ks("1, 8,k", 16) == (1, 8, 16)
    with pytest.raises(
        EvalError, match=r"ks entry 64 is larger than k=32, the number of samples per problem"
    ):
        parse_ks("1,64", 32)
    with pytest.raises(EvalError, match=r"ks entries must be integers >= 1 \(or 'k'\), got 'x'"):
        parse_ks("1,x", 8)
    with pytest.raises(EvalError, match=r"ks entries must be integers >= 1, got 0"):
        parse_ks([0], 8)
    with pytest.raises(EvalError, match=r"k must be an integer >= 1, got 0"):
        EvalSettings(k=0)
    with pytest.raises(EvalError, match=r"temperature must be a finite number >= 0"):
        EvalSettings(temperature=-1.0)
    with pytest.raises(EvalError, match=r"backend must be one of transformers, vllm, got 'tgi'"):
        EvalSettings(backend="tgi")
    assert EvalSettings(k=8, ks=[1, 2]).ks == (1, 2)


def test_seed_takes_the_training_runs_range() -> None:
    """A seed beyond it passed, and torch.manual_seed overflowed once the model had loaded."""
    from bandpo_lab.runtime.seeds import SEED_MAX

    assert EvalSettings(seed=SEED_MAX).seed == SEED_MAX
    with pytest.raises(
        EvalError,
        match=rf"^seed must be an integer in \[0, {SEED_MAX}\] or None \(numpy\'s seed range\), got {SEED_MAX + 1}$",
    ):
        EvalSettings(seed=SEED_MAX + 1)
