"""Tests for ``bandpo_lab.runtime.seeds``: the one seed check of training, evaluation, comparisons and the probe."""

from __future__ import annotations

import numpy as np
import pytest

from bandpo_lab.runtime import SEED_MAX, check_seed, is_seed


def test_the_range_is_numpys() -> None:
    """SEED_MAX is the largest seed numpy takes: it seeds, SEED_MAX + 1 does not (so the check refuses no seed that
    numpy would take, and passes none that it refuses)."""
    np.random.seed(SEED_MAX)
    with pytest.raises(ValueError):
        np.random.seed(SEED_MAX + 1)


@pytest.mark.parametrize("value", [0, 7, SEED_MAX, np.int64(3), np.uint32(SEED_MAX)])
def test_seeds_in_range_pass_as_int(value: object) -> None:
    assert is_seed(value)
    out = check_seed("seed", value)
    assert out == int(value) and type(out) is int  # type: ignore[call-overload]


@pytest.mark.parametrize("value", [-1, SEED_MAX + 1, 2**64, 1.0, True, "3", None])
def test_other_values_are_refused_with_the_name_the_value_and_the_range(value: object) -> None:
    assert not is_seed(value)
    with pytest.raises(ValueError) as err:
        check_seed("eval.seed", value)
    assert (
        str(err.value)
        == f"eval.seed must be an integer in [0, {SEED_MAX}] (numpy's seed range), got {value!r}"
    )


def test_the_note_and_the_error_type_are_the_callers() -> None:
    class OwnError(ValueError):
        pass

    with pytest.raises(
        OwnError, match=r"^seed must be an integer in \[0, \d+\] or None \(numpy's seed range\), got -2$"
    ):
        check_seed("seed", -2, note=" or None", error=OwnError)
