"""Tests for bandpo.integrations.trl_spec (TRL-free): the one message refusing a TRL loss type next to a clip rule,
shared by BandPOConfig and the training config (which adds where the value came from and what to do instead)."""

from __future__ import annotations

import pytest

from bandpo.integrations.trl_spec import (
    SUPPORTED_LOSS_TYPES,
    TRL_NAMES,
    TRL_RULE_SHORTCUTS,
    check_loss_type,
    loss_type_problem,
)
from bandpo.losses.method import METHOD_NAMES


@pytest.mark.parametrize("loss_type", SUPPORTED_LOSS_TYPES)
def test_the_loss_types_that_clip_the_token_ratio_pass(loss_type: str) -> None:
    assert loss_type_problem(loss_type) is None
    check_loss_type(loss_type)


@pytest.mark.parametrize(
    ("loss_type", "where", "how", "message"),
    [
        (
            "cipso",
            "",
            None,
            "unknown loss_type 'cipso' (did you mean 'cispo'?); TRL 1.16 loss types: grpo, bnpo",
        ),
        (
            "sapo",
            "",
            None,
            "loss_type='sapo' cannot be used with a clip rule: it replaces clipping by a soft sigmoid gate and has "
            "no ratio bounds. With a clip rule: grpo, bnpo, dr_grpo, dapo",
        ),
        (
            "cispo",
            " (in my.yaml:3)",
            "select it with method: cispo",
            "loss_type='cispo' (in my.yaml:3) cannot be used with a clip rule: select it with method: cispo. With",
        ),
    ],
)
def test_a_refused_loss_type_gets_one_line_with_what_is_allowed(
    loss_type: str, where: str, how: str | None, message: str
) -> None:
    problem = loss_type_problem(loss_type, where, how)
    assert problem is not None and problem.startswith(message) and "\n" not in problem
    with pytest.raises(ValueError, match=r"^(unknown loss_type|loss_type=)"):
        check_loss_type(loss_type)


def test_trl_names_is_the_one_table_of_trls_spellings() -> None:
    """Every TRL spelling maps to a method setting of bandpo or, through a ``band_*`` shortcut, to a rule
    parameter; the table lives with the adapter, not in ``bandpo.losses``."""
    import bandpo.losses.method as method

    assert TRL_RULE_SHORTCUTS == {
        "band_divergence": "divergence",
        "band_delta": "delta",
        "band_cap": "cap",
        "band_relax": "relax",
    }
    assert set(TRL_NAMES.values()) - set(TRL_RULE_SHORTCUTS.values()) <= set(METHOD_NAMES)
    assert not hasattr(method, "TRL_NAMES") and not hasattr(method, "TRL_RULE_SHORTCUTS")
